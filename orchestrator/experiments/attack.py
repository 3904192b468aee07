"""Damage curves: one attack at growing adversary fractions, N seeds each (``snekbed attack``, docs/attacks.md).

For each fraction ``f`` and seed the experiment generates a chaos scenario (:func:`attack_scenario`):

1. wait until the network converged;
2. the adversaries turn on: ``k = max(1, round(f * n))`` of the topology's ``n`` nodes (none at ``f = 0``) are
   made adversaries by one ``adversary`` step whose target lists them all, or, for an attack that needs keys of
   its own (``sybil``, ``root_takeover``: :data:`ATTACKS` ``joins``), ``k`` new nodes with ground keys join (a
   ``join`` step each) and then turn in one ``adversary`` step;
3. the attack window: ``window_s`` seconds of background traffic (default 60 s, one wakeup-broadcast period, so
   each window holds one of the periodic bursts, whatever its phase), measured from its ``wait`` step (every
   adversary on, its drops confirmed) to the first off step (``measured`` in the manifest);
4. the adversaries leave, in one step: they turn honest (``strategy: none``; a ``drop`` adversary drops nothing);
   joined ones turn honest too, then are killed in a second step (the first step's ``replaced`` records what their
   strategies did by their own counts, which a killed node's last event interval would lose on Docker);
5. a ``check`` step judges the invariants after the adversaries left, re-convergence timed from it (the checker's
   honest view judges any step while adversaries are present: orchestrator.chaos.checker).

At ``f = 0`` the steps of 2 and 4 are ``note`` steps, so the attack window is the same part of every run
(from the step that turns the adversaries on to the first that turns them off: ``window`` in the manifest).

Which nodes (``--select``, :func:`choose`): ``random`` (a seeded sample), ``max_degree`` (highest degree first,
ties by name), ``victim`` (the ``k`` nodes nearest one victim by hops, ties by name). The victim of a seed is
drawn from the seed (``attack-victim-<seed>``) among the topology's nodes, the same at every fraction; a targeted
attack (``sybil``, or ``--select victim``) reports its reachability. Joined adversaries peer with the victim
(``sybil``) or with two nodes chosen by the rule (``root_takeover``).

Every run is kept as a run directory ``OUT/runs/<variant>/f<fraction>-s<seed>``; ``OUT/attack.json`` is the
manifest (the runs, their adversaries, victim, window and verdicts), which the Spark pipeline turns into the
damage curves (pipeline.attack).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
from pydantic import ValidationError

from node.core.variants import VariantSpec

from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import Scenario
from orchestrator.experiments.ab import _options, _step_summary
from orchestrator.model.runs import new_run_id
from orchestrator.model.topology import Topology

__all__ = ["ATTACKS", "SELECT_RULES", "AttackError", "AttackPlan", "AttackSpec", "attack_scenario",
           "catalogue_scenario", "choose", "run_attack"]

SELECT_RULES = ("random", "max_degree", "victim")


class AttackError(ValueError):
    """An attack that cannot be run as asked (unknown name, a fraction outside [0, 1], a strategy this build lacks)."""


@dataclass(frozen=True)
class AttackSpec:
    """One attack of the catalogue: the ``adversary`` step's fields that make a node this adversary."""

    name: str
    what: str
    step: dict[str, Any]
    #: ``None``: adversaries are topology nodes; ``near`` / ``above_all``: new nodes join with keys ground so
    joins: str | None = None
    targeted: bool = False
    select: str = "random"
    #: the fields that turn the adversary honest again
    leave: dict[str, Any] = field(default_factory=lambda: {"strategy": "none"})


