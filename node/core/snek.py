"""SNEK routing state and the next-hop algorithm (PROTOCOL.md §6.1, §6.3).

Two implementations of §6.3 live here:

* :func:`next_hop_reference` is a literal transcription of the spec's steps,
  scanning every peer announcement and every table entry. It is the oracle.
* :meth:`SnekView.next_hop` gives the same answer from sorted indexes
  (a bisect for the lowest key above the destination), so one decision costs
  a few microseconds whatever the table size. Property tests check that the
  two agree on random states.

Why the indexed version is exact: every "offer" in steps 3-6 takes a key only
when it lies strictly between the destination and the current best, and the
best only ever decreases. So after a run of offers the best key is the lowest
offered key in (destination, initial best), carried by the first port that
offered it; an exact match (non-bootstrap) beats everything and sticks.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .state import PeerState
from .types import LOCAL_PORT, Root, Watermark

__all__ = ["Entry", "RoutingTable", "NextHop", "SnekView", "next_hop_reference", "EXPIRY_S", "ordered"]

#: ``tuple.__new__``: builds a NamedTuple in C, where calling the class runs its Python-level ``__new__``
_new_tuple: Final = tuple.__new__

EXPIRY_S: Final = 10.0  # virtualSnakeNeighExpiryPeriod
NONE_PORT: Final = -1  # "none": no next hop (bootstrap dead end)


def ordered(a: bytes, b: bytes, c: bytes) -> bool:
    """§2 DHT-ordered predicate: a < b < c, strict, no wrap-around."""
    return a < b < c


@dataclass(slots=True)
class Entry:
    """One routing-table entry (§6.1): a route back to the node ``key``."""

    key: bytes
    source: int
    destination: int  # NONE_PORT when the bootstrap ended here
    last_seen: float
    root: Root
    seq: int  # watermark = (key, seq)
    ttl: float = EXPIRY_S  # lifetime without a refresh (the entry_expiry knob)

    def __init__(
        self, key: bytes, source: int, destination: int, last_seen: float, root: Root, seq: int, ttl: float = EXPIRY_S
    ) -> None:
        # The dataclass __init__ written out (one per installed bootstrap): mypyc compiles it, not the generated one.
        self.key = key
        self.source = source
        self.destination = destination
        self.last_seen = last_seen
        self.root = root
        self.seq = seq
        self.ttl = ttl

    def valid(self, now: float) -> bool:
        return now - self.last_seen < self.ttl

    @property
    def expires_at(self) -> float:
        return self.last_seen + self.ttl

    @property
    def watermark(self) -> Watermark:
        return Watermark(self.key, self.seq)


class RoutingTable:
    """At most one entry per origin key, with the keys kept in a sorted list (C bisect)."""

    __slots__ = ("_entries", "keys", "next_expiry")

    def __init__(self) -> None:
        self._entries: dict[bytes, Entry] = {}
        self.keys: list[bytes] = []  # sorted; read-only for callers
        self.next_expiry = 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def get(self, key: bytes) -> Entry | None:
        return self._entries.get(key)

    def install(self, entry: Entry) -> None:
        if entry.key not in self._entries:
            insort(self.keys, entry.key)
        self._entries[entry.key] = entry

    def remove(self, key: bytes) -> None:
        if self._entries.pop(key, None) is not None:
            del self.keys[bisect_left(self.keys, key)]

    def remove_where(self, pred: Callable[[Entry], bool]) -> int:
        doomed = [k for k, e in self._entries.items() if pred(e)]
        if doomed:
            for k in doomed:
                del self._entries[k]
            self.keys = sorted(self._entries)
        return len(doomed)

    def clear(self) -> None:
        self._entries.clear()
        self.keys = []
        self.next_expiry = 0.0

    def expire(self, now: float) -> int:
        """Delete expired entries (§6.7 step 2: 10 s old or more, or their ``ttl``). Cheap when nothing
        can have expired.

        ``next_expiry`` is a lower bound on when the first entry expires: installs and refreshes only ever
        make entries younger (a variant installs with one ttl), so nothing expires before it.
        """
        if now < self.next_expiry:
            return 0
        first = float("inf")
        doomed = []
        for k, e in self._entries.items():
            if now - e.last_seen >= e.ttl:
                doomed.append(k)
            elif e.last_seen + e.ttl < first:
                first = e.last_seen + e.ttl
        for k in doomed:
            del self._entries[k]
        if doomed:
            self.keys = sorted(self._entries)
        self.next_expiry = first if first != float("inf") else now
        return len(doomed)


class NextHop(NamedTuple):
    port: int  # a remote port, LOCAL_PORT, or NONE_PORT
    watermark: Watermark


class SnekView:
    """Indexes over the peers' announcements, rebuilt lazily when they change."""

    def __init__(self) -> None:
        self.dirty = True
        self._anc_port: dict[bytes, int] = {}  # hop key -> first port (ascending) whose announcement carries it
        self._anc_keys: list[bytes] = []  # the same keys, sorted
        self._ports_by_key: dict[bytes, list[int]] = {}  # peer key -> ascending ports (up, with announcement)
        self._parent_keys: frozenset[bytes] = frozenset()
        self._parent_up = False

    def rebuild(self, peers: dict[int, PeerState], parent: int | None) -> None:
        anc: dict[bytes, int] = {}
        by_key: dict[bytes, list[int]] = {}
        for port in sorted(peers):
            p = peers[port]
            if p.announcement is None or not p.up:  # §0: a stopped peer is ignored at once
                continue
            by_key.setdefault(p.key, []).append(port)
            for k in p.hop_keys:
                anc.setdefault(k, port)
        self._anc_port = anc
        self._anc_keys = sorted(anc)
        self._ports_by_key = by_key
        pp = peers.get(parent) if parent is not None else None
        self._parent_up = pp is not None and pp.up
        self._parent_keys = (
            frozenset(pp.hop_keys) if pp is not None and self._parent_up and pp.announcement is not None else frozenset()
        )
        self.dirty = False

    def next_hop(
        self, own: bytes, dest: bytes, bootstrap: bool, wm: Watermark, parent: int | None, root_key: bytes,
        peers: dict[int, PeerState], table: RoutingTable, now: float, only_root: Root | None = None,
    ) -> NextHop:
        """§6.3, indexed. Same inputs and result as :func:`next_hop_reference`.

        With ``only_root`` (the ``root_filter`` knob), step 6 skips entries installed under another root.
        """
        if not bootstrap and dest == own:
            return NextHop(LOCAL_PORT, wm)
        if self.dirty:
            self.rebuild(peers, parent)
        best_key = own
        best_seq = 0
        best_port = NONE_PORT if bootstrap else LOCAL_PORT
        # Step 3.1: head for the root (own bootstrap, or a destination above us).
        if not self._parent_up:
            parent = None  # step 3 applies only to a parent that is up
        if parent is not None and ((bootstrap and own == dest) or own < dest < root_key):
            best_key, best_port = root_key, parent
        # Steps 3.2 + 4: ancestors of the parent first, then of every peer by port.
        anc = self._anc_port
        found = None
        if not bootstrap and dest in anc:
            found = dest
        else:
            keys = self._anc_keys
            i = bisect_right(keys, dest)
            if i < len(keys) and keys[i] < best_key:
                found = keys[i]
        if found is not None:
            best_key = found
            best_port = parent if (parent is not None and found in self._parent_keys) else anc[found]
        # Step 5: a direct peering with the best key (the last port examined wins).
        ports = self._ports_by_key.get(best_key)
        if ports:
            best_port = ports[-1]
            best_seq = 0
        # Step 6: the routing table.
        e = None
        wkey, wseq = wm
        entries = table._entries  # this loop is the hot path
        if not bootstrap and best_key != dest:
            e = entries.get(dest)
            if e is not None and (not _usable(e, wkey, wseq, peers, now) or (only_root is not None and e.root != only_root)):
                e = None
        if e is None:
            keys = table.keys
            i = bisect_right(keys, dest)
            n = len(keys)
            while i < n:
                k = keys[i]
                if k >= best_key or k > wkey:
                    break
                cand = entries.get(k)  # never None: ``keys`` are the table's keys
                if (
                    cand is not None
                    and _usable(cand, wkey, wseq, peers, now)
                    and (only_root is None or cand.root == only_root)
                ):
                    e = cand
                    break
                i += 1
        if e is not None:
            best_key, best_seq, best_port = e.key, e.seq, e.source
        # Step 7: link refinement among the links to the best key.
        bp = peers.get(best_port) if best_port > 0 else None
        if bp is not None and bp.announcement is not None:
            for port in self._ports_by_key.get(best_key, ()):
                q = peers[port]
                if q.link_type < bp.link_type or (
                    q.link_type == bp.link_type and q.root == bp.root and q.order < bp.order
                ):
                    best_port, bp = port, q
        return _new_tuple(NextHop, (best_port, _new_tuple(Watermark, (best_key, best_seq))))  # NextHop(, Watermark())


