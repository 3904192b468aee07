"""The chaos checker: invariants over the live graph, each with a verdict and a detail string.

Every invariant is decided per connected component of the live graph (nodes
that are alive, not paused and answer, and the links that are up), as the
observer decides convergence (orchestrator.model.observe):

* ``one_root_per_component``: every node of a component names the same root key;
* ``root_is_highest_key``: that root is the component's highest key;
* ``snake_ordered``: every node's descending key is the next lower key of its
  component (the lowest has none);
* ``pairs_reachable``: every sampled pair inside a component answered a ping,
  in each mode asked (snek and tree);
* ``no_internal_errors``: no node's internal-error counter moved;
* ``reconverged_within_bound``: after a fault, tree and snake re-converged
  within the bound derived from the protocol timers.

A step may expect an invariant to break (``expect: {pairs_reachable: false}``);
then ``ok`` is true when it did break. ``held`` always says what was observed.

While adversaries are present (``adversaries``: the nodes an ``adversary`` step or an adversarial ``join`` made
so, until they turn honest: :func:`adversaries_after`), each invariant is judged on the honest view: adversarial
nodes are not judged, pings with an adversarial end are not counted, and an honest node is held to what it can
know: its root may be its component's highest key or the component's highest honest key, its descending key the
next lower key of its component or the next lower honest key (an adversary may hide its own key, never another's).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from orchestrator.chaos.scenario import INVARIANTS

__all__ = ["Invariant", "NodeState", "PingOutcome", "Reconvergence", "TransientWatch", "adversaries_after", "evaluate",
           "out_of_order", "run_verdict", "verdict_of"]

_MAX_NAMED = 6


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the checker needs of one live node."""

    key: bytes
    root: bytes
    descending: bytes | None
    internal_errors: int = 0
    #: the keys its router lists as up peers (what a fault's confirmation compares against: orchestrator.chaos.confirm)
    peers: frozenset[bytes] = frozenset()


@dataclass(frozen=True, slots=True)
class PingOutcome:
    a: str
    b: str
    mode: str
    delivered: bool


@dataclass(frozen=True, slots=True)
class Reconvergence:
    """Seconds from a fault to tree and snake convergence (None: not converged), against ``bound_s``. The runner
    may watch past the bound, up to ``horizon_s``, to tell a slow re-convergence from a stuck one."""

    tree_s: float | None
    snake_s: float | None
    bound_s: float
    horizon_s: float | None = None
    #: links came or went because nodes moved after the fault (docs/mobility.md): a re-convergence that is not
    #: within the bound is then not judged (the movement, not the fault, may have kept the network changing)
    moved: bool = False

    @property
    def took_s(self) -> float | None:
        return None if self.tree_s is None or self.snake_s is None else max(self.tree_s, self.snake_s)

    @property
    def pace(self) -> str:
        """``within`` the bound, ``slow`` (converged after it, within the horizon) or ``stuck`` (not converged when
        the runner stopped watching)."""
        took = self.took_s
        return "within" if took is not None and took <= self.bound_s else "slow" if took is not None else "stuck"

    def to_dict(self) -> dict[str, Any]:
        took = self.took_s
        return {"pace": self.pace, "took_s": None if took is None else round(took, 3), "bound_s": self.bound_s,
                "horizon_s": self.horizon_s}  # fmt: skip


@dataclass(slots=True)
class Invariant:
    name: str
    held: bool
    expected: bool = True
    detail: str = ""
    evaluated: bool = True

    @property
    def ok(self) -> bool:
        return not self.evaluated or self.held == self.expected

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"ok": self.ok, "detail": self.detail, "held": self.held, "expected": self.expected}
        if not self.evaluated:
            d["evaluated"] = False
        return d


@dataclass(slots=True)
class _Components:
    members: list[list[tuple[bytes, str]]] = field(default_factory=list)  # each sorted by key


def _components(graph: nx.Graph, states: Mapping[str, NodeState]) -> _Components:
    live = graph.subgraph(n for n in graph.nodes if n in states)
    out = _Components()
    for comp in nx.connected_components(live):
        out.members.append(sorted((states[n].key, n) for n in comp))
    out.members.sort(key=lambda m: m[0][1])
    return out


