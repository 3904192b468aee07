"""The Docker backend's plan of each node, pure (no engine, no Docker SDK): what ``snekbed node`` runs in a
container or on the host.

A node container runs ``snekbed node`` listening for peers on NODE_PEER_PORT, its admin API on
NODE_ADMIN_PORT and its metrics on NODE_METRICS_PORT (the Dockerfile's labels repeat them), its event log
under NODE_EVENTS_DIR (the run's ``events/``, bind-mounted). Its key seed is ``NodeSpec.seed_bytes(seed)``,
as in every backend.

Peering: for each link the lexicographically smaller name dials the other's link
address (``--peer tcp://IP:7000?class=..``); the listener is told the class and
userspace shape of connections from that address with ``--inbound tcp://IP?class=..``.
So both ends agree on the link type, and each shapes what it sends.

Host nodes (``host: true``) run outside Docker: :func:`plan_host_launches` gives the exact
``snekbed node`` command the user runs on the Docker host. A host node always dials
its container peers at their link address (it reaches them through the link
network's bridge, whose gateway address is the host's); the container is told the
class of connections from that gateway with ``--inbound``. Links with a host end are
shaped in userspace at both ends (the host's own interfaces are never touched).
"""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.links import LinkShape, default_classes, resolve_class
from netem.plan import ShapingBackend, userspace_part
from node.core.crypto import Identity, derive_seed
from orchestrator.backends.docker_net import AddressPlan, DockerBackendError, LinkNet
from orchestrator.model.topology import Topology

__all__ = [
    "NODE_ADMIN_PORT",
    "NODE_METRICS_PORT",
    "NODE_PEER_PORT",
    "NODE_EVENTS_DIR",
    "LABEL_KEY",
    "REDIAL_MAX_S",
    "NodeLaunch",
    "HostLaunch",
    "peer_params",
    "link_shape",
    "link_alias",
    "plan_launches",
    "plan_host_launches",
    "free_local_port",
    "node_container_options",
]

# Ports of `snekbed node` (its CLI owns the real defaults; the Dockerfile labels repeat them).
NODE_ADMIN_PORT = 8080
NODE_METRICS_PORT = 9100
NODE_PEER_PORT = 7000
NODE_EVENTS_DIR = "/run/snekbed/events"
LABEL_KEY = "snekbed.key"
_URI_SHAPE_FIELDS = ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "queue_limit_pkts")
_NOT_IN_URI = ("duplicate_pct", "corrupt_pct", "reorder_pct")
#: Longest wait between redials of a peer that is not up yet (the node's default is 30 s): in a large run
#: the listener may start a minute after its dialer, and a long backoff would be counted as convergence time.
REDIAL_MAX_S = 3.0


def node_container_options(*, kernel_shaping: bool) -> dict[str, object]:
    """Docker SDK ``containers.run``/``create`` options every node container needs.

    ``init`` always (so SIGTERM stops the node at once); NET_ADMIN only when the kernel
    shaping backend runs tc/iptables inside the container.
    """
    return {"init": True, "cap_add": ["NET_ADMIN"]} if kernel_shaping else {"init": True}


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
        return " ".join(shlex.quote(a) for a in self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "admin": self.admin, "argv": self.argv, "command": self.command}


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


def link_shape(topology: Topology, index: int) -> LinkShape:
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
            shape = link_shape(topology, ln.index)
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
            query = peer_params(ln.link_class, userspace_part(link_shape(topology, ln.index), "userspace"))
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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
