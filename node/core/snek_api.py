"""The seam between the router and a SNEK variant (PROTOCOL.md §6, §7).

The router picks one :class:`SnekStrategy` at construction (``Router(..., snek="snek")``, see
:data:`node.core.variants.VARIANTS`) and never asks which one it got. A variant owns its routing
state and the frame types of its own messages (the reference: Bootstrap, type 2; the older variant of
§7: types 0xE0-0xE3, and it drops type 2); the tree (§5), Traffic forwarding (§6.5) and broadcasts (§6.8)
stay in the router and ask the variant only for :meth:`SnekStrategy.next_hop`.

A variant is built as ``factory(host, now)`` where ``host`` is the router seen through
:class:`SnekHost`: the state a variant may read and the outputs it may write (the router builds it from
its parts: :class:`node.core.host.RouterHost`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sized
from typing import Any, Protocol

from .crypto import Identity
from .snek import NextHop
from .state import PeerState, Send, Timers
from .types import Frame, Root, Watermark

__all__ = ["RouteEntry", "SnekFactory", "SnekHost", "SnekStrategy", "descending_moved"]


class SnekHost(Protocol):
    """The router, as a SNEK variant sees it."""

    key: bytes
    identity: Identity
    t: Timers
    peers: dict[int, PeerState]
    counters: Counter[tuple]
    detail_events: bool
    max_routes: int
    #: every knob of node.core.variants.KNOBS by name (defaults filled in); a variant reads those it honours
    knobs: dict[str, Any]

    @property
    def parent(self) -> int | None:
        """Our parent's port (§5.5), None for a root."""

    @property
    def outbox(self) -> list[Send]:
        """Where a variant appends the ``(port, frame)`` pairs it sends (read it each time: a drain replaces it)."""

    @property
    def root(self) -> Root:
        """Our current root (§5.1): the parent's stored announcement's root, else ``(own key, own_seq)``."""

    @property
    def coords(self) -> tuple[int, ...]:
        """Our own coordinates (§5.7): the ports of the parent's stored announcement, ``()`` for a root.

        The older variant (§7) puts them in its Bootstrap and Bootstrap ACK.
        """

    def tree_next_hop(self, dest: tuple[int, ...], from_port: int) -> int | None:
        """§5.8 tree routing for a frame that arrived on ``from_port`` (LOCAL_PORT if we originate it): a
        remote port strictly closer to ``dest``, LOCAL_PORT when ``dest`` is our own coordinates, or None.

        The older variant (§7) tree-routes its Bootstrap ACKs and Path setups with it.
        """

    def wall_ms(self, now: float) -> int: ...

    def emit(self, kind: str, **fields: Any) -> None: ...


class RouteEntry(Protocol):
    """What the router reads of a routing-table entry (the descending entry, the state document)."""

    @property
    def key(self) -> bytes: ...

    @property
    def source(self) -> int:
        """The port the route's frames came in on (towards ``key``)."""

    @property
    def destination(self) -> int:
        """The port they went on to (NONE_PORT / LOCAL_PORT at an end)."""

    @property
    def last_seen(self) -> float: ...

    def valid(self, now: float) -> bool:
        """Not yet expired at ``now`` (a route the next hop may use)."""

    @property
    def expires_at(self) -> float:
        """When it expires without a refresh."""


class SnekTable(Sized, Iterable[Any], Protocol):
    """A variant's routing table: the router only counts it."""


class SnekStrategy(Protocol):
    """One SNEK variant: its routing state, its messages, its next-hop rule."""

    @property
    def frame_types(self) -> frozenset[int]:
        """Frame types this variant handles in :meth:`frame_received` (any other non-Traffic type is the router's)."""

    @property
    def table(self) -> SnekTable:
        """The variant's routing table (the router only counts it and lists it)."""

    @property
    def descending(self) -> RouteEntry | None:
        """The descending entry (§6.1), if any."""

    def reset(self, now: float) -> None:
        """Start-up state, and the full reset of §3.7 step 2 (the last peer went)."""

    def next_hop(self, dest: bytes, bootstrap: bool, wm: Watermark, now: float) -> NextHop:
        """§6.3 (or the variant's rule): where a frame for ``dest`` goes, and its new watermark."""

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        """A frame of one of :attr:`frame_types` arrived on ``port`` (an up peer)."""

    def maintain(self, now: float) -> None:
        """The maintenance tick (every ``maintain_interval_s``, first at start-up)."""

    def bootstrap_soon(self, now: float) -> None:
        """The tree says to bootstrap at the next maintenance tick (a parent change, §6.2)."""

    def peers_changed(self) -> None:
        """A peer came, went, changed its announcement, or the parent changed: drop derived indexes."""

    def peer_removed(self, port: int, now: float) -> None:
        """``port`` went down (the router has not reset): forget the routes that use it (§3.7)."""

    def routes_valid_until(self) -> float:
        """The earliest time a route :meth:`next_hop` may use can expire without any input (inf if none)."""

    def next_deadline(self) -> float:
        """A timer of the variant's own, besides the maintenance tick (inf if none)."""


SnekFactory = Callable[[SnekHost, float], SnekStrategy]


def descending_moved(host: SnekHost, prev: RouteEntry | None, entry: RouteEntry | None) -> bool:
    """Log ``descending_changed`` when the descending key was set, cleared or changed (the observers rebuild
    the snake from these events); True when it did. Every variant reports its descending entry this way."""
    if entry is None or prev is None or prev.key != entry.key:
        host.emit("descending_changed", descending=entry.key.hex() if entry else None,
                  prev=prev.key.hex() if prev else None)  # fmt: skip
        return True
    return False
