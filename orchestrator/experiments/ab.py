"""A/B experiments: one topology and one chaos scenario, two protocol variants, N seeds (docs/variants.md).

For every seed both arms run the same scenario on the same topology with the same seed, so they get the
same node keys (derived from seed and name), the same links and link shapes (drawn from the seeded RNG in
the same order), the same fault schedule (the scenario's steps and their targets, resolved from the same
keys) and the same ping pairs; the protocol variant and knobs are the only input that differs. (Per-frame
delays are drawn as frames are sent, so once the arms send different frames their delay draws differ: that
is the protocol's doing, not the setup's.)

With ``mixed``, a third arm runs both together: the topology's nodes in name order alternate A's spec and B's
(a mixed network of snekbed and reference nodes with ``--a snek --b pinecone``), under the same seed, keys,
links and faults. The paired statistics compare A with B; the mixed arm is judged step by step
(:func:`step_divergence`: where the arms' verdicts differ, for every arm).

Every run is recorded as a normal run directory, ``OUT/runs/<arm>-s<seed>``, whose ``meta.json`` carries
``ab`` (experiment, arm, seed, both specs); ``OUT/ab.json`` is the manifest (arms, every run's verdict and
per-step re-convergence as the chaos checker saw it). The Spark pipeline then analyses all the runs
(``OUT/analysis``) and pairs the arms by seed (pipeline.jobs.ab).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.core.variants import VariantSpec

from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import Scenario
from orchestrator.model.runs import new_run_id
from orchestrator.model.topology import Topology

__all__ = ["AbPlan", "mixed_topology", "run_arms", "step_divergence"]

ARMS = ("a", "b")
MIXED = "mixed"


@dataclass(frozen=True)
class AbPlan:
    """What an A/B experiment runs. ``seeds`` are the seeds themselves (``range(N)`` for ``--seeds N``)."""

    a: VariantSpec
    b: VariantSpec
    scenario: Scenario
    topology: Topology | None
    seeds: Sequence[int]
    backend: str = "inproc"
    out: Path = Path("ab")
    experiment: str = ""
    image: str | None = None
    pinecone_src: Path | None = None  # the reference to build the reference node from (an arm or node of pinecone)
    alpha: float = 0.05  # the level the paired test is judged at (snekbed ab --alpha)
    warnings: tuple[str, ...] = ()  # what the seeds cannot conclude, said before the runs (pipeline.jobs.ab)
    mixed: bool = False  # a third arm: A's and B's nodes together (mixed_topology)

    @property
    def arms(self) -> tuple[str, ...]:
        return (*ARMS, MIXED) if self.mixed else ARMS

    def spec(self, arm: str) -> VariantSpec:
        """The arm's run-wide spec (the mixed arm's: A's, for what names no spec of its own, a joining node)."""
        return self.b if arm == "b" else self.a

    def topology_of(self, arm: str) -> Topology | None:
        if arm != MIXED or self.topology is None:
            return self.topology
        return mixed_topology(self.topology, self.a, self.b)


def mixed_topology(topology: Topology, a: VariantSpec, b: VariantSpec) -> Topology:
    """``topology`` with its nodes, in name order, running A's spec and B's in turn (a node that names its own
    variant keeps it)."""
    order = {name: i for i, name in enumerate(sorted(n.name for n in topology.nodes))}
    nodes = [n if n.variant is not None else
             n.model_copy(update={"variant": str(a if order[n.name] % 2 == 0 else b), "knobs": {}})
             for n in topology.nodes]  # fmt: skip
    return topology.model_copy(update={"nodes": nodes})


