"""The links of a running swarm run, for ``snekbed links check``: each end's task container, host and address.

On a swarm the addresses are the swarm's (a task's address on each link overlay is in its
``NetworksAttachments``) and a task's container lives on the engine of the swarm node that runs
it (:mod:`orchestrator.backends.swarm_engines`), so the ends are found from the manager's task
list, not from one engine's containers as in :mod:`orchestrator.backends.docker_links`. Nothing
here needs the host's namespaces: a swarm run shapes in userspace only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.links import LinkShape
from orchestrator.backends.docker_net import LABEL_ROLE, LABEL_RUN, link_from_labels
from orchestrator.backends.shaping import Endpoint
from orchestrator.backends.swarm import SwarmBackend
from orchestrator.backends.swarm_engines import SwarmEngines

__all__ = ["SwarmLinks", "swarm_links"]


@dataclass(frozen=True, slots=True)
class SwarmLinks:
    """The running link ends of a swarm run, the host each node's task runs on, and how to reach its container."""

    endpoints: list[Endpoint]
    hosts: dict[str, str]  # node -> swarm node hostname
    container: Callable[[Endpoint], Any]  # an end -> its SDK container, on the engine running it


def swarm_links(run_id: str, manager: Any, shape_of: Callable[[int, str], LinkShape], *,
                engines: SwarmEngines | None = None) -> SwarmLinks:
    """Every link end of ``run_id`` whose node's task runs (a link with one end down has that end only).

    ``shape_of(index, class)`` gives a link's effective shape (the run's topology). Raises
    SwarmEngineError only when a container is asked for on a host no engine is known for.
    """
    swarm = SwarmBackend(manager)
    engines = engines or SwarmEngines(manager)
    placed = {n: p for n, p in swarm.placements(run_id).items() if p.get("container")}
    out: list[Endpoint] = []
    for net in manager.api.networks(filters={"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_ROLE}=link"]}):
        index, a, b, cls = link_from_labels(net.get("Labels") or {})
        ips = {n: _address(placed[n], net["Name"]) for n in (a, b) if n in placed}
        for node, ip in ips.items():
            if not ip:
                continue  # cut off this overlay (a link fault): no address on it now
            peer = b if node == a else a
            out.append(Endpoint(link=str(index), link_class=cls, shape=shape_of(index, cls), node=node, pid=0, ip=ip,
                                peer=peer, peer_ip=ips.get(peer, ""), container_id=str(placed[node]["container"])))
    hosts = {n: str(p.get("host", "")) for n, p in placed.items()}
    out.sort(key=lambda e: (int(e.link), e.node))
    return SwarmLinks(out, hosts, lambda ep: engines.container(hosts[ep.node], ep.container_id))


def _address(placement: dict[str, Any], network: str) -> str:
    return str((placement.get("addresses") or {}).get(network, "")).split("/", 1)[0]
