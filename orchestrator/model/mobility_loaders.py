"""Read the ns-2 traces a topology's nodes replay (``mobility: {model: trace, file: ...}``; docs/mobility.md).

A trace's path is relative to the topology file's folder (or to the working directory for a topology read from
text). Each file is read and parsed once (orchestrator.model.ns2_trace), knowing which ns-2 node ids the topology
maps to it, so a line naming another id is an error. Every problem is a TopologyError: a file that cannot be
read names the topology's file, line and field (``nodes[3].mobility.file``); a problem inside the trace names the
trace's file, line and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.model.mobility_spec import TraceSpec, trace_id
from orchestrator.model.ns2_trace import TraceError, TraceTrack, parse_ns2_trace
from orchestrator.model.topology import Loc, Topology, TopologyError, format_loc

__all__ = ["trace_path", "read_traces"]


def trace_path(topo: Topology, file: str) -> Path:
    """Where the trace ``file`` named by ``topo`` is."""
    path = Path(file)
    if path.is_absolute() or topo.source is None:
        return path
    return Path(topo.source).parent / path


def read_traces(topo: Topology, lines: Mapping[Loc, int] | None = None) -> dict[str, dict[int, TraceTrack]]:
    """Every trace ``topo``'s nodes replay, by the file name as the topology spells it, then by ns-2 node id.
    ``lines`` (the topology's location -> line table) places the errors about the topology's own fields.
    Raises TopologyError."""
    users: dict[str, dict[int, tuple[int, str]]] = {}  # file -> ns-2 id -> (node index, node name)
    for i, node in enumerate(topo.nodes):
        if isinstance(node.mobility, TraceSpec):
            users.setdefault(node.mobility.file, {})[trace_id(i, node.mobility)] = (i, node.name)
    out: dict[str, dict[int, TraceTrack]] = {}
    for file, ids in users.items():
        first = min(i for i, _ in ids.values())
        where: Loc = ("nodes", first, "mobility", "file")
        path = trace_path(topo, file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise TopologyError(f"cannot read the trace {str(path)!r}: {why}", file=topo.source,
                                line=(lines or {}).get(where), field=format_loc(where)) from None
        try:
            tracks = parse_ns2_trace(text, file=str(path), nodes={k: name for k, (_, name) in ids.items()})
        except TraceError as exc:
            raise TopologyError(exc.message, file=exc.file, line=exc.line, field=exc.field) from None
        for k, (i, name) in sorted(ids.items()):
            if k not in tracks:
                loc: Loc = ("nodes", i, "mobility")
                raise TopologyError(f"the trace {str(path)!r} has no node {k} for {name!r}", file=topo.source,
                                    line=(lines or {}).get(loc), field=format_loc(loc))
        out[file] = tracks
    return out
