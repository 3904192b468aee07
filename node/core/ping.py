"""The reference simulator's ping convention (PROTOCOL.md §8), sans-IO.

A ping is the 75-byte payload of an ordinary Traffic frame. Every node
increments ``hops`` on each Ping it forwards (the origin's first step
included, the final delivery excluded), so the reported ``hops`` is the number
of links on the forward path plus one. The target turns it into a Pong with
the same ``hops`` and sends it back as new traffic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from . import wire
from .types import Frame, with_payload

__all__ = ["PingService", "PingResult", "PING", "PONG", "PING_TIMEOUT_S"]

PING: Final = 0
PONG: Final = 1
PING_TIMEOUT_S: Final = 5.0
_PREAMBLE: Final = b"pineping"


@dataclass(frozen=True, slots=True)
class PingResult:
    target: bytes
    mode: str
    sent_at: float
    received: bool
    rtt_s: float | None
    hops: int | None  # links on the forward path + 1 (§8)

    @property
    def links(self) -> int | None:
        return None if self.hops is None else self.hops - 1


@dataclass(slots=True)
class _Pending:
    mode: str
    sent_at: float
    deadline: float


class PingService:
    """At most one outstanding ping per target, 5 s timeout (as the reference simulator)."""

    def __init__(
        self,
        key: bytes,
        counters: Counter[tuple],
        send_traffic: Callable[..., None],
        emit: Callable[..., None],
        deadline_changed: Callable[[], None],
    ) -> None:
        """``send_traffic(dest, payload, now, coords=...)`` originates Traffic (§6.6); ``emit(kind, **fields)``
        logs an event; ``deadline_changed()`` tells the router that :meth:`next_deadline` moved."""
        self.key = key
        self.counters = counters
        self._send_traffic = send_traffic
        self._emit = emit
        self._deadline_changed = deadline_changed
        self.pending: dict[bytes, _Pending] = {}
        self.results: list[PingResult] = []

    def start(
        self,
        target: bytes,
        now: float,
        *,
        mode: str = "snek",
        coords: tuple[int, ...] | None = None,
        timeout_s: float = PING_TIMEOUT_S,
    ) -> bool:
        """Send one Ping. ``mode="snek"`` forces SNEK routing; ``"tree"`` uses
        ``coords`` (or the coordinates cache). False if one is already outstanding."""
        if mode not in ("snek", "tree"):
            raise ValueError(f"ping mode must be 'snek' or 'tree', not {mode!r}")
        if target in self.pending:
            return False
        self.pending[target] = _Pending(mode, now, now + timeout_s)
        self._deadline_changed()
        payload = wire.encode_ping(PING, 1, self.key, target)
        self._send_traffic(target, payload, now, coords=() if mode == "snek" else coords)
        return True

    def on_forward(self, frame: Frame) -> Frame:
        """The forwarding hook: count this hop on a Ping."""
        p = frame.payload
        if len(p) >= wire.PING_LEN and p[8] == PING and p[:8] == _PREAMBLE:
            return with_payload(frame, wire.increment_ping_hops(p))
        return frame

    def on_delivered(self, frame: Frame, now: float) -> bool:
        """Handle a delivered Traffic frame. True when it was a ping (consumed)."""
        parsed = wire.decode_ping(frame.payload)
        if parsed is None:
            return False
        kind, hops, origin, dest = parsed
        if kind == PING:
            if dest == self.key and frame.destination_key == self.key:
                pong = wire.encode_ping(PONG, hops, origin, dest)
                self._send_traffic(origin, pong, now)
            else:
                self.counters[("ping_misdelivered",)] += 1
            return True
        if origin != self.key:
            self.counters[("pong_misdelivered",)] += 1
            return True
        pend = self.pending.pop(dest, None)
        if pend is None:
            self.counters[("pong_late",)] += 1
            return True
        self._record(PingResult(dest, pend.mode, pend.sent_at, True, now - pend.sent_at, hops))
        return True

    def next_deadline(self) -> float:
        if not self.pending:
            return float("inf")
        return min((p.deadline for p in self.pending.values()), default=float("inf"))

    def handle_timer(self, now: float) -> None:
        for target in [t for t, p in self.pending.items() if p.deadline <= now]:
            p = self.pending.pop(target)
            self._record(PingResult(target, p.mode, p.sent_at, False, None, None))

    def _record(self, res: PingResult) -> None:
        self.results.append(res)
        self._emit(
            "ping_result",
            target=res.target.hex(),
            mode=res.mode,
            received=res.received,
            rtt_ms=None if res.rtt_s is None else res.rtt_s * 1000.0,
            hops=res.hops,
        )
