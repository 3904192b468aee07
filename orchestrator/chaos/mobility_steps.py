"""The ``mobility`` step and what the checker reads of nodes that move, for every chaos backend whose nodes move
(orchestrator.chaos.inproc_mobile in process, orchestrator.chaos.docker_mobile on Docker; docs/mobility.md).

:class:`MovementSteps` is a mixin over a backend that has ``radio`` (an
orchestrator.backends.radio_links.MovingRadios), ``seed``, ``live_graph()`` and ``sleep()``: it halts and resumes
the movement, changes nodes' models and speeds and a group's reference point's speed (orchestrator.model.
mobility_change), and answers ``moved_since`` from the radio links' ``changed_at``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import networkx as nx

from orchestrator.backends.radio_links import MovingRadios
from orchestrator.chaos.steps import Mobility
from orchestrator.chaos.targets import TargetError
from orchestrator.model.mobility import GroupMember, Mover, Shifted, Static
from orchestrator.model.mobility_change import change_rng, member_mover, model_mover, respeed
from orchestrator.model.mobility_spec import GroupSpec, StaticSpec, World, region_mover
from orchestrator.model.topology import Topology

__all__ = ["MovementSteps"]


class MovementSteps:
    """The mobility step and ``moved_since`` of a chaos backend whose nodes move (see the module)."""

    moves = True
    radio: MovingRadios
    seed: int
    live_graph: Any  # the backend's (its live graph, the radio links in it)
    sleep: Any  # the backend's

    def init_movement(self, topology: Topology, world: World) -> None:
        self.world = world
        self.node_specs: dict[str, Any] = {n.name: n.mobility or StaticSpec(model="static") for n in topology.nodes}
        self.group_specs = dict(topology.movement.groups) if topology.movement is not None else {}
        self.refs: dict[str, Mover] = dict(world.refs)
        self._changes_of: Counter[str] = Counter()

    # ------------------------------------------------------------------ the mobility step

    async def mobility(self, step: Any) -> str | None:
        assert isinstance(step, Mobility)
        said: list[str] = []
        t = self.radio.mover_time(self.radio.now())
        try:
            if step.group is not None and step.speed_mps is not None:
                said.append(self._group_speed(step.group, step.speed_mps, t))
            for name in step.nodes:
                said.append(self._change_node(name, step, t))
        except ValueError as exc:
            raise TargetError(str(exc)) from None
        if said:
            self.radio.move_now()
        if step.movement == "stop":
            said.append("movement stopped" if self.radio.halt() else "movement was not running")
        elif step.movement == "start":
            for_s = step.for_s if step.for_s is not None else self.world.duration_s
            said.append(f"movement started for {for_s:g} s" if self.radio.resume(for_s) else "movement was running")
        await self.sleep(0)
        return "; ".join(said)

    def _rng(self, who: str) -> Any:
        self._changes_of[who] += 1
        return change_rng(self.seed, who, self._changes_of[who])

    def _group_speed(self, group: str, speed: tuple[float, float], t: float) -> str:
        old = self.refs[group]
        spec = respeed(self.group_specs[group], speed)
        new = Shifted(region_mover(spec, self._rng(f"group:{group}"), old.position(t)), t)
        for mover in self.radio.movers.values():
            if isinstance(mover, GroupMember) and mover.reference is old:
                mover.reference = new
        self.refs[group], self.group_specs[group] = new, spec
        return f"group {group} at {_speed(speed)}"

    def _change_node(self, name: str, step: Mobility, t: float) -> str:
        if name not in self.radio.movers:
            raise ValueError(f"{name} has no position and no mobility model: it is on no radio")
        spec = self.node_specs[name]
        at = step.position if step.position is not None else self.radio.where(name)
        if step.model is not None:
            new_spec, mover = step.model, model_mover(step.model, at, t, self._rng(name))
            what = step.model.model
        elif step.speed_mps is not None and isinstance(spec, GroupSpec):
            if step.position is not None:
                raise ValueError(f"{name} is a group member: its position comes from its group's reference point")
            new_spec = respeed(spec, step.speed_mps)
            mover = member_mover(self.radio.movers[name], new_spec, t, self._rng(name))
            what = f"wandering at {_speed(step.speed_mps)}"
        elif step.speed_mps is not None:
            new_spec = respeed(spec, step.speed_mps)
            mover, what = model_mover(new_spec, at, t, self._rng(name)), f"at {_speed(step.speed_mps)}"
        else:
            new_spec, mover, what = StaticSpec(model="static"), Static(at), "standing"
        self.radio.replace(name, mover)
        self.node_specs[name] = new_spec
        where = f" from ({at[0]:.1f}, {at[1]:.1f})" if step.position is not None or what == "standing" else ""
        return f"{name} {what}{where}"

    def moved_since(self, since: float) -> set[str]:
        recent = {n for n, t in self.radio.changed_at.items() if t > since}
        if not recent:
            return set()
        out: set[str] = set()
        for comp in nx.connected_components(self.live_graph()):
            if comp & recent:
                out |= comp
        return out


def _speed(speed: tuple[float, float]) -> str:
    return f"{speed[0]:g} m/s" if speed[0] == speed[1] else f"{speed[0]:g}-{speed[1]:g} m/s"
