"""The Docker backend: a topology as Docker networks and one container per node.

Everything goes through the Docker SDK (no docker CLI). One ``up``:

1. plans addresses (``docker_net``) under a host-wide lock and creates the
   control network, the LAN segment (if any node is ``multicast: true``) and one
   internal /29 per link;
2. creates, connects and starts the node containers concurrently (``snekbed node``
   in the image ``build_node_image`` made, or the reference node in the image
   ``build_reference_image`` made for a node whose spec is ``pinecone``, with the
   command lines ``docker_plan`` plans), each labelled ``snekbed.run=<id>`` and ``snekbed.node=<name>``, its run's
   ``events/`` directory bind-mounted;
3. shapes every link at both ends from the HOST, inside the container's network
   namespace (``docker_links.shape_endpoint``); the part of the shape the kernel cannot do
   (delay and jitter on ``kernel-partial``) goes to the node as peer URI parameters.

Host nodes (``host: true`` in the topology) run outside Docker: ``up`` creates their
link networks but no container, and returns the ``snekbed node`` command to run
(``docker_plan.plan_host_launches``).

Cleanup (:meth:`DockerBackend.down`) goes by label only: containers first
(force-removed, concurrently), then networks one at a time with retries.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from contract.links import LinkShape
from netem.plan import ShapingBackend
from orchestrator.backends.docker_links import link_endpoints, shape_endpoint
from orchestrator.backends.docker_net import (
    DEFAULT_POOL,
    ENDPOINT_CHANGES,
    LABEL_NODE,
    LABEL_ROLE,
    LABEL_RUN,
    AddressPlan,
    DockerBackendError,
    _remove_with_retry,
    create_networks,
    network_lock,
    plan_addresses,
    remove_networks,
    taken_subnets,
)
from orchestrator.backends.docker_plan import (
    LABEL_KEY,
    NODE_ADMIN_PORT,
    NODE_EVENTS_DIR,
    HostLaunch,
    NodeLaunch,
    free_local_port,
    link_alias,  # noqa: F401  (orchestrator.chaos.swarm_backend imports it from here; docker_plan is its home)
    implementation_of,
    link_shape,
    node_container_options,
    plan_host_launches,
    plan_launches,
)
from orchestrator.backends.image_common import default_cache_dir
from orchestrator.model.topology import Topology

__all__ = ["DockerBackend", "DockerBackendError", "UpResult", "DownReport", "Progress", "sigint_ignored",
           "STOP_TIMEOUT_S", "require_reference_image"]

STOP_TIMEOUT_S = 3  # seconds between SIGTERM and SIGKILL when a run is taken down
Progress = Callable[[str, int, int], None]  # (phase, done, total)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored inside the block (main thread only; elsewhere signals are not ours to set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _noop(_phase: str, _done: int, _total: int) -> None:
    """The default progress callback."""


def require_reference_image(topology: Topology, reference_image: str | None) -> None:
    """Raise DockerBackendError when ``topology`` has reference nodes (spec ``pinecone``) and no image for them."""
    refs = [n.name for n in topology.nodes if not n.host and implementation_of(n) == "reference"]
    if refs and not reference_image:
        raise DockerBackendError(f"topology {topology.name}: node(s) {', '.join(refs[:6])} run the Pinecone reference "
                                 "and no reference image was given (`snekbed image build` builds it; docs/image.md)")


@dataclass(slots=True)
class UpResult:
    """What :meth:`DockerBackend.up` did."""

    plan: AddressPlan
    launches: dict[str, NodeLaunch]
    containers: dict[str, str]  # name -> container id
    shaping_backend: ShapingBackend
    link_backends: dict[int, str]  # link index -> backend that shaped it
    t_first_start: float  # time.monotonic()
    t_last_start: float
    network_s: float
    container_s: float
    hosts: dict[str, HostLaunch] = field(default_factory=dict)  # host nodes: what the user runs


DOWN_PASSES = 3  # sweeps of down(): the first, then again for whatever the engine still lists


@dataclass(slots=True)
class DownReport:
    containers_removed: int = 0
    networks_removed: int = 0
    volumes_removed: int = 0
    errors: list[str] = field(default_factory=list)
    containers_left: int = 0
    networks_left: int = 0


# ---------------------------------------------------------------- the backend


class DockerBackend:
    """Creates, inspects and removes runs on one Docker engine (``docker.from_env()`` by default)."""

    name = "docker"  # meta.json's ``backend``

    def __init__(self, client: docker.DockerClient | None = None, *, pool: str = DEFAULT_POOL, workers: int = 8,
                 lock_path: Path | None = None) -> None:
        if client is None:
            client = docker.from_env()
        self.client = client
        self.api = client.api
        self.pool = pool
        self.workers = max(1, workers)
        if lock_path is None:
            lock_path = default_cache_dir() / "docker-networks.lock"
        self.lock_path = lock_path

    # ------------------------------------------------------------ up

    def plan(self, topology: Topology, run_id: str) -> AddressPlan:
        """An address plan avoiding every existing network and route (no lock held: call inside ``up``)."""
        return plan_addresses(topology, run_id, pool=self.pool, taken=taken_subnets(self.client))

    def up(self, topology: Topology, *, run_id: str, events_dir: Path, image: str, seed: int | str = 0,
           shaping_backend: ShapingBackend = "userspace", progress: Progress | None = None,
           on_plan: Callable[[AddressPlan, dict[str, NodeLaunch], dict[str, HostLaunch]], None] | None = None,
           reference_image: str | None = None,
           on_networks: Callable[[AddressPlan], None] | None = None, held: Collection[str] = ()) -> UpResult:
        """Create the networks and start one container per node; shape every link. The nodes in ``held`` (a
        chaos scenario's later joins) get their container and networks but are not started (nor shaped: a
        start applies their shapes, orchestrator.chaos.docker_shaping).

        ``on_plan`` is called once the plan is fixed, before any container exists (the
        CLI records it); ``on_networks`` once the networks exist, before the first container starts (a run's
        Prometheus, so that it sees every node from its first second). Host nodes get their networks and a command (``UpResult.hosts``), not a
        container. Nodes whose spec is ``pinecone`` run ``reference_image`` (the reference node).
        Everything created carries ``snekbed.run=<run_id>``, so
        :meth:`down` removes it even after an exception or Ctrl-C half-way.
        Raises DockerBackendError (AddressPoolExhausted, a failed create or shaping step, reference nodes
        without ``reference_image``).
        """
        require_reference_image(topology, reference_image)
        images = {"snekbed": image, "reference": reference_image or ""}
        progress = progress or _noop
        events_dir = events_dir.absolute()
        events_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with network_lock(self.lock_path):
            plan = self.plan(topology, run_id)
            launches = plan_launches(topology, plan, run_id=run_id, seed=seed, shaping_backend=shaping_backend)
            admin = {n.name: n.admin or f"127.0.0.1:{free_local_port()}" for n in topology.nodes if n.host}
            hosts = plan_host_launches(topology, plan, run_id=run_id, seed=seed, events_dir=events_dir, admin=admin)
            if on_plan is not None:
                on_plan(plan, launches, hosts)
            net_ids = create_networks(self.client, plan, progress=progress)
        if on_networks is not None:
            on_networks(plan)
        t_nets = time.monotonic()
        shapes = {ln.index: link_shape(topology, ln.index) for ln in plan.links}
        containers: dict[str, str] = {}
        link_backends: dict[int, str] = {}
        starts: list[float] = []
        progress("containers", 0, len(launches))
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="snekbed-up")
        try:
            # listeners (the larger name of each link) first, so most dials find their peer already up
            futures = {pool.submit(self._start_node, run_id, launches[name], plan, net_ids,
                                   images[launches[name].implementation], events_dir, shapes, shaping_backend,
                                   name not in held): name
                       for name in sorted(launches, reverse=True)}
            for fut in as_completed(futures):
                cid, started, shaped = fut.result()
                containers[futures[fut]] = cid
                if started is not None:
                    starts.append(started)
                for index in shaped:
                    link_backends[index] = shaping_backend if not shapes[index].is_noop else "none"
                progress("containers", len(containers), len(launches))
        except BaseException:
            # In-flight creates finish labelled and the caller's rollback (or `down`) removes them; a second
            # Ctrl-C meanwhile must not cut the wait short, or a create could land after the rollback.
            with sigint_ignored():
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        for ln in plan.links:
            with_host = plan.is_host(ln.a) or plan.is_host(ln.b)
            link_backends.setdefault(ln.index, "none" if shapes[ln.index].is_noop else
                                     "userspace" if with_host else shaping_backend)
        return UpResult(plan, launches, containers, shaping_backend, dict(sorted(link_backends.items())),
                        min(starts, default=t_nets), max(starts, default=t_nets), t_nets - t0,
                        max(starts, default=t_nets) - t_nets, hosts)

    def _start_node(self, run_id: str, launch: NodeLaunch, plan: AddressPlan, net_ids: dict[str, str], image: str,
                    events_dir: Path, shapes: dict[int, LinkShape], shaping_backend: ShapingBackend,
                    start: bool = True) -> tuple[str, float | None, list[int]]:
        """Create, connect, start and shape one node (``start`` False: create and connect only). Returns
        (container id, start time or None, links shaped here)."""
        api = self.api
        options = node_container_options(kernel_shaping=False)
        host_config = api.create_host_config(
            init=bool(options.get("init")), binds={str(events_dir): {"bind": NODE_EVENTS_DIR, "mode": "rw"}},
            log_config={"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}},
        )
        networking = api.create_networking_config(
            {plan.control.name: api.create_endpoint_config(ipv4_address=launch.control_ip)})
        command: list[str] | str = launch.args
        entrypoint: list[str] | None = None
        if launch.lan_ip is not None:  # --multicast needs the interface name, known only inside the container
            quoted = " ".join(shlex.quote(a) for a in launch.args)
            entrypoint = ["/bin/sh", "-c", f'set -- $(ip -o -4 addr show to {launch.lan_ip}/32); '
                                           f'exec {launch.program} {quoted} --multicast "$2"']
            command = []
        labels = {LABEL_RUN: run_id, LABEL_NODE: launch.name, LABEL_KEY: launch.key, LABEL_ROLE: "node"}
        try:
            created = api.create_container(image, command=command, entrypoint=entrypoint, hostname=launch.name,
                                           name=f"snekbed-{run_id}-{launch.name}", labels=labels,
                                           host_config=host_config, networking_config=networking,
                                           use_config_proxy=False, stop_signal="SIGTERM")
            cid = created["Id"]
            for ln in launch.links:
                api.connect_container_to_network(cid, net_ids[ln.net.name], ipv4_address=ln.net.members[launch.name])
            if launch.lan_ip is not None and plan.lan is not None:
                api.connect_container_to_network(cid, net_ids[plan.lan.name], ipv4_address=launch.lan_ip)
            for net_name, ip in launch.radio_ips.items():  # a radio's segment: peerings made as the nodes move
                api.connect_container_to_network(cid, net_ids[net_name], ipv4_address=ip)
            if start:
                with ENDPOINT_CHANGES:
                    api.start(cid)
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"starting node {launch.name} (image {image}) failed: "
                                     f"{exc.explanation or exc}") from exc
        if not start:
            return cid, None, []
        started = time.monotonic()
        shaped: list[int] = []
        if shaping_backend != "userspace":
            pid = int(api.inspect_container(cid)["State"]["Pid"])
            for ln in launch.links:
                peer = ln.peer_of(launch.name)
                if shapes[ln.index].is_noop or plan.is_host(peer):  # host links: shaped in userspace
                    continue
                shape_endpoint(pid, ln.net.members[launch.name], ln.net.members[peer], shapes[ln.index],
                               shaping_backend)
                shaped.append(ln.index)
        return cid, started, shaped

    # ------------------------------------------------------------ inspect and act

    def containers(self, run_id: str, *, all: bool = True) -> dict[str, dict[str, Any]]:
        """node name -> the engine's container summary (``State``, ``Id``, ``Labels``, ...) for the run."""
        found = self.api.containers(all=all, filters={"label": f"{LABEL_RUN}={run_id}"})
        return {c["Labels"].get(LABEL_NODE, c["Id"][:12]): c for c in found if c["Labels"].get(LABEL_NODE)}

    def admin_endpoints(self, run_id: str, plan: dict[str, Any]) -> dict[str, str]:
        """node name -> admin ``HOST:PORT`` of the run's containers: their control addresses (``docker.json``)."""
        ctl = (plan.get("control") or {}).get("nodes") or {}
        return {name: f"{ip}:{NODE_ADMIN_PORT}" for name, ip in ctl.items()}

    def running(self, run_id: str) -> set[str]:
        """Names of the run's nodes whose container is running."""
        return {name for name, c in self.containers(run_id).items() if c.get("State") == "running"}

    def logs_tail(self, container_id: str, lines: int = 10) -> list[str]:
        """The last ``lines`` lines the container printed (stdout and stderr); [] when unavailable."""
        try:
            raw = self.api.logs(container_id, stdout=True, stderr=True, tail=lines)
        except docker.errors.APIError:
            return []
        return raw.decode("utf-8", "replace").rstrip().splitlines()[-lines:]

    def kill(self, run_id: str, node: str) -> str:
        """SIGKILL the container of ``node`` (it stays, stopped, until ``down``). Returns its id.

        Raises DockerBackendError when the run has no such running node.
        """
        c = self.containers(run_id).get(node)
        if c is None:
            raise DockerBackendError(f"run {run_id}: no container for node {node!r}")
        try:
            with ENDPOINT_CHANGES:  # SIGKILL: the engine answers once the container's endpoints are gone
                self.api.kill(c["Id"])
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"run {run_id}: killing {node} failed: {exc.explanation or exc}") from exc
        return str(c["Id"])

    def reapply_shaping(self, run_id: str, topology: Topology, backend: ShapingBackend) -> int:
        """Shape every running link endpoint again (after a reconnect its qdiscs are gone). Returns endpoints shaped."""
        count = 0
        for ep in link_endpoints(run_id, self.client, with_dev=False):
            shape = link_shape(topology, ep.link_index)
            if not shape.is_noop and backend != "userspace" and not topology.node(ep.peer).host:
                shape_endpoint(ep.pid, ep.ip, ep.peer_ip, shape, backend)
                count += 1
        return count

    # ------------------------------------------------------------ down

    def stop_all(self, run_id: str | None, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM every running container labelled ``snekbed.run=<run_id>`` (every run's when None) at once and
        wait, at most ``timeout_s`` in all, until none runs: the nodes flush their event logs and log
        ``node_stopping``. Whatever still runs after that is left to :meth:`down`'s forced removal. Returns how
        many containers were still running at the deadline; one that is gone already is skipped."""
        label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
        running = [c["Id"] for c in self.api.containers(filters={"label": label, "status": "running"})]

        def terminate(cid: str) -> None:
            with contextlib.suppress(docker.errors.APIError):  # gone already, or not running
                self.api.kill(cid, signal="SIGTERM")

        def wait(cid: str) -> None:
            # the engine answers when the container has exited (a poll of the running list lagged behind exits
            # by seconds); a timeout or a container gone already ends the wait as well
            with contextlib.suppress(Exception):
                self.api.wait(cid, timeout=max(0.1, deadline - time.monotonic()))

        if not running:
            return 0
        # the exits remove endpoints side by side: nothing of this process adds one meanwhile (ENDPOINT_CHANGES)
        with ENDPOINT_CHANGES, ThreadPoolExecutor(max_workers=max(self.workers, len(running)),
                                                  thread_name_prefix="snekbed-stop") as pool:
            self._leave_control_networks(label, set(running))
            deadline = time.monotonic() + timeout_s
            list(pool.map(terminate, running))
            list(pool.map(wait, running))
        return len(self.api.containers(filters={"label": label, "status": "running"}))

    def _leave_control_networks(self, label: str, running: set[str]) -> int:
        """Disconnect the ``running`` containers from their run's control network, one at a time; return how many.

        Docker 20.10 can lose an update of a network's endpoint count when several endpoints of that network are
        deleted at the same moment (docker_net.ENDPOINT_CHANGES, moby#42119): the network is then kept with nothing
        attached until the engine restarts. The control network is the one every node of a run is on, so a
        teardown's simultaneous exits delete all its endpoints at once; this is where the full test suite saw the
        count go stale (about once per suite). Taken one at a time first, the exits then delete at most two
        endpoints of any network (a link's two ends). Peering never uses the control network (links and the LAN
        segment carry it), so the nodes' last events are those of the run, not of a lost link; only their admin
        API and metrics go, which nothing reads once a teardown has begun. A container gone meanwhile is skipped."""
        left = 0
        for net in self.api.networks(filters={"label": [label, f"{LABEL_ROLE}=control"]}):
            try:
                attached = self.api.inspect_network(net["Id"]).get("Containers") or {}
            except docker.errors.APIError:
                continue  # removed meanwhile
            for cid in sorted(set(attached) & running):
                with contextlib.suppress(docker.errors.APIError):  # exited or removed meanwhile
                    self.api.disconnect_container_from_network(cid, net["Id"])
                    left += 1
        return left

    def down(self, run_id: str | None) -> DownReport:
        """Remove everything labelled ``snekbed.run=<run_id>`` (every run when None).

        Containers first (:meth:`stop_all`: SIGTERM to all, a shared grace period of at most STOP_TIMEOUT_S; then
        force-removed, concurrently, with retries), then networks one at a
        time, then labelled volumes. Never raises for engine errors: they are in
        ``report.errors``; ``containers_left``/``networks_left`` say what survived.
        """
        with ENDPOINT_CHANGES:  # no endpoint of this process is added while the run's go (docker_net)
            return self._down(run_id)

    def _down(self, run_id: str | None) -> DownReport:
        label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
        report = DownReport()
        self.stop_all(run_id)
        found = self.api.containers(all=True, filters={"label": label})

        def remove(cid: str) -> bool:
            return _remove_with_retry(lambda: self.api.remove_container(cid, force=True, v=True),
                                      f"container {cid[:12]}", report.errors)

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="snekbed-down") as pool:
            report.containers_removed = sum(pool.map(remove, [c["Id"] for c in found]))
        names = [n.lstrip("/") for c in found for n in (c.get("Names") or [])]
        report.networks_removed = remove_networks(self.client, label, report.errors, names)
        for _ in range(DOWN_PASSES - 1):  # the engine can lag behind a forced removal: sweep what is left again
            left = self.api.containers(all=True, filters={"label": label})
            if not left and not self.api.networks(filters={"label": label}):
                break
            time.sleep(1.0)
            report.containers_removed += sum(remove(c["Id"]) for c in left)
            report.networks_removed += remove_networks(self.client, label, report.errors, names)
        with contextlib.suppress(docker.errors.APIError):
            for vol in (self.api.volumes(filters={"label": label}) or {}).get("Volumes") or []:
                if _remove_with_retry(lambda v=vol["Name"]: self.api.remove_volume(v, force=True),
                                      f"volume {vol['Name']}", report.errors):
                    report.volumes_removed += 1
        report.containers_left = len(self.api.containers(all=True, filters={"label": label}))
        report.networks_left = len(self.api.networks(filters={"label": label}))
        return report

    def run_ids(self) -> list[str]:
        """Every run id that still has a labelled container or network on this engine."""
        ids = {c["Labels"][LABEL_RUN] for c in self.api.containers(all=True, filters={"label": LABEL_RUN})}
        ids |= {n["Labels"][LABEL_RUN] for n in self.api.networks(filters={"label": LABEL_RUN})}
        return sorted(ids)
