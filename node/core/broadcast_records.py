"""The wakeup-broadcast records of §6.8 (PROTOCOL.md): per source key, the sequence and the time of the last
broadcast recorded from it, which the duplicate filter reads, the 60 s tick expires after 3 minutes, and a
bound (``max_cached``) evicts from, oldest inserted first.

Two layouts with the same behaviour, bit for bit (tests/node/core/test_broadcast_records.py drives both with the
same operations):

* :class:`DictRecords`, a node's own: a dict of source key to ``sequence << 64 | the IEEE-754 bits of when``
  (one object per record, some 80 bytes with its dict slot);
* :class:`FlatRecords`, for a simulation of many routers in one process: the routers share a :class:`KeyIndex`
  (each key seen gets a small number) and each keeps two flat arrays indexed by it, sequences (4 bytes, 8 once
  one needs more) and times (8 bytes), and the numbers present in the order they were first inserted (4 bytes):
  no Python object per record. N routers that each hear most of N sources hold about 16 x N^2 bytes, a figure of
  the graph rather than of the bursts (docs/performance.md, "The wakeup-broadcast burst").

Both answer :meth:`admit`: the filter and the record in one call, the hot path of a broadcast received.
"""

from __future__ import annotations

import math
import struct
from array import array
from typing import Final

__all__ = ["DictRecords", "FlatRecords", "KeyIndex", "Records"]

_WHEN: Final = struct.Struct("<d")
_LOW_64: Final = (1 << 64) - 1
_MAX_32: Final = (1 << 32) - 1
_NAN: Final = math.nan


def _record(seq: int, when: float) -> int:
    return seq << 64 | int.from_bytes(_WHEN.pack(when), "little")


def _when(record: int) -> float:
    when: float = _WHEN.unpack((record & _LOW_64).to_bytes(8, "little"))[0]
    return when


class KeyIndex:
    """Keys to small numbers, shared by the routers of one simulation (each router's arrays are indexed by them)."""

    def __init__(self) -> None:
        self.numbers: dict[bytes, int] = {}
        self.keys: list[bytes] = []

    def number(self, key: bytes) -> int:
        n = self.numbers.get(key)
        if n is None:
            n = len(self.keys)
            self.numbers[key] = n
            self.keys.append(key)
        return n

    def __len__(self) -> int:
        return len(self.keys)


class Records:
    """What :class:`~node.core.broadcast.Broadcasts` needs of its records."""

    def admit(self, key: bytes, seq: int, now: float, filter_s: float) -> bool:
        """§6.8's filter: False when ``key``'s record is younger than ``filter_s`` or has a sequence not below
        ``seq``; otherwise record ``(seq, now)`` for it (evicting the oldest inserted record when full and ``key`` has
        none) and True."""
        raise NotImplementedError

    def expire(self, now: float, expiry_s: float) -> None:
        """Forget the records as old as ``expiry_s`` or older; the others keep their order."""
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def get(self, key: bytes) -> tuple[int, float] | None:
        """``key``'s record, (sequence, when), or None."""
        raise NotImplementedError

    def items(self) -> list[tuple[bytes, int, float]]:
        """Every record, (key, sequence, when), oldest inserted first."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class DictRecords(Records):
    """A dict of key to packed record: insertion order is the eviction order (an update keeps its place)."""

    def __init__(self, max_cached: int) -> None:
        self.max_cached = max_cached
        self.seen: dict[bytes, int] = {}

    def admit(self, key: bytes, seq: int, now: float, filter_s: float) -> bool:
        seen_map = self.seen
        rec = seen_map.get(key)
        if rec is not None:
            if now - _when(rec) < filter_s or seq <= rec >> 64:
                return False
        elif len(seen_map) >= self.max_cached:
            del seen_map[next(iter(seen_map))]
        seen_map[key] = _record(seq, now)
        return True

    def expire(self, now: float, expiry_s: float) -> None:
        self.seen = {k: v for k, v in self.seen.items() if now - _when(v) < expiry_s}

    def clear(self) -> None:
        self.seen = {}

    def get(self, key: bytes) -> tuple[int, float] | None:
        rec = self.seen.get(key)
        return None if rec is None else (rec >> 64, _when(rec))

    def items(self) -> list[tuple[bytes, int, float]]:
        return [(k, v >> 64, _when(v)) for k, v in self.seen.items()]

    def __len__(self) -> int:
        return len(self.seen)


class FlatRecords(Records):
    """Flat arrays indexed by the shared :class:`KeyIndex`: ``whens[n]`` is NaN where key n has no record."""

    def __init__(self, keys: KeyIndex, max_cached: int) -> None:
        self.keys = keys
        self.max_cached = max_cached
        self.seqs = array("I")
        self.whens = array("d")
        self.order = array("i")  # the numbers present, first inserted first
        self.head = 0  # order[:head] were evicted (compacted at the next expiry)

    def _grow(self) -> None:
        """Room for every number the shared index has given so far (no record: NaN)."""
        extra = len(self.keys) - len(self.whens)
        if extra > 0:
            self.seqs.extend(array(self.seqs.typecode, [0]) * extra)
            self.whens.extend(array("d", [_NAN]) * extra)

    def admit(self, key: bytes, seq: int, now: float, filter_s: float) -> bool:
        n = self.keys.number(key)
        whens = self.whens
        if n >= len(whens):
            self._grow()
            whens = self.whens
        when = whens[n]
        if when == when:  # a record (NaN: none)
            if now - when < filter_s or seq <= self.seqs[n]:
                return False
        else:
            if len(self.order) - self.head >= self.max_cached:
                whens[self.order[self.head]] = _NAN
                self.head += 1
            self.order.append(n)
        if seq > _MAX_32 and self.seqs.typecode == "I":
            self.seqs = array("Q", self.seqs)
        self.seqs[n] = seq
        whens[n] = now
        return True

    def expire(self, now: float, expiry_s: float) -> None:
        whens = self.whens
        kept = array("i")
        for i in range(self.head, len(self.order)):
            n = self.order[i]
            if now - whens[n] < expiry_s:
                kept.append(n)
            else:
                whens[n] = _NAN
        self.order, self.head = kept, 0

    def clear(self) -> None:
        self.seqs, self.whens, self.order, self.head = array("I"), array("d"), array("i"), 0

    def get(self, key: bytes) -> tuple[int, float] | None:
        n = self.keys.numbers.get(key)
        if n is None or n >= len(self.whens) or self.whens[n] != self.whens[n]:
            return None
        return self.seqs[n], self.whens[n]

    def items(self) -> list[tuple[bytes, int, float]]:
        keys = self.keys.keys
        return [(keys[n], self.seqs[n], self.whens[n]) for n in self.order[self.head :]]

    def __len__(self) -> int:
        return len(self.order) - self.head
