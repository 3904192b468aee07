"""The Docker backend: a topology as Docker networks and one container per node.

Everything goes through the Docker SDK (no docker CLI). One ``up``:

1. plans addresses (``docker_net``) under a host-wide lock and creates the
   control network, the LAN segment (if any node is ``multicast: true``) and one
   internal /29 per link;
2. creates, connects and starts the node containers concurrently (``snekbed node``
   in the image ``build_node_image`` made), each labelled ``snekbed.run=<id>`` and
   ``snekbed.node=<name>``, its run's ``events/`` directory bind-mounted;
3. shapes every link at both ends from the HOST, inside the container's network
   namespace (``nsenter -t <pid> -n tc|iptables|ethtool ...``), with the commands
   ``netem.plan.plan_link`` plans; the part of the shape the kernel cannot do
   (delay and jitter on ``kernel-partial``) goes to the node as peer URI parameters.

Peering: for each link the lexicographically smaller name dials the other's link
address (``--peer tcp://IP:7000?class=..``); the listener is told the class and
userspace shape of connections from that address with ``--inbound tcp://IP?class=..``.
So both ends agree on the link type, and each shapes what it sends.

Host nodes (``host: true`` in the topology) run outside Docker: ``up`` creates their
link networks but no container, and :func:`plan_host_launches` gives the exact
``snekbed node`` command the user runs on the Docker host. A host node always dials
its container peers at their link address (it reaches them through the link
network's bridge, whose gateway address is the host's); the container is told the
class of connections from that gateway with ``--inbound``. Links with a host end are
shaped in userspace at both ends (the host's own interfaces are never touched).

Cleanup (:meth:`DockerBackend.down`) goes by label only: containers first
(force-removed, concurrently), then networks one at a time with retries.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.links import LinkShape, default_classes, resolve_class
from netem.plan import ShapingBackend, iptables_check_argv, plan_link, userspace_part
from node.core.crypto import Identity, derive_seed
from orchestrator.backends.image import (
    NODE_ADMIN_PORT,
    NODE_METRICS_PORT,
    NODE_PEER_PORT,
    default_cache_dir,
    node_container_options,
)
from orchestrator.backends.shaping import ShapingError
from orchestrator.backends.shaping import find_dev as _netem_find_dev
from orchestrator.backends.shaping import nsenter_run as _nsenter
from orchestrator.model.topology import Topology

from orchestrator.backends.docker_net import (
    DEFAULT_POOL,
    ENDPOINT_CHANGES,
    LABEL_LINK,
    LABEL_NODE,
    LABEL_ROLE,
    LABEL_RUN,
    AddressPlan,
    DockerBackendError,
    LinkNet,
    _remove_with_retry,
    create_networks,
    network_lock,
    plan_addresses,
    remove_networks,
    taken_subnets,
)

if TYPE_CHECKING:
    import docker

__all__ = [
    "DockerBackend",
    "DockerBackendError",
    "NodeLaunch",
    "HostLaunch",
    "plan_host_launches",
    "free_local_port",
    "LinkEndpoint",
    "UpResult",
    "DownReport",
    "plan_launches",
    "link_alias",
    "peer_params",
    "link_endpoints",
    "find_dev",
    "NODE_EVENTS_DIR",
    "LABEL_RUN",
    "LABEL_NODE",
]

NODE_EVENTS_DIR = "/run/snekbed/events"
LABEL_KEY = "snekbed.key"
_URI_SHAPE_FIELDS = ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "queue_limit_pkts")
_NOT_IN_URI = ("duplicate_pct", "corrupt_pct", "reorder_pct")
#: Longest wait between redials of a peer that is not up yet (the node's default is 30 s): in a large run
#: the listener may start a minute after its dialer, and a long backoff would be counted as convergence time.
REDIAL_MAX_S = 3.0
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


@dataclass(frozen=True, slots=True)
class NodeLaunch:
    """Everything needed to start one node container."""

    name: str
    key: str  # public key hex
    control_ip: str
    args: list[str]  # after the image's ENTRYPOINT ["snekbed"]
    links: list[LinkNet]
    lan_ip: str | None = None

    @property
    def admin(self) -> str:
        return f"{self.control_ip}:{NODE_ADMIN_PORT}"


@dataclass(frozen=True, slots=True)
class HostLaunch:
    """A host node: the ``snekbed node`` command the user runs outside Docker, and where it is observed."""

    name: str
    key: str  # public key hex
    admin: str  # HOST:PORT of its admin API, as the orchestrator reaches it
    args: list[str]  # after ``snekbed``
    links: list[LinkNet]

    @property
    def argv(self) -> list[str]:
        return ["snekbed", *self.args]

    @property
    def command(self) -> str:
        """The command line, quoted for a POSIX shell."""
        return " ".join(_sh_quote(a) for a in self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "admin": self.admin, "argv": self.argv, "command": self.command}


@dataclass(frozen=True, slots=True)
class LinkEndpoint:
    """One end of a link in a running run: what ``snekbed links`` needs to shape it."""

    link_index: int
    link_class: str
    node: str
    container_id: str
    pid: int
    dev: str
    ip: str
    peer: str
    peer_ip: str


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


# ---------------------------------------------------------------- planning (pure)


def peer_params(link_class: str, userspace: LinkShape) -> str:
    """The query string of a peer/inbound URI: ``class=..`` plus the userspace shape's non-zero fields.

    ``class`` is the link's class when the node knows it (a default class), else its
    link type name. Raises DockerBackendError for shape fields a URI cannot carry.
    """
    known = default_classes()
    name = link_class if link_class in known else resolve_class(link_class).link_type
    bad = [f for f in _NOT_IN_URI if getattr(userspace, f)]
    if bad:
        raise DockerBackendError(f"link class {link_class!r}: {', '.join(bad)} cannot be applied by the node's "
                                 "transport (peer URIs carry delay_ms, jitter_ms, loss_pct, rate_mbit, queue_limit_pkts)")
    parts = [f"class={name}"]
    for f in _URI_SHAPE_FIELDS:
        value = getattr(userspace, f)
        if value:
            parts.append(f"{f}={value:g}" if isinstance(value, float) else f"{f}={value}")
    return "&".join(parts)


def _link_shape(topology: Topology, index: int, link_class: str) -> LinkShape:
    """The effective shape of links[index]; a class the node table does not know keeps the topology's."""
    return topology.link_class_of(index).shape


