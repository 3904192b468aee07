"""The chaos backend on a Docker Swarm: the Docker chaos backend, with faults mapped onto services.

Everything the runner sees is :class:`~orchestrator.chaos.docker_backend.DockerChaos`'s
(observation through the nodes' admin APIs, pings, traffic, link shaping through
``POST /peers/shape``); what differs is how a fault reaches a node
(docs/chaos.md, "Swarm"):

* ``kill``: the node's service is scaled to 0: its task is stopped (SIGTERM, SIGKILL
  after 3 s; the node closes its connections, so peers notice at once) and, with restart
  policy ``none``, stays down. ``remove_node`` is a kill that is never undone.
* ``restart``: the service is scaled back to 1: a NEW task and container (same key, same
  command, possibly on another swarm node) with new overlay addresses and new published
  ports; the orchestrator reads the new admin address from the task. Links that are down
  at that moment are cut again on the new container.
* ``link_down`` / ``partition``: the link's overlay is disconnected from the task
  container of the link's dialer (the smaller name) only, which cuts the link (it has no
  other member). The listener's end stays attached because the swarm registered its DNS
  alias, which the dialer resolves on every dial; an alias re-added by a manual
  ``network connect`` is not served by the swarm's DNS. ``link_up`` / ``heal`` connect
  the dialer again with the address it had (asked for explicitly: a worker that no longer
  holds any task on the overlay hands out the subnet's first address, which the listener
  on another host may hold, and the dialer then dials itself; a new container after a
  restart gets a fresh one; the listener's ``--inbound`` rule names the subnet) and ask
  both ends to redial.
* ``pause`` / ``resume``, ``link_down``, ``partition``: these act on a task's container,
  which only the engine running it can do: the engine of the swarm node running the task
  (orchestrator.backends.swarm_engines: the manager's own, a snekbed cluster's inner host,
  or one named in ``$SNEKBED_SWARM_ENGINES``); a target error naming the node otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

import trio

from netem.plan import ShapingBackend

from orchestrator.backends.cluster import (
    Cluster, ClusterError, crash_host, find_cluster, host_running, partition_host, start_host,
)  # fmt: skip
from orchestrator.backends.docker import link_alias
from orchestrator.backends.swarm import SHAPING_WHY, SwarmBackend
from orchestrator.backends.swarm_engines import SwarmEngineError, SwarmEngines
from orchestrator.model.runs import RunDir
from orchestrator.model.topology import Topology
from orchestrator.chaos.docker_backend import DockerChaos
from orchestrator.chaos.docker_backend import _all_at_once
from orchestrator.chaos.targets import TargetError

__all__ = ["SwarmChaos"]


class SwarmChaos(DockerChaos):
    """A ChaosBackend over one swarm run. ``await start(nursery)`` creates it; ``stop`` removes it by label."""

    name = "swarm"

    def __init__(self, topology: Topology, run: RunDir, *, image: str, seed: int = 0,
                 start_stopped: Iterable[str] = (), start_unlinked: Iterable[tuple[str, str]] = (),
                 backend: SwarmBackend | None = None, keep: bool = False, timeout_s: float = 240.0,
                 ab: dict[str, Any] | None = None, reference_image: str | None = None) -> None:
        swarm = backend or SwarmBackend()
        swarm.check_topology(topology)
        super().__init__(topology, run, image=image, seed=seed, shaping="userspace", start_stopped=start_stopped,
                         start_unlinked=start_unlinked, backend=swarm, keep=keep, timeout_s=timeout_s, ab=ab,
                         reference_image=reference_image)  # fmt: skip
        self.swarm: SwarmBackend = swarm
        self.engines = SwarmEngines(swarm.client)
        self._hosts_by_id: dict[str, str] = {}  # swarm node id -> hostname
        self._cut_at: dict[int, tuple[str, str]] = {}  # link cut -> (its dialer's container, its address there)
        self._cluster: Cluster | None = None
        self._crashed: dict[str, list[str]] = {}  # host -> the nodes its crash took down
        self._host_cut: dict[str, set[int]] = {}  # host -> the cross-host links its partition cut

    def _shaping(self) -> tuple[ShapingBackend, str]:
        return "userspace", SHAPING_WHY

    def _task(self, name: str) -> dict[str, Any]:
        c = self.swarm.containers(self.run.run_id).get(name)
        if c is None or not c.get("Container"):
            raise KeyError(f"no running task for node {name!r}")
        return c

    def _cid(self, name: str) -> str:
        """The container of ``name``'s running task (on the engine :meth:`_api` gives)."""
        return str(self._task(name)["Container"])

    def _api(self, name: str) -> Any:
        """The engine of the swarm node running ``name``'s task (a snekbed cluster's inner host, the manager's own,
        or one named in $SNEKBED_SWARM_ENGINES); TargetError when none is known."""
        return self._where(name)[0]

    def _where(self, name: str) -> tuple[Any, str]:
        """The engine running ``name``'s task (as :meth:`_api`) and the task's container there (one task lookup)."""
        task = self._task(name)
        node_id = str(task.get("SwarmNode") or "")
        hostname = self._hostnames().get(node_id, "")
        try:
            return self.engines.client(hostname).api, str(task["Container"])
        except SwarmEngineError as exc:
            raise TargetError(f"{name} runs on swarm node {hostname or node_id}: {exc}") from None

    def _hostnames(self) -> dict[str, str]:
        if not self._hosts_by_id:
            self._hosts_by_id = self.swarm.hostnames()
        return self._hosts_by_id

    def probe_route(self, a: str, b: str) -> tuple[str, str] | None:
        """The swarm allocates link addresses (a reconnected dialer gets a fresh one): a probe over a link goes
        from its dialer to the listener's alias, which the swarm's DNS serves on the link's overlay only, the way
        the dialer's node finds its peer. A dialer cut off the overlay neither resolves nor reaches it."""
        assert self.plan is not None
        for ln in self.plan.links:
            if {ln.a, ln.b} == {a, b}:
                listener = ln.b if ln.dialer == ln.a else ln.a
                return ln.dialer, link_alias(ln.index, listener)
        return None

    # ------------------------------------------------------------------ links: the dialer's end only

    async def _disconnect(self, index: int) -> None:
        assert self.plan is not None
        ln = self.plan.links[index]
        if ln.dialer not in self.stopped and ln.dialer not in self.removed:
            api, cid = await self._docker(self._where, ln.dialer)
            nets = (await self._docker(api.inspect_container, cid))["NetworkSettings"]["Networks"] or {}
            if nets.get(ln.net.name, {}).get("IPAddress"):
                self._cut_at[index] = (cid, nets[ln.net.name]["IPAddress"])
            try:
                await self._docker(lambda: self._endpoints(api.disconnect_container_from_network, cid,
                                                           self.net_ids[ln.net.name], force=True))  # fmt: skip
            except Exception as exc:
                if "is not connected" not in str(exc):
                    raise
        self.down_links.add(index)  # a stopped dialer is cut again when it restarts

    async def _connect(self, index: int) -> None:
        assert self.plan is not None
        ln = self.plan.links[index]
        if ln.dialer not in self.stopped and ln.dialer not in self.removed:
            api, cid = await self._docker(self._where, ln.dialer)
            was, ip = self._cut_at.pop(index, ("", None))
            try:  # the address it had: a fresh one from a worker's engine may be an address the other end holds
                await self._docker(lambda: self._endpoints(api.connect_container_to_network, cid,
                                                           self.net_ids[ln.net.name], ipv4_address=ip if was == cid
                                                           else None, aliases=[link_alias(ln.index, ln.dialer)]))
            except Exception as exc:
                if "already exists" not in str(exc):
                    raise
        self.down_links.discard(index)
        await self._redial({ln.a, ln.b})

    # ------------------------------------------------------------------ nodes: scale to 0 and back

    async def restart(self, name: str) -> None:
        self._no_host(name, "restart")
        if name not in self.stopped:
            await self.kill(name)
        await self._docker(self.swarm.restart, self.run.run_id, name)
        self.stopped.discard(name)
        self.removed.discard(name)
        await self._refresh_endpoints()
        assert self.plan is not None
        for ln in self.plan.links:  # the new task is on every link overlay again: cut the ones that are down
            if ln.dialer == name and ln.index in self.down_links:
                await self._disconnect(ln.index)
        await self._wait_admin(name)

    async def _refresh_endpoints(self) -> None:
        assert self.session is not None and self._admin is not None
        fresh: dict[str, Any] = await trio.to_thread.run_sync(self.session.refresh_endpoints)
        self._admin.endpoints.update(fresh)

    async def start(self, nursery: trio.Nursery | None = None) -> None:
        await super().start(nursery)
        placements = self.swarm.placements(self.run.run_id)
        hosts = sorted({p["host"] for p in placements.values()})
        print(f"snekbed chaos: swarm run {self.run.run_id}: {len(placements)} services on {len(hosts)} swarm "
              f"node(s) ({', '.join(hosts)})", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ hosts (a snekbed cluster)

    def _cluster_now(self) -> Cluster:
        """The snekbed cluster whose manager this engine is; TargetError on any other swarm."""
        if self._cluster is None:
            address = urlparse(str(self.swarm.api.base_url)).hostname or ""
            try:
                self._cluster = find_cluster(manager_address=address)
            except ClusterError as exc:
                raise TargetError(f"host faults act on the hosts of a snekbed cluster (snekbed cluster up): {exc}") \
                    from None
        return self._cluster

    def node_hosts(self) -> dict[str, str]:
        """node -> the host (swarm node hostname) its task runs on, for nodes that run."""
        gone = self.stopped | self.removed
        return {n: p["host"] for n, p in self.swarm.placements(self.run.run_id).items() if n not in gone}

    def _resolve_host(self, target: str, root: str | None, on: dict[str, str]) -> str:
        cl = self._cluster_now()
        workers = [h.name for h in cl.workers]
        if target == "root_host":
            if root is None or root not in on:
                raise TargetError(f"root_host: the root ({root}) runs on no known host")
            return on[root]
        if target == "busiest_host":
            counts = {h: sum(1 for x in on.values() if x == h) for h in workers}
            return min(workers, key=lambda h: (-counts[h], h))
        if target not in workers:
            raise TargetError(f"host {target!r} is not a worker of cluster {cl.id} ({', '.join(workers)})")
        return target

    def _crossing(self, host: str, on: dict[str, str]) -> list[int]:
        assert self.plan is not None
        return [ln.index for ln in self.plan.links if (on.get(ln.a) == host) != (on.get(ln.b) == host)
                and ln.a in on and ln.b in on]

    async def host_fault(self, action: str, target: str, root: str | None) -> tuple[str, list[str],
                                                                                    list[tuple[str, str]]]:
        """``host_crash`` / ``host_restart`` / ``host_partition`` of ``target`` (a host or a role): the host, the nodes
        it took down / brought back / cut off, and the cross-host links it cut."""
        assert self.plan is not None
        on = await trio.to_thread.run_sync(self.node_hosts)
        host = await trio.to_thread.run_sync(self._resolve_host, target, root, on)
        cl = self._cluster_now()
        h = cl.host(host)
        links: list[int] = []
        if action == "host_crash" or (action == "host_restart" and host not in self._crashed):
            nodes = sorted(n for n, x in on.items() if x == host)
            links = self._crossing(host, on)
            await trio.to_thread.run_sync(crash_host, h)
            self._crashed[host] = self._crashed.get(host, []) + nodes
            for n in nodes:  # scaled to 0: the swarm does not start them elsewhere; restart scales them back
                self.paused.discard(n)
                self.stopped.add(n)
            await _all_at_once([lambda n=n: self._docker(self.swarm._scale, self.run.run_id, n, 0) for n in nodes])
        if action == "host_restart":
            if not await trio.to_thread.run_sync(host_running, h):
                await trio.to_thread.run_sync(start_host, cl, h)
            nodes = self._crashed.pop(host, [])
            await _all_at_once([lambda n=n: self.restart(n) for n in nodes])
        elif action == "host_partition":
            nodes = sorted(n for n, x in on.items() if x == host)
            links = self._crossing(host, on)
            await trio.to_thread.run_sync(partition_host, h, True)
            self._host_cut.setdefault(host, set()).update(links)
            self.down_links.update(links)
        self.engines.forget()  # a host started again may have a new address on the cluster's bridge
        placements = await trio.to_thread.run_sync(self.node_hosts)
        faults = list((self.run.meta().get("hosts") or {}).get("faults", []))
        faults.append({"action": action, "host": host, "nodes": nodes, "at_mono_s": round(self.now(), 3)})
        self.run.update_meta(hosts={"cluster": cl.id, "faults": faults, "placements_now": placements})
        return host, nodes, [(self.plan.links[i].a, self.plan.links[i].b) for i in links]

    async def stop(self) -> None:
        await super().stop()
        await trio.to_thread.run_sync(self._restore_hosts)

    async def abort(self, exc: BaseException) -> None:
        await super().abort(exc)
        await trio.to_thread.run_sync(self._restore_hosts)

    def _restore_hosts(self) -> None:
        """After the run: hosts it crashed start again and its host partitions are lifted (the cluster serves the
        next run as it served this one). Their nodes' services are gone with the run by then."""
        if self._cluster is None:
            return
        for host in sorted(self._host_cut):
            partition_host(self._cluster.host(host), False)
        self._host_cut.clear()
        for host in sorted(self._crashed):
            h = self._cluster.host(host)
            if not host_running(h):
                start_host(self._cluster, h)
        self._crashed.clear()

    async def heal(self) -> list[tuple[str, str]]:
        """Undo host partitions (VXLAN flows again; both ends of each cut link redial), then link partitions."""
        assert self.plan is not None
        back: list[tuple[str, str]] = []
        for host, cut in sorted(self._host_cut.items()):
            await trio.to_thread.run_sync(partition_host, self._cluster_now().host(host), False)
            self.down_links -= cut
            ends = {x for i in cut for x in (self.plan.links[i].a, self.plan.links[i].b)}
            await self._redial(ends)
            back += [(self.plan.links[i].a, self.plan.links[i].b) for i in sorted(cut)]
        self._host_cut.clear()
        return back + await super().heal()
