"""The Docker chaos backend for a topology whose nodes move (docs/mobility.md, "On Docker").

:class:`MobileDockerChaos` is :class:`~orchestrator.chaos.docker_backend.DockerChaos` with the topology's movement
running on the wall clock from the moment the run is up (orchestrator.backends.docker_mobility.DockerRadioLinks:
radio peerings made and closed through the nodes' admin APIs as the radio graph says), the ``mobility`` step and
what the checker reads while nodes move (orchestrator.chaos.mobility_steps), and faults meeting radio links as in
process (orchestrator.chaos.radio_faults; a resumed node's radio peerings are made again:
DockerRadioLinks.renew). Its live graph is the fixed links' and the radio links made.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx
import trio

from contract.links import LinkClass

from orchestrator.backends.docker_mobility import DockerRadioLinks
from orchestrator.backends.radio_links import MobilityLog
from orchestrator.chaos.docker_backend import DockerChaos
from orchestrator.chaos.mobility_steps import MovementSteps
from orchestrator.chaos.radio_faults import RadioFaults
from orchestrator.model.mobility_spec import World
from orchestrator.model.runs import RunDir
from orchestrator.model.topology import Topology

__all__ = ["MobileDockerChaos"]


class MobileDockerChaos(RadioFaults, MovementSteps, DockerChaos):
    """DockerChaos whose topology's nodes move (``world``; ``radio_classes``: each radio's link class)."""

    def __init__(self, topology: Topology, run: RunDir, *, world: World, radio_classes: Mapping[str, LinkClass],
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(topology, run, **kw)
        self.init_movement(topology, world)
        self.init_radio_faults()
        self.radio_classes = dict(radio_classes)
        self.radio: DockerRadioLinks | None = None  # type: ignore[assignment]  # made once the run is up
        self._moving: trio.CancelScope | None = None

    async def start(self, nursery: trio.Nursery | None = None) -> None:
        await super().start(nursery)
        assert self.plan is not None and self._admin is not None and nursery is not None
        log = MobilityLog(Path(self.run.path), self.run.run_id, time.time() - time.monotonic())
        self.run.update_meta(mobility=self.world.meta())
        self.radio = DockerRadioLinks(self.world, self.radio_classes, log, topology=self.topology, plan=self.plan,
                                      admin=self._admin, available=lambda n: n in self._live(),
                                      blocked=self.blocked, reachable=lambda n: n in self._live(),
                                      gone=lambda n: n in self.stopped or n in self.removed)  # fmt: skip
        self.radio.start()
        self._moving = trio.CancelScope()
        nursery.start_soon(self._move, self._moving)
        while self.radio.busy:  # the links in range at the start made before the scenario's first step
            await trio.sleep(0.05)

    def planted_fault(self) -> str | None:
        return self.planted

    def has_fixed_link(self, a: str, b: str) -> bool:
        return bool(self._links_between(a, b))

    def _radio_back(self, name: str) -> None:
        if self.radio is not None:
            self.radio.renew(name)
        super()._radio_back(name)

    async def _move(self, scope: trio.CancelScope) -> None:
        assert self.radio is not None
        with scope:
            await self.radio.run()

    async def stop(self) -> None:
        await self._stop_moving()
        await super().stop()

    async def abort(self, exc: BaseException) -> None:
        await self._stop_moving()
        await super().abort(exc)

    async def _stop_moving(self) -> None:
        if self.radio is None:
            return
        self.radio.halt()
        if self._moving is not None:
            self._moving.cancel()
        live = sorted(self._live())
        made = set(self.radio.made_links())
        losses = await trio.to_thread.run_sync(self.radio.peered_now, live)
        peered = set(losses)
        lossy = {r.name for r in self.world.radios if r.loss_edge_pct}  # loss over distance: what each end applies
        self.report["mobility"] = {**self.radio.report(), "moved_s": round(self.radio.moved_s(), 3),
                                   "components": nx.number_connected_components(self.live_graph()),
                                   "peered_at_end": {"made": len(made), "peered": len(peered),
                                                     "missing": sorted(map(list, made - peered))[:10],
                                                     "extra": sorted(map(list, peered - made))[:10],
                                                     "loss_pct": {f"{a}--{b} {r}": ends for (a, b, r), ends
                                                                  in sorted(losses.items()) if r in lossy}}}  # fmt: skip
        # the radio links where the nodes stopped: what `snekbed status` and `ping` of a kept run judge with the
        # fixed links (DockerSession.radio_edges), as after `up`
        self.run.update_meta(mobility={**self.world.meta(), "radio_links_at_end": [list(x) for x in sorted(made)]})
        if self.radio.log is not None:
            self.radio.log.close()

    def live_graph(self) -> nx.Graph:
        g = super().live_graph()
        if self.radio is not None:
            g.add_edges_from((a, b) for a, b, _ in self.radio.made_links() if a in g and b in g)
        return g
