"""Chaos while nodes move, in process (docs/mobility.md, "Chaos"): the movement runs through the scenario, radio
links come and go, faults and radio links meet as documented, the ``mobility`` step halts, resumes and changes the
movement, and the checker judges the components that had time to settle, continuously while the nodes move."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from contract.dataset import ACTION_FIELDS, validate_record
from contract.exit_codes import BAD_INPUT
from contract.mobility import MOBILITY_FIELDS
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.inproc_mobile import MobileInprocChaos
from orchestrator.chaos.scenario import ScenarioError, parse_scenario_yaml
from orchestrator.cli import main
from orchestrator.model.mobility import distance
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import build_world
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology


def _walkers(tmp_path: Path, n: int = 12, duration_s: float = 60, area: float = 100, speed: str = "[0.5, 2]") -> Path:
    lines = ["name: walkers", f"movement: {{tick_s: 1, duration_s: {duration_s}}}", "radios:",
             "  bluetooth: {range_m: 15}", "  lan: {range_m: 40, class: lan}", "nodes:"]
    lines += [f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: [{area}, {area}], speed_mps: "
              f"{speed}}}}}" for i in range(n)]
    lines += ["  - {name: post, position: [50, 50]}"]
    path = tmp_path / "walkers.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


FAULTS = """\
name: moving-faults
steps:
  - {action: wait, until: converged, within_s: 60}
  - {action: kill, target: root, after_s: 5}
  - {action: partition, by: halves, after_s: 5}
  - {action: heal, after_s: 10}
  - {action: mobility, movement: stop, after_s: 5}
  - {action: check, after_s: 60}
"""


def _chaos(topo_path: Path, scenario: str, seed: int = 1, **kw: Any) -> dict[str, Any]:
    topo = load_topology(topo_path)
    return execute(parse_scenario_yaml(scenario, topology=topo), topo, ChaosOptions(seed=seed, **kw))


def test_a_scenario_runs_while_the_nodes_move_and_is_judged(tmp_path: Path) -> None:
    out = _chaos(_walkers(tmp_path, duration_s=600), FAULTS)
    assert out["verdict"] == "pass", [s for s in out["steps"] if s["verdict"] != "pass"]
    m = out["mobility"]
    assert m["link_ups"] > 20 and m["link_downs"] > 20 and m["nodes"] == 13  # 12 walkers and a post
    assert 0 < m["moved_s"] < 600  # the mobility step stopped it before the topology's 600 s
    assert m["delivery"]["connected"]["sent"] > 0
    assert m["delivery"]["connected"]["delivered"] <= m["delivery"]["connected"]["sent"]
    assert out["traffic"]["sent"] == sum(row["sent"] for row in m["delivery"].values())
    # while they moved, some checks left unsettled components out; the last one, 60 s after they stopped, judges all
    kill = out["steps"][1]
    assert kill["settled_nodes"] < kill["live_nodes"]
    assert "not judged" in kill["invariants"]["snake_ordered"]["detail"]
    last = out["steps"][-1]
    assert last["settled_nodes"] == last["live_nodes"] == 12  # the root is dead
    assert all(v["ok"] and v.get("evaluated", True) for k, v in last["invariants"].items()
               if k != "reconverged_within_bound")
    watch = out["watch"]
    assert watch["verdict"] == "pass" and watch["readings"] >= 20 and watch["judged_readings"] > 0
    assert 0 < watch["judged_share"] < 1
    again = _chaos(_walkers(tmp_path, duration_s=600), FAULTS)
    assert again == out and out["trace_sha256"] is not None  # the same seed, the same run
    assert _chaos(_walkers(tmp_path, duration_s=600), FAULTS, seed=2)["trace_sha256"] != out["trace_sha256"]


STEPS = """\
name: moves
traffic: null
steps:
  - {action: mobility, nodes: [n01], speed_mps: 8, after_s: 10}
  - {action: mobility, nodes: [n02], position: [5, 5], after_s: 5}
  - {action: mobility, nodes: [n03], model: {model: gauss_markov, area_m: [100, 100], speed_mps: 4}, after_s: 1}
  - {action: mobility, movement: stop, after_s: 14}
  - {action: mobility, movement: start, for_s: 10, after_s: 20}
  - {action: wait, s: 15}
