"""What the admin API and the metrics collector may see of a running node: a narrow, read-only view.

:mod:`node.admin` and :mod:`node.metrics` never import the node itself
(:class:`node.runtime.Node`); they are handed an object that satisfies
:class:`NodeView` (metrics) or :class:`AdminView` (admin: the view plus the
four entry points the HTTP API drives). ``Node`` satisfies both structurally.

:class:`ShellCounters` holds the counters the trio shell keeps (the router
keeps its own, read through :meth:`NodeView.router_counters`). Peer disconnects
and dropped frames are counted only under the known reasons below, with the
router's (:mod:`node.core.reasons`): :data:`DISCONNECT_REASONS` and :data:`DROPS`
are every label value the node can give ``snek_peer_disconnects_total`` and
``snek_dropped_frames_total``, which its metrics export at 0 from the start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from contract.frames import FRAME_TYPE_NAMES, frame_type_name
from node.config import LinkSpec
from node.core.recorder import FlightRecorder
from node.core import reasons as router_reasons
from node.core.reasons import ALL_TYPES, DECODE_BODY_REASONS
from node.events import FrameStats
from node.peer import DROP_TYPES as PEER_DROP_TYPES
from node.peer import END_REASONS

__all__ = ["DISCONNECT_REASONS", "DROPS", "NODE_DISCONNECT_REASONS", "NODE_DROP_TYPES", "SHELL_DISCONNECT_REASONS",
           "SHELL_DROPS", "AdminView", "NodeView", "PeerView", "ShellCounters"]

#: Why the node itself ends or refuses a peering (node.runtime: admin_removed, ports_full, internal_error;
#: node.lifecycle: node_stopping).
NODE_DISCONNECT_REASONS: Final[frozenset[str]] = frozenset({"admin_removed", "node_stopping", "ports_full",
                                                            "internal_error"})  # fmt: skip
#: Why the node itself drops frames (node.runtime) -> the frame types it can drop for it.
NODE_DROP_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "peer_gone": FRAME_TYPE_NAMES,  # _send: the router sent it to a peering that has just ended
    "unencodable": FRAME_TYPE_NAMES,  # _send: the router's frame does not encode
    **{r: ALL_TYPES for r in sorted(DECODE_BODY_REASONS)},  # _on_frames: the router could not decode it
}

#: Every reason the shell counts a peer disconnect under (:meth:`ShellCounters.count_disconnect`).
SHELL_DISCONNECT_REASONS: Final[frozenset[str]] = END_REASONS | NODE_DISCONNECT_REASONS
#: Every ``(frame type label, reason)`` the shell counts a dropped frame under (:meth:`ShellCounters.count_drop`).
SHELL_DROPS: Final[frozenset[tuple[str, str]]] = frozenset(
    (t, r) for table in (PEER_DROP_TYPES, NODE_DROP_TYPES) for r, types in table.items() for t in types
)
#: The node's ``snek_peer_disconnects_total`` reasons: the shell's and the router's.
DISCONNECT_REASONS: Final[frozenset[str]] = SHELL_DISCONNECT_REASONS | router_reasons.DISCONNECT_REASONS
#: The node's ``snek_dropped_frames_total`` ``(type, reason)`` pairs: the shell's and the router's.
DROPS: Final[frozenset[tuple[str, str]]] = SHELL_DROPS | router_reasons.DROPS


@dataclass(slots=True, eq=False)
class ShellCounters:
    """Counters kept by the shell, read on every scrape. Keys are bounded slugs."""

    handshake_failures: Counter[str] = field(default_factory=Counter)  # reason
    disconnects: Counter[str] = field(default_factory=Counter)  # reason
    drops: Counter[tuple[str, str]] = field(default_factory=Counter)  # (frame type name, reason)
    events: Counter[str] = field(default_factory=Counter)  # event kinds the router produced
    events_unknown: Counter[str] = field(default_factory=Counter)  # of those, kinds the schema does not know
    pings: Counter[tuple[str, str]] = field(default_factory=Counter)  # (mode, received|lost)
    dial_failures: int = 0
    delivered_frames: int = 0
    internal_errors: int = 0

    def count_disconnect(self, reason: str) -> None:
        """A peering the shell ended (or refused). Raises AssertionError (a bug) for a reason not known."""
        assert reason in SHELL_DISCONNECT_REASONS, f"disconnect reason {reason!r} is not in SHELL_DISCONNECT_REASONS"
        self.disconnects[reason] += 1

    def count_drop(self, ftype: int | None, reason: str, n: int) -> None:
        """``n`` frames of wire type ``ftype`` (None: not known) dropped by the shell. Raises AssertionError (a
        bug) for a pair not in :data:`SHELL_DROPS`."""
        key = (frame_type_name(ftype), reason)
        assert key in SHELL_DROPS, f"frame drop {key} is not in SHELL_DROPS"
        self.drops[key] += n


class PeerView(Protocol):
    """One connected peer, as admin and metrics read it (:class:`node.peer.PeerConn`)."""

    @property
    def port(self) -> int: ...
    @property
    def key(self) -> bytes: ...
    @property
    def remote(self) -> str: ...
    @property
    def link(self) -> LinkSpec: ...
    @property
    def rx_frames(self) -> list[int]: ...
    @property
    def tx_frames(self) -> list[int]: ...
    @property
    def rx_bytes(self) -> list[int]: ...
    @property
    def tx_bytes(self) -> list[int]: ...
    @property
    def protocol(self) -> Sized: ...  # queued protocol frames
    @property
    def traffic(self) -> Sized: ...  # queued traffic frames


class NodeView(Protocol):
    """Read-only: everything the metrics collector (and admin's GET routes) read."""

    @property
    def key(self) -> bytes: ...
    @property
    def name(self) -> str | None: ...
    @property
    def version(self) -> str: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def started_at(self) -> float: ...
    @property
    def peers(self) -> Mapping[int, PeerView]: ...  # connected peers by port
    @property
    def counters(self) -> ShellCounters: ...
    @property
    def frame_stats(self) -> FrameStats: ...  # totals of peers that have closed

    def state(self) -> dict[str, Any]:
        """The ``GET /state`` document."""
        ...

    def routes(self) -> list[dict[str, Any]]:
        """The ``GET /routes`` document: the valid routing-table entries."""
        ...

    def router_counters(self) -> Mapping[tuple[Any, ...], int]:
        """The router's own counters (``("bootstrap_sent",)``, ``("frame_dropped", type, reason)``, ...)."""
        ...

    def lines_suppressed(self) -> Mapping[str, int]:
        """Event lines the event log held back by rate limits, by event kind."""
        ...

    @property
    def recorder(self) -> FlightRecorder | None: ...  # the flight recorder, None when it is off


class AdminView(NodeView, Protocol):
    """The view plus the entry points of the admin API's POST / DELETE routes."""

    async def ping(self, key: bytes, mode: str, count: int, timeout_s: float) -> dict[str, Any]:
        """``POST /ping``: ``{"sent", "received", "rtt_ms", "hops"}``."""
        ...

    async def run_load(self, dest: bytes, payload_bytes: int, count: int, inflight: int, timeout_s: float) -> dict[str, Any]:
        """``POST /traffic``: closed-loop benchmark load. Raises ValueError for a bad size."""
        ...

    async def add_peer(self, uri: str, timeout_s: float) -> dict[str, Any]:
        """``POST /peers``: dial ``uri``. Raises ConfigError for a bad URI."""
        ...

    def drop_peer(self, port: int) -> PeerView | None:
        """``DELETE /peers/{port}``: close that peering and stop redialling it; None if no such peer."""
        ...

    def redial_now(self) -> int:
        """``POST /peers/redial``: dialers waiting out their backoff dial at once; how many."""
        ...

    def set_adversary(self, rates: Mapping[str, float], peer: bytes | None) -> dict[str, Any]:
        """``POST /adversary``: drop received frames by kind. Raises ValueError."""
        ...

    def set_attack(self, strategy: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /adversary`` with a strategy (node.core.attacks; ``none``: honest again): its description, the
        replaced one's under ``replaced``. Raises ValueError."""
        ...

    def set_link_shape(self, peer: bytes | None, link_class: str | None, shaping: Mapping[str, float | None], *,
                       port: int | None = None) -> dict[int, dict[str, Any]]:
        """``POST /peers/shape``: reshape the peerings with ``peer``, or the one on ``port`` (a None clears a
        field); each port's new shape. Raises ValueError."""
        ...
