"""Moving nodes on Docker: a :class:`~orchestrator.model.mobility_spec.World`'s movers on the wall clock, their radio
links made and cut as peerings through the nodes' admin APIs (docs/mobility.md, "On Docker").

Every carrier of a radio is on that radio's own Docker network from the start (``AddressPlan.radios``: one shared
segment per radio, as the medium is shared), and its node is told the radio's class and shape for connections from
that segment (``--inbound tcp://SUBNET?class=..``). No peering exists on it until the nodes come within range:

* a radio link **up** is ``POST /peers`` on its dialer (the smaller name, as for a fixed link) to the listener's
  address on the segment, the URI carrying the radio's class and its whole shape (applied by the nodes' transport:
  the kernel cannot shape one pair on a shared segment);
* a radio link **down** is ``DELETE /peers/PORT`` of that peering on the dialer: it closes at once (the listener
  sees EOF) and is not redialled.

:class:`DockerRadioLinks` is :class:`~orchestrator.backends.radio_links.MovingRadios` with that network: the same
world, seed and tick give the same sequence of link changes as in process, since each tick moves the nodes to where
they are at its scheduled instant. :meth:`DockerRadioLinks.run` (a trio task) runs the ticks on ``time.monotonic``
and carries out each tick's changes, downs before ups, pairs concurrently; the **effect delay** of each change is
from the instant it was scheduled for to the admin API's answer that it is done (the peering up, or closed), its
p50 and p99 in :meth:`DockerRadioLinks.report`. Loss over distance is not applied on Docker (the radio's class
shape is); the report says so.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from contract.links import LinkClass

from orchestrator.backends.docker_net import AddressPlan
from orchestrator.backends.docker_observe import AdminClient, AdminError
from orchestrator.backends.docker_plan import NODE_PEER_PORT, radio_query
from orchestrator.backends.radio_links import MobilityLog, MovingRadios
from orchestrator.model.mobility_spec import World
from orchestrator.model.radio_graph import Radio, RadioLink
from orchestrator.model.topology import Topology

__all__ = ["DockerRadioLinks", "POLL_S", "UP_TIMEOUT_S", "percentile"]

#: how often the ticks' loop looks at the clock (a tick is late by at most this, plus its changes' time)
POLL_S = 0.02
#: how long ``POST /peers`` waits for the peering to come up before answering "dialing"
UP_TIMEOUT_S = 3.0
#: changes carried out at once (admin API calls in threads)
CONCURRENCY = 16


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class _Peering:
    """A radio link made on Docker: ``dialer`` dials ``uri`` (the listener's address on the radio's segment)."""

    dialer: str
    listener: str
    uri: str
    port: int | None = None


class DockerRadioLinks(MovingRadios):
    """Moves ``world``'s nodes on the wall clock and keeps their radio peerings as the radio graph says, through
    ``admin`` (the run's nodes' admin APIs), on the radios' segments of ``plan``."""

    def __init__(self, world: World, classes: Mapping[str, LinkClass], log: MobilityLog | None, *,
                 topology: Topology, plan: AddressPlan, admin: AdminClient,
                 available: Callable[[str], bool] | None = None,
                 blocked: Callable[[str, str], bool] | None = None) -> None:  # fmt: skip
        super().__init__(world, classes, log, available=available, blocked=blocked)
        self.plan, self.admin = plan, admin
        self.queries = {name: radio_query(topology, name) for name in plan.radios}
        self.peerings_made: dict[int, _Peering] = {}
        self._ids = itertools.count(1)
        self._due: list[tuple[float, int, Callable[[float], None]]] = []
        self._tie = itertools.count()
        self._ops: list[tuple[str, _Peering, float]] = []  # (up | down, peering, scheduled instant)
        self._scheduled: float | None = None  # the instant the tick being run was scheduled for
        self._in_flight = 0
        self.delays: dict[str, list[float]] = {"up": [], "down": []}
        self.late_s: list[float] = []  # how late each tick started
        self.failures: list[str] = []

    # ------------------------------------------------------------------ MovingRadios on Docker

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._due, (t, next(self._tie), fn))

    def connect(self, link: RadioLink, radio: Radio, loss_pct: int) -> int | None:
        a, b, name = link
        seg = self.plan.radios[name]
        listener = max(a, b)
        lid = next(self._ids)
        p = _Peering(min(a, b), listener, f"tcp://{seg.members[listener]}:{NODE_PEER_PORT}?{self.queries[name]}")
        self.peerings_made[lid] = p
        self._ops.append(("up", p, self._when()))
        return lid

    def is_up(self, lid: int) -> bool:
        return lid in self.peerings_made

    def disconnect(self, lid: int, reason: str) -> None:
        p = self.peerings_made.pop(lid, None)
        if p is not None:
            self._ops.append(("down", p, self._when()))

    def reshape(self, lid: int, radio: Radio, loss_pct: int) -> None:
        """Loss over distance is not applied on Docker (the radio's class shape is): nothing to do."""

    def _when(self) -> float:
        return self._scheduled if self._scheduled is not None else self.now()

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Run the ticks as they fall due and carry out the changes (also those a step or a fault made meanwhile)
        until cancelled."""
        limiter = trio.CapacityLimiter(CONCURRENCY)
        while True:
            while self._due and self._due[0][0] <= self.now():
                t, _, fn = heapq.heappop(self._due)
                self.late_s.append(self.now() - t)
                self._scheduled = t
                try:
                    fn(t)
                finally:
                    self._scheduled = None
            if self._ops:
                ops, self._ops = self._ops, []
                self._in_flight = len(ops)
                try:
                    await self._carry_out(ops, limiter)
                finally:
                    self._in_flight = 0
            await trio.sleep(POLL_S)

    async def _carry_out(self, ops: list[tuple[str, _Peering, float]], limiter: trio.CapacityLimiter) -> None:
        """Each pair's changes in order, the pairs at once (downs first within a tick: RadioGraph's order)."""
        by_pair: dict[tuple[str, str], list[tuple[str, _Peering, float]]] = {}
        for op in ops:
            by_pair.setdefault((op[1].dialer, op[1].listener), []).append(op)

        async def pair(changes: list[tuple[str, _Peering, float]]) -> None:
            for kind, p, scheduled in changes:
                async with limiter:
                    ok = await trio.to_thread.run_sync(self._up if kind == "up" else self._down, p)
                if ok:
                    self.delays[kind].append(self.now() - scheduled)

        async with trio.open_nursery() as nursery:
            for changes in by_pair.values():
                nursery.start_soon(pair, changes)

    def _up(self, p: _Peering) -> bool:
        """``POST /peers`` on the dialer; True once the peering is up."""
        try:
            got = self.admin.post(p.dialer, "/peers", {"uri": p.uri, "timeout_s": UP_TIMEOUT_S})
        except AdminError as exc:
            self.failures.append(f"up {p.dialer}->{p.listener}: {exc}")
            return False
        if got.get("status") != "connected":
            self.failures.append(f"up {p.dialer}->{p.listener}: not up within {UP_TIMEOUT_S:g} s ({got.get('status')}, "
                                 f"{got.get('last_error')})")
            return False
        p.port = int(got["port"])
        return True

    def _down(self, p: _Peering) -> bool:
        """``DELETE /peers/PORT`` of the peering on the dialer (its port looked up again if it reconnected);
        True once it is closed."""
        try:
            port = p.port
            if port is None or self.admin.delete(p.dialer, f"/peers/{port}") is None:
                port = next((int(x["port"]) for x in self.admin.state(p.dialer).get("peers", [])
                             if x.get("remote") == p.uri), None)
                if port is None or self.admin.delete(p.dialer, f"/peers/{port}") is None:
                    self.failures.append(f"down {p.dialer}->{p.listener}: no peering to close")
                    return False
        except AdminError as exc:
            self.failures.append(f"down {p.dialer}->{p.listener}: {exc}")
            return False
        return True

    @property
    def busy(self) -> bool:
        """Changes asked for and not carried out yet."""
        return bool(self._ops) or self._in_flight > 0

    # ------------------------------------------------------------------ what it measured

    def made_links(self) -> list[RadioLink]:
        """The radio links made now (their peerings asked for and not cut)."""
        made = set(self.peerings_made)
        return sorted(link for link, lid in self.peerings.items() if lid in made)

    def peered_now(self, names: list[str]) -> set[RadioLink]:
        """The radio peerings the nodes ``names`` list now, read from their admin APIs (either end's listing
        counts): what is really up. A peering's remote address is on a radio's segment."""
        on_radio = {ip: (radio, node) for radio, seg in self.plan.radios.items() for node, ip in seg.members.items()}
        out: set[RadioLink] = set()
        for name, doc in self.admin.states(names).items():
            for x in (doc or {}).get("peers", []):
                host = str(x.get("remote") or "").removeprefix("tcp://").split("?")[0].rsplit(":", 1)[0]
                if host in on_radio:
                    radio, other = on_radio[host]
                    a, b = sorted((name, other))
                    out.add((a, b, radio))
        return out

    def report(self) -> dict[str, Any]:
        def ms(values: list[float], q: float) -> float | None:
            v = percentile(values, q)
            return None if v is None else round(v * 1000, 1)

        both = self.delays["up"] + self.delays["down"]
        return {**super().report(), "effect_ms": {
            "changes": len(both), "p50": ms(both, 50), "p99": ms(both, 99), "max": ms(both, 100),
            "up_p50": ms(self.delays["up"], 50), "up_p99": ms(self.delays["up"], 99),
            "down_p50": ms(self.delays["down"], 50), "down_p99": ms(self.delays["down"], 99),
            "tick_late_p99": ms(self.late_s, 99),
            "mean_ms": None if not both else round(statistics.fmean(both) * 1000, 1)},
            "failed_changes": len(self.failures), "failures": self.failures[:10],
            "unapplied": [r.name for r in self.world.radios if r.loss_edge_pct]}  # loss over distance: not on Docker
