"""A check with a deadline: the checker after a fault of a reference sequence, before its next command.

A reference sequence's commands come at their own times (its Delays): the checker after a fault cannot hold
the next command back. Such a step has ``check_within_s`` (orchestrator.chaos.sequence sets it to the time until
the next command): the checker waits for re-convergence and its settle window as usual, but only until that
deadline, and runs then. :func:`wait_and_settle` does the waiting and says whether the check was **cut short**
(the deadline came before re-convergence plus the settle window); :meth:`CheckWindow.judge` then reports an
invariant that failed at a cut-short reading as not judged (``evaluated: false``, the detail saying why and what
was read), since the network may simply not have re-converged yet, except ``no_internal_errors`` (an internal
error is one at any time) and what the step ``expect``\\ s. The check at the end of the sequence has no
deadline and judges everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Mapping

from orchestrator.chaos.backend import ChaosBackend, Converged
from orchestrator.chaos.checker import Invariant
from orchestrator.chaos.steps import AnyStep

__all__ = ["CheckWindow", "wait_and_settle"]

#: failures a cut-short check still judges: an internal error is a defect whenever it happens
JUDGED_WHEN_CUT = ("no_internal_errors",)
#: seconds a deadline check keeps for its pings, per mode (a 0.5 s timeout and the half second after it)
PING_RESERVE_S = 1.0


@dataclass(frozen=True)
class CheckWindow:
    """How long the checker had after the fault (None: no deadline), when it read, and whether it was cut short."""

    within_s: float | None
    checked_after_s: float = 0.0
    cut_short: bool = False
    converged: bool = True

    def reason(self) -> str:
        what = "before re-convergence" if not self.converged else "before the end of its settle window"
        return f"the next command came {self.within_s:g} s after the fault, {what}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"within_s": self.within_s, "checked_after_s": round(self.checked_after_s, 3),
                             "cut_short": self.cut_short}  # fmt: skip
        if self.cut_short:
            d["reason"] = self.reason()
        return d

    def ping_timeout_s(self, default_s: float, modes: int) -> float | None:
        """The checker's ping timeout, so that its pings (one round per mode, each the timeout plus half a second)
        end by the deadline; None when there is no time left to ping (``pairs_reachable`` is then not measured)."""
        if self.within_s is None:
            return default_s
        per_mode = (self.within_s - self.checked_after_s) / max(1, modes) - 0.5
        return None if per_mode < 0.5 else min(default_s, per_mode)

    def judge(self, invariants: dict[str, Invariant], expect: Mapping[str, bool]) -> dict[str, Invariant]:
        """A cut-short check's failures, but those of JUDGED_WHEN_CUT and the expected ones, as not judged."""
        if not self.cut_short:
            return invariants
        for name, inv in invariants.items():
            if inv.ok or name in JUDGED_WHEN_CUT or name in expect:
                continue
            inv.evaluated = False
            inv.detail = f"not judged: {self.reason()} (judged again at the end of the sequence); read: {inv.detail}"
        return invariants


async def wait_and_settle(b: ChaosBackend, step: AnyStep, bound_s: float, settle_s: float, fault_end: float,
                          modes: int = 2, give_up: Callable[[], bool] | None = None) -> tuple[Converged, CheckWindow]:
    """Wait for re-convergence (at most ``bound_s``, or until ``give_up()``) and the settle window after a fault
    that ended at ``fault_end``, but not past the step's ``check_within_s`` less the time the checker's pings take
    (one PING_RESERVE_S a mode, when the window has that much)."""
    limit = step.check_within_s
    if limit is None:
        conv = await b.wait_converged(fault_end, bound_s, give_up)
        if settle_s:
            await b.sleep(settle_s)
        return conv, CheckWindow(None, b.now() - fault_end)
    reserve = modes * PING_RESERVE_S if limit >= modes * PING_RESERVE_S else 0.0
    read_by = limit - reserve  # seconds after the fault
    conv = await b.wait_converged(fault_end, min(bound_s, read_by))
    left = read_by - (b.now() - fault_end)
    cut = (not conv.converged and read_by < bound_s) or settle_s > left
    if min(settle_s, left) > 0:
        await b.sleep(min(settle_s, left))
    return conv, CheckWindow(limit, b.now() - fault_end, cut, conv.converged)
