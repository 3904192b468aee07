"""Mobility in topology files: positions, models, radios and traces load, and every mistake names its file, line
and field, as the topology loader's other errors do."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.model.mobility import GaussMarkov, GroupMember, RandomWaypoint, Static, TraceMover
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import build_world
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology, parse_yaml

GOOD = """\
name: walk
movement:
  tick_s: 0.5
  duration_s: 30
  groups:
    hikers:
      model: random_waypoint
      area_m: [200, 100]
      speed_mps: [0.5, 1.5]
radios:
  bluetooth:
    range_m: 10
  lan:
    range_m: 50
    class: lan
    hysteresis: 0.2
    nodes: [a, b]
    loss:
      edge_pct: 20
nodes:
  - name: a
    position: [10, 20]
    mobility:
      model: random_waypoint
      area_m: [100, 100]
      speed_mps: [0.5, 2]
      pause_s: [0, 5]
  - name: b
    position: [0, 0]
  - name: c
    mobility:
      model: gauss_markov
      area_m: [100, 100]
      speed_mps: 1.2
      alpha: 0.5
  - name: d
    mobility:
      model: group
      group: hikers
      radius_m: 5
  - name: e
    mobility:
      model: trace
      file: moves.tcl
      id: 1
  - server
links:
  - [b, server, remote]