def link_alias(index: int, node: str) -> str:
    """The DNS name of ``node`` on the network of ``links[index]`` (swarm backend: a per-network alias)."""
    return f"l{index}-{node}"


def plan_launches(topology: Topology, plan: AddressPlan, *, run_id: str, seed: int | str,
                  shaping_backend: ShapingBackend, by_name: bool = False) -> dict[str, NodeLaunch]:
    """The command line of every node: identity from ``NodeSpec.seed_bytes(seed)``, peers on link addresses.

    ``by_name`` (the swarm backend, where the swarm allocates addresses): the dialer dials the
    listener's alias on the link network (:func:`link_alias`) and the listener's ``--inbound``
    rule names the link's subnet, in which the dialer is the only other member.
    Pure. Raises DockerBackendError when a link's userspace part cannot be expressed.
    """
    launches: dict[str, NodeLaunch] = {}
    for spec in topology.nodes:
        if spec.host:
            continue
        seed_bytes = spec.seed_bytes(seed)
        key = Identity(seed_bytes).public_key.hex()
        shaping_seed = int.from_bytes(derive_seed(seed, "shaping", spec.name)[:4], "big")
        args = ["node", "--listen", f"0.0.0.0:{NODE_PEER_PORT}", "--admin", f"0.0.0.0:{NODE_ADMIN_PORT}",
                "--metrics", f"0.0.0.0:{NODE_METRICS_PORT}", "--key-seed", seed_bytes.hex(),
                "--events", f"{NODE_EVENTS_DIR}/{spec.name}.jsonl", "--run-id", run_id, "--name", spec.name,
                "--shaping-seed", str(shaping_seed), "--backoff-max-s", str(REDIAL_MAX_S)]
        if spec.variant is not None or spec.knobs:
            args += ["--variant", str(spec.variant_spec())]
        links = plan.links_of(spec.name)
        for ln in links:
            shape = _link_shape(topology, ln.index, ln.link_class)
            peer = ln.peer_of(spec.name)
            if plan.is_host(peer):  # the host node dials from its address on this bridge: the gateway
                query = peer_params(ln.link_class, userspace_part(shape, "userspace"))
                args += ["--inbound", f"tcp://{ln.net.gateway}?{query}"]
                continue
            query = peer_params(ln.link_class, userspace_part(shape, shaping_backend))
            if spec.name == ln.dialer:
                target = link_alias(ln.index, peer) if by_name else ln.net.members[peer]
                args += ["--peer", f"tcp://{target}:{NODE_PEER_PORT}?{query}"]
            else:
                args += ["--inbound", f"tcp://{ln.net.subnet if by_name else ln.net.members[peer]}?{query}"]
        lan_ip = plan.lan.members.get(spec.name) if plan.lan is not None else None
        launches[spec.name] = NodeLaunch(spec.name, key, plan.control_ip(spec.name), args, links, lan_ip)
    return launches


