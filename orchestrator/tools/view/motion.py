"""Nodes that move: where each node of a mobile run is at any instant, and which radio links join them.

A run of a topology with radios (docs/mobility.md) records ``mobility.jsonl`` (docs/run-dataset.md,
"mobility.jsonl"): every placed node's position at the first tick and then at each tick where it moved, and every
radio link up and down. :class:`Motion` holds that, fed one record at a time (replay: the whole file at load;
live: the lines a Docker run appends), and answers:

* :meth:`Motion.position`: a node's position at ``t``, interpolated linearly between its samples. A node records no
  line for a tick where it stood still, so a gap longer than one tick means it stood at the earlier sample until
  one tick before the later one (it moved only during that last tick). Before its first sample a node is at it,
  after its last one it stays there.
* :meth:`Motion.links_at`: the radio links up at ``t`` (a link is up from its ``link_up`` instant on, down from its
  ``link_down`` instant on), each ``[a, b, radio, made]``.
* :meth:`Motion.graph_doc`: the static part: the area's bounds (fixed for the whole run, so motion shows), the
  radios (range, link class, carriers) and the tick.

The graph document gets it as ``mobility``; each frame as ``motion`` (:meth:`Motion.frame`). Live, a Docker run's
``mobility.jsonl`` is tailed (orchestrator.tools.view.live); an in-process run can feed :class:`MotionTee`. A run
without ``mobility.jsonl`` has neither key, and its page is drawn as before.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from contract.dataset import validate_record
from contract.mobility import MOBILITY_FIELDS, MOBILITY_FILE

__all__ = ["Motion", "MotionTee", "read_motion", "MOBILITY_FILE"]

Skip = Callable[[Path, int, str], None]


def _placed(node: Mapping[str, Any]) -> bool:
    return node.get("position") is not None or node.get("mobility") is not None


class Motion:
    """Positions and radio links over a run's time (``mono_s``)."""

    def __init__(self, topology: Mapping[str, Any], meta_mobility: Mapping[str, Any] | None = None) -> None:
        meta_mobility = meta_mobility or {}
        nodes = [n for n in topology.get("nodes") or [] if isinstance(n, Mapping) and "name" in n]
        placed = [str(n["name"]) for n in nodes if _placed(n)]
        declared = topology.get("radios") or {}
        resolved = meta_mobility.get("radios") or {}
        self.radios: list[dict[str, Any]] = []
        for name in sorted(set(declared) | set(resolved)):
            spec = {**(declared.get(name) or {}), **(resolved.get(name) or {})}
            carriers = [str(c) for c in spec.get("nodes") or placed]
            self.radios.append({"name": name, "range_m": float(spec.get("range_m") or 0.0),
                                "class": str(spec.get("class") or name), "carriers": carriers})
        self.tick_s = float(meta_mobility.get("tick_s") or (topology.get("movement") or {}).get("tick_s") or 1.0)
        self.placed = placed
        # the bounds known before any sample: the topology's positions and its movement areas
        self._box: list[float] | None = None
        for n in nodes:
            if n.get("position") is not None:
                x, y = n["position"][:2]
                self._grow(float(x), float(y))
            area = (n.get("mobility") or {}).get("area_m")
            if area:
                self._grow(0.0, 0.0)
                self._grow(float(area[0]), float(area[1]))
        for group in ((topology.get("movement") or {}).get("groups") or {}).values():
            if isinstance(group, Mapping) and group.get("area_m"):
                self._grow(0.0, 0.0)
                self._grow(float(group["area_m"][0]), float(group["area_m"][1]))
        self._tracks: dict[str, tuple[list[float], list[float], list[float]]] = {}
        self._links: dict[tuple[str, str, str], tuple[list[float], list[bool], list[bool]]] = {}
        self.samples = 0
        self.changes: list[float] = []  # every radio link change, in time order

    def _grow(self, x: float, y: float) -> None:
        if self._box is None:
            self._box = [x, y, x, y]
        else:
            b = self._box
            b[0], b[1], b[2], b[3] = min(b[0], x), min(b[1], y), max(b[2], x), max(b[3], y)

    # ------------------------------------------------------------ feeding

    def feed(self, rec: Mapping[str, Any]) -> None:
        """One ``mobility.jsonl`` record (a valid one: contract.mobility), in time order."""
        t = float(rec["mono_s"])
        kind = rec["kind"]
        if kind == "position":
            x, y = float(rec["x_m"]), float(rec["y_m"])
            times, xs, ys = self._tracks.setdefault(str(rec["node"]), ([], [], []))
            if times and times[-1] == t:
                xs[-1], ys[-1] = x, y
            else:
                times.append(t)
                xs.append(x)
                ys.append(y)
            self._grow(x, y)
            self.samples += 1
        else:
            key = (str(rec["a"]), str(rec["b"]), str(rec["radio"]))
            times, ups, made = self._links.setdefault(key, ([], [], []))
            times.append(t)
            ups.append(kind == "link_up")
            made.append(rec.get("made") is not False)
            self.changes.append(t)

    # ------------------------------------------------------------ questions

    def bounds(self) -> list[float]:
        """``[x0, y0, x1, y1]`` in metres: every position the run had (and its areas)."""
        return [round(v, 3) for v in (self._box or [0.0, 0.0, 1.0, 1.0])]

    def span(self) -> tuple[float, float] | None:
        """The first and last instant of the file, None when it has no line."""
        firsts = [tr[0][0] for tr in self._tracks.values()] + self.changes[:1]
        lasts = [tr[0][-1] for tr in self._tracks.values()] + self.changes[-1:]
        return (min(firsts), max(lasts)) if firsts else None

    def position(self, node: str, t: float) -> tuple[float, float] | None:
        track = self._tracks.get(node)
        if track is None:
            return None
        times, xs, ys = track
        i = bisect.bisect_right(times, t)
        if i == 0:
            return xs[0], ys[0]
        if i == len(times):
            return xs[-1], ys[-1]
        t1 = times[i]
        t0 = max(times[i - 1], t1 - self.tick_s)  # it stood still at the earlier sample until its last tick
        if t <= t0:
            return xs[i - 1], ys[i - 1]
        f = (t - t0) / (t1 - t0)
        return xs[i - 1] + f * (xs[i] - xs[i - 1]), ys[i - 1] + f * (ys[i] - ys[i - 1])

    def links_at(self, t: float) -> list[list[Any]]:
        out: list[list[Any]] = []
        for (a, b, radio), (times, ups, made) in self._links.items():
            i = bisect.bisect_right(times, t)
            if i and ups[i - 1]:
                out.append([a, b, radio, made[i - 1]])
        out.sort()
        return out

    def edges_at(self, t: float) -> list[tuple[str, str]]:
        """The pairs a radio link joins at ``t`` with a peering the network made: edges of the live graph."""
        return sorted({(a, b) for a, b, _, made in self.links_at(t) if made})

    def frame(self, t: float) -> dict[str, Any]:
        """A frame's ``motion``: ``positions`` {node: [x_m, y_m]} and ``radio_links`` [[a, b, radio, made]]."""
        positions = {}
        for node in self._tracks:
            p = self.position(node, t)
            if p is not None:
                positions[node] = [round(p[0], 3), round(p[1], 3)]
        return {"positions": positions, "radio_links": self.links_at(t)}

    def graph_doc(self) -> dict[str, Any]:
        """The graph document's ``mobility``: bounds, radios (name, range_m, class, carriers), placed nodes, tick_s."""
        return {"bounds": self.bounds(), "radios": self.radios, "placed": self.placed, "tick_s": self.tick_s}


