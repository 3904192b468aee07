"""Nodes that move, in process: `snekbed sim` of a topology with radios moves its nodes every tick of virtual time,
makes and cuts the radio links as the radio graph says, reports them under ``mobility`` and records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from contract.dataset import RunMeta, validate_record
from contract.links import resolve_class
from contract.mobility import MOBILITY_FIELDS
from orchestrator.backends.inproc import InprocNetwork
from orchestrator.backends.inproc_mobility import RadioLinks
from orchestrator.cli import main
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import build_world
from orchestrator.model.radio_graph import RadioGraph
from orchestrator.model.topology_loaders import load_topology


def _walkers(tmp_path: Path, n: int = 12) -> Path:
    lines = ["name: walkers", "movement: {tick_s: 1, duration_s: 60}", "radios:", "  bluetooth: {range_m: 15}",
             "  lan: {range_m: 40, class: lan, loss: {edge_pct: 10}}", "nodes:"]
    lines += [f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: [100, 100], speed_mps: [0.5, 2], "
              "pause_s: [0, 5]}}" for i in range(n)]
    path = tmp_path / "walkers.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _sim(*args: str) -> dict:
    result = CliRunner().invoke(main, ["sim", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    out.pop("wall_s")
    return out


def test_twelve_walkers_for_a_minute(tmp_path: Path) -> None:
    out = _sim(str(_walkers(tmp_path)), "--seed", "1", "--pairs", "30")
    m = out["mobility"]
    assert (m["model"], m["nodes"], m["radios"], m["tick_s"], m["duration_s"]) == (
        "random_waypoint", 12, ["bluetooth", "lan"], 1.0, 60.0)
    assert m["link_ups"] > 0 and m["link_downs"] > 0, m
    assert m["peerings_refused"] == 0
    assert 0.2 < m["mean_speed_mps"] <= 2.0  # pauses count as standing still
    assert out["snake_converged_s"] is not None  # while they walk
    assert m["components"] == 1  # where they stopped, the radio graph is connected ...
    assert m["tree_converged_s"] is not None and m["snake_converged_s"] is not None  # ... and the network converges
    assert m["pings"]["sent"] == 30 and m["pings"]["delivered"] > 0
    assert out["protocol_time_s"] >= 60.0


def test_same_seed_same_document_another_seed_another(tmp_path: Path) -> None:
    path = str(_walkers(tmp_path))
    a, b = _sim(path, "--seed", "5", "--pairs", "10"), _sim(path, "--seed", "5", "--pairs", "10")
    c = _sim(path, "--seed", "6", "--pairs", "10")
    assert a == b
    assert a["mobility"] != c["mobility"]


def test_the_network_s_links_are_the_radio_graph_s(tmp_path: Path) -> None:
    """Driven tick by tick on the network's clock, the network's links (a fixed one among them) are the radio
    links the pure radio graph gives for the same positions, each of its radio's class."""
    topo = load_topology(_walkers(tmp_path, 8))
    world = build_world(topo, 2, read_traces(topo))
    assert world is not None
    net = InprocNetwork(topo.node_names, [("n00", "n01", "pipe")], seed=2)
    radio = RadioLinks(net, world, {r.name: resolve_class(r.link_class) for r in world.radios})
    oracle = RadioGraph(world.radios)

    async def run() -> None:
        net.start()
        radio.start()
        for t in (0, 1, 17, 33, 60):
            await net.run_until(t)
            oracle.links = None
            for k in range(t + 1):
                oracle.step({n: m.position(float(k)) for n, m in world.movers.items()})
            made = sorted((min(ea.node, ea.peer), max(ea.node, ea.peer), ea.link_class) for ea, _ in
                          net.links.values())
            assert made == sorted([("n00", "n01", "pipe"), *oracle.links]), t

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    assert radio.link_ups > 0 and radio.link_downs > 0


