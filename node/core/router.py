"""The sans-IO Pinecone router: spanning tree (§5), SNEK (§6), forwarding (§6.5).

Feed it peer events, frames and the current protocol time ``now`` (monotonic
seconds); collect what it wants done from its outboxes:

* ``outbox``: ``(port, frame)`` pairs to write (Traffic goes on the peer's
  traffic queue, everything else on its protocol queue);
* ``disconnects``: ``(port, reason)`` for peers that broke the protocol (the
  router has already forgotten them; the shell closes the stream);
* ``delivered``: Traffic frames for the local application;
* ``events``: ``(kind, fields)`` for the structured event log.

Call :meth:`handle_timer` at :meth:`next_deadline`. No trio, no sockets, no
clock reads: the same object runs in a TCP node and in the in-process network.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from . import wire
from .crypto import Identity, verify
from .errors import ProtocolError
from .announce import ANNOUNCEMENTS, ParsedAnnouncement
from .ping import PingService
from .snek import Entry, NextHop, RoutingTable, SnekView
from .types import (
    BROADCAST_HOP_LIMIT,
    INITIAL_WATERMARK,
    LOCAL_PORT,
    MAX_HOP_LIMIT,
    Announcement,
    Frame,
    FrameType,
    Root,
    SignedRootPayload,
    Watermark,
)

__all__ = ["Router", "PeerState", "Timers", "MAX_PORTS"]

MAX_PORTS = 253  # remote ports 1..253 (§3.3)
# plain ints for dispatch on the frame path (enum attribute lookups cost more than the comparison)
_KEEPALIVE, _TREE_ANNOUNCEMENT, _BOOTSTRAP, _TRAFFIC, _WAKEUP_BROADCAST = (int(t) for t in FrameType)


@dataclass(frozen=True, slots=True)
class Timers:
    """Protocol constants (§9), overridable for experiments."""

    announcement_interval_s: float = 30 * 60
    announcement_timeout_s: float = 45 * 60
    reparent_hold_s: float = 1.0
    maintain_interval_s: float = 1.0
    bootstrap_interval_s: float = 5.0
    coords_cache_lifetime_s: float = 60.0
    coords_cache_sweep_s: float = 60.0
    broadcast_interval_s: float = 60.0
    broadcast_expiry_s: float = 180.0
    broadcast_filter_s: float = 30.0


@dataclass(slots=True)
class PeerState:
    """What the router knows about one port."""

    port: int
    key: bytes
    link_type: int
    up: bool = True
    announcement: Announcement | None = None
    received_at: float = 0.0
    order: int = 0
    # derived from the announcement, cached because every decision reads them
    hop_keys: tuple[bytes, ...] = ()
    coords: tuple[int, ...] = ()  # the peer's own coordinates (announcement ports minus the last)
    ports: tuple[int, ...] = ()  # all announcement ports: our coordinates if this peer is our parent
    root: Root | None = None
    raw: bytes = b""  # the announcement's bytes as received: what we sign and repeat if this is our parent
    keyset: frozenset[bytes] = frozenset()

    def store(self, parsed: ParsedAnnouncement, now: float, order: int) -> None:
        self.announcement = parsed.ann
        self.raw = parsed.raw
        self.keyset = parsed.keyset
        self.received_at = now
        self.order = order
        self.hop_keys = parsed.hop_keys
        self.ports = parsed.ports
        self.coords = parsed.ports[:-1]
        self.root = parsed.root

    def forget(self) -> None:
        self.announcement = None
        self.hop_keys = ()
        self.raw = b""
        self.keyset = frozenset()
        self.ports = ()
        self.coords = ()
        self.root = None


def tree_distance(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """§5.8: len(a) + len(b) - 2 * common prefix length."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return len(a) + len(b) - 2 * i