def _out_of_order(comps: _Components, states: Mapping[str, NodeState]) -> dict[str, tuple[bytes | None, bytes | None]]:
    """Every node whose descending key is not the next lower key of its component: name -> (got, expected),
    component by component, in key order."""
    out: dict[str, tuple[bytes | None, bytes | None]] = {}
    for members in comps.members:
        for i, (_, n) in enumerate(members):
            want = members[i - 1][0] if i > 0 else None
            got = states[n].descending
            if got != want:
                out[n] = (got, want)
    return out


def out_of_order(graph: nx.Graph, states: Mapping[str, NodeState]) -> dict[str, tuple[bytes | None, bytes | None]]:
    """The nodes ``snake_ordered`` finds out of order on the live ``graph``: name -> (descending, expected)."""
    return _out_of_order(_components(graph, states), states)


def _names(names: Iterable[str]) -> str:
    names = sorted(names)
    more = f" (+{len(names) - _MAX_NAMED} more)" if len(names) > _MAX_NAMED else ""
    return ", ".join(names[:_MAX_NAMED]) + more


def evaluate(
    graph: nx.Graph,
    states: Mapping[str, NodeState],
    *,
    pings: Iterable[PingOutcome] = (),
    errors_before: Mapping[str, int] | None = None,
    reconvergence: Reconvergence | None = None,
    expect: Mapping[str, bool] | None = None,
    names_by_key: Mapping[bytes, str] | None = None,
    adversaries: Collection[str] = (),
) -> dict[str, Invariant]:
    """Every invariant of INVARIANTS, in that order. ``graph`` is the live graph (names as nodes); with
    ``adversaries``, on the honest view (module doc)."""
    comps = _components(graph, states)
    name_of = dict(names_by_key or {})
    for name, st in states.items():
        name_of.setdefault(st.key, name)

    def label(key: bytes | None) -> str:
        if key is None:
            return "none"
        return name_of.get(key, key.hex()[:12])

    adv = set(adversaries)
    if adv:
        one_root, highest, snake = _honest(comps, states, adv, label)
        pings = [p for p in pings if p.a not in adv and p.b not in adv]
        honest = {n: st for n, st in states.items() if n not in adv}
    else:
        one_root, highest = _roots(comps, states, label)
        snake, honest = _snake(comps, states, label), dict(states)
    out = {
        "one_root_per_component": one_root,
        "root_is_highest_key": highest,
        "snake_ordered": snake,
        "pairs_reachable": _pairs(list(pings)),
        "no_internal_errors": _internal_errors(honest, errors_before),
        "reconverged_within_bound": _reconverged(reconvergence),
    }
    if adv:
        timing = out["reconverged_within_bound"]
        if (reconvergence is not None and reconvergence.pace != "within" and timing.evaluated
                and one_root.ok and highest.ok and snake.ok):
            # the re-convergence is timed on the whole network, whose adversaries may keep their own entries from
            # ever forming (a bootstrap dropper's descending key): the honest nodes' roots and snake hold at the
            # reading, so their re-convergence cannot be timed, only said not judged
            out["reconverged_within_bound"] = Invariant(
                "reconverged_within_bound", False, evaluated=False,
                detail=f"not judged: the whole network did not settle ({timing.detail}), the honest nodes' roots "
                       "and snake hold")  # fmt: skip
        for inv in out.values():
            inv.detail = f"honest view ({len(adv)} adversarial node(s) ignored): {inv.detail}"
    for name, want in (expect or {}).items():
        out[name].expected = want
        if not out[name].evaluated:
            out[name].evaluated = True  # an expectation about something not measured cannot be met
            out[name].held = True
            out[name].detail += " (expected a break, but nothing was measured)"
    assert tuple(out) == INVARIANTS
    return out


