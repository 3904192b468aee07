"""``snekbed ab --mixed`` in the library: a third arm runs A's and B's nodes together under the same seeds and
faults, and the manifest says step by step where the arms' verdicts differ."""

from __future__ import annotations

import json
from pathlib import Path

from node.core.variants import VariantSpec

from orchestrator.chaos.engine import load_inputs
from orchestrator.experiments.ab import AbPlan, mixed_topology, run_arms, step_divergence
from tests.ci import REPO

A, B = VariantSpec.parse("snek"), VariantSpec.parse("snek,bootstrap_interval=8")


def test_the_mixed_arm_alternates_the_specs_and_runs_beside_both(tmp_path: Path) -> None:
    sc, topo = load_inputs("demo-quick", REPO / "compose" / "topologies" / "line-5.yaml")
    assert topo is not None
    mixed = mixed_topology(topo, A, B)
    names = sorted(n.name for n in topo.nodes)
    assert {n.name: n.variant for n in mixed.nodes} == {n: str(A if i % 2 == 0 else B) for i, n in enumerate(names)}
    manifest = run_arms(AbPlan(A, B, sc, topo, [0, 1], out=tmp_path, mixed=True))
    assert manifest["arms"] == ["a", "b", "mixed"]
    assert [(r["seed"], r["arm"]) for r in manifest["runs"]] == [(s, arm) for s in (0, 1) for arm in ("a", "b", "mixed")]
    for r in manifest["runs"]:
        meta = json.loads((Path(r["run_dir"]) / "meta.json").read_text())
        assert meta["ab"]["arm"] == r["arm"], meta
        if r["arm"] == "mixed":  # the nodes that ran B's spec are named (odd positions in name order)
            assert r["spec"] == f"{A}+{B}"
            assert sorted(meta["variants"]) == names[1::2], meta
    assert manifest["step_divergence"] == step_divergence(manifest["runs"])
    assert json.loads((tmp_path / "ab.json").read_text())["step_divergence"] == manifest["step_divergence"]


def test_step_divergence_names_the_steps_whose_verdicts_differ() -> None:
    def run(arm: str, seed: int, *verdicts: str) -> dict:
        return {"arm": arm, "seed": seed, "steps": [{"index": i, "action": "kill" if i else "wait", "verdict": v}
                                                    for i, v in enumerate(verdicts)]}  # fmt: skip

    runs = [run("a", 0, "pass", "pass"), run("b", 0, "pass", "fail"), run("mixed", 0, "pass", "pass"),
            run("a", 1, "pass", "pass"), run("b", 1, "pass", "pass"), run("mixed", 1, "pass")]  # fmt: skip
    assert step_divergence(runs) == [
        {"seed": 0, "index": 1, "action": "kill", "verdicts": {"a": "pass", "b": "fail", "mixed": "pass"}},
        {"seed": 1, "index": 1, "action": "kill", "verdicts": {"a": "pass", "b": "pass", "mixed": None}},
    ]
