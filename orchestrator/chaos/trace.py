"""The hash of a run's event trace: ``trace_sha256`` in the ``snekbed chaos --json`` document.

What is hashed, exactly (docs/chaos.md, "Reproducibility"): one UTF-8 line per item, in the order the run saw them,

    <protocol time, seconds, 6 decimals>\\t<node or target>\\t<kind>\\t<fields as compact JSON, keys sorted>\\n

for every **routing event** of every node (:data:`ROUTING_EVENTS`: peerings up and down, root, parent, coordinates
and descending changes, with their fields: keys as hex, ports, reasons) and every **fault action** the runner
records (``step``, ``kill``, ``partition`` with the links it cut, ...; kind ``action:<name>``, node ``-`` when it
has no target). Times are the in-process network's protocol clock, never wall time. Frames, pings and the
events only a recorded run emits (bootstrap accepted / rejected) are left out, so ``--record`` does not change
the hash. In process on the virtual clock the same scenario, topology, seed, options and code give the same
hash; on the real clock, Docker or a swarm there is no such promise (``trace_sha256`` is null there: see
``snekbed chaos --repeat``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["ROUTING_EVENTS", "TraceHash"]

#: the router events hashed: every change of a node's routing state
ROUTING_EVENTS = frozenset(
    {"peer_up", "peer_down", "root_changed", "parent_changed", "coords_changed", "descending_changed"})


class TraceHash:
    """SHA-256 over a run's routing events and fault actions, fed as they happen."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.lines = 0

    def _line(self, now: float, who: str, kind: str, fields: Any) -> None:
        body = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        self._h.update(f"{now:.6f}\t{who}\t{kind}\t{body}\n".encode())
        self.lines += 1

    def event(self, node: str, kind: str, fields: dict[str, Any], now: float) -> None:
        """One router event (InprocNetwork.on_event's); kept when it is a routing event."""
        if kind in ROUTING_EVENTS:
            self._line(now, node, kind, fields)

    def action(self, action: str, target: str | None, detail: dict[str, Any] | None, now: float) -> None:
        """One fault action (the runner's ActionHook)."""
        self._line(now, target if target is not None else "-", f"action:{action}", detail or {})

    def hexdigest(self) -> str:
        return self._h.hexdigest()