def _roots(comps: _Components, states: Mapping[str, NodeState],
           label: Callable[[bytes | None], str]) -> tuple[Invariant, Invariant]:  # fmt: skip
    """``one_root_per_component`` and ``root_is_highest_key``."""
    split, wrong = [], []
    for members in comps.members:
        roots = {states[n].root for _, n in members}
        top_key, top = members[-1]
        if len(roots) > 1:
            split.append(f"component of {top} ({len(members)} nodes) names {len(roots)} roots: "
                         f"{_names(label(r) for r in roots)}")  # fmt: skip
        bad = [n for _, n in members if states[n].root != top_key]
        if bad:
            wrong.append(f"{_names(bad)} do not name {top} (the highest key of their component) as root")
    return (
        Invariant("one_root_per_component", not split,
                  detail="; ".join(split) or f"{len(comps.members)} component(s), one root each"),
        Invariant("root_is_highest_key", not wrong, detail="; ".join(wrong) or "every root is its component's highest key"),
    )  # fmt: skip


def _honest(comps: _Components, states: Mapping[str, NodeState], adv: set[str],
            label: Callable[[bytes | None], str]) -> tuple[Invariant, Invariant, Invariant]:  # fmt: skip
    """``one_root_per_component``, ``root_is_highest_key`` and ``snake_ordered`` on the honest view (module doc):
    only the honest nodes of each component are judged, each against its component with or without its
    adversaries' keys."""
    split, wrong, disordered = [], [], []
    for members in comps.members:
        judged = [(k, n) for k, n in members if n not in adv]
        if not judged:
            continue
        roots = {states[n].root for _, n in judged}
        if len(roots) > 1:
            split.append(f"honest nodes of the component of {judged[-1][1]} name {len(roots)} roots: "
                         f"{_names(label(r) for r in roots)}")  # fmt: skip
        keys, honest = [k for k, _ in members], [k for k, _ in judged]
        bad = [n for _, n in judged if states[n].root not in (keys[-1], honest[-1])]
        if bad:
            wrong.append(f"{_names(bad)} name neither their component's highest key nor its highest honest key")
        for j, (k, n) in enumerate(judged):
            i = keys.index(k)
            want = {keys[i - 1] if i > 0 else None, honest[j - 1] if j > 0 else None}
            if states[n].descending not in want:
                disordered.append(f"{n}: descending {label(states[n].descending)}, expected "
                                  f"{' or '.join(sorted(label(w) for w in want))}")  # fmt: skip
    return (
        Invariant("one_root_per_component", not split, detail="; ".join(split) or "one root among honest nodes"),
        Invariant("root_is_highest_key", not wrong, detail="; ".join(wrong) or "every honest node's root is a highest key"),
        Invariant("snake_ordered", not disordered,
                  detail=f"{len(disordered)} honest node(s) out of order: " + "; ".join(disordered[:_MAX_NAMED])
                  if disordered else "every honest descending key is a next lower key"),
    )  # fmt: skip


def adversaries_after(current: Collection[str], action: str, target: str | None,
                      detail: Mapping[str, Any] | None) -> frozenset[str]:
    """The adversarial nodes after one recorded action (the runner's ``act``): an ``adversary`` action makes its
    target one, unless it turns it honest (``strategy: none``, or a drop strategy dropping nothing); a ``join``
    with ``adversary`` adds one."""
    d = detail or {}
    if target is None or action not in ("adversary", "join"):
        return frozenset(current)
    if action == "join":
        return frozenset(current) | {target} if d.get("adversary") else frozenset(current)
    strategy = d.get("strategy")
    honest = strategy == "none" or (strategy in (None, "drop") and not any(
        float(v) > 0 for v in (d.get("drop") or {}).values()))
    return frozenset(current) - {target} if honest else frozenset(current) | {target}


def _snake(comps: _Components, states: Mapping[str, NodeState], label: Callable[[bytes | None], str]) -> Invariant:
    disordered = [f"{n}: descending {label(got)}, expected {label(want)}"
                  for n, (got, want) in _out_of_order(comps, states).items()]  # fmt: skip
    return Invariant(
        "snake_ordered",
        not disordered,
        detail=f"{len(disordered)} node(s) out of order: " + "; ".join(disordered[:_MAX_NAMED])
        if disordered
        else "every descending key is the next lower key of its component",
    )


