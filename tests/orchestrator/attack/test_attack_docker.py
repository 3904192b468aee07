"""The attack experiment on Docker: mesh-12, one fraction, one seed, a black hole (the analysis is the in-process
test's; here the runs themselves: adversaries chosen, turned on and off through the admin API, every container
removed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from node.core.variants import VariantSpec
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.experiments.attack import ATTACKS, AttackPlan, catalogue_scenario, run_attack
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO
from tests.orchestrator.attack.catalogue_checks import assert_acted, evidence
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"


def test_drop_on_mesh12_at_one_fraction_on_docker(client: object, image: str, tmp_path: Path) -> None:
    plan = AttackPlan(ATTACKS["drop"], load_topology(MESH12), [0.1], [0], (VariantSpec(),), backend="docker",
                      out=tmp_path, window_s=10, settle_s=5, image=image)  # fmt: skip
    manifest = run_attack(plan)
    (run,) = manifest["runs"]
    run_dir = Path(run["run_dir"])
    try:
        assert len(run["adversaries"]) == 1 and run["window"] == [1, 3]
        actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
        adv = [a for a in actions if a["action"] == "adversary"]
        assert [a["target"] for a in adv] == run["adversaries"] * 2  # on, then off
        assert adv[0]["detail"]["drop"] == {"traffic": 100} and adv[1]["detail"]["drop"] == {"traffic": 0}
        assert run["steps"][-1]["action"] == "check" and run["verdict"] == "pass", run["steps"]
        assert (tmp_path / "attack.json").is_file()
    finally:
        left = left_behind(client, run_dir.name)
    assert not left, left


def test_every_attack_in_one_run_on_mesh12_on_docker(client: object, image: str, tmp_path: Path) -> None:
    """The catalogue run (catalogue_scenario) on mesh-12 at fraction 0.1 (1 adversary), seed 0, 4 s windows."""
    topo = load_topology(MESH12)
    sc, infos = catalogue_scenario(topo, 0.1, 0, window_s=4, settle_s=4)
    t0 = time.monotonic()
    result = execute(sc, topo, ChaosOptions(backend="docker", seed=0, runs_dir=tmp_path, image=image))
    run_dir = Path(result["run_dir"])
    try:
        ev = evidence(result, infos, run_dir)
        print(f"\ncatalogue on mesh-12 on Docker: {time.monotonic() - t0:.1f} s wall")
        for name, got in ev.items():
            print(f"  {name}: swallowed {got['swallowed']}, took root {got['took_root']}, rejected {got['rejected']}, accepted/s "
                  f"{got['accepted_rate']}, confirmed {len(got['confirmed'])}, check {got['check']}")
        assert_acted(ev, infos, inproc=False)
        assert result["verdict"] == "pass", result["failed_steps"]
    finally:
        left = left_behind(client, run_dir.name)
    assert not left, left
