"""Chaos scenarios on the in-process backend (virtual clock): the shipped library, determinism, a checker
that fails when it should, reference sequences, and the random nemesis finding a planted bug."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from orchestrator.chaos.engine import shipped_scenarios
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.nemesis import fault_steps, random_scenario, scenario_from_faults
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import INVARIANTS, Scenario, load_scenario, parse_scenario_yaml
from orchestrator.model.generators import mesh_mixed, ring
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO, SHARED
from tests.orchestrator.planted import write_two_rings

GRAPH_250 = SHARED / "topologies" / "pinecone" / "graph-250.txt"
SHIPPED = sorted(shipped_scenarios())


def _run(topology: Topology | None, scenario: Scenario, seed: int = 0, **kw: Any) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await run_scenario(InprocChaos(topology, seed=seed, **kw), scenario, seed=seed)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _failures(out: dict[str, Any]) -> list[str]:
    return [f"step {s['index']} {s['action']} {s['targets']}: " + "; ".join(
        f"{k}: {v['detail']}" for k, v in s["invariants"].items() if not v["ok"]) + (s.get("detail") or "")
        for s in out["steps"] if s["verdict"] != "pass"]  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=900)  # fmt: skip


# -- the shipped library ---------------------------------------------------------------------------


def test_the_library_has_every_scenario_the_docs_promise() -> None:
    assert set(SHIPPED) >= {"root-kill-x3", "partition-heal", "root-kill-partitioned", "flap", "pause-root", "churn",
                            "adversary-bootstraps"}  # fmt: skip
    docs = (REPO / "docs" / "chaos.md").read_text()
    for name in SHIPPED:
        assert f"`{name}`" in docs, f"docs/chaos.md does not describe {name}"


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_passes_on_a_100_node_mixed_mesh(name: str) -> None:
    out = _run(mesh_mixed(100, seed=3), load_scenario(shipped_scenarios()[name]), seed=3)
    assert out["verdict"] == "pass", _failures(out)
    assert out["traffic"]["sent"] > 0 and out["traffic"]["delivered"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_passes_on_graph_250(name: str) -> None:
    out = _run(load_topology(GRAPH_250), load_scenario(shipped_scenarios()[name]), seed=0)
    assert out["verdict"] == "pass", _failures(out)
    faults = [s for s in out["steps"] if s["action"] != "wait"]
    assert faults and all(set(s["invariants"]) == set(INVARIANTS) for s in faults)


@pytest.mark.slow
def test_a_snake_that_re_orders_node_by_node_after_a_root_kill_is_a_transient_not_a_failure() -> None:
    # Found on graph-250, seed 0: killed 1 s after convergence, the root leaves a snake that re-orders for some
    # 30 s, one node at a time (each for a few seconds, as its descending entry expires before the bootstrap
    # that refreshes it arrives): never ordered at one instant within 16 s, although no node stayed out of order.
    # Judged node by node, the step passes and says so; the nodes that were out of order are named. (The run was
    # found with the routers' timers in lockstep, the in-process default then: boot_spread_s=0 replays it.)
    scenario = parse_scenario_yaml("""
name: root-kill-1s-after-convergence
settle_s: 3
traffic: {rate_per_s: 5, pairs: 20, timeout_s: 2}
steps:
  - {action: wait, until: converged, within_s: 180}
  - {action: kill, target: root, after_s: 1}
  - {action: partition, by: halves, after_s: 2}
  - {action: heal, after_s: 4}
  - {action: wait, s: 3}
