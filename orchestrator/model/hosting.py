"""Which backend can host which node: a node whose spec names another implementation than snekbed's router
(``pinecone``, the Pinecone reference: node.core.variants) runs as a program of its own, so only the real-time
backends that start one process per node (Docker, swarm) can host it; the in-process backend runs snekbed's
routers only. Every command that takes a spec asks :func:`in_process_refusal` before it builds anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from node.core.variants import VariantSpec

from orchestrator.model.topology import Topology

__all__ = ["REAL_TIME_BACKENDS", "IN_PROCESS_REFUSAL", "HostingError", "reference_nodes", "in_process_refusal",
           "require_in_process", "mobility_refusal"]

#: backends that run every node as a process of its own, in real time: they can host the reference
REAL_TIME_BACKENDS = ("docker", "swarm")
#: what an in-process run says of a node it cannot host
IN_PROCESS_REFUSAL = "the reference runs only on a real-time backend"
_SHOWN = 6


class HostingError(ValueError):
    """A backend cannot host a node of the run (the message names them and says which backends can)."""


def reference_nodes(specs: Mapping[str, VariantSpec]) -> list[str]:
    """The names (keys of ``specs``) whose spec is run by the Pinecone reference, sorted."""
    return sorted(name for name, spec in specs.items() if spec.implementation == "reference")


def in_process_refusal(specs: Mapping[str, VariantSpec], backend: str = "inproc") -> str | None:
    """None when the in-process ``backend`` can run every node of ``specs`` (node name -> spec); else why not,
    naming the nodes."""
    if backend in REAL_TIME_BACKENDS:
        return None
    names = reference_nodes(specs)
    if not names:
        return None
    shown = ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    spec = specs[names[0]].name
    return (f"node{'s' if len(names) > 1 else ''} {shown} run{'' if len(names) > 1 else 's'} {spec}, the Pinecone "
            f"reference implementation (docs/interop.md): {IN_PROCESS_REFUSAL} (--backend "
            f"{' or '.join(REAL_TIME_BACKENDS)}), not on --backend {backend}")


def require_in_process(specs: Mapping[str, VariantSpec], backend: str = "inproc") -> None:
    """Raise HostingError with :func:`in_process_refusal`'s reason when ``backend`` cannot run every node."""
    why = in_process_refusal(specs, backend)
    if why is not None:
        raise HostingError(why)


def mobility_refusal(radios: Iterable[str], what: str) -> str | None:
    """None when the topology declares no ``radios``; else why ``what`` (``--backend swarm``, a compose file, ...)
    cannot run it: only ``snekbed sim``, ``up`` and ``chaos`` in process and on Docker move nodes (docs/mobility.md)."""
    names = sorted(radios)
    if not names:
        return None
    return (f"the topology's nodes move and are linked by radios ({', '.join(names)}): only these runs move "
            f"them (snekbed sim, snekbed up --backend inproc|docker, snekbed chaos --backend inproc|docker; "
            f"docs/mobility.md), not {what}")


def radio_carriers(topology: Topology) -> dict[str, list[str]]:
    """Each radio's carriers (docs/mobility.md): the nodes it names, else every node with a position or a
    mobility model, in the topology's order."""
    placed = [n.name for n in topology.nodes if n.position is not None or n.mobility is not None]
    return {name: [n for n in placed if r.nodes is None or n in r.nodes] for name, r in (topology.radios or {}).items()}


def docker_radio_refusal(topology: Topology) -> str | None:
    """None, or why Docker cannot move ``topology``'s nodes: a host node or a Pinecone reference node on a radio
    (Docker makes and closes radio peerings through snekbed's admin API, which neither has)."""
    on_radio = {n for members in radio_carriers(topology).values() for n in members}
    odd = sorted(n.name for n in topology.nodes
                 if n.name in on_radio and (n.host or n.variant_spec().implementation == "reference"))
    if not odd:
        return None
    return (f"{', '.join(odd)}: a host node or a Pinecone reference node cannot be on a radio on Docker (its "
            "peerings are made through snekbed's admin API)")
