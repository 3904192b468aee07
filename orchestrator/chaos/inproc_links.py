"""The links an in-process chaos run wants, made and unmade, and redialled as a TCP node's dialer would.

A mixin of :class:`~orchestrator.chaos.inproc_backend.InprocChaos`. Every link the run wants is a *spec* (the
topology's links, then those a ``link_up`` or a join adds); a spec's link is *made* (a link of the
:class:`~orchestrator.backends.inproc.InprocNetwork`) while both ends are live and it is neither cut by a partition
nor taken down by ``link_down``.

**Redialling.** A node redials its configured peers whenever a peering ends (``node/peering.py``): it waits the
backoff x0.8..1.2, then dials; the backoff starts at the node's ``backoff_min_s``, doubles after each wait up to
the longest (a Docker run's nodes get ``REDIAL_MAX_S``), and is reset by a peering that lasted ``STABLE_S``. The
in-process network has no dialers, so a link a router ended for bad input (a forged announcement, a malformed
frame) would stay down, which a real network never does. Here that spec is made again after the same backoff,
drawn from the run's seed, if the run still wants it then: a forger is cut off and peered again, over and over,
as on Docker. Links ended by the run itself (kill, pause, partition, link_down) are made again by the step that
undoes them, as before.
"""

from __future__ import annotations

import random
from typing import Any

from node.config import Timeouts
from node.peering import STABLE_S

from orchestrator.backends.docker_plan import REDIAL_MAX_S

__all__ = ["InprocLinks", "REDIAL_MIN_S", "REDIAL_MAX_S"]

REDIAL_MIN_S = Timeouts().backoff_min_s  # the node's first wait before a redial


class InprocLinks:
    """Mixed into InprocChaos, which holds ``net``, ``seed``, ``specs``, ``made``, ``cut``, ``down``, ``refused``
    and ``_live``. :meth:`_watch_broken` once the network exists."""

    net: Any
    seed: int
    specs: list[tuple[str, str, str, dict[str, Any]]]
    made: dict[int, int]  # spec -> live link id
    cut: set[int]
    down: set[int]
    refused: list[dict[str, Any]]

    def _live(self, name: str) -> bool: ...

    def _watch_broken(self) -> None:
        self._redial_rng = random.Random(f"redial:{self.seed}")
        self._made_at: dict[int, float] = {}  # spec -> when its link last came up
        self._backoff: dict[int, float] = {}  # spec -> its next wait (before jitter)
        self._redial_at: dict[int, float] = {}  # spec -> when its redial is due (until it is made)
        #: (at, spec, node that ended it, reason, wait) of every peering a router ended, and its redial
        self.redials: list[tuple[float, int, str, str, float]] = []
        self.net.on_broken = self._broken

    def _make(self, i: int) -> bool:
        if i in self.made or i in self.cut or i in self.down:
            return False
        a, b, cls, opts = self.specs[i]
        if not (self._live(a) and self._live(b)):
            return False
        lid = self.net.connect(a, b, cls, **opts)
        if lid is None:
            self.refused.append({"a": a, "b": b, "reason": "ports_full", "at_s": round(self.net.now, 3)})
            return False
        self.made[i] = lid
        self._made_at[i] = self.net.now
        self._redial_at.pop(i, None)
        return True

    def _unmake(self, i: int, reason: str) -> None:
        lid = self.made.pop(i, None)
        if lid is not None:
            self.net.disconnect(lid, reason)

    def _specs_between(self, a: str, b: str) -> list[int]:
        return [i for i, (x, y, _, _) in enumerate(self.specs) if {x, y} == {a, b}]

    def _specs_of(self, name: str) -> list[int]:
        return [i for i, (x, y, _, _) in enumerate(self.specs) if name in (x, y)]

    def pending_redial_s(self) -> float:
        """How long until the last redial now due is made (0 when none is): a link being redialled comes back
        then, a topology change that re-convergence bounds must count from (InprocChaos.reconvergence_bound_s)."""
        now = self.net.now
        due = [at - now for i, at in self._redial_at.items() if i not in self.cut and i not in self.down]
        return max(due, default=0.0)

    def _broken(self, lid: int, node: str, reason: str) -> None:
        """A router ended link ``lid`` (already down): its spec is made again after the dialer's backoff."""
        spec = next((i for i, made in self.made.items() if made == lid), None)
        if spec is None:  # a link no spec owns (a radio's): nobody dials it
            return
        del self.made[spec]
        now = self.net.now
        backoff = self._backoff.get(spec, REDIAL_MIN_S)
        if now - self._made_at.get(spec, now) >= STABLE_S:
            backoff = REDIAL_MIN_S
        self._backoff[spec] = min(backoff * 2, REDIAL_MAX_S)
        wait = backoff * self._redial_rng.uniform(0.8, 1.2)
        self.redials.append((round(now, 3), spec, node, reason, round(wait, 3)))
        due = self._redial_at[spec] = now + wait
        self.net.call_at(due, lambda _now: self._redialled(spec, due))

    def _redialled(self, spec: int, due: float) -> None:
        if self._redial_at.get(spec) != due:
            return  # made meanwhile (a heal, a restart), perhaps ended again with a later redial of its own
        del self._redial_at[spec]  # dialled: made now, or not wanted (cut, down, an end dead) any more
        self._make(spec)
