"""The in-process chaos backend for a topology whose nodes move (docs/mobility.md, "Chaos").

:class:`MobileInprocChaos` is :class:`~orchestrator.chaos.inproc_backend.InprocChaos` with the topology's movement
running on the same virtual clock (orchestrator.backends.inproc_mobility.RadioLinks): from the network's start the
nodes move every ``tick_s`` for the topology's ``movement.duration_s`` and radio links come and go as the radio
graph says, while the scenario's faults, traffic and checks run. How faults and radio links meet:

* a radio link is made only while both ends are live (a dead or paused node takes no new peering); a node that
  comes back (restart, resume) gets the radio links in range then (RadioLinks.reconcile);
* a radio link with a paused end that goes out of range is cut with the paused node frozen: it learns of it on
  resume, as of a peer that timed it out;
* ``partition`` cuts the radio links between the groups too, and keeps the groups apart however the nodes move
  until ``heal`` (a jammer between them); ``link_down`` of a pair cuts its radio links and keeps them cut until
  ``link_up`` (a pair joined by radio only is not given a fixed link by it);
* ``link_change`` changes fixed links only.

The ``mobility`` step halts and resumes the movement and changes nodes' models and speeds
(orchestrator.model.mobility_change). :meth:`moved_since` tells the checker which components' links changed because
nodes moved (RadioLinks.changed_at), so it judges only the ones that had time to re-converge
(orchestrator.chaos.moving). Background pings are told apart by whether their pair was connected in the live graph
when they were sent (``mobility.delivery`` in the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from contract.links import LinkClass

from orchestrator.backends.inproc_mobility import MobilityLog, RadioLinks
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.steps import Mobility
from orchestrator.chaos.targets import TargetError
from orchestrator.model.mobility import GroupMember, Mover, Shifted, Static
from orchestrator.model.mobility_change import change_rng, member_mover, model_mover, respeed
from orchestrator.model.mobility_spec import GroupSpec, StaticSpec, World, region_mover
from orchestrator.model.topology import Topology

__all__ = ["MobileInprocChaos", "mobility_meta"]


def mobility_meta(world: World) -> dict[str, Any]:
    """``meta.json``'s ``mobility`` key for a run moving ``world`` (contract.dataset)."""
    return {"model": world.model, "tick_s": world.tick_s, "duration_s": world.duration_s,
            "radios": {r.name: {"range_m": r.range_m, "class": r.link_class, "hysteresis": r.hysteresis}
                       for r in world.radios}}  # fmt: skip