#: Every attack of issue 31, in catalogue order. ``VICTIM`` in a step is replaced by the seed's victim.
ATTACKS: dict[str, AttackSpec] = {a.name: a for a in (
    AttackSpec("drop", "drops every data frame it should forward (a black hole)", {"drop": {"traffic": 100}},
               leave={"drop": {"traffic": 0}}),
    AttackSpec("greyhole", "forwards only 30 % of the traffic it should forward", {"strategy": "greyhole",
                                                                                    "forward": 0.3}),
    AttackSpec("sybil", "k identities ground next to the victim's key swallow what is meant for it",
               {"strategy": "sybil", "victim": "VICTIM"}, joins="near", targeted=True, select="victim"),
    AttackSpec("root_takeover", "a key ground above every honest key becomes the root and drops traffic",
               {"strategy": "root_takeover", "mode": "drop", "period_s": 10}, joins="above_all"),
    AttackSpec("bootstrap_flood", "bootstraps at 10 times the protocol's rate", {"strategy": "bootstrap_flood",
                                                                                "multiple": 10}),
    AttackSpec("announcement_flood", "tree announcements at 10 times the protocol's rate",
               {"strategy": "announcement_flood", "multiple": 10}),
    AttackSpec("replay", "replays captured signed announcements out of order", {"strategy": "replay"}),
    AttackSpec("forge", "sends frames with bad signatures or impossible coordinates",
               {"strategy": "forge", "rate_per_s": 20}),
)}  # fmt: skip


@dataclass(frozen=True)
class AttackPlan:
    attack: AttackSpec
    topology: Topology
    fractions: Sequence[float]
    seeds: Sequence[int]
    variants: Sequence[VariantSpec] = (VariantSpec(),)
    select: str | None = None  # None: the attack's own rule
    backend: str = "inproc"
    out: Path = Path("attack")
    #: one wakeup-broadcast period (60 s, PROTOCOL.md §6.8): every window holds one burst, whatever its phase
    window_s: float = 60.0
    settle_s: float = 10.0
    image: str | None = None
    pinecone_src: Path | None = None

    @property
    def rule(self) -> str:
        return self.select or self.attack.select


def attack_of(name: str) -> AttackSpec:
    if name not in ATTACKS:
        raise AttackError(f"unknown attack {name!r}; known: {', '.join(ATTACKS)}")
    return ATTACKS[name]


def check_fractions(fractions: Sequence[float]) -> list[float]:
    bad = [f for f in fractions if not (0.0 <= f <= 1.0) or math.isnan(f)]
    if bad:
        raise AttackError(f"--fractions: {', '.join(map(str, bad))} outside [0, 1]")
    if not fractions:
        raise AttackError("--fractions: give at least one fraction")
    return sorted(set(fractions))


def adversary_count(fraction: float, n: int) -> int:
    """``k = max(1, round(fraction * n))`` for a fraction above 0, 0 at 0, never more than ``n``."""
    return 0 if fraction <= 0 else min(n, max(1, round(fraction * n)))


def victim_of(topology: Topology, seed: int) -> str:
    names = sorted(n.name for n in topology.nodes)
    return random.Random(f"attack-victim-{seed}").choice(names)


def _graph(topology: Topology) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(n.name for n in topology.nodes)
    g.add_edges_from((link.a, link.b) for link in topology.links)
    return g


def choose(topology: Topology, k: int, rule: str, seed: int, victim: str) -> list[str]:
    """The ``k`` topology nodes ``rule`` picks (module doc), sorted; never the victim."""
    g = _graph(topology)
    names = sorted(n for n in g.nodes if n != victim)
    if rule == "random":
        return sorted(random.Random(f"attack-select-{seed}").sample(names, min(k, len(names))))
    if rule == "max_degree":
        return sorted(sorted(names, key=lambda n: (-g.degree[n], n))[:k])
    if rule == "victim":
        hops = nx.single_source_shortest_path_length(g, victim)
        return sorted(sorted(names, key=lambda n: (hops.get(n, math.inf), n))[:k])
    raise AttackError(f"--select {rule!r}: one of {', '.join(SELECT_RULES)}")


def _step(spec: dict[str, Any], victim: str) -> dict[str, Any]:
    return {k: (victim if v == "VICTIM" else v) for k, v in spec.items()}