"""


def _run_id(run: Path) -> str:
    return str(json.loads((run / "meta.json").read_text())["run_id"])


def _rows(run: Path) -> list[dict[str, Any]]:
    lines = (run / "mobility.jsonl").read_text().splitlines()
    assert all(validate_record(line, MOBILITY_FIELDS, _run_id(run)) is None for line in lines)
    return [json.loads(line) for line in lines]


def test_mobility_steps_change_the_movement_as_recorded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    out = _chaos(_walkers(tmp_path), STEPS, record=run)
    assert out["verdict"] == "pass"
    at = {s["index"]: s["at_s"] for s in out["steps"]}
    t0 = out["time_origin"]["mono_s"]
    rows = _rows(run)
    pos = {}
    for r in rows:
        if r["kind"] == "position":
            pos.setdefault(r["node"], []).append((r["mono_s"] - t0, (r["x_m"], r["y_m"])))
    # n01 at 8 m/s after step 0: some tick covers more than its old 2 m/s, none more than 8
    after = [p for p in pos["n01"] if at[0] <= p[0] <= at[3]]
    hops = [distance(p[1], q[1]) / (q[0] - p[0]) for p, q in zip(after, after[1:])]
    assert max(hops) > 2.5 and max(hops) <= 8 + 1e-6
    # n02 put at (5, 5) by step 1, standing there from then on
    assert [p for t, p in pos["n02"] if t >= at[1]][-1:] == [(5.0, 5.0)]  # put there once, never moved since
    assert [p for t, p in pos["n02"] if t > at[1]] == []
    # n03 on Gauss-Markov from where it was: no jump at the change
    n03 = [p for p in pos["n03"] if p[0] >= at[2] - 1]
    assert all(distance(p[1], q[1]) <= 8 * (q[0] - p[0]) + 1e-6 for p, q in zip(n03, n03[1:]))
    # nothing moves and no radio link changes between the stop and the start; both happen after the start
    stopped = [r for r in rows if at[3] < r["mono_s"] - t0 < at[4]]
    assert stopped == []
    assert any(r["kind"] == "position" and r["mono_s"] - t0 > at[4] for r in rows)
    assert out["mobility"]["moved_s"] == pytest.approx(at[3] + 10, abs=1e-6)
    steps = [s["detail"] for s in out["steps"][:5]]
    assert steps == ["n01 at 8 m/s", "n02 standing from (5.0, 5.0)", "n03 gauss_markov", "movement stopped",
                     "movement started for 10 s"]
    actions = (run / "actions.jsonl").read_text().splitlines()
    assert all(validate_record(line, ACTION_FIELDS, _run_id(run)) is None for line in actions)
    moved = [json.loads(a) for a in actions if json.loads(a)["action"] == "mobility"]
    assert [m["detail"] for m in moved][:2] == [{"nodes": ["n01"], "speed_mps": [8.0, 8.0]},
                                                {"nodes": ["n02"], "position": [5.0, 5.0]}]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["mobility"]["radios"]["lan"]["range_m"] == 40.0


def _backend(path: Path, seed: int = 3, **kw: Any) -> MobileInprocChaos:
    topo = load_topology(path)
    world = build_world(topo, seed, read_traces(topo))
    assert world is not None
    from contract.links import resolve_class

    classes = {r.name: resolve_class(r.link_class) for r in world.radios}
    return MobileInprocChaos(topo, world=world, radio_classes=classes, seed=seed, **kw)


def _crossing(b: MobileInprocChaos, left: set[str]) -> list[tuple[str, str]]:
    return [(x, y) for x, y in b.live_graph().edges if (x in left) != (y in left)]


def test_a_partition_keeps_the_groups_apart_however_they_move(tmp_path: Path) -> None:
    b = _backend(_walkers(tmp_path, n=10, area=40, speed="[1, 3]"))  # the LAN's 40 m reaches nearly everyone
    left = {f"n{i:02d}" for i in range(5)}
    right = {f"n{i:02d}" for i in range(5, 10)} | {"post"}

    async def run() -> None:
        await b.start()
        await b.sleep(5)
        assert _crossing(b, left)
        cut = await b.partition([left, right])
        assert cut and all((x in left) != (y in left) for x, y in cut)
        for _ in range(30):
            await b.sleep(1)
            assert not _crossing(b, left)  # no radio link across, as the nodes keep meeting
        assert b.radio.link_ups > 0
        back = await b.heal()
        assert back and _crossing(b, left)  # the radio links in range across are made again
        await b.stop()

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_paused_or_dead_node_takes_no_radio_link_and_gets_them_back(tmp_path: Path) -> None:
    b = _backend(_walkers(tmp_path, n=8, area=40, speed="[1, 3]"))

    async def run() -> None:
        await b.start()
        await b.sleep(2)
        await b.pause("n00")
        await b.sleep(20)  # its peers timed it out; radio links in range since are not made to it
        assert "n00" not in b.live_graph() and not b.net.nodes["n00"].ends
        await b.resume("n00")
        assert set(b.live_graph().neighbors("n00")) == {
            y if x == "n00" else x for x, y, _ in b.radio.graph.links or () if "n00" in (x, y)}
        await b.kill("n01")
        await b.sleep(10)
        assert not b.net.nodes["n01"].ends
        await b.restart("n01")
        assert any("n01" in (x, y) for x, y in b.live_graph().edges)
        await b.stop()

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


def test_link_down_of_a_radio_pair_keeps_it_apart_until_link_up(tmp_path: Path) -> None:
    b = _backend(_walkers(tmp_path, n=6, area=20, speed="[0.5, 1]"))  # everyone in range of everyone

    async def run() -> None:
        await b.start()
        assert b.live_graph().has_edge("n00", "n01")
        assert await b.link_down("n00", "n01")
        await b.sleep(20)
        assert not b.live_graph().has_edge("n00", "n01")
        assert await b.link_up("n00", "n01")
        assert b.live_graph().has_edge("n00", "n01") and not b._specs_between("n00", "n01")  # radio only
        await b.stop()

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


SETTLE = """\
name: settle
steps:
  - {action: wait, s: 100}
  - {action: check}
