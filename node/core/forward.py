"""Traffic forwarding (PROTOCOL.md §6.5, §6.6) and the transit fast path.

:class:`Forwarding` is one of the parts :class:`node.core.router.Router` holds. It owns the coordinates
cache (§6.6), its sweep timer and the transit cache, and it is given the router's outbox and ping service
(:mod:`node.core.ping`: a Ping counts its hops here, a delivered ping is answered there). The routing
decisions are not its own: the router hands it the tree (:class:`~node.core.tree.Tree`, §5.8) and the SNEK
variant (:class:`~node.core.snek_api.SnekStrategy`, §6.3) with each frame to forward.

**The transit fast path.** :meth:`~node.core.router.Router.bytes_received` gets frames as a stream reader
splits them, ``(type, whole frame bytes)``, and hands runs of them to :meth:`Forwarding.forward_transit`.
A Traffic frame passing through (not for us, not a ping, and laid out exactly as our encoder would write
it: :func:`transit_key`) is looked up in the transit cache by (arrival port, what the routing decision
depends on); on a hit its bytes go to the outbox with the cached watermark spliced in
(:func:`splice_watermark`), with no decode, no decision and no encode. On a miss it is decoded and
forwarded (:meth:`Forwarding.forward`), and if forwarding changed nothing but its watermark the decision
is cached (:meth:`Forwarding._learn`). Any other frame goes back to the router, which decodes it and
takes :meth:`~node.core.router.Router.frame_received`.

The cache is correct because Traffic is the only input that leaves routing state alone: the router
empties it (:meth:`Forwarding.routing_changed`) on every other input (any other frame type, a timer, a
peer coming or going, a reset), and an entry never outlives the oldest route the SNEK variant could have
used (``routes_valid_until``). Hop limiting (every hop rewrites the hop limit) turns the fast path off.
"""

from __future__ import annotations

from typing import Final

from . import wire
from .codec import U16
from .ping import PingService
from .reasons import count_drop
from .snek_api import SnekStrategy
from .state import Encoded, Outbox, Send, Timers
from .tree import Tree
from .types import (LOCAL_PORT, MAX_HOP_LIMIT, Frame, FrameType, with_hop_limit, with_watermark,
                    without_destination_coords)

__all__ = ["TRANSIT_CACHE_MAX", "Forwarding", "TransitCache", "splice_watermark", "transit_key"]

TRANSIT_CACHE_MAX: Final = 4096
_TRAFFIC: Final = int(FrameType.TRAFFIC)
_PING_PREAMBLE: Final = wire.PING_PREAMBLE
_LEN: Final = U16
_new_tuple: Final = tuple.__new__  # builds a NamedTuple in C (calling the class runs a Python-level __new__)


def transit_key(raw: bytes, own: bytes) -> tuple[bytes, int, int, bytes, bytes] | None:
    """Parse a Traffic frame just enough to look up the forwarding cache.

    Returns (decision key, watermark start, watermark end, destination key,
    source key), or None when the frame must take the full path: addressed to
    us, a ping (its hop count changes on the way), non-zero version/extra bytes,
    multi-byte coordinate ports or a non-minimal watermark sequence (the
    encoder would rewrite those bytes), or anything that does not add up. The
    key is the destination coordinates (tree routing) or the destination key
    plus the raw watermark (SNEK routing): what the router's decision depends on.
    """
    n = len(raw)
    if n < 80 or raw[4] or raw[6]:
        return None
    dcl = (raw[12] << 8) | raw[13]
    i = 14 + dcl
    if i + 2 > n or (dcl and max(raw[14:i]) >= 0x80):
        return None
    scl = (raw[i] << 8) | raw[i + 1]
    j = i + 2 + scl
    ke = j + 64
    if ke > n or (scl and max(raw[i + 2 : j]) >= 0x80):
        return None
    dst = raw[j : j + 32]
    if dst == own:
        return None
    if dcl:
        wm_end = ke
        key = raw[12:i]
    else:
        e = ke + 32
        if e >= n or raw[e] == 0x80:
            return None
        lim = min(n, e + 10)
        while raw[e] >= 0x80:
            e += 1
            if e >= lim:
                return None
        wm_end = e + 1
        key = raw[ke:wm_end] + dst
    if n - wm_end != (raw[10] << 8) | raw[11] or raw[wm_end : wm_end + 8] == _PING_PREAMBLE:
        return None
    return key, ke, wm_end, dst, raw[j + 32 : ke]