def _on_off(a: AttackSpec, topo: Topology, k: int, rule: str, seed: int, victim: str,
            prefix: str = "adv") -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """One attack's adversaries and the steps that turn them on and off (module doc, 2 and 4); joined adversaries
    are named ``<prefix>01``, ``<prefix>02``, ... Every adversary turns (and leaves) in ONE step whose target is
    the list of them, confirmed together: the window opens at once whatever the fraction."""
    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    if a.joins is not None:
        adversaries = [f"{prefix}{i + 1:02d}" for i in range(k)]
        points = choose(topo, 2 * k, rule, seed, victim)
        for i, name in enumerate(adversaries):
            peers = [victim] + points[i:i + 1] if a.joins == "near" else points[2 * i:2 * i + 2] or [victim]
            key = {"near": victim, "side": "above" if i % 2 == 0 else "below"} if a.joins == "near" else {
                "above_all": True}
            on.append({"action": "join", "node": name, "peers": sorted(set(peers)), "adversary": True, "key": key,
                       "check": False})  # fmt: skip
    else:
        adversaries = choose(topo, k, rule, seed, victim)
    if adversaries:
        on.append({"action": "adversary", "target": list(adversaries), **_step(a.step, victim), "check": False})
        off.append({"action": "adversary", **a.leave, "target": list(adversaries), "check": False})
        if a.joins is not None:  # and then leave the network
            off.append({"action": "kill", "target": list(adversaries), "check": False})
    else:
        on = [{"action": "note", "note": f"{a.name}: attack window opens (no adversary at fraction 0)"}]
        off = [{"action": "note", "note": f"{a.name}: attack window closes"}]
    return adversaries, on, off


def _traffic(n: int, victim: str | None) -> dict[str, Any]:
    # a targeted attack's mesh has the victim's pairs take every other turn (targets.with_focus), at twice the
    # rate: its reachability is measured in every window, from some 5 pings a second, the others' as untargeted
    traffic: dict[str, Any] = {"rate_per_s": 10, "pairs": min(n * (n - 1), 60), "modes": ["snek", "tree"]}
    if victim is not None:
        traffic |= {"rate_per_s": 20, "focus": [victim]}
    return traffic


def _validated(doc: dict[str, Any], what: str, strategy: str) -> Scenario:
    try:
        return Scenario.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise AttackError(f"{what}: its scenario is not valid in this build ({where}: {first['msg']}); "
                          f"the strategy {strategy!r} may not be implemented yet") from None


def attack_scenario(plan: AttackPlan, fraction: float, seed: int) -> tuple[Scenario, dict[str, Any]]:
    """The scenario of one run and what the manifest keeps of it (adversaries, victim, the window's step indexes).
    AttackError when the steps are not valid in this build (a strategy not implemented yet)."""
    a, topo = plan.attack, plan.topology
    n = len(topo.nodes)
    k = adversary_count(fraction, n)
    victim = victim_of(topo, seed)
    steps: list[dict[str, Any]] = [{"action": "wait", "until": "converged", "within_s": 180}]
    adversaries, on, off = _on_off(a, topo, k, plan.rule, seed, victim)
    on_index = len(steps)
    steps += on
    steps.append({"action": "wait", "s": plan.window_s, "check": False})
    off_index = len(steps)
    steps += off
    steps.append({"action": "check", "reconvergence": True, "settle_s": plan.settle_s,
                  "note": "after the adversaries left"})
    targeted = a.targeted or plan.rule == "victim"
    doc = {"name": f"attack-{a.name}-f{fraction:g}", "description": a.what, "settle_s": plan.settle_s,
           "traffic": _traffic(n, victim if targeted else None), "steps": steps}
    sc = _validated(doc, f"attack {a.name}", a.step.get("strategy", "drop"))
    # measured: from the window's wait (every adversary on and, where it can be, confirmed) to the first off step,
    # window_s whatever the fraction (``window`` also holds the on steps, as long as their confirmation takes)
    info = {"adversaries": adversaries, "victim": victim if targeted else None,
            "k": k, "window": [on_index, off_index], "measured": [off_index - 1, off_index]}  # fmt: skip
    return sc, info