"""


def test_the_watch_finds_a_node_that_stays_wrong_once_its_component_settled(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = _walkers(tmp_path, n=10, duration_s=30, area=60, speed="[1, 3]")
    good = _chaos(path, SETTLE, seed=2)
    assert good["verdict"] == "pass" and good["watch"]["violations"] == 0
    monkeypatch.setenv("SNEKBED_CHAOS_PLANT", "stall")  # TEST ONLY: the highest key never accepts a bootstrap
    bad = _chaos(path, SETTLE, seed=2)
    assert bad["verdict"] == "fail" and bad["watch"]["verdict"] == "fail"
    (v,) = bad["watch"]["listed"]
    assert v["invariant"] == "snake_ordered" and v["wrong_for_s"] > bad["watch"]["limit_s"]
    assert v["at_s"] > 30  # not while they moved: its component settled only after the movement


@pytest.mark.parametrize(("step", "field", "message"), [
    ("{action: mobility, group: climbers, speed_mps: 2}", "steps[0].group", "unknown group 'climbers'"),
    ("{action: mobility, nodes: [n01], speed_mps: 0}", "steps[0].speed_mps[0]", "greater than 0"),
    ("{action: mobility, nodes: [n01], speed_mps: [3, 2]}", "steps[0].speed_mps", "min 3 above max 2"),
    ("{action: mobility, movement: stop, for_s: 3}", "steps[0]", "'for_s' is how long"),
    ("{action: mobility, speed_mps: 2}", "steps[0]", "name the 'nodes'"),
    ("{action: mobility, nodes: [n01], model: {model: trace, file: x.tcl}}", "steps[0].model.model", "unknown model 'trace' (known: static, random_waypoint, gauss_markov)"),
    ("{action: mobility, nodes: [nobody], movement: stop}", "steps[0].nodes[0]", "unknown node 'nobody'"),
    ("{action: mobility, nodes: [server], position: [1, 1]}", "steps[0].nodes[0]", "no position and no mobility"),
])
def test_a_bad_mobility_step_names_its_line_and_field(tmp_path: Path, step: str, field: str, message: str) -> None:
    topo = _walkers(tmp_path, n=3)
    topo.write_text(topo.read_text() + "  - server\n")
    sc = tmp_path / "bad.yaml"
    sc.write_text(f"name: bad\nsteps:\n  - {step}\n")
    result = CliRunner().invoke(main, ["chaos", str(sc), "--topology", str(topo)])
    assert result.exit_code == BAD_INPUT, result.output
    assert f"bad.yaml:3: {field}" in result.output and message in result.output, result.output


def test_a_mobility_step_on_nodes_that_do_not_move_is_refused(tmp_path: Path) -> None:
    topo = Topology.from_data({"name": "still", "nodes": ["a", "b"], "links": [["a", "b"]]})
    with pytest.raises(ScenarioError, match="declares no radios") as err:
        parse_scenario_yaml("steps:\n  - {action: mobility, movement: stop}\n", file="s.yaml", topology=topo)
    assert (err.value.line, err.value.field) == (2, "steps[0].action")


def test_a_speed_for_a_node_without_one_fails_the_step(tmp_path: Path) -> None:
    out = _chaos(_walkers(tmp_path, n=3), "steps:\n  - {action: mobility, nodes: [post], speed_mps: 2}\n")
    (step,) = out["steps"]
    assert step["verdict"] == "fail" and "a static node has no speed to change" in step["detail"]
    assert math.isfinite(out["protocol_time_s"])


GROUPS = """\
name: hikers
movement:
  tick_s: 1
  duration_s: 60
  groups:
    hikers: {model: random_waypoint, area_m: [200, 200], speed_mps: 0.5}
