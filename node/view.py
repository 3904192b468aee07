"""What the admin API and the metrics collector may see of a running node: a narrow, read-only view.

:mod:`node.admin` and :mod:`node.metrics` never import the node itself
(:class:`node.runtime.Node`); they are handed an object that satisfies
:class:`NodeView` (metrics) or :class:`AdminView` (admin: the view plus the
four entry points the HTTP API drives). ``Node`` satisfies both structurally.

:class:`ShellCounters` holds the counters the trio shell keeps (the router
keeps its own, read through :meth:`NodeView.router_counters`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from node.config import LinkSpec
from node.events import FrameStats

__all__ = ["AdminView", "NodeView", "PeerView", "ShellCounters"]


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

    def set_link_shape(self, peer: bytes, link_class: str | None, shaping: Mapping[str, float]) -> list[int]:
        """``POST /peers/shape``: reshape the peerings with ``peer``. Raises ValueError."""
        ...