def splice_watermark(raw: bytes, start: int, end: int, wm: bytes | None) -> bytes:
    """``raw`` with bytes start..end replaced by ``wm`` (None: unchanged), the length field fixed."""
    if wm is None:
        return raw
    if len(wm) == end - start:
        return raw[:start] + wm + raw[end:]
    return raw[:8] + _LEN.pack(len(raw) - (end - start) + len(wm)) + raw[10:start] + wm + raw[end:]


class TransitCache:
    """(arrival port, transit key) -> (next port, watermark bytes or None), valid until ``until``."""

    __slots__ = ("entries", "until")

    def __init__(self) -> None:
        self.entries: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
        self.until = float("inf")

    def clear(self) -> None:
        self.entries.clear()


class Forwarding:
    """§6.5 for Traffic, §6.6, and the transit fast path. Built once per router."""

    def __init__(
        self, key: bytes, timers: Timers, hop_limiting: bool, max_cached: int, outbox: Outbox, ping: PingService
    ) -> None:
        self.key = key
        self.t = timers
        self.hop_limiting = hop_limiting
        self.max_cached = max_cached
        self.outbox = outbox
        self.ping = ping
        self.coords_cache: dict[bytes, tuple[tuple[int, ...], float]] = {}  # §6.6: key -> (coordinates, when)
        self.next_coords_sweep = 0.0
        self.transit = TransitCache()
        self.fast_forwards = 0  # transit frames forwarded from the cache

    # ------------------------------------------------------------------ state and timers

    def reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2."""
        self.coords_cache = {}
        self.transit.clear()
        self.next_coords_sweep = now + self.t.coords_cache_sweep_s

    def routing_changed(self) -> None:
        """Any input but Traffic may move routing state: forget every cached transit decision."""
        self.transit.clear()

    def root_key_changed(self) -> None:
        """§6.6: a parent change altered the root key; cached coordinates are void."""
        self.coords_cache.clear()

    def next_deadline(self) -> float:
        return self.next_coords_sweep

    def tick(self, now: float) -> None:
        """§6.6: the 60 s sweep of entries older than the cache lifetime, if due."""
        if now < self.next_coords_sweep:
            return
        self.next_coords_sweep = now + self.t.coords_cache_sweep_s
        life = self.t.coords_cache_lifetime_s
        self.coords_cache = {k: v for k, v in self.coords_cache.items() if now - v[1] < life}

    def expire_transit(self, now: float) -> None:
        """Forget the cached transit decisions once a route they may have used can have expired."""
        transit = self.transit
        if transit.entries and now >= transit.until:
            transit.entries.clear()

    # ------------------------------------------------------------------ the transit fast path

    def forward_transit(
        self, port: int, frames: list[tuple[int, bytes]], start: int, now: float, tree: Tree, snek: SnekStrategy
    ) -> int:
        """Forward the transit Traffic frames of ``frames`` from index ``start`` on, as they arrived on ``port``
        (an up peer, no adversary, no hop limiting: the router checks): from the cache, or decoded and
        forwarded. Returns the index of the first frame that is not one, ``len(frames)`` when all were.

        Raises MalformedFrame for a frame that does not decode (the frames before it took effect).
        """
        entries = self.transit.entries
        own = self.key
        outbox = self.outbox
        decode = wire.decode_frame
        n = len(frames)
        i = start - 1
        for t, raw in frames if start == 0 else frames[start:]:  # iterating beats indexing when interpreted
            i += 1
            if t != _TRAFFIC:
                return i
            tr = transit_key(raw, own)
            if tr is None:
                return i
            key = (port, tr[0])
            hit = entries.get(key)
            if hit is not None:
                data = splice_watermark(raw, tr[1], tr[2], hit[1])
                outbox.sends.append((hit[0], _new_tuple(Encoded, (_TRAFFIC, tr[4], tr[3], data))))  # Encoded(...)
                self.fast_forwards += 1
                continue
            f = decode(raw)
            sends = outbox.sends
            before = len(sends)
            self.forward(f, port, now, tree, snek)
            if len(outbox.sends) == before + 1 and outbox.sends is sends:
                self._learn(key, f, sends[-1], snek)
        return n

    def _learn(self, key: tuple[int, bytes], f: Frame, out: Send, snek: SnekStrategy) -> None:
        """Cache the decision for a transit frame when forwarding changed nothing but the watermark."""
        port, of = out
        if not (type(of) is Frame and of.type == _TRAFFIC and of.payload is f.payload
                and of.source_key is f.source_key and of.destination_key is f.destination_key
                and of.hop_limit == f.hop_limit):  # fmt: skip
            return
        if f.destination_coords:
            if of.destination_coords is not f.destination_coords or of.watermark is not f.watermark:
                return  # fell back from tree to SNEK routing: not cached
            wm = None
        elif of.destination_coords:
            return
        else:
            wm = of.watermark.key + wire.encode_varu64(of.watermark.seq)
        transit = self.transit
        entries = transit.entries
        if not entries:  # first entry since the last change: valid until the oldest route expires
            transit.until = snek.routes_valid_until()
        if len(entries) >= TRANSIT_CACHE_MAX:
            entries.clear()
        entries[key] = (port, wm)

    # ------------------------------------------------------------------ §6.5, §6.6

    def originate(
        self, dest: bytes, payload: bytes, now: float, coords: tuple[int, ...] | None, tree: Tree, snek: SnekStrategy
    ) -> None:
        """§6.6: originate Traffic. ``coords`` forces tree routing to those coordinates."""
        if coords is None:
            cached = self.coords_cache.get(dest)
            if cached is not None and now - cached[1] < self.t.coords_cache_lifetime_s:
                coords = cached[0]
        frame = Frame(
            FrameType.TRAFFIC,
            hop_limit=MAX_HOP_LIMIT,
            destination_key=dest,
            source_key=self.key,
            destination_coords=coords or (),
            source_coords=tree.coords,
            payload=payload,
        )
        self.forward(frame, LOCAL_PORT, now, tree, snek)

    def forward(self, frame: Frame, from_port: int, now: float, tree: Tree, snek: SnekStrategy) -> None:
        """§6.5 for Traffic (received on ``from_port``, or originated with from_port = LOCAL_PORT)."""
        if frame.destination_key == self.key:
            if frame.source_coords:
                cache = self.coords_cache
                if len(cache) >= self.max_cached and frame.source_key not in cache:
                    del cache[next(iter(cache))]  # oldest insertion first: bounded under a flood of sources
                cache[frame.source_key] = (frame.source_coords, now)
            self._deliver(frame, now)
            return
        port = None
        wm = frame.watermark
        if frame.destination_coords:
            port = tree.next_hop(frame.destination_coords, from_port)
            if port is None:
                frame = without_destination_coords(frame)
        if port is None:
            nh = snek.next_hop(frame.destination_key, False, frame.watermark, now)
            port, wm = nh.port, nh.watermark
        if self.hop_limiting:
            if frame.hop_limit <= 1:
                count_drop(self.outbox.counters, FrameType.TRAFFIC, "hop_limit")
                self.outbox.dropped.append((from_port, frame, "hop_limit"))
                return
            frame = with_hop_limit(frame, frame.hop_limit - 1)
        if port == from_port or wm.worse_than(frame.watermark):
            reason = "loop" if port == from_port else "watermark"
            count_drop(self.outbox.counters, FrameType.TRAFFIC, reason)
            self.outbox.dropped.append((from_port, frame, reason))
            return
        if wm != frame.watermark:
            frame = with_watermark(frame, wm)
        if port == LOCAL_PORT:  # no key closer to the destination than ours: delivered here
            if self._deliver(frame, now):  # a ping (or pong) not for us: counted misdelivered, never answered
                self.outbox.dropped.append((from_port, frame, "misdelivered"))
            return
        frame = self.ping.on_forward(frame)
        self.outbox.sends.append((port, frame))

    def _deliver(self, frame: Frame, now: float) -> bool:
        """Hand ``frame`` to the ping service, or else to the local application. True when it was a ping."""
        if self.ping.on_delivered(frame, now):
            return True
        self.outbox.delivered.append(frame)
        return False
