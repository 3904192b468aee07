"""Moving nodes in process: a :class:`~orchestrator.model.mobility_spec.World`'s movers on an
:class:`~orchestrator.backends.inproc.InprocNetwork`'s virtual clock (docs/mobility.md).

:class:`RadioLinks` asks every mover where its node is every ``tick_s`` of protocol time (``InprocNetwork.call_at``)
for the world's ``duration_s``, steps the radio graph (orchestrator.model.radio_graph) and makes each radio link
that comes up as a peering of its radio's link class (``InprocNetwork.connect``, shaped as a fixed link of that
class is: netem's userspace shaper) and cuts each that goes down (``InprocNetwork.disconnect``, reason
``link_down``). A radio with loss over distance reshapes its links (``InprocNetwork.reshape``) when the loss, in
whole percent, changes. What moved and which links changed can be written to ``mobility.jsonl``
(:class:`MobilityLog`, contract.mobility).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from contract.links import LinkClass, LinkShape, link_type_number
from contract.mobility import MOBILITY_FILE
from netem.userspace import shaper_factory

from orchestrator.backends.inproc import InprocNetwork
from orchestrator.model.mobility import Point, distance
from orchestrator.model.mobility_spec import World
from orchestrator.model.radio_graph import LinkChange, Radio, RadioGraph, RadioLink, combined_loss_pct

__all__ = ["MobilityLog", "RadioLinks"]


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

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class RadioLinks:
    """Moves ``world``'s nodes on ``net`` and keeps its radio links as the radio graph says.

    ``classes``: each radio's link class (resolved with the topology's overrides). Counters for the run's
    report: ``link_ups`` and ``link_downs`` (radio graph changes after the start, made or not), ``refused`` (ups
    the network did not make a peering for), ``travelled_m`` (every node's path, summed over the ticks)."""

    def __init__(self, net: InprocNetwork, world: World, classes: Mapping[str, LinkClass],
                 log: MobilityLog | None = None) -> None:
        self.net, self.world, self.log = net, world, log
        self.radios: dict[str, Radio] = {r.name: r for r in world.radios}
        self.classes = dict(classes)
        self.graph = RadioGraph(world.radios)
        self.peerings: dict[RadioLink, int | None] = {}  # radio link -> the network's link id (None: refused)
        self._loss: dict[RadioLink, int] = {}  # the distance loss a link is shaped with now (whole percent)
        self._where: dict[str, Point] = {}
        self.link_ups = self.link_downs = self.refused = 0
        self.travelled_m = 0.0
        self.t0 = math.nan
        self.last_tick = 0

    @property
    def end_s(self) -> float:
        """When the movement stops (protocol time)."""
        return self.t0 + self.world.duration_s

    def start(self) -> None:
        """Place every node and make the radio links at the network's current time; the ticks follow."""
        self.t0 = self.net.now
        self.last_tick = int(self.world.duration_s / self.world.tick_s + 1e-9)
        self._move(self.t0, 0)

    def _move(self, now: float, k: int) -> None:
        """Tick ``k``: every node to where its mover says, the radio links after them."""
        t = now - self.t0
        positions = {name: mover.position(t) for name, mover in self.world.movers.items()}
        for name, at in positions.items():
            before = self._where.get(name)
            if before != at:
                if before is not None:
                    self.travelled_m += distance(before, at)
                if self.log is not None:
                    self.log.position(name, at, now)
        self._where = positions
        for change in self.graph.step(positions):
            self._apply(change, k, now)
        self._reshape(positions)
        if k < self.last_tick:
            self.net.call_at(self.t0 + (k + 1) * self.world.tick_s, lambda at, k=k + 1: self._move(at, k))

    def _options(self, radio: Radio, loss_pct: int) -> dict[str, Any]:
        """``connect``'s options for a link of ``radio`` with ``loss_pct`` added by distance (as sim.link_options
        shapes a fixed link: a peering is a reliable stream, so a lost segment arrives late, not never)."""
        cls = self.classes[radio.name]
        shape = cls.shape
        if loss_pct:
            shape = LinkShape.model_validate({**shape.model_dump(),
                                              "loss_pct": combined_loss_pct(shape.loss_pct, loss_pct)})
        opts: dict[str, Any] = {"link_type": link_type_number(cls)}
        if shape != LinkShape():
            opts["shaper"] = shaper_factory(shape, loss_mode="retransmit")
            opts["sized"] = shape.rate_mbit is not None
        return opts

    def _apply(self, change: LinkChange, k: int, now: float) -> None:
        radio = self.radios[change.radio]
        cls = radio.link_class
        if change.up:
            loss = round(radio.loss_pct(change.distance_m or 0.0))
            lid = self.net.connect(change.a, change.b, cls, **self._options(radio, loss))
            self.peerings[change.link] = lid
            if lid is not None and radio.loss_edge_pct:
                self._loss[change.link] = loss
            self.link_ups += k > 0
            self.refused += lid is None
            made = lid is not None
        else:
            lid = self.peerings.pop(change.link, None)
            self._loss.pop(change.link, None)
            made = lid is not None and lid in self.net.links
            if made:
                self.net.disconnect(lid, "link_down")
            self.link_downs += 1
        if self.log is not None:
            self.log.link(change, cls, made, now)

    def _reshape(self, positions: Mapping[str, Point]) -> None:
        """Links whose loss over distance moved to another whole percent get a shaper of the new loss."""
        for link, loss in list(self._loss.items()):
            a, b, name = link
            radio = self.radios[name]
            lid = self.peerings.get(link)
            if lid is None or lid not in self.net.links:
                continue
            now_loss = round(radio.loss_pct(distance(positions[a], positions[b])))
            if now_loss != loss:
                opts = self._options(radio, now_loss)
                self.net.reshape(lid, radio.link_class, opts.get("shaper"), opts.get("sized", False))
                self._loss[link] = now_loss

    def mean_speed_mps(self) -> float:
        """Every placed node's path over the time moved so far, averaged over the nodes (pauses and static
        nodes count as standing still)."""
        moved_s = min(self.net.now, self.end_s) - self.t0
        if not self.world.movers or not moved_s > 0:
            return 0.0
        return self.travelled_m / len(self.world.movers) / moved_s

    def report(self) -> dict[str, Any]:
        """The ``mobility`` key of ``snekbed sim --json``."""
        return {
            "model": self.world.model,
            "nodes": len(self.world.movers),
            "radios": sorted(self.radios),
            "tick_s": self.world.tick_s,
            "duration_s": self.world.duration_s,
            "link_ups": self.link_ups,
            "link_downs": self.link_downs,
            "peerings_refused": self.refused,
            "radio_links": len(self.graph.links or ()),
            "mean_speed_mps": round(self.mean_speed_mps(), 4),
        }
