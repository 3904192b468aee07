"""The flight recorder: the last seconds of what one node did with frames, in a bounded ring (sans-IO).

Every snekbed node keeps one (``snekbed node --recorder-s``, docs/node.md "Flight recorder"), and so does every
in-process node a chaos run builds. The shell feeds it what the router was given and what the router decided,
each with the ``now`` of that moment; nothing here reads a clock:

* :meth:`FlightRecorder.received`: frames as a peer's reader split them (``(type byte, whole frame)``);
* :meth:`FlightRecorder.sent`: what the router sent, as :meth:`Router.drain <node.core.router.Router.drain>`
  hands it out (``Output.sends``), in one call; :meth:`FlightRecorder.wrote`: one frame the router sent, once
  the shell has encoded it;
* :meth:`FlightRecorder.frame`: a decoded :class:`~node.core.types.Frame` that arrived (the in-process network
  moves frames, not bytes);
* :meth:`FlightRecorder.dropped`: a frame dropped, with why (the router's own drops come out of
  :meth:`Router.drain <node.core.router.Router.drain>` as ``Output.dropped``);
* :meth:`FlightRecorder.event`: a router event (parent, root, coordinates, snake changes: what
  :mod:`node.events` logs).

**Headers, not payloads.** What is read out (:meth:`FlightRecorder.entries`, then :mod:`node.flight`: the
run-dataset's JSON lines and pcapng) is, of a Traffic frame, its header and the first :data:`PEEK` payload
bytes (where a ping says it is one: preamble, kind, hop count), with its length; every other type whole up to
:data:`CONTROL_KEEP` bytes (a tree announcement's or a bootstrap's payload is the routing protocol's own header:
root, sequence, signatures), beyond that its 12-byte header (:func:`head_of`). In memory, a frame of at most
:data:`SMALL_KEEP` bytes is held as the object the node already has (no copy: the cost of recording a small
frame is a few list stores); a longer one is cut when it is recorded (a Traffic Frame object as a copy with its
payload cut, its payload's length noted; the protocol frames the router makes are short, and held as they are).

**Bounds.** An entry lives ``window_s`` seconds, and the ring holds at most ``max_entries`` (the oldest go first),
so a frame storm costs at most ``max_entries`` entries of at most :data:`CONTROL_KEEP` bytes each. The ring is
parallel lists of slots, grown up to ``max_entries`` and then reused: no object is made per entry but what is
kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, cast

from . import wire
from .state import Encoded, Output
from .types import Frame, FrameType

__all__ = [
    "CONTROL_KEEP", "DEFAULT_MAX_ENTRIES", "DEFAULT_WINDOW_S", "DROPPED", "EVENT", "Entry", "FlightRecorder", "PEEK",
    "RECEIVED", "SENT", "SMALL_KEEP", "head_of",
]  # fmt: skip

#: what an entry records (its second field)
RECEIVED: Final = 0
SENT: Final = 1  # sent or forwarded: node.flight tells them apart by the frame's origin
DROPPED: Final = 2
EVENT: Final = 3

DEFAULT_WINDOW_S: Final = 30.0
DEFAULT_MAX_ENTRIES: Final = 20_000
#: Traffic payload bytes read out: a ping's preamble (8), kind (1) and hop count (2)
PEEK: Final = 11
#: a frame of another type than Traffic is read out whole up to this many bytes
CONTROL_KEEP: Final = 2048
#: a frame this long or shorter is held as it is until it is read out (no copy)
SMALL_KEEP: Final = 256
_TRAFFIC: Final = int(FrameType.TRAFFIC)
_SHORT: Final = 12  # the header and the payload length every known body starts with

#: ``(now, kind, port, item, note)``: ``item`` the frame's bytes (its own length field says how long it was), a
#: Frame, a dropped frame's type number or None (nothing more known), or an event's kind; ``note`` a drop's reason,
#: an event's fields, the payload length of a Frame whose payload was cut, else None
Entry = tuple[float, int, int, Any, Any]


def head_of(raw: bytes) -> bytes:
    """What is read out of the frame ``raw``: a Traffic frame's header and :data:`PEEK` payload bytes, any other
    frame whole up to :data:`CONTROL_KEEP` bytes, else its first 12."""
    n = len(raw)
    if n > _SHORT and raw[5] == _TRAFFIC:
        keep = n - ((raw[10] << 8) | raw[11]) + PEEK  # the payload is the frame's tail
        return raw[: keep if keep > _SHORT else _SHORT] if keep < n else raw
    return raw if n <= CONTROL_KEEP else raw[:_SHORT]


def _kept(raw: bytes) -> bytes:
    return raw if len(raw) <= SMALL_KEEP else head_of(raw)


class FlightRecorder:
    """The ring: at most ``max_entries`` entries, none older than ``window_s`` seconds. Raises ValueError for a
    window or a size that is not positive."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, not {window_s!r}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, not {max_entries!r}")
        self.window_s = window_s
        self.max_entries = max_entries
        # slot i holds one entry; the live ones are the ``size`` slots before ``next`` (wrapping round once the
        # lists have grown to max_entries slots: a quiet node's ring stays small)
        self._t: list[object] = []  # each batch's time, boxed once
        self._kind: list[int] = []
        self._port: list[int] = []
        self._item: list[object] = []
        self._note: list[object] = []
        self._next = 0
        self.size = 0
        #: entries recorded since the start (those no longer in the ring were pushed out or expired)
        self.recorded = 0

    def _put(self, t: object, kind: int, port: int, item: object, note: object) -> None:
        i = self._next
        if i == len(self._t):  # still growing
            self._t.append(t)
            self._kind.append(kind)
            self._port.append(port)
            self._item.append(item)
            self._note.append(note)
        else:
            self._t[i] = t
            self._kind[i] = kind
            self._port[i] = port
            self._item[i] = item
            self._note[i] = note
        i += 1
        self._next = i if i < self.max_entries else 0
        if self.size < self.max_entries:
            self.size += 1
        self.recorded += 1

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        n = self.max_entries
        while self.size:
            i = self._next - self.size
            if i < 0:
                i += n
            if cast(float, self._t[i]) >= horizon:
                return
            self._item[i] = None
            self._note[i] = None
            self.size -= 1

    def received(self, port: int, frames: list[tuple[int, bytes]], now: float) -> None:
        """Frames that arrived on ``port``, ``(type byte, whole frame bytes)``, in order."""
        self._expire(now)
        t: object = now  # boxed once, not once an entry
        for _, raw in frames:
            self._put(t, RECEIVED, port, _kept(raw), None)

    def outputs(self, out: Output, now: float, gone: Callable[[int], bool]) -> None:
        """One router drain as a simulator records it: the drops, the events and the sends; a send on a port that
        ``gone(port)`` says has no open link is then recorded dropped (``peer_gone``), as a TCP node's to a peer
        that has just left."""
        for port, frame, reason in out.dropped:
            self.dropped(port, frame, reason, now)
        for kind, fields in out.events:
            self.event(kind, fields, now)
        self.sent(out.sends, now)
        for port, item in out.sends:
            if gone(port):
                self.dropped(port, item.data if isinstance(item, Encoded) else item, "peer_gone", now)

    def sent(self, sends: Sequence[tuple[int, Frame | Encoded]], now: float, objects: bool = True) -> None:
        """What the router sent (``Output.sends``: ``(port, Frame | Encoded)``), in order. ``objects`` False: the
        Frame objects among them are left to the caller, which records their bytes once it has encoded them
        (:meth:`wrote`; a TCP node does, so that no frame object outlives its send)."""
        self._expire(now)
        t: object = now
        for port, item in sends:
            if type(item) is Encoded:
                self._put(t, SENT, port, _kept(item.data), None)
                continue
            if not objects:
                continue
            f = cast(Frame, item)
            n = len(f.payload)
            if n > SMALL_KEEP and f.type == _TRAFFIC:  # a copy with the payload cut, its length noted
                cut = Frame(f.type, f.hop_limit, f.destination_key, f.source_key, f.destination_coords,
                            f.source_coords, f.watermark, f.payload[:PEEK])  # fmt: skip
                self._put(t, SENT, port, cut, n)
            else:  # our own protocol frames (announcements, bootstraps, wakeups) are short
                self._put(t, SENT, port, f, None)

    def wrote(self, port: int, data: bytes, now: float) -> None:
        """One frame the router sent to ``port``, as the bytes it was encoded to."""
        self._expire(now)
        self._put(now, SENT, port, _kept(data), None)

    def frame(self, kind: int, port: int, frame: Frame, now: float) -> None:
        """A decoded frame ``kind`` (RECEIVED on ``port``), held as the object itself (the in-process network's
        frames are small)."""
        self._expire(now)
        self._put(now, kind, port, frame, None)

    def dropped(self, port: int, item: Frame | bytes | None, reason: str, now: float) -> None:
        """A frame dropped for ``reason``, that arrived on ``port`` (or was bound for it): its bytes or the frame
        (encoded here: drops are rare, and a dropped frame's payload is not read out either), None when nothing
        of it is known (a frame that did not decode). A frame that cannot be encoded is kept as its type number."""
        self._expire(now)
        kept: Any = item
        if isinstance(item, Frame):
            try:
                kept = wire.encode_frame(item)
            except ValueError:
                kept = int(item.type)
        self._put(now, DROPPED, port, head_of(kept) if type(kept) is bytes else kept, reason)

    def event(self, kind: str, fields: dict[str, Any], now: float) -> None:
        """A router event (``kind`` and its fields as :mod:`node.events` logs them)."""
        self._expire(now)
        self._put(now, EVENT, -1, kind, fields)

    def entries(self, now: float) -> list[Entry]:
        """Every entry of the last ``window_s`` seconds before ``now``, oldest first."""
        self._expire(now)
        n = self.max_entries
        out: list[Entry] = []
        for k in range(self.size):
            i = self._next - self.size + k
            if i < 0:
                i += n
            out.append((cast(float, self._t[i]), self._kind[i], self._port[i], self._item[i], self._note[i]))
        return out
