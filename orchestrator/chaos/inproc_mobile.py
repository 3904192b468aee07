"""The in-process chaos backend for a topology whose nodes move (docs/mobility.md, "Chaos").

:class:`MobileInprocChaos` is :class:`~orchestrator.chaos.inproc_backend.InprocChaos` with the topology's movement
running on the same virtual clock (orchestrator.backends.inproc_mobility.RadioLinks): from the network's start the
nodes move every ``tick_s`` for the topology's ``movement.duration_s`` and radio links come and go as the radio
graph says, while the scenario's faults, traffic and checks run. How faults and radio links meet is
orchestrator.chaos.radio_faults' (both backends); here, a radio link with a paused end that goes out of range is
cut with the paused node frozen: it learns of it on resume, as of a peer that timed it out.

The ``mobility`` step and ``moved_since`` (which components' links changed because nodes moved, so that the checker
judges only the ones that had time to re-converge: orchestrator.chaos.moving) are orchestrator.chaos.mobility_steps'.
Background pings are told apart by whether their pair was connected in the live graph when they were sent
(``mobility.delivery`` in the report).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from contract.links import LinkClass

from orchestrator.backends.inproc_mobility import MobilityLog, RadioLinks
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.mobility_steps import MovementSteps
from orchestrator.chaos.radio_faults import RadioFaults
from orchestrator.model.mobility_spec import World
from orchestrator.model.topology import Topology

__all__ = ["MobileInprocChaos"]


class MobileInprocChaos(RadioFaults, MovementSteps, InprocChaos):
    """InprocChaos whose topology's nodes move (``world``; ``radio_classes``: each radio's link class)."""

    moves = True

    def __init__(self, topology: Topology, *, world: World, radio_classes: Mapping[str, LinkClass],
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(topology, **kw)
        self.init_movement(topology, world)
        self.init_radio_faults()
        log = None
        if self.recorder is not None:
            self.recorder.meta["mobility"] = world.meta()
            log = MobilityLog(Path(self.recorder.root), self.recorder.run_id, self.recorder.wall_offset_s)
        self.radio = RadioLinks(self.net, world, radio_classes, log, available=self._live, blocked=self.blocked,
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

    def planted_fault(self) -> str | None:
        return self.planted_bug

    def has_fixed_link(self, a: str, b: str) -> bool:
        return bool(self._specs_between(a, b))

    def _cut_radio(self, lid: int, reason: str) -> None:
        """Cut a radio peering; a paused end is frozen: it learns of it on resume."""
        ends = self.net.links.get(lid)
        frozen = next((e.node for e in ends or () if e.node in self.paused), None)
        port = self.net.disconnect(lid, reason, frozen=frozen)
        if frozen is not None and port is not None:
            self.paused[frozen].append((port, self.net.now))

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