""")
    out = _run(load_topology(GRAPH_250), scenario, seed=0, boot_spread_s=0.0)  # found with the timers in lockstep
    assert out["verdict"] == "pass", _failures(out)
    kill = out["steps"][1]
    assert kill["action"] == "kill" and kill["transient"] == ["snake_ordered"]
    detail = kill["invariants"]["snake_ordered"]["detail"]
    assert detail.startswith("transient, held again within ") and "first reading: 1 node(s) out of order: 128:" in detail


@pytest.mark.slow
def test_boot_spread_root_kills_on_a_484_node_corpus_graph_re_converge_with_the_routers_booted_apart(
        tmp_path: Path) -> None:  # fmt: skip
    # graph-250-2 of the reference's corpus, seed 1: in lockstep (every router booted in the same instant, so every
    # bootstrap of the network leaves in the same instant) the snake had not re-converged 55 s after the third kill
    topology = load_topology(SHARED / "topologies" / "pinecone" / "graph-250-2.txt")
    assert len(topology.nodes) == 484
    backend_kw = {"record": tmp_path / "run"}
    out = _run(topology, load_scenario(shipped_scenarios()["root-kill-x3"]), seed=1, **backend_kw)
    assert out["verdict"] == "pass", _failures(out)
    kills = [s for s in out["steps"] if s["action"] == "kill"]
    assert len(kills) == 3 and all(s["snake_converged_s"] is not None for s in kills)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["boot_spread_s"] == 1.0
    # the routers did boot apart: their first bootstraps (each router's first, after its 1 s tick) spread over 1 s
    firsts = []
    for log in (tmp_path / "run" / "events").glob("*.jsonl"):
        sent = [json.loads(line) for line in log.read_text().splitlines() if '"bootstrap_sent"' in line]
        if sent:
            firsts.append(sent[0]["mono_s"] % 1.0)
    assert len(firsts) > 400 and max(firsts) - min(firsts) > 0.9 and len({round(f, 3) for f in firsts}) > 300


@pytest.mark.slow
def test_same_seed_same_json_and_delivery_dips_and_recovers() -> None:
    sc = load_scenario(shipped_scenarios()["root-kill-partitioned"])
    topo = mesh_mixed(40, seed=1)
    a, b = _run(topo, sc, seed=5), _run(topo, sc, seed=5)
    assert a == b  # the virtual clock: no wall time in the document at all
    c = _run(topo, sc, seed=6)
    assert c != a
    per = {s["index"]: s for s in a["traffic"]["per_step"]}
    # the partition (step 1) cuts pairs apart: delivery dips; after the heal (step 3) it is back above it
    dip = per[1]["delivered"] / per[1]["sent"]
    back = per[3]["delivered"] / per[3]["sent"]
    assert dip < 0.95 and back > dip, per


QUICK_CHURN = """\
name: quick-churn
traffic: {rate_per_s: 2, pairs: 4}
steps:
  - {action: wait, until: converged, within_s: 60}
  - {action: churn, fraction: 0.3, duration_s: 6, down_s: 0.2}
"""


def test_a_churned_node_comes_back_only_once_its_leaving_was_measured() -> None:
    """A node down for less than its leaving takes to measure (here 0.2 s against the 1 s of silence a kill needs;
    on a loaded Docker host, a slow kill) is brought back once the kill is confirmed, never before: else the
    confirmation sees it answering again and the step is judged invalid for a fault that did happen."""
    out = _run(ring(10), parse_scenario_yaml(QUICK_CHURN))
    churn = out["steps"][1]
    assert churn["verdict"] == "pass", _failures(out) or churn["confirmed"]
    how = churn["confirmed"]["how"]
    assert how.count("answers nothing, it wrote no frame in") >= 2 and "churn: restart" in how, how


# -- the checker can fail --------------------------------------------------------------------------

CUT_VERTEX_ADVERSARY = """\
name: adversary-cuts-the-network
traffic: {rate_per_s: 4, pairs: 10}
steps:
  - {action: wait, until: converged, within_s: 120}
  - action: adversary
    target: cut_vertex
    drop: {traffic: 100, bootstrap: 100}
    settle_s: 15
