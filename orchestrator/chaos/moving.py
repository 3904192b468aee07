"""The checker while nodes move (docs/mobility.md, "Chaos"): what can be judged of a graph that changes.

A component of the live graph whose links came or went because nodes moved has, for a while, not had the time to
re-converge: expecting one root, the highest key, an ordered snake or a ping answered there would judge the
movement, not the protocol. So, in a run whose nodes move (``ChaosBackend.moves``), the checker judges each
invariant on the **settled** components only: those whose links have not changed by movement within the
re-convergence bound (``ChaosBackend.moved_since``), the same bound a fault is given. :func:`settled` takes the
others out of a reading; a ping whose pair's component changed while it was in flight is not judged either.

:class:`MovingWatch` is the checker that runs continuously while the nodes move (every ``Scenario.watch_s``): at each
reading, every node of a settled component must name its component's highest key as root and hold the next lower
key as descending. A node found wrong is followed from reading to reading; it fails the run only when it stays
wrong, in a settled component, for longer than a soft-state transient may last (the ``TRANSIENT_S`` the step
checker tolerates): a violation names it, the invariant, when and for how long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from orchestrator.chaos.checker import Invariant, NodeState, PingOutcome, out_of_order

__all__ = ["MovingWatch", "judge_pings", "not_judged", "settled"]

#: the invariants decided per component (the ones a settling component is left out of)
COMPONENT_INVARIANTS = ("one_root_per_component", "root_is_highest_key", "snake_ordered")
MAX_VIOLATIONS = 20  # listed in the run's document, at most


def settled(graph: nx.Graph, states: Mapping[str, NodeState],
            moving: Iterable[str]) -> tuple[nx.Graph, dict[str, NodeState]]:  # fmt: skip
    """``graph`` and ``states`` without the nodes of ``moving`` (whole components: ChaosBackend.moved_since)."""
    away = set(moving)
    return graph.subgraph(n for n in graph if n not in away), {n: s for n, s in states.items() if n not in away}


def judge_pings(pings: Iterable[PingOutcome], moved: set[str]) -> tuple[list[PingOutcome], int]:
    """The pings to judge (neither end's component changed while they were in flight) and how many were not."""
    pings = list(pings)
    kept = [p for p in pings if p.a not in moved and p.b not in moved]
    return kept, len(pings) - len(kept)


def not_judged(invariants: dict[str, Invariant], moving: int, live: int, bound_s: float, unjudged_pings: int) -> None:
    """Say, in each invariant's detail, what the movement left out of it; with no settled component left, the
    component invariants are not judged (``evaluated: false``) rather than passed on nothing."""
    if moving:
        note = f"{moving} of {live} live node(s) in components whose radio links changed within {bound_s:g} s: not judged"
        for name in COMPONENT_INVARIANTS:
            inv = invariants[name]
            if moving >= live and inv.ok and inv.expected:
                inv.evaluated = False
            inv.detail = f"{inv.detail} ({note})"
    if unjudged_pings:
        inv = invariants["pairs_reachable"]
        inv.detail += f" ({unjudged_pings} ping(s) not judged: their pair's component changed while they were in flight)"


@dataclass
class MovingWatch:
    """The continuous checker of a run whose nodes move (fed readings; sans-IO)."""

    every_s: float
    #: how long a node may stay wrong in a settled component (a soft-state transient), seconds
    limit_s: float
    readings: int = 0
    judged_readings: int = 0
    node_readings: int = 0
    judged_node_readings: int = 0
    #: (node, invariant) -> (first reading it was found wrong, what was wrong)
    wrong: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    _reported: set[tuple[str, str]] = field(default_factory=set)

    def read(self, t: float, graph: nx.Graph, states: Mapping[str, NodeState], live: int,
             names_by_key: Mapping[bytes, str] | None = None) -> None:  # fmt: skip
        """A reading at ``t`` (seconds into the run): ``graph`` and ``states`` of the settled components only
        (:func:`settled`), ``live`` the live nodes in all."""
        self.readings += 1
        self.node_readings += live
        self.judged_node_readings += len(states)
        self.judged_readings += bool(states)
        label = dict(names_by_key or {}) | {s.key: n for n, s in states.items()}
        now_wrong: dict[tuple[str, str], str] = {}
        live_graph = graph.subgraph(states)
        for comp in nx.connected_components(live_graph):
            top = max(comp, key=lambda n: states[n].key)
            for n in comp:
                if states[n].root != states[top].key:
                    now_wrong[(n, "root_is_highest_key")] = (f"names {label.get(states[n].root, '?')} as root, not "
                                                             f"{top}")  # fmt: skip
        for n, (got, want) in out_of_order(live_graph, states).items():
            now_wrong[(n, "snake_ordered")] = (f"descending {label.get(got, 'none') if got else 'none'}, expected "
                                               f"{label.get(want, 'none') if want else 'none'}")  # fmt: skip
        self.wrong = {k: self.wrong.get(k, (t, why)) for k, why in now_wrong.items()}
        for (n, inv), (since, why) in self.wrong.items():
            if t - since > self.limit_s and (n, inv) not in self._reported:
                self._reported.add((n, inv))
                if len(self.violations) < MAX_VIOLATIONS:
                    self.violations.append({"at_s": round(t, 3), "node": n, "invariant": inv,
                                            "wrong_for_s": round(t - since, 3), "detail": why})  # fmt: skip

    @property
    def verdict(self) -> str:
        return "fail" if self._reported else "pass"

    def to_dict(self) -> dict[str, Any]:
        share = self.judged_node_readings / self.node_readings if self.node_readings else None
        return {"every_s": self.every_s, "limit_s": self.limit_s, "readings": self.readings,
                "judged_readings": self.judged_readings, "judged_share": None if share is None else round(share, 4),
                "violations": len(self._reported), "listed": self.violations, "verdict": self.verdict}  # fmt: skip
