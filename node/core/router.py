"""The sans-IO Pinecone router: one facade over the spanning tree, SNEK, forwarding and broadcasts.

Feed it peer events, frames and the current protocol time ``now`` (monotonic seconds):

* :meth:`Router.add_peer` / :meth:`Router.remove_peer` (§3.6, §3.7);
* :meth:`Router.bytes_received` with frames as a stream reader splits them (the transit fast path,
  :mod:`node.core.forward`), or :meth:`Router.frame_received` with a decoded frame;
* :meth:`Router.send_traffic`, ``router.ping.start`` (§6.6, §8);
* :meth:`Router.handle_timer` at :meth:`Router.next_deadline`.

Then take everything it wants done in one call, :meth:`Router.drain` (an :class:`~node.core.state.Output`:
frames to send, disconnects, delivered traffic, events, ping results, the next deadline). No trio, no
sockets, no clock reads: the same object runs in a TCP node and in the in-process network.

The parts, one module each: :mod:`~node.core.tree` (§5), the SNEK variant chosen at construction
(:mod:`~node.core.snek_api`, :mod:`~node.core.snek_reference`, §6.1-§6.4, §6.7), :mod:`~node.core.forward`
(§6.5, §6.6, the transit cache) and :mod:`~node.core.broadcast` (§6.8). This module holds the shared state,
the peer table, the input dispatch, the timers and the observation events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .adversary import Adversary
from .crypto import Identity
from .forward import ForwardMixin, TransitCache
from .ping import PingService
from .snek import NextHop
from .snek_api import SnekFactory, SnekStrategy
from .state import MAX_PORTS, Encoded, Output, PeerState, Send, Timers
from .types import Announcement, Frame, FrameType, Root, Watermark
from .variants import KNOBS, VARIANTS, Variant

__all__ = ["MAX_PORTS", "SNEK_VARIANTS", "Encoded", "Output", "PeerState", "Router", "Timers"]

#: SNEK variants by name (``Router(..., snek="snek")``): the factories of :data:`node.core.variants.VARIANTS`.
SNEK_VARIANTS: Mapping[str, SnekFactory] = {name: v.factory for name, v in VARIANTS.items()}

# plain ints for dispatch on the frame path (enum attribute lookups cost more than the comparison)
_KEEPALIVE: Final = int(FrameType.KEEPALIVE)
_TREE_ANNOUNCEMENT: Final = int(FrameType.TREE_ANNOUNCEMENT)
_BOOTSTRAP: Final = int(FrameType.BOOTSTRAP)
_TRAFFIC: Final = int(FrameType.TRAFFIC)
_WAKEUP_BROADCAST: Final = int(FrameType.WAKEUP_BROADCAST)
_NOTHING: Final[tuple[Any, ...]] = ()


class Router(ForwardMixin):
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
        snek: str | SnekFactory = "snek",
        knobs: Mapping[str, Any] | None = None,
    ) -> None:
        """``snek`` names a variant of :data:`node.core.variants.VARIANTS` or is a factory
        ``(router, now) -> SnekStrategy``. ``knobs`` are the variant knobs (:data:`node.core.variants.KNOBS`,
        defaults for those missing) the variant reads; ``VariantSpec.router_options()`` builds all of these.

        Raises KeyError for an unknown variant name.
        """
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
        self.outbox: list[Send] = []
        self.disconnects: list[tuple[int, str]] = []
        self.delivered: list[Frame] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.counters: Counter[tuple] = Counter()
        self.ping = PingService(self.key, self.counters, self.send_traffic, self.emit, self._recompute_deadline)
        self._sig_cache: tuple[bytes, bytes] = (b"", b"")
        self.transit = TransitCache()
        self.adversary: Adversary | None = None  # drops received frames by kind (chaos tests; node --adversary)
        self.fast_forwards = 0  # transit frames forwarded from the cache
        self.parent: int | None = None
        if isinstance(snek, str):
            variant: Variant | None = VARIANTS[snek]
            factory = VARIANTS[snek].factory
        else:
            variant, factory = None, snek
        defaults = {k: (variant.default(k) if variant else knob.default) for k, knob in KNOBS.items()}
        self.knobs: dict[str, Any] = defaults | dict(knobs or {})
        #: the variant's registry name ("custom" for a factory given directly)
        self.variant = variant.name if variant is not None else "custom"
        self.snek: SnekStrategy = factory(self, now)
        self._snek_types = self.snek.frame_types
        self._reset(now)
        self._snap = self._snapshot()

    # ------------------------------------------------------------------ state

    def _reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2 (own_seq survives)."""
        self.parent = None
        self.waiting = False
        self.hold_until: float | None = None
        self.order_counter = 0
        self.snek.reset(now)
        self.coords_cache: dict[bytes, tuple[tuple[int, ...], float]] = {}
        self.broadcast_seen: dict[bytes, tuple[int, float]] = {}
        self.transit.clear()
        self.next_maintain = now
        self.next_coords_sweep = now + self.t.coords_cache_sweep_s
        self.next_broadcast = now + self.t.broadcast_interval_s
        self._tree_maintenance(now)
        self._recompute_deadline()

    @property
    def table(self) -> Any:
        """The SNEK variant's routing table (a :class:`~node.core.snek.RoutingTable` but for the legacy variant's
        :class:`~node.core.snek_legacy.PathTable`)."""
        return self.snek.table

    @property
    def descending(self) -> Any:
        """The SNEK variant's descending entry (an :class:`~node.core.snek.Entry` but for the legacy variant's
        :class:`~node.core.snek_legacy.PathEntry`), or None."""
        return self.snek.descending

    def snek_next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        return self.snek.next_hop(dest, bootstrap, wm, now)

    def wall_ms(self, now: float) -> int:
        return self.wall_offset_ms + int(now * 1000)

    # ------------------------------------------------------------------ peers

    def add_peer(self, key: bytes, link_type: int, now: float) -> int | None:
        """§3.6: allocate the lowest free port and greet the peer. None when all 253 are used."""
        port = next((p for p in range(1, MAX_PORTS + 1) if p not in self.peers), None)
        if port is None:
            self.counters[("peer_refused", "ports_full")] += 1
            return None
        self.transit.clear()
        self.peers[port] = PeerState(port, key, link_type)
        self._up = sorted(p for p, q in self.peers.items() if q.up)
        self.snek.peers_changed()
        self.emit("peer_up", port=port, peer=key.hex(), link_type=link_type)
        self._send_announcement(port, self.current_announcement())
        self._after(now)
        return port

    def remove_peer(self, port: int, now: float, reason: str = "closed") -> None:
        """§3.7: the peer on ``port`` is gone (any reason)."""
        peer = self.peers.get(port)
        if peer is None:
            return
        self.transit.clear()
        peer.up = False
        self._touched = True
        self._up = [p for p in self._up if p != port]
        self.snek.peers_changed()
        self.outbox = [(p, f) for p, f in self.outbox if p != port]
        self.emit("peer_down", port=port, peer=peer.key.hex(), reason=reason)
        if not any(q.up for q in self.peers.values()):
            del self.peers[port]
            self._reset(now)
            self._after(now)
            return
        peer.forget()
        self.snek.peer_removed(port, now)
        if self.parent == port:
            if self._select_parent(now):
                self.snek.bootstrap_soon(now)
        del self.peers[port]
        self._after(now)

    def _disconnect(self, port: int, reason: str, now: float) -> None:
        self.counters[("disconnect", reason)] += 1
        self.disconnects.append((port, reason))
        self.remove_peer(port, now, reason)

    # ------------------------------------------------------------------ input

    def set_adversary(self, rates: Mapping[str, float], peer: bytes | None = None) -> None:
        """Drop received frames by kind at ``rates`` (percent; node.core.adversary), from ``peer`` or every peer.

        Raises ValueError for an unknown kind or a rate outside 0-100.
        """
        if self.adversary is None:
            self.adversary = Adversary()
        self.adversary.configure(rates, peer)

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """§6.5 for a frame that arrived on ``port``."""
        peer = self.peers.get(port)
        if peer is None or not peer.up:
            return
        t = frame.type
        if self.adversary is not None and self.adversary.drops(peer.key, t):
            self.counters[("frame_dropped", t, "adversary")] += 1
            return
        if t == _TRAFFIC:
            self._forward_traffic(frame, port, now)
        else:
            self.transit.clear()  # every input but Traffic may move routing state
            if t in self._snek_types:
                self.snek.frame_received(port, frame, now)
            elif t == _TREE_ANNOUNCEMENT:
                self._handle_announcement(peer, frame, now)
            elif t == _WAKEUP_BROADCAST:
                self._handle_broadcast(frame, port, now)
            elif t == _KEEPALIVE:
                pass
            else:
                self.counters[("frame_dropped", t, "unknown_type")] += 1
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
        self._deadline = min(d, self.snek.next_deadline())

    def handle_timer(self, now: float) -> None:
        self.transit.clear()
        if self.hold_until is not None and now >= self.hold_until:
            self.hold_until = None
            self.waiting = False
            if self._select_parent(now):
                self.snek.bootstrap_soon(now)
        if now >= self.next_tree_maintenance:
            self._tree_maintenance(now)
        if now >= self.next_maintain:
            self.next_maintain = max(self.next_maintain + self.t.maintain_interval_s, now)
            self.snek.maintain(now)
        if now >= self.next_coords_sweep:
            self._sweep_coords_cache(now)
        if self.broadcasts_enabled and now >= self.next_broadcast:
            self._broadcast_tick(now)
        self.ping.handle_timer(now)
        self._recompute_deadline()
        self._after(now)

    # ------------------------------------------------------------------ output

    def drain(self) -> Output:
        """Take every output accumulated since the last drain (see :class:`~node.core.state.Output`)."""
        sends: Sequence[Send] = self.outbox
        if sends:
            self.outbox = []
        else:
            sends = _NOTHING
        disconnects: Sequence[tuple[int, str]] = self.disconnects
        if disconnects:
            self.disconnects = []
        else:
            disconnects = _NOTHING
        delivered: Sequence[Frame] = self.delivered
        if delivered:
            self.delivered = []
        else:
            delivered = _NOTHING
        events: Sequence[tuple[str, dict[str, Any]]] = self.events
        if events:
            self.events = []
        else:
            events = _NOTHING
        results = self.ping.results
        if results:
            self.ping.results = []
        return Output(sends, disconnects, delivered, events, results or _NOTHING, self._deadline)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ observation

    def emit(self, kind: str, **fields: Any) -> None:
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
            self.emit("root_changed", root=snap[0].hex(), root_seq=snap[1], prev_root=old[0].hex())
        if snap[2] != old[2]:
            self.emit(
                "parent_changed",
                parent=snap[2].hex() if snap[2] else None,
                prev_parent=old[2].hex() if old[2] else None,
            )
        if snap[3] != old[3]:
            self.emit("coords_changed", coords=list(snap[3]))

    def routes(self, now: float) -> list[dict[str, Any]]:
        """The admin API's ``GET /routes``: every routing-table entry still valid at ``now``, lowest key first."""
        entries = sorted((e for e in self.snek.table if e.valid(now)), key=lambda e: e.key)
        return [{"key": e.key.hex(), "source": e.source, "destination": e.destination,
                 "expires_in_s": round(e.expires_at - now, 3)} for e in entries]

    def state(self, now: float | None = None) -> dict[str, Any]:
        """The admin API's ``GET /state`` document. With ``now``, an expired descending entry (not yet
        cleared by maintenance, and no longer used for routing) is reported as none."""
        root = self.root
        desc = self.snek.descending
        if desc is not None and now is not None and not desc.valid(now):
            desc = None
        return {
            "public_key": self.key.hex(),
            "root": {"key": root.key.hex(), "sequence": root.seq},
            "parent": self.peers[self.parent].key.hex() if self.parent is not None else None,
            "coords": list(self.coords),
            "descending": desc.key.hex() if desc is not None else None,
            "peers": [
                {"port": p, "key": q.key.hex(), "link_type": q.link_type, "coords": list(q.coords)}
                for p, q in sorted(self.peers.items())
                if q.up
            ],
            "routing_table_size": len(self.snek.table),
            "variant": self.variant,
            "knobs": dict(self.knobs),
        }