def test_a_recorded_run_writes_mobility_jsonl(tmp_path: Path) -> None:
    out = _sim(str(_walkers(tmp_path)), "--seed", "1", "--pairs", "5", "--record", str(tmp_path / "run"))
    run = tmp_path / "run"
    meta = RunMeta.model_validate_json((run / "meta.json").read_text())
    assert meta.model_extra is not None and meta.model_extra["mobility"]["radios"]["lan"]["range_m"] == 40.0
    lines = (run / "mobility.jsonl").read_text().splitlines()
    assert all(validate_record(line, MOBILITY_FIELDS, meta.run_id) is None for line in lines)
    rows = [json.loads(line) for line in lines]
    assert [r["mono_s"] for r in rows] == sorted(r["mono_s"] for r in rows)
    positions = [r for r in rows if r["kind"] == "position"]
    assert {r["node"] for r in positions if r["mono_s"] == 0} == {f"n{i:02d}" for i in range(12)}
    assert all(0 <= r["x_m"] <= 100 and 0 <= r["y_m"] <= 100 for r in positions)
    ups = [r for r in rows if r["kind"] == "link_up"]
    downs = [r for r in rows if r["kind"] == "link_down"]
    assert sum(r["cause"] != "start" for r in ups) == out["mobility"]["link_ups"]
    assert len(downs) == out["mobility"]["link_downs"]
    assert {r["cause"] for r in downs} == {"out_of_range"} and all(r["made"] for r in ups)
    assert all(r["distance_m"] <= {"bluetooth": 15, "lan": 40}[r["radio"]] for r in ups)
    assert all(r["link_class"] == r["radio"] for r in ups)


TRACE = """\
$node_(0) set X_ 0.0
$node_(0) set Y_ 0.0
$node_(1) set X_ 8.0
$node_(1) set Y_ 0.0
$node_(2) set X_ 0.0
$node_(2) set Y_ 9.5
$ns_ at 5.0 "$node_(1) setdest 30.0 0.0 4.0"
$ns_ at 20.0 "$node_(1) setdest 5.0 0.0 5.0"
$ns_ at 1.0 "$node_(2) setdest 0.0 11.5 1.0"
$ns_ at 3.0 "$node_(2) setdest 0.0 9.5 1.0"
$ns_ at 5.0 "$node_(2) setdest 0.0 11.5 1.0"
$ns_ at 7.0 "$node_(2) setdest 0.0 9.5 1.0"
"""


def test_a_trace_drives_the_links_and_hysteresis_holds_a_wobbling_pair(tmp_path: Path) -> None:
    """Node b walks out of a's Bluetooth range and back (one down, one up); c wobbles between 9.5 and 11.5 m of a,
    across the 10 m range but within its hysteresis (12 m): its link stays up all along."""
    (tmp_path / "moves.tcl").write_text(TRACE)
    path = tmp_path / "trace.yaml"
    path.write_text("name: trace\nmovement: {duration_s: 40}\nradios:\n  bluetooth: {range_m: 10, hysteresis: 0.2}\n"
                    "nodes:\n" + "".join(f"  - {{name: {n}, mobility: {{model: trace, file: moves.tcl}}}}\n"
                                         for n in "abc"))
    out = _sim(str(path), "--pairs", "6", "--record", str(tmp_path / "run"))
    m = out["mobility"]
    assert (m["model"], m["link_ups"], m["link_downs"], m["components"]) == ("trace", 1, 1, 1)
    rows = [json.loads(line) for line in (tmp_path / "run" / "mobility.jsonl").read_text().splitlines()]
    changes = [(r["mono_s"], r["kind"], r["a"], r["b"], r["cause"]) for r in rows if r["kind"] != "position"]
    assert changes == [
        (0.0, "link_up", "a", "b", "start"), (0.0, "link_up", "a", "c", "start"),
        (7.0, "link_down", "a", "b", "out_of_range"),  # 8 m + 4 m/s from 5 s: 16 m > 12 m at the tick of 7 s
        (24.0, "link_up", "a", "b", "in_range"),  # back from 30 m at 5 m/s: 10 m at t = 24
    ]
    assert m["snake_converged_s"] is not None and m["pings"]["delivered"] == m["pings"]["sent"] == 6


def test_convergence_after_the_movement_is_timed_from_when_it_stopped(tmp_path: Path) -> None:
    """A movement shorter than the first convergence: the network is still converging when the nodes stop, and the
    time after the movement counts from the stop (not from when the first phase happened to end)."""
    path = _walkers(tmp_path)
    path.write_text(path.read_text().replace("duration_s: 60", "duration_s: 2"))
    out = _sim(str(path), "--seed", "1", "--pairs", "5")
    first, after = out["snake_converged_s"], out["mobility"]["snake_converged_s"]
    assert first > 2.0
    assert after == pytest.approx(first - 2.0, abs=2e-4)
