"""The Docker backend's plan of each node, pure (no engine, no Docker SDK): what ``snekbed node`` runs in a
container or on the host.

A node container runs ``snekbed node`` listening for peers on NODE_PEER_PORT, its admin API on
NODE_ADMIN_PORT and its metrics on NODE_METRICS_PORT (the Dockerfile's labels repeat them), its event log
under NODE_EVENTS_DIR (the run's ``events/``, bind-mounted). Its key seed is ``NodeSpec.seed_bytes(seed)``,
as in every backend (a chaos join's ground key, ground before the run, is the joining node's ``key_seed``:
orchestrator.chaos.ground_keys).

Peering: for each link the lexicographically smaller name dials the other's link
address (``--peer tcp://IP:7000?class=..``); the listener is told the class and
userspace shape of connections from that address with ``--inbound tcp://IP?class=..``.
So both ends agree on the link type, and each shapes what it sends.

A node whose spec is ``pinecone`` (node.core.variants: the Pinecone reference implementation) runs the
reference node (``node/pinecone``, docs/interop.md) in the reference image instead: the same options derived
the same way (:func:`node_args`), less the ``node`` command, with its variant given as the rules it runs
(``snek`` and the spec's knobs) and peer URIs that carry the link class only: it has no userspace shaper, so the
part of a link's shape that the kernel backend leaves to the node (delay and jitter here, where the kernel has
no netem; everything on the userspace backend) is not applied to what it sends, and
:func:`unapplied_shaping` says so for every such link end (meta.json ``shaping_unapplied``).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contract.links import LinkShape, default_classes, resolve_class
from netem.plan import ShapingBackend, userspace_part
from node.core.crypto import Identity, derive_seed
from orchestrator.backends.docker_net import AddressPlan, DockerBackendError, LinkNet
from orchestrator.model.adversary_spec import reference_refusal
from orchestrator.model.topology import NodeSpec, Topology

__all__ = [
    "NODE_ADMIN_PORT",
    "NODE_METRICS_PORT",
    "NODE_PEER_PORT",
    "NODE_EVENTS_DIR",
    "LABEL_KEY",
    "REDIAL_MAX_S",
    "PROGRAMS",
    "Implementation",
    "NodeLaunch",
    "HostLaunch",
    "peer_params",
    "link_shape",
    "link_alias",
    "radio_query",
    "node_args",
    "implementation_of",
    "unapplied_shaping",
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
Implementation = Literal["snekbed", "reference"]
#: the program each implementation's image runs (its ENTRYPOINT): snekbed's and the reference node
PROGRAMS: dict[str, str] = {"snekbed": "snekbed", "reference": "pinecone-node"}


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
    implementation: Implementation = "snekbed"  # "reference": the reference node, in the reference image
    #: its address on each radio's segment it is on: network name -> address (docs/mobility.md, "On Docker")
    radio_ips: dict[str, str] = field(default_factory=dict)

    @property
    def admin(self) -> str:
        return f"{self.control_ip}:{NODE_ADMIN_PORT}"

    @property
    def program(self) -> str:
        """What ``args`` follow: the image's entrypoint (``snekbed`` or ``pinecone-node``)."""
        return PROGRAMS[self.implementation]


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
        impl = implementation_of(spec)
        key = Identity(spec.seed_bytes(seed)).public_key.hex()
        args = node_args(spec, seed=seed, run_id=run_id, listen=f"0.0.0.0:{NODE_PEER_PORT}",
                         admin=f"0.0.0.0:{NODE_ADMIN_PORT}", metrics=f"0.0.0.0:{NODE_METRICS_PORT}",
                         events=f"{NODE_EVENTS_DIR}/{spec.name}.jsonl")  # fmt: skip
        links = plan.links_of(spec.name)
        for ln in links:
            shape = link_shape(topology, ln.index)
            peer = ln.peer_of(spec.name)
            if plan.is_host(peer):  # the host node dials from its address on this bridge: the gateway
                query = _uri_query(impl, ln.link_class, userspace_part(shape, "userspace"))
                args += ["--inbound", f"tcp://{ln.net.gateway}?{query}"]
                continue
            query = _uri_query(impl, ln.link_class, userspace_part(shape, shaping_backend))
            if spec.name == ln.dialer:
                target = link_alias(ln.index, peer) if by_name else ln.net.members[peer]
                args += ["--peer", f"tcp://{target}:{NODE_PEER_PORT}?{query}"]
            else:
                args += ["--inbound", f"tcp://{ln.net.subnet if by_name else ln.net.members[peer]}?{query}"]
        lan_ip = plan.lan.members.get(spec.name) if plan.lan is not None else None
        radio_ips: dict[str, str] = {}
        for radio, seg in plan.radios.items():
            if spec.name in seg.members:  # peerings come and go as the nodes move (backends.docker_mobility)
                args += ["--inbound", f"tcp://{seg.subnet}?{radio_query(topology, radio)}"]
                radio_ips[seg.name] = seg.members[spec.name]
        launches[spec.name] = NodeLaunch(spec.name, key, plan.control_ip(spec.name), args, links, lan_ip, impl,
                                         radio_ips)
    return launches