class Router:
    """One Pinecone node's protocol state. See the module docstring for the contract."""

    def __init__(
        self,
        identity: Identity,
        now: float,
        *,
        wall_offset_ms: int = 1_700_000_000_000,
        timers: Timers | None = None,
        hop_limiting: bool = False,
        detail_events: bool = True,
        broadcasts: bool = True,
        max_routes: int = 65_536,
        max_cached: int = 20_000,
    ) -> None:
        self.identity = identity
        self.key = identity.public_key
        self.wall_offset_ms = wall_offset_ms
        self.t = timers or Timers()
        self.hop_limiting = hop_limiting
        self.detail_events = detail_events
        self.broadcasts_enabled = broadcasts
        # Memory bounds against hostile input (not in the reference, which is unbounded):
        self.max_routes = max_routes  # routing-table entries; new origins beyond it are rejected ("table_full")
        self.max_cached = max_cached  # coordinates-cache and broadcast-record entries; oldest evicted first
        self.peers: dict[int, PeerState] = {}
        self.own_seq = 0
        self._self_ann = Announcement(self.key, 0, ())
        self._self_root = Root(self.key, 0)
        self._up: list[int] = []
        self._touched = False  # tree state may have moved since the last _after()
        self.outbox: list[tuple[int, Frame]] = []
        self.disconnects: list[tuple[int, str]] = []
        self.delivered: list[Frame] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.counters: Counter[tuple] = Counter()
        self.ping = PingService(self)
        self._sig_cache: tuple[bytes, bytes] = (b"", b"")
        self._reset(now)
        self._snap = self._snapshot()

    # ------------------------------------------------------------------ state

    def _reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2 (own_seq survives)."""
        self.parent: int | None = None
        self.waiting = False
        self.hold_until: float | None = None
        self.order_counter = 0
        self.table = RoutingTable()
        self.view = SnekView()
        self.descending: Entry | None = None
        self.last_bootstrap = now - 2 * self.t.bootstrap_interval_s
        self.coords_cache: dict[bytes, tuple[tuple[int, ...], float]] = {}
        self.broadcast_seen: dict[bytes, tuple[int, float]] = {}
        self.next_maintain = now
        self.next_coords_sweep = now + self.t.coords_cache_sweep_s
        self.next_broadcast = now + self.t.broadcast_interval_s
        self._tree_maintenance(now)
        self._recompute_deadline()

    def _parent_state(self) -> PeerState | None:
        if self.parent is not None:
            p = self.peers.get(self.parent)
            if p is not None and p.announcement is not None:
                return p
        return None

    def current_announcement(self) -> Announcement:
        """§5.1: the parent's stored announcement, else our own root announcement."""
        p = self._parent_state()
        if p is not None:
            return p.announcement  # type: ignore[return-value]
        if self._self_ann.root_seq != self.own_seq:
            self._self_ann = Announcement(self.key, self.own_seq, ())
        return self._self_ann

    @property
    def root(self) -> Root:
        p = self._parent_state()
        if p is not None:
            return p.root  # type: ignore[return-value]
        if self._self_root.seq != self.own_seq:
            self._self_root = Root(self.key, self.own_seq)
        return self._self_root

    @property
    def coords(self) -> tuple[int, ...]:
        p = self._parent_state()
        return p.ports if p is not None else ()

    def wall_ms(self, now: float) -> int:
        return self.wall_offset_ms + int(now * 1000)

    def up_ports(self) -> list[int]:
        """Up ports in ascending order (the deterministic iteration order)."""
        return self._up

    # ------------------------------------------------------------------ peers

    def add_peer(self, key: bytes, link_type: int, now: float) -> int | None:
        """§3.6: allocate the lowest free port and greet the peer. None when all 253 are used."""
        port = next((p for p in range(1, MAX_PORTS + 1) if p not in self.peers), None)
        if port is None:
            self.counters[("peer_refused", "ports_full")] += 1
            return None
        self.peers[port] = PeerState(port, key, link_type)
        self._up = sorted(p for p, q in self.peers.items() if q.up)
        self.view.dirty = True
        self._emit("peer_up", port=port, peer=key.hex(), link_type=link_type)
        self._send_announcement(port, self.current_announcement())
        self._after(now)
        return port

    def remove_peer(self, port: int, now: float, reason: str = "closed") -> None:
        """§3.7: the peer on ``port`` is gone (any reason)."""
        peer = self.peers.get(port)
        if peer is None:
            return
        peer.up = False
        self._touched = True
        self._up = [p for p in self._up if p != port]
        self.view.dirty = True
        self.outbox = [(p, f) for p, f in self.outbox if p != port]
        self._emit("peer_down", port=port, peer=peer.key.hex(), reason=reason)
        if not any(q.up for q in self.peers.values()):
            del self.peers[port]
            self._reset(now)
            self._after(now)
            return
        peer.forget()
        self.table.remove_where(lambda e: e.source == port or e.destination == port)
        if self.descending is not None and self.descending.source == port:
            self._set_descending(None, now)
        if self.parent == port:
            if self._select_parent(now):
                self._bootstrap_soon(now)
        del self.peers[port]
        self._after(now)

    def _disconnect(self, port: int, reason: str, now: float) -> None:
        self.counters[("disconnect", reason)] += 1
        self.disconnects.append((port, reason))
        self.remove_peer(port, now, reason)

    # ------------------------------------------------------------------ input

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """§6.5 for a frame that arrived on ``port``."""
        peer = self.peers.get(port)
        if peer is None or not peer.up:
            return
        t = frame.type
        if t == _BOOTSTRAP:
            self._handle_bootstrap(frame, port, now)
        elif t == _TRAFFIC:
            self._forward_traffic(frame, port, now)
        elif t == _TREE_ANNOUNCEMENT:
            self._handle_announcement(peer, frame, now)
        elif t == _WAKEUP_BROADCAST:
            self._handle_broadcast(frame, port, now)
        elif t == _KEEPALIVE:
            pass
        else:
            self.counters[("frame_dropped", t, "unknown_type")] += 1
        self._after(now)

    def send_traffic(
        self, dest: bytes, payload: bytes, now: float, *, coords: tuple[int, ...] | None = None
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
            source_coords=self.coords,
            payload=payload,
        )
        self._forward_traffic(frame, LOCAL_PORT, now)
        self._after(now)

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> float:
        """When :meth:`handle_timer` must next run. Kept up to date by every timer change."""
        return self._deadline

    def _recompute_deadline(self) -> None:
        d = min(self.next_maintain, self.next_tree_maintenance, self.next_coords_sweep, self.ping.next_deadline())
        if self.broadcasts_enabled:
            d = min(d, self.next_broadcast)
        if self.hold_until is not None:
            d = min(d, self.hold_until)
        self._deadline = d

    def handle_timer(self, now: float) -> None:
        if self.hold_until is not None and now >= self.hold_until:
            self.hold_until = None
            self.waiting = False
            if self._select_parent(now):
                self._bootstrap_soon(now)
        if now >= self.next_tree_maintenance:
            self._tree_maintenance(now)
        if now >= self.next_maintain:
            self.next_maintain = max(self.next_maintain + self.t.maintain_interval_s, now)
            self._snek_maintenance(now)
        if now >= self.next_coords_sweep:
            self.next_coords_sweep = now + self.t.coords_cache_sweep_s
            life = self.t.coords_cache_lifetime_s
            self.coords_cache = {k: v for k, v in self.coords_cache.items() if now - v[1] < life}
        if self.broadcasts_enabled and now >= self.next_broadcast:
            self.next_broadcast = now + self.t.broadcast_interval_s
            exp = self.t.broadcast_expiry_s
            self.broadcast_seen = {k: v for k, v in self.broadcast_seen.items() if now - v[1] < exp}
            self._send_own_broadcast(None, now)
        self.ping.handle_timer(now)
        self._recompute_deadline()
        self._after(now)

    # ------------------------------------------------------------------ spanning tree

    def _tree_maintenance(self, now: float) -> None:
        """§5.2: while root, bump the sequence and announce; restart the 30 min timer."""
        self._touched = True
        self.next_tree_maintenance = now + self.t.announcement_interval_s
        if hasattr(self, "next_coords_sweep"):
            self._recompute_deadline()
        if self.parent is None:
            self.own_seq += 1
            self._announce_to_all(now)

    def _current_raw(self) -> tuple[bytes, bool]:
        """The current root announcement's bytes, and whether it holds our own key."""
        p = self._parent_state()
        if p is not None:
            return p.raw, self.key in p.keyset
        return wire.encode_announcement(self.current_announcement()), False

    def _announce_to_all(self, now: float) -> None:
        base, ours = self._current_raw()
        if ours:
            return  # §4.5: never send an announcement that already holds our key
        for port in self.up_ports():
            self._send_raw_announcement(port, base)

    def _send_announcement(self, port: int, ann: Announcement) -> None:
        if any(h.key == self.key for h in ann.hops):
            return  # §4.5: never send an announcement that already holds our key
        self._send_raw_announcement(port, wire.encode_announcement(ann))

    def _send_raw_announcement(self, port: int, base: bytes) -> None:
        """Append our signed hop for ``port`` to an encoded announcement (§4.5)."""
        if self._sig_cache[0] != base:
            # Our signature covers only what precedes our hop, so one signature serves every port.
            self._sig_cache = (base, self.identity.sign(base))
        payload = base + wire.encode_varu64(port) + self.key + self._sig_cache[1]
        self.outbox.append((port, Frame(FrameType.TREE_ANNOUNCEMENT, payload=payload)))

    def _handle_announcement(self, peer: PeerState, frame: Frame, now: float) -> None:
        """§5.3 and the decision table of §5.4."""
        try:
            parsed = ANNOUNCEMENTS.parse(frame.payload)
        except ProtocolError as exc:
            self._disconnect(peer.port, getattr(exc, "reason", "bad_announcement"), now)
            return
        ann = parsed.ann
        bad = parsed.problem or (None if ann.hops[-1].key == peer.key else "announcement_last_hop_not_peer")
        if bad:
            self._disconnect(peer.port, bad, now)
            return
        old = peer.announcement
        if old is not None and old.root_key == ann.root_key and ann.root_seq < old.root_seq:
            self._disconnect(peer.port, "announcement_replay", now)
            return
        first = old is None
        wake = first and not any(
            q.key == peer.key and q.announcement is not None and q.port != peer.port for q in self.peers.values() if q.up
        )
        last = self.current_announcement()
        delta = (ann.root_key > last.root_key) - (ann.root_key < last.root_key)
        self.order_counter += 1
        peer.store(parsed, now, self.order_counter)
        self._touched = True
        self.view.dirty = True
        if not self.waiting:
            loop = self.key in peer.keyset
            if peer.port == self.parent:
                if loop or delta < 0 or (delta == 0 and ann.root_seq == last.root_seq):
                    self._become_root(now, hold=True)
                elif delta > 0 or (delta == 0 and ann.root_seq > last.root_seq):
                    self._announce_to_all(now)
            elif loop:
                pass
            elif delta > 0:
                self._set_parent(peer.port)
                self._announce_to_all(now)
            elif delta < 0:
                if not first:
                    self._send_announcement(peer.port, last)
            elif self._select_parent(now):
                self._bootstrap_soon(now)
        if wake and self.broadcasts_enabled:
            self._send_own_broadcast(peer.port, now)

    def _set_parent(self, port: int | None) -> None:
        self._touched = True
        before = self.root.key
        self.parent = port
        self.view.dirty = True
        if self.root.key != before:
            self.coords_cache.clear()  # §6.6: a parent change that alters the root key

    def _select_parent(self, now: float) -> bool:
        """§5.5. Returns True when the parent changed."""
        cur = self.root
        best_key, best_seq = (self.key, 0) if self.key > cur.key else (cur.key, cur.seq)
        best_order = float("inf")
        best_port = None
        timeout = self.t.announcement_timeout_s
        for port in self.up_ports():
            q = self.peers[port]
            a = q.announcement
            if a is None or now - q.received_at > timeout or self.key in q.keyset:
                continue
            if a.root_key > best_key or (
                a.root_key == best_key and (a.root_seq > best_seq or (a.root_seq == best_seq and q.order < best_order))
            ):
                best_key, best_seq, best_order, best_port = a.root_key, a.root_seq, q.order, port
        if best_port is not None and best_port != self.parent:
            self._set_parent(best_port)
            self._announce_to_all(now)
            return True
        if best_port is None:
            self._become_root(now, hold=False)
        return False

    def _become_root(self, now: float, *, hold: bool) -> None:
        """§5.6."""
        if hold:
            self.waiting = True
            self.hold_until = now + self.t.reparent_hold_s
            self._recompute_deadline()
        if self.parent is None:
            return
        self._set_parent(None)
        self._tree_maintenance(now)

    def tree_next_hop(self, dest: tuple[int, ...], from_port: int) -> int | None:
        """§5.8 with the deterministic tie-break (link type, receive order, port)."""
        own = self.coords
        if dest == own:
            return LOCAL_PORT
        own_dist = tree_distance(own, dest)
        best_rank: tuple[int, int, int, int] | None = None
        root = self.root
        for port in self.up_ports():
            q = self.peers[port]
            if q.announcement is None or port == from_port or q.root != root:
                continue
            d = tree_distance(q.coords, dest)
            if d >= own_dist:
                continue  # never send to a peer that is not strictly closer
            rank = (d, q.link_type, q.order, port)
            if best_rank is None or rank < best_rank:
                best_rank = rank
        return best_rank[3] if best_rank is not None else None

    # ------------------------------------------------------------------ SNEK

    def snek_next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        return self.view.next_hop(self.key, dest, bootstrap, wm, self.parent, self.root.key, self.peers, self.table, now)

    def _bootstrap_soon(self, now: float) -> None:
        self.last_bootstrap = now - self.t.bootstrap_interval_s

    def _bootstrap_now(self, now: float) -> None:
        """§6.2."""
        if self.parent is None:
            return
        root = self.root
        seq = self.wall_ms(now)
        payload = wire.make_signed_root_payload(self.identity, seq, root.key, root.seq)
        nh = self.snek_next_hop(self.key, True, INITIAL_WATERMARK, now)
        if nh.port > 0:
            frame = Frame(
                FrameType.BOOTSTRAP,
                destination_key=self.key,
                watermark=nh.watermark,
                payload=wire.encode_signed_root_payload(payload),
            )
            self.outbox.append((nh.port, frame))
            self.counters[("bootstrap_sent",)] += 1
            if self.detail_events:
                self._emit("bootstrap_sent", seq=seq, port=nh.port)
        self.last_bootstrap = now

    def _snek_maintenance(self, now: float) -> None:
        """§6.7."""
        d = self.descending
        if d is not None and (not d.valid(now) or d.root != self.root):
            self._set_descending(None, now)
        self.table.expire(now)
        if now - self.last_bootstrap >= self.t.bootstrap_interval_s:
            self._bootstrap_now(now)

    def _set_descending(self, entry: Entry | None, now: float) -> None:
        prev = self.descending
        self.descending = entry
        if entry is None or prev is None or prev.key != entry.key:
            self._bootstrap_soon(now)
            self._emit(
                "descending_changed",
                descending=entry.key.hex() if entry else None,
                prev=prev.key.hex() if prev else None,
            )

    def _handle_bootstrap(self, frame: Frame, port: int, now: float) -> None:
        """§6.5 for a Bootstrap: next hop, §6.4 at this hop, then forward."""
        root = self.root  # once per frame: both the next hop and §6.4 need it
        nh = self.view.next_hop(
            self.key, frame.destination_key, True, frame.watermark, self.parent, root.key, self.peers, self.table, now
        )
        reason = self._install_route(frame, port, nh.port, now, root)
        if reason is not None:
            self.counters[("bootstrap_rejected", reason)] += 1
            if self.detail_events:
                self._emit("bootstrap_rejected", origin=frame.destination_key.hex(), reason=reason)
            return
        self.counters[("bootstrap_accepted",)] += 1
        if self.detail_events:
            self._emit(
                "bootstrap_accepted",
                origin=frame.destination_key.hex(),
                from_port=port,
                to_port=nh.port if nh.port > 0 else None,
            )
        if nh.port <= 0:
            return  # dead end here
        if nh.port == port or nh.watermark.worse_than(frame.watermark):
            self.counters[("frame_dropped", FrameType.BOOTSTRAP, "watermark" if nh.port != port else "loop")] += 1
            return
        self.outbox.append((nh.port, _with_watermark(frame, nh.watermark)))

    def _install_route(self, frame: Frame, from_port: int, to_port: int, now: float, root: Root) -> str | None:
        """§6.4. Returns None when accepted, else the rejection reason."""
        origin = frame.destination_key
        try:
            p = _signed_root(frame.payload, origin)
        except ProtocolError:
            return "malformed"
        if p is None:
            return "bad_signature"
        if p.root_key != root.key or p.root_seq != root.seq:
            return "root_mismatch"
        old = self.table.get(origin)
        if old is not None and old.root == root and p.seq <= old.seq:
            return "replay"
        if old is None and len(self.table) >= self.max_routes:
            return "table_full"  # bounded memory: validly signed bootstraps from made-up keys cannot grow it
        entry = Entry(origin, from_port, to_port, now, root, p.seq)
        self.table.install(entry)
        if origin < self.key:
            d = self.descending
            if d is None or not d.valid(now) or d.key == origin or d.key < origin:
                self._set_descending(entry, now)
        return None

    # ------------------------------------------------------------------ forwarding

    def _forward_traffic(self, frame: Frame, from_port: int, now: float) -> None:
        """§6.5 for Traffic (received, or originated with from_port = LOCAL_PORT)."""
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
            port = self.tree_next_hop(frame.destination_coords, from_port)
            if port is None:
                frame = replace(frame, destination_coords=())
        if port is None:
            nh = self.snek_next_hop(frame.destination_key, False, frame.watermark, now)
            port, wm = nh.port, nh.watermark
        if self.hop_limiting:
            if frame.hop_limit <= 1:
                self.counters[("frame_dropped", FrameType.TRAFFIC, "hop_limit")] += 1
                return
            frame = replace(frame, hop_limit=frame.hop_limit - 1)
        if port == from_port or wm.worse_than(frame.watermark):
            self.counters[("frame_dropped", FrameType.TRAFFIC, "loop" if port == from_port else "watermark")] += 1
            return
        if wm != frame.watermark:
            frame = _with_watermark(frame, wm)
        if port == LOCAL_PORT:
            self._deliver(frame, now)
            return
        frame = self.ping.on_forward(frame)
        self.outbox.append((port, frame))

    def _deliver(self, frame: Frame, now: float) -> None:
        if not self.ping.on_delivered(frame, now):
            self.delivered.append(frame)

    # ------------------------------------------------------------------ wakeup broadcasts

    def _send_own_broadcast(self, only_port: int | None, now: float) -> None:
        root = self.root
        payload = wire.make_signed_root_payload(self.identity, self.wall_ms(now), root.key, root.seq)
        frame = Frame(
            FrameType.WAKEUP_BROADCAST,
            hop_limit=BROADCAST_HOP_LIMIT,
            source_key=self.key,
            payload=wire.encode_signed_root_payload(payload),
        )
        ports = [only_port] if only_port is not None else self._one_link_per_key(self.up_ports())
        for port in ports:
            self.outbox.append((port, frame))

    def _one_link_per_key(self, ports: list[int]) -> list[int]:
        chosen: dict[bytes, PeerState] = {}
        for port in ports:
            q = self.peers[port]
            c = chosen.get(q.key)
            if c is None or (q.link_type, _order(q)) < (c.link_type, _order(c)):
                chosen[q.key] = q
        return sorted(q.port for q in chosen.values())

    def _handle_broadcast(self, frame: Frame, port: int, now: float) -> None:
        """§6.8, receiving side."""
        try:
            p = _signed_root(frame.payload, frame.source_key)
        except ProtocolError:
            self._disconnect(port, "bad_broadcast", now)
            return
        if p is None:
            self._disconnect(port, "bad_signature", now)
            return
        if p.root_key != self.root.key:
            return
        seen = self.broadcast_seen.get(frame.source_key)
        if seen is not None and (now - seen[1] < self.t.broadcast_filter_s or p.seq <= seen[0]):
            return
        seen_map = self.broadcast_seen
        if len(seen_map) >= self.max_cached and frame.source_key not in seen_map:
            del seen_map[next(iter(seen_map))]
        seen_map[frame.source_key] = (p.seq, now)
        self.counters[("node_discovered",)] += 1
        if frame.hop_limit <= 1:
            return
        hl = frame.hop_limit - 1
        out = replace(frame, hop_limit=hl)
        if hl >= 4:
            targets = [q for q in self.up_ports() if q != port]
        else:
            own = self.coords
            targets = [
                q
                for q in self.up_ports()
                if q != port
                and self.peers[q].announcement is not None
                and tree_distance(self.peers[q].coords, own) == 1
            ]
        for q in self._one_link_per_key(targets):
            self.outbox.append((q, out))

    # ------------------------------------------------------------------ observation

    def _emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def _snapshot(self) -> tuple:
        p = self._parent_state()
        if p is None:
            return (self.key, self.own_seq, None, ())
        return (p.root.key, p.root.seq, p.key, p.ports)  # type: ignore[union-attr]

    def _after(self, now: float) -> None:
        """Emit root/parent/coords change events after any input that touched the tree."""
        if not self._touched:
            return
        self._touched = False
        snap = self._snapshot()
        old = self._snap
        if snap[0] is old[0] and snap[1] == old[1] and snap[2] is old[2] and snap[3] is old[3]:
            return  # nothing moved (identity checks: the common case costs almost nothing)
        self._snap = snap
        if snap[:2] != old[:2]:
            self._emit("root_changed", root=snap[0].hex(), root_seq=snap[1], prev_root=old[0].hex())
        if snap[2] != old[2]:
            self._emit(
                "parent_changed",
                parent=snap[2].hex() if snap[2] else None,
                prev_parent=old[2].hex() if old[2] else None,
            )
        if snap[3] != old[3]:
            self._emit("coords_changed", coords=list(snap[3]))

    def state(self) -> dict[str, Any]:
        """The admin API's ``GET /state`` document."""
        root = self.root
        return {
            "public_key": self.key.hex(),
            "root": {"key": root.key.hex(), "sequence": root.seq},
            "parent": self.peers[self.parent].key.hex() if self.parent is not None else None,
            "coords": list(self.coords),
            "descending": self.descending.key.hex() if self.descending is not None else None,
            "peers": [
                {"port": p, "key": q.key.hex(), "link_type": q.link_type, "coords": list(q.coords)}
                for p, q in sorted(self.peers.items())
                if q.up
            ],
            "routing_table_size": len(self.table),
        }


