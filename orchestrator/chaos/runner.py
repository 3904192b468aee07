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
``delivered``, ``per_step``) and ``run_dir``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import trio

from node.core.router import Timers
from node.core.variants import VariantSpec
from node.core.snek import EXPIRY_S

from orchestrator.tools.monitoring import FAULT_KINDS, RunMetrics
from orchestrator.model.observe import NodeView, check_convergence
from orchestrator.chaos.backend import ChaosBackend, Converged, TrafficSample
from orchestrator.chaos.checker import Invariant, NodeState, PingOutcome, Reconvergence, TransientWatch, evaluate, verdict_of
from orchestrator.chaos.scenario import Scenario
from orchestrator.chaos.targets import TargetError, TargetView, balanced_halves, min_cut_groups, resolve_link, resolve_nodes

__all__ = ["ActionHook", "ChaosRun", "run_scenario", "sample_pairs"]

#: (action, target, detail, backend time): every fault as it happens, for actions.jsonl
ActionHook = Callable[[str, "str | None", "dict[str, Any] | None", float], None]
Progress = Callable[[dict[str, Any]], None]

CHECK_PAIRS = 12  # pairs pinged by the checker after a step (each in every mode)
#: invariants a soft-state transient can break for a moment right after convergence (see ChaosRun._recheck)
TRANSIENT_INVARIANTS = ("snake_ordered", "pairs_reachable")
#: how long such a transient may last: one routing-entry lifetime plus one bootstrap interval and a tick
TRANSIENT_S = EXPIRY_S + Timers().bootstrap_interval_s + Timers().maintain_interval_s
#: how often a transient is read again (ChaosRun._recheck)
RECHECK_POLL_S = 0.5
WATCH_S = 1.0  # how often the run's metrics (RunMetrics) re-read the live graph and the nodes' state


