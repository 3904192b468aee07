"""Where each node is drawn: a deterministic force-directed layout in a 1000 x 1000 box.

Fruchterman-Reingold with numpy (all-pairs repulsion, attraction along links, a cooling
temperature), started from a circle in a seeded order so that the same graph always gets
the same picture. Components are laid out one by one and packed into rows, biggest first,
so a partitioned or disconnected topology does not fly apart. 250 nodes take about 1 s;
beyond ``BIG`` nodes the repulsion is computed in blocks so memory stays bounded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

import networkx as nx

__all__ = ["layout", "SIZE"]

SIZE = 1000.0  # the page draws in a viewBox of SIZE x SIZE
MARGIN = 30.0
BIG = 1500
ITERATIONS = 200


def _np():  # type: ignore[no-untyped-def]
    try:
        import numpy  # the optional `view` extra; only `snekbed view` needs it
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("snekbed view lays graphs out with numpy: pip install 'snekbed[view]'",
                                  name=exc.name) from None
    return numpy


def _component_layout(nodes: Sequence[str], edges: Iterable[tuple[str, str]], seed: int) -> dict[str, tuple[float, float]]:
    """Fruchterman-Reingold on one connected component, in the unit square (centred at 0.5, 0.5)."""
    np = _np()
    n = len(nodes)
    if n == 1:
        return {nodes[0]: (0.5, 0.5)}
    index = {name: i for i, name in enumerate(nodes)}
    pairs = np.array([(index[a], index[b]) for a, b in edges if a != b], dtype=np.int64).reshape(-1, 2)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    angle = np.array(order, dtype=float) * (2 * math.pi / n)
    pos = np.stack([0.5 + 0.45 * np.cos(angle), 0.5 + 0.45 * np.sin(angle)], axis=1)
    k = math.sqrt(1.0 / n)
    temp = 0.1
    cool = temp / (ITERATIONS + 1)
    block = n if n <= BIG else 512
    for _ in range(ITERATIONS):
        disp = np.zeros_like(pos)
        for start in range(0, n, block):
            delta = pos[start:start + block, None, :] - pos[None, :, :]  # (b, n, 2)
            dist2 = np.maximum((delta ** 2).sum(axis=2), 1e-9)
            disp[start:start + block] += (delta * (k * k / dist2)[:, :, None]).sum(axis=1)
        if len(pairs):
            d = pos[pairs[:, 0]] - pos[pairs[:, 1]]
            dist = np.maximum(np.sqrt((d ** 2).sum(axis=1)), 1e-9)
            pull = d * (dist / k)[:, None]
            for axis in (0, 1):
                disp[:, axis] += np.bincount(pairs[:, 1], pull[:, axis], n) - np.bincount(pairs[:, 0], pull[:, axis], n)
        length = np.maximum(np.sqrt((disp ** 2).sum(axis=1)), 1e-9)
        pos += disp / length[:, None] * np.minimum(length, temp)[:, None]
        temp -= cool
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    scale = float(max(span))
    pos = (pos - lo) / scale + (1 - span / scale) / 2  # keep the aspect ratio, centre in the unit square
    return {name: (float(pos[i, 0]), float(pos[i, 1])) for i, name in enumerate(nodes)}


def layout(graph: nx.Graph, *, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Every node of ``graph`` -> (x, y) in [MARGIN, SIZE - MARGIN], rounded to 0.1."""
    comps = sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: (-len(c), c[0]))
    if not comps:
        return {}
    total = sum(len(c) for c in comps)
    # each component gets a square cell whose side grows with the square root of its share of nodes
    sides = [math.sqrt(len(c) / total) for c in comps]
    rows: list[list[int]] = []
    width = 0.0
    for i, side in enumerate(sides):
        if rows and width + side <= 1.0 + 1e-9:
            rows[-1].append(i)
            width += side
        else:
            rows.append([i])
            width = side
    row_heights = [max(sides[i] for i in row) for row in rows]
    scale = 1.0 / max(1.0, sum(row_heights))
    inner = SIZE - 2 * MARGIN
    out: dict[str, tuple[float, float]] = {}
    y = 0.0
    for row, height in zip(rows, row_heights):
        x = 0.0
        for i in row:
            comp = comps[i]
            sub = _component_layout(comp, graph.subgraph(comp).edges(), seed)
            side = sides[i] * scale * (0.9 if len(comps) > 1 else 1.0)
            for name, (px, py) in sub.items():
                out[name] = (round(MARGIN + inner * (x + px * side), 1), round(MARGIN + inner * (y + py * side), 1))
            x += sides[i] * scale
        y += height * scale
    return out
