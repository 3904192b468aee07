"""Changing how nodes move in the middle of a run (a chaos ``mobility`` step; docs/mobility.md).

Pure computation, like orchestrator.model.mobility. A change takes effect at mover time ``t`` (seconds of movement
since the run started, pauses of the movement left out) and never moves a node by a jump it does not ask for: the
new model starts from where the node is at ``t`` (:class:`~orchestrator.model.mobility.Shifted`), drawing from an
RNG of its own (:func:`change_rng`: run seed, node or group, and the change's number), so the same scenario and
seed move the same way.

* :func:`respeed`: the same model with other speeds (``random_waypoint``, ``gauss_markov``, ``group``: the
  member's wandering about its reference point); ``static`` and ``trace`` have no speed to change.
* :func:`model_mover`: a new model (``static``, ``random_waypoint`` or ``gauss_markov``) from a point; a start
  outside the new model's area is moved onto its nearest edge.
* :func:`member_mover`: a group member whose wandering changes, about the same reference point.
"""

from __future__ import annotations

import random
from typing import Any

from orchestrator.model.mobility import Disc, GroupMember, Mover, Point, RandomWaypoint, Shifted, Static, mover_rng
from orchestrator.model.mobility_spec import (GaussMarkovSpec, GroupSpec, RandomWaypointSpec, StaticSpec, TraceSpec,
                                              region_mover)

__all__ = ["CHANGEABLE_MODELS", "change_rng", "member_mover", "model_mover", "respeed"]

#: the models a mobility step may give a node
CHANGEABLE_MODELS = ("static", "random_waypoint", "gauss_markov")

Spec = StaticSpec | RandomWaypointSpec | GaussMarkovSpec | GroupSpec | TraceSpec


def change_rng(seed: int | str, who: str, k: int) -> random.Random:
    """The RNG of the ``k``-th change of ``who`` (a node, or ``group:NAME``) in a run of ``seed``."""
    return mover_rng(seed, f"{who}#change{k}")


def respeed(spec: Spec | None, speed: tuple[float, float]) -> Spec:
    """``spec`` with speeds ``speed`` ([min, max], 0 < min <= max): a range for random waypoint and a group member,
    the mean of Gauss-Markov (its ceiling raised to twice the mean when below it). ValueError for a model without a
    speed (static, trace)."""
    lo, hi = speed
    if not 0 < lo <= hi:
        raise ValueError(f"speeds must be 0 < min <= max, got {lo:g} and {hi:g}")
    if isinstance(spec, RandomWaypointSpec | GroupSpec):
        return spec.model_copy(update={"speed_mps": (lo, hi)})
    if isinstance(spec, GaussMarkovSpec):
        mean = (lo + hi) / 2
        ceiling = spec.max_speed_mps if spec.max_speed_mps is not None and spec.max_speed_mps >= mean else 2 * mean
        return spec.model_copy(update={"speed_mps": mean, "max_speed_mps": ceiling, "speed_sd_mps": None})
    model = "static" if spec is None else spec.model
    raise ValueError(f"a {model} node has no speed to change (give it a model: {', '.join(CHANGEABLE_MODELS[1:])})")


def _inside(at: Point, area: tuple[float, float]) -> Point:
    return (min(max(at[0], 0.0), area[0]), min(max(at[1], 0.0), area[1]))


def model_mover(spec: Spec, at: Point, t: float, rng: random.Random) -> Mover:
    """The mover of ``spec`` (static, random waypoint or Gauss-Markov) starting from ``at`` at mover time ``t``."""
    if isinstance(spec, StaticSpec):
        return Static(at)
    if isinstance(spec, RandomWaypointSpec | GaussMarkovSpec):
        return Shifted(region_mover(spec, rng, _inside(at, spec.area_m)), t)
    raise ValueError(f"a mobility step gives a node one of {', '.join(CHANGEABLE_MODELS)}, not {spec.model}")


def member_mover(member: Any, spec: GroupSpec, t: float, rng: random.Random) -> Mover:
    """A group member (``member``: its GroupMember) wandering as ``spec`` says from mover time ``t``, from where it
    is then about the same reference point."""
    if not isinstance(member, GroupMember):
        raise ValueError("not a group member")
    ox, oy = member.offset.position(t)
    offset = RandomWaypoint(Disc(spec.radius_m), *spec.speed_mps, rng, pause_min_s=spec.pause_s[0],
                            pause_max_s=spec.pause_s[1], start=(ox, oy))
    return GroupMember(member.reference, Shifted(offset, t))  # type: ignore[arg-type]