def plan_host_launches(topology: Topology, plan: AddressPlan, *, run_id: str, seed: int | str, events_dir: Path,
                       admin: dict[str, str]) -> dict[str, HostLaunch]:
    """The ``snekbed node`` command of every host node. Pure.

    ``admin`` maps each host node to the admin address it will serve (its ``admin`` field
    or a free local port the caller picked). It dials each container peer at its link
    address with the link's whole shape in userspace, and another host node at that
    node's ``listen`` address when its own name is the smaller. Its event log goes to
    ``events_dir`` (the run's ``events/``), so the run directory is complete.
    """
    out: dict[str, HostLaunch] = {}
    for spec in topology.nodes:
        if not spec.host:
            continue
        seed_bytes = spec.seed_bytes(seed)
        shaping_seed = int.from_bytes(derive_seed(seed, "shaping", spec.name)[:4], "big")
        args = ["node", "--listen", spec.listen or "off", "--admin", admin[spec.name], "--metrics", "off",
                "--key-seed", seed_bytes.hex(), "--events", str(events_dir.absolute() / f"{spec.name}.jsonl"),
                "--run-id", run_id, "--name", spec.name, "--shaping-seed", str(shaping_seed),
                "--backoff-max-s", str(REDIAL_MAX_S)]
        if spec.variant is not None or spec.knobs:
            args += ["--variant", str(spec.variant_spec())]
        links = plan.links_of(spec.name)
        for ln in links:
            query = peer_params(ln.link_class, userspace_part(_link_shape(topology, ln.index, ln.link_class),
                                                              "userspace"))
            peer = ln.peer_of(spec.name)
            if not plan.is_host(peer):
                args += ["--peer", f"tcp://{ln.net.members[peer]}:{NODE_PEER_PORT}?{query}"]
            elif spec.name == ln.dialer:
                args += ["--peer", f"tcp://{topology.node(peer).listen}?{query}"]
        key = Identity(seed_bytes).public_key.hex()
        out[spec.name] = HostLaunch(spec.name, key, admin[spec.name], args, links)
    return out


def free_local_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's choice); for a host node's admin API."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- namespace commands


def find_dev(pid: int, ip: str) -> str:
    """The interface holding ``ip`` in the namespace of ``pid`` (by address, never by ethN order).

    Raises DockerBackendError when no interface has it.
    """
    try:
        return _netem_find_dev(pid, ip)
    except ShapingError as exc:
        raise DockerBackendError(str(exc)) from exc


def shape_endpoint(pid: int, ip: str, peer_ip: str, shape: LinkShape, backend: ShapingBackend) -> str:
    """Apply ``backend``'s kernel part of ``shape`` to the interface holding ``ip``; return the dev.

    iptables rules are added only when ``-C`` says they are missing, so re-applying is safe.
    Raises DockerBackendError naming the command that failed.
    """
    dev = find_dev(pid, ip)
    plan = plan_link(backend, dev, shape, peer_ip=peer_ip)
    rules = [tuple(r) for r in plan.iptables_rules]
    for argv in plan.commands:
        if tuple(argv) in rules and _nsenter(pid, iptables_check_argv(argv)).returncode == 0:
            continue
        done = _nsenter(pid, argv)
        if done.returncode != 0:
            raise DockerBackendError(f"shaping {dev} ({ip}, peer {peer_ip}) with {backend}: `{' '.join(argv)}` "
                                     f"exited {done.returncode}: {done.stderr.strip()}")
    return dev


# ---------------------------------------------------------------- the backend


