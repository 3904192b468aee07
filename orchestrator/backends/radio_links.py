"""Nodes that move and the radio links between them, on any network (docs/mobility.md).

:class:`MovingRadios` asks every mover where its node is every ``tick_s`` (on the run's clock) for the world's
``duration_s``, steps the radio graph (orchestrator.model.radio_graph) and makes each radio link that comes up and
cuts each that goes down, through what a subclass gives: the clock and the links
(orchestrator.backends.inproc_mobility.RadioLinks: the in-process network on its virtual clock;
orchestrator.backends.docker_mobility.DockerRadioLinks: containers' peerings through their admin APIs, on the wall
clock). A radio with loss over distance reshapes its links when the loss, in whole percent, changes. What moved
and which links changed can be written to ``mobility.jsonl`` (:class:`MobilityLog`, contract.mobility).

Each tick moves the nodes to where they are at the tick's scheduled time, however late it runs: the same world and
seed give the same sequence of link changes on every network.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from contract.links import LinkClass, LinkShape
from contract.mobility import MOBILITY_FILE

from orchestrator.model.mobility import Mover, Point, distance
from orchestrator.model.mobility_spec import World
from orchestrator.model.radio_graph import LinkChange, Radio, RadioGraph, RadioLink, combined_loss_pct

__all__ = ["MobilityLog", "MovingRadios", "radio_shape"]


def radio_shape(link_class: LinkClass, loss_pct: float) -> LinkShape:
    """The shape of a radio link of ``link_class`` with ``loss_pct`` added by distance (Radio.loss_pct, in whole
    percent as MovingRadios rounds it): the class's shape, its loss and the distance's combined as two independent
    losses (radio_graph.combined_loss_pct), to 6 decimals (8.0, not 7.9999999999999964, in a node's /state). The
    same on every network (in process and on Docker)."""
    shape = link_class.shape
    if not loss_pct:
        return shape
    loss = round(combined_loss_pct(shape.loss_pct, loss_pct), 6)
    return LinkShape.model_validate({**shape.model_dump(), "loss_pct": loss})


class MobilityLog:
    """``mobility.jsonl`` of a run directory (contract.mobility): one line per position and link change."""

    def __init__(self, root: Path, run_id: str, wall_offset_s: float) -> None:
        self.run_id, self.wall_offset_s = run_id, wall_offset_s
        self._f: IO[str] | None = open(root / MOBILITY_FILE, "w", encoding="utf-8")

    def _line(self, now: float, kind: str, **fields: Any) -> None:
        if self._f is None:
            return
        obj = {"run_id": self.run_id, "mono_s": round(now, 6), "wall_ts": round(self.wall_offset_s + now, 6),
               "kind": kind, "node": None, "x_m": None, "y_m": None, "a": None, "b": None, "radio": None,
               "link_class": None, "distance_m": None, "cause": None, "made": None}
        obj.update(fields)
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def position(self, node: str, at: Point, now: float) -> None:
        self._line(now, "position", node=node, x_m=round(at[0], 6), y_m=round(at[1], 6))

    def link(self, change: LinkChange, link_class: str, made: bool, now: float) -> None:
        self._line(now, "link_up" if change.up else "link_down", a=change.a, b=change.b, radio=change.radio,
                   link_class=link_class, distance_m=change.distance_m, cause=change.cause, made=made)

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class MovingRadios:
    """Moves ``world``'s nodes and keeps its radio links as the radio graph says, on a network a subclass knows:
    it gives the clock (:meth:`now`, :meth:`call_at`) and makes, cuts and reshapes links (:meth:`connect`,
    :meth:`is_up`, :meth:`disconnect`, :meth:`reshape`); orchestrator.backends.inproc_mobility.RadioLinks in
    process, orchestrator.backends.docker_mobility.DockerRadioLinks through the nodes' admin APIs.

    ``classes``: each radio's link class (resolved with the topology's overrides). Counters for the run's
    report: ``link_ups`` and ``link_downs`` (radio graph changes after the start, made or not), ``refused`` (ups
    the network did not make a peering for), ``travelled_m`` (every node's path, summed over the ticks).

    A chaos run (orchestrator.chaos.inproc_mobile) says more: ``available(node)`` (default: always) is false for a
    node that can take no new peering now (paused, dead); ``blocked(a, b)`` (default: never) is true for a pair a
    fault keeps apart (a partition, a link_down); ``cut(link_id, reason)`` cuts a peering (default
    :meth:`disconnect`). A radio link is made only while both ends are available and the pair is not
    blocked; :meth:`reconcile` makes and cuts peerings after such a fault. :meth:`halt` and :meth:`resume` switch the
    movement off and on (the movers' time stands still in between), :meth:`replace` gives a node a new mover, and
    :meth:`move_now` moves the nodes at once after a change. ``changed_at``: when each node last gained or lost a
    radio link by moving (protocol time)."""

    def __init__(self, world: World, classes: Mapping[str, LinkClass], log: MobilityLog | None = None, *,
                 available: Callable[[str], bool] | None = None, blocked: Callable[[str, str], bool] | None = None,
                 cut: Callable[[int, str], None] | None = None) -> None:
        self.world, self.log = world, log
        self.radios: dict[str, Radio] = {r.name: r for r in world.radios}
        self.classes = dict(classes)
        self.movers: dict[str, Mover] = dict(world.movers)
        self.graph = RadioGraph(world.radios)
        self.peerings: dict[RadioLink, int | None] = {}  # radio link -> the network's link id (None: not made)
        self._loss: dict[RadioLink, int] = {}  # the distance loss a link is shaped with now (whole percent)
        self._where: dict[str, Point] = {}
        self.available = available or (lambda name: True)
        self.blocked = blocked or (lambda a, b: False)
        self._cut = cut or self.disconnect
        self.changed_at: dict[str, float] = {}
        self.link_ups = self.link_downs = self.refused = 0
        self.travelled_m = 0.0
        self.t0 = math.nan
        self.running = False
        self.since = self.until = math.nan  # the current (or last) stretch of movement
        self._origin = math.nan  # protocol time at which the movers' time was 0 (moved on by every halt)
        self._halted_at = math.nan
        self._moved_s = 0.0  # movement time of the stretches that ended
        self._gen = 0  # the current stretch's ticks (a halt leaves the scheduled ones stale)
        self.last_tick = 0

    # ------------------------------------------------------------------ what a subclass gives

    def now(self) -> float:
        """The run's clock (seconds)."""
        raise NotImplementedError

    def call_at(self, t: float, fn: Callable[[float], None]) -> None:
        """Call ``fn(t)`` at time ``t`` (``t``: the time it was scheduled for, however late it runs)."""
        raise NotImplementedError

    def connect(self, link: RadioLink, radio: Radio, loss_pct: int) -> int | None:
        """Make ``link`` (of ``radio``, with ``loss_pct`` added by distance); its id, None when it was refused."""
        raise NotImplementedError

    def is_up(self, lid: int) -> bool:
        """Whether the link ``lid`` is still there (a fault may have cut it: a killed node's links go with it)."""
        raise NotImplementedError

    def disconnect(self, lid: int, reason: str) -> None:
        """Cut the link ``lid``."""
        raise NotImplementedError

    def reshape(self, lid: int, radio: Radio, loss_pct: int) -> None:
        """Shape the link ``lid`` of ``radio`` with ``loss_pct`` added by distance now."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the movement

    @property
    def end_s(self) -> float:
        """When the movement stops (protocol time)."""
        return self.until

    def mover_time(self, now: float) -> float:
        """The movers' time at protocol time ``now``: the seconds moved since the start, halts left out."""
        return (self._halted_at if not self.running else now) - self._origin

    def start(self) -> None:
        """Place every node and make the radio links at the network's current time; the ticks follow. The clock is
        read once: on the wall clock two reads differ, and every tick's movers' time would be off by that much (a
        distance exactly on a threshold, or on a half percent of loss, would round otherwise than in process)."""
        now = self.now()
        self.t0 = self._origin = now
        self._stretch(now, self.world.duration_s)

    def _stretch(self, since: float, duration_s: float) -> None:
        """Movement from ``since`` for ``duration_s``: a tick at once and every ``tick_s`` after."""
        self._gen += 1
        self.running, self.since, self.until = True, since, since + duration_s
        self.last_tick = int(duration_s / self.world.tick_s + 1e-9)
        self._tick(since, 0, self._gen)

    def _tick(self, now: float, k: int, gen: int) -> None:
        if gen != self._gen:
            return  # the movement was halted (or restarted) since this tick was scheduled
        self._move(now)
        if k < self.last_tick:
            self.call_at(self.since + (k + 1) * self.world.tick_s, lambda at, k=k + 1: self._tick(at, k, gen))
        else:
            self._stop(now, self.until)

    def _stop(self, now: float, until: float) -> None:
        """The stretch ends: the nodes stand where they were put at ``now``, movement time counted to ``until``."""
        self._moved_s += until - self.since
        self.running, self._halted_at, self.until = False, now, until

    def halt(self) -> bool:
        """Stop the movement now: the nodes stand where they are (False when it was not running)."""
        if not self.running:
            return False
        self._gen += 1
        self._move(self.now())
        self._stop(self.now(), self.now())
        return True

    def resume(self, duration_s: float) -> bool:
        """Move again from now for ``duration_s``, from where the nodes stood (False when it was running)."""
        if self.running:
            return False
        now = self.now()  # read once, as in start
        self._origin += now - self._halted_at
        self._stretch(now, duration_s)
        return True

    def replace(self, name: str, mover: Mover) -> None:
        """``name`` moves as ``mover`` says from now on (its time is the movers' time: :meth:`mover_time`)."""
        self.movers[name] = mover

    def where(self, name: str) -> Point:
        """Where ``name`` is now."""
        return self.movers[name].position(self.mover_time(self.now()))

    def move_now(self) -> None:
        """Put every node where its mover says now and make and cut the radio links after them (after a change)."""
        self._move(self.now())

    def _move(self, now: float) -> None:
        """Every node to where its mover says at ``now``, the radio links after them."""
        t = self.mover_time(now)
        first = not self._where
        positions = {name: mover.position(t) for name, mover in self.movers.items()}
        for name, at in positions.items():
            before = self._where.get(name)
            if before != at:
                if before is not None:
                    self.travelled_m += distance(before, at)
                if self.log is not None:
                    self.log.position(name, at, now)
        self._where = positions
        for change in self.graph.step(positions):
            self._apply(change, first, now)
        self._reshape(positions)
        if self.log is not None:
            self.log.flush()  # a tick's lines reach the file together (a live view tails it)

    def _wanted(self, a: str, b: str) -> bool:
        return self.available(a) and self.available(b) and not self.blocked(a, b)

    def _make(self, link: RadioLink, distance_m: float) -> int | None:
        a, b, name = link
        radio = self.radios[name]
        loss = round(radio.loss_pct(distance_m))
        lid = self.connect(link, radio, loss)
        self.peerings[link] = lid
        if lid is not None and radio.loss_edge_pct:
            self._loss[link] = loss
        return lid

    def _apply(self, change: LinkChange, start: bool, now: float) -> None:
        cls = self.radios[change.radio].link_class
        if not start:
            self.changed_at[change.a] = self.changed_at[change.b] = now
        if change.up:
            made = False
            if self._wanted(change.a, change.b):
                made = self._make(change.link, change.distance_m or 0.0) is not None
                self.refused += not made
            else:
                self.peerings[change.link] = None
            self.link_ups += not start
        else:
            lid = self.peerings.pop(change.link, None)
            self._loss.pop(change.link, None)
            made = lid is not None and self.is_up(lid)
            if made:
                self._cut(lid, "link_down")
            self.link_downs += 1
        if self.log is not None:
            self.log.link(change, cls, made, now)

    def reconcile(self, reason: str = "link_down") -> tuple[list[RadioLink], list[RadioLink]]:
        """After a fault: make the peering of every radio link in range whose ends are available and not blocked
        and that has none, and cut (``reason``) every peering that is no longer wanted. Returns (made, cut)."""
        made: list[RadioLink] = []
        cut: list[RadioLink] = []
        for link in sorted(self.graph.links or ()):
            a, b, _ = link
            lid = self.peerings.get(link)
            have = lid is not None and self.is_up(lid)
            if self._wanted(a, b) and not have:
                if self._make(link, distance(self._where[a], self._where[b])) is not None:
                    made.append(link)
            elif have and not self._wanted(a, b):
                self._cut(lid, reason)  # type: ignore[arg-type]  # have: lid is a live link's
                self.peerings[link] = None
                self._loss.pop(link, None)
                cut.append(link)
        return made, cut

    def _reshape(self, positions: Mapping[str, Point]) -> None:
        """Links whose loss over distance moved to another whole percent get a shaper of the new loss."""
        for link, loss in list(self._loss.items()):
            a, b, name = link
            radio = self.radios[name]
            lid = self.peerings.get(link)
            if lid is None or not self.is_up(lid):
                continue
            now_loss = round(radio.loss_pct(distance(positions[a], positions[b])))
            if now_loss != loss:
                self.reshape(lid, radio, now_loss)
                self._loss[link] = now_loss

    def moved_s(self) -> float:
        """Seconds the movement has run so far (halts left out)."""
        return self._moved_s + (min(self.now(), self.until) - self.since if self.running else 0.0)

    def mean_speed_mps(self) -> float:
        """Every placed node's path over the time moved so far, averaged over the nodes (pauses and static
        nodes count as standing still)."""
        moved_s = self.moved_s()
        if not self.movers or not moved_s > 0:
            return 0.0
        return self.travelled_m / len(self.movers) / moved_s

    def report(self) -> dict[str, Any]:
        """The ``mobility`` key of ``snekbed sim --json``."""
        return {
            "model": "+".join(sorted({m.model for m in self.movers.values()})),
            "nodes": len(self.movers),
            "radios": sorted(self.radios),
            "tick_s": self.world.tick_s,
            "duration_s": self.world.duration_s,
            "link_ups": self.link_ups,
            "link_downs": self.link_downs,
            "peerings_refused": self.refused,
            "radio_links": len(self.graph.links or ()),
            "mean_speed_mps": round(self.mean_speed_mps(), 4),
        }