def radio_query(topology: Topology, radio: str) -> str:
    """The peer/inbound URI query of ``radio``'s links: its class, with the whole shape applied by the node's
    transport (a radio's segment is shared: the kernel cannot shape one pair on it)."""
    cls = topology.radios[radio].link_class or radio
    return peer_params(cls, userspace_part(resolve_class(cls, topology.classes or None).shape, "userspace"))


def implementation_of(spec: NodeSpec) -> Implementation:
    """Who runs ``spec``: ``reference`` when its variant is the Pinecone reference's (``pinecone``)."""
    return "reference" if spec.variant is not None and spec.variant_spec().implementation == "reference" else "snekbed"


def node_args(spec: NodeSpec, *, seed: int | str, run_id: str, listen: str, admin: str, metrics: str,
              events: str) -> list[str]:
    """The command line of ``spec``'s node without its peers: ``snekbed node``'s options, or the same options of
    the reference node (docs/interop.md, "Options"), which takes them without the ``node`` command and its
    variant as the rules it runs (``--variant snek[,knob=..]``). The key seed is ``NodeSpec.seed_bytes(seed)``,
    the userspace shaper's seed derives from (seed, "shaping", name) (the reference node accepts and ignores it).
    A node's ``adversary`` is its ``--adversary``; a reference node's that is not ``drop`` (a run-wide ``pinecone``
    written into the spec: ``Topology.with_variant``) raises DockerBackendError, as the reference node would exit 2."""
    reference = implementation_of(spec) == "reference"
    shaping_seed = int.from_bytes(derive_seed(seed, "shaping", spec.name)[:4], "big")
    args = ["--listen", listen, "--admin", admin, "--metrics", metrics, "--key-seed", spec.seed_bytes(seed).hex(),
            "--events", events, "--run-id", run_id, "--name", spec.name, "--shaping-seed", str(shaping_seed),
            "--backoff-max-s", str(REDIAL_MAX_S)]
    if spec.variant is not None or spec.knobs:
        variant = spec.variant_spec()
        args += ["--variant", str(variant.as_protocol() if reference else variant)]
    if spec.adversary is not None:  # adversarial from its start (orchestrator.model.adversary_spec)
        if reference and (why := reference_refusal(spec.adversary)) is not None:
            raise DockerBackendError(f"node {spec.name} runs {spec.variant}: {why}")
        args += ["--adversary", spec.adversary]
    return args if reference else ["node", *args]


def _uri_query(impl: Implementation, link_class: str, userspace: LinkShape) -> str:
    """A peer/inbound URI's query for a node of ``impl``: the reference node's carries the class only (no shaper:
    :func:`unapplied_shaping` reports what it leaves out)."""
    return peer_params(link_class, userspace if impl == "snekbed" else LinkShape())


def unapplied_shaping(topology: Topology, shaping_backend: ShapingBackend) -> list[dict[str, Any]]:
    """Every link end of a reference node whose shape has a part that only a snekbed node's transport applies on
    ``shaping_backend`` (links with a host node: userspace at both ends): that part is not applied to what the
    reference node sends on the link (the other end's direction is shaped as usual). One entry per such end:
    ``link`` (index), ``node``, ``peer``, ``class``, ``unapplied`` {field: value} and ``why``. Pure."""
    hosts = {n.name for n in topology.nodes if n.host}
    refs = {n.name for n in topology.nodes if not n.host and implementation_of(n) == "reference"}
    out: list[dict[str, Any]] = []
    for i, link in enumerate(topology.links):
        backend: ShapingBackend = "userspace" if {link.a, link.b} & hosts else shaping_backend
        part = userspace_part(link_shape(topology, i), backend)
        fields = {k: v for k, v in part.model_dump().items() if v}
        for node, peer in ((link.a, link.b), (link.b, link.a)):
            if node in refs and fields:
                out.append({"link": i, "node": node, "peer": peer, "class": link.link_class, "unapplied": fields,
                            "why": f"{node} runs the reference node, which has no userspace shaper, and the "
                                   f"{backend} shaping backend leaves {', '.join(fields)} to the node: what {node} "
                                   f"sends to {peer} is not shaped so (what {peer} sends is)"})  # fmt: skip
    return out


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
        if implementation_of(spec) == "reference":
            raise DockerBackendError(f"host node {spec.name} runs {spec.variant}: a host node runs `snekbed node`; "
                                     "run the reference node in a container (drop `host: true`)")
        seed_bytes = spec.seed_bytes(seed)
        args = node_args(spec, seed=seed, run_id=run_id, listen=spec.listen or "off", admin=admin[spec.name],
                         metrics="off", events=str(events_dir.absolute() / f"{spec.name}.jsonl"))  # fmt: skip
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
