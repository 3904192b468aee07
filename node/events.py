"""The node's structured event log: one JSON object per line (schema v1, ``docs/events.md``).

The schema is fixed by :mod:`contract.dataset` (``EVENT_TYPES``); every line this
module writes passes ``contract.dataset.validate_event``. Common fields:
``v``, ``event``, ``run_id``, ``node`` (hex key), ``node_name``, ``mono_s``
(``time.monotonic()``, CLOCK_MONOTONIC, so lines from several processes on one
host compare) and ``wall_ts`` (Unix seconds).

Durability: every line is flushed to the OS as it is written, so a clean
shutdown (and even ``kill -9``) loses nothing that was emitted. Rate limits keep
a hostile peer from turning the log into a disk flood:

* ``frame_dropped`` is never written per frame: drops are aggregated per
  (frame type, reason) and written as counts by :meth:`EventLog.flush_drops`
  (every stats interval and at shutdown);
* ``bootstrap_rejected`` (one per forged bootstrap) goes through a token bucket;
  what it holds back is counted in ``suppressed``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterable
from typing import IO, Any, Protocol

from contract.lines import EVENT_TYPES, SCHEMA_VERSION
from contract.frames import FRAME_TYPE_NAMES, frame_type_name

__all__ = ["EventLog", "FrameStats", "TokenBucket"]

_RATE_LIMITED = {"bootstrap_rejected": (20.0, 100.0)}  # events per second, burst


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; :meth:`take` says whether one was available."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens, self.last = rate, burst, burst, time.monotonic()

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class EventLog:
    """Writes schema-v1 event lines for one node.

    ``path``: a file path (appended to), ``"-"`` for stdout, or None to keep only
    the counters. Raises OSError from the constructor when the file cannot be opened;
    ValueError from :meth:`emit` for an event kind the schema does not know (a bug).
    """

    def __init__(self, path: str | None, *, run_id: str, node_key: bytes, node_name: str | None) -> None:
        self.run_id = run_id
        self.node = node_key.hex()
        self.node_name = node_name
        self._own = False
        self._f: IO[str] | None
        if path is None:
            self._f = None
        elif path == "-":
            self._f = sys.stdout
        else:
            self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._own = True
        self.written: Counter[str] = Counter()
        self.suppressed: Counter[str] = Counter()
        self._buckets = {k: TokenBucket(r, b) for k, (r, b) in _RATE_LIMITED.items()}
        self._drops: Counter[tuple[str, str]] = Counter()
        self.closed = False

    @property
    def enabled(self) -> bool:
        return self._f is not None and not self.closed

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event now (flushed). Rate-limited kinds may be counted instead of written."""
        if kind not in EVENT_TYPES:
            raise ValueError(f"event kind {kind!r} is not in the schema (contract.dataset.EVENT_TYPES)")
        if self._f is None or self.closed:
            return
        mono = time.monotonic()
        bucket = self._buckets.get(kind)
        if bucket is not None and not bucket.take(mono):
            self.suppressed[kind] += 1
            return
        obj = {
            "v": SCHEMA_VERSION,
            "event": kind,
            "run_id": self.run_id,
            "node": self.node,
            "node_name": self.node_name,
            "mono_s": round(mono, 6),
            "wall_ts": round(time.time(), 6),
        }
        obj.update(fields)
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()
        self.written[kind] += 1

    def count_drop(self, frame_type: int | None, reason: str, n: int = 1) -> None:
        """Note ``n`` dropped frames; written as one aggregated ``frame_dropped`` by :meth:`flush_drops`."""
        self._drops[(frame_type_name(frame_type), reason)] += n

    def flush_drops(self) -> None:
        """Write one ``frame_dropped`` event per (frame type, reason) seen since the last flush."""
        drops, self._drops = self._drops, Counter()
        for (ftype, reason), n in sorted(drops.items()):
            if n:
                self.emit("frame_dropped", frame_type=ftype, reason=reason, count=n)

    def close(self) -> None:
        """Flush and close (idempotent). Nothing is written afterwards."""
        if self.closed:
            return
        self.closed = True
        if self._f is not None:
            try:
                self._f.flush()
            finally:
                if self._own:
                    self._f.close()


