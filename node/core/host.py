"""The router as a SNEK variant sees it: the one implementation of :class:`~node.core.snek_api.SnekHost`.

:class:`RouterHost` is built by :class:`node.core.router.Router` from its configuration and its parts, and
handed to the variant's factory (``factory(host, now)``). It gives the variant exactly what the seam
declares: the router's settings and peer table, the tree's parent, root, coordinates and tree routing
(read from :class:`~node.core.tree.Tree` when asked), and the router's outbox. It holds no state of its own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .crypto import Identity
from .state import Outbox, PeerState, Send, Timers, wall_ms
from .tree import Tree
from .types import Root

__all__ = ["RouterHost"]


class RouterHost:
    """:class:`~node.core.snek_api.SnekHost` over the router's tree and outbox."""

    def __init__(
        self,
        identity: Identity,
        timers: Timers,
        peers: dict[int, PeerState],
        tree: Tree,
        outbox: Outbox,
        *,
        wall_offset_ms: int,
        detail_events: bool,
        max_routes: int,
        knobs: dict[str, Any],
    ) -> None:
        self.key = identity.public_key
        self.identity = identity
        self.t = timers
        self.peers = peers
        self.counters: Counter[tuple] = outbox.counters
        self.detail_events = detail_events
        self.max_routes = max_routes
        self.knobs = knobs
        self._tree = tree
        self._outbox = outbox
        self._wall_offset_ms = wall_offset_ms

    @property
    def parent(self) -> int | None:
        return self._tree.parent

    @property
    def outbox(self) -> list[Send]:
        return self._outbox.sends

    @property
    def root(self) -> Root:
        return self._tree.root

    @property
    def coords(self) -> tuple[int, ...]:
        return self._tree.coords

    def tree_next_hop(self, dest: tuple[int, ...], from_port: int) -> int | None:
        return self._tree.next_hop(dest, from_port)

    def wall_ms(self, now: float) -> int:
        return wall_ms(self._wall_offset_ms, now)

    def emit(self, kind: str, **fields: Any) -> None:
        self._outbox.events.append((kind, fields))
