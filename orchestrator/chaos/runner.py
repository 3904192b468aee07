"""Run a scenario on a backend: apply each step, wait, check, and keep the history.

For every step: wait ``after_s``; resolve its targets on the live graph (roles
are decided now, not when the file was written); apply it; then, when the step
asks for the checker (faults do by default): wait for re-convergence up to the
timer-derived bound, wait the settle window, ping sampled pairs in each mode,
and evaluate every invariant (orchestrator.chaos.checker). A step passes when
every invariant met its expectation. The run passes when every step did.

The result is the ``snekbed chaos --json`` document: ``verdict``, ``steps``
(``index``, ``action``, ``targets``, ``at_s``, ``verdict``, ``invariants``,
``tree_converged_s``, ``snake_converged_s``), ``traffic`` (``sent``,
``delivered``, ``per_step``) and ``run_dir``. A step that fails or is invalid
also names the flight-recorder dumps of every live node (``recorder``:
orchestrator.chaos.flight), written into the run directory.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import trio

from node.core.router import Timers
from node.core.snek import EXPIRY_S

from orchestrator.tools.monitoring import FAULT_KINDS, RunMetrics
from orchestrator.model.adversary_spec import adversaries_of
from orchestrator.model.observe import NodeView, check_convergence
from orchestrator.chaos.backend import ChaosBackend, Converged, TrafficSample
from orchestrator.chaos.checker import (
    Invariant, NodeState, PingOutcome, Reconvergence, TransientWatch, adversaries_after, evaluate, run_verdict,
    verdict_of,
)  # fmt: skip
from orchestrator.chaos.apply import StepApplier
from orchestrator.chaos.confirm import Confirmer
from orchestrator.chaos.flight import write_dumps
from orchestrator.chaos.moving import MovingWatch, judge_pings, not_judged, settled
from orchestrator.chaos.scenario import AnyStep, Check, Scenario, Wait
from orchestrator.chaos.targets import TargetError, sample_pairs, with_focus
from orchestrator.chaos.window import wait_and_settle

__all__ = ["ActionHook", "ChaosRun", "run_scenario", "sample_pairs"]  # sample_pairs: orchestrator.chaos.targets

#: (action, target, detail, backend time): every fault as it happens, for actions.jsonl
ActionHook = Callable[[str, "str | None", "dict[str, Any] | None", float], None]
Progress = Callable[[dict[str, Any]], None]

CHECK_PAIRS = 12  # pairs pinged by the checker after a step (each in every mode)
#: invariants a soft-state transient can break for a moment right after convergence (see ChaosRun._recheck)
TRANSIENT_INVARIANTS = ("snake_ordered", "pairs_reachable")
#: how long such a transient may last: one routing-entry lifetime plus one bootstrap interval and a tick
TRANSIENT_S = EXPIRY_S + Timers().bootstrap_interval_s + Timers().maintain_interval_s
#: how long a node of the Go reference keeps routing its pings to a destination's cached coordinates (its router's
#: coordsCacheLifetime, router/consts.go at b35aec6), refreshed only by traffic from that destination and cleared
#: only when its own root changes: when a destination's coordinates change under a root that stays, its pings
#: land at the old coordinates, with no SNEK fallback, until the entry ages out (docs/interop.md)
REFERENCE_COORDS_S = 60.0
#: a lost pair whose source runs the reference may take that long, and one re-ping, to answer again
REFERENCE_TRANSIENT_S = REFERENCE_COORDS_S + 5.0
#: how often a transient is read again (ChaosRun._recheck)
RECHECK_POLL_S = 0.5
#: readings of the nodes' state before a step is judged without a live node that did not answer (then invalid)
UNREAD_TRIES = 3
WATCH_S = 1.0  # how often the run's metrics (RunMetrics) re-read the live graph and the nodes' state
#: a fault whose network has not re-converged within its bound is watched up to this many bounds after it: one that
#: converges by then is ``slow``, one that does not is ``stuck`` (docs/chaos.md, "Slow against stuck")
HORIZON_BOUNDS = 3.0
CONFIRM_POLL_S = 0.5  # how often a fault's confirmation reads the nodes (orchestrator.chaos.confirm)


@dataclass
class ChaosRun:
    backend: ChaosBackend
    scenario: Scenario
    seed: int = 0
    on_action: ActionHook | None = None
    progress: Progress | None = None
    metrics: RunMetrics | None = None
    #: where a failing step's flight-recorder dumps go (None: a run without a directory keeps none)
    run_dir: str | Path | None = None
    rng: random.Random = field(init=False)
    steps: list[dict[str, Any]] = field(default_factory=list)
    applier: StepApplier = field(init=False)
    #: the adversarial nodes now (checker.adversaries_after): the checker judges the honest view while there are any
    adversaries: frozenset[str] = frozenset()
    #: the traffic's pings counted into ``metrics`` so far, by (mode, delivered)
    _pings_counted: dict[tuple[str, bool], int] = field(default_factory=dict, init=False)
    #: the live nodes the last reading could not read (UNREAD_TRIES times): a step judged without them is invalid
    unread: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"chaos-{self.seed}")
        self.applier = StepApplier(self.backend, self.scenario, self.rng, self._act)

    # ------------------------------------------------------------------ the run

    async def run(self) -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            try:
                out = await self._run(nursery)
            except BaseException as exc:
                with trio.CancelScope(shield=True):
                    await self.backend.abort(exc)
                raise
            finally:
                nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await self.backend.stop()
            return out

    async def _run(self, nursery: trio.Nursery) -> dict[str, Any]:
        b, sc = self.backend, self.scenario
        await b.start(nursery)
        t0 = b.now()
        self.t0 = t0
        topology = getattr(b, "topology", None)  # its nodes adversarial from their start: the honest view from t0
        for name, adv in adversaries_of(topology.nodes if topology is not None else ()).items():
            self._act("adversary", name, adv.detail())
        watching = trio.CancelScope()
        if self.metrics is not None:
            nursery.start_soon(self._watch, self.metrics, watching)
        if sc.traffic is not None:
            self._traffic_on(sc.traffic.rate_per_s, sc.traffic.pairs)
        self._over = False
        watch = MovingWatch(sc.watch_s, TRANSIENT_S) if b.moves and sc.watch_s > 0 else None
        if watch is not None:
            b.beside(lambda: self._watch_moving(watch), sc.watch_s, math.inf)
        bounds: list[float] = []
        carry = 0.0  # a deadline check's time (window.py): the next step's after_s counted from the fault
        for i, step in enumerate(sc.steps):
            if step.after_s > carry:
                await b.sleep(step.after_s - carry)
            rec = await self._step(i, step)
            bounds.append(rec.pop("_bound", math.nan))
            carry = rec.pop("_check_s", 0.0)
            if rec["verdict"] != "pass":
                await self._dump_recorders(i, rec)
            if self.metrics is not None and not isinstance(step, (Wait, Check)) and rec.get("invariants"):
                self.metrics.episode(rec.get("tree_converged_s"), rec.get("snake_converged_s"))
            self.steps.append(rec)
            if self.progress is not None:
                self.progress(rec)
        b.traffic(False, 0, [], (), 1.0)
        if sc.traffic is not None:
            await b.sleep(sc.traffic.timeout_s + 0.5)  # the last background pings answer or time out
        self._over = True
        if self.metrics is not None:  # the run's last word: the state it ended in, not the watch's last round
            watching.cancel()
            await self._observe(self.metrics)
        samples = b.traffic_samples()
        traffic = self._traffic_summary(samples)
        verdict = run_verdict([s["verdict"] for s in self.steps] + ([watch.verdict] if watch is not None else []))
        failed = [s["index"] for s in self.steps if s["verdict"] != "pass"]
        out = {
            "scenario": sc.name,
            "backend": b.name,
            "seed": self.seed,
            "verdict": verdict,
            "failed_steps": failed,
            "steps": self.steps,
            "traffic": traffic,
            "protocol_time_s": round(b.now() - t0, 3),
            "time_origin": {"clock": "scenario", "mono_s": round(t0, 6)},  # at_s, protocol_time_s count from it
        }
        for key, which in (("invalid_steps", "invalid"), ("slow_steps", "slow"), ("stuck_steps", "stuck")):
            out[key] = [s["index"] for s in self.steps
                        if s["verdict"] == which or s.get("reconvergence", {}).get("pace") == which]  # fmt: skip
        if watch is not None:
            out["watch"] = watch.to_dict()
        return out

    def _traffic_on(self, rate: float, n_pairs: int) -> None:
        sc = self.scenario
        assert sc.traffic is not None
        graph = self.backend.live_graph()
        if self.backend.moves:  # any two nodes may meet: pairs drawn among all of them, not today's components
            graph = nx.complete_graph(sorted(graph.nodes))
        pairs = with_focus(graph, sample_pairs(graph, n_pairs, self.rng), sc.traffic.focus, len(sc.traffic.modes))
        self.backend.traffic(rate > 0, rate, pairs, sc.traffic.modes, sc.traffic.timeout_s)
        self._traffic_pairs = n_pairs

    async def _watch(self, metrics: RunMetrics, scope: trio.CancelScope) -> None:
        """Keep the run's metrics current: live nodes, components, converged (the observer's rule), pings."""
        with scope:
            while True:
                await self._observe(metrics)
                await trio.sleep(WATCH_S)  # not b.sleep: in process that would drive the network from a second task

    async def _observe(self, metrics: RunMetrics) -> None:
        b = self.backend
        graph = b.live_graph()
        states = await b.states()
        views = {n: NodeView(s.key, s.root, s.descending) for n, s in states.items() if n in graph}
        live = graph.subgraph(views)
        verdict = check_convergence(live, views)
        answered = len(views) == graph.number_of_nodes()  # a verdict over part of the graph proves nothing
        metrics.observe(graph.number_of_nodes(), nx.number_connected_components(graph), verdict.tree and answered,
                        verdict.snake and answered)
        totals: dict[tuple[str, bool], int] = {}
        for x in b.traffic_samples():
            totals[(x.mode, x.delivered)] = totals.get((x.mode, x.delivered), 0) + 1
        counted = self._pings_counted
        for (mode, delivered), n in totals.items():
            if n > counted.get((mode, delivered), 0):
                metrics.ping(mode, delivered, n - counted.get((mode, delivered), 0))
            counted[(mode, delivered)] = max(n, counted.get((mode, delivered), 0))

    async def _step(self, i: int, step: AnyStep) -> dict[str, Any]:
        b = self.backend
        at = b.now() - self.t0
        rec: dict[str, Any] = {"index": i, "action": step.action, "targets": [], "at_s": round(at, 3)}
        if step.note:
            rec["note"] = step.note
        before = await b.states()
        errors_before = {n: s.internal_errors for n, s in before.items()}
        self._act("step", None, {"index": i, "action": step.action})
        confirm = self.applier.confirm = Confirmer(b, before, CONFIRM_POLL_S)
        try:
            targets, detail = await self.applier.apply(step)
        except TargetError as exc:
            rec.update(verdict="fail", detail=f"target: {exc}", invariants={},
                       tree_converged_s=None, snake_converged_s=None)  # fmt: skip
            return rec
        rec["targets"] = list(targets)
        if detail:
            rec["detail"] = detail
        fault_end = b.now()
        conv: Converged | None = None
        bound = b.reconvergence_bound_s(self.scenario.bound_margin_s)
        rec["_bound"] = bound
        if isinstance(step, Wait) and step.until == "converged":
            conv = await b.wait_converged(fault_end, step.within_s)
            rec["verdict"] = "pass" if conv.converged else "fail"
            if not conv.converged:
                rec["detail"] = f"not converged within {step.within_s:g} s"
        elif step.wants_check():
            conv = await self._check(step, rec, fault_end, bound, errors_before)
        else:
            rec["verdict"] = "pass"
        confirmed = await confirm.settled(None if step.check_within_s is None else fault_end + step.check_within_s)
        if "_check_s" in rec:
            rec["_check_s"] = b.now() - fault_end
        if confirmed is not None:
            rec["confirmed"] = confirmed.to_dict()
            if confirmed.ok is False:
                rec["verdict"] = "invalid"
                rec["invalid"] = f"fault not confirmed: {confirmed.how}"
        rec.setdefault("invariants", {})
        rec["tree_converged_s"] = None if conv is None or conv.tree_s is None else round(conv.tree_s, 3)
        rec["snake_converged_s"] = None if conv is None or conv.snake_s is None else round(conv.snake_s, 3)
        rec["end_s"] = round(b.now() - self.t0, 3)
        # the background pings sent during this step so far (the live view's "delivery")
        t_lo = self.t0 + at
        got = [x for x in b.traffic_samples() if x.t >= t_lo]
        rec["delivery"] = {"sent": len(got), "delivered": sum(x.delivered for x in got)}
        return rec

    async def _check(self, step: AnyStep, rec: dict[str, Any], fault_end: float, bound: float,
                     errors_before: dict[str, int]) -> Converged:  # fmt: skip
        """The checker after a fault: wait for re-convergence (when the step expects it, past the bound up to
        HORIZON_BOUNDS bounds: slow against stuck) and the settle window, read, ping, evaluate; into ``rec``."""
        b = self.backend
        settle = self.scenario.settle_s if step.settle_s is None else step.settle_s
        modes = self.scenario.traffic.modes if self.scenario.traffic is not None else ("snek", "tree")
        late = step.expect.get("reconverged_within_bound", True) and step.check_within_s is None and (
            not isinstance(step, Check) or step.reconvergence)  # watched past the bound: slow against stuck
        horizon = round(HORIZON_BOUNDS * bound, 1) if late else bound
        confirm = self.applier.confirm

        def invalid_past_bound() -> bool:  # a fault not confirmed makes the step invalid: no slow/stuck to tell
            return confirm is not None and b.now() - fault_end >= bound and confirm.failed

        conv, window = await wait_and_settle(b, step, horizon, settle, fault_end, len(modes), invalid_past_bound)
        late = late and not invalid_past_bound()
        graph, states, moving, live = await self._reading(bound)
        t_read = b.now()
        pairs = sample_pairs(graph.subgraph(states), CHECK_PAIRS, self.rng)
        timeout = window.ping_timeout_s(5.0, len(modes))
        pings = await b.ping(pairs, modes, timeout) if timeout is not None else []
        pings, unjudged = judge_pings(pings, b.moved_since(t_read))
        reconv = None
        if not isinstance(step, Check) or step.reconvergence:
            reconv = Reconvergence(conv.tree_s, conv.snake_s, bound, horizon if late else None,
                                   moved=bool(b.moved_since(fault_end)))  # fmt: skip
            if late and reconv.pace != "within":
                rec["reconvergence"] = reconv.to_dict()
        inv = evaluate(graph, states, pings=pings, errors_before=errors_before, reconvergence=reconv,
                       expect=step.expect, adversaries=self.adversaries)  # fmt: skip
        if b.moves:
            not_judged(inv, len(moving), live, bound, unjudged)
            rec["settled_nodes"] = len(states)
        transient = [n for n in TRANSIENT_INVARIANTS if not inv[n].ok and inv[n].expected]
        others_ok = all(v.ok for k, v in inv.items() if k not in TRANSIENT_INVARIANTS)
        if transient and others_ok and not window.cut_short:
            inv = await self._recheck(step, inv, transient, (graph, states, t_read), pings, errors_before,
                                    reconv)  # fmt: skip
            rec["transient"] = [n for n in transient if inv[n].ok]
            graph, states, _, _ = await self._reading(bound)
        inv = window.judge(inv, step.expect)
        if window.within_s is not None:
            rec["check_window"], rec["_check_s"] = window.to_dict(), b.now() - fault_end
        rec["invariants"] = {k: v.to_dict() for k, v in inv.items()}
        rec["verdict"] = verdict_of(inv)
        rec["live_nodes"] = live if b.moves else len(states)  # moving: the settled ones are settled_nodes
        rec["components"] = nx.number_connected_components(graph.subgraph(states)) if states else 0
        if self.unread:  # judged without them: no verdict can be trusted (the invariants are kept to read)
            rec["unread"], rec["verdict"] = self.unread, "invalid"
            rec["invalid"] = f"{len(self.unread)} live node(s) did not answer the checker: {', '.join(self.unread)}"
        return conv

    async def _recheck(self, step: AnyStep, first: dict[str, Invariant], names: list[str],
                       reading: tuple[nx.Graph, dict[str, NodeState], float], pings: list[PingOutcome],
                       errors_before: dict[str, int],
                       reconv: Reconvergence | None) -> dict[str, Invariant]:  # fmt: skip
        """A snake found out of order (or a ping lost with it) right after convergence is followed node by node.

        SNEK's state is soft: each routing entry lives 10 s and is refreshed by bootstraps every 5-6 s, and the
        path a node's bootstraps take can alternate between two dead ends as the entries along it refresh at
        different phases (docs/chaos.md, "Pings lost in a converged network"). An entry can then expire before
        its refresh arrives and come back a few seconds later. That is the protocol, so the checker tolerates
        exactly that (checker.TransientWatch): every node out of order at the first reading must be found back
        in order, and every lost pair must answer again, within one entry lifetime plus one bootstrap interval
        (TRANSIENT_S) of that reading; the other invariants must still hold at the last reading. A break that
        lasts longer fails, with the nodes or pairs it kept. A pair whose source runs the Go reference has
        REFERENCE_TRANSIENT_S: that router routes to cached coordinates that can be stale for a minute.
        """
        b = self.backend
        graph, states, t_read = reading  # the first reading's
        watch = TransientWatch.start(t_read, TRANSIENT_S, graph, states, pings,
                                     dict.fromkeys(b.reference_nodes, REFERENCE_TRANSIENT_S))
        while not watch.settled and watch.open(b.now() + RECHECK_POLL_S):
            await b.sleep(RECHECK_POLL_S)
            graph, states, _, _ = await self._reading(reconv.bound_s if reconv is not None else TRANSIENT_S)
            watch.read(b.now(), graph, states)
            if watch.pairs and not watch.nodes:  # the nodes are back in order: do the lost pairs answer now?
                sent = b.now()
                watch.pinged(sent, await b.ping(watch.lost_pairs(), watch.lost_modes(), 5.0))
        # the other invariants as they are now; the transient ones as the watch judged them, or, when they were
        # not in question, as first read (a node that breaks during the watch is the next step's business)
        graph, states, _, _ = await self._reading(reconv.bound_s if reconv is not None else TRANSIENT_S)
        last = evaluate(graph, states, errors_before=errors_before, reconvergence=reconv, expect=step.expect,
                        adversaries=self.adversaries)
        for name, judge in (("snake_ordered", watch.snake_ordered), ("pairs_reachable", watch.pairs_reachable)):
            last[name] = judge(first[name]) if name in names else first[name]
        if not all(last[n].ok for n in names):
            return {**first, **{n: last[n] for n in names}}  # the first reading, with what the watch kept
        return last

    async def _reading(self, bound_s: float) -> tuple[nx.Graph, dict[str, NodeState], set[str], int]:
        """The live graph and the nodes' states, without the components whose links changed by movement within
        ``bound_s`` (orchestrator.chaos.moving); those nodes, and how many nodes were live."""
        b = self.backend
        graph, states = b.live_graph(), await b.states()
        for _ in range(UNREAD_TRIES):  # a live node that did not answer (a busy host): read again before judging
            if set(graph) <= set(states):
                break
            await b.sleep(RECHECK_POLL_S)
            graph, states = b.live_graph(), await b.states()
        self.unread = sorted(set(graph) - set(states))
        moving = b.moved_since(b.now() - bound_s) & set(states) if b.moves else set()
        live = len(states)
        if moving:
            graph, states = settled(graph, states, moving)
        return graph, states, moving, live

    async def _watch_moving(self, watch: MovingWatch) -> bool:
        """One reading of the continuous checker while nodes move; True once the run is over (beside's stop)."""
        b = self.backend
        if self._over:
            return True
        bound_s = b.reconvergence_bound_s(self.scenario.bound_margin_s)
        graph, states, _, live = await self._reading(bound_s)
        if b.now() - self.t0 < bound_s:  # the start made every link: judged once its bound has passed, as a fault's
            graph, states = nx.Graph(), {}
        watch.read(b.now() - self.t0, graph, states, live)
        return False

    async def _dump_recorders(self, i: int, rec: dict[str, Any]) -> None:
        """Step ``i`` failed or is invalid: every live node's flight recorder into the run directory, the files named
        in its record (``recorder``), and why a node has none (``recorder_unavailable``). Reads only: in process
        the run goes on exactly as it would have."""
        if self.run_dir is None:
            rec["recorder"] = []
            rec["recorder_unavailable"] = ["the run keeps no directory (snekbed chaos --record DIR keeps one)"]
            return
        dumps = await self.backend.flight_records(sorted(self.backend.live_graph()))
        rec["recorder"], missing = write_dumps(Path(self.run_dir), i, dumps)
        if missing:
            rec["recorder_unavailable"] = missing

    # ------------------------------------------------------------------ applying steps

    def _act(self, action: str, target: str | None, detail: dict[str, Any] | None = None) -> None:
        """One fault as it happens: into the run's actions.jsonl (the contract's vocabulary) and to the hook."""
        now = self.backend.now()
        self.adversaries = adversaries_after(self.adversaries, action, target, detail)
        self.backend.record_action(action, target, detail, now)
        if self.metrics is not None and action in FAULT_KINDS:
            self.metrics.fault(action)
        if self.on_action is not None:
            self.on_action(action, target, detail, now)

    # ------------------------------------------------------------------ traffic

    def _traffic_summary(self, samples: list[TrafficSample]) -> dict[str, Any]:
        per_step = []
        bounds = [s["at_s"] for s in self.steps] + [math.inf]
        for i, s in enumerate(self.steps):
            lo, hi = self.t0 + bounds[i], self.t0 + bounds[i + 1]
            got = [x for x in samples if lo <= x.t < hi]
            per_step.append({"index": i, "sent": len(got), "delivered": sum(x.delivered for x in got)})
        return {
            "sent": len(samples),
            "delivered": sum(x.delivered for x in samples),
            "per_step": per_step,
            "by_mode": {
                m: {"sent": sum(1 for x in samples if x.mode == m), "delivered": sum(x.delivered for x in samples
                                                                                    if x.mode == m)}
                for m in sorted({x.mode for x in samples})
            },  # fmt: skip
        }


async def run_scenario(backend: ChaosBackend, scenario: Scenario, *, seed: int = 0,
                       on_action: ActionHook | None = None, progress: Progress | None = None,
                       metrics: RunMetrics | None = None,
                       run_dir: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    return await ChaosRun(backend, scenario, seed, on_action, progress, metrics, run_dir).run()
