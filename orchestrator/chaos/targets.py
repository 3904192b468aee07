"""Resolve a step's target (a node name or a role) on the live graph, deterministically.

Roles (orchestrator.chaos.scenario.NODE_ROLES):

* ``root``: the root most live nodes of the largest component name (once
  converged: its highest key);
* ``root_children``: nodes whose parent is that root (``count`` of them, by name);
* ``highest_key`` / ``lowest_key``: over live nodes;
* ``random``: ``count`` nodes drawn with the run's seeded generator;
* ``max_degree``: the live node with most live links (ties: by name);
* ``cut_vertex``: the articulation point whose removal cuts off most nodes;
* ``min_cut_side``: the smaller side of a minimum edge cut of the largest component;
* ``all``: every live node.

Link roles: ``bridge`` (the bridge whose removal cuts off most nodes), ``random``,
``root_link`` (a link of the root, to its lowest-named neighbour).
Every failure raises :class:`TargetError` saying why (e.g. the graph has no cut vertex).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import networkx as nx

__all__ = ["TargetError", "TargetView", "balanced_halves", "min_cut_groups", "resolve_link", "resolve_nodes",
           "sample_pairs", "with_focus"]


class TargetError(ValueError):
    """A target cannot be resolved on the current graph."""


class TargetView:
    """The live graph plus each live node's key, root key and parent name."""

    def __init__(
        self,
        graph: nx.Graph,
        keys: Mapping[str, bytes],
        roots: Mapping[str, bytes] | None = None,
        parents: Mapping[str, str | None] | None = None,
    ) -> None:
        self.graph = graph
        self.keys = dict(keys)
        self.roots = dict(roots or {})
        self.parents = dict(parents or {})
        self.by_key = {k: n for n, k in self.keys.items()}

    def live(self) -> list[str]:
        return sorted(n for n in self.graph.nodes if n in self.keys)

    def largest_component(self) -> set[str]:
        comps = sorted(nx.connected_components(self.graph.subgraph(self.live())), key=lambda c: (-len(c), min(c)))
        if not comps:
            raise TargetError("no live node")
        return set(comps[0])

    def root(self) -> str:
        comp = self.largest_component()
        named = Counter(self.roots[n] for n in comp if n in self.roots)
        if named:
            key = max(named.items(), key=lambda kv: (kv[1], kv[0]))[0]
            if key in self.by_key and self.by_key[key] in comp:
                return self.by_key[key]
        return max(comp, key=lambda n: self.keys[n])


def resolve_nodes(target: str, view: TargetView, rng: random.Random, count: int = 1) -> list[str]:
    """The node names ``target`` means now. A plain name must be a node of the graph."""
    live = view.live()
    if not live:
        raise TargetError("no live node to target")
    if target == "root":
        return [view.root()]
    if target == "root_children":
        root = view.root()
        kids = sorted(n for n in live if view.parents.get(n) == root)
        if not kids:
            raise TargetError(f"the root {root} has no children")
        return kids[:count] if count > 1 else kids[:1]
    if target == "highest_key":
        return [max(live, key=lambda n: view.keys[n])]
    if target == "lowest_key":
        return [min(live, key=lambda n: view.keys[n])]
    if target == "random":
        return sorted(rng.sample(live, min(count, len(live))))
    if target == "all":
        return live
    g = view.graph.subgraph(live)
    if target == "max_degree":
        return [min(live, key=lambda n: (-g.degree(n), n))]
    if target == "cut_vertex":
        best, cut_off = None, 0
        for v in sorted(nx.articulation_points(g)):
            rest = g.subgraph(set(g.nodes) - {v})
            sizes = sorted(len(c) for c in nx.connected_components(rest))
            lost = sum(sizes[:-1])
            if lost > cut_off:
                best, cut_off = v, lost
        if best is None:
            raise TargetError("the live graph has no cut vertex")
        return [best]
    if target == "min_cut_side":
        return sorted(min_cut_groups(view)[0])
    if target not in view.graph.nodes and target not in view.keys:
        raise TargetError(f"unknown node {target!r}")
    return [target]


def min_cut_groups(view: TargetView) -> tuple[set[str], set[str]]:
    """Two sides of a minimum edge cut of the largest component (smaller side first); the rest join side 2."""
    comp = view.largest_component()
    if len(comp) < 2:
        raise TargetError("the largest component has a single node: nothing to cut")
    # networkx's cut depends on set iteration order; with integer labels (in name order) that order is the
    # same in every process, so a seed gives the same cut everywhere (string hashes are randomized per process)
    names = sorted(comp)
    g = nx.relabel_nodes(view.graph.subgraph(comp), {n: i for i, n in enumerate(names)})
    h = nx.Graph()
    h.add_nodes_from(range(len(names)))
    h.add_edges_from(sorted(tuple(sorted(e)) for e in g.edges))
    cut = nx.minimum_edge_cut(h)
    h.remove_edges_from(cut)
    parts = sorted(nx.connected_components(h), key=lambda c: (len(c), min(c)))
    small = {names[i] for i in parts[0]}
    return small, set(view.live()) - small


