"""Moving nodes on Docker: a :class:`~orchestrator.model.mobility_spec.World`'s movers on the wall clock, their radio
links made and cut as peerings through the nodes' admin APIs (docs/mobility.md, "On Docker").

Every carrier of a radio is on that radio's own Docker network from the start (``AddressPlan.radios``: one shared
segment per radio, as the medium is shared), and its node is told the radio's class and shape for connections from
that segment (``--inbound tcp://SUBNET?class=..``). No peering exists on it until the nodes come within range:

* a radio link **up** is ``POST /peers`` on its dialer (the smaller name, as for a fixed link) to the listener's
  address on the segment, the URI carrying the radio's class and its whole shape (applied by the nodes' transport:
  the kernel cannot shape one pair on a shared segment), dialled once (``"redial": false``): a peering that ends
  (its peer died, or timed it out while paused) is not dialled again, so a radio link is never redialled into a
  node's next life; only the radio graph makes it again;
* a radio link **down** is ``DELETE /peers/PORT?key=..&remote=..`` of that peering on the dialer: it closes at
  once (the listener sees EOF); conditional, so a port given to another peering since is left alone. A dead dialer took it with it; a paused one has it closed by the listener (its end, found in its
  /state), and one with both ends paused is held until either resumes. A resumed node's radio peerings are closed
  and made again (:meth:`DockerRadioLinks.renew`): its peers may have timed it out, or not, by a race of
  deadlines; made again, they are the same every time;
* a radio with **loss over distance** reshapes a link when its distance loss, in whole percent, changes (and once
  after the up when it is not 0): ``POST /peers/shape`` with ``"port"`` (that peering alone, not the pair's other
  peerings) on both ends, the whole shape named (:func:`~orchestrator.backends.radio_links.radio_shape`: the class's
  shape, its loss and the distance's combined, as in process). The dialer knows its port from the up; the
  listener's is the peering its ``GET /state`` lists with the dialer's key from the dialer's address on the radio's
  segment.

:class:`DockerRadioLinks` is :class:`~orchestrator.backends.radio_links.MovingRadios` with that network: the same
world, seed and tick give the same sequence of link changes as in process, since each tick moves the nodes to where
they are at its scheduled instant. :meth:`DockerRadioLinks.run` (a trio task) runs the ticks on ``time.monotonic``
and carries out each tick's changes as they are asked, downs before ups, each pair's in order, the pairs
concurrently (a tick does not wait for an earlier tick's changes); the **effect delay** of each change is
from the instant it was scheduled for to the admin API's answer that it is done (the peering up, or closed), its
p50 and p99 in :meth:`DockerRadioLinks.report` (with its parts: waiting for a thread, the call, back to the
loop), beside the reshapes asked, done and failed, and their delay. The links in range at the start are asked for
together before anything moves: their delay is a set-up's, reported apart (``start_ms``).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from contract.links import LinkClass

from orchestrator.backends.docker_net import AddressPlan
from orchestrator.backends.docker_observe import AdminClient, AdminError
from orchestrator.backends.docker_plan import NODE_PEER_PORT, radio_query
from orchestrator.backends.radio_links import MobilityLog, MovingRadios, radio_shape
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
#: how long a reshape looks for the listener's end of a peering just made (its /state lists it once it attached)
LISTENER_WAIT_S = 2.0
#: how soon ups that failed with both ends up are asked again (a reconcile: only those still wanted)
RETRY_S = 1.0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class _Peering:
    """A radio link of ``radio`` made on Docker: ``dialer`` dials ``uri`` (the listener's address on the radio's
    segment); once up, ``port`` and ``key`` are the dialer's port for it and the listener's key; ``listener_port``
    and ``dialer_key`` the other end's, once a reshape looked them up."""

    dialer: str
    listener: str
    uri: str
    radio: str = ""
    port: int | None = None
    key: str | None = None
    listener_port: int | None = None
    dialer_key: str | None = None
    failed: bool = False  # its up was not made (an end down, or an error): its reshapes are skipped


@dataclass(frozen=True)
class _Op:
    """A change to carry out: ``up``, ``down`` or ``shape`` (with ``loss_pct`` added by distance) of ``peering``,
    scheduled for ``scheduled``."""

    kind: str
    peering: _Peering
    scheduled: float
    loss_pct: int = 0
    lid: int = 0
    start: bool = False  # one of the links in range at the start, made before the movement begins


def _host(remote: object) -> str:
    """The host of a peering's ``remote`` as /state lists it (``tcp://HOST:PORT``, a dialled URI's query too)."""
    return str(remote or "").removeprefix("tcp://").split("?")[0].rsplit(":", 1)[0]


