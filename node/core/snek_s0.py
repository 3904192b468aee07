"""The ``snek-s0`` SNEK variant: the reference's frames, seed S0's own rules (PROTOCOL.md §6, §10).

:class:`SnekS0` is a :class:`~node.core.snek_api.SnekStrategy` that speaks the reference's wire format (the
Bootstrap, type 2, with the payload and signature of §4.6; the handshake capabilities of §3.2), so ``snek``
and ``snek-s0`` nodes peer, but decides as seed 000 ("S0") says rather than as the reference code does:

* **Next hop** (:meth:`SnekS0.next_hop`): S0's "Next-hop calculation", steps 1-6, transcribed step by step.
  Compared with §6.3 of the reference:

  - no watermark at all: routing-table entries are never skipped for their watermark, and the frame's
    watermark is returned unchanged, so the router's watermark drop (§6.5 step 4) never fires and a frame
    crosses ``snek-s0`` nodes with the watermark it arrived with (§10 items 6, 7);
  - step 1 starts every frame at the local port, bootstraps included (§10 item 3): a bootstrap that finds
    nothing better ends here (local), our own is then not sent;
  - step 4 (the peers' ancestors) takes only an exact match, and only for non-bootstrap frames, where the
    reference offers every ancestor with the full "Ordered" rule, bootstraps included (§10 item 5);
  - step 5 considers every up peer, announced or not;
  - there is no third peer loop: no link-type or receive-order refinement among links to the best key
    (§6.3 step 7, §10 item 14); of several links to one key, step 5's last (highest port) carries it.

* **Bootstrap handling** (:meth:`SnekS0.frame_received`): S0's "Handling bootstrap messages" and "Install
  route into routing table": a valid signature and our root (key and sequence), then the route is installed
  or overwritten at every hop. There is no replay check (§10 item 9); the descending entry is updated only
  at the dead end (§10 item 10), where it is replaced by a closer key or refreshed by the same one.

* **Maintenance** (:meth:`SnekS0.maintain`): S0's "Routine maintenance" (an expired descending entry, or one
  whose root differs from ours, is removed; expired routing-table entries are removed) and its
  "Bootstrapping takes place every 5 seconds" (``Timers.bootstrap_interval_s``): every node tries every
  interval, and nothing else makes it bootstrap sooner (no "bootstrap soon" on a descending or parent
  change, §10 item 13). A root's attempt finds no next hop (step 3 needs a parent, nothing lies between
  its key and itself) and sends nothing, which is the reference's "roots never bootstrap" by another road.

**Deviations from a literal S0**, each the closest rule that works, with the evidence:

1. *Step 3.1, "route to the root first" for bootstraps* applies only at the originator (``dest == own
   key``), as in the reference (§10 item 4). S0 applies it to every bootstrap at every hop ("which should
   always be the case to begin with"). Measured on graph-250 (248 nodes, seed 0, in process) with the
   literal condition: every bootstrap climbs to the root, the root sends it one hop down towards the
   successor, and that hop sends it back up to the root. With the arrival-port drop (deviation 2) that is
   where it dies: 246 of 247 bootstraps per round, only 2 of 248 nodes ever hold the right descending
   entry, and the snake has not converged after 60 s (the variant as shipped: 105 s). Without the drop
   the bootstraps bounce for ever: 117 000 frames per protocol second after the first round, 225 000 after
   the second, and so on. Applying step 3.1 at every hop except to a bootstrap that came down from the
   parent stalls too (5 nodes wrong from 260 s to the end of a 400 s run). Details: docs/variants.md, "snek-s0 in detail".
2. *A bootstrap whose next hop is the port it arrived on is dropped* (the loop check of §6.5 step 4, which
   every frame type gets in the reference's pipeline). S0 describes no forwarding pipeline; this is the
   only loop protection the variant has, as S0 has neither watermarks nor a hop limit for bootstraps.
3. *The stored entry's watermark* is (origin key, bootstrap sequence), as the reference stores it: S0's
   "copy the setup Watermark" does not say which (§10 item 8). ``snek-s0`` never reads it.
4. *What the router's contract adds and S0 does not describe* stays as in the reference: routes through a
   peer that goes are deleted (§3.7 steps 4-5, without the "bootstrap soon"), the whole state is reset when
   the last peer goes (§3.7 step 2), a table full of ``max_routes`` refuses new origins, and step 6 skips an
   entry whose source is not an up peer (the router deletes those anyway, so this is never observable).

The knobs the reference honours are honoured here: ``entry_expiry`` (the lifetime of routing-table and
descending entries, S0's "10 seconds") and ``root_filter`` (step 6 skips entries installed under another
root). ``bootstrap_interval`` reaches it through ``host.t``.
"""

from __future__ import annotations

from typing import ClassVar