def shaper_counts(peer: Any) -> dict[str, int]:
    """A peer's userspace shaper counters: frames ``delayed``, dropped by the ``queue``, dropped by ``loss``."""
    stats = getattr(getattr(peer, "shaper", None), "stats", None)
    if stats is None:
        return {}
    return {"delayed": stats.delayed, "queue": stats.dropped_queue, "loss": stats.dropped_loss}


class _Counted(Protocol):
    """What FrameStats reads from a peer (node.peer.PeerConn)."""

    rx_frames: list[int]
    rx_bytes: list[int]
    tx_frames: list[int]
    tx_bytes: list[int]
    reported: tuple[list[int], list[int], list[int], list[int]]

    @property
    def link(self) -> Any: ...


class FrameStats:
    """Per-peer frame and byte counters -> ``frame_stats`` events and node totals.

    Peers count per frame type on the hot path (plain list increments); this
    class turns them into per (direction, frame type, link class) deltas when
    the stats interval ends, and keeps the totals of peers that have closed.
    """

    def __init__(self, now: float, ntypes: int) -> None:
        self.closed_frames = ([0] * ntypes, [0] * ntypes)  # received, sent; by type
        self.closed_bytes: Counter[tuple[str, str]] = Counter()  # (direction, link class)
        self.closed_shaper: Counter[tuple[str, str]] = Counter()  # (delayed | queue | loss, link class)
        self._cells: dict[tuple[str, str, str], list[int]] = {}
        self._since = now
        self._folded: set[int] = set()

    def collect(self, peer: _Counted) -> None:
        """Move what ``peer`` counted since the last call into the pending cells."""
        cls = peer.link.link_class
        cells = self._cells
        seen = peer.reported
        for direction, frames, nbytes, seen_f, seen_b in (
            ("received", peer.rx_frames, peer.rx_bytes, seen[0], seen[1]),
            ("sent", peer.tx_frames, peer.tx_bytes, seen[2], seen[3]),
        ):
            for t, name in enumerate(FRAME_TYPE_NAMES):
                df = frames[t] - seen_f[t]
                if df:
                    cell = cells.setdefault((direction, name, cls), [0, 0])
                    cell[0] += df
                    cell[1] += nbytes[t] - seen_b[t]
                    seen_f[t], seen_b[t] = frames[t], nbytes[t]

    def fold(self, peer: _Counted) -> None:
        """A peer closed: keep its counts (idempotent per peer object)."""
        if id(peer) in self._folded:
            return
        self._folded.add(id(peer))
        if len(self._folded) > 100_000:
            self._folded.clear()
        self.collect(peer)
        cls = peer.link.link_class
        for t in range(len(self.closed_frames[0])):
            self.closed_frames[0][t] += peer.rx_frames[t]
            self.closed_frames[1][t] += peer.tx_frames[t]
        self.closed_bytes[("received", cls)] += sum(peer.rx_bytes)
        self.closed_bytes[("sent", cls)] += sum(peer.tx_bytes)
        for what, n in shaper_counts(peer).items():
            self.closed_shaper[(what, cls)] += n

    def emit(self, log: EventLog, peers: Iterable[_Counted], now: float) -> None:
        """Write one frame_stats event per non-empty cell of the interval ending ``now``."""
        for peer in peers:
            self.collect(peer)
        interval = round(max(now - self._since, 1e-6), 6)
        for (direction, ftype, cls), (frames, nbytes) in sorted(self._cells.items()):
            log.emit("frame_stats", interval_s=interval, direction=direction, frame_type=ftype,
                     link_class=cls, frames=frames, bytes=nbytes)  # fmt: skip
        self._cells = {}
        self._since = now