def _with_watermark(f: Frame, wm: Watermark) -> Frame:
    """``dataclasses.replace(f, watermark=wm)``, without its per-call introspection (hot path)."""
    return Frame(f.type, f.hop_limit, f.destination_key, f.source_key, f.destination_coords, f.source_coords, wm, f.payload)


def _order(q: PeerState) -> float:
    return q.order if q.announcement is not None else float("inf")


_SIGNED_ROOT: dict[tuple[bytes, bytes], SignedRootPayload] = {}


def _signed_root(payload: bytes, key: bytes) -> SignedRootPayload | None:
    """Parse a bootstrap/broadcast payload and verify it with ``key`` (§4.6, §4.7).

    Raises MalformedFrame when it does not parse; None when the signature is bad.
    Results are memoised on (key, payload): a bootstrap crosses many hops with
    the very same payload, and bytes objects cache their hash.
    """
    hit = _SIGNED_ROOT.get((key, payload))
    if hit is not None:
        return hit
    p = wire.decode_signed_root_payload(payload)
    if not verify(key, wire.signed_root_protected_bytes(p.seq, p.root_key, p.root_seq), p.signature):
        return None
    if len(_SIGNED_ROOT) >= 100_000:
        _SIGNED_ROOT.clear()
    _SIGNED_ROOT[(key, payload)] = p
    return p