radios:
  bluetooth: {range_m: 15}
nodes:
  - {name: h1, mobility: {model: group, group: hikers, radius_m: 5}}
  - {name: h2, mobility: {model: group, group: hikers, radius_m: 5}}
  - {name: post, position: [0, 0]}
"""


def test_a_group_s_speed_moves_its_members_together(tmp_path: Path) -> None:
    path = tmp_path / "hikers.yaml"
    path.write_text(GROUPS)
    run = tmp_path / "run"
    out = _chaos(path, "name: g\ntraffic: null\nsteps:\n  - {action: mobility, group: hikers, speed_mps: 6, after_s: 20}"
                       "\n  - {action: wait, s: 30}\n", record=run)
    (step, _) = out["steps"]
    assert step["detail"] == "group hikers at 6 m/s" and step["targets"] == ["group:hikers"]
    t0 = out["time_origin"]["mono_s"]
    track: dict[str, list[tuple[float, tuple[float, float]]]] = {}
    for r in _rows(run):
        if r["kind"] == "position":
            track.setdefault(r["node"], []).append((r["mono_s"] - t0, (r["x_m"], r["y_m"])))

    def fastest(node: str, lo: float, hi: float) -> float:
        seg = [p for p in track[node] if lo <= p[0] <= hi]
        return max(distance(p[1], q[1]) / (q[0] - p[0]) for p, q in zip(seg, seg[1:]))

    for node in ("h1", "h2"):  # the reference point at 0.5 m/s, the member within 1 m/s of it: then far faster
        assert fastest(node, 0, 20) < 2.0 < fastest(node, 21, 50)
    both = [(dict(track["h1"]).get(t), dict(track["h2"]).get(t)) for t, _ in track["h1"]]
    assert all(distance(a, b) <= 10 + 1e-6 for a, b in both if a and b)  # within 5 m of the same point


def test_the_command_says_how_they_moved(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text("name: s\nsteps:\n  - {action: wait, s: 30}\n")
    result = CliRunner().invoke(main, ["chaos", str(sc), "--topology", str(_walkers(tmp_path, n=6))])
    assert result.exit_code == 0, result.output
    # the movement goes on until the run stops: 30 s, and the 5.5 s the last background pings are given
    assert re.search(r"^moved 35.5 s: radio links \d+ up, \d+ down; watch: \d+ readings, \d+ judged, 0 violation",
                     result.output, re.M), result.output


def test_the_watch_gives_the_start_its_convergence_bound_before_it_judges(tmp_path: Path) -> None:
    """A hundred nodes that never move (random points in 300 m x 300 m, Bluetooth 10 m and a LAN of 50 m): the start
    makes every radio link at once, and such a snake takes longer than a soft-state transient (16 s) to form. The
    watch judges the start as it judges a fault, once the re-convergence bound has passed since it; judged as a
    settled graph from time 0 it reported the forming snake as 27 violations."""
    rng = random.Random(0)
    lines = ["name: still", "movement: {tick_s: 1, duration_s: 5}", "radios:", "  bluetooth: {range_m: 10}",
             "  lan: {range_m: 50, class: lan}", "nodes:"]
    lines += [f"  - {{name: n{i:03d}, position: [{rng.uniform(0, 300):.2f}, {rng.uniform(0, 300):.2f}]}}"
              for i in range(100)]
    path = tmp_path / "still.yaml"
    path.write_text("\n".join(lines) + "\n")
    out = _chaos(path, "name: still\nsteps:\n  - {action: wait, s: 90}\n", seed=0)
    w = out["watch"]
    assert w["violations"] == 0 and w["verdict"] == "pass", w["listed"][:3]
    assert 0 < w["judged_readings"] < w["readings"]  # judged after the bound, not before
