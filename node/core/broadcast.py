"""Wakeup broadcasts (PROTOCOL.md §6.8): sending our own, and receiving, recording and flooding others'.

:class:`Broadcasts` is one of the parts :class:`node.core.router.Router` holds. It owns the broadcast
records (bounded by ``max_cached``) and the 60 s broadcast timer. The router hands it the tree
(:class:`~node.core.tree.Tree`) with each call that needs the root, our coordinates or the peers; it
writes to the router's outbox, and returns the reason to drop a peer rather than dropping it.
"""

from __future__ import annotations

from . import wire
from .broadcast_records import DictRecords, FlatRecords, KeyIndex, Records
from .crypto import Identity
from .errors import ProtocolError
from .state import Outbox, PeerState, Timers, tree_distance, wall_ms
from .tree import Tree
from .types import BROADCAST_HOP_LIMIT, Frame, FrameType, with_hop_limit

__all__ = ["Broadcasts"]

class Broadcasts:
    """§6.8. With ``enabled`` false we send none of our own, but still record and flood others'."""

    def __init__(
        self,
        identity: Identity,
        timers: Timers,
        wall_offset_ms: int,
        enabled: bool,
        max_cached: int,
        outbox: Outbox,
        keys: KeyIndex | None = None,
    ) -> None:
        """``keys``: the key index the routers of one simulation share, for records in flat arrays
        (:class:`~node.core.broadcast_records.FlatRecords`); None, a dict of this node's own."""
        self.identity = identity
        self.key = identity.public_key
        self.t = timers
        self.wall_offset_ms = wall_offset_ms
        self.enabled = enabled
        self.outbox = outbox
        self.records: Records = FlatRecords(keys, max_cached) if keys is not None else DictRecords(max_cached)
        self.next_broadcast = 0.0

    def reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2."""
        self.records.clear()
        self.next_broadcast = now + self.t.broadcast_interval_s

    def next_deadline(self) -> float:
        return self.next_broadcast if self.enabled else float("inf")

    def tick(self, now: float, tree: Tree) -> None:
        """The 60 s timer, if due: forget records older than 3 min, then send our own broadcast to every peer key."""
        if not self.enabled or now < self.next_broadcast:
            return
        self.next_broadcast = now + self.t.broadcast_interval_s
        self.records.expire(now, self.t.broadcast_expiry_s)
        self._send_own(None, now, tree)

    def wake(self, port: int, now: float, tree: Tree) -> None:
        """§5.3 step 4: the first announcement from a new peer key came in on ``port``: send it our broadcast."""
        if self.enabled:
            self._send_own(port, now, tree)

    def _send_own(self, only_port: int | None, now: float, tree: Tree) -> None:
        root = tree.root
        payload = wire.make_signed_root_payload(self.identity, wall_ms(self.wall_offset_ms, now), root.key, root.seq)
        frame = Frame(
            FrameType.WAKEUP_BROADCAST,
            hop_limit=BROADCAST_HOP_LIMIT,
            source_key=self.key,
            payload=wire.encode_signed_root_payload(payload),
        )
        ports = [only_port] if only_port is not None else _one_link_per_key(tree.peers, tree.up_ports())
        sends = self.outbox.sends
        for port in ports:
            sends.append((port, frame))

    def received(self, frame: Frame, port: int, now: float, tree: Tree) -> str | None:
        """§6.8, receiving side. Returns the reason to drop the peer on ``port``, or None."""
        try:
            p = wire.signed_root(frame.payload, frame.source_key)
        except ProtocolError:
            return "bad_broadcast"
        if p is None:
            return "bad_signature"
        if p.root_key != tree.root.key:
            return None
        if not self.records.admit(frame.source_key, p.seq, now, self.t.broadcast_filter_s):
            return None
        self.outbox.counters[("node_discovered",)] += 1
        if frame.hop_limit <= 1:
            return None
        hl = frame.hop_limit - 1
        out = with_hop_limit(frame, hl)
        peers = tree.peers
        if hl >= 4:
            targets = [q for q in tree.up_ports() if q != port]
        else:
            own = tree.coords
            targets = [
                q
                for q in tree.up_ports()
                if q != port and peers[q].announcement is not None and tree_distance(peers[q].coords, own) == 1
            ]
        sends = self.outbox.sends
        for q in _one_link_per_key(peers, targets):
            sends.append((q, out))
        return None


def _one_link_per_key(peers: dict[int, PeerState], ports: list[int]) -> list[int]:
    chosen: dict[bytes, PeerState] = {}
    for port in ports:
        q = peers[port]
        c = chosen.get(q.key)
        if c is None or (q.link_type, _order(q)) < (c.link_type, _order(c)):
            chosen[q.key] = q
    return sorted(q.port for q in chosen.values())


def _order(q: PeerState) -> float:
    return q.order if q.announcement is not None else float("inf")
