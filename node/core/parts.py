"""The router's shared state, as its parts see it: the base class of :class:`node.core.router.Router`.

:class:`node.core.router.Router` is made of parts, one module each: the spanning tree
(:class:`~node.core.tree.TreeMixin`), broadcasts (:class:`~node.core.broadcast.BroadcastMixin`) and
forwarding (:class:`~node.core.forward.ForwardMixin`). Each part works on state the router holds and calls
methods that a later part (or the router) defines. :class:`RouterParts` declares exactly that: the shared
attributes with their types, and those methods as stubs that the part owning them overrides.

The parts form one chain of single inheritance, ``RouterParts <- TreeMixin <- BroadcastMixin <-
ForwardMixin <- Router``, because that is what mypyc compiles to plain C structs and vtables (it allows
multiple inheritance only through traits, whose attributes cost a lookup on every access). No method is
defined by two parts, so the order of the chain changes nothing but where a stub is declared.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .adversary import Adversary
from .crypto import Identity
from .ping import PingService
from .snek_api import SnekStrategy
from .state import PeerState, Send, Timers
from .types import Frame

__all__ = ["RouterParts"]


class RouterParts:
    """What the router's parts share. Attributes are set by :class:`~node.core.router.Router`."""

    # ---------------------------------------------------------------- configuration (Router.__init__)
    identity: Identity
    key: bytes
    t: Timers
    hop_limiting: bool
    detail_events: bool
    broadcasts_enabled: bool
    max_routes: int
    max_cached: int
    knobs: dict[str, Any]
    # ---------------------------------------------------------------- state
    peers: dict[int, PeerState]
    parent: int | None
    own_seq: int
    _up: list[int]  # up ports, ascending
    _touched: bool  # tree state may have moved since the last _after()
    snek: SnekStrategy
    ping: PingService
    adversary: Adversary | None
    coords_cache: dict[bytes, tuple[tuple[int, ...], float]]  # §6.6 (forward; the tree clears it)
    next_maintain: float
    next_coords_sweep: float
    next_tree_maintenance: float
    next_broadcast: float
    # ---------------------------------------------------------------- outputs (Router.drain)
    outbox: list[Send]
    disconnects: list[tuple[int, str]]
    delivered: list[Frame]
    events: list[tuple[str, dict[str, Any]]]
    counters: Counter[tuple[Any, ...]]

    # ---------------------------------------------------------------- broadcasts' (node.core.broadcast)
    def _send_own_broadcast(self, only_port: int | None, now: float) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------- the router's (node.core.router)
    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        raise NotImplementedError

    def _disconnect(self, port: int, reason: str, now: float) -> None:
        raise NotImplementedError

    def _recompute_deadline(self) -> None:
        raise NotImplementedError

    def _after(self, now: float) -> None:
        raise NotImplementedError

    def wall_ms(self, now: float) -> int:
        raise NotImplementedError