class DockerBackend:
    """Creates, inspects and removes runs on one Docker engine (``docker.from_env()`` by default)."""

    name = "docker"  # meta.json's ``backend``

    def __init__(self, client: docker.DockerClient | None = None, *, pool: str = DEFAULT_POOL, workers: int = 8,
                 lock_path: Path | None = None) -> None:
        if client is None:
            import docker as docker_sdk

            client = docker_sdk.from_env()
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
           ) -> UpResult:
        """Create the networks and start one container per node; shape every link.

        ``on_plan`` is called once the plan is fixed, before any container exists (the
        CLI records it). Host nodes get their networks and a command (``UpResult.hosts``), not a
        container. Everything created carries ``snekbed.run=<run_id>``, so
        :meth:`down` removes it even after an exception or Ctrl-C half-way.
        Raises DockerBackendError (AddressPoolExhausted, a failed create or shaping step).
        """
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
        t_nets = time.monotonic()
        shapes = {ln.index: _link_shape(topology, ln.index, ln.link_class) for ln in plan.links}
        containers: dict[str, str] = {}
        link_backends: dict[int, str] = {}
        starts: list[float] = []
        progress("containers", 0, len(launches))
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="snekbed-up")
        try:
            # listeners (the larger name of each link) first, so most dials find their peer already up
            futures = {pool.submit(self._start_node, run_id, launches[name], plan, net_ids, image, events_dir,
                                   shapes, shaping_backend): name for name in sorted(launches, reverse=True)}
            for fut in as_completed(futures):
                cid, started, shaped = fut.result()
                containers[futures[fut]] = cid
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
                    events_dir: Path, shapes: dict[int, LinkShape],
                    shaping_backend: ShapingBackend) -> tuple[str, float, list[int]]:
        """Create, connect, start and shape one node. Returns (container id, start time, links shaped here)."""
        import docker.errors

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
            quoted = " ".join(_sh_quote(a) for a in launch.args)
            entrypoint = ["/bin/sh", "-c", f'set -- $(ip -o -4 addr show to {launch.lan_ip}/32); '
                                           f'exec snekbed {quoted} --multicast "$2"']
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
            with ENDPOINT_CHANGES:
                api.start(cid)
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"starting node {launch.name} (image {image}) failed: "
                                     f"{exc.explanation or exc}") from exc
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
        import docker.errors

        try:
            raw = self.api.logs(container_id, stdout=True, stderr=True, tail=lines)
        except docker.errors.APIError:
            return []
        return raw.decode("utf-8", "replace").rstrip().splitlines()[-lines:]

    def kill(self, run_id: str, node: str) -> str:
        """SIGKILL the container of ``node`` (it stays, stopped, until ``down``). Returns its id.

        Raises DockerBackendError when the run has no such running node.
        """
        import docker.errors

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
            shape = _link_shape(topology, ep.link_index, ep.link_class)
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
        import docker.errors

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
        import docker.errors

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
        import docker.errors

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


def _sh_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def link_endpoints(run_id: str, client: docker.DockerClient | None = None, *,
                   with_dev: bool = True) -> list[LinkEndpoint]:
    """For a run, each running link end: (link index, class, node, container pid, dev, ip, peer, peer ip).

    Found from the engine alone (labels and network inspection), so it works from
    any process. ``dev`` comes from the address inside the container's namespace
    (needs root and nsenter; with ``with_dev=False`` it is left empty). Links whose
    other end is not running are included (the peer's address is still known).
    Raises DockerBackendError when a dev cannot be found.
    """
    if client is None:
        import docker as docker_sdk

        client = docker_sdk.from_env()
    api = client.api
    nodes: dict[str, tuple[str, int]] = {}
    for c in api.containers(filters={"label": f"{LABEL_RUN}={run_id}"}):
        name = c["Labels"].get(LABEL_NODE)
        if name:
            nodes[c["Id"]] = (name, int(api.inspect_container(c["Id"])["State"]["Pid"]))
    out: list[LinkEndpoint] = []
    for summary in api.networks(filters={"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}=link"]}):
        net = api.inspect_network(summary["Id"])
        labels = net.get("Labels") or {}
        a, b, cls = labels.get("snekbed.a", ""), labels.get("snekbed.b", ""), labels.get("snekbed.class", "")
        members = {ep_name: ip for ep_name, ip in _members(net)}
        cfg = ((net.get("IPAM") or {}).get("Config") or [{}])[0]
        ips = _planned_ips(cfg.get("Subnet", ""))
        planned = {a: ips[0], b: ips[1]} if len(ips) >= 2 else {}
        for cid, ip in members.items():
            if cid not in nodes:
                continue
            name, pid = nodes[cid]
            peer = b if name == a else a
            peer_ip = planned.get(peer, "")
            dev = find_dev(pid, ip) if with_dev else ""
            out.append(LinkEndpoint(int(labels.get(LABEL_LINK, -1)), cls, name, cid, pid, dev, ip, peer, peer_ip))
    return sorted(out, key=lambda e: (e.link_index, e.node))


def _members(net: dict[str, Any]) -> Iterable[tuple[str, str]]:
    for cid, ep in (net.get("Containers") or {}).items():
        ip = str(ep.get("IPv4Address", "")).split("/", 1)[0]
        if ip:
            yield cid, ip


def _planned_ips(subnet: str) -> list[str]:
    """The endpoint addresses docker_net plans in a link /29: .2 for ``a``, .3 for ``b``."""
    import ipaddress

    try:
        hosts = list(ipaddress.IPv4Network(subnet).hosts())
    except ValueError:
        return []
    return [str(h) for h in hosts[1:3]]