"""

TRACE = """\
$node_(1) set X_ 3.0
$node_(1) set Y_ 4.0
$ns_ at 1.0 "$node_(1) setdest 30.0 4.0 2.0"
"""


def _write(tmp_path: Path, text: str, trace: str | None = TRACE) -> Path:
    if trace is not None:
        (tmp_path / "moves.tcl").write_text(trace)
    path = tmp_path / "walk.yaml"
    path.write_text(text)
    return path


def _fail(tmp_path: Path, text: str, trace: str | None = TRACE) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        load_topology(_write(tmp_path, text, trace))
    return info.value


def _line_with(text: str, fragment: str, after: str = "") -> int:
    start = text.index(after) if after else 0
    return text[: text.index(fragment, start)].count("\n") + 1


def test_a_mobile_topology_loads_and_builds_its_world(tmp_path: Path) -> None:
    topo = load_topology(_write(tmp_path, GOOD))
    assert topo.node("b").position == (0.0, 0.0)
    assert topo.radios["lan"].link_class == "lan" and topo.radios["bluetooth"].link_class is None
    world = build_world(topo, 7, read_traces(topo))
    assert world is not None and (world.tick_s, world.duration_s) == (0.5, 30.0)
    kinds = {name: type(m) for name, m in world.movers.items()}
    assert kinds == {"a": RandomWaypoint, "b": Static, "c": GaussMarkov, "d": GroupMember, "e": TraceMover}
    assert world.model == "gauss_markov+group+random_waypoint+static+trace"
    assert [(r.name, r.link_class, r.hysteresis, r.members, r.loss_edge_pct) for r in world.radios] == [
        ("bluetooth", "bluetooth", 0.1, None, 0.0), ("lan", "lan", 0.2, frozenset({"a", "b"}), 20.0)]
    assert world.movers["a"].position(0.0) == (10.0, 20.0)
    assert world.movers["e"].position(3.0) == pytest.approx((7.0, 4.0))
    again = build_world(topo, 7, read_traces(topo))
    assert [m.position(12.3) for m in world.movers.values()] == [m.position(12.3) for m in again.movers.values()]


def test_the_native_document_round_trips(tmp_path: Path) -> None:
    topo = load_topology(_write(tmp_path, GOOD))
    again = parse_yaml(topo.to_yaml(), file=str(tmp_path / "again.yaml"))
    assert again.model_dump() == topo.model_dump()
    assert Topology.from_data(topo.to_record()).radios == topo.radios


@pytest.mark.parametrize(
    ("old", "new", "fragment", "field", "message"),
    [
        ("speed_mps: [0.5, 2]", "speed_mps: [0, 2]", "speed_mps: [0,", "nodes[0].mobility.speed_mps[0]",
         "Input should be greater than 0 (got 0)"),
        ("speed_mps: [0.5, 2]", "speed_mps: [3, 2]", "speed_mps: [3", "nodes[0].mobility.speed_mps",
         "[min, max] with min 3 above max 2"),
        ("speed_mps: 1.2", "speed_mps: -1", "speed_mps: -1", "nodes[2].mobility.speed_mps",
         "Input should be greater than 0 (got -1)"),
        ("alpha: 0.5", "alpha: 1.5", "alpha: 1.5", "nodes[2].mobility.alpha",
         "Input should be less than or equal to 1 (got 1.5)"),
        ("    range_m: 10\n", "    range_m: 0\n", "range_m: 0", "radios.bluetooth.range_m",
         "Input should be greater than 0 (got 0)"),
        ("hysteresis: 0.2", "hysteresis: -0.2", "hysteresis: -0.2", "radios.lan.hysteresis",
         "Input should be greater than or equal to 0 (got -0.2)"),
        ("edge_pct: 20", "edge_pct: 0", "edge_pct: 0", "radios.lan.loss.edge_pct",
         "Input should be greater than 0 (got 0)"),
        ("radius_m: 5", "radius_m: -5", "radius_m: -5", "nodes[3].mobility.radius_m",
         "Input should be greater than 0 (got -5)"),
        ("area_m: [200, 100]", "area_m: [200, 0]", "area_m: [200, 0]", "movement.groups.hikers.area_m[1]",
         "Input should be greater than 0 (got 0)"),
        ("tick_s: 0.5", "tick_s: 31", "tick_s: 31", "movement.tick_s", "31 s is longer than duration_s 30 s"),
        ("position: [10, 20]", "position: [10, 120]", "position: [10, 120]", "nodes[0].position",
         "[10, 120] is outside the area [0, 100] x [0, 100]"),
        ("model: gauss_markov", "model: levy_walk", "model: levy_walk", "nodes[2].mobility.model",
         "unknown model 'levy_walk' (known: static, random_waypoint, gauss_markov, group, trace)"),
        ("      model: random_waypoint\n      area_m: [200", "      area_m: [200", "hikers:",
         "movement.groups.hikers.model", "required field is missing (one of: random_waypoint, gauss_markov)"),
        ("group: hikers", "group: climbers", "group: climbers", "nodes[3].mobility.group",
         "unknown group 'climbers' (known: hikers)"),
        ("nodes: [a, b]", "nodes: [a, zz]", "nodes: [a, zz]", "radios.lan.nodes[1]", "unknown node 'zz'"),
        ("nodes: [a, b]", "nodes: [a, server]", "nodes: [a, server]", "radios.lan.nodes[1]",
         "node 'server' has no position and no mobility model: a radio reaches only placed nodes"),
        ("    class: lan\n", "    class: wifi\n", "class: wifi", "radios.lan.class", None),
        ("  - name: b\n    position: [0, 0]\n", "  - name: b\n    mobility: {model: static}\n",
         "- name: b", "nodes[1].position", "a static node needs a position [x, y] (metres)"),
        ("      radius_m: 5\n", "      radius_m: 5\n    position: [1, 1]\n", "position: [1, 1]", "nodes[3].position",
         "a group node's position comes from its group's reference point and its offset: leave position out"),
    ],
)
def test_mistakes_name_file_line_and_field(tmp_path: Path, old: str, new: str, fragment: str, field: str,
                                           message: str | None) -> None:
    assert GOOD.count(old) == 1, old
    text = GOOD.replace(old, new)
    err = _fail(tmp_path, text)
    assert (err.file, err.line, err.field) == (str(tmp_path / "walk.yaml"), _line_with(text, fragment), field)
    if message is not None:
        assert err.message == message
    assert str(err).startswith(f"{tmp_path / 'walk.yaml'}:{err.line}: {field}: ")


def test_moving_without_radios_is_refused(tmp_path: Path) -> None:
    text = GOOD[: GOOD.index("radios:")] + GOOD[GOOD.index("\nnodes:") + 1:]
    err = _fail(tmp_path, text)
    fields = [(p.field, p.line) for p in err.problems]
    assert ("nodes[0].mobility", _line_with(text, "mobility:")) in fields
    assert ("movement", 2) in fields


def test_a_trace_that_cannot_be_read_names_the_topology_s_field(tmp_path: Path) -> None:
    err = _fail(tmp_path, GOOD.replace("file: moves.tcl", "file: gone.tcl"))
    assert (err.field, err.line) == ("nodes[4].mobility.file", _line_with(GOOD, "file: moves.tcl"))
    assert "cannot read the trace" in err.message and "gone.tcl" in err.message


def test_a_trace_error_names_the_trace_s_file_line_and_field(tmp_path: Path) -> None:
    err = _fail(tmp_path, GOOD, TRACE + '$ns_ at 2.0 "$node_(7) setdest 1 1 1"\n')
    assert (err.file, err.line, err.field) == (str(tmp_path / "moves.tcl"), 4, "node")
    assert err.message.startswith("unknown node 7: the topology maps no node to it (known: 1 (e))")
    err = _fail(tmp_path, GOOD, TRACE.replace("at 1.0", "at -1.0"))
    assert (err.file, err.line, err.field, err.message) == (str(tmp_path / "moves.tcl"), 3, "time",
                                                            "negative time -1 s")


def test_a_trace_without_the_node_asked_for(tmp_path: Path) -> None:
    err = _fail(tmp_path, GOOD.replace("id: 1", "id: 0"), "")
    assert (err.field, err.line) == ("nodes[4].mobility", _line_with(GOOD, "model: trace") - 1)
    assert "has no node 0 for 'e'" in err.message


def test_two_nodes_cannot_replay_one_trace_node(tmp_path: Path) -> None:
    text = GOOD.replace("  - server\n", "  - server\n  - name: f\n    mobility: {model: trace, file: moves.tcl, id: 1}\n")
    err = _fail(tmp_path, text)
    assert (err.field, err.line) == ("nodes[6].mobility.id", _line_with(text, "mobility: {model: trace"))
    assert err.message == "trace node 1 of moves.tcl is already nodes[4]'s"
