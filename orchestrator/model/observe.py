"""Convergence, delivery and stretch: what "the network works" means, decided from outside.

A network has converged when, in every connected component of the live graph:

* tree: every node's root is the component's highest key;
* snake: in addition, every node's descending key is the next lower key of its
  component (the lowest node has none).

The instant of convergence is the last relevant state change (root key or
descending key) before the observed converged state: for a static component
there is exactly one converged state, so the state became converged exactly
when its last change happened. Ping stretch counts hops per link: the §8
convention reports links + 1, and stretch = (hops - 1) / shortest-path links,
with networkx as the oracle.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import networkx as nx

from node.core.router import Router

__all__ = ["NodeView", "router_views", "ConvergenceTracker", "check_convergence", "stretch_summary", "HOP_CONVENTION"]

HOP_CONVENTION = "links: stretch = (reported_hops - 1) / shortest_path_links; reported_hops follows PROTOCOL.md §8 (links + 1)"


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the observer needs of one live node."""

    key: bytes
    root: bytes
    descending: bytes | None


def router_views(routers: Iterable[tuple[str, Router]], now: float) -> tuple[dict[str, NodeView], float]:
    """Each named router's view at ``now``, and when the first descending entry it counted expires.

    An expired descending entry counts as none: routing no longer uses it (§6.3 step 6), even before the
    next maintenance tick clears it (§6.7).
    """
    out: dict[str, NodeView] = {}
    next_expiry = math.inf
    for name, r in routers:
        d = r.descending
        if d is not None and d.valid(now):
            next_expiry = min(next_expiry, d.expires_at)
            out[name] = NodeView(r.key, r.root.key, d.key)
        else:
            out[name] = NodeView(r.key, r.root.key, None)
    return out, next_expiry


@dataclass(slots=True)
class Verdict:
    tree: bool
    snake: bool
    wrong_root: list[str] = field(default_factory=list)
    wrong_descending: list[str] = field(default_factory=list)


def check_convergence(graph: nx.Graph, views: Mapping[str, NodeView]) -> Verdict:
    """Decide convergence for the live ``graph`` (nodes are names present in ``views``)."""
    wrong_root: list[str] = []
    wrong_desc: list[str] = []
    for comp in nx.connected_components(graph):
        members = sorted((views[n].key, n) for n in comp)
        top = members[-1][0]
        for i, (key, name) in enumerate(members):
            v = views[name]
            if v.root != top:
                wrong_root.append(name)
            expected = members[i - 1][0] if i > 0 else None
            if v.descending != expected:
                wrong_desc.append(name)
    tree = not wrong_root
    return Verdict(tree, tree and not wrong_desc, wrong_root, wrong_desc)


class ConvergenceTracker:
    """Follows root and descending changes and times convergence from a reference instant."""

    def __init__(self) -> None:
        self.root_changed_at: dict[str, float] = {}
        self.desc_changed_at: dict[str, float] = {}
        self._root: dict[str, bytes] = {}
        self.t0 = 0.0
        self.tree_at: float | None = None
        self.snake_at: float | None = None

    def reset(self, t0: float) -> None:
        """Start timing anew (run start, or a disruption at ``t0``)."""
        self.t0 = t0
        self.tree_at = None
        self.snake_at = None

    def root_changed(self, node: str, root: bytes, now: float) -> None:
        if self._root.get(node) != root:  # a sequence bump of the same root is not a change of root
            self._root[node] = root
            self.root_changed_at[node] = now

    def descending_changed(self, node: str, now: float) -> None:
        self.desc_changed_at[node] = now

    def observe(self, graph: nx.Graph, views: Mapping[str, NodeView]) -> Verdict:
        verdict = check_convergence(graph, views)
        live = list(graph.nodes)
        if verdict.tree and self.tree_at is None:
            self.tree_at = max([self.t0, *(self.root_changed_at.get(n, self.t0) for n in live)])
        if verdict.snake and self.snake_at is None:
            last = (max(self.root_changed_at.get(n, self.t0), self.desc_changed_at.get(n, self.t0)) for n in live)
            self.snake_at = max([self.t0, *last])
        if not verdict.tree:
            self.tree_at = None
        if not verdict.snake:
            self.snake_at = None
        return verdict

    @property
    def tree_s(self) -> float | None:
        return None if self.tree_at is None else self.tree_at - self.t0

    @property
    def snake_s(self) -> float | None:
        return None if self.snake_at is None else self.snake_at - self.t0


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stretch_summary(samples: Iterable[tuple[int, int]]) -> dict[str, float | None]:
    """``samples`` = (path links, shortest-path links) pairs."""
    ratios = [links / shortest for links, shortest in samples if shortest > 0]
    if not ratios:
        return {"mean": None, "median": None, "p95": None, "samples": 0}
    return {
        "mean": round(statistics.fmean(ratios), 4),
        "median": round(statistics.median(ratios), 4),
        "p95": round(_percentile(ratios, 0.95), 4),
        "samples": len(ratios),
    }