from . import wire
from .errors import ProtocolError
from .reasons import count_drop
from .snek import EXPIRY_S, NONE_PORT, Entry, NextHop, RoutingTable, ordered
from .snek_api import SnekHost, descending_moved
from .types import INITIAL_WATERMARK, LOCAL_PORT, Frame, FrameType, Root, Watermark

__all__ = ["SnekS0"]


class SnekS0:
    """Seed S0's SNEK rules on the reference's frames. Built once per router: ``SnekS0(host, now)``."""

    frame_types: ClassVar[frozenset[int]] = frozenset((int(FrameType.BOOTSTRAP),))

    def __init__(self, host: SnekHost, now: float) -> None:
        self.host = host
        self.reset(now)

    def reset(self, now: float) -> None:
        knobs = self.host.knobs
        self.expiry_s = float(knobs.get("entry_expiry", EXPIRY_S))
        self.root_filter = bool(knobs.get("root_filter", False))
        self.min_gap = float(knobs.get("bootstrap_min_gap", 0.0))
        self.table = RoutingTable()
        self.descending: Entry | None = None
        self.last_bootstrap = now - self.host.t.bootstrap_interval_s  # the first tick bootstraps

    # ------------------------------------------------------------------ S0 "Next-hop calculation"

    def next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        """S0's steps 1-6. The watermark ``wm`` is returned as it came: S0 has no watermarks."""
        h = self.host
        own = h.key
        # 1. best key = our own key, best candidate = our own router port (for every frame, bootstraps too)
        best_key, best_port = own, LOCAL_PORT
        # 2. addressed to us, and not a bootstrap: handle locally
        if not bootstrap and dest == own:
            return NextHop(LOCAL_PORT, wm)
        peers = [(port, q) for port, q in sorted(h.peers.items()) if q.up]
        # 3. we have a chosen parent, and an announcement from it
        parent = h.parent
        pp = h.peers.get(parent) if parent is not None else None
        if parent is not None and pp is not None and pp.up and pp.root is not None:
            root_key = pp.root.key
            # 3.1 a bootstrap, best key still our own: the worst-case route up to the root.
            #     Deviation 1: only for our own bootstrap (dest == own), as the reference does (§10 item 4).
            if bootstrap and best_key == own and dest == own:
                best_key, best_port = root_key, parent
            # 3.2 best key < destination < root: the target is above us, go up to the root
            if ordered(best_key, dest, root_key):
                best_key, best_port = root_key, parent
            # 3.3 our ancestors: the keys of the parent's announcement (root first, the parent last)
            for anc in pp.hop_keys:
                # 3.3.1 the destination is one of our ancestors (not for bootstraps)
                if not bootstrap and anc == dest and best_key != dest:
                    best_key, best_port = anc, parent
                # 3.3.2 an ancestor takes us closer: destination < ancestor < best key
                if ordered(dest, anc, best_key):
                    best_key, best_port = anc, parent
        # 4. first peer loop: each peer's ancestors, an exact match only (not for bootstraps)
        for port, q in peers:
            for anc in q.hop_keys:
                # 4.1.1 the destination is one of this peer's ancestors
                if not bootstrap and anc == dest and best_key != dest:
                    best_key, best_port = anc, port
        # 5. second peer loop: the best key is a direct peer's, use the direct link (the last one found)
        for port, q in peers:
            if best_key == q.key:
                best_key, best_port = q.key, port
        # 6. the routing table: transitive paths closer to the destination than the peers gave us
        up = {port for port, _ in peers}
        root = h.root if self.root_filter else None
        for e in self.table:
            # 6.1 skip an expired entry, or one whose source is the local router
            #     (and one whose source is not an up peer: deviation 4; the router deletes those)
            if not e.valid(now) or e.source == LOCAL_PORT or e.source not in up:
                continue
            if root is not None and e.root != root:
                continue  # the root_filter knob
            # 6.2 the entry's key is the destination (not for bootstraps)
            if not bootstrap and e.key == dest and best_key != dest:
                best_key, best_port = e.key, e.source
            # 6.3 destination < entry key < best key
            if ordered(dest, e.key, best_key):
                best_key, best_port = e.key, e.source
        # no third loop: no link-type refinement (§6.3 step 7 is the reference's, not S0's)
        return NextHop(best_port, wm)

    # ------------------------------------------------------------------ the rest of the seam

    def peers_changed(self) -> None:
        pass  # no derived indexes: next_hop reads the peers as they are

    def peer_removed(self, port: int, now: float) -> None:
        """§3.7 steps 4-5 (deviation 4), without "bootstrap soon"."""
        self.table.remove_where(lambda e: e.source == port or e.destination == port)
        if self.descending is not None and self.descending.source == port:
            self._set_descending(None)

    def bootstrap_soon(self, now: float) -> None:
        pass  # S0 bootstraps every 5 s and at no other time (§10 item 13)

    def routes_valid_until(self) -> float:
        return min((e.last_seen for e in self.table), default=float("inf")) + self.expiry_s

    def next_deadline(self) -> float:
        return float("inf")  # the maintenance tick is all it needs

    # ------------------------------------------------------------------ S0 "Routine maintenance"

    def maintain(self, now: float) -> None:
        """S0's "Routine maintenance" steps 1-3, then "Bootstrapping takes place every 5 seconds"."""
        h = self.host
        d = self.descending
        # 1. the descending entry has expired: remove it
        if d is not None and not d.valid(now):
            self._set_descending(None)
        # 2. the descending entry has different root information: remove it
        d = self.descending
        if d is not None and d.root != h.root:
            self._set_descending(None)
        # 3. remove routing-table entries that have expired
        self.table.expire(now)
        if now - self.last_bootstrap >= h.t.bootstrap_interval_s:
            self.bootstrap_now(now)

    def bootstrap_now(self, now: float) -> None:
        """S0 "Bootstrapping" step 1: a bootstrap for our own key, sent to the next hop if it is a peer."""
        h = self.host
        root = h.root
        seq = h.wall_ms(now)
        nh = self.next_hop(h.key, True, INITIAL_WATERMARK, now)
        if nh.port > 0:
            payload = wire.make_signed_root_payload(h.identity, seq, root.key, root.seq)
            frame = Frame(
                FrameType.BOOTSTRAP,
                destination_key=h.key,
                watermark=INITIAL_WATERMARK,
                payload=wire.encode_signed_root_payload(payload),
            )
            h.outbox.append((nh.port, frame))
            h.counters[("bootstrap_sent",)] += 1
            if h.detail_events:
                h.emit("bootstrap_sent", seq=seq, port=nh.port)
        self.last_bootstrap = now

    # ------------------------------------------------------------------ S0 "Handling bootstrap messages"

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """A Bootstrap arrived on ``port``: check it, install the route, then end here or forward it."""
        h = self.host
        nh = self.next_hop(frame.destination_key, True, frame.watermark, now)
        dead_end = nh.port == LOCAL_PORT
        reason = self._install_route(frame, port, NONE_PORT if dead_end else nh.port, now, h.root)
        if reason is not None:
            h.counters[("bootstrap_rejected", reason)] += 1
            if h.detail_events:
                h.emit("bootstrap_rejected", origin=frame.destination_key.hex(), reason=reason)
            return
        h.counters[("bootstrap_accepted",)] += 1
        if h.detail_events:
            h.emit("bootstrap_accepted", origin=frame.destination_key.hex(), from_port=port,
                   to_port=None if dead_end else nh.port)  # fmt: skip
        if dead_end:
            self._update_descending(frame.destination_key, now)
            return
        if nh.port == port:  # deviation 2: the loop check of §6.5 step 4
            count_drop(h.counters, FrameType.BOOTSTRAP, "loop")
            return
        h.outbox.append((nh.port, frame))  # the watermark is not touched

    def _install_route(self, frame: Frame, from_port: int, to_port: int, now: float, root: Root) -> str | None:
        """The checks of "Handling bootstrap messages", then "Install route into routing table" steps 1-6.

        Returns None when installed, else why the bootstrap was dropped.
        """
        origin = frame.destination_key
        try:
            p = wire.signed_root(frame.payload, origin)
        except ProtocolError:
            return "malformed"
        if p is None:  # the Source signature, checked with the header's DestinationKey (§10 item 1)
            return "bad_signature"
        if p.root_key != root.key or p.root_seq != root.seq:
            return "root_mismatch"
        old = self.table.get(origin)
        if old is None and len(self.table) >= self.host.max_routes:
            return "table_full"  # bounded memory (deviation 4)
        if old is not None and old.root == root and now - old.last_seen < self.min_gap:
            return "rate"  # the bootstrap_min_gap knob (not S0's): an origin refreshes at most this often
        # 1. origin key; 2. root key and sequence; 3. last seen = now; 4. source port; 5. destination port
        # (none at the dead end); 6. the watermark: (origin, bootstrap sequence) (deviation 3)
        self.table.install(Entry(origin, from_port, to_port, now, Root(p.root_key, p.root_seq), p.seq, self.expiry_s))
        return None

    def _update_descending(self, origin: bytes, now: float) -> None:
        """At the dead end: a lower key becomes descending if it is closer than ours or refreshes it."""
        if not origin < self.host.key:
            return  # a descending path leads to a lower key
        d = self.descending
        if d is None or d.key == origin or ordered(d.key, origin, self.host.key):
            self._set_descending(self.table.get(origin))

    def _set_descending(self, entry: Entry | None) -> None:
        prev = self.descending
        self.descending = entry
        descending_moved(self.host, prev, entry)  # S0: no "bootstrap soon"
