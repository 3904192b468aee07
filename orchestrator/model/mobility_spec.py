"""Mobility in a topology file: node positions and models, radios, the movement's tick (docs/mobility.md).

The pydantic models a topology's ``nodes[i].mobility``, ``radios`` and ``movement`` validate against, the checks
that span several of them (:func:`mobility_problems`, called by the topology's cross-check so every problem
names its line and field), and :func:`build_world`, which turns a validated topology into the movers and radios
of a run (orchestrator.model.mobility, orchestrator.model.radio_graph). Reading ns-2 trace files is
orchestrator.model.mobility_loaders' job; this module reads nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from orchestrator.model.mobility import (Disc, GaussMarkov, GroupMember, Mover, RandomWaypoint, Rect, Static,
                                         TraceMover, mover_rng)
from orchestrator.model.ns2_trace import TraceTrack
from orchestrator.model.radio_graph import Radio

__all__ = ["MODELS", "StaticSpec", "RandomWaypointSpec", "GaussMarkovSpec", "GroupSpec", "TraceSpec",
           "MobilitySpec", "ReferenceSpec", "LossSpec", "RadioSpec", "MovementSpec", "World", "mobility_problems",
           "build_world", "region_mover", "tag_problem", "trace_id", "untag"]

MODELS = ("static", "random_waypoint", "gauss_markov", "group", "trace")
DEFAULT_TICK_S = 1.0
DEFAULT_DURATION_S = 60.0

Loc = tuple[str | int, ...]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _pair(v: Any) -> Any:
    """A single number ``v`` means the range ``[v, v]``."""
    return [v, v] if isinstance(v, int | float) and not isinstance(v, bool) else v


SpeedRange = Annotated[tuple[Positive, Positive], BeforeValidator(_pair)]
PauseRange = Annotated[tuple[NonNegative, NonNegative], BeforeValidator(_pair)]
Area = tuple[Positive, Positive]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _ordered(pair: tuple[float, float]) -> tuple[float, float]:
    if pair[0] > pair[1]:
        raise ValueError(f"[min, max] with min {pair[0]:g} above max {pair[1]:g}")
    return pair


class StaticSpec(_Spec):
    """Never moves: the node stays at its ``position``."""

    model: Literal["static"]


class RandomWaypointSpec(_Spec):
    """Random waypoint in the rectangle ``[0, w] x [0, h]``: speeds drawn in ``speed_mps`` ([min, max] or one
    number, > 0), a pause in ``pause_s`` ([min, max] or one number, >= 0) at each waypoint."""

    model: Literal["random_waypoint"]
    area_m: Area
    speed_mps: SpeedRange
    pause_s: PauseRange = (0.0, 0.0)

    _ranges = field_validator("speed_mps", "pause_s")(_ordered)


class GaussMarkovSpec(_Spec):
    """Gauss-Markov in ``[0, w] x [0, h]``: mean speed ``speed_mps`` (> 0), at most ``max_speed_mps`` (default
    twice the mean), memory ``alpha`` in [0, 1], deviations of speed (default a quarter of the mean) and direction,
    redrawn every ``step_s``."""

    model: Literal["gauss_markov"]
    area_m: Area
    speed_mps: Positive
    max_speed_mps: Positive | None = None
    alpha: float = Field(0.75, ge=0, le=1)
    speed_sd_mps: NonNegative | None = None
    direction_sd_deg: NonNegative = 30.0
    step_s: Positive = 1.0

    @field_validator("max_speed_mps")
    @classmethod
    def _above_mean(cls, v: float | None, info: ValidationInfo) -> float | None:
        mean = info.data.get("speed_mps")
        if v is not None and mean is not None and v < mean:
            raise ValueError(f"{v:g} is below the mean speed_mps {mean:g}")
        return v


class GroupSpec(_Spec):
    """A member of group ``group`` (``movement.groups``): within ``radius_m`` of the group's reference point,
    wandering there at ``speed_mps`` with ``pause_s`` pauses."""

    model: Literal["group"]
    group: str
    radius_m: Positive
    speed_mps: SpeedRange = (0.2, 1.0)
    pause_s: PauseRange = (0.0, 0.0)

    _ranges = field_validator("speed_mps", "pause_s")(_ordered)


class TraceSpec(_Spec):
    """Replays node ``id`` (default: the node's index in ``nodes``) of the ns-2 trace ``file`` (a path relative
    to the topology file)."""

    model: Literal["trace"]
    file: str = Field(min_length=1)
    id: int | None = Field(None, ge=0)


MobilitySpec = Annotated[Union[StaticSpec, RandomWaypointSpec, GaussMarkovSpec, GroupSpec, TraceSpec],
                         Field(discriminator="model")]
#: what a group's reference point may follow
ReferenceSpec = Annotated[Union[RandomWaypointSpec, GaussMarkovSpec], Field(discriminator="model")]


class LossSpec(_Spec):
    """Loss growing with distance: none up to ``start_fraction`` of the range, then linear to ``edge_pct``."""

    edge_pct: float = Field(gt=0, le=100)
    start_fraction: float = Field(0.5, ge=0, lt=1)


class RadioSpec(_Spec):
    """A radio: its range, the link class of its links (default: the class named as the radio), hysteresis, the
    nodes that carry it (default: every node with a position or a mobility model) and loss with distance."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, validate_by_alias=True,
                              validate_by_name=True, serialize_by_alias=True)

    range_m: Positive
    link_class: str | None = Field(None, alias="class")
    hysteresis: float = Field(0.1, ge=0, le=1)
    nodes: list[str] | None = None
    loss: LossSpec | None = None


