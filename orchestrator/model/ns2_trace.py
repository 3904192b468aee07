"""ns-2 mobility traces, as ns-2's ``setdest`` and BonnMotion's ``NSFile`` export write them (docs/mobility.md).

Pure computation: :func:`parse_ns2_trace` takes the file's text (the caller reads it). The lines it knows::

    $node_(3) set X_ 12.5          # node 3's initial position (Z_ is read and ignored)
    $node_(3) set Y_ 40.0
    $ns_ at 2.5 "$node_(3) setdest 80.0 41.0 1.3"   # at 2.5 s node 3 heads for (80, 41) at 1.3 m/s

Blank lines and ``#`` comments are skipped, and so are the lines about ns-2's omniscient observer ``$god_``
(``$god_ set-dist 0 1 2``, ``$ns_ at 1.0 "$god_ set-dist ..."``), which setdest writes beside the moves.
Anything else is an error. Every error is a :class:`TraceError` naming the file, the 1-based line and the
field: an unknown node, a negative time or speed, a number that is not one (or not finite), a malformed line,
a node with no initial position.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["TraceError", "TraceTrack", "parse_ns2_trace"]


class TraceError(ValueError):
    """An ns-2 trace is malformed: ``file``, ``line`` (1-based) and ``field`` say where, ``message`` what."""

    def __init__(self, message: str, *, file: str | None, line: int | None, field: str | None) -> None:
        self.message, self.file, self.line, self.field = message, file, line, field
        where = (file or "<trace>") + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


@dataclass(slots=True)
class TraceTrack:
    """One node of a trace: its initial position and its ``(t, x, y, speed)`` moves in file order."""

    start: tuple[float | None, float | None] = (None, None)
    moves: list[tuple[float, float, float, float]] = field(default_factory=list)
    first_line: int = 0  # where the trace first names the node


_NUM = r"(\S+)"
_SET = re.compile(r"^\$node_\((\S*?)\)\s+set\s+([XYZ])_\s+" + _NUM + r"\s*;?$")
_AT = re.compile(r'^\$ns_\s+at\s+' + _NUM + r'\s+"\s*(.*?)\s*"\s*;?$')
_SETDEST = re.compile(r"^\$node_\((\S*?)\)\s+setdest\s+" + _NUM + r"\s+" + _NUM + r"\s+" + _NUM + r"$")
_GOD = re.compile(r"^\$god_\s")


def _number(text: str, what: str, where: tuple[str | None, int]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(f"{text!r} is not a finite number", file=where[0], line=where[1], field=what)
    return value


def _node(text: str, nodes: Mapping[int, str] | None, where: tuple[str | None, int]) -> int:
    if not text.isdigit():
        raise TraceError(f"node id {text!r} is not a non-negative integer", file=where[0], line=where[1],
                         field="node")
    ident = int(text)
    if nodes is not None and ident not in nodes:
        known = ", ".join(f"{i} ({name})" for i, name in sorted(nodes.items())[:12])
        raise TraceError(f"unknown node {ident}: the topology maps no node to it (known: {known or 'none'})",
                         file=where[0], line=where[1], field="node")
    return ident


def _setdest(body: str, t: float, tracks: dict[int, TraceTrack], nodes: Mapping[int, str] | None,
             where: tuple[str | None, int]) -> None:
    if _GOD.match(body):
        return
    m = _SETDEST.match(body)
    if m is None:
        raise TraceError(f'malformed command {body!r}: expected "$node_(i) setdest X Y SPEED"', file=where[0],
                         line=where[1], field="command")
    ident = _node(m.group(1), nodes, where)
    x, y = _number(m.group(2), "setdest.x", where), _number(m.group(3), "setdest.y", where)
    speed = _number(m.group(4), "setdest.speed", where)
    if speed < 0:
        raise TraceError(f"negative speed {speed:g} m/s", file=where[0], line=where[1], field="setdest.speed")
    track = tracks.setdefault(ident, TraceTrack(first_line=where[1]))
    track.moves.append((t, x, y, speed))


def _line(text: str, tracks: dict[int, TraceTrack], nodes: Mapping[int, str] | None,
          where: tuple[str | None, int]) -> None:
    if (m := _SET.match(text)) is not None:
        ident = _node(m.group(1), nodes, where)
        value = _number(m.group(3), f"{m.group(2)}_", where)
        track = tracks.setdefault(ident, TraceTrack(first_line=where[1]))
        if m.group(2) == "X":
            track.start = (value, track.start[1])
        elif m.group(2) == "Y":
            track.start = (track.start[0], value)
        return
    if (m := _AT.match(text)) is not None:
        t = _number(m.group(1), "time", where)
        if t < 0:
            raise TraceError(f"negative time {t:g} s", file=where[0], line=where[1], field="time")
        _setdest(m.group(2), t, tracks, nodes, where)
        return
    if _GOD.match(text):
        return
    raise TraceError(f"malformed line {text[:60]!r}: expected '$node_(i) set X_|Y_|Z_ V' or "
                     "'$ns_ at T \"$node_(i) setdest X Y SPEED\"'", file=where[0], line=where[1], field=None)


def parse_ns2_trace(text: str, *, file: str | None = None,
                    nodes: Mapping[int, str] | None = None) -> dict[int, TraceTrack]:
    """The tracks of ``text`` by ns-2 node id. ``nodes`` (id -> topology node name) is what the topology maps
    to this trace: a line naming any other id is an error (None: every id is accepted). Raises TraceError."""
    tracks: dict[int, TraceTrack] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            _line(stripped, tracks, nodes, (file, lineno))
    for ident, track in sorted(tracks.items()):
        for axis, value in zip(("X_", "Y_"), track.start):
            if value is None:
                raise TraceError(f"node {ident} has no initial position: no '$node_({ident}) set {axis} ...' line",
                                 file=file, line=track.first_line, field=axis)
    return tracks
