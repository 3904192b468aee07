"""Topology generators: functions that return a :class:`~orchestrator.model.topology.Topology`.

Nodes are named ``n01``, ``n02``, ... (zero-padded to at least two digits, wider
when there are 100 or more nodes) so names sort in creation order. Every
generator takes ``link_class`` (default ``"lan"``) for its links, except
:func:`mesh_mixed`, which mixes classes on purpose. Random generators take a
``seed`` and give the same topology for the same arguments on every run and
platform (they use :class:`random.Random`, not networkx's global state).

All functions raise ValueError for impossible sizes (the message names the
parameter) and TopologyError if ``link_class`` is unknown.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence

import networkx as nx

from orchestrator.model.topology import Topology

__all__ = ["node_names", "from_graph", "line", "ring", "grid", "tree", "random_graph", "mesh_mixed", "geometric",
           "preferential", "GENERATORS", "generate", "mean_degree_of"]


def node_names(n: int) -> list[str]:
    """``["n01", ..., "nNN"]``; at least two digits, more for n >= 100."""
    width = max(2, len(str(n)))
    return [f"n{i:0{width}d}" for i in range(1, n + 1)]


def _need(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _build(name: str, n: int, edges: Iterable[tuple[int, int]], link_class: str | Sequence[str]) -> Topology:
    """A Topology over ``n`` generated names from 0-based index pairs; ``link_class`` may be per edge."""
    names = node_names(n)
    edges = list(edges)
    classes = [link_class] * len(edges) if isinstance(link_class, str) else list(link_class)
    links = [{"a": names[i], "b": names[j], "class": c} for (i, j), c in zip(edges, classes, strict=True)]
    return Topology.from_data({"name": name, "nodes": [{"name": x} for x in names], "links": links})


def from_graph(g: nx.Graph, *, name: str, link_class: str = "lan") -> Topology:
    """A Topology from any networkx graph (nodes renamed n01.. in ``g``'s node order). Raises TopologyError."""
    index = {v: i for i, v in enumerate(g.nodes)}
    return _build(name, len(index), ((index[u], index[v]) for u, v in g.edges), link_class)


def line(n: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """A path n01 - n02 - ... - nNN (n >= 1)."""
    _need("n", n, 1)
    return _build(name or f"line-{n}", n, ((i, i + 1) for i in range(n - 1)), link_class)


def ring(n: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """A cycle of n >= 3 nodes: the line plus nNN - n01."""
    _need("n", n, 3)
    return _build(name or f"ring-{n}", n, ((i, (i + 1) % n) for i in range(n)), link_class)


def grid(w: int, h: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """A w x h 4-neighbour grid, row-major: node (row r, column c) is number r*w + c + 1."""
    _need("w", w, 1)
    _need("h", h, 1)
    edges = []
    for r in range(h):
        for c in range(w):
            i = r * w + c
            if c + 1 < w:
                edges.append((i, i + 1))
            if r + 1 < h:
                edges.append((i, i + w))
    return _build(name or f"grid-{w}x{h}", w * h, edges, link_class)


def tree(depth: int, fanout: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """A balanced tree: n01 is the root, each inner node has ``fanout`` children, ``depth`` levels below the root.

    Nodes are numbered breadth first; the total is (fanout**(depth+1) - 1) / (fanout - 1).
    """
    _need("depth", depth, 0)
    _need("fanout", fanout, 1)
    g = nx.balanced_tree(fanout, depth)
    return _build(name or f"tree-{depth}x{fanout}", g.number_of_nodes(), sorted(g.edges), link_class)


def _random_spanning_tree(n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Each node in a shuffled order attaches to a random earlier one: connected, uniform-ish."""
    order = list(range(n))
    rng.shuffle(order)
    return [tuple(sorted((order[k], order[rng.randrange(k)]))) for k in range(1, n)]  # type: ignore[misc]


def random_graph(
    n: int, degree_or_p: int | float, seed: int, *, link_class: str = "lan", name: str | None = None
) -> Topology:
    """A connected random graph, reproducible from ``seed``.

    A random spanning tree guarantees connectivity; extra distinct links are then
    added. ``degree_or_p`` as an int is the target mean degree (the graph gets
    ``max(n-1, round(n*degree/2))`` links, capped at the complete graph); as a
    float in (0, 1] it is the probability of each other pair being linked.
    Raises ValueError for n < 1, a degree < 1 or a probability outside (0, 1].
    """
    _need("n", n, 1)
    if isinstance(degree_or_p, bool) or not isinstance(degree_or_p, int | float):
        raise ValueError(f"degree_or_p must be an int degree or a float probability, got {degree_or_p!r}")
    rng = random.Random(f"snekbed-random-graph/{n}/{degree_or_p!r}/{seed}")
    edges = set(_random_spanning_tree(n, rng))
    all_pairs = n * (n - 1) // 2
    if isinstance(degree_or_p, int):
        if degree_or_p < 1:
            raise ValueError(f"degree_or_p as a mean degree must be at least 1, got {degree_or_p}")
        target = min(all_pairs, max(n - 1, round(n * degree_or_p / 2)))
        rest = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in edges]
        edges.update(rng.sample(rest, target - len(edges)))
    else:
        if not 0 < degree_or_p <= 1:
            raise ValueError(f"degree_or_p as a probability must be in (0, 1], got {degree_or_p}")
        edges.update((i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < degree_or_p)
    label = f"d{degree_or_p}" if isinstance(degree_or_p, int) else f"p{degree_or_p:g}"
    return _build(name or f"random-{n}-{label}-s{seed}", n, sorted(edges), link_class)


def geometric(n: int, mean_degree: float, seed: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """A connected random geometric graph: ``n`` points uniform in the unit square, linked when closer than the
    radius that gives about ``mean_degree`` links per node (a radio-range model: phones and laptops in a
    city). Built in O(n) with a cell grid, so 10 000 nodes take well under a second.

    Components the radius leaves apart are joined to the largest one by a link between their closest pair of
    points (an extra hop where a real network would have a gap), so the graph is connected; the result's mean
    degree is therefore slightly above ``mean_degree``. Raises ValueError for n < 2 or a degree outside
    (0, n-1].
    """
    _need("n", n, 2)
    if not 0 < mean_degree <= n - 1:
        raise ValueError(f"mean_degree must be in (0, {n - 1}], got {mean_degree}")
    rng = random.Random(f"snekbed-geometric/{n}/{mean_degree:g}/{seed}")
    pts = [(rng.random(), rng.random()) for _ in range(n)]
    # expected degree of a point (ignoring the square's border) is n * pi * r^2
    r = math.sqrt(mean_degree / (math.pi * n))
    cells: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(pts):
        cells.setdefault((int(x / r), int(y / r)), []).append(i)
    edges: set[tuple[int, int]] = set()
    r2 = r * r
    for (cx, cy), members in cells.items():
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for j in cells.get((cx + dx, cy + dy), ()):
                    for i in members:
                        if i < j and (pts[i][0] - pts[j][0]) ** 2 + (pts[i][1] - pts[j][1]) ** 2 <= r2:
                            edges.add((i, j))
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    parts = sorted(nx.connected_components(g), key=lambda c: (-len(c), min(c)))
    giant = list(parts[0])
    for part in parts[1:]:
        i, j = min(((a, b) for a in part for b in giant),
                   key=lambda ab: (pts[ab[0]][0] - pts[ab[1]][0]) ** 2 + (pts[ab[0]][1] - pts[ab[1]][1]) ** 2)
        edges.add((min(i, j), max(i, j)))
        giant.extend(part)
    return _build(name or f"geometric-{n}-d{mean_degree:g}-s{seed}", n, sorted(edges), link_class)


def preferential(n: int, mean_degree: int, seed: int, *, link_class: str = "lan", name: str | None = None) -> Topology:
    """An internet-like preferential-attachment graph (Barabasi-Albert): each new node links to
    ``mean_degree // 2`` distinct existing nodes chosen in proportion to their degree, so a few hubs carry many
    links. Connected by construction; mean degree about ``mean_degree``. O(n * degree).
    Raises ValueError for n < 2 or a mean degree below 2.
    """
    _need("n", n, 2)
    _need("mean_degree", mean_degree, 2)
    m = min(mean_degree // 2, n - 1)
    rng = random.Random(f"snekbed-preferential/{n}/{mean_degree}/{seed}")
    # start from a clique of m + 1 nodes (the BA seed), then attach the rest
    edges = {(i, j) for i in range(m + 1) for j in range(i + 1, m + 1)}
    ends = [v for e in edges for v in e]  # every link end once: sampling it is degree-proportional
    for new in range(m + 1, n):
        chosen: set[int] = set()
        while len(chosen) < m:
            chosen.add(ends[rng.randrange(len(ends))])
        for old in sorted(chosen):
            edges.add((old, new))
            ends += (old, new)
    return _build(name or f"preferential-{n}-d{mean_degree}-s{seed}", n, sorted(edges), link_class)


#: the generators `snekbed generate` offers, by name
GENERATORS = ("geometric", "preferential", "random")
#: above this many nodes ``random`` (which enumerates every pair) is refused: the others scale
RANDOM_MAX_NODES = 5000


def generate(kind: str, n: int, mean_degree: float, seed: int, *, link_class: str = "lan",
             name: str | None = None) -> Topology:
    """The connected topology ``snekbed generate KIND`` makes: ``kind`` is one of :data:`GENERATORS`.

    ``preferential`` takes the mean degree rounded down (to an even number, by the generator), ``random`` the
    nearest whole degree (at least 1). Raises ValueError (an unknown kind, an impossible size, ``random`` above
    RANDOM_MAX_NODES nodes), TopologyError (an unknown link class).
    """
    if kind == "geometric":
        return geometric(n, mean_degree, seed, link_class=link_class, name=name)
    if kind == "preferential":
        return preferential(n, int(mean_degree), seed, link_class=link_class, name=name)
    if kind == "random":
        if n > RANDOM_MAX_NODES:
            raise ValueError(f"random enumerates every pair of nodes: use geometric or preferential above "
                             f"{RANDOM_MAX_NODES}")
        return random_graph(n, max(1, round(mean_degree)), seed, link_class=link_class, name=name)
    raise ValueError(f"unknown generator {kind!r} (known: {', '.join(GENERATORS)})")


def mean_degree_of(topology: Topology) -> float:
    """Links per node on average (each link counts at both ends)."""
    return 2 * len(topology.links) / len(topology.node_names)


def mesh_mixed(
    n: int = 12,
    seed: int = 0,
    *,
    site_size: int = 4,
    classes: tuple[str, str, str] = ("lan", "bluetooth", "remote"),
    name: str | None = None,
) -> Topology:
    """A mesh of "sites" that mixes link classes, reproducible from ``seed``.

    Nodes are split into sites of about ``site_size`` consecutive nodes. Inside a
    site the nodes share a LAN (a line of ``classes[0]`` links). One extra
    ``classes[1]`` (bluetooth) link joins two random nodes of each site that are
    not yet neighbours (when the site has 3+ nodes), and one joins each site to
    the next (devices near the border). ``classes[2]`` (remote) links join every
    site to the next one in a ring over the internet, from random members.
    n >= 4 gives at least two sites and all three classes. Raises ValueError.
    """
    _need("n", n, 4)
    _need("site_size", site_size, 2)
    rng = random.Random(f"snekbed-mesh-mixed/{n}/{site_size}/{seed}")
    n_sites = max(2, round(n / site_size))
    bounds = [round(k * n / n_sites) for k in range(n_sites + 1)]
    sites = [list(range(bounds[k], bounds[k + 1])) for k in range(n_sites)]
    lan, bluetooth, remote = classes
    edges: list[tuple[int, int]] = []
    kinds: list[str] = []

    def link(i: int, j: int, kind: str) -> None:
        if i != j and (min(i, j), max(i, j)) not in edges:
            edges.append((min(i, j), max(i, j)))
            kinds.append(kind)

    for site in sites:
        for i, j in itertools.pairwise(site):
            link(i, j, lan)
    for site in sites:
        shortcuts = [(i, j) for i in site for j in site if j > i + 1]
        if shortcuts:
            link(*rng.choice(shortcuts), bluetooth)
    for k, site in enumerate(sites[:-1]):
        link(site[-1], sites[k + 1][0], bluetooth)
    for k, site in enumerate(sites if n_sites > 2 else sites[:1]):
        nxt = sites[(k + 1) % n_sites]
        free = [(i, j) for i in site for j in nxt if (min(i, j), max(i, j)) not in edges]
        link(*rng.choice(free), remote)
    order = sorted(range(len(edges)), key=lambda e: edges[e])
    return _build(name or f"mesh-mixed-{n}-s{seed}", n, [edges[e] for e in order], [kinds[e] for e in order])
