"""Mobility models: where each node is at protocol time ``t`` (docs/mobility.md).

Pure computation: no trio, no I/O, no clock. A mover is asked ``position(t)`` with ``t`` in seconds of
protocol time since the run started; it may be asked any ``t >= 0`` in any order and always answers the same
for the same ``t``, because it draws its randomness once, in time order, from its own seeded RNG
(:func:`mover_rng`: same run seed and node name, same movements).

The models, each a class with the parameters the topology gives it (orchestrator.model.mobility_spec):

* :class:`Static`: never moves.
* :class:`RandomWaypoint`: picks a destination uniformly in its region, goes there in a straight line at a
  speed drawn uniformly in ``[min, max]``, pauses, and again (Johnson and Maltz's model as BonnMotion and ns-2
  ``setdest`` describe it; written here from that description). The region is convex, so every position on
  the way stays in it.
* :class:`GaussMarkov`: speed and direction are redrawn every ``step_s`` from their last values, their means and
  a Gaussian (Liang and Haas' model); near an edge the mean direction turns towards the centre, and a move that
  crosses an edge is reflected back in, so positions stay in the area and no step goes faster than
  ``max_speed_mps``.
* :class:`GroupMember`: reference point group mobility (Hong et al.): the group's reference point follows its
  own model and the member wanders (random waypoint) within ``radius_m`` of it.
* :class:`TraceMover`: replays a node of an ns-2 mobility trace (orchestrator.model.ns2_trace).

:class:`Shifted` starts a mover at a later time: a model given to a node mid-run (a chaos ``mobility`` step)
starts from where the node is then, its own time 0 being that moment.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "Point",
    "Mover",
    "Rect",
    "Disc",
    "Static",
    "RandomWaypoint",
    "GaussMarkov",
    "GroupMember",
    "TraceMover",
    "Shifted",
    "mover_rng",
    "distance",
]

Point = tuple[float, float]


def distance(p: Point, q: Point) -> float:
    """The Euclidean distance between ``p`` and ``q`` (metres)."""
    return math.hypot(p[0] - q[0], p[1] - q[1])


def mover_rng(seed: int | str, who: str) -> random.Random:
    """The RNG of one mover: a stream of its own per (run seed, node or group), so adding a node moves no other."""
    return random.Random(f"mobility-{seed}-{who}")


class Mover(Protocol):
    """Anything that says where a node is at protocol time ``t`` (seconds, ``t >= 0``)."""

    model: str

    def position(self, t: float) -> Point: ...


@dataclass(frozen=True, slots=True)
class Rect:
    """The rectangle ``[x0, x1] x [y0, y1]`` (metres)."""

    x0: float
    y0: float
    x1: float
    y1: float

    @classmethod
    def of_size(cls, width_m: float, height_m: float) -> Rect:
        return cls(0.0, 0.0, width_m, height_m)

    def draw(self, rng: random.Random) -> Point:
        return (self.x0 + rng.random() * (self.x1 - self.x0), self.y0 + rng.random() * (self.y1 - self.y0))

    def contains(self, p: Point, slack: float = 1e-9) -> bool:
        return self.x0 - slack <= p[0] <= self.x1 + slack and self.y0 - slack <= p[1] <= self.y1 + slack


@dataclass(frozen=True, slots=True)
class Disc:
    """The disc of ``radius_m`` around the origin (a group member's offset from its reference point)."""

    radius_m: float

    def draw(self, rng: random.Random) -> Point:
        while True:  # rejection: uniform over the disc, and the same draws for the same seed
            x, y = (2 * rng.random() - 1) * self.radius_m, (2 * rng.random() - 1) * self.radius_m
            if x * x + y * y <= self.radius_m * self.radius_m:
                return (x, y)

    def contains(self, p: Point, slack: float = 1e-9) -> bool:
        return math.hypot(*p) <= self.radius_m + slack


@dataclass(slots=True)
class Static:
    """A node that stays at ``at``."""

    at: Point
    model: str = "static"

    def position(self, t: float) -> Point:
        return self.at


@dataclass(frozen=True, slots=True)
class _Leg:
    """From ``start`` (leaving at ``t0``) to ``end`` (arriving at ``t1``), then still until the next leg."""

    t0: float
    start: Point
    end: Point
    t1: float


def _along(leg: _Leg, t: float) -> Point:
    """Where a node on ``leg`` is at ``t`` (at its start before it leaves, at its end once it arrived)."""
    if t >= leg.t1:
        return leg.end
    if t <= leg.t0:
        return leg.start
    f = (t - leg.t0) / (leg.t1 - leg.t0)
    return (leg.start[0] + f * (leg.end[0] - leg.start[0]), leg.start[1] + f * (leg.end[1] - leg.start[1]))


class _Legs:
    """Legs made one after another as time needs them, looked up by time."""

    def __init__(self) -> None:
        self.legs: list[_Leg] = []
        self.starts: list[float] = []

    def add(self, leg: _Leg) -> None:
        self.legs.append(leg)
        self.starts.append(leg.t0)

    def at(self, t: float) -> Point:
        k = bisect_right(self.starts, t) - 1
        return _along(self.legs[max(k, 0)], t)


class RandomWaypoint:
    """Random waypoint in ``region`` (a :class:`Rect` or :class:`Disc`): destination uniform in the region,
    speed uniform in ``[speed_min_mps, speed_max_mps]`` (both > 0), then a pause uniform in
    ``[pause_min_s, pause_max_s]``. Starts at ``start`` (in the region), or at a point drawn in it."""

    model = "random_waypoint"

    def __init__(self, region: Rect | Disc, speed_min_mps: float, speed_max_mps: float, rng: random.Random, *,
                 pause_min_s: float = 0.0, pause_max_s: float = 0.0, start: Point | None = None) -> None:
        if not 0 < speed_min_mps <= speed_max_mps:
            raise ValueError(f"speeds must be 0 < min <= max, got {speed_min_mps} and {speed_max_mps}")
        if not 0 <= pause_min_s <= pause_max_s:
            raise ValueError(f"pauses must be 0 <= min <= max, got {pause_min_s} and {pause_max_s}")
        self.region, self.rng = region, rng
        self.speeds = (speed_min_mps, speed_max_mps)
        self.pauses = (pause_min_s, pause_max_s)
        here = start if start is not None else region.draw(rng)
        self._legs = _Legs()
        self._legs.add(_Leg(0.0, here, here, 0.0))
        self._free_at = 0.0  # when the node, arrived and rested, leaves again

    def _next_leg(self) -> None:
        rng, last = self.rng, self._legs.legs[-1]
        dest = self.region.draw(rng)
        speed = self.speeds[0] + rng.random() * (self.speeds[1] - self.speeds[0])
        t0 = self._free_at
        t1 = t0 + distance(last.end, dest) / speed
        self._legs.add(_Leg(t0, last.end, dest, t1))
        self._free_at = t1 + self.pauses[0] + rng.random() * (self.pauses[1] - self.pauses[0])

    def position(self, t: float) -> Point:
        while self._free_at <= t:
            self._next_leg()
        return self._legs.at(t)


def _reflect(v: float, lo: float, hi: float) -> tuple[float, bool]:
    """``v`` folded back into ``[lo, hi]`` as a ball bouncing off the walls; and whether it bounced an odd
    number of times (its direction along this axis is then reversed)."""
    span = hi - lo
    if span <= 0:
        return lo, False
    k, r = divmod(v - lo, span)
    odd = int(k) % 2 == 1
    return (hi - r if odd else lo + r), odd


@dataclass(slots=True)
class _GmState:
    t: float
    at: Point
    speed: float
    direction: float  # radians
    mean_direction: float


class GaussMarkov:
    """Gauss-Markov mobility in ``area``: every ``step_s``, with memory ``alpha`` in [0, 1],
    ``s = alpha s + (1 - alpha) mean_speed + sqrt(1 - alpha^2) N(0, speed_sd)`` (clamped to
    ``[0, max_speed_mps]``) and the direction likewise around the mean direction (``direction_sd_rad``). Within
    ``edge_fraction`` of the area's size from an edge the mean direction points at the centre."""

    model = "gauss_markov"

    def __init__(self, area: Rect, mean_speed_mps: float, rng: random.Random, *, max_speed_mps: float,
                 alpha: float = 0.75, speed_sd_mps: float = 0.0, direction_sd_rad: float = 0.0,
                 step_s: float = 1.0, edge_fraction: float = 0.1, start: Point | None = None) -> None:
        if not 0 < mean_speed_mps <= max_speed_mps:
            raise ValueError(f"speeds must be 0 < mean <= max, got {mean_speed_mps} and {max_speed_mps}")
        if not 0 <= alpha <= 1 or step_s <= 0 or speed_sd_mps < 0 or direction_sd_rad < 0:
            raise ValueError("alpha must be in [0, 1], step_s > 0 and the deviations >= 0")
        self.area, self.rng = area, rng
        self.mean_speed, self.max_speed, self.alpha = mean_speed_mps, max_speed_mps, alpha
        self.speed_sd, self.direction_sd, self.step_s = speed_sd_mps, direction_sd_rad, step_s
        self.edge_fraction = edge_fraction
        here = start if start is not None else area.draw(rng)
        heading = rng.random() * 2 * math.pi
        self._states = [_GmState(0.0, here, mean_speed_mps, heading, heading)]

    def _advance(self, s: _GmState, dt: float) -> tuple[Point, float]:
        """Where a node in state ``s`` is ``dt`` later, reflected off the edges, and its direction then."""
        a = self.area
        x, fx = _reflect(s.at[0] + s.speed * dt * math.cos(s.direction), a.x0, a.x1)
        y, fy = _reflect(s.at[1] + s.speed * dt * math.sin(s.direction), a.y0, a.y1)
        dx, dy = math.cos(s.direction) * (-1 if fx else 1), math.sin(s.direction) * (-1 if fy else 1)
        return (x, y), math.atan2(dy, dx)

    def _mean_direction(self, at: Point, previous: float) -> float:
        a = self.area
        mx, my = self.edge_fraction * (a.x1 - a.x0), self.edge_fraction * (a.y1 - a.y0)
        near = at[0] < a.x0 + mx or at[0] > a.x1 - mx or at[1] < a.y0 + my or at[1] > a.y1 - my
        if not near:
            return previous
        return math.atan2((a.y0 + a.y1) / 2 - at[1], (a.x0 + a.x1) / 2 - at[0])

    def _next_state(self) -> None:
        s, rng, alpha = self._states[-1], self.rng, self.alpha
        at, direction = self._advance(s, self.step_s)
        mean_dir = self._mean_direction(at, s.mean_direction)
        keep = math.sqrt(1 - alpha * alpha)
        speed = alpha * s.speed + (1 - alpha) * self.mean_speed + keep * rng.gauss(0.0, self.speed_sd)
        # the new direction is drawn around the mean by the shortest turn, so it never spins the long way round
        turn = math.atan2(math.sin(mean_dir - direction), math.cos(mean_dir - direction))
        direction = direction + (1 - alpha) * turn + keep * rng.gauss(0.0, self.direction_sd)
        self._states.append(_GmState(s.t + self.step_s, at, min(max(speed, 0.0), self.max_speed), direction,
                                     mean_dir))

    def position(self, t: float) -> Point:
        while self._states[-1].t + self.step_s <= t:
            self._next_state()
        s = self._states[min(int(t // self.step_s), len(self._states) - 1)]
        return self._advance(s, t - s.t)[0]


@dataclass(slots=True)
class GroupMember:
    """A member of a group: its ``reference`` point's position plus an ``offset`` (a random waypoint in a disc
    around the origin), so it stays within the disc's radius of the reference point."""

    reference: Mover
    offset: RandomWaypoint
    model: str = "group"

    def position(self, t: float) -> Point:
        (rx, ry), (ox, oy) = self.reference.position(t), self.offset.position(t)
        return (rx + ox, ry + oy)


@dataclass(slots=True)
class TraceMover:
    """One node of an ns-2 trace: it starts at ``start``; at each ``(t, x, y, speed)`` of ``moves`` (in time
    order) it heads from where it is then to ``(x, y)`` at ``speed`` m/s, as ns-2's ``setdest`` does (a new
    destination before the last is reached turns it on the spot; speed 0 stops it)."""

    start: Point
    moves: list[tuple[float, float, float, float]]
    model: str = "trace"
    _legs: _Legs = field(init=False)

    def __post_init__(self) -> None:
        self._legs = _Legs()
        last = _Leg(0.0, self.start, self.start, 0.0)
        self._legs.add(last)
        for t, x, y, speed in sorted(self.moves, key=lambda m: m[0]):
            here = _along(last, t)
            t1 = t + distance(here, (x, y)) / speed if speed > 0 else t
            last = _Leg(t, here, (x, y) if speed > 0 else here, t1)
            self._legs.add(last)

    def position(self, t: float) -> Point:
        return self._legs.at(t)


@dataclass(slots=True)
class Shifted:
    """``inner`` started at time ``t0``: at ``t`` it is where ``inner`` is at ``t - t0`` (where it starts before)."""

    inner: Mover
    t0: float

    @property
    def model(self) -> str:
        return self.inner.model

    def position(self, t: float) -> Point:
        return self.inner.position(max(0.0, t - self.t0))
