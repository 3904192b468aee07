"""Wakeup broadcasts (PROTOCOL.md §6.8): sending our own, and receiving, recording and flooding others'.

:class:`BroadcastMixin` is one of the parts :class:`node.core.router.Router` is made of. It owns
``broadcast_seen`` (bounded by ``max_cached``) and ``next_broadcast``; it reads the tree (root,
coordinates, peers) and writes to the router's outbox.
"""

from __future__ import annotations

from dataclasses import replace

from . import wire
from .errors import ProtocolError
from .state import PeerState, tree_distance
from .tree import TreeMixin
from .types import BROADCAST_HOP_LIMIT, Frame, FrameType

__all__ = ["BroadcastMixin"]


class BroadcastMixin(TreeMixin):
    """§6.8 on the router's state."""

    broadcast_seen: dict[bytes, tuple[int, float]]  # source key -> (sequence, when)

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

    def _broadcast_tick(self, now: float) -> None:
        """The 60 s timer: forget records older than 3 min, then send our own broadcast to every peer key."""
        self.next_broadcast = now + self.t.broadcast_interval_s
        exp = self.t.broadcast_expiry_s
        self.broadcast_seen = {k: v for k, v in self.broadcast_seen.items() if now - v[1] < exp}
        self._send_own_broadcast(None, now)

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
            p = wire.signed_root(frame.payload, frame.source_key)
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


def _order(q: PeerState) -> float:
    return q.order if q.announcement is not None else float("inf")
