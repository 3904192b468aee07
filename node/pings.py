"""The node's ping client (PROTOCOL.md §8): ``POST /ping`` waits here for the router's results.

The router's :class:`node.core.ping.PingService` sends pings and reports
:class:`~node.core.ping.PingResult` objects; the node hands each batch to
:meth:`Pinger.on_results`, which wakes the callers of :meth:`Pinger.ping`.
At most one ping per target is outstanding (the reference's rule): callers
to the same target queue on a per-target lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from node.core.ping import PingResult
from node.core.router import Router

__all__ = ["Pinger"]


class Pinger:
    """Waits for ping results on behalf of admin requests. ``flush`` drains the router's outputs."""

    def __init__(self, router: Router, flush: Callable[[], None]) -> None:
        self.router = router
        self._flush = flush
        self.locks: dict[bytes, trio.Lock] = {}  # one outstanding ping per target
        self.waiters: dict[bytes, list[PingResult]] = {}
        self.lot = trio.lowlevel.ParkingLot()

    def on_results(self, results: list[PingResult]) -> None:
        """Hand results to whoever waits for their target."""
        for res in results:
            box = self.waiters.get(res.target)
            if box is not None:
                box.append(res)
        self.lot.unpark_all()

    async def ping(self, key: bytes, mode: str, count: int, timeout_s: float) -> dict[str, Any]:
        """Send ``count`` pings one after another (§8); tree mode first learns the target's coordinates."""
        rtts: list[float] = []
        hops: list[int] = []
        if mode == "tree" and key != self.router.key and not self._coords_fresh(key):
            await self._ping_once(key, "snek", timeout_s)  # its pong fills the coordinates cache
        for _ in range(count):
            res = await self._ping_once(key, mode, timeout_s)
            if res is not None and res.received:
                rtts.append(round((res.rtt_s or 0.0) * 1000.0, 4))
                hops.append(res.hops if res.hops is not None else 0)
        return {"sent": count, "received": len(rtts), "rtt_ms": rtts, "hops": hops}

    def _coords_fresh(self, key: bytes) -> bool:
        hit = self.router.coords_cache.get(key)
        return hit is not None and trio.current_time() - hit[1] < self.router.t.coords_cache_lifetime_s

    async def _ping_once(self, key: bytes, mode: str, timeout_s: float) -> PingResult | None:
        """One ping, waiting for any outstanding ping to the same target first (one at a time, §8)."""
        lock = self.locks.setdefault(key, trio.Lock())
        async with lock:
            r = self.router
            with trio.move_on_after(timeout_s + 1.0):
                while key in r.ping.pending:
                    await self.lot.park()
            if not r.ping.start(key, trio.current_time(), mode=mode, timeout_s=timeout_s):
                return None
            self._flush()
            box = self.waiters.setdefault(key, [])
            with trio.move_on_after(timeout_s + 1.0):
                while not box:
                    await self.lot.park()
            self.waiters.pop(key, None)
            if not lock.statistics().tasks_waiting:
                self.locks.pop(key, None)
            return box[0] if box else None