class MobileInprocChaos(InprocChaos):
    """InprocChaos whose topology's nodes move (``world``; ``radio_classes``: each radio's link class)."""

    moves = True

    def __init__(self, topology: Topology, *, world: World, radio_classes: Mapping[str, LinkClass],
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(topology, **kw)
        self.world = world
        self.node_specs: dict[str, Any] = {n.name: n.mobility or StaticSpec(model="static") for n in topology.nodes}
        self.group_specs = dict(topology.movement.groups) if topology.movement is not None else {}
        self.refs: dict[str, Mover] = dict(world.refs)
        self._changes_of: Counter[str] = Counter()
        self.sides: dict[str, int] | None = None  # a partition's groups: radio links between them are kept cut
        self.apart: set[frozenset[str]] = set()  # pairs a link_down keeps apart
        log = None
        if self.recorder is not None:
            self.recorder.meta["mobility"] = mobility_meta(world)
            log = MobilityLog(Path(self.recorder.root), self.recorder.run_id, self.recorder.wall_offset_s)
        self.radio = RadioLinks(self.net, world, radio_classes, log, available=self._live, blocked=self._blocked,
                                cut=self._cut_radio)  # fmt: skip
        self._sent_connected: dict[tuple[str, str, str, float], bool] = {}
        #: keys the engine adds to the run's document (``mobility``, filled in when the run stops)
        self.report: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self, nursery: Any = None) -> None:
        await super().start(nursery)
        self.radio.start()  # at the fixed links' instant: the nodes placed, the radio links in range made
        await self.net.run_until(self.net.now)

    async def stop(self) -> None:
        self.report["mobility"] = self.mobility_report()
        await super().stop()
        if self.radio.log is not None:
            self.radio.log.close()

    async def abort(self, exc: BaseException) -> None:
        await super().abort(exc)
        if self.radio.log is not None:
            self.radio.log.close()

    # ------------------------------------------------------------------ radio links and faults

    def _blocked(self, a: str, b: str) -> bool:
        sides = self.sides
        split = sides is not None and a in sides and b in sides and sides[a] != sides[b]
        return split or frozenset((a, b)) in self.apart

    def _cut_radio(self, lid: int, reason: str) -> None:
        """Cut a radio peering; a paused end is frozen: it learns of it on resume."""
        ends = self.net.links.get(lid)
        frozen = next((e.node for e in ends or () if e.node in self.paused), None)
        port = self.net.disconnect(lid, reason, frozen=frozen)
        if frozen is not None and port is not None:
            self.paused[frozen].append((port, self.net.now))

    async def restart(self, name: str) -> None:
        await super().restart(name)
        self.radio.reconcile()

    async def resume(self, name: str) -> None:
        await super().resume(name)
        self.radio.reconcile()

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: Any = None) -> None:  # fmt: skip
        await super().add_node(name, peers, link_class, adversary, variant)
        self.radio.reconcile()

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        out = await super().partition(groups)
        if self.planted_bug != "ignore_partition":
            self.sides = {n: gi for gi, g in enumerate(groups) for n in g}
        _, cut = self.radio.reconcile("partition")
        return _pairs(out, cut)

    async def heal(self) -> list[tuple[str, str]]:
        out = await super().heal()
        self.sides = None
        made, _ = self.radio.reconcile()
        return _pairs(out, made)

    def _in_range(self, a: str, b: str) -> bool:
        return any({x, y} == {a, b} for x, y, _ in self.radio.graph.links or ())

    async def link_down(self, a: str, b: str) -> bool:
        fixed = await super().link_down(a, b)
        if not self._in_range(a, b):
            return fixed
        self.apart.add(frozenset((a, b)))
        self.radio.reconcile()
        return True

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        pair = frozenset((a, b))
        if pair in self.apart:
            self.apart.discard(pair)
            self.radio.reconcile()
            if not self._specs_between(a, b):
                return True  # joined by radio only: no fixed link to make
        return await super().link_up(a, b, link_class)

    # ------------------------------------------------------------------ the mobility step

    async def mobility(self, step: Any) -> str | None:
        assert isinstance(step, Mobility)
        said: list[str] = []
        t = self.radio.mover_time(self.net.now)
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

    # ------------------------------------------------------------------ what the checker reads

    def moved_since(self, since: float) -> set[str]:
        recent = {n for n, t in self.radio.changed_at.items() if t > since}
        if not recent:
            return set()
        out: set[str] = set()
        for comp in nx.connected_components(self.live_graph()):
            if comp & recent:
                out |= comp
        return out

    def _start_ping(self, a: str, b: str, mode: str, now: float, timeout_s: float, background: bool = False) -> bool:
        ok = super()._start_ping(a, b, mode, now, timeout_s, background)
        if ok and background:
            g = self.live_graph()
            self._sent_connected[(a, b, mode, now)] = a in g and b in g and nx.has_path(g, a, b)
        return ok

    def delivery(self) -> dict[str, Any]:
        """The background pings by whether their pair was connected when they were sent."""
        out = {"connected": {"sent": 0, "delivered": 0}, "disconnected": {"sent": 0, "delivered": 0}}
        for x in self.traffic_samples():
            row = out["connected" if self._sent_connected.get((x.a, x.b, x.mode, x.t)) else "disconnected"]
            row["sent"] += 1
            row["delivered"] += x.delivered
        return out

    def mobility_report(self) -> dict[str, Any]:
        """The run document's ``mobility`` key."""
        return {**self.radio.report(), "moved_s": round(self.radio.moved_s(), 3),
                "components": nx.number_connected_components(self.live_graph()), "delivery": self.delivery()}


def _pairs(fixed: list[tuple[str, str]], radio: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """The fixed links' pairs, then the radio links' pairs not among them."""
    seen = {frozenset(p) for p in fixed}
    out = list(fixed)
    for a, b, _ in radio:
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            out.append((a, b))
    return out


def _speed(speed: tuple[float, float]) -> str:
    return f"{speed[0]:g} m/s" if speed[0] == speed[1] else f"{speed[0]:g}-{speed[1]:g} m/s"
