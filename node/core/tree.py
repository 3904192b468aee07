"""The spanning tree (PROTOCOL.md §5): root announcements, parent selection, the root, tree routing.

:class:`Tree` is one of the parts :class:`node.core.router.Router` holds. It owns the tree's state (the
parent, our root sequence, the reparent hold, the announcement timer, the up ports) and stores each peer's
announcement in the router's peer table, which it is given at construction along with the router's
outbox (it sends announcements there and reports root, parent and coordinate moves as events).

It calls no other part. What the router must do after a change of the tree comes back from the methods
that change it as effect flags, which the router applies in this order: :data:`PEERS_CHANGED` (the SNEK
variant drops its derived indexes), :data:`ROOT_KEY_CHANGED` (the coordinates cache is void, §6.6),
:data:`DEADLINE_MOVED` (a tree timer moved: the router's deadline is recomputed), :data:`BOOTSTRAP_SOON`
(§5.5 chose a new parent: the SNEK variant bootstraps soon, §6.2) and :data:`WAKE` (a first announcement
from a new peer key: it gets our wakeup broadcast, §5.3 step 4, §6.8).
"""

from __future__ import annotations

from typing import Final

from . import wire
from .announce import ANNOUNCEMENTS, ParsedAnnouncement
from .crypto import Identity
from .errors import ProtocolError
from .state import Outbox, PeerState, Timers, tree_distance
from .types import LOCAL_PORT, Announcement, Frame, FrameType, Root

__all__ = ["BOOTSTRAP_SOON", "DEADLINE_MOVED", "PEERS_CHANGED", "ROOT_KEY_CHANGED", "WAKE", "Tree"]

#: effect flags (see the module docstring); a method that changes the tree returns their union
PEERS_CHANGED: Final = 1
ROOT_KEY_CHANGED: Final = 2
DEADLINE_MOVED: Final = 4
BOOTSTRAP_SOON: Final = 8
WAKE: Final = 16

#: what :meth:`Tree.report_changes` compares: (root key, root sequence, parent key, our coordinates)
_Snapshot = tuple[bytes, int, "bytes | None", tuple[int, ...]]