def catalogue_scenario(topology: Topology, fraction: float, seed: int, *, window_s: float, settle_s: float,
                       attacks: Sequence[str] = tuple(ATTACKS)) -> tuple[Scenario, list[dict[str, Any]]]:
    """Every attack of ``attacks`` (catalogue order by default) in turn in ONE run on ``topology`` at ``fraction``
    (docs/attacks.md, "Every attack in one run"): wait converged; then per attack its on steps, a wait of
    ``window_s``, its off steps and a check with re-convergence, each exactly as :func:`attack_scenario` builds
    them (the attack's own ``--select`` rule, the seed's victim). Joined adversaries are named after their attack
    (``sybil-01``, ``root-takeover-01``), unique across the run. The mesh is focused on the victim when any attack
    is targeted: its reachability is then measured in every window (sybil's the only damage one sees), the other
    half of the pings measure the untargeted ones. Returns the scenario and, per attack, ``name``,
    ``adversaries``, ``victim`` (targeted attacks only), ``k`` and ``window`` ``[on_index, off_index,
    check_index]``. AttackError: an unknown attack, a fraction outside [0, 1], a strategy this build lacks."""
    specs = [attack_of(name) for name in attacks]
    if not specs:
        raise AttackError("the catalogue run needs at least one attack")
    check_fractions([fraction])
    n = len(topology.nodes)
    k = adversary_count(fraction, n)
    victim = victim_of(topology, seed)
    steps: list[dict[str, Any]] = [{"action": "wait", "until": "converged", "within_s": 180}]
    infos: list[dict[str, Any]] = []
    for a in specs:
        adversaries, on, off = _on_off(a, topology, k, a.select, seed, victim, prefix=a.name.replace("_", "-") + "-")
        on_index = len(steps)
        steps += on
        steps.append({"action": "wait", "s": window_s, "check": False})
        off_index = len(steps)
        steps += off
        infos.append({"name": a.name, "adversaries": adversaries, "k": k,
                      "victim": victim if a.targeted or a.select == "victim" else None,
                      "window": [on_index, off_index, len(steps)]})  # fmt: skip
        steps.append({"action": "check", "reconvergence": True, "settle_s": settle_s,
                      "note": f"{a.name}: after the adversaries left"})
    targeted = any(i["victim"] is not None for i in infos)
    doc = {"name": f"attack-catalogue-f{fraction:g}", "settle_s": settle_s,
           "description": "every attack in turn: " + ", ".join(a.name for a in specs),
           "traffic": _traffic(n, victim if targeted else None), "steps": steps}
    return _validated(doc, "the catalogue run", ", ".join(a.step.get("strategy", "drop") for a in specs)), infos


def run_attack(plan: AttackPlan, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every (variant, fraction, seed) run, recorded; writes and returns the manifest ``OUT/attack.json``.
    Scenarios are all built first, so a strategy this build lacks fails before any run."""
    experiment = f"attack-{plan.attack.name}-{new_run_id()}"
    built = {(f, s): attack_scenario(plan, f, s) for f in plan.fractions for s in plan.seeds}
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for seed in plan.seeds:  # seed outermost: a slow drift of the machine spreads over every fraction
        for fraction in plan.fractions:
            for variant in plan.variants:
                sc, info = built[(fraction, seed)]
                record = plan.out / "runs" / str(variant).replace(",", "_").replace("=", "-") / f"f{fraction:g}-s{seed}"
                record.parent.mkdir(parents=True, exist_ok=True)
                # no ``ab`` in its meta.json: the run is no A/B arm (the pipeline would pair it as one)
                options: ChaosOptions = _options(_Plan(plan.backend, plan.image, plan.pinecone_src), seed, variant,
                                                 None, record)  # type: ignore[arg-type]
                t0 = time.monotonic()
                result = execute(sc, plan.topology, options)
                run = {"variant": str(variant), "fraction": fraction, "seed": seed, "run_dir": result["run_dir"],
                       "verdict": result["verdict"], "wall_s": round(time.monotonic() - t0, 2), **info,
                       "steps": [_step_summary(s) for s in result.get("steps", [])]}  # fmt: skip
                runs.append(run)
                if progress is not None:
                    progress(run)
    manifest = {
        "experiment": experiment, "attack": plan.attack.name, "what": plan.attack.what,
        "topology": plan.topology.name, "nodes": len(plan.topology.nodes), "backend": plan.backend,
        "select": plan.rule, "fractions": list(plan.fractions), "seeds": list(plan.seeds),
        "variants": [str(v) for v in plan.variants], "window_s": plan.window_s, "runs": runs,
        "runs_wall_s": round(time.monotonic() - started, 2),
    }  # fmt: skip
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "attack.json").write_text(json.dumps(manifest, indent=1))
    return manifest


@dataclass(frozen=True)
class _Plan:
    """What ab's ``_options`` reads of a plan (the backend, the Docker image and the reference's source)."""

    backend: str
    image: str | None
    pinecone_src: Path | None

