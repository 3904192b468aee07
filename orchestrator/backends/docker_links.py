"""The links of a running Docker run, seen from the host: each link end's container, interface and address,
and shaping one end inside its container's network namespace.

Everything is found from the engine alone (labels and network inspection), so it works from any
process; an interface is found by its address inside the container's namespace (``nsenter``), never
by ethN order, so a reconnected (renamed) interface is still found.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contract.links import LinkShape
from netem.plan import ShapingBackend, iptables_check_argv, plan_link
from orchestrator.backends.docker_net import LABEL_NODE, LABEL_ROLE, LABEL_RUN, DockerBackendError, link_from_labels
from orchestrator.backends.shaping import ShapingError
from orchestrator.backends.shaping import find_dev as _netem_find_dev
from orchestrator.backends.shaping import nsenter_run as _nsenter

if TYPE_CHECKING:
    import docker

__all__ = ["LinkEndpoint", "link_endpoints", "find_dev", "shape_endpoint"]


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
        import docker  # the SDK loads only here: importing this module (tools.capture does) needs no docker extra

        client = docker.from_env()
    api = client.api
    nodes: dict[str, tuple[str, int]] = {}
    for c in api.containers(filters={"label": f"{LABEL_RUN}={run_id}"}):
        name = c["Labels"].get(LABEL_NODE)
        if name:
            nodes[c["Id"]] = (name, int(api.inspect_container(c["Id"])["State"]["Pid"]))
    out: list[LinkEndpoint] = []
    for summary in api.networks(filters={"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}=link"]}):
        net = api.inspect_network(summary["Id"])
        index, a, b, cls = link_from_labels(net.get("Labels") or {})
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
            out.append(LinkEndpoint(index, cls, name, cid, pid, dev, ip, peer, peer_ip))
    return sorted(out, key=lambda e: (e.link_index, e.node))


def _members(net: dict[str, Any]) -> Iterable[tuple[str, str]]:
    for cid, ep in (net.get("Containers") or {}).items():
        ip = str(ep.get("IPv4Address", "")).split("/", 1)[0]
        if ip:
            yield cid, ip


def _planned_ips(subnet: str) -> list[str]:
    """The endpoint addresses docker_net plans in a link /29: .2 for ``a``, .3 for ``b``."""
    try:
        hosts = list(ipaddress.IPv4Network(subnet).hosts())
    except ValueError:
        return []
    return [str(h) for h in hosts[1:3]]