def _pairs(pings: list[PingOutcome]) -> Invariant:
    if not pings:
        return Invariant("pairs_reachable", True, detail="no pairs sampled", evaluated=False)
    lost = [p for p in pings if not p.delivered]
    by_mode: dict[str, list[int]] = {}
    for p in pings:
        c = by_mode.setdefault(p.mode, [0, 0])
        c[0] += p.delivered
        c[1] += 1
    counts = ", ".join(f"{m} {d}/{n}" for m, (d, n) in sorted(by_mode.items()))
    detail = f"delivered {counts}"
    if lost:
        detail += "; lost: " + ", ".join(f"{p.a}->{p.b} ({p.mode})" for p in lost[:_MAX_NAMED])
        if len(lost) > _MAX_NAMED:
            detail += f" (+{len(lost) - _MAX_NAMED} more)"
    return Invariant("pairs_reachable", not lost, detail=detail)


def _internal_errors(states: Mapping[str, NodeState], errors_before: Mapping[str, int] | None) -> Invariant:
    if errors_before is None:
        return Invariant("no_internal_errors", True, detail="not measured", evaluated=False)
    moved = {n: st.internal_errors - errors_before.get(n, 0) for n, st in states.items()}
    moved = {n: d for n, d in moved.items() if d > 0}
    return Invariant("no_internal_errors", not moved,
                     detail="; ".join(f"{n}: +{d}" for n, d in sorted(moved.items())) or "no internal errors")


def _reconverged(r: Reconvergence | None) -> Invariant:
    if r is None:
        return Invariant("reconverged_within_bound", True, detail="no fault to re-converge from", evaluated=False)
    pace = r.pace
    detail = f"tree {_secs(r.tree_s)}, snake {_secs(r.snake_s)}, bound {r.bound_s:.1f} s"
    if r.moved and pace != "within":
        return Invariant("reconverged_within_bound", False, evaluated=False,
                         detail=f"not judged: radio links came and went as nodes moved after the fault ({pace}: {detail})")
    if pace == "slow":
        detail = f"slow: re-converged {r.took_s:.2f} s after the fault, after its bound; " + detail
    elif pace == "stuck" and r.horizon_s is not None:
        detail = f"stuck: not re-converged within {r.horizon_s:.1f} s of the fault; " + detail
    return Invariant("reconverged_within_bound", pace == "within", detail=detail)


def _secs(s: float | None) -> str:
    return "not converged" if s is None else f"{s:.2f} s"


def verdict_of(invariants: Mapping[str, Invariant]) -> str:
    return "pass" if all(i.ok for i in invariants.values()) else "fail"


def run_verdict(step_verdicts: Iterable[str]) -> str:
    """A run's verdict from its steps': ``invalid`` when a fault was not confirmed (the run proves nothing about
    it), else ``fail`` when a step failed, else ``pass``."""
    got = set(step_verdicts)
    return "invalid" if "invalid" in got else "fail" if got - {"pass"} else "pass"


