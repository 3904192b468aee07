"""``snekbed chaos FILE.json --shrink``: a failing reference sequence, delta-debugged to a smaller one that fails the same way.

The failure to keep is the first invariant that failed in the original run (the first failed step's, in the order
of INVARIANTS). :func:`shrink` runs ddmin (Zeller and Hildebrandt, "Simplifying and isolating failure-inducing
input", 2002) over the sequence's **commands** (every event but the Delays, which stay, so the kept commands keep
their times): it tries halves, then complements, then finer pieces, and keeps any candidate whose run still fails
that invariant. Every candidate is first closed under what its commands need (orchestrator.chaos.sequence.needs:
an AddPeer needs both nodes' AddNode, an adversary configuration its node's), so no candidate fails merely for a
command that cannot run. Runs are cached by the set of commands: ``reruns`` counts the runs made, the original's
not included. A candidate whose commands are all in one that passed is taken to pass without a run (``guessed``:
ddmin's own assumption, that fewer commands bring no new failure); since a sequence can break that (a command
that hid the failure), the result is then checked with runs alone: every candidate one command (with what needs
it) smaller is run, and ddmin goes on from any that fails. So the result is 1-minimal when the rerun budget allows
it: removing any single command (with what needs it) makes the failure go away, each of those runs made.

The shrunk sequence is written in the same format (sequence.sequence_text: the kept events in order, consecutive
Delays merged, the top-level keys, the ``snekbed`` extension included, as they were).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.sequence import needs, read_events, sequence_text
from orchestrator.chaos.steps import INVARIANTS

__all__ = ["ShrinkResult", "failed_invariant", "shrink"]

#: a sequence's text -> its run's ``--json`` document
RunText = Callable[[str], dict[str, Any]]


def failed_invariant(out: dict[str, Any]) -> str | None:
    """The first invariant that failed in a run (first failed step; INVARIANTS order), None when none did."""
    for step in out["steps"]:
        bad = [k for k in INVARIANTS if not step.get("invariants", {}).get(k, {"ok": True})["ok"]]
        if step["verdict"] != "pass" and bad:
            return bad[0]
    return None


def _fails(out: dict[str, Any], invariant: str) -> bool:
    return any(not s.get("invariants", {}).get(invariant, {"ok": True})["ok"] for s in out["steps"])


@dataclass
class ShrinkResult:
    invariant: str
    text: str
    kept: list[int]
    commands_before: int
    reruns: int
    budget_spent: bool = False
    events: list[int] = field(default_factory=list)
    guessed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "commands_before": self.commands_before,
                "commands_after": len(self.kept), "kept_events": self.events, "reruns": self.reruns,
                "guessed": self.guessed, "one_minimal": not self.budget_spent}  # fmt: skip


class _Runner:
    """Runs candidate command sets (cached), closed under what their commands need."""

    def __init__(self, doc: dict[str, Any], run: RunText, invariant: str, max_runs: int) -> None:
        events = doc["EventSequence"]
        self.doc, self.run, self.invariant, self.max_runs = doc, run, invariant, max_runs
        self.commands = [i for i, ev in enumerate(events) if ev.get("Command") != "Delay"]
        self.delays = [i for i, ev in enumerate(events) if ev.get("Command") == "Delay"]
        self.needs = needs(events)
        self.cache: dict[frozenset[int], bool] = {}
        self.passed: list[frozenset[int]] = []  # candidates whose run did not fail that way
        self.reruns = 0
        self.guessed: set[frozenset[int]] = set()  # candidates decided without a run: each inside one that passed

    def close(self, subset: Sequence[int]) -> list[int]:
        out, todo = set(subset), list(subset)
        while todo:
            for dep in self.needs.get(todo.pop(), ()):
                if dep not in out:
                    out.add(dep)
                    todo.append(dep)
        return sorted(out)

    def text(self, subset: Sequence[int]) -> str:
        return sequence_text(self.doc, sorted([*subset, *self.delays]))

    def fails(self, subset: Sequence[int], guess: bool = True) -> bool:
        """Whether ``subset``'s run fails the invariant. With ``guess``, a subset of a candidate that passed is taken
        to pass without a run (ddmin's monotony: fewer commands, no new failure); without, it is run."""
        key = frozenset(subset)
        if not guess and key in self.guessed:
            self.guessed.discard(key)
            del self.cache[key]
        if key not in self.cache:
            if guess and any(key <= p for p in self.passed):
                self.guessed.add(key)
                self.cache[key] = False
                return False
            if self.reruns >= self.max_runs:
                return False  # out of budget: treated as passing, so the result stays a failing one
            self.reruns += 1
            self.cache[key] = _fails(self.run(self.text(subset)), self.invariant)
            if not self.cache[key]:
                self.passed.append(key)
        return self.cache[key]


def _ddmin(r: _Runner, items: list[int]) -> list[int]:
    n = 2
    while len(items) >= 2:
        size = len(items) / n
        chunks = [items[round(k * size):round((k + 1) * size)] for k in range(n)]
        for c in chunks:  # a piece alone
            cand = r.close(c)
            if len(cand) < len(items) and r.fails(cand):
                items, n = cand, 2
                break
        else:
            for c in chunks:  # everything but a piece
                cand = r.close([x for x in items if x not in c])
                if len(cand) < len(items) and r.fails(cand):
                    items, n = cand, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def _one_less(r: _Runner, items: list[int]) -> list[int] | None:
    """A candidate one command (and what needs it) smaller than ``items`` that fails when run, or None: ``items``
    is then 1-minimal, every such candidate run (not guessed)."""
    for x in items:
        cand = r.close([y for y in items if y != x])
        if len(cand) < len(items) and r.fails(cand, guess=False):
            return cand
    return None


def shrink(text: str, run: RunText, *, original: dict[str, Any] | None = None, max_runs: int = 200,
           file: str | None = None) -> ShrinkResult | None:  # fmt: skip
    """The smallest sequence ddmin finds that fails like ``text`` does (module docstring); None when ``text``'s
    run (``original``, or run here) fails no invariant: nothing to shrink."""
    doc, _ = read_events(text, file)
    out = original if original is not None else run(text)
    invariant = failed_invariant(out)
    if invariant is None:
        return None
    r = _Runner(doc, run, invariant, max_runs)
    r.cache[frozenset(r.commands)] = True
    kept = _ddmin(r, r.close(r.commands))
    while (smaller := _one_less(r, kept)) is not None:  # a guess was wrong (removing a command made it fail)
        kept = _ddmin(r, smaller)
    return ShrinkResult(invariant, r.text(kept), kept, len(r.commands), r.reruns, r.reruns >= max_runs,
                        sorted([*kept, *r.delays]), len(r.guessed))  # fmt: skip