class DockerRadioLinks(MovingRadios):
    """Moves ``world``'s nodes on the wall clock and keeps their radio peerings as the radio graph says, through
    ``admin`` (the run's nodes' admin APIs), on the radios' segments of ``plan``."""

    def __init__(self, world: World, classes: Mapping[str, LinkClass], log: MobilityLog | None, *,
                 topology: Topology, plan: AddressPlan, admin: AdminClient,
                 available: Callable[[str], bool] | None = None,
                 blocked: Callable[[str, str], bool] | None = None,
                 reachable: Callable[[str], bool] | None = None,
                 gone: Callable[[str], bool] | None = None) -> None:  # fmt: skip
        """``reachable(node)``: its admin API answers (running, not paused; default: always); ``gone(node)``: it is
        dead or removed (default: never)."""
        super().__init__(world, classes, log, available=available, blocked=blocked)
        self.reachable = reachable or (lambda name: True)
        self.gone = gone or (lambda name: False)
        self.plan, self.admin = plan, admin
        self.queries = {name: radio_query(topology, name) for name in plan.radios}
        self.peerings_made: dict[int, _Peering] = {}
        self._ids = itertools.count(1)
        self._due: list[tuple[float, int, Callable[[float], None]]] = []
        self._tie = itertools.count()
        self._ops: list[_Op] = []
        self._pairs: dict[tuple[str, str], collections.deque[_Op]] = {}  # each pair's changes while it has a worker
        self._scheduled: float | None = None  # the instant the tick being run was scheduled for
        self._in_flight = 0  # changes queued or being carried out
        self.delays: dict[str, list[float]] = {"up": [], "down": []}
        #: each change done, its delay in three parts: (scheduled -> its call began, the call, answered -> seen)
        self.stages: dict[str, list[tuple[float, float, float]]] = {"up": [], "down": []}
        self.late_s: list[float] = []  # how late each tick started
        self._starting = False
        self.start_delays: list[float] = []  # of the links in range at the start (all asked at once)
        self.failures: list[str] = []
        self.reshapes_asked = 0
        self.reshape_delays: list[float] = []  # of the reshapes done (both ends answered)
        self.reshape_failures: list[str] = []
        self.reshapes_skipped = 0  # an end paused or dead when its turn came
        self.skipped: list[str] = []  # ups not asked: an end dead or paused when their turn came
        self.already_closed = 0  # downs of a peering that had ended (its node died, a peer timed it out)
        self._held: list[_Op] = []  # downs with both ends paused: carried out when either resumes (or dies)
        self._lock = threading.Lock()  # _held and the counters: ops run in threads
        self._retry_at: float | None = None  # when ups that failed with both ends up are asked again

    # ------------------------------------------------------------------ MovingRadios on Docker

    def now(self) -> float:
        return time.monotonic()

    def start(self) -> None:
        """MovingRadios.start: the links in range at the start are asked for together, before anything moves;
        their delay is reported apart from the changes' (``start_ms``), as a set-up, not a change."""
        self._starting = True
        try:
            super().start()
        finally:
            self._starting = False

    def call_at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self._due, (t, next(self._tie), fn))

    def connect(self, link: RadioLink, radio: Radio, loss_pct: int) -> int | None:
        a, b, name = link
        seg = self.plan.radios[name]
        listener = max(a, b)
        lid = next(self._ids)
        p = _Peering(min(a, b), listener, f"tcp://{seg.members[listener]}:{NODE_PEER_PORT}?{self.queries[name]}",
                     name)  # fmt: skip
        self.peerings_made[lid] = p
        self._ops.append(_Op("up", p, self._when(), lid=lid, start=self._starting))
        if loss_pct:  # the URI carries the class's shape: the distance's loss follows once it is up
            self._shape_later(p, loss_pct)
        return lid

    def is_up(self, lid: int) -> bool:
        return lid in self.peerings_made

    def disconnect(self, lid: int, reason: str) -> None:
        p = self.peerings_made.pop(lid, None)
        if p is not None:
            self._ops.append(_Op("down", p, self._when(), lid=lid))

    def reconcile(self, reason: str = "link_down") -> tuple[list[RadioLink], list[RadioLink]]:
        """MovingRadios.reconcile, after the downs held for paused ends are carried out again (an end may have
        died or resumed since)."""
        self._release_held()
        return super().reconcile(reason)

    def _release_held(self) -> None:
        """Queue again the downs held while both their ends were paused."""
        with self._lock:
            held, self._held = self._held, []
        self._ops.extend(held)

    def renew(self, name: str) -> int:
        """Close and make again every radio peering of ``name`` made now (it resumed: see the module's doc), and
        carry out the downs held (one may be its). Returns how many were renewed."""
        when = self._when()
        self._release_held()
        links = {lid: link for link, lid in self.peerings.items() if lid is not None}
        n = 0
        for lid, p in list(self.peerings_made.items()):
            if name in (p.dialer, p.listener):
                fresh = _Peering(p.dialer, p.listener, p.uri, p.radio)
                self.peerings_made[lid] = fresh
                self._ops += [_Op("down", p, when, lid=lid), _Op("up", fresh, when, lid=lid)]
                if self._loss.get(links.get(lid), 0):  # type: ignore[arg-type]
                    self._shape_later(fresh, self._loss[links[lid]])
                n += 1
        return n

    def reshape(self, lid: int, radio: Radio, loss_pct: int) -> None:
        p = self.peerings_made.get(lid)
        if p is not None:
            self._shape_later(p, loss_pct)

    def _shape_later(self, p: _Peering, loss_pct: int) -> None:
        self.reshapes_asked += 1
        self._ops.append(_Op("shape", p, self._when(), loss_pct))

    def _when(self) -> float:
        return self._scheduled if self._scheduled is not None else self.now()

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Run the ticks as they fall due and carry out the changes (also those a step or a fault made meanwhile)
        until cancelled. A tick's changes start at once, whatever is still in flight: each pair's changes in
        the order asked (a pair's down before its up, a link's reshape after its up), the pairs at once."""
        limiter = trio.CapacityLimiter(CONCURRENCY)
        async with trio.open_nursery() as nursery:
            while True:
                while self._due and self._due[0][0] <= self.now():
                    t, _, fn = heapq.heappop(self._due)
                    self.late_s.append(self.now() - t)
                    self._scheduled = t
                    try:
                        fn(t)
                    finally:
                        self._scheduled = None
                if self._retry_at is not None and self.now() >= self._retry_at:
                    self._retry_at = None
                    self.reconcile("retry")
                if self._ops:
                    ops, self._ops = self._ops, []
                    self._queue(ops, nursery, limiter)
                await trio.sleep(POLL_S)

    async def carry_out(self, ops: list[_Op], limiter: trio.CapacityLimiter | None = None) -> None:
        """Carry out ``ops`` as :meth:`run` does a tick's, and return once the workers started for them are done."""
        async with trio.open_nursery() as nursery:
            self._queue(ops, nursery, limiter or trio.CapacityLimiter(CONCURRENCY))

    def _queue(self, ops: list[_Op], nursery: trio.Nursery, limiter: trio.CapacityLimiter) -> None:
        """Append each change to its pair's queue, starting the pair's worker where none runs."""
        for op in ops:
            pair = (op.peering.dialer, op.peering.listener)
            queue = self._pairs.get(pair)
            if queue is None:
                queue = self._pairs[pair] = collections.deque()
                nursery.start_soon(self._carry_out, pair, queue, limiter)
            queue.append(op)
            self._in_flight += 1

    async def _carry_out(self, pair: tuple[str, str], queue: collections.deque[_Op],
                         limiter: trio.CapacityLimiter) -> None:  # fmt: skip
        """One pair's changes, in order, until its queue is empty (then the pair has no worker until the next)."""
        try:
            while queue:
                op = queue.popleft()
                try:
                    ok, started, answered = await trio.to_thread.run_sync(self._timed, op, limiter=limiter)
                finally:
                    self._in_flight -= 1
                self._done(op, ok, started, answered)
        finally:  # cancelled (the run ends): what was still queued is not carried out, nor counted in flight
            self._in_flight -= len(queue)
            del self._pairs[pair]

    def _done(self, op: _Op, ok: bool, started: float, answered: float) -> None:
        if not ok and op.kind == "up":
            op.peering.failed = True
            if self.peerings_made.get(op.lid) is op.peering:
                del self.peerings_made[op.lid]  # not made: a reconcile makes it again while wanted
            p = op.peering
            if self._retry_at is None and self.reachable(p.dialer) and self.reachable(p.listener):
                self._retry_at = self.now() + RETRY_S  # an error, not an end down: asked again soon
        if ok:
            now = self.now()
            if op.kind == "shape":
                self.reshape_delays.append(now - op.scheduled)
            elif op.start:
                self.start_delays.append(now - op.scheduled)
            else:
                self.delays[op.kind].append(now - op.scheduled)
                self.stages[op.kind].append((started - op.scheduled, answered - started, now - answered))

    def _timed(self, op: _Op) -> tuple[bool, float, float]:
        """``_do``, with when it began and when it came back."""
        started = self.now()
        return self._do(op), started, self.now()

    def _do(self, op: _Op) -> bool:
        if op.kind == "shape":
            return self._shape(op.peering, op.loss_pct)
        return self._up(op.peering) if op.kind == "up" else self._down(op.peering)

    def _up(self, p: _Peering) -> bool:
        """``POST /peers`` on the dialer, dialled once; True once the peering is up. Not asked when an end is
        dead or paused now (``skipped``: made when it is back)."""
        down = [n for n in (p.dialer, p.listener) if not self.reachable(n)]
        if down:
            self.skipped.append(f"up {p.dialer}->{p.listener}: {', '.join(down)} down or paused")
            return False
        try:
            got = self.admin.post(p.dialer, "/peers", {"uri": p.uri, "timeout_s": UP_TIMEOUT_S, "redial": False},
                                  timeout_s=UP_TIMEOUT_S + 2)  # the node's answer at UP_TIMEOUT_S is awaited
        except AdminError as exc:
            self.failures.append(f"up {p.dialer}->{p.listener}: {exc}")
            return False
        if got.get("status") != "connected":
            self.failures.append(f"up {p.dialer}->{p.listener}: not up within {UP_TIMEOUT_S:g} s ({got.get('status')}, "
                                 f"{got.get('last_error')})")
            return False
        p.port, p.key = int(got["port"]), str(got["key"])
        return True

    def _down(self, p: _Peering) -> bool:
        """Close the peering: ``DELETE /peers/PORT`` on the dialer, on the listener when the dialer is paused;
        nothing when the dialer is dead (it took the peering with it) or the peering had ended
        (``already_closed``); held when both ends are paused. The DELETE is conditional (``?key=..&remote=..``:
        the port the up answered, only if its peering still has the listener's key and dialled ``p.uri``; the
        listener's port as its /state lists the peering from the dialer's address): once that peering ended its
        port goes to the next peering (another pair's, or a restarted node's fixed link), which a plain DELETE
        would close for good. True once it is closed."""
        try:
            if self.gone(p.dialer):
                self._count("already_closed")
                return True
            if self.reachable(p.dialer):
                port, key = (p.port, p.key) if p.port is not None else self._dialer_port(p)
                gone = port is None or self.admin.delete(p.dialer, f"/peers/{port}",
                                                         {"key": str(key), "remote": p.uri}) is None  # fmt: skip
                if gone:
                    self._count("already_closed")  # dialled once: a peering that ended is gone for good
                return True
            if self.gone(p.listener):
                self._count("already_closed")  # the paused dialer reads EOF when it resumes
                return True
            if not self.reachable(p.listener):
                with self._lock:
                    self._held.append(_Op("down", p, self.now()))
                return False
            port, key = self._listener_port(p, wait=False)
            if port is None or self.admin.delete(p.listener, f"/peers/{port}", {"key": str(key)}) is None:
                self._count("already_closed")
        except AdminError as exc:
            self.failures.append(f"down {p.dialer}->{p.listener}: {exc}")
            return False
        return True

    def _shape(self, p: _Peering, loss_pct: int) -> bool:
        """``POST /peers/shape`` of this peering alone (``port``, with the other end's key) on both ends: the radio's
        class shape with ``loss_pct`` added (every field named, so the node's class table plays no part); True
        once both answered. A port no longer this peering's (it reconnected) is looked up again, once."""
        shaping = radio_shape(self.classes[p.radio], loss_pct).model_dump()
        what = f"reshape {p.dialer}->{p.listener} ({p.radio}, +{loss_pct} %)"
        if p.failed or not (self.reachable(p.dialer) and self.reachable(p.listener)):
            self._count("reshapes_skipped")  # a paused or dead end: renewed (with its distance's loss) when back
            return False
        if p.port is None:
            self.reshape_failures.append(f"{what}: the peering is not up")
            return False
        try:
            self._shape_end(p.dialer, (p.port, p.key), lambda: self._dialer_port(p), shaping)
            self._shape_end(p.listener, (p.listener_port, p.dialer_key), lambda: self._listener_port(p), shaping)
        except AdminError as exc:
            self.reshape_failures.append(f"{what}: {exc}")
            return False
        return True

    def _shape_end(self, node: str, known: tuple[int | None, str | None],
                   find: Callable[[], tuple[int | None, str | None]], shaping: dict[str, Any]) -> None:
        """Shape ``node``'s end of a peering: its (port, peer key) ``known``, else (or when the node refuses it:
        the peering reconnected on another port) as ``find`` reads them from its /state. Raises AdminError."""
        port, key = known
        for attempt in range(2):
            if port is None or attempt:
                port, key = find()
            if port is None:
                raise AdminError(f"{node}: no peering of this link in its /state")
            try:
                self.admin.post(node, "/peers/shape", {"port": port, "peer": key, "class": None, "shaping": shaping})
                return
            except AdminError:
                if attempt:
                    raise

    def _dialer_port(self, p: _Peering) -> tuple[int | None, str | None]:
        """The dialer's port and peer key for ``p`` now, from its /state (the peering dialled ``p.uri``, with the
        listener's key when known)."""
        x = next((x for x in self.admin.state(p.dialer).get("peers", []) if x.get("remote") == p.uri
                  and (p.key is None or x.get("key") == p.key)), None)  # fmt: skip
        if x is not None:
            p.port, p.key = int(x["port"]), str(x["key"])
        return (p.port, p.key) if x is not None else (None, None)

    def _count(self, counter: str) -> None:
        """Add one to a counter (ops run in several threads at once)."""
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)

    def _listener_port(self, p: _Peering, wait: bool = True) -> tuple[int | None, str | None]:
        """The listener's port and peer key for ``p``, from its /state: the peering from the dialer's address on
        the radio's segment (waiting up to LISTENER_WAIT_S for it: the dialer's answer may come first)."""
        dialer_ip = self.plan.radios[p.radio].members[p.dialer]
        deadline = self.now() + (LISTENER_WAIT_S if wait else 0.0)
        while True:
            peers = self.admin.state(p.listener).get("peers", [])
            x = next((x for x in peers if _host(x.get("remote")) == dialer_ip), None)
            if x is not None:
                p.listener_port, p.dialer_key = int(x["port"]), str(x["key"])
                return p.listener_port, p.dialer_key
            if self.now() >= deadline:
                return None, None
            time.sleep(0.05)

    @property
    def busy(self) -> bool:
        """Changes asked for and not carried out yet."""
        return bool(self._ops) or self._in_flight > 0

    # ------------------------------------------------------------------ what it measured

    def made_links(self) -> list[RadioLink]:
        """The radio links made now (their peerings asked for and not cut)."""
        made = set(self.peerings_made)
        return sorted(link for link, lid in self.peerings.items() if lid in made)

    def peered_now(self, names: list[str]) -> dict[RadioLink, dict[str, float]]:
        """The radio peerings the nodes ``names`` list now, read from their admin APIs (either end's listing
        counts): what is really up. A peering's remote address is on a radio's segment. Each with the loss its
        listing ends' shapers apply now (``loss_pct`` of /state's ``shape``, 0 for none), by node."""
        on_radio = {ip: (radio, node) for radio, seg in self.plan.radios.items() for node, ip in seg.members.items()}
        out: dict[RadioLink, dict[str, float]] = {}
        for name, doc in self.admin.states(names).items():
            for x in (doc or {}).get("peers", []):
                host = _host(x.get("remote"))
                if host in on_radio:
                    radio, other = on_radio[host]
                    a, b = sorted((name, other))
                    out.setdefault((a, b, radio), {})[name] = float((x.get("shape") or {}).get("loss_pct", 0.0))
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
            "stages": {kind: {f"{stage}_{q}": ms([x[i] for x in self.stages[kind]], q)
                              for i, stage in enumerate(("wait", "call", "back")) for q in (50, 99)}
                       for kind in ("up", "down")},
            "mean_ms": None if not both else round(statistics.fmean(both) * 1000, 1)},
            "start_ms": {"links": len(self.start_delays), "p50": ms(self.start_delays, 50),
                         "p99": ms(self.start_delays, 99), "max": ms(self.start_delays, 100)},
            "failed_changes": len(self.failures), "failures": self.failures[:10],
            "skipped_changes": len(self.skipped), "skipped": self.skipped[:10], "already_closed": self.already_closed,
            "held": len(self._held),
            "reshapes": {"asked": self.reshapes_asked, "done": len(self.reshape_delays),
                         "failed": len(self.reshape_failures), "failures": self.reshape_failures[:10],
                         "skipped": self.reshapes_skipped,
                         "p50_ms": ms(self.reshape_delays, 50), "p99_ms": ms(self.reshape_delays, 99)}}