@dataclass(slots=True)
class TransientWatch:
    """A soft-state transient followed node by node, reading after reading (sans-IO: fed with the time of
    each reading, the live graph, the nodes' states and ping outcomes).

    SNEK's routing entries are soft: each lives 10 s and is refreshed by bootstraps every 5-6 s, and the path
    of one node's bootstraps can alternate between two dead ends, so a node's descending entry can expire
    before its refresh arrives and come back with the next bootstrap (docs/chaos.md). On a network of a few
    hundred nodes, some node is often in such a gap while the snake re-orders after a fault: every node's
    break is short, yet the whole snake is rarely in order at one instant. So each node found out of order at
    the first reading must be back in order, and each pair that lost a ping must answer one, within
    ``limit_s`` of that reading; a break that lasts longer fails, and names the nodes or pairs it kept.
    """

    t0: float
    limit_s: float
    #: nodes out of order at the first reading and not back in order since: name -> (descending, expected)
    nodes: dict[str, tuple[bytes | None, bytes | None]]
    #: (a, b, mode) that lost their ping at the first reading and have not answered one since
    pairs: set[tuple[str, str, str]]
    #: seconds after the first reading each node was found back in order (or had left the live graph)
    back: dict[str, float] = field(default_factory=dict)
    #: seconds after the first reading each pair answered
    answered: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: a longer limit for a lost pair whose source may keep routing to the destination's old coordinates for
    #: longer than SNEK's soft state lasts (a node of the Go reference: its coordinate cache, REFERENCE_COORDS_S):
    #: (a, b, mode) -> seconds after the first reading
    pair_limit_s: dict[tuple[str, str, str], float] = field(default_factory=dict)

    @classmethod
    def start(cls, t0: float, limit_s: float, graph: nx.Graph, states: Mapping[str, NodeState],
              pings: Iterable[PingOutcome], source_limit_s: Mapping[str, float] | None = None) -> TransientWatch:
        """``source_limit_s``: node -> a longer limit for the pairs it lost as their source."""
        lost = {(p.a, p.b, p.mode) for p in pings if not p.delivered}
        longer = source_limit_s or {}
        limits = {k: max(limit_s, longer[k[0]]) for k in lost if k[0] in longer}
        return cls(t0, limit_s, out_of_order(graph, states), lost, pair_limit_s=limits)

    def read(self, now: float, graph: nx.Graph, states: Mapping[str, NodeState]) -> None:
        """A reading of the live graph and the nodes' states at ``now``."""
        bad = out_of_order(graph, states)
        for n in [n for n in self.nodes if n not in bad or n not in states]:
            del self.nodes[n]
            self.back[n] = round(now - self.t0, 2)

    def pinged(self, now: float, outcomes: Iterable[PingOutcome]) -> None:
        """Outcomes of pinging ``lost_pairs()`` again at ``now`` (or since the last reading)."""
        for p in outcomes:
            k = (p.a, p.b, p.mode)
            if p.delivered and k in self.pairs and now - self.t0 <= self.pair_limit_s.get(k, self.limit_s):
                self.pairs.discard(k)
                self.answered[k] = round(now - self.t0, 2)

    def lost_pairs(self) -> list[tuple[str, str]]:
        return sorted({(a, b) for a, b, _ in self.pairs})

    def lost_modes(self) -> tuple[str, ...]:
        return tuple(sorted({m for _, _, m in self.pairs}))

    @property
    def settled(self) -> bool:
        """Every node is back in order and every pair answered."""
        return not self.nodes and not self.pairs

    def open(self, now: float) -> bool:
        """Whether a reading at ``now`` still counts (within ``limit_s`` of the first, or within the longer limit
        of a pair still lost; a node still out of order then already failed)."""
        if self.nodes and now - self.t0 > self.limit_s:
            return False
        return now - self.t0 <= self._pairs_limit_s()

    def _pairs_limit_s(self) -> float:
        """The longest limit among the pairs still lost (``limit_s`` when none has a longer one)."""
        return max([self.limit_s, *(self.pair_limit_s.get(k, 0.0) for k in self.pairs)])

    def snake_ordered(self, first: Invariant) -> Invariant:
        """``snake_ordered`` after the watch, from its first reading ``first``."""
        return self._verdict(first, self.nodes, self.back, "node(s) still out of order")

    def pairs_reachable(self, first: Invariant) -> Invariant:
        """``pairs_reachable`` after the watch, from its first reading ``first``."""
        keep = {f"{a}->{b} ({m})": None for a, b, m in self.pairs}
        limit = self._pairs_limit_s()
        sources = sorted({a for a, _, _ in self.pair_limit_s})
        why = (f"; a reference source ({', '.join(sources)}) routes to cached coordinates for up to "
               f"{max(self.pair_limit_s.values()):g} s (docs/interop.md)") if sources else ""
        return self._verdict(first, keep, {f"{a}->{b} ({m})": s for (a, b, m), s in self.answered.items()},
                             "pair(s) still lost", limit, why)  # fmt: skip

    def _verdict(self, first: Invariant, kept: Mapping[str, Any], back: Mapping[str, float], what: str,
                 limit_s: float | None = None, why: str = "") -> Invariant:  # fmt: skip
        if first.ok:
            return first
        if kept:
            limit = self.limit_s if limit_s is None else limit_s
            return Invariant(first.name, first.held, first.expected,
                             f"{first.detail}; {len(kept)} {what} {limit:g} s later: {_names(kept)}{why}")
        within = max(back.values(), default=0.0)
        return Invariant(first.name, True, first.expected,
                         f"transient, held again within {within} s, each of {len(back)} back on its own (soft state, "
                         f"docs/chaos.md){why}; first reading: {first.detail}")  # fmt: skip
