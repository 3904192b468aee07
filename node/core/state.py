"""What the router's modules share: its constants, what it knows about each port, and its outputs.

* :class:`Timers` and :data:`MAX_PORTS`: the protocol constants (§3.3, §9);
* :class:`PeerState` and :func:`tree_distance`: one port's stored announcement and the §5.8 metric;
* :class:`Outbox`: where the router's parts put what they want done (frames to send, delivered traffic,
  events, counters), until :meth:`node.core.router.Router.drain` takes it;
* :class:`Output`: what :meth:`node.core.router.Router.drain` hands the shell in one call; each send
  carries a :class:`~node.core.types.Frame` or, on the transit fast path, an :class:`Encoded` frame
  (:func:`frame_bytes` gives the bytes of either).

This module imports nothing of the router's own modules, so all of them can import it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from . import wire
from .announce import ParsedAnnouncement
from .ping import PingResult
from .types import Announcement, Frame, Root

__all__ = [
    "MAX_PORTS", "Encoded", "Outbox", "Output", "PeerState", "Send", "Timers", "frame_bytes", "tree_distance", "wall_ms",
]  # fmt: skip

MAX_PORTS: Final = 253  # remote ports 1..253 (§3.3)


@dataclass(frozen=True, slots=True)
class Timers:
    """Protocol constants (§9), overridable for experiments."""

    announcement_interval_s: float = 30 * 60
    announcement_timeout_s: float = 45 * 60
    reparent_hold_s: float = 1.0
    maintain_interval_s: float = 1.0
    bootstrap_interval_s: float = 5.0
    coords_cache_lifetime_s: float = 60.0
    coords_cache_sweep_s: float = 60.0
    broadcast_interval_s: float = 60.0
    broadcast_expiry_s: float = 180.0
    broadcast_filter_s: float = 30.0


@dataclass(slots=True)
class PeerState:
    """What the router knows about one port."""

    port: int
    key: bytes
    link_type: int
    up: bool = True
    announcement: Announcement | None = None
    received_at: float = 0.0
    order: int = 0
    # derived from the announcement, cached because every decision reads them
    hop_keys: tuple[bytes, ...] = ()
    coords: tuple[int, ...] = ()  # the peer's own coordinates (announcement ports minus the last)
    ports: tuple[int, ...] = ()  # all announcement ports: our coordinates if this peer is our parent
    root: Root | None = None
    raw: bytes = b""  # the announcement's bytes as received: what we sign and repeat if this is our parent
    keyset: frozenset[bytes] = frozenset()

    def store(self, parsed: ParsedAnnouncement, now: float, order: int) -> None:
        self.announcement = parsed.ann
        self.raw = parsed.raw
        self.keyset = parsed.keyset
        self.received_at = now
        self.order = order
        self.hop_keys = parsed.hop_keys
        self.ports = parsed.ports
        self.coords = parsed.ports[:-1]
        self.root = parsed.root

    def forget(self) -> None:
        self.announcement = None
        self.hop_keys = ()
        self.raw = b""
        self.keyset = frozenset()
        self.ports = ()
        self.coords = ()
        self.root = None


def tree_distance(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """§5.8: len(a) + len(b) - 2 * common prefix length."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return len(a) + len(b) - 2 * i


class Encoded(NamedTuple):
    """A Traffic frame already in wire form (the transit fast path), with what the fair queue needs."""

    type: int
    source_key: bytes
    destination_key: bytes
    data: bytes


Send = tuple[int, "Frame | Encoded"]  # (port, frame): Traffic goes on the traffic queue, the rest on the protocol queue


class Outbox:
    """What the router's parts want done, kept until the next :meth:`~node.core.router.Router.drain`.

    Every part is given the router's one outbox when it is built and only ever adds to it: ``sends``
    (``(port, frame)`` in order), ``delivered`` (Traffic for the local application), ``events``
    (:meth:`emit`), ``dropped`` (``(port, frame, reason)``: a frame a part dropped, also counted, as
    ``frame_dropped`` or as a misdelivered ping; for the flight recorder) and ``counters``. ``disconnects``
    are the router's own (the peers it dropped). ``drain`` replaces the lists (never ``counters``), so a part
    reads ``outbox.sends`` each time it appends.
    """

    __slots__ = ("counters", "delivered", "disconnects", "dropped", "events", "sends")

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.disconnects: list[tuple[int, str]] = []
        self.delivered: list[Frame] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.dropped: list[tuple[int, Frame, str]] = []
        self.counters: Counter[tuple[Any, ...]] = Counter()

    def emit(self, kind: str, **fields: Any) -> None:
        """Log an observation event ``(kind, fields)``."""
        self.events.append((kind, fields))


def wall_ms(offset_ms: int, now: float) -> int:
    """Protocol time ``now`` (seconds) as wall-clock milliseconds, the router's clock starting at ``offset_ms``."""
    return offset_ms + int(now * 1000)


def frame_bytes(item: Frame | Encoded) -> bytes:
    """The wire bytes of a send. Raises ValueError for a Frame that cannot be encoded."""
    if type(item) is Encoded:
        return item.data
    return wire.encode_frame(item)  # type: ignore[arg-type]


@dataclass(slots=True)
class Output:
    """Everything the router wants done, taken in one :meth:`~node.core.router.Router.drain` call.

    * ``sends``: ``(port, Frame | Encoded)`` in order;
    * ``disconnects``: ``(port, reason)`` for peers that broke the protocol (the router already forgot them);
    * ``delivered``: Traffic frames for the local application;
    * ``events``: ``(kind, fields)`` for the structured event log;
    * ``ping_results``: finished pings (§8);
    * ``next_deadline``: when :meth:`~node.core.router.Router.handle_timer` must next run;
    * ``dropped``: ``(port, frame, reason)`` for each frame the router dropped (it arrived on ``port``, or was
      originated there: port 0), in order, for the flight recorder (:mod:`node.core.recorder`).
    """

    sends: Sequence[Send]
    disconnects: Sequence[tuple[int, str]]
    delivered: Sequence[Frame]
    events: Sequence[tuple[str, dict[str, Any]]]
    ping_results: Sequence[PingResult]
    next_deadline: float
    dropped: Sequence[tuple[int, Frame, str]] = ()

    def __init__(
        self,
        sends: Sequence[Send],
        disconnects: Sequence[tuple[int, str]],
        delivered: Sequence[Frame],
        events: Sequence[tuple[str, dict[str, Any]]],
        ping_results: Sequence[PingResult],
        next_deadline: float,
        dropped: Sequence[tuple[int, Frame, str]] = (),
    ) -> None:
        # The dataclass __init__ written out (one per drain): mypyc compiles it, not the generated one.
        self.sends = sends
        self.disconnects = disconnects
        self.delivered = delivered
        self.events = events
        self.ping_results = ping_results
        self.next_deadline = next_deadline
        self.dropped = dropped
