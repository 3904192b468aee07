"""What the page draws, live or replayed: the graph once, then one *frame* per moment.

The graph document (:func:`graph_doc`) holds the topology's nodes (name, key), its links
(endpoints, class) and the layout. A frame (:func:`frame_doc`) holds, at one instant, each
node's status and its root, parent and descending neighbour (names, or ``?`` + a key prefix
for a key that is not in the topology), each link's status, and the observer's verdict:
live nodes, connected components (each up node's ``component``: 0 for the biggest), the distinct roots, and whether the tree and the snake
have converged (``orchestrator.model.observe.check_convergence``, the rule every backend uses).

Node status: ``up``; ``paused`` (frozen: counts as gone); ``dead`` (killed or stopped);
``absent`` (not started yet, e.g. a node that joins later). Link status: ``up``; ``cut`` (a
partition or link-down cut it); ``down`` (an end is not up); ``absent`` (joins later);
``unpeered`` (live runs only: both ends are up and the link is not cut, yet neither end
reports the peering).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from orchestrator.model.observe import NodeView, check_convergence
from orchestrator.tools.view.layout import layout

__all__ = ["NodeState", "GraphInfo", "graph_doc", "frame_doc", "link_id", "STATUSES", "LINK_STATUSES"]

STATUSES = ("up", "paused", "dead", "absent")
LINK_STATUSES = ("up", "cut", "down", "absent", "unpeered")


def link_id(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node at one instant; keys are lowercase hex."""

    status: str = "absent"
    root: str | None = None
    root_seq: int | None = None
    parent: str | None = None
    descending: str | None = None
    coords: tuple[int, ...] = ()

    @classmethod
    def from_state(cls, doc: Mapping[str, Any], status: str = "up") -> NodeState:
        """From a ``GET /state`` document (or ``Router.state``)."""
        root = doc.get("root") or {}
        return cls(status, root.get("key"), root.get("sequence"), doc.get("parent"), doc.get("descending"),
                   tuple(doc.get("coords") or ()))


@dataclass
class GraphInfo:
    """The topology as the page sees it; built once per run."""

    name: str
    nodes: list[str]
    keys: dict[str, str]  # name -> key hex
    links: list[tuple[str, str, str]]  # (a, b, class), in topology order
    positions: dict[str, tuple[float, float]] = field(default_factory=dict)
    names_by_key: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.names_by_key = {k: n for n, k in self.keys.items()}
        if not self.positions:
            g = nx.Graph()
            g.add_nodes_from(self.nodes)
            g.add_edges_from((a, b) for a, b, _ in self.links if a != b)
            self.positions = layout(g)

    @classmethod
    def from_topology_doc(cls, doc: Mapping[str, Any], keys: Mapping[str, str]) -> GraphInfo:
        """From a run's ``topology.json`` document and ``meta.json`` ``nodes`` (name -> key)."""
        nodes = [str(n["name"]) for n in doc.get("nodes") or []]
        links = [(str(x["a"]), str(x["b"]), str(x.get("class") or "lan")) for x in doc.get("links") or []]
        return cls(str(doc.get("name") or "topology"), nodes, {n: str(keys.get(n) or "") for n in nodes}, links)

    def label(self, key: str | None) -> str | None:
        """The node name of ``key``, ``?`` + its first 8 hex digits if it is not ours, None for None."""
        if key is None:
            return None
        return self.names_by_key.get(key) or f"?{key[:8]}"


def graph_doc(graph: GraphInfo, *, mode: str, run_id: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The static part of the page: nodes with positions and keys, links with classes."""
    classes = sorted({c for _, _, c in graph.links})
    return {
        "run_id": run_id,
        "mode": mode,
        "topology": graph.name,
        "nodes": [{"name": n, "key": graph.keys.get(n, ""), "x": graph.positions[n][0], "y": graph.positions[n][1]}
                  for n in graph.nodes],
        "links": [{"a": a, "b": b, "class": c} for a, b, c in graph.links],
        "classes": classes,
        **(dict(extra) if extra else {}),
    }


def frame_doc(t: float, graph: GraphInfo, states: Mapping[str, NodeState], *, cut: Iterable[frozenset[str]] = (),
              absent_links: Iterable[frozenset[str]] = (),
              peered: set[frozenset[str]] | None = None,
              extra_links: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """One moment: node states by name, link statuses in topology order, and the verdict.

    ``cut``: links cut by the run's faults; ``absent_links``: links not created yet; ``peered``
    (live runs): the links at least one end reports as a peering; ``extra_links``: links that are not the
    topology's and are up now (the radio links of nodes that move), part of the live graph between up nodes.
    """
    cut_set, absent_set = set(cut), set(absent_links)
    default = NodeState()
    up = {n for n in graph.nodes if states.get(n, default).status == "up"}
    live = nx.Graph()
    live.add_nodes_from(up)
    link_status: list[str] = []
    for a, b, _ in graph.links:
        lid = link_id(a, b)
        if lid in absent_set:
            status = "absent"
        elif lid in cut_set:
            status = "cut"
        elif a not in up or b not in up:
            status = "down"
        else:
            live.add_edge(a, b)
            status = "up" if peered is None or lid in peered else "unpeered"
        link_status.append(status)
    live.add_edges_from((a, b) for a, b in extra_links if a in up and b in up)
    views: dict[str, NodeView] = {}
    for n in up:
        s = states[n]
        if s.root is None or not graph.keys.get(n):
            continue
        views[n] = NodeView(bytes.fromhex(graph.keys[n]), bytes.fromhex(s.root),
                            bytes.fromhex(s.descending) if s.descending else None)
    # components, biggest first (ties: by lowest name): 0 is the main one, the others are cut off from it
    comps = sorted((sorted(c) for c in nx.connected_components(live)), key=lambda c: (-len(c), c[0]))
    component = {n: i for i, c in enumerate(comps) for n in c}
    known = live.subgraph(views)
    verdict = check_convergence(known, views)
    complete = len(views) == len(up)
    nodes: dict[str, dict[str, Any]] = {}
    for n in graph.nodes:
        s = states.get(n, default)
        nodes[n] = {"status": s.status, "root": graph.label(s.root), "root_seq": s.root_seq,
                    "parent": graph.label(s.parent), "descending": graph.label(s.descending), "coords": list(s.coords),
                    "component": component.get(n)}
    return {
        "t": round(t, 4),
        "nodes": nodes,
        "links": link_status,
        "live": len(up),
        "components": len(comps),
        "roots": sorted({nodes[n]["root"] for n in up if nodes[n]["root"] is not None}),
        "tree": verdict.tree and complete and bool(up),
        "snake": verdict.snake and complete and bool(up),
        "wrong_root": sorted(verdict.wrong_root),
        "wrong_descending": sorted(verdict.wrong_descending),
    }