class Tree:
    """§5 on the router's peer table. Built once per router; :meth:`reset` then :meth:`maintenance` start it."""

    def __init__(self, identity: Identity, timers: Timers, peers: dict[int, PeerState], outbox: Outbox) -> None:
        self.identity = identity
        self.key = identity.public_key
        self.t = timers
        self.peers = peers  # the router's peer table: read here, announcements stored in its entries
        self.outbox = outbox
        self.up: list[int] = []  # up ports, ascending (the deterministic iteration order)
        self.parent: int | None = None
        self.own_seq = 0
        self.waiting = False
        self.hold_until: float | None = None
        self.order_counter = 0
        self.next_tree_maintenance = 0.0
        self._self_ann = Announcement(self.key, 0, ())  # our own root announcement, rebuilt when own_seq moves
        self._self_root = Root(self.key, 0)
        self._sig_cache: tuple[bytes, bytes] = (b"", b"")  # (announcement bytes, our signature over them)
        self._touched = False  # tree state may have moved since the last report_changes()
        self._snap: _Snapshot = (self.key, 0, None, ())

    # ------------------------------------------------------------------ reading

    def parent_state(self) -> PeerState | None:
        """The parent's entry in the peer table, if it has an announcement stored."""
        if self.parent is not None:
            p = self.peers.get(self.parent)
            if p is not None and p.announcement is not None:
                return p
        return None

    def current_announcement(self) -> Announcement:
        """§5.1: the parent's stored announcement, else our own root announcement."""
        p = self.parent_state()
        if p is not None:
            return p.announcement  # type: ignore[return-value]
        if self._self_ann.root_seq != self.own_seq:
            self._self_ann = Announcement(self.key, self.own_seq, ())
        return self._self_ann

    @property
    def root(self) -> Root:
        p = self.parent_state()
        if p is not None:
            return p.root  # type: ignore[return-value]
        if self._self_root.seq != self.own_seq:
            self._self_root = Root(self.key, self.own_seq)
        return self._self_root

    @property
    def coords(self) -> tuple[int, ...]:
        p = self.parent_state()
        return p.ports if p is not None else ()

    def up_ports(self) -> list[int]:
        """Up ports in ascending order (the deterministic iteration order)."""
        return self.up

    def next_deadline(self) -> float:
        """The announcement timer (§5.2), or the end of the reparent hold (§5.6) if that is sooner."""
        hold = self.hold_until
        if hold is not None and hold < self.next_tree_maintenance:
            return hold
        return self.next_tree_maintenance

    def next_hop(self, dest: tuple[int, ...], from_port: int) -> int | None:
        """§5.8 with the deterministic tie-break (link type, receive order, port): a remote port strictly closer
        to ``dest``, LOCAL_PORT when ``dest`` is our own coordinates, or None."""
        own = self.coords
        if dest == own:
            return LOCAL_PORT
        own_dist = tree_distance(own, dest)
        best_rank: tuple[int, int, int, int] | None = None
        root = self.root
        for port in self.up:
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

    # ------------------------------------------------------------------ peers and timers

    def reset(self) -> None:
        """Start-up state, and the full reset of §3.7 step 2 (own_seq survives); :meth:`maintenance` follows."""
        self.parent = None
        self.waiting = False
        self.hold_until = None
        self.order_counter = 0

    def settle(self) -> None:
        """Take the tree as it is now as already reported (the router's start-up state is not a move)."""
        self._snap = self._snapshot()

    def peer_added(self, port: int) -> None:
        """§3.6: ``port`` (already in the peer table) is up; greet it with our current announcement."""
        self.up = sorted(p for p, q in self.peers.items() if q.up)
        self._send_announcement(port, self.current_announcement())

    def peer_down(self, port: int) -> None:
        """§3.7 step 1: ``port`` (marked down in the peer table) is no longer one of the up ports."""
        self._touched = True
        self.up = [p for p in self.up if p != port]

    def peer_removed(self, port: int, now: float) -> int:
        """§3.7 step 3: ``port``'s announcement is forgotten; if it was our parent, choose again (§5.5)."""
        if self.parent == port:
            return self._select_parent(now)
        return 0

    def tick(self, now: float) -> int:
        """The tree's timers at ``now``: the end of the reparent hold (§5.6), the announcement timer (§5.2)."""
        fx = 0
        if self.hold_until is not None and now >= self.hold_until:
            self.hold_until = None
            self.waiting = False
            fx = self._select_parent(now)
        if now >= self.next_tree_maintenance:
            fx |= self.maintenance(now)
        return fx

    def maintenance(self, now: float) -> int:
        """§5.2: while root, bump the sequence and announce; restart the 30 min timer."""
        self._touched = True
        self.next_tree_maintenance = now + self.t.announcement_interval_s
        if self.parent is None:
            self.own_seq += 1
            self._announce_to_all()
        return DEADLINE_MOVED

    # ------------------------------------------------------------------ announcements (§5.3, §5.4)

    def check_announcement(self, peer: PeerState, frame: Frame) -> ParsedAnnouncement | str:
        """§5.3 steps 1-3: the announcement ``peer`` sent, parsed, or the reason to drop the peer."""
        try:
            parsed = ANNOUNCEMENTS.parse(frame.payload)
        except ProtocolError as exc:
            reason: str = getattr(exc, "reason", "bad_announcement")
            return reason
        ann = parsed.ann
        bad = parsed.problem or (None if ann.hops[-1].key == peer.key else "announcement_last_hop_not_peer")
        if bad:
            return bad
        old = peer.announcement
        if old is not None and old.root_key == ann.root_key and ann.root_seq < old.root_seq:
            return "announcement_replay"
        return parsed

    def announcement_received(self, peer: PeerState, parsed: ParsedAnnouncement, now: float) -> int:
        """§5.3 steps 4-6 and the decision table of §5.4, for what :meth:`check_announcement` accepted."""
        ann = parsed.ann
        first = peer.announcement is None
        wake = first and not any(
            q.key == peer.key and q.announcement is not None and q.port != peer.port for q in self.peers.values() if q.up
        )
        last = self.current_announcement()
        delta = (ann.root_key > last.root_key) - (ann.root_key < last.root_key)
        self.order_counter += 1
        peer.store(parsed, now, self.order_counter)
        self._touched = True
        fx = PEERS_CHANGED | WAKE if wake else PEERS_CHANGED
        if self.waiting:
            return fx
        loop = self.key in peer.keyset
        if peer.port == self.parent:
            if loop or delta < 0 or (delta == 0 and ann.root_seq == last.root_seq):
                return fx | self._become_root(now, hold=True)
            if delta > 0 or (delta == 0 and ann.root_seq > last.root_seq):
                self._announce_to_all()
        elif loop:
            pass
        elif delta > 0:
            fx |= self._set_parent(peer.port)
            self._announce_to_all()
        elif delta < 0:
            if not first:
                self._send_announcement(peer.port, last)
        else:
            fx |= self._select_parent(now)
        return fx

    def _set_parent(self, port: int | None) -> int:
        self._touched = True
        before = self.root.key
        self.parent = port
        if self.root.key != before:
            return PEERS_CHANGED | ROOT_KEY_CHANGED  # §6.6: a parent change that alters the root key
        return PEERS_CHANGED

    def _select_parent(self, now: float) -> int:
        """§5.5. :data:`BOOTSTRAP_SOON` is among the effects when the parent changed."""
        cur = self.root
        best_key, best_seq = (self.key, 0) if self.key > cur.key else (cur.key, cur.seq)
        best_order = float("inf")
        best_port = None
        timeout = self.t.announcement_timeout_s
        for port in self.up:
            q = self.peers[port]
            a = q.announcement
            if a is None or now - q.received_at > timeout or self.key in q.keyset:
                continue
            if a.root_key > best_key or (
                a.root_key == best_key and (a.root_seq > best_seq or (a.root_seq == best_seq and q.order < best_order))
            ):
                best_key, best_seq, best_order, best_port = a.root_key, a.root_seq, float(q.order), port
        if best_port is not None and best_port != self.parent:
            fx = self._set_parent(best_port)
            self._announce_to_all()
            return fx | BOOTSTRAP_SOON
        if best_port is None:
            return self._become_root(now, hold=False)
        return 0

    def _become_root(self, now: float, *, hold: bool) -> int:
        """§5.6."""
        fx = 0
        if hold:
            self.waiting = True
            self.hold_until = now + self.t.reparent_hold_s
            fx = DEADLINE_MOVED
        if self.parent is None:
            return fx
        fx |= self._set_parent(None)
        return fx | self.maintenance(now)

    # ------------------------------------------------------------------ sending announcements (§4.5)

    def _current_raw(self) -> tuple[bytes, bool]:
        """The current root announcement's bytes, and whether it holds our own key."""
        p = self.parent_state()
        if p is not None:
            return p.raw, self.key in p.keyset
        return wire.encode_announcement(self.current_announcement()), False

    def announce_to_all(self) -> int:
        """Send the current announcement to every peer again (node.core.attacks: an announcement flood); how many
        were sent."""
        return self._announce_to_all()

    def _announce_to_all(self) -> int:
        base, ours = self._current_raw()
        if ours:
            return 0  # §4.5: never send an announcement that already holds our key
        for port in self.up:
            self._send_raw_announcement(port, base)
        return len(self.up)

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
        self.outbox.sends.append((port, Frame(FrameType.TREE_ANNOUNCEMENT, payload=payload)))

    # ------------------------------------------------------------------ observation

    def _snapshot(self) -> _Snapshot:
        p = self.parent_state()
        if p is None:
            return (self.key, self.own_seq, None, ())
        return (p.root.key, p.root.seq, p.key, p.ports)  # type: ignore[union-attr]

    def report_changes(self) -> None:
        """Emit root/parent/coords change events if the tree moved since the last report (after every input)."""
        if not self._touched:
            return
        self._touched = False
        snap = self._snapshot()
        old = self._snap
        if snap[0] is old[0] and snap[1] == old[1] and snap[2] is old[2] and snap[3] is old[3]:
            return  # nothing moved (identity checks: the common case costs almost nothing)
        self._snap = snap
        emit = self.outbox.emit
        if snap[:2] != old[:2]:
            emit("root_changed", root=snap[0].hex(), root_seq=snap[1], prev_root=old[0].hex())
        if snap[2] != old[2]:
            new_parent, old_parent = snap[2], old[2]
            emit(
                "parent_changed",
                parent=new_parent.hex() if new_parent else None,
                prev_parent=old_parent.hex() if old_parent else None,
            )
        if snap[3] != old[3]:
            emit("coords_changed", coords=list(snap[3]))