def balanced_halves(view: TargetView, rng: random.Random, tries: int = 8) -> tuple[set[str], set[str]]:
    """Two halves of the live graph (sizes differ by at most one where possible) that stay connected inside and
    cut few links: the best of a few seeded Kernighan-Lin bisections and a breadth-first half grown from every
    node, judged by (components left, imbalance, links cut)."""
    g = view.graph.subgraph(view.live())
    nodes = sorted(g.nodes)
    if len(nodes) < 2:
        raise TargetError("fewer than two live nodes: nothing to split")
    half = len(nodes) // 2
    cands: list[frozenset[str]] = []
    for _ in range(tries):
        a, _b = nx.algorithms.community.kernighan_lin_bisection(g, seed=rng.randrange(2**32))
        cands.append(frozenset(a))
    for start in nodes:
        order = list(nx.bfs_tree(g, start))
        if len(order) >= half:
            cands.append(frozenset(order[:half]))

    def score(a: frozenset[str]) -> tuple:
        b = set(nodes) - a
        comps = nx.number_connected_components(g.subgraph(a)) + nx.number_connected_components(g.subgraph(b))
        cut = sum(1 for x, y in g.edges if (x in a) != (y in a))
        return (comps, abs(len(a) - len(b)), cut, sorted(a))

    best = min(cands, key=score)
    rest = set(nodes) - best
    return (set(best), rest) if min(best) < min(rest) else (rest, set(best))


def resolve_link(link: tuple[str, str] | str, view: TargetView, rng: random.Random) -> tuple[str, str]:
    """The (a, b) pair a link target means now."""
    live = view.live()
    g = view.graph.subgraph(live)
    if isinstance(link, tuple) or isinstance(link, list):
        a, b = link
        if not view.graph.has_edge(a, b):
            raise TargetError(f"no link between {a!r} and {b!r}")
        return (a, b)
    edges = sorted(tuple(sorted(e)) for e in g.edges)
    if not edges:
        raise TargetError("the live graph has no link")
    if link == "random":
        return rng.choice(edges)
    if link == "root_link":
        root = view.root()
        nbrs = sorted(g.neighbors(root))
        if not nbrs:
            raise TargetError(f"the root {root} has no link")
        return (root, nbrs[0])
    if link == "bridge":
        best, cut_off = None, 0
        for a, b in sorted(tuple(sorted(e)) for e in nx.bridges(g)):
            h = nx.Graph(g)
            h.remove_edge(a, b)
            lost = min(len(nx.node_connected_component(h, a)), len(nx.node_connected_component(h, b)))
            if lost > cut_off:
                best, cut_off = (a, b), lost
        if best is None:
            raise TargetError("the live graph has no bridge")
        return best
    raise TargetError(f"unknown link role {link!r}")


def sample_pairs(graph: nx.Graph, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Up to ``n`` ordered pairs of distinct nodes that share a component of ``graph``, drawn with ``rng``."""
    comps = [sorted(c) for c in nx.connected_components(graph) if len(c) > 1]
    total = sum(len(c) * (len(c) - 1) for c in comps)
    if total == 0:
        return []
    if total <= 4 * n:
        cands = [(a, b) for c in comps for a in c for b in c if a != b]
        return rng.sample(cands, min(n, len(cands)))
    out: set[tuple[str, str]] = set()
    weights = [len(c) * (len(c) - 1) for c in comps]
    while len(out) < n:
        c = rng.choices(comps, weights)[0]
        a, b = rng.sample(c, 2)
        out.add((a, b))
    return sorted(out)


def with_focus(graph: nx.Graph, pairs: list[tuple[str, str]], focus: tuple[str, ...],
               turns: int = 1) -> list[tuple[str, str]]:  # fmt: skip
    """The mesh's turns with ``focus``: every pair to and from each focus node and each other node of its
    component (``(v, x), (x, v)``, x by name, each ``turns`` times in a row: a pair's pings alternate modes, so
    with ``turns`` the number of modes each focus pair is pinged in every mode within the same second)
    alternates with ``pairs``, the shorter list repeating: a window of any length holds about as many pings of
    the focus nodes as others, in every mode (a victim's reachability is measured in every attack window, not
    only when the rotation happens to reach its pairs). ``pairs`` itself without focus."""
    extra = [p for v in focus if v in graph for x in sorted(nx.node_connected_component(graph, v) - {v})
             for p in ((v, x), (x, v)) * turns]  # fmt: skip
    seen = set(extra)
    rest = [p for p in pairs if p not in seen]
    if not extra or not rest:
        return extra or list(pairs)
    return [p for i in range(max(len(extra), len(rest))) for p in (extra[i % len(extra)], rest[i % len(rest)])]