def step_divergence(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where the arms' verdicts differ, step by step: for each seed and step index whose verdict is not the same
    in every arm that ran it, ``{"seed", "index", "action", "verdicts": {arm: verdict}}`` (an arm whose run has
    no such step shows None)."""
    by_seed: dict[int, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["arm"]] = {s["index"]: s for s in r["steps"]}
    out: list[dict[str, Any]] = []
    for seed in sorted(by_seed):
        arms = by_seed[seed]
        for index in sorted({i for steps in arms.values() for i in steps}):
            verdicts = {arm: (steps.get(index) or {}).get("verdict") for arm, steps in sorted(arms.items())}
            if len(set(verdicts.values())) > 1:
                action = next(steps[index]["action"] for steps in arms.values() if index in steps)
                out.append({"seed": seed, "index": index, "action": action, "verdicts": verdicts})
    return out


_BOUND = re.compile(r"bound (\d+(?:\.\d+)?)")


def _bound_s(rec: dict[str, Any]) -> float | None:
    """The re-convergence bound of a step: the record's ``bound_s`` or ``reconvergence.bound_s``, else the one its
    ``reconverged_within_bound`` detail names (the lower end of a range); None without one."""
    for where in (rec, rec.get("reconvergence") or {}):
        if where.get("bound_s") is not None:
            return float(where["bound_s"])
    detail = (rec.get("invariants") or {}).get("reconverged_within_bound", {}).get("detail", "")
    m = _BOUND.search(detail or "")
    return float(m.group(1)) if m else None


def _step_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """What the manifest keeps of one chaos step record, with ``bound_s`` and ``watched_s`` (how long its
    re-convergence was watched: what a step that never re-converged is censored at)."""
    keep = ("index", "action", "at_s", "verdict", "tree_converged_s", "snake_converged_s", "live_nodes", "components")
    out = {k: rec.get(k) for k in keep if k in rec}
    out["bound_s"] = _bound_s(rec)
    # how long re-convergence was watched: past the bound up to the horizon when the checker tells slow from stuck
    horizon = (rec.get("reconvergence") or {}).get("horizon_s")
    out["watched_s"] = float(horizon) if horizon is not None else out["bound_s"]
    out["targets"] = [str(t) for t in rec.get("targets", [])]
    if "delivery" in rec:
        out["delivery"] = rec["delivery"]
    return out


def _options(plan: AbPlan, seed: int, spec: VariantSpec, ab: dict[str, Any], record: Path) -> ChaosOptions:
    """One arm's run: recorded at ``record`` (in process), or as a Docker run under ``OUT/runs``. The mixed arm's
    nodes each name their spec (mixed_topology); a node a join step adds runs A's."""
    if plan.backend == "inproc":
        return ChaosOptions(seed=seed, variant=spec, ab=ab, record=record)
    return ChaosOptions(backend=plan.backend, seed=seed, variant=spec, ab=ab, runs_dir=record.parent, image=plan.image,
                        pinecone_src=plan.pinecone_src)


def run_arms(plan: AbPlan, progress: Callable[[str, int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every (seed, arm) pair, recording each run; write and return the manifest (``OUT/ab.json``).

    ``progress(arm, seed, chaos_result)`` is called after each run. Arms alternate within a seed (a, b, a, b,
    ...; a, b, mixed with ``mixed``) so a slow drift of the machine cannot favour one arm.
    """
    experiment = plan.experiment or f"ab-{new_run_id()}"
    root = plan.out / "runs"
    root.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for seed in plan.seeds:
        for arm in plan.arms:
            spec = plan.spec(arm)
            ab = {"experiment": experiment, "arm": arm, "seed": seed, "a": str(plan.a), "b": str(plan.b)}
            record = root / f"{arm}-s{seed}"
            t0 = time.monotonic()
            result = execute(plan.scenario, plan.topology_of(arm), _options(plan, seed, spec, ab, record))
            run = {
                "arm": arm, "seed": seed, "spec": f"{plan.a}+{plan.b}" if arm == MIXED else str(spec),
                "run_dir": result["run_dir"],
                "verdict": result["verdict"], "wall_s": round(time.monotonic() - t0, 2),
                "steps": [_step_summary(s) for s in result.get("steps", [])],
            }  # fmt: skip
            runs.append(run)
            if progress is not None:
                progress(arm, seed, run)
    manifest = {
        "experiment": experiment,
        "a": str(plan.a),
        "b": str(plan.b),
        "scenario": plan.scenario.name,
        "topology": plan.topology.name if plan.topology is not None else None,
        "backend": plan.backend,
        "seeds": list(plan.seeds),
        "alpha": plan.alpha,
        "warnings": list(plan.warnings),
        "arms": list(plan.arms),
        "runs": runs,
        "step_divergence": step_divergence(runs),
        "runs_wall_s": round(time.monotonic() - started, 2),
    }
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "ab.json").write_text(json.dumps(manifest, indent=1))
    return manifest
