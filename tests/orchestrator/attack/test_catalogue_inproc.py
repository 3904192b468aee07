"""Every attack of the catalogue in one run, in process, on graph-250 at fraction 0.02 (5 adversaries), seed 0
(issue 31: each attack runs in process on graph-250; docs/attacks.md, "Every attack in one run")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.experiments.attack import ATTACKS, AttackError, catalogue_scenario
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO, SHARED
from tests.orchestrator.attack.catalogue_checks import assert_acted, evidence

GRAPH_250 = SHARED / "topologies" / "pinecone" / "graph-250.txt"
RING8 = REPO / "compose" / "topologies" / "ring-8.yaml"


def test_the_catalogue_scenario_runs_each_attack_in_its_own_window() -> None:
    sc, infos = catalogue_scenario(load_topology(RING8), 0.25, 3, window_s=5, settle_s=2,
                                   attacks=("drop", "sybil", "root_takeover", "forge"))  # fmt: skip
    assert [i["name"] for i in infos] == ["drop", "sybil", "root_takeover", "forge"]
    assert infos[0]["window"] == [1, 3, 4] and sc.steps[0].action == "wait"  # k = 2: one on step, the wait, one off, the check
    for info in infos:
        on, off, check = info["window"]
        assert sc.steps[off - 1].action == "wait" and sc.steps[off - 1].s == 5
        assert sc.steps[check].action == "check" and sc.steps[check].reconvergence
    assert [i["window"][0] for i in infos[1:]] == [i["window"][2] + 1 for i in infos[:-1]]
    assert infos[-1]["window"][2] == len(sc.steps) - 1
    assert infos[1]["adversaries"] == ["sybil-01", "sybil-02"] and infos[1]["victim"] is not None
    assert infos[2]["adversaries"] == ["root-takeover-01", "root-takeover-02"] and infos[2]["victim"] is None
    assert sc.traffic is not None and sc.traffic.focus == (infos[1]["victim"],)
    sc, infos = catalogue_scenario(load_topology(RING8), 0.25, 3, window_s=5, settle_s=2, attacks=("drop",))
    assert sc.traffic is not None and not sc.traffic.focus and infos[0]["victim"] is None


@pytest.mark.parametrize("attacks, fraction, says", [(("drop", "nosuch"), 0.1, "unknown attack 'nosuch'"),
                                                     ((), 0.1, "at least one attack"),
                                                     (("drop",), 1.5, "outside [0, 1]")])  # fmt: skip
def test_bad_input_raises_attack_error(attacks: tuple[str, ...], fraction: float, says: str) -> None:
    with pytest.raises(AttackError, match=says.replace("[", r"\[").replace("]", r"\]")):
        catalogue_scenario(load_topology(RING8), fraction, 0, window_s=5, settle_s=2, attacks=attacks)


def test_every_attack_in_one_run_on_graph_250(tmp_path: Path) -> None:
    topo = load_topology(GRAPH_250)
    sc, infos = catalogue_scenario(topo, 0.02, 0, window_s=6, settle_s=4)
    assert [i["name"] for i in infos] == list(ATTACKS)
    assert all(len(i["adversaries"]) == 5 for i in infos)
    joined = [n for i in infos if ATTACKS[i["name"]].joins for n in i["adversaries"]]
    assert len(set(joined)) == len(joined) == 10
    t0 = time.monotonic()
    result = execute(sc, topo, ChaosOptions(seed=0, record=tmp_path / "run"))
    wall = time.monotonic() - t0
    ev = evidence(result, infos, Path(result["run_dir"]))
    print(f"\ncatalogue on graph-250 in process: {wall:.1f} s wall, {result['protocol_time_s']:.0f} s virtual")
    for name, got in ev.items():
        print(f"  {name}: swallowed {got['swallowed']}, rejected {got['rejected']}, accepted/s {got['accepted_rate']}"
              f", confirmed {len(got['confirmed'])}, check {got['check']}")
    assert_acted(ev, infos)
    assert result["verdict"] == "pass", result["failed_steps"]