class MotionTee:
    """What an in-process run's radio links write (``RadioLinks``' ``log``: the interface of
    ``orchestrator.backends.radio_links.MobilityLog``), fed to a live page's :class:`Motion` as it happens and passed
    on to the run's own log (``inner``, None when the run records nothing). The run wires it:
    ``RadioLinks(net, world, classes, MotionTee(live.motion, log))``."""

    def __init__(self, motion: Motion, inner: Any = None) -> None:
        self.motion, self.inner = motion, inner

    def position(self, node: str, at: tuple[float, float], now: float) -> None:
        self.motion.feed({"mono_s": now, "kind": "position", "node": node, "x_m": at[0], "y_m": at[1]})
        if self.inner is not None:
            self.inner.position(node, at, now)

    def link(self, change: Any, link_class: str, made: bool, now: float) -> None:
        self.motion.feed({"mono_s": now, "kind": "link_up" if change.up else "link_down", "a": change.a,
                          "b": change.b, "radio": change.radio, "made": made})
        if self.inner is not None:
            self.inner.link(change, link_class, made, now)

    def flush(self) -> None:
        if self.inner is not None:
            self.inner.flush()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def read_motion(path: Path, topology: Mapping[str, Any], meta: Mapping[str, Any], run_id: str | None,
                skip: Skip) -> Motion | None:
    """The run directory's ``mobility.jsonl``, or None when the run has none. A bad line is passed to ``skip``
    (file, line, reason) and left out."""
    file = path / MOBILITY_FILE
    if not file.exists():
        return None
    motion = Motion(topology, meta.get("mobility"))
    for line_no, line in _lines(file):
        bad = validate_record(line, MOBILITY_FIELDS, run_id)
        if bad is not None:
            skip(file, line_no, f"{bad[0]}: {bad[1]}")
            continue
        rec = json.loads(line)
        if rec["kind"] == "position" and (rec["node"] is None or rec["x_m"] is None or rec["y_m"] is None):
            skip(file, line_no, "position: needs node, x_m and y_m")
            continue
        if rec["kind"] != "position" and (rec["a"] is None or rec["b"] is None or rec["radio"] is None):
            skip(file, line_no, f"{rec['kind']}: needs a, b and radio")
            continue
        motion.feed(rec)
    return motion


def _lines(file: Path) -> Iterable[tuple[int, str]]:
    with open(file, encoding="utf-8", errors="replace") as handle:
        for i, line in enumerate(handle, 1):
            if line.strip():
                yield i, line
