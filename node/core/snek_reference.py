"""The reference SNEK variant (PROTOCOL.md §6.1-§6.4, §6.7): bootstraps, the routing table, descending.

:class:`SnekReference` is the :class:`~node.core.snek_api.SnekStrategy` the current Pinecone reference
implements. Its next hop is the indexed §6.3 of :mod:`node.core.snek`; its own message is the Bootstrap
(type 2): sent by :meth:`SnekReference.maintain`, handled hop by hop in :meth:`SnekReference.frame_received`.
"""

from __future__ import annotations

from typing import ClassVar

from mypy_extensions import mypyc_attr

from . import wire
from .errors import ProtocolError
from .reasons import count_drop
from .snek import EXPIRY_S, Entry, NextHop, RoutingTable, SnekView
from .snek_api import SnekHost, descending_moved
from .types import INITIAL_WATERMARK, Frame, FrameType, Root, Watermark, with_watermark

__all__ = ["SnekReference"]


@mypyc_attr(allow_interpreted_subclasses=True)  # a custom variant may build on it (tests/node/core/test_snek_seam.py)
class SnekReference:
    """§6 as the reference does it. Built once per router: ``SnekReference(host, now)``."""

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
        self.view = SnekView()
        self.descending: Entry | None = None
        self.last_bootstrap = now - 2 * self.host.t.bootstrap_interval_s

    # ------------------------------------------------------------------ the seam

    def next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        h = self.host
        root = h.root
        only = root if self.root_filter else None
        return self.view.next_hop(h.key, dest, bootstrap, wm, h.parent, root.key, h.peers, self.table, now, only)

    def peers_changed(self) -> None:
        self.view.dirty = True

    def peer_removed(self, port: int, now: float) -> None:
        self.table.remove_where(lambda e: e.source == port or e.destination == port)
        if self.descending is not None and self.descending.source == port:
            self._set_descending(None, now)

    def bootstrap_soon(self, now: float) -> None:
        self.last_bootstrap = now - self.host.t.bootstrap_interval_s

    def routes_valid_until(self) -> float:
        return min((e.last_seen for e in self.table), default=float("inf")) + self.expiry_s

    def next_deadline(self) -> float:
        return float("inf")  # the maintenance tick is all it needs

    def maintain(self, now: float) -> None:
        """§6.7."""
        d = self.descending
        if d is not None and (not d.valid(now) or d.root != self.host.root):
            self._set_descending(None, now)
        self.table.expire(now)
        if now - self.last_bootstrap >= self.host.t.bootstrap_interval_s:
            self.bootstrap_now(now)

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """§6.5 for a Bootstrap: next hop, §6.4 at this hop, then forward."""
        h = self.host
        root = h.root  # once per frame: both the next hop and §6.4 need it
        nh = self.view.next_hop(
            h.key, frame.destination_key, True, frame.watermark, h.parent, root.key, h.peers, self.table, now,
            root if self.root_filter else None,
        )
        reason = self._install_route(frame, port, nh.port, now, root)
        if reason is not None:
            h.counters[("bootstrap_rejected", reason)] += 1
            if h.detail_events:
                h.emit("bootstrap_rejected", origin=frame.destination_key.hex(), reason=reason)
            return
        h.counters[("bootstrap_accepted",)] += 1
        if h.detail_events:
            h.emit(
                "bootstrap_accepted",
                origin=frame.destination_key.hex(),
                from_port=port,
                to_port=nh.port if nh.port > 0 else None,
            )
        if nh.port <= 0:
            return  # dead end here
        if nh.port == port or nh.watermark.worse_than(frame.watermark):
            count_drop(h.counters, FrameType.BOOTSTRAP, "watermark" if nh.port != port else "loop")
            return
        h.outbox.append((nh.port, with_watermark(frame, nh.watermark)))

    # ------------------------------------------------------------------ §6.2, §6.4

    def bootstrap_now(self, now: float) -> None:
        """§6.2."""
        h = self.host
        if h.parent is None:
            return
        root = h.root
        seq = h.wall_ms(now)
        payload = wire.make_signed_root_payload(h.identity, seq, root.key, root.seq)
        nh = self.next_hop(h.key, True, INITIAL_WATERMARK, now)
        if nh.port > 0:
            frame = Frame(
                FrameType.BOOTSTRAP,
                destination_key=h.key,
                watermark=nh.watermark,
                payload=wire.encode_signed_root_payload(payload),
            )
            h.outbox.append((nh.port, frame))
            h.counters[("bootstrap_sent",)] += 1
            if h.detail_events:
                h.emit("bootstrap_sent", seq=seq, port=nh.port)
        self.last_bootstrap = now

    def _set_descending(self, entry: Entry | None, now: float) -> None:
        prev = self.descending
        self.descending = entry
        if descending_moved(self.host, prev, entry):
            self.bootstrap_soon(now)

    def _install_route(self, frame: Frame, from_port: int, to_port: int, now: float, root: Root) -> str | None:
        """§6.4. Returns None when accepted, else the rejection reason."""
        origin = frame.destination_key
        try:
            p = wire.signed_root(frame.payload, origin)
        except ProtocolError:
            return "malformed"
        if p is None:
            return "bad_signature"
        if p.root_key != root.key or p.root_seq != root.seq:
            return "root_mismatch"
        old = self.table.get(origin)
        if old is not None and old.root == root and p.seq <= old.seq:
            return "replay"
        if old is not None and old.root == root and now - old.last_seen < self.min_gap:
            return "rate"  # the bootstrap_min_gap knob (not the spec's): an origin refreshes at most this often
        if old is None and len(self.table) >= self.host.max_routes:
            return "table_full"  # bounded memory: validly signed bootstraps from made-up keys cannot grow it
        entry = Entry(origin, from_port, to_port, now, root, p.seq, self.expiry_s)
        self.table.install(entry)
        key = self.host.key
        if origin < key:
            d = self.descending
            if d is None or not d.valid(now) or d.key == origin or d.key < origin:
                self._set_descending(entry, now)
        return None