def _usable(e: Entry, wkey: bytes, wseq: int, peers: dict[int, PeerState], now: float) -> bool:
    """Step 6's filter: source up, entry valid, its watermark (key, seq) not worse than (wkey, wseq) (§4.8)."""
    src = peers.get(e.source)
    if src is None or not src.up or now - e.last_seen >= e.ttl:
        return False
    k = e.key
    if k != wkey:
        return k < wkey
    return e.seq == 0 or e.seq >= wseq


def next_hop_reference(
    *,
    own: bytes,
    dest: bytes,
    bootstrap: bool,
    wm: Watermark,
    parent: int | None,
    root_key: bytes,
    peers: dict[int, PeerState],
    table: RoutingTable,
    now: float,
    only_root: Root | None = None,
) -> NextHop:
    """§6.3 step by step, scanning everything. The oracle for the indexed version."""
    if not bootstrap and dest == own:  # 1
        return NextHop(LOCAL_PORT, wm)
    best: dict[str, Any] = {"key": own, "seq": 0, "port": NONE_PORT if bootstrap else LOCAL_PORT}  # 2

    def take(key: bytes, seq: int, port: int) -> None:
        best["key"], best["seq"], best["port"] = key, seq, port

    def offer(key: bytes, seq: int, port: int) -> None:
        if (not bootstrap and key == dest and best["key"] != dest) or ordered(dest, key, best["key"]):
            take(key, seq, port)

    up = {p: q for p, q in sorted(peers.items()) if q.up}
    if parent is not None and parent in up:  # 3
        if (bootstrap and own == dest) or ordered(own, dest, root_key):
            take(root_key, 0, parent)
        if up[parent].announcement is not None:
            for k in up[parent].hop_keys:
                offer(k, 0, parent)
    for port, q in up.items():  # 4
        if q.announcement is not None:
            for k in q.hop_keys:
                offer(k, 0, port)
    for port, q in up.items():  # 5
        if q.announcement is not None and q.key == best["key"]:
            take(best["key"], 0, port)
    for e in table:  # 6
        if e.source not in up or not e.valid(now) or e.watermark.worse_than(wm):
            continue
        if only_root is not None and e.root != only_root:
            continue
        offer(e.key, e.seq, e.source)
    bp = up.get(best["port"])  # 7
    if bp is not None and bp.announcement is not None:
        for port, q in up.items():
            if q.announcement is None or q.key != best["key"]:
                continue
            if q.link_type < bp.link_type or (
                q.link_type == bp.link_type and q.root == bp.root and q.order < bp.order
            ):
                best["port"], bp = port, q
    return NextHop(best["port"], Watermark(best["key"], best["seq"]))