class MovementSpec(_Spec):
    """How a run moves its nodes: every ``tick_s`` of protocol time, for ``duration_s``; and the groups' reference
    points."""

    duration_s: Positive = DEFAULT_DURATION_S
    tick_s: Positive = DEFAULT_TICK_S
    groups: dict[str, ReferenceSpec] = Field(default_factory=dict)

    @field_validator("tick_s")
    @classmethod
    def _tick_fits(cls, v: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration_s")
        if duration is not None and v > duration:
            raise ValueError(f"{v:g} s is longer than duration_s {duration:g} s")
        return v


def untag(loc: Loc) -> Loc:
    """A pydantic location without the union tags it adds (``nodes[2].mobility.random_waypoint.area_m`` ->
    ``nodes[2].mobility.area_m``), so that it names the field as the file spells it."""
    out: list[str | int] = []
    for k, part in enumerate(loc):
        tagged = k >= 1 and loc[k - 1] == "mobility" or k >= 2 and loc[k - 2] == "groups"
        if not (tagged and part in MODELS):
            out.append(part)
    return tuple(out)


def tag_problem(err: Mapping[str, Any]) -> tuple[Loc, str] | None:
    """A pydantic error about a model's tag (unknown or missing ``model``), placed at the ``model`` field and
    said with the models known there; None for any other error."""
    loc = tuple(err["loc"])
    known = MODELS if loc[-1:] == ("mobility",) else ("random_waypoint", "gauss_markov")
    if err.get("type") == "union_tag_invalid":
        return (*loc, "model"), f"unknown model {err['ctx']['tag']!r} (known: {', '.join(known)})"
    if err.get("type") == "union_tag_not_found":
        return (*loc, "model"), f"required field is missing (one of: {', '.join(known)})"
    return None


def _placed(node: Any) -> bool:
    return node.position is not None or node.mobility is not None


def trace_id(index: int, spec: TraceSpec) -> int:
    """The ns-2 node id the topology's ``nodes[index]`` replays."""
    return spec.id if spec.id is not None else index


def _node_problems(i: int, node: Any, movement: MovementSpec | None, has_radios: bool) -> list[tuple[Loc, str]]:
    spec, at = node.mobility, node.position
    where: Loc = ("nodes", i)
    if spec is None:
        return []
    if not has_radios:
        return [((*where, "mobility"), "the node moves, but the topology declares no radios to link it by "
                 "(radios: {bluetooth: {range_m: 10}})")]
    if isinstance(spec, StaticSpec) and at is None:
        return [((*where, "position"), "a static node needs a position [x, y] (metres)")]
    if isinstance(spec, GroupSpec | TraceSpec) and at is not None:
        whose = "its group's reference point and its offset" if isinstance(spec, GroupSpec) else "the trace"
        return [((*where, "position"), f"a {spec.model} node's position comes from {whose}: leave position out")]
    if isinstance(spec, RandomWaypointSpec | GaussMarkovSpec) and at is not None:
        w, h = spec.area_m
        if not (0 <= at[0] <= w and 0 <= at[1] <= h):
            return [((*where, "position"), f"[{at[0]:g}, {at[1]:g}] is outside the area [0, {w:g}] x [0, {h:g}]")]
    if isinstance(spec, GroupSpec):
        groups = movement.groups if movement is not None else {}
        if spec.group not in groups:
            known = ", ".join(sorted(groups)) or "none: declare them under movement.groups"
            return [((*where, "mobility", "group"), f"unknown group {spec.group!r} (known: {known})")]
    return []


def _radio_problems(name: str, radio: RadioSpec, names: Mapping[str, Any],
                    known_classes: Iterable[str]) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    known = set(known_classes)
    cls = radio.link_class or name
    if cls not in known:
        field: Loc = ("radios", name, "class") if radio.link_class else ("radios", name)
        problems.append((field, f"unknown link class {cls!r} (known: {', '.join(sorted(known))}); a radio not "
                         "named as a class needs 'class'"))
    for k, who in enumerate(radio.nodes or ()):
        if who not in names:
            problems.append((("radios", name, "nodes", k), f"unknown node {who!r}"))
        elif not _placed(names[who]):
            problems.append((("radios", name, "nodes", k), f"node {who!r} has no position and no mobility model: "
                             "a radio reaches only placed nodes"))
    return problems


def mobility_problems(nodes: Sequence[Any], radios: Mapping[str, RadioSpec], movement: MovementSpec | None,
                      known_classes: Iterable[str]) -> list[tuple[Loc, str]]:
    """What no single field can check: models against positions, radios, groups and each other."""
    problems: list[tuple[Loc, str]] = []
    names = {n.name: n for n in nodes}
    for i, node in enumerate(nodes):
        problems += _node_problems(i, node, movement, bool(radios))
    if movement is not None and not radios:
        problems.append((("movement",), "movement without radios moves nothing: declare radios"))
    for name, radio in radios.items():
        problems += _radio_problems(name, radio, names, known_classes)
    seen: dict[tuple[str, int], int] = {}
    for i, node in enumerate(nodes):
        if isinstance(node.mobility, TraceSpec):
            key = (node.mobility.file, trace_id(i, node.mobility))
            if key in seen:
                problems.append((("nodes", i, "mobility", "id"), f"trace node {key[1]} of {key[0]} is already "
                                 f"nodes[{seen[key]}]'s"))
            seen.setdefault(key, i)
    return problems


@dataclass(frozen=True, slots=True)
class World:
    """What a run moves: each placed node's mover, the radios, the tick and how long the movement lasts."""

    movers: dict[str, Mover]
    radios: tuple[Radio, ...]
    tick_s: float
    duration_s: float
    #: each group's reference point (``movement.groups``), shared by its members' movers
    refs: dict[str, Mover] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The models of the run's movers, sorted and joined by ``+`` (``random_waypoint+static``)."""
        return "+".join(sorted({m.model for m in self.movers.values()}))

    def meta(self) -> dict[str, Any]:
        """``meta.json``'s ``mobility`` key for a run that moves this world (contract.dataset)."""
        return {"model": self.model, "tick_s": self.tick_s, "duration_s": self.duration_s,
                "radios": {r.name: {"range_m": r.range_m, "class": r.link_class, "hysteresis": r.hysteresis}
                           for r in self.radios}}  # fmt: skip


def region_mover(spec: RandomWaypointSpec | GaussMarkovSpec, rng: Any, start: Any) -> Mover:
    """The random waypoint or Gauss-Markov mover ``spec`` says, drawing from ``rng``, starting at ``start`` (None:
    a point drawn in the area)."""
    area = Rect.of_size(*spec.area_m)
    if isinstance(spec, RandomWaypointSpec):
        return RandomWaypoint(area, *spec.speed_mps, rng, pause_min_s=spec.pause_s[0], pause_max_s=spec.pause_s[1],
                              start=start)
    sd = spec.speed_sd_mps if spec.speed_sd_mps is not None else spec.speed_mps / 4
    return GaussMarkov(area, spec.speed_mps, rng, max_speed_mps=spec.max_speed_mps or 2 * spec.speed_mps,
                       alpha=spec.alpha, speed_sd_mps=sd, direction_sd_rad=math.radians(spec.direction_sd_deg),
                       step_s=spec.step_s, start=start)


def _mover(i: int, node: Any, seed: int | str, refs: Mapping[str, Mover],
           tracks: Mapping[str, Mapping[int, TraceTrack]]) -> Mover:
    spec, rng = node.mobility, mover_rng(seed, node.name)
    start = tuple(node.position) if node.position is not None else None
    if spec is None or isinstance(spec, StaticSpec):
        return Static(start)
    if isinstance(spec, GroupSpec):
        offset = RandomWaypoint(Disc(spec.radius_m), *spec.speed_mps, rng, pause_min_s=spec.pause_s[0],
                                pause_max_s=spec.pause_s[1])
        return GroupMember(refs[spec.group], offset)
    if isinstance(spec, TraceSpec):
        track = tracks[spec.file][trace_id(i, spec)]
        return TraceMover((track.start[0], track.start[1]), list(track.moves))
    return region_mover(spec, rng, start)


def build_world(topo: Any, seed: int | str, tracks: Mapping[str, Mapping[int, TraceTrack]]) -> World | None:
    """The movers and radios of ``topo`` (a validated Topology) for run seed ``seed``, or None when it declares
    no radios. ``tracks``: each trace file (as the topology names it) -> its tracks by ns-2 id."""
    if not topo.radios:
        return None
    movement = topo.movement or MovementSpec()
    refs = {g: region_mover(spec, mover_rng(seed, f"group:{g}"), None) for g, spec in movement.groups.items()}
    movers = {n.name: _mover(i, n, seed, refs, tracks) for i, n in enumerate(topo.nodes) if _placed(n)}
    radios = tuple(
        Radio(name, r.range_m, r.link_class or name, r.hysteresis,
              frozenset(r.nodes) if r.nodes is not None else None,
              r.loss.start_fraction if r.loss else 0.5, r.loss.edge_pct if r.loss else 0.0)
        for name, r in topo.radios.items()
    )
    return World(movers, radios, movement.tick_s, movement.duration_s, refs)
