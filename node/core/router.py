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

**The parts.** The router holds four parts, one object each, and calls them with explicit arguments, as
aioquic's ``QuicConnection`` holds its recovery, streams and crypto objects:

* ``tree``, a :class:`~node.core.tree.Tree` (§5): the parent, the root, our coordinates, tree routing;
* ``snek``, the SNEK variant chosen at construction, behind its one seam (:mod:`~node.core.snek_api`;
  :mod:`~node.core.snek_reference` and the others of :data:`~node.core.variants.VARIANTS`; §6.1-§6.4, §6.7),
  which sees the router through a :class:`~node.core.host.RouterHost`;
* ``broadcasts``, a :class:`~node.core.broadcast.Broadcasts` (§6.8);
* ``forwarding``, a :class:`~node.core.forward.Forwarding` (§6.5, §6.6, the transit cache).

No part calls the router or another part on its own: the router passes the tree and the SNEK variant to
the calls that need them, and applies what a change of the tree entails (the tree's effect flags). The
router itself holds the configuration, the peer table (given to the tree and the host), the outbox
(:class:`~node.core.state.Outbox`, given to every part), the input dispatch and the SNEK maintenance tick.
Each part has its own ``next_deadline()``; the router's deadline is the earliest of them (and of the tick
and the ping service's), recomputed whenever one of them may have moved it.

The ping service (:class:`~node.core.ping.PingService`, §8) is not a part but a client of the router, as
the shell is: it originates pings and pongs with :meth:`Router.send_traffic` and says when its timeout
moved, through the two callbacks it is built with. The forwarding part hands it every delivered frame and
every Ping it forwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from . import wire
from .adversary import Adversary
from .attacks import Strategy
from .broadcast import Broadcasts
from .broadcast_records import KeyIndex
from .crypto import Identity
from .forward import Forwarding
from .host import RouterHost
from .ping import PingService
from .planted import MISROUTE_AFTER_PEER_LOSS, send_back
from .reasons import DISCONNECT_REASONS, count_drop
from .snek import NextHop
from .snek_api import SnekFactory, SnekStrategy
from .state import MAX_PORTS, Encoded, Outbox, Output, PeerState, Send, Timers, wall_ms
from .tree import BOOTSTRAP_SOON, DEADLINE_MOVED, PEERS_CHANGED, ROOT_KEY_CHANGED, WAKE, Tree
from .types import Frame, FrameType, Root, Watermark
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
        snek: str | SnekFactory = "snek",
        knobs: Mapping[str, Any] | None = None,
        broadcast_keys: KeyIndex | None = None,
    ) -> None:
        """``snek`` names a variant of :data:`node.core.variants.VARIANTS` or is a factory
        ``(host, now) -> SnekStrategy``. ``knobs`` are the variant knobs (:data:`node.core.variants.KNOBS`,
        defaults for those missing) the variant reads; ``VariantSpec.router_options()`` builds all of these.

        ``broadcast_keys``: a key index shared by the routers of one simulation, whose wakeup-broadcast records
        are then flat arrays instead of a dict each (node.core.broadcast_records; the same behaviour).

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
        self.peers: dict[int, PeerState] = {}  # the peer table: port -> what we know of that peer
        self.out = Outbox()
        self.counters: Counter[tuple] = self.out.counters
        self.adversary: Adversary | None = None  # drops received frames by kind (chaos tests; node --adversary)
        self.attack: Strategy | None = None  # an adversary strategy of node.core.attacks (docs/attacks.md)
        self.ping = PingService(self.key, self.counters, self.send_traffic, self.out.emit, self._recompute_deadline)
        if isinstance(snek, str):
            variant: Variant | None = VARIANTS[snek]
            factory = VARIANTS[snek].factory
        else:
            variant, factory = None, snek
        defaults = {k: (variant.default(k) if variant else knob.default) for k, knob in KNOBS.items()}
        self.knobs: dict[str, Any] = defaults | dict(knobs or {})
        #: TEST ONLY (node.core.planted, knob planted_bug): the bug planted in this router, "" when none, and
        #: whether it misroutes now (from the first peer lost on); both off unless a test plants one
        self.planted_bug: str = str(self.knobs.get("planted_bug") or "")
        self.misrouting = False
        #: the variant's registry name ("custom" for a factory given directly)
        self.variant = variant.name if variant is not None else "custom"
        # ---------------------------------------------------------------- the parts
        self.tree = Tree(identity, self.t, self.peers, self.out)
        self.broadcasts = Broadcasts(identity, self.t, wall_offset_ms, broadcasts, max_cached, self.out, broadcast_keys)
        self.forwarding = Forwarding(self.key, self.t, hop_limiting, max_cached, self.out, self.ping)
        host = RouterHost(identity, self.t, self.peers, self.tree, self.out, wall_offset_ms=wall_offset_ms,
                          detail_events=detail_events, max_routes=max_routes, knobs=self.knobs)  # fmt: skip
        self.snek: SnekStrategy = factory(host, now)
        self._snek_types = self.snek.frame_types
        self.next_maintain = now  # the SNEK variant's maintenance tick (SnekStrategy.maintain)
        self._deadline = now
        self._reset(now)
        self.tree.settle()

    # ------------------------------------------------------------------ state

    def _reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2 (own_seq survives)."""
        self.tree.reset()
        self.snek.reset(now)
        self.forwarding.reset(now)
        self.broadcasts.reset(now)
        self.next_maintain = now
        self.tree.maintenance(now)
        self._recompute_deadline()

    def _tree_moved(self, fx: int, now: float) -> None:
        """Do what a change of the tree entails (the effect flags of :mod:`node.core.tree`), but the wakeup."""
        if fx & PEERS_CHANGED:
            self.snek.peers_changed()
        if fx & ROOT_KEY_CHANGED:
            self.forwarding.root_key_changed()
        if fx & DEADLINE_MOVED:
            self._recompute_deadline()
        if fx & BOOTSTRAP_SOON:
            self.snek.bootstrap_soon(now)

    # ------------------------------------------------------------------ peers

    def add_peer(self, key: bytes, link_type: int, now: float) -> int | None:
        """§3.6: allocate the lowest free port and greet the peer. None when all 253 are used."""
        port = next((p for p in range(1, MAX_PORTS + 1) if p not in self.peers), None)
        if port is None:
            self.counters[("peer_refused", "ports_full")] += 1
            return None
        self.forwarding.routing_changed()
        self.peers[port] = PeerState(port, key, link_type)
        self.tree.peer_added(port)
        self.snek.peers_changed()
        self.out.emit("peer_up", port=port, peer=key.hex(), link_type=link_type)
        self.tree.report_changes()
        return port

    def remove_peer(self, port: int, now: float, reason: str = "closed") -> None:
        """§3.7: the peer on ``port`` is gone (any reason)."""
        peer = self.peers.get(port)
        if peer is None:
            return
        self.forwarding.routing_changed()
        peer.up = False
        if self.planted_bug == MISROUTE_AFTER_PEER_LOSS:  # TEST ONLY: node.core.planted
            self.misrouting = True
        self.tree.peer_down(port)
        self.snek.peers_changed()
        out = self.out
        out.sends = [(p, f) for p, f in out.sends if p != port]
        out.emit("peer_down", port=port, peer=peer.key.hex(), reason=reason)
        if not any(q.up for q in self.peers.values()):
            del self.peers[port]
            self._reset(now)
            self.tree.report_changes()
            return
        peer.forget()
        self.snek.peer_removed(port, now)
        self._tree_moved(self.tree.peer_removed(port, now), now)
        del self.peers[port]
        self.tree.report_changes()

    def _disconnect(self, port: int, reason: str, now: float) -> None:
        assert reason in DISCONNECT_REASONS, f"disconnect reason {reason!r} is not in DISCONNECT_REASONS"
        self.counters[("disconnect", reason)] += 1
        self.out.disconnects.append((port, reason))
        self.remove_peer(port, now, reason)

    # ------------------------------------------------------------------ input

    def set_adversary(self, rates: Mapping[str, float], peer: bytes | None = None) -> None:
        """Drop received frames by kind at ``rates`` (percent; node.core.adversary), from ``peer`` or every peer.

        Raises ValueError for an unknown kind or a rate outside 0-100.
        """
        if self.adversary is None:
            self.adversary = Adversary()
        self.adversary.configure(rates, peer)

    def set_attack(self, strategy: Strategy | None, now: float) -> None:
        """Run ``strategy`` (node.core.attacks) from ``now`` on; None or the ``none`` strategy: honest again
        (the drop rates of :meth:`set_adversary` are lifted too)."""
        if strategy is None or strategy.name == "none":
            self.attack = None
            self.adversary = None
        else:
            strategy.now = now
            self.attack = strategy
        self._recompute_deadline()

    def bytes_received(self, port: int, frames: list[tuple[int, bytes]], now: float) -> None:
        """Frames that arrived on ``port``, as ``(type byte, whole frame bytes)``, in order.

        Transit Traffic takes the forwarding part's fast path (:meth:`Forwarding.forward_transit
        <node.core.forward.Forwarding.forward_transit>`) while the peer is up and neither an adversary nor hop
        limiting (nor a planted bug that misroutes: test only) is in the way; every other frame is decoded and
        takes :meth:`frame_received`.

        Raises MalformedFrame for a frame that does not decode (the frames before it took effect): the
        caller drops the peer (§3.7).
        """
        fwd = self.forwarding
        fwd.expire_transit(now)
        peer = self.peers.get(port)
        fast = (peer is not None and not self.hop_limiting and self.adversary is None and self.attack is None
                and not self.misrouting)  # fmt: skip
        decode = wire.decode_frame
        i, n = 0, len(frames)
        while i < n:
            if fast:
                i = fwd.forward_transit(port, frames, i, now, self.tree, self.snek)
                if i == n:
                    return
            self.frame_received(port, decode(frames[i][1]), now)
            i += 1
            fast = fast and peer is not None and peer.up  # a frame that dropped the peer ends the fast path

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """§6.5 for a frame that arrived on ``port``."""
        peer = self.peers.get(port)
        if peer is None or not peer.up:
            return
        t = frame.type
        if self.adversary is not None and self.adversary.drops(peer.key, t):
            count_drop(self.counters, t, "adversary")
            self.out.dropped.append((port, frame, "adversary"))
            return
        if self.attack is not None and self.attack.swallow(peer.key, frame, self.key, now):
            count_drop(self.counters, t, "adversary")
            self.out.dropped.append((port, frame, "adversary"))
            return
        if t == _TRAFFIC:
            if self.misrouting:  # TEST ONLY: the planted bug (node.core.planted) sends transit frames back
                n = len(self.out.sends)
                self.forwarding.forward(frame, port, now, self.tree, self.snek)
                send_back(self.out.sends, n, port, self.key)
            else:
                self.forwarding.forward(frame, port, now, self.tree, self.snek)
        else:
            self.forwarding.routing_changed()  # every input but Traffic may move routing state
            if t in self._snek_types:
                self.snek.frame_received(port, frame, now)
            elif t == _TREE_ANNOUNCEMENT:
                self._announcement_received(peer, frame, now)
            elif t == _WAKEUP_BROADCAST:
                bad = self.broadcasts.received(frame, port, now, self.tree)
                if bad is not None:
                    self._disconnect(port, bad, now)
            elif t == _KEEPALIVE:
                pass
            else:
                count_drop(self.counters, t, "unknown_type")
                self.out.dropped.append((port, frame, "unknown_type"))
        self.tree.report_changes()

    def _announcement_received(self, peer: PeerState, frame: Frame, now: float) -> None:
        """§5.3, §5.4: the tree decides; then what its change entails, and §5.3 step 4's wakeup broadcast."""
        tree = self.tree
        parsed = tree.check_announcement(peer, frame)
        if isinstance(parsed, str):
            self._disconnect(peer.port, parsed, now)
            return
        fx = tree.announcement_received(peer, parsed, now)
        self._tree_moved(fx, now)
        if fx & WAKE:
            self.broadcasts.wake(peer.port, now, tree)

    def send_traffic(
        self, dest: bytes, payload: bytes, now: float, *, coords: tuple[int, ...] | None = None
    ) -> None:
        """§6.6: originate Traffic. ``coords`` forces tree routing to those coordinates."""
        self.forwarding.originate(dest, payload, now, coords, self.tree, self.snek)
        self.tree.report_changes()

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> float:
        """When :meth:`handle_timer` must next run. Kept up to date by every timer change."""
        return self._deadline

    def _recompute_deadline(self) -> None:
        """The earliest of the parts' deadlines, the SNEK maintenance tick and the ping service's."""
        self._deadline = min(
            self.next_maintain,
            self.tree.next_deadline(),
            self.forwarding.next_deadline(),
            self.ping.next_deadline(),
            self.broadcasts.next_deadline(),
            self.snek.next_deadline(),
        )
        if self.attack is not None:
            self._deadline = min(self._deadline, self.attack.next_deadline())

    def handle_timer(self, now: float) -> None:
        self.forwarding.routing_changed()
        self._tree_moved(self.tree.tick(now), now)
        if now >= self.next_maintain:
            self.next_maintain = max(self.next_maintain + self.t.maintain_interval_s, now)
            self.snek.maintain(now)
        self.forwarding.tick(now)
        self.broadcasts.tick(now, self.tree)
        self.ping.handle_timer(now)
        attack = self.attack
        if attack is not None:
            self.out.sends.extend(attack.tick(now, self))
        self._recompute_deadline()
        self.tree.report_changes()

    # ------------------------------------------------------------------ output

    def drain(self) -> Output:
        """Take every output accumulated since the last drain (see :class:`~node.core.state.Output`)."""
        out = self.out
        attack = self.attack
        if attack is not None and attack.watches_sends and out.sends:  # it may withhold some (node.core.attacks)
            attack.outgoing(out.sends, self)
            self._recompute_deadline()
        sends: Sequence[Send] = out.sends
        if sends:
            out.sends = []
        else:
            sends = _NOTHING
        disconnects: Sequence[tuple[int, str]] = out.disconnects
        if disconnects:
            out.disconnects = []
        else:
            disconnects = _NOTHING
        delivered: Sequence[Frame] = out.delivered
        if delivered:
            out.delivered = []
        else:
            delivered = _NOTHING
        events: Sequence[tuple[str, dict[str, Any]]] = out.events
        if events:
            out.events = []
        else:
            events = _NOTHING
        results = self.ping.results
        if results:
            self.ping.results = []
        dropped: Sequence[tuple[int, Frame, str]] = out.dropped
        if dropped:
            out.dropped = []
        else:
            dropped = _NOTHING
        return Output(sends, disconnects, delivered, events, results or _NOTHING, self._deadline,  # type: ignore[arg-type]
                      dropped)

    # ------------------------------------------------------------------ reading (the parts' state, read-only)

    @property
    def outbox(self) -> list[Send]:
        """Frames to send since the last drain, ``(port, Frame | Encoded)`` in order."""
        return self.out.sends

    @property
    def disconnects(self) -> list[tuple[int, str]]:
        return self.out.disconnects

    @property
    def delivered(self) -> list[Frame]:
        return self.out.delivered

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return self.out.events

    def emit(self, kind: str, **fields: Any) -> None:
        self.out.events.append((kind, fields))

    def wall_ms(self, now: float) -> int:
        return wall_ms(self.wall_offset_ms, now)

    @property
    def parent(self) -> int | None:
        """The parent's port (§5.5), None while we are a root."""
        return self.tree.parent

    @property
    def root(self) -> Root:
        """Our root (§5.1)."""
        return self.tree.root

    @property
    def coords(self) -> tuple[int, ...]:
        """Our coordinates (§5.7)."""
        return self.tree.coords

    def up_ports(self) -> list[int]:
        """Up ports in ascending order."""
        return self.tree.up_ports()

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

    @property
    def coords_cache(self) -> dict[bytes, tuple[tuple[int, ...], float]]:
        """§6.6: destination key -> (coordinates, when learnt)."""
        return self.forwarding.coords_cache

    @property
    def fast_forwards(self) -> int:
        """Transit frames forwarded from the transit cache."""
        return self.forwarding.fast_forwards

    def routes(self, now: float) -> list[dict[str, Any]]:
        """The admin API's ``GET /routes``: every routing-table entry still valid at ``now``, lowest key first."""
        entries = sorted((e for e in self.snek.table if e.valid(now)), key=lambda e: e.key)
        return [{"key": e.key.hex(), "source": e.source, "destination": e.destination,
                 "expires_in_s": round(e.expires_at - now, 3)} for e in entries]

    def state(self, now: float | None = None) -> dict[str, Any]:
        """The admin API's ``GET /state`` document. With ``now``, an expired descending entry (not yet
        cleared by maintenance, and no longer used for routing) is reported as none."""
        tree = self.tree
        root = tree.root
        desc = self.snek.descending
        if desc is not None and now is not None and not desc.valid(now):
            desc = None
        return {
            "public_key": self.key.hex(),
            "root": {"key": root.key.hex(), "sequence": root.seq},
            "parent": self.peers[tree.parent].key.hex() if tree.parent is not None else None,
            "coords": list(tree.coords),
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
