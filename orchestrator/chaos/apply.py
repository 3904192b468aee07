"""Apply one scenario step to a backend: resolve its targets on the live graph, do it, say what was done.

:meth:`StepApplier.apply` dispatches on the step's class (a ``match`` that ends in ``assert_never``, so a
step class added to :data:`~orchestrator.chaos.scenario.AnyStep` without its case here is a type error). Each
case is one handler, and a fault is one method of the backend's NodeFaults or LinkFaults protocol
(orchestrator.chaos.backend); roles are resolved on its Observation, traffic set through BackgroundTraffic.
Every fault is reported as it happens through ``act`` (the run's actions.jsonl, its metrics and the live
view); the handler returns the step's targets and a detail for the step's record. What the checker does
after a step is the runner's business (orchestrator.chaos.runner).

Adding an action: a step class in orchestrator.chaos.scenario, one case and its handler here, and, for a new
kind of fault, a method in the small protocol it belongs to with each backend's implementation.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from node.core.variants import VariantSpec

from orchestrator.chaos.attack_steps import apply_strategy, ground_key
from orchestrator.chaos.backend import ChaosBackend
from orchestrator.chaos.checker import adversaries_after
from orchestrator.chaos.confirm import Confirmer, Expectation
from orchestrator.chaos.ground_keys import topology_adversaries
from orchestrator.chaos.scenario import (
    Adversary, AnyStep, Check, Churn, Flap, Heal, HostCrash, HostPartition, HostRestart, Join, Kill,
    LinkChange, LinkDown, LinkUp, Mobility, Note, Partition,
    Pause, RemoveNode, Restart, Resume, Scenario, Traffic, Wait, _LinkStep, _NodeStep,
)  # fmt: skip
from orchestrator.chaos.targets import (
    TargetError, TargetView, balanced_halves, min_cut_groups, resolve_link, resolve_nodes, sample_pairs,
    with_focus,
)  # fmt: skip

__all__ = ["Act", "Applied", "StepApplier", "Target"]

#: ``act(action, target, detail)``: one fault as it happens (the runner records it and tells its hooks)
Act = Callable[[str, str | None, dict[str, Any] | None], None]
#: one target in a step's record: a node name, or a link ``[a, b]`` or a partition group as a list of names
Target = str | list[str]
#: what a step did: its targets for the record, and a detail
Applied = tuple[Sequence[Target], str | None]


async def _nothing() -> None:
    return None


@dataclass
class StepApplier:
    backend: ChaosBackend
    scenario: Scenario
    rng: random.Random
    act: Act
    #: the step's confirmations (orchestrator.chaos.confirm), told of each fault the moment it takes effect
    confirm: Confirmer | None = None
    #: the adversarial nodes now: the topology's (its ``adversary:`` field), then as each recorded action changes
    #: them (the checker's rule, checker.adversaries_after: an ``adversary`` step, an adversarial ``join``, a
    #: lifted one turning honest again); a ground key is placed among the honest keys only (docs/attacks.md,
    #: orchestrator.chaos.ground_keys)
    adversarial: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.adversarial |= topology_adversaries(getattr(self.backend, "topology", None))
        record = self.act

        def act(action: str, target: str | None, detail: dict[str, Any] | None) -> None:
            self.adversarial = set(adversaries_after(self.adversarial, action, target, detail))
            record(action, target, detail)

        self.act = act

    async def apply(self, step: AnyStep) -> Applied:
        """Do ``step``; raises TargetError when a target cannot be resolved on the live graph."""
        b = self.backend
        match step:
            case Kill():
                return await self._each_node(step, "kill_root" if step.target == "root" else "kill", b.kill, "silenced")
            case Restart():
                return await self._each_node(step, "restart", b.restart, "back")
            case Pause():
                return await self._pause(step)
            case Resume():
                return await self._each_node(step, "resume", b.resume, "back")
            case RemoveNode():
                return await self._remove_node(step)
            case Partition():
                return await self._partition(step)
            case Heal():
                back = await b.heal()
                self.act("heal", None, {"links": [f"{x}--{y}" for x, y in back]})
                if self.confirm is not None:
                    await self.confirm.restored(back, "heal")
                return [], f"{len(back)} link(s) restored"
            case LinkDown() | LinkUp():
                return await self._link_down_up(step)
            case Flap():
                return await self._flap(step)
            case LinkChange():
                x, y = await self._link(step)
                await b.link_change(x, y, step.link_class, step.shaping)
                self.act("link_change", f"{x}--{y}", {"class": step.link_class, "shaping": step.shaping})
                if self.confirm is not None:
                    await self.confirm.shaped(x, y, step.link_class, step.shaping)
                return [[x, y]], None
            case Churn():
                return await self._churn(step)
            case Join():
                return await self._join(step)
            case Adversary():
                return await self._adversary(step)
            case Traffic():
                return self._traffic(step)
            case Wait():
                if step.s is not None:
                    await b.sleep(step.s)
                return [], None
            case Check() | Note():
                return [], None
            case Mobility():
                return await self._mobility(step)
            case HostCrash() | HostRestart() | HostPartition():
                return await self._host(step)
            case _:
                assert_never(step)

    # ------------------------------------------------------------------ targets

    async def view(self) -> TargetView:
        """The live graph with each live node's key, root and parent: what roles are resolved on."""
        b = self.backend
        states = await b.states()
        return TargetView(
            b.live_graph(),
            {n: s.key for n, s in states.items()},
            {n: s.root for n, s in states.items()},
            await b.parents(),
        )

    async def _nodes(self, step: _NodeStep) -> list[str]:
        if isinstance(step.target, tuple):  # nodes by name, alive or not
            known = set(self.backend.known_nodes())
            unknown = [n for n in step.target if n not in known]
            if unknown:
                raise TargetError(f"unknown node(s) {', '.join(map(repr, unknown))}")
            return list(step.target)
        if step.target in self.backend.known_nodes():
            return [step.target]  # a node by name, alive or not (killing a dead node is a no-op, as in the reference)
        return resolve_nodes(step.target, await self.view(), self.rng, step.count)

    async def _link(self, step: _LinkStep) -> tuple[str, str]:
        if isinstance(step.link, tuple):
            return step.link  # a named link may be down now (link_up): no graph check
        return resolve_link(step.link, await self.view(), self.rng)

    async def _groups(self, step: Partition) -> list[set[str]]:
        view = await self.view()
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

    # ------------------------------------------------------------------ node faults

    async def _each_node(self, step: _NodeStep, action: str, fault: Callable[[str], Awaitable[None]],
                         effect: str) -> Applied:
        """``fault`` on each node of the step; ``effect`` (``silenced`` or ``back``) is what its confirmation expects."""
        names = await self._nodes(step)  # a name is used alive or not; a role is resolved on the live graph
        for n in names:
            self.act(action, n, None)
            await fault(n)
        if self.confirm is not None:
            await (self.confirm.silenced(names, action) if effect == "silenced" else
                   self.confirm.back(names, action))  # fmt: skip
        return names, None

    async def _pause(self, step: Pause) -> Applied:
        b = self.backend
        names = await self._nodes(step)
        for n in names:
            self.act("pause", n, None)
            await b.pause(n)
        silenced = await self.confirm.silenced(names, "pause", step.for_s) if self.confirm is not None else []
        if step.for_s:
            await b.sleep(step.for_s)
            if self.confirm is not None:  # resumed once its silence is measured (or not), never while being measured
                await self.confirm.decided(silenced)
            for n in names:
                self.act("resume", n, None)
                await b.resume(n)
            if self.confirm is not None:
                await self.confirm.back(names, "resume")
        return names, None

    async def _remove_node(self, step: RemoveNode) -> Applied:
        b = self.backend
        name = step.target
        assert isinstance(name, str)  # RemoveNode takes one node
        if name not in b.known_nodes():
            return [], "no such node: nothing to remove"
        done = await b.remove_node(name)
        if done:
            self.act("kill", name, {"remove": True})
            if self.confirm is not None:
                await self.confirm.silenced([name], "remove_node")
        return [name], None if done else "not running: nothing to remove"

    async def _churn(self, step: Churn) -> Applied:
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
        leaving: dict[str, list[Expectation]] = {}  # a node's kill confirmation, decided before it is brought back
        for t, _, op, name in plan:
            wait = start + t - b.now()
            if wait > 0:
                await b.sleep(wait)
            if op == "restart" and self.confirm is not None:
                await self.confirm.decided(leaving.pop(name, []))
            self.act(op, name, {"churn": True})
            await (b.kill(name) if op == "kill" else b.restart(name))
            if self.confirm is None:
                continue
            if op == "kill":
                leaving[name] = await self.confirm.silenced([name], "churn: kill")
            else:
                await self.confirm.back([name], "churn: restart")
        rest = start + step.duration_s - b.now()
        if rest > 0:
            await b.sleep(rest)
        return chosen, f"{len(chosen)} node(s) left and came back over {step.duration_s:g} s"

    async def _join(self, step: Join) -> Applied:
        b = self.backend
        if step.node is not None:
            ground = await ground_key(b, step, self.adversarial) if step.key is not None else {}
            await b.add_node(step.node, step.peers, step.link_class, step.adversary,
                             VariantSpec.parse(step.variant) if step.variant else None)  # fmt: skip
            self.act("join", step.node, {"peers": list(step.peers), "adversary": step.adversary, **ground})
            if self.confirm is not None:
                await self.confirm.back([step.node], "join")
            return [step.node], None
        assert step.link is not None  # Join's validator: a node or a link
        x, y = step.link
        await b.link_up(x, y, step.link_class)
        self.act("join", f"{x}--{y}", {"class": step.link_class})
        if self.confirm is not None:
            await self.confirm.restored([(x, y)], "join")
        return [[x, y]], None

    async def _adversary(self, step: Adversary) -> Applied:
        names = await self._nodes(step)
        if step.drop is None:  # a strategy other than drop (docs/attacks.md)
            return names, await apply_strategy(self.backend, step, names, self.act)
        kinds = [k for k, v in step.drop.items() if v > 0]
        confirm = self.confirm if kinds else None  # lifting drops nothing to count: nothing read before either
        before = await confirm.drops_before(names, kinds, step.peer) if confirm is not None else {}
        for n in names:
            await self.backend.adversary(n, dict(step.drop), step.peer)
            self.act("adversary", n, {"drop": dict(step.drop), "peer": step.peer})
        if confirm is not None:
            await confirm.dropping(names, kinds, before, step.peer)
        return names, "drops " + ", ".join(f"{k} {v:g}%" for k, v in step.drop.items())

    # ------------------------------------------------------------------ link faults

    async def _partition(self, step: Partition) -> Applied:
        groups = await self._groups(step)
        cut = await self.backend.partition(groups)
        self.act("partition", None, {"groups": [sorted(g) for g in groups], "links": [f"{x}--{y}" for x, y in cut]})
        if self.confirm is not None:
            await self.confirm.cut(cut, "partition", groups)
        return [sorted(g) for g in groups], f"{len(cut)} link(s) cut"

    async def _link_down_up(self, step: LinkDown | LinkUp) -> Applied:
        b = self.backend
        x, y = await self._link(step)
        done = await (b.link_down(x, y) if isinstance(step, LinkDown) else b.link_up(x, y))
        if done:
            self.act(step.action, f"{x}--{y}", None)
            if self.confirm is not None:
                await (self.confirm.cut([(x, y)], step.action) if isinstance(step, LinkDown) else
                       self.confirm.restored([(x, y)], step.action))  # fmt: skip
        return [[x, y]], None if done else "no such link: nothing to do"

    async def _flap(self, step: Flap) -> Applied:
        b = self.backend
        x, y = await self._link(step)
        for i in range(step.count):
            await b.link_down(x, y)
            self.act("link_down", f"{x}--{y}", {"flap": True})
            cut: list[Expectation] = []
            if i == 0 and self.confirm is not None:
                cut = await self.confirm.cut([(x, y)], "flap: down", within_s=step.period_s / 2)
            await b.sleep(step.period_s / 2)
            if cut and self.confirm is not None:  # up once the cut is measured (or not), never while it is read
                await self.confirm.decided(cut)
            await b.link_up(x, y)
            self.act("link_up", f"{x}--{y}", {"flap": True})
            if i == step.count - 1 and self.confirm is not None:
                await self.confirm.restored([(x, y)], "flap: up")
            await b.sleep(step.period_s / 2)
        return [[x, y]], f"{step.count} flap(s) of {step.period_s:g} s"

    async def _mobility(self, step: Mobility) -> Applied:
        detail = await self.backend.mobility(step)
        if detail is None:
            raise TargetError("the run's nodes do not move (its topology declares no radios; docs/mobility.md)")
        targets: list[Target] = [*step.nodes] + ([f"group:{step.group}"] if step.group is not None else [])
        self.act("mobility", None, {k: v for k, v in step.model_dump(mode="json", exclude_none=True,
                                                                     exclude_defaults=True).items()
                                    if k in ("movement", "for_s", "nodes", "group", "speed_mps", "model", "position")})
        return targets, detail

    # ------------------------------------------------------------------ host faults (a multi-host swarm)

    async def _host(self, step: HostCrash | HostRestart | HostPartition) -> Applied:
        """A host fault: only a backend with hosts has ``host_fault`` (the swarm backend on a ``snekbed cluster``)."""
        fault = getattr(self.backend, "host_fault", None)
        if fault is None:
            raise TargetError(f"{step.action}: the {getattr(self.backend, 'name', '?')} backend has no hosts (host "
                              "faults need --backend swarm on a multi-host swarm: docs/multi-host.md)")
        root = None
        if step.host == "root_host":
            root = (await self.view()).root()
        host, nodes, links = await fault(step.action, step.host, root)
        self.act(step.action, host, {"nodes": nodes, "links": [f"{x}--{y}" for x, y in links]})
        if self.confirm is not None and nodes:
            await (self.confirm.silenced(nodes, step.action) if isinstance(step, HostCrash) else
                   self.confirm.back(nodes, step.action) if isinstance(step, HostRestart) else _nothing())
        if isinstance(step, HostPartition) and step.for_s:
            await self.backend.sleep(step.for_s)
            back = await self.backend.heal()
            self.act("heal", None, {"links": [f"{x}--{y}" for x, y in back]})
        what = {"host_crash": "down", "host_restart": "back", "host_partition": "cut off"}[step.action]
        return [host, *nodes], f"host {host} {what}: {len(nodes)} node(s), {len(links)} cross-host link(s)"

    # ------------------------------------------------------------------ traffic

    def _traffic(self, step: Traffic) -> Applied:
        b, spec = self.backend, self.scenario.traffic
        rate = step.rate_per_s if step.rate_per_s is not None else (spec.rate_per_s if spec else 4.0)
        n = step.pairs if step.pairs is not None else (spec.pairs if spec else 20)
        modes = spec.modes if spec else ("snek", "tree")
        graph = b.live_graph()
        focus = spec.focus if spec else ()
        pairs = with_focus(graph, sample_pairs(graph, n, self.rng), focus, len(modes)) if step.enabled else []
        b.traffic(step.enabled and rate > 0, rate, pairs, modes, spec.timeout_s if spec else 5.0)
        return [], f"traffic {'on' if step.enabled else 'off'}"