def sample_pairs(graph: nx.Graph, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Up to ``n`` ordered pairs of distinct nodes that share a component of ``graph``, drawn with ``rng``."""
    comps = [sorted(c) for c in nx.connected_components(graph) if len(c) > 1]
    total = sum(len(c) * (len(c) - 1) for c in comps)
    if total == 0:
        return []
    if total <= 4 * n:
        cands = [(a, b) for c in comps for a in c for b in c if a != b]
        return rng.sample(cands, min(n, len(cands)))
    out: set[tuple[str, str]] = set()
    weights = [len(c) * (len(c) - 1) for c in comps]
    while len(out) < n:
        c = rng.choices(comps, weights)[0]
        a, b = rng.sample(c, 2)
        out.add((a, b))
    return sorted(out)


@dataclass
class ChaosRun:
    backend: ChaosBackend
    scenario: Scenario
    seed: int = 0
    on_action: ActionHook | None = None
    progress: Progress | None = None
    metrics: RunMetrics | None = None
    rng: random.Random = field(init=False)
    steps: list[dict[str, Any]] = field(default_factory=list)
    _cut: set[frozenset[str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"chaos-{self.seed}")

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
        if self.metrics is not None:
            nursery.start_soon(self._watch, self.metrics)
        if sc.traffic is not None:
            self._traffic_on(sc.traffic.rate_per_s, sc.traffic.pairs)
        bounds: list[float] = []
        for i, step in enumerate(sc.steps):
            if step.after_s:
                await b.sleep(step.after_s)
            rec = await self._step(i, step)
            bounds.append(rec.pop("_bound", math.nan))
            if self.metrics is not None and step.action not in ("wait", "check") and rec.get("invariants"):
                self.metrics.episode(rec.get("tree_converged_s"), rec.get("snake_converged_s"))
            self.steps.append(rec)
            if self.progress is not None:
                self.progress(rec)
        b.traffic(False, 0, [], (), 1.0)
        if sc.traffic is not None:
            await b.sleep(sc.traffic.timeout_s + 0.5)  # the last background pings answer or time out
        samples = b.traffic_samples()
        traffic = self._traffic_summary(samples)
        verdict = "pass" if all(s["verdict"] == "pass" for s in self.steps) else "fail"
        failed = [s["index"] for s in self.steps if s["verdict"] != "pass"]
        return {
            "scenario": sc.name,
            "backend": b.name,
            "seed": self.seed,
            "verdict": verdict,
            "failed_steps": failed,
            "steps": self.steps,
            "traffic": traffic,
            "protocol_time_s": round(b.now() - t0, 3),
        }

    def _traffic_on(self, rate: float, n_pairs: int) -> None:
        sc = self.scenario
        assert sc.traffic is not None
        pairs = sample_pairs(self.backend.live_graph(), n_pairs, self.rng)
        self.backend.traffic(rate > 0, rate, pairs, sc.traffic.modes, sc.traffic.timeout_s)
        self._traffic_pairs = n_pairs

    async def _watch(self, metrics: RunMetrics) -> None:
        """Keep the run's metrics current: live nodes, components, converged (the observer's rule), pings."""
        b = self.backend
        counted: dict[tuple[str, bool], int] = {}
        while True:
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
            for (mode, delivered), n in totals.items():
                if n > counted.get((mode, delivered), 0):
                    metrics.ping(mode, delivered, n - counted.get((mode, delivered), 0))
                counted[(mode, delivered)] = max(n, counted.get((mode, delivered), 0))
            await trio.sleep(WATCH_S)  # not b.sleep: in process that would drive the network from a second task

    async def _step(self, i: int, step: Any) -> dict[str, Any]:
        b = self.backend
        at = b.now() - self.t0
        rec: dict[str, Any] = {"index": i, "action": step.action, "targets": [], "at_s": round(at, 3)}
        if step.note:
            rec["note"] = step.note
        errors_before = {n: s.internal_errors for n, s in (await b.states()).items()}
        self._act("step", None, {"index": i, "action": step.action})
        try:
            targets, detail = await self._apply(step)
        except TargetError as exc:
            rec.update(verdict="fail", detail=f"target: {exc}", invariants={},
                       tree_converged_s=None, snake_converged_s=None)  # fmt: skip
            return rec
        rec["targets"] = targets
        if detail:
            rec["detail"] = detail
        fault_end = b.now()
        conv: Converged | None = None
        bound = b.reconvergence_bound_s(self.scenario.bound_margin_s)
        rec["_bound"] = bound
        if step.action == "wait" and step.until == "converged":
            conv = await b.wait_converged(fault_end, step.within_s)
            rec["verdict"] = "pass" if conv.converged else "fail"
            if not conv.converged:
                rec["detail"] = f"not converged within {step.within_s:g} s"
        elif step.wants_check():
            conv = await b.wait_converged(fault_end, bound)
            settle = self.scenario.settle_s if step.settle_s is None else step.settle_s
            if settle:
                await b.sleep(settle)
            graph = b.live_graph()
            states = await b.states()
            t_read = b.now()
            modes = self.scenario.traffic.modes if self.scenario.traffic is not None else ("snek", "tree")
            pairs = sample_pairs(graph.subgraph(states), CHECK_PAIRS, self.rng)
            pings = await b.ping(pairs, modes, 5.0)
            reconv = None
            if step.action not in ("check",):
                reconv = Reconvergence(conv.tree_s, conv.snake_s, bound)
            inv = evaluate(graph, states, pings=pings, errors_before=errors_before, reconvergence=reconv,
                           expect=step.expect)  # fmt: skip
            transient = [n for n in TRANSIENT_INVARIANTS if not inv[n].ok and inv[n].expected]
            others_ok = all(v.ok for k, v in inv.items() if k not in TRANSIENT_INVARIANTS)
            if transient and others_ok:
                inv = await self._recheck(step, inv, transient, (graph, states, t_read), pings, errors_before, reconv)  # fmt: skip
                rec["transient"] = [n for n in transient if inv[n].ok]
                graph, states = b.live_graph(), await b.states()
            rec["invariants"] = {k: v.to_dict() for k, v in inv.items()}
            rec["verdict"] = verdict_of(inv)
            rec["live_nodes"] = len(states)
            rec["components"] = nx.number_connected_components(graph.subgraph(states)) if states else 0
        else:
            rec["verdict"] = "pass"
        rec.setdefault("invariants", {})
        rec["tree_converged_s"] = None if conv is None or conv.tree_s is None else round(conv.tree_s, 3)
        rec["snake_converged_s"] = None if conv is None or conv.snake_s is None else round(conv.snake_s, 3)
        rec["end_s"] = round(b.now() - self.t0, 3)
        # the background pings sent during this step so far (the live view's "delivery")
        t_lo = self.t0 + at
        got = [x for x in b.traffic_samples() if x.t >= t_lo]
        rec["delivery"] = {"sent": len(got), "delivered": sum(x.delivered for x in got)}
        return rec

    async def _recheck(self, step: Any, first: dict[str, Invariant], names: list[str],
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
        lasts longer fails, with the nodes or pairs it kept.
        """
        b = self.backend
        graph, states, t_read = reading  # the first reading's
        watch = TransientWatch.start(t_read, TRANSIENT_S, graph, states, pings)
        while not watch.settled and watch.open(b.now() + RECHECK_POLL_S):
            await b.sleep(RECHECK_POLL_S)
            graph, states = b.live_graph(), await b.states()
            watch.read(b.now(), graph, states)
            if watch.pairs and not watch.nodes:  # the nodes are back in order: do the lost pairs answer now?
                sent = b.now()
                watch.pinged(sent, await b.ping(watch.lost_pairs(), watch.lost_modes(), 5.0))
        # the other invariants as they are now; the transient ones as the watch judged them, or, when they were
        # not in question, as first read (a node that breaks during the watch is the next step's business)
        last = evaluate(b.live_graph(), await b.states(), errors_before=errors_before, reconvergence=reconv,
                        expect=step.expect)  # fmt: skip
        for name, judge in (("snake_ordered", watch.snake_ordered), ("pairs_reachable", watch.pairs_reachable)):
            last[name] = judge(first[name]) if name in names else first[name]
        if not all(last[n].ok for n in names):
            return {**first, **{n: last[n] for n in names}}  # the first reading, with what the watch kept
        return last

    # ------------------------------------------------------------------ applying steps

    async def _view(self) -> TargetView:
        b = self.backend
        states = await b.states()
        return TargetView(
            b.live_graph(),
            {n: s.key for n, s in states.items()},
            {n: s.root for n, s in states.items()},
            await b.parents(),
        )

    def _act(self, action: str, target: str | None, detail: dict[str, Any] | None = None) -> None:
        """One fault as it happens: into the run's actions.jsonl (the contract's vocabulary) and to the hook."""
        now = self.backend.now()
        self.backend.record_action(action, target, detail, now)
        if self.metrics is not None and action in FAULT_KINDS:
            self.metrics.fault(action)
        if self.on_action is not None:
            self.on_action(action, target, detail, now)

    async def _nodes(self, step: Any) -> list[str]:
        if step.target in self.backend.known_nodes():
            return [step.target]  # a node by name, alive or not (killing a dead node is a no-op, as in the reference)
        view = await self._view()
        return resolve_nodes(step.target, view, self.rng, step.count)

    async def _link(self, step: Any) -> tuple[str, str]:
        link = step.link if isinstance(step.link, str) else tuple(step.link)
        if isinstance(link, tuple):
            return link  # a named link may be down now (link_up): no graph check
        return resolve_link(link, await self._view(), self.rng)

    async def _apply(self, step: Any) -> tuple[list[Any], str | None]:
        b, a = self.backend, step.action
        if a in ("kill", "restart", "pause", "resume"):
            names = await self._nodes(step)  # a name is used alive or not; a role is resolved on the live graph
            act = {"kill": b.kill, "restart": b.restart, "pause": b.pause, "resume": b.resume}[a]
            for n in names:
                self._act("kill_root" if a == "kill" and step.target == "root" else a, n)
                await act(n)
            if a == "pause" and step.for_s:
                await b.sleep(step.for_s)
                for n in names:
                    self._act("resume", n)
                    await b.resume(n)
            return names, None
        if a == "remove_node":
            if step.target not in b.known_nodes():
                return [], "no such node: nothing to remove"
            done = await b.remove_node(step.target)
            if done:
                self._act("kill", step.target, {"remove": True})
            return [step.target], None if done else "not running: nothing to remove"
        if a == "partition":
            groups = await self._groups(step)
            cut = await b.partition(groups)
            self._act("partition", None, {"groups": [sorted(g) for g in groups], "links": [f"{x}--{y}" for x, y in cut]})
            return [sorted(g) for g in groups], f"{len(cut)} link(s) cut"
        if a == "heal":
            back = await b.heal()
            self._act("heal", None, {"links": [f"{x}--{y}" for x, y in back]})
            return [], f"{len(back)} link(s) restored"
        if a in ("link_down", "link_up"):
            x, y = await self._link(step)
            done = await (b.link_down(x, y) if a == "link_down" else b.link_up(x, y))
            if done:
                self._act(a, f"{x}--{y}")
            return [[x, y]], None if done else "no such link: nothing to do"
        if a == "flap":
            x, y = await self._link(step)
            for _ in range(step.count):
                await b.link_down(x, y)
                self._act("link_down", f"{x}--{y}", {"flap": True})
                await b.sleep(step.period_s / 2)
                await b.link_up(x, y)
                self._act("link_up", f"{x}--{y}", {"flap": True})
                await b.sleep(step.period_s / 2)
            return [[x, y]], f"{step.count} flap(s) of {step.period_s:g} s"
        if a == "link_change":
            x, y = await self._link(step)
            await b.link_change(x, y, step.link_class, step.shaping)
            self._act("link_change", f"{x}--{y}", {"class": step.link_class, "shaping": step.shaping})
            return [[x, y]], None
        if a == "churn":
            return await self._churn(step)
        if a == "join":
            if step.node is not None:
                await b.add_node(step.node, step.peers, step.link_class, step.adversary,
                                     VariantSpec.parse(step.variant) if step.variant else None)
                self._act("join", step.node, {"peers": list(step.peers), "adversary": step.adversary})
                return [step.node], None
            x, y = step.link
            await b.link_up(x, y, step.link_class)
            self._act("join", f"{x}--{y}", {"class": step.link_class})
            return [[x, y]], None
        if a == "adversary":
            names = await self._nodes(step)
            for n in names:
                await b.adversary(n, dict(step.drop), step.peer)
                self._act("adversary", n, {"drop": dict(step.drop), "peer": step.peer})
            return names, "drops " + ", ".join(f"{k} {v:g}%" for k, v in step.drop.items())
        if a == "traffic":
            spec = self.scenario.traffic
            rate = step.rate_per_s if step.rate_per_s is not None else (spec.rate_per_s if spec else 4.0)
            n = step.pairs if step.pairs is not None else (spec.pairs if spec else 20)
            modes = spec.modes if spec else ("snek", "tree")
            pairs = sample_pairs(b.live_graph(), n, self.rng) if step.enabled else []
            b.traffic(step.enabled and rate > 0, rate, pairs, modes, spec.timeout_s if spec else 5.0)
            return [], f"traffic {'on' if step.enabled else 'off'}"
        if a in ("wait",):
            if step.s is not None:
                await b.sleep(step.s)
            return [], None
        return [], None  # check, note

    async def _groups(self, step: Any) -> list[set[str]]:
        view = await self._view()
        live = set(view.live())
        if step.groups is not None:
            listed: set[str] = set()
            groups: list[set[str]] = []
            rest_at = None
            for g in step.groups:
                if list(g) == ["rest"]:
                    rest_at = len(groups)
                    groups.append(set())
                    continue
                unknown = set(g) - set(self.backend.known_nodes())
                if unknown:
                    raise TargetError(f"unknown node(s) in a partition group: {', '.join(sorted(unknown))}")
                groups.append(set(g))
                listed |= set(g)
            if rest_at is not None:
                groups[rest_at] = live - listed
            return [g for g in groups if g]
        if step.by == "halves":  # balanced, each half connected where possible, few links cut
            a, b = balanced_halves(view, self.rng)
            return [a, b]
        if step.by == "root":
            root = view.root()
            return [{root}, live - {root}]
        small, big = min_cut_groups(view)
        return [small, big]

    async def _churn(self, step: Any) -> tuple[list[str], str]:
        b = self.backend
        live = sorted(b.live_graph().nodes)
        n = max(1, round(step.fraction * len(live)))
        chosen = self.rng.sample(live, min(n, len(live)))
        gap = step.duration_s / len(chosen)
        plan: list[tuple[float, int, str, str]] = []
        for i, name in enumerate(chosen):
            leave = i * gap
            plan.append((leave, 0, "kill", name))
            plan.append((min(leave + step.down_s, step.duration_s), 1, "restart", name))
        plan.sort()
        start = b.now()
        for t, _, op, name in plan:
            wait = start + t - b.now()
            if wait > 0:
                await b.sleep(wait)
            self._act(op, name, {"churn": True})
            await (b.kill(name) if op == "kill" else b.restart(name))
        rest = start + step.duration_s - b.now()
        if rest > 0:
            await b.sleep(rest)
        return chosen, f"{len(chosen)} node(s) left and came back over {step.duration_s:g} s"

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
                       metrics: RunMetrics | None = None) -> dict[str, Any]:  # fmt: skip
    return await ChaosRun(backend, scenario, seed, on_action, progress, metrics).run()
