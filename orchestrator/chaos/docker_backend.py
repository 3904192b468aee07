"""The chaos backend on Docker: one container per node, one network per link (orchestrator.backends.docker).

Backend time is ``time.monotonic()``; the run directory (``runs/<id>/``) records every fault in ``actions.jsonl``
and every ping in ``pings.jsonl``.

How faults map here (docs/chaos.md compares them with the in-process backend):

* ``kill``: ``docker kill`` (SIGKILL); its peers see the TCP streams reset.
* ``restart``: ``docker start`` of the same container: same key, same peers, the
  event log appended to (a new ``node_started``).
* ``pause`` / ``resume``: ``docker pause`` / ``unpause`` (the cgroup freezer): the
  node's TCP connections stay open and the kernel buffers what is sent to it; its
  peers hear nothing and drop it after the 5 s peer timeout.
* ``link_down`` / ``partition``: the link's network is disconnected from both
  containers. No reset is sent, so both ends notice through the peer timeout
  (5 s), not at once as in process. ``link_up`` / ``heal`` connect it again with
  the same addresses and ask both nodes to dial now (``POST /peers/redial``)
  instead of waiting out their backoff.
* ``link_change``: the new shape's kernel part replaces the old one in both containers' namespaces, and each
  node's userspace shaper gets the userspace part alone (``POST /peers/shape``, the kernel's fields cleared). A
  reference node's end (spec ``pinecone``; it has no userspace shaper) records that part as ``shaping_unapplied``
  (docs/interop.md). A link connected again, or a node started again, has new interfaces: the kernel part of its
  links' current shapes is applied again (orchestrator.chaos.docker_shaping).
* ``join``: nodes and links a scenario adds later are created with the run (so they have addresses), but a node is
  not started (on a swarm: stopped once up) and a link is disconnected until their step: the network converges, and
  the first step starts, without them.

Host nodes (``host: true``, run by the user outside Docker; their commands are printed on stderr at start and the
run waits for them): pings, ``link_down`` / ``link_up``, ``partition`` / ``heal``, ``link_change`` and ``adversary``
work on them through their admin API and their container peers' link networks (only the container end is
disconnected: the host's own interfaces are never touched). ``kill``, ``restart``, ``pause``, ``resume`` and
``remove_node`` of a host node are refused (the step fails with a target error naming the node): its process is
the user's, not the orchestrator's.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import trio

from contract.links import LinkShape
from netem.plan import ShapingBackend
from node.core.router import Timers
from node.core.variants import VariantSpec

from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.docker_net import ENDPOINT_CHANGES, AddressPlan
from orchestrator.backends.docker_observe import (
    PING_WORKERS, AdminClient, AdminError, reconvergence_bound_s, wait_converged)
from orchestrator.backends.docker_plan import implementation_of
from orchestrator.backends.docker_session import DockerSession, choose_shaping, roll_back, start_run
from orchestrator.tools.monitoring import RunMetrics, RunMonitoring, monitor_docker_run
from orchestrator.model.runs import RunDir
from orchestrator.model.topology import Topology
from orchestrator.chaos import docker_confirm as measured
from orchestrator.chaos.docker_shaping import change_link, reshape_ends
from orchestrator.chaos.docker_attacks import DockerAttacks
from orchestrator.chaos.backend import (
    ChaosBackend, Converged, DeferredRemoval, FlightDump, TrafficSample, planted_defect)  # fmt: skip
from orchestrator.chaos.flight import from_admin
from orchestrator.chaos.checker import NodeState, PingOutcome
from orchestrator.chaos.targets import TargetError

__all__ = ["DockerChaos"]

PING_TIMEOUT_S = 5.0
#: How long ``stop`` waits for the nodes to exit before a deferred removal (``removal``) takes over.
DEFERRED_STOP_S = 10.0


@dataclass
class _Traffic:
    order: list[tuple[str, str, str]]
    gap_s: float
    timeout_s: float
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)


async def _all_at_once(tasks: list[Callable[[], Awaitable[None]]]) -> None:
    """Run ``tasks`` concurrently (a partition or heal of many links: each engine call takes a fraction of a
    second, and one after another they would spread the fault over seconds); when some fail, the others still
    finish, then the first failure is raised as it was (not wrapped in an exception group)."""
    errors: list[Exception] = []

    async def one(task: Callable[[], Awaitable[None]]) -> None:
        try:
            await task()
        except Exception as exc:  # collected: every link is tried, the caller sees the first failure
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for task in tasks:
            nursery.start_soon(one, task)
    if errors:
        raise errors[0]


class DockerChaos(DockerAttacks, ChaosBackend):
    """The chaos backend (every protocol of orchestrator.chaos.backend) over one Docker run. ``await start(nursery)`` creates the run; ``stop`` removes it (or, with
    ``removal``, stops its nodes and leaves the removal to that thread)."""

    name = "docker"
    measures_faults = True
    reference_nodes: frozenset[str] = frozenset()  # the topology's, from __init__

    def __init__(self, topology: Topology, run: RunDir, *, image: str, seed: int = 0, shaping: str = "auto",
                 start_stopped: Iterable[str] = (), start_unlinked: Iterable[tuple[str, str]] = (),
                 backend: DockerBackend | None = None, keep: bool = False, timeout_s: float = 240.0,
                 prometheus_image: str | None = None, metrics: RunMetrics | None = None,
                 host_timeout_s: float = 600.0, removal: DeferredRemoval | None = None,
                 ab: dict[str, Any] | None = None, reference_image: str | None = None) -> None:
        """``ab``: the A/B experiment this run is an arm of (written to meta.json as ``ab`` when the run ends).
        ``reference_image``: what nodes whose spec is ``pinecone`` run (the reference node)."""
        self.topology = topology
        self.ab = ab
        self.reference_image = reference_image
        #: keys for the run's --json document (the engine's PreparedRun.report): what shaping was not applied
        self.report: dict[str, Any] = {}
        self.shaping_backend: ShapingBackend = "userspace"  # the run's, once started
        #: set: ``stop`` only stops the nodes (their event logs complete) and hands the removal of containers and
        #: networks to this thread, for the caller to wait for later (``snekbed demo`` analyzes meanwhile)
        self.removal = removal
        self.host_timeout_s = host_timeout_s
        self.run = run
        self.image = image
        self.seed = seed
        self.shaping = shaping
        self.keep = keep
        self.timeout_s = timeout_s
        self.docker = backend or DockerBackend()
        self.hosts = frozenset(n.name for n in topology.nodes if n.host)
        self.reference_nodes = frozenset(n.name for n in topology.nodes if implementation_of(n) == "reference")
        bad = sorted(self.hosts & set(start_stopped))
        if bad:
            raise TargetError(f"host node(s) {', '.join(bad)} cannot join later: they run outside Docker")
        self._start_stopped = set(start_stopped)
        self._start_unlinked = {frozenset(p) for p in start_unlinked}
        self.session: DockerSession | None = None
        self.plan: AddressPlan | None = None
        self.net_ids: dict[str, str] = {}
        self.down_links: set[int] = set()  # link indexes disconnected (link_down, partition, not yet joined)
        self.cut_links: set[int] = set()  # the partition's share of down_links
        self.paused, self.stopped, self.removed = set[str](), set[str](), set[str]()
        self.samples: list[TrafficSample] = []
        self._traffic: _Traffic | None = None
        self._nursery: trio.Nursery | None = None
        self._admin: AdminClient | None = None
        self._ping_threads = trio.CapacityLimiter(PING_WORKERS)
        self.prometheus_image = prometheus_image  # --monitoring: Prometheus for the run, scraping ``metrics`` too
        self.metrics = metrics
        self.monitoring: RunMonitoring | None = None
        #: each link's class as link_change left it (what a confirmation measures it against)
        self.link_classes = {frozenset((ln.a, ln.b)): ln.link_class for ln in topology.links}
        self.link_shapes: dict[int, LinkShape] = {}  # each link link_change reshaped: its shape now (docker_shaping)
        #: TEST ONLY, never on by default ($SNEKBED_CHAOS_PLANT, backend.planted_defect): "ignore_partition",
        #: "pause_noop", "link_change_noop": the fault is reported done and not done (its confirmation finds out)
        self.planted, _ = planted_defect(None)

    # ------------------------------------------------------------------ lifecycle

    def now(self) -> float:
        return time.monotonic()

    async def start(self, nursery: trio.Nursery | None = None) -> None:
        self._nursery = nursery
        shaping = await trio.to_thread.run_sync(self._shaping)

        def announce(text: str) -> None:
            print(f"snekbed chaos: {text}", file=sys.stderr, flush=True)

        session, result, _conv = await trio.to_thread.run_sync(
            lambda: start_run(self.topology, self.run, backend=self.docker, image=self.image, seed=self.seed,
                              shaping=shaping, timeout_s=self.timeout_s, announce=announce,
                              host_timeout_s=self.host_timeout_s, reference_image=self.reference_image,
                              on_networks=self._monitor if self.prometheus_image is not None else None,
                              held=self._start_stopped))  # fmt: skip
        self.session, self.plan, self.shaping_backend = session, result.plan, result.shaping_backend
        self.report["shaping_unapplied"] = self.run.meta().get("shaping_unapplied", [])
        self._admin = AdminClient(session.endpoints, timeout_s=3.0, workers=32)
        nets = self.docker.api.networks(filters={"label": f"snekbed.run={self.run.run_id}"})
        self.net_ids = {n["Name"]: n["Id"] for n in nets}
        running = await trio.to_thread.run_sync(self.docker.running, self.run.run_id)  # a swarm started them
        for name in sorted(self._start_stopped & running):  # later joins (Docker created them, never started)
            await self._docker(self.docker.kill, self.run.run_id, name)
        self.stopped |= self._start_stopped
        for ln in self.plan.links:
            if frozenset((ln.a, ln.b)) in self._start_unlinked:
                await self._disconnect(ln.index)
        self.run.update_meta(chaos={"start_stopped": sorted(self._start_stopped),
                                    "start_unlinked": sorted(sorted(p) for p in self._start_unlinked)})
        if self.monitoring is not None:
            self.run.update_meta(monitoring={"prometheus": self.monitoring.prometheus.url,
                                             "exporter": None if self.monitoring.exporter is None
                                             else self.monitoring.exporter.url})  # fmt: skip

    def _monitor(self, plan: AddressPlan) -> None:
        """Prometheus (and the orchestrator's exporter) once the run's networks exist, before its first node: the
        run's whole life is scraped, its first fault included (in start_run's thread; a failure rolls back)."""
        assert self.prometheus_image is not None
        self.monitoring = monitor_docker_run(self.docker.client, plan, image=self.prometheus_image,
                                             metrics=self.metrics)
        print(f"snekbed chaos: Prometheus for run {self.run.run_id}: {self.monitoring.prometheus.url}",
              file=sys.stderr, flush=True)

    def _shaping(self) -> tuple[ShapingBackend, str]:
        """The shaping backend and why (``--shaping``: the host is probed)."""
        return choose_shaping(self.shaping)

    async def stop(self) -> None:
        if self._traffic is not None:
            self._traffic.cancel.cancel()
        if self.monitoring is not None:  # once Prometheus has the run's last word (monitoring.RunMetrics.flush)
            await trio.to_thread.run_sync(self.monitoring.close)
        if self._admin is not None:
            self._admin.close()
        if self.ab is not None:
            self.run.update_meta(ab=self.ab)
        self.run.action("down", None, {"keep": self.keep})
        if self.keep:
            return
        if self.removal is None:
            await trio.to_thread.run_sync(self._remove)
            return
        try:
            # a node under load can take a few seconds to exit after writing its last event: wait for it longer
            # than down()'s grace period, since the analysis reads its log next
            running = await trio.to_thread.run_sync(self.docker.stop_all, self.run.run_id, DEFERRED_STOP_S)
        except BaseException:
            self.removal.start(self._remove)  # never left behind: removed while the caller handles the error
            raise
        if running:  # a node did not stop within the grace period: its event log may not be complete yet
            await trio.to_thread.run_sync(self._remove)
            return
        # the nodes stopped, their event logs are complete: the run can be analyzed while the engine removes them
        self.removal.start(self._remove)

    def _remove(self) -> None:
        """Remove the run's containers and networks; what survives is reported, never silently left."""
        report = self.docker.down(self.run.run_id)
        if report.containers_left or report.networks_left:  # `snekbed down RUN` finishes the job
            self.run.update_meta(teardown=dataclasses.asdict(report))
            print(f"snekbed chaos: teardown left {report.containers_left} container(s) and "
                  f"{report.networks_left} network(s) labelled snekbed.run={self.run.run_id}: "
                  f"{'; '.join(report.errors[-3:])} (remove them with: snekbed down {self.run.run_id})",
                  file=sys.stderr)

    async def abort(self, exc: BaseException) -> None:
        """Remove everything labelled with the run (start_run already did if it was the start that failed)."""
        if self._traffic is not None:
            self._traffic.cancel.cancel()
        if self.monitoring is not None:
            self.monitoring.close(flush=False)
        if self._admin is not None:
            self._admin.close()
        try:
            await trio.to_thread.run_sync(roll_back, self.run, self.docker, exc)
        except Exception:  # noqa: S110 - roll_back never raises; the engine going away is reported by down
            pass

    def record_action(self, action: str, target: str | None, detail: dict | None, at: float) -> None:
        self.run.action(action, target, detail, mono_s=at)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(max(0.0, seconds))

    async def _docker(self, fn: Any, *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args)

    @staticmethod
    def _endpoints(fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, an engine call that adds or removes endpoints, with ENDPOINT_CHANGES held."""
        with ENDPOINT_CHANGES:
            return fn(*args, **kwargs)

    def _no_host(self, name: str, fault: str) -> None:
        """Raise TargetError for a fault that needs the node's container when ``name`` is a host node."""
        if name in self.hosts:
            raise TargetError(f"{fault} {name}: {name} is a host node (runs outside Docker): only pings, link and "
                              "partition faults apply to it")

    def _cid(self, name: str) -> str:
        c = self.docker.containers(self.run.run_id).get(name)
        if c is None:
            raise KeyError(f"no container for node {name!r}")
        return str(c["Id"])

    def _api(self, name: str) -> Any:
        """The API client of the engine running ``name``'s container (a swarm's is the task's host)."""
        return self.docker.api

    # ------------------------------------------------------------------ observation

    def known_nodes(self) -> list[str]:
        return list(self.topology.node_names)

    def probe_route(self, a: str, b: str) -> tuple[str, str] | None:
        """Where a datagram probe over the link ``a``--``b`` is sent from (a node's container) and to (an address
        on the link's network): here from ``a`` to ``b``'s fixed address (orchestrator.chaos.docker_confirm)."""
        assert self.plan is not None
        for ln in self.plan.links:
            if {ln.a, ln.b} == {a, b}:
                ip = ln.net.members.get(b)
                return None if ip is None else (a, ip)
        return None

    def _live(self) -> set[str]:
        return set(self.topology.node_names) - self.paused - self.stopped - self.removed

    def live_graph(self) -> nx.Graph:
        g = nx.Graph()
        live = self._live()
        g.add_nodes_from(live)
        assert self.plan is not None
        for ln in self.plan.links:
            if ln.index not in self.down_links and ln.a in live and ln.b in live:
                g.add_edge(ln.a, ln.b)
        return g

    async def _states_docs(self) -> dict[str, dict[str, Any]]:
        assert self._admin is not None
        docs = await trio.to_thread.run_sync(self._admin.states, sorted(self._live()))
        return {n: d for n, d in docs.items() if d is not None}

    async def states(self) -> dict[str, NodeState]:
        out = {}
        for name, doc in (await self._states_docs()).items():
            desc = doc.get("descending")
            peers = frozenset(bytes.fromhex(p["key"]) for p in doc.get("peers", []))
            out[name] = NodeState(bytes.fromhex(doc["public_key"]), bytes.fromhex(doc["root"]["key"]),
                                  bytes.fromhex(desc) if desc else None, int(doc.get("internal_errors", 0)),
                                  peers)  # fmt: skip
        return out

    # what a fault's confirmation reads (orchestrator.chaos.confirm; docker_confirm): the nodes and their links

    async def peer_keys(self, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
        return await measured.peer_keys(self, names)

    async def frames_sent(self, names: Iterable[str]) -> dict[str, int | None]:
        return {n: None for n in names}  # silence is judged by a ping that goes unanswered

    async def probe(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[bool]:
        return await measured.probe(self, pairs, timeout_s)

    async def adversary_counts(self, names: Iterable[str], kinds: Iterable[str], peer: str | None = None,
                               since: float | None = None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
        return await measured.adversary_counts(self, names, kinds, peer, since)

    async def measure_link(self, a: str, b: str, link_class: str | None,
                           shaping: Mapping[str, float] | None) -> dict[str, Any]:  # fmt: skip
        return await measured.measure_link(self, a, b, link_class, shaping)

    def beside(self, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
        measured.beside(self, poll, every_s, until)

    async def flight_records(self, names: Iterable[str]) -> dict[str, FlightDump | str]:
        """Through each node's admin API; a node of the Pinecone reference has no flight recorder."""
        assert self._admin is not None
        return await trio.to_thread.run_sync(from_admin, self._admin, list(names), self.reference_nodes)

    async def parents(self) -> dict[str, str | None]:
        assert self.session is not None
        return {n: (self.session.name_of(d["parent"]) if d.get("parent") else None)
                for n, d in (await self._states_docs()).items()}  # fmt: skip

    async def wait_converged(self, since: float, within_s: float, give_up: Callable[[], bool] | None = None) -> Converged:
        assert self._admin is not None
        remaining = max(0.5, since + within_s - time.monotonic())
        conv = await trio.to_thread.run_sync(lambda: wait_converged(self._admin, self.live_graph, t0=since,
                                                                    timeout_s=remaining, poll_s=0.5, give_up=give_up))
        return Converged(conv.tree_s, conv.snake_s if conv.converged else None, time.monotonic() - since)

    def reconvergence_bound_s(self, margin_s: float) -> float:
        interval, expiry = VariantSpec().slowest(self.topology.variants().values())
        timers = dataclasses.replace(Timers(), bootstrap_interval_s=interval)
        return reconvergence_bound_s(self.live_graph(), timers, margin_s=margin_s, expiry_s=expiry)

    # ------------------------------------------------------------------ pings

    async def _ping_jobs(self, jobs: list[tuple[str, str, str]], timeout_s: float) -> list[tuple[float, dict | None]]:
        assert self._admin is not None and self.session is not None
        keyed = [(a, self.session.keys[b], m) for a, b, m in jobs]
        res = await trio.to_thread.run_sync(
            lambda: self._admin.ping_many(keyed, count=1, timeout_s=timeout_s), limiter=self._ping_threads)
        return [(sent, r if isinstance(r, dict) else None) for sent, r in res]

    def _record(self, a: str, b: str, mode: str, sent: float, res: dict | None) -> bool:
        assert self.session is not None
        ok = bool(res and res.get("received"))
        rtt = (res.get("rtt_ms") or [None])[0] if ok and res else None
        hops = (res.get("hops") or [None])[0] if ok and res else None
        self.run.ping(sender=a, sender_key=self.session.keys[a], target=b, target_key=self.session.keys[b],
                      mode=mode, sent_mono_s=sent, received=ok, rtt_ms=rtt, hops=hops, graph=self.live_graph(),
                      link_class=self.session.link_classes())  # fmt: skip
        return ok

    async def ping(self, pairs: list[tuple[str, str]], modes: tuple[str, ...], timeout_s: float) -> list[PingOutcome]:
        jobs = [(a, b, m) for m in modes for a, b in pairs]
        results = await self._ping_jobs(jobs, timeout_s)
        return [PingOutcome(a, b, m, self._record(a, b, m, sent, res)) for (a, b, m), (sent, res) in zip(jobs, results)]

    def traffic(self, enabled: bool, rate_per_s: float, pairs: list[tuple[str, str]], modes: tuple[str, ...],
                timeout_s: float) -> None:  # fmt: skip
        if self._traffic is not None:
            self._traffic.cancel.cancel()
            self._traffic = None
        if not enabled or rate_per_s <= 0 or not pairs or self._nursery is None:
            return
        t = _Traffic([(a, b, m) for a, b in pairs for m in modes], 1.0 / rate_per_s, timeout_s)
        self._traffic = t
        self._nursery.start_soon(self._traffic_loop, t)

    async def _traffic_loop(self, t: _Traffic) -> None:
        with t.cancel:
            async with trio.open_nursery() as inner:
                i = 0
                next_at = trio.current_time()
                while True:
                    a, b, mode = t.order[i % len(t.order)]
                    i += 1
                    if a in self._live() and b not in self.stopped and b not in self.removed:
                        inner.start_soon(self._one_ping, a, b, mode, t.timeout_s)
                    next_at += t.gap_s
                    await trio.sleep_until(next_at)

    async def _one_ping(self, a: str, b: str, mode: str, timeout_s: float) -> None:
        with trio.CancelScope(shield=True):  # an answer on its way is still recorded after traffic stops
            [(sent, res)] = await self._ping_jobs([(a, b, mode)], timeout_s)
            ok = self._record(a, b, mode, sent, res)
            rtt = (res.get("rtt_ms") or [None])[0] / 1000.0 if ok and res else None
            self.samples.append(TrafficSample(sent, a, b, mode, ok, rtt))

    def traffic_samples(self) -> list[TrafficSample]:
        return sorted(self.samples, key=lambda s: s.t)

    # ------------------------------------------------------------------ links

    def _links_between(self, a: str, b: str) -> list[int]:
        assert self.plan is not None
        return [ln.index for ln in self.plan.links if {ln.a, ln.b} == {a, b}]

    async def _disconnect(self, index: int) -> None:
        assert self.plan is not None
        ln = self.plan.links[index]
        for name in (ln.a, ln.b):
            if name in self.hosts:  # its end is the host's bridge address: cutting the container's end cuts the link
                continue
            try:  # the container is looked up in the thread too: links of a partition are cut concurrently
                await self._docker(lambda name=name: self._endpoints(self.docker.api.disconnect_container_from_network,
                                                                     self._cid(name), self.net_ids[ln.net.name],
                                                                     force=True))  # fmt: skip
            except Exception as exc:  # a stopped container may already be off the network
                if "is not connected" not in str(exc):
                    raise
        self.down_links.add(index)

    async def _connect(self, index: int) -> None:
        assert self.plan is not None and self.session is not None
        ln = self.plan.links[index]
        for name in (ln.a, ln.b):
            if name in self.hosts:
                continue
            try:
                await self._docker(lambda name=name: self._endpoints(self.docker.api.connect_container_to_network,
                                                                     self._cid(name), self.net_ids[ln.net.name],
                                                                     ipv4_address=ln.net.members[name]))  # fmt: skip
            except Exception as exc:
                if "already exists" not in str(exc):
                    raise
        self.down_links.discard(index)
        await trio.to_thread.run_sync(lambda: reshape_ends(self, "link_up", links=[index]))  # a new interface: no qdisc
        await self._redial({ln.a, ln.b})

    async def _redial(self, names: Iterable[str]) -> None:
        """Ask the nodes to dial their peers now rather than after their backoff."""
        assert self._admin is not None
        for name in names:
            if name in self._live():
                try:
                    await trio.to_thread.run_sync(self._admin.post, name, "/peers/redial")
                except AdminError:  # the node may be starting: its own backoff still redials
                    pass

    async def link_down(self, a: str, b: str) -> bool:
        idx = [i for i in self._links_between(a, b) if i not in self.down_links]
        for i in idx:
            await self._disconnect(i)
        return bool(idx)

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        idx = [i for i in self._links_between(a, b) if i in self.down_links]
        for i in idx:
            self.cut_links.discard(i)
            await self._connect(i)
        return bool(idx) or bool(self._links_between(a, b))

    async def link_change(self, a: str, b: str, link_class: str | None, shaping: dict[str, float] | None) -> None:
        if link_class is not None:
            self.link_classes[frozenset((a, b))] = link_class
        if self.planted == "link_change_noop":
            return  # TEST ONLY: reported changed, and left as it was
        # the kernel part to both ends' kernels, the userspace part alone to the nodes (docker_shaping)
        await trio.to_thread.run_sync(change_link, self, a, b, link_class, shaping or {})

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        assert self.plan is not None
        side = {n: i for i, g in enumerate(groups) for n in g}
        cut = [ln for ln in self.plan.links
               if ln.a in side and ln.b in side and side[ln.a] != side[ln.b] and ln.index not in self.down_links]
        self.cut_links.update(ln.index for ln in cut)
        if self.planted == "ignore_partition":  # TEST ONLY: reported cut, and left up
            self.down_links.update(ln.index for ln in cut)
            return [(ln.a, ln.b) for ln in cut]
        await _all_at_once([lambda i=ln.index: self._disconnect(i) for ln in cut])
        return [(ln.a, ln.b) for ln in cut]

    async def heal(self) -> list[tuple[str, str]]:
        assert self.plan is not None
        cut, self.cut_links = sorted(self.cut_links), set()
        await _all_at_once([lambda i=i: self._connect(i) for i in cut])
        return [(self.plan.links[i].a, self.plan.links[i].b) for i in cut]

    # ------------------------------------------------------------------ nodes

    async def kill(self, name: str) -> None:
        self._no_host(name, "kill")
        if name in self.stopped or name in self.removed:
            return
        if name in self.paused:
            if self.planted != "pause_noop":
                await self._docker(self._api(name).unpause, self._cid(name))
            self.paused.discard(name)
        await self._docker(self.docker.kill, self.run.run_id, name)
        self.stopped.add(name)

    async def restart(self, name: str) -> None:
        self._no_host(name, "restart")
        if name not in self.stopped:
            await self.kill(name)
        await self._docker(self._endpoints, self.docker.api.start, self._cid(name))
        self.stopped.discard(name)
        self.removed.discard(name)
        await trio.to_thread.run_sync(lambda: reshape_ends(self, "restart", nodes=[name]))  # new interfaces, no qdisc
        await self._wait_admin(name)

    async def _wait_admin(self, name: str, timeout_s: float = 20.0) -> None:
        assert self._admin is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await trio.to_thread.run_sync(self._admin.state, name)
                return
            except AdminError:
                await trio.sleep(0.2)

    async def pause(self, name: str) -> None:
        self._no_host(name, "pause")
        if name in self._live():
            if self.planted != "pause_noop":  # TEST ONLY when it is: reported paused, and it runs on
                await self._docker(self._api(name).pause, self._cid(name))
            self.paused.add(name)

    async def resume(self, name: str) -> None:
        self._no_host(name, "resume")
        if name in self.paused:
            if self.planted != "pause_noop":
                await self._docker(self._api(name).unpause, self._cid(name))
            self.paused.discard(name)

    async def remove_node(self, name: str) -> bool:
        self._no_host(name, "remove_node")
        if name not in self.topology.node_names or name in self.stopped or name in self.removed:
            return False
        await self.kill(name)
        self.removed.add(name)
        return True

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: VariantSpec | None = None) -> None:  # fmt: skip
        """Docker created the node up front, with the variant its join step names (full_topology)."""
        if name not in self.topology.node_names:
            raise KeyError(f"node {name!r} was not declared when the run started (Docker needs its address)")
        assert self.plan is not None
        if name in self.removed:  # a new node (the reference's AddNode): its old links stay down (its key stays: docs)
            await _all_at_once([lambda i=ln.index: self._disconnect(i) for ln in self.plan.links if name in (ln.a, ln.b)
                                and ln.index not in self.down_links and not {ln.a, ln.b} & set(peers)])  # fmt: skip
        for p in peers:
            for i in self._links_between(name, p):
                if i in self.down_links and i not in self.cut_links:
                    await self._connect(i)
        if name in self.stopped or name in self.removed:
            await self.restart(name)
        self.waiting.discard(name)  # joined: node_keys lists it now (docker_attacks)
