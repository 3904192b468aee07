"""The spanning tree (PROTOCOL.md §5): root announcements, parent selection, the root, tree routing.

:class:`TreeMixin` is one of the parts :class:`node.core.router.Router` is made of; it works on the
router's shared state (``peers``, ``parent``, ``own_seq``, the outbox) and calls the SNEK strategy
(``self.snek``) where §5 says to bootstrap soon, and the broadcast part (§6.8) when a new peer announces.
"""

from __future__ import annotations

from . import wire
from .announce import ANNOUNCEMENTS
from .errors import ProtocolError
from .parts import RouterParts
from .state import PeerState, tree_distance
from .types import LOCAL_PORT, Announcement, Frame, FrameType, Root

__all__ = ["TreeMixin"]


class TreeMixin(RouterParts):
    """§5 on the router's state. Owns: ``parent``, ``own_seq``, ``waiting``, ``hold_until``, ``order_counter``,
    ``next_tree_maintenance`` and the signature cache; reads ``peers`` and the up-port list."""

    _self_ann: Announcement  # our own root announcement, rebuilt when own_seq moves
    _self_root: Root
    _sig_cache: tuple[bytes, bytes]  # (announcement bytes, our signature over them)
    waiting: bool
    hold_until: float | None
    order_counter: int

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


    def up_ports(self) -> list[int]:
        """Up ports in ascending order (the deterministic iteration order)."""
        return self._up

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
        self.snek.peers_changed()
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
                self.snek.bootstrap_soon(now)
        if wake and self.broadcasts_enabled:
            self._send_own_broadcast(peer.port, now)

    def _set_parent(self, port: int | None) -> None:
        self._touched = True
        before = self.root.key
        self.parent = port
        self.snek.peers_changed()
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
                best_key, best_seq, best_order, best_port = a.root_key, a.root_seq, float(q.order), port
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