"""


def test_an_adversary_on_a_cut_vertex_fails_pairs_reachable_and_exits_1(tmp_path: Path) -> None:
    topo = write_two_rings(tmp_path / "two-rings.yaml")  # h is the only cut vertex
    sc = tmp_path / "cut.yaml"
    sc.write_text(CUT_VERTEX_ADVERSARY)
    done = _cli(str(sc), "--topology", str(topo), "--json")
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert out["verdict"] == "fail" and out["failed_steps"] == [1]
    step = out["steps"][1]
    assert step["targets"] == ["h"] and step["invariants"]["pairs_reachable"]["ok"] is False
    assert "lost" in step["invariants"]["pairs_reachable"]["detail"]
    # the same break, expected, passes (the snake falls apart too: bootstraps cannot cross h)
    sc.write_text(CUT_VERTEX_ADVERSARY + "    expect: {pairs_reachable: false, snake_ordered: false}\n")
    again = _cli(str(sc), "--topology", str(topo), "--json")
    assert again.returncode == 0, again.stdout[-2000:]


def test_the_same_seed_gives_the_same_json_in_another_process(tmp_path: Path) -> None:
    """String hashes differ between processes (PYTHONHASHSEED): nothing in a run may depend on them."""
    outs = []
    for hashseed in ("1", "7"):
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", "--random", "5", "--seed", "3",
                               "--topology", str(REPO / "compose" / "topologies" / "mesh-12.yaml"), "--json"],
                              capture_output=True, text=True, cwd=REPO, timeout=600,
                              env={**os.environ, "PYTHONHASHSEED": hashseed})  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        outs.append(json.loads(done.stdout))
    assert outs[0] == outs[1]


def test_a_bad_scenario_file_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    sc = tmp_path / "bad.yaml"
    sc.write_text("steps:\n  - {action: kill, target: root}\n  - {action: flap, link: [a, b], count: 0}\n")
    done = _cli(str(sc), "--topology", str(REPO / "compose" / "topologies" / "mesh-12.yaml"))
    assert done.returncode == 2
    assert f"{sc}:3: steps[1].count" in done.stderr and "greater than or equal to 1" in done.stderr


# -- the reference simulator's sequences -----------------------------------------------------------

#: written from the reference's documented command list (cmd/pineconesim/sequences/api_reference.json)
SEQUENCE = {
    "EventSequence": [
        {"Command": "Debug", "Data": {}},
        {"Command": "RemoveNode", "Data": {"Name": "Alice"}},  # not there yet: a no-op
        *({"Command": "AddNode", "Data": {"Name": n, "NodeType": "Default"}} for n in ("Alice", "Bob", "Carol", "Dan")),
        {"Command": "AddNode", "Data": {"Name": "Mallory", "NodeType": "GeneralAdversary"}},
        *({"Command": "AddPeer", "Data": {"Node": a, "Peer": b}} for a, b in (
            ("Alice", "Bob"), ("Bob", "Carol"), ("Carol", "Dan"), ("Dan", "Alice"), ("Bob", "Mallory"))),
        {"Command": "StartPings", "Data": {}},
        {"Command": "Delay", "Data": {"Length": 20000}},
        {"Command": "ConfigureAdversaryDefaults", "Data": {"Node": "Mallory", "DropRates": {
            "Overall": "0", "Keepalive": "0", "TreeAnnouncement": "0", "VirtualSnakeBootstrap": "100",
            "WakeupBroadcast": "100", "OverlayTraffic": "100"}}},
        {"Command": "ConfigureAdversaryPeer", "Data": {"Node": "Mallory", "Peer": "Bob", "DropRates": {"Overall": "0"}}},
        {"Command": "Delay", "Data": {"Length": 5000}},
        {"Command": "RemovePeer", "Data": {"Node": "Carol", "Peer": "Dan"}},
        {"Command": "RemovePeer", "Data": {"Node": "Carol", "Peer": "Zed"}},  # no such peering: a no-op
        {"Command": "Delay", "Data": {"Length": 10000}},
        {"Command": "RemoveNode", "Data": {"Name": "Dan"}},
        {"Command": "Delay", "Data": {"Length": 10000}},
        {"Command": "StopPings", "Data": {}},
        {"Command": "Play", "Data": {}},
        {"Command": "Pause", "Data": {}},
    ]
}


def test_a_reference_sequence_builds_its_network_and_runs_in_process(tmp_path: Path) -> None:
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(SEQUENCE, indent=2))
    done = _cli(str(path), "--json", "--record", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    out = json.loads(done.stdout)
    actions = [s["action"] for s in out["steps"]]
    assert actions.count("join") == 10 and "adversary" in actions and actions.count("traffic") == 2
    removes = [s for s in out["steps"] if s["action"] in ("remove_node", "link_down")]
    assert [s.get("detail") for s in removes] == ["no such node: nothing to remove", None,
                                                  "no such link: nothing to do", None]  # fmt: skip
    assert out["traffic"]["delivered"] > 0
    recorded = [json.loads(x)["action"] for x in (tmp_path / "run" / "actions.jsonl").read_text().splitlines()]
    assert recorded.count("join") == 10 and "adversary" in recorded and "kill" in recorded


# -- the random nemesis ----------------------------------------------------------------------------

SMALL = ring(6, link_class="lan", name="ring-6")


def test_random_schedules_pass_on_a_correct_backend_and_replay_from_their_file(tmp_path: Path) -> None:
    topo = mesh_mixed(12, seed=2)
    sc = random_scenario(topo, 6, seed=4)
    out = _run(topo, sc, seed=4)
    assert out["verdict"] == "pass", _failures(out)
    replayed = _run(topo, parse_scenario_yaml(sc.to_yaml()), seed=4)
    assert replayed == out


FAULTS = st.sampled_from(["kill_restart", "pause", "partition", "link_down_up", "flap", "restart"])


class NemesisFindsAPlantedBug(RuleBasedStateMachine):
    """Each rule adds one fault (drawn from the nemesis vocabulary) to a schedule; the invariant replays the
    schedule so far on a fresh in-process network with the planted defect switched on. Hypothesis finds a
    failing schedule and shrinks it."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: list[dict[str, Any]] = []

    @rule(kind=FAULTS, seed=st.integers(0, 1000))
    def add_fault(self, kind: str, seed: int) -> None:
        rng = random.Random(seed)
        self.faults.append({"kind": kind, "steps": fault_steps(kind, rng, SMALL.node_names,
                                                               [(lk.a, lk.b) for lk in SMALL.links])})  # fmt: skip

    @invariant()
    def the_checker_passes(self) -> None:
        if not self.faults:
            return
        sc = scenario_from_faults(self.faults, "nemesis-found")
        out = _run(SMALL, sc, seed=1, planted_bug="restart_keeps_state")
        if out["verdict"] != "pass":
            NemesisFindsAPlantedBug.found = sc
        assert out["verdict"] == "pass", _failures(out)

    found: Scenario | None = None


def test_the_nemesis_finds_a_planted_bug_and_writes_a_scenario_that_replays_it(tmp_path: Path) -> None:
    NemesisFindsAPlantedBug.found = None
    machine = NemesisFindsAPlantedBug.TestCase
    machine.settings = settings(max_examples=10, stateful_step_count=3, deadline=None, derandomize=True,
                                suppress_health_check=list(HealthCheck), database=None)  # fmt: skip
    with pytest.raises(AssertionError):
        machine().runTest()
    found = NemesisFindsAPlantedBug.found
    assert found is not None
    # hypothesis shrank it: one restart is enough to bring back a node with stale state
    restarts = [s for s in found.steps if s.action == "restart"]
    assert restarts and len(found.steps) <= 3, found.to_yaml()
    path = tmp_path / "found.yaml"
    path.write_text(found.to_yaml())
    replay = _run(SMALL, load_scenario(path), seed=1, planted_bug="restart_keeps_state")
    assert replay["verdict"] == "fail"
    assert _run(SMALL, load_scenario(path), seed=1)["verdict"] == "pass"  # without the defect the same file passes
