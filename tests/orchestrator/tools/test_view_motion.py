"""Replay of nodes that move, without a browser (orchestrator/tools/view/motion.py): positions interpolated between
the samples of ``mobility.jsonl`` (standing still through the ticks it has no line for), radio links up and down at
their instants, the live graph with the radio links (the replay's convergence agrees with the simulator's own
observer on a mobile run), and a run without ``mobility.jsonl`` replayed exactly as before."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.chaos.engine import ChaosOptions, make_backend
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import parse_scenario_yaml
from orchestrator.model.radio_graph import LinkChange
from orchestrator.model.runs import RunDir
from orchestrator.model.topology_loaders import load_topology
from orchestrator.sessions.sim import config_from_topology, run_sim_sync
from orchestrator.tools.view.app import build_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import DockerLive
from orchestrator.tools.view.motion import Motion, MotionTee
from orchestrator.tools.view.timeline import Timeline
from tests.orchestrator.tools.test_view_timeline import _synthetic
from tests.orchestrator.tools.view_helpers import served

TOPO = {"name": "t", "nodes": [{"name": "a", "mobility": {"model": "random_waypoint", "area_m": [100, 50]}},
                               {"name": "b", "position": [10, 10]}, {"name": "c"}],
        "radios": {"bluetooth": {"range_m": 10}, "lan": {"range_m": 40, "class": "lan", "nodes": ["a"]}}}


def _rec(t: float, kind: str, **fields: Any) -> dict[str, Any]:
    base = {"run_id": "syn1", "mono_s": t, "wall_ts": 1.7e9 + t, "kind": kind, "node": None, "x_m": None, "y_m": None,
            "a": None, "b": None, "radio": None, "link_class": None, "distance_m": None, "cause": None, "made": None}
    return {**base, **fields}


def _pos(t: float, node: str, x: float, y: float) -> dict[str, Any]:
    return _rec(t, "position", node=node, x_m=x, y_m=y)


def _link(t: float, up: bool, a: str, b: str, radio: str, made: bool = True) -> dict[str, Any]:
    return _rec(t, "link_up" if up else "link_down", a=a, b=b, radio=radio, link_class=radio, distance_m=5.0,
                cause="in_range" if up else "out_of_range", made=made)


RECORDS = [_pos(0.0, "a", 0.0, 0.0), _pos(0.0, "b", 10.0, 10.0), _link(0.0, True, "a", "b", "lan", made=False),
           _pos(1.0, "a", 10.0, 0.0), _link(2.0, True, "a", "b", "bluetooth"),
           # no line for a at 2, 3, 4: it stood at (10, 0) and moved only in the tick before 5
           _pos(5.0, "a", 20.0, 0.0), _link(6.0, False, "a", "b", "bluetooth")]


def _motion() -> Motion:
    m = Motion(TOPO, {"tick_s": 1.0, "radios": {"bluetooth": {"range_m": 10.0, "class": "bluetooth"}}})
    for r in RECORDS:
        m.feed(r)
    return m


def test_positions_are_interpolated_between_samples_and_still_through_ticks_without_a_line() -> None:
    m = _motion()
    assert m.position("a", -1.0) == (0.0, 0.0)  # before its first sample: there
    assert m.position("a", 0.5) == pytest.approx((5.0, 0.0))
    assert m.position("a", 1.0) == (10.0, 0.0)
    assert m.position("a", 3.0) == (10.0, 0.0) and m.position("a", 4.0) == (10.0, 0.0)  # stood still
    assert m.position("a", 4.5) == pytest.approx((15.0, 0.0))
    assert m.position("a", 9.0) == (20.0, 0.0)  # after its last sample: stays
    assert m.position("b", 7.0) == (10.0, 10.0) and m.position("c", 1.0) is None
    assert m.frame(4.5)["positions"] == {"a": [15.0, 0.0], "b": [10.0, 10.0]}


def test_radio_links_are_up_from_their_up_instant_and_gone_from_their_down_instant() -> None:
    m = _motion()
    assert m.links_at(1.999) == [["a", "b", "lan", False]]
    assert m.links_at(2.0) == [["a", "b", "bluetooth", True], ["a", "b", "lan", False]]
    assert m.links_at(5.999) == [["a", "b", "bluetooth", True], ["a", "b", "lan", False]]
    assert m.links_at(6.0) == [["a", "b", "lan", False]]
    # only a made peering joins the live graph
    assert m.edges_at(1.0) == [] and m.edges_at(3.0) == [("a", "b")] and m.edges_at(6.0) == []
    assert m.changes == [0.0, 2.0, 6.0]


def test_the_graph_document_has_the_bounds_and_each_radio_with_its_carriers() -> None:
    doc = _motion().graph_doc()
    assert doc["bounds"] == [0.0, 0.0, 100.0, 50.0]  # the area, with every position inside it
    assert doc["placed"] == ["a", "b"] and doc["tick_s"] == 1.0
    assert doc["radios"] == [{"name": "bluetooth", "range_m": 10.0, "class": "bluetooth", "carriers": ["a", "b"]},
                             {"name": "lan", "range_m": 40.0, "class": "lan", "carriers": ["a"]}]


def _with_motion(tmp_path: Path) -> tuple[Path, Path]:
    plain = _synthetic(tmp_path)
    moving = tmp_path / "moving"
    shutil.copytree(plain, moving)
    lines = [_pos(0.0, "a", 0.0, 0.0), _pos(0.0, "e", 5.0, 0.0), _pos(3.0, "a", 3.0, 0.0),
             _link(0.0, True, "a", "e", "bluetooth"), _link(3.0, False, "a", "e", "bluetooth")]
    lines.sort(key=lambda r: r["mono_s"])
    (moving / "mobility.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + "not json\n")
    topo = json.loads((moving / "topology.json").read_text())
    topo["radios"] = {"bluetooth": {"range_m": 10}}
    topo["nodes"][0]["position"] = [0, 0]
    topo["nodes"][4]["position"] = [5, 0]
    (moving / "topology.json").write_text(json.dumps(topo))
    return plain, moving


async def _graph(tl: Timeline) -> dict[str, Any]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(tl)), base_url="http://view") as http:
        return (await http.get("/api/graph")).json()


async def test_a_run_without_mobility_is_replayed_as_before_and_one_with_it_adds_motion(tmp_path: Path) -> None:
    plain, moving = _with_motion(tmp_path)
    before, after = Timeline.from_run(plain), Timeline.from_run(moving)
    assert before.motion is None and after.motion is not None
    assert "mobility" not in await _graph(before) and "motion" not in before.at(1.0)
    assert (await _graph(after))["mobility"]["bounds"] == [0.0, 0.0, 5.0, 0.0]
    # a bad line is skipped and named, as a bad event line is
    assert after.skipped_count == 1 and after.skipped[0] == f"{moving / 'mobility.jsonl'}:6: not_json: not valid JSON"
    for t in (0.5, 2.0, 16.0, 25.0):
        f = after.at(t)
        motion = f.pop("motion")
        assert f == before.at(t)  # e is absent until 15 and the radio link is gone by then: nothing else differs
        assert motion["positions"]["a"] == ([0.0, 0.0] if t <= 2 else [3.0, 0.0])  # moved in the tick before 3
        assert motion["radio_links"] == ([["a", "e", "bluetooth", True]] if t < 3 else [])
    assert after.change_times() == sorted({*before.change_times(), 0.0, 3.0})


WALKERS = """\
name: walkers
movement: {tick_s: 1, duration_s: 10}
radios:
  bluetooth: {range_m: 30}
  lan: {range_m: 60, class: lan}
nodes:
"""


def test_a_recorded_mobile_run_replays_with_the_radio_links_in_its_graph(tmp_path: Path) -> None:
    """Without the radio links, five walkers and a post are six components; with them the replay is converged
    where the simulator's own observer saw it converge, and draws each sample and link change at its instant."""
    topo = tmp_path / "walkers.yaml"
    topo.write_text(WALKERS + "".join(f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: [100, 100], "
                                      f"speed_mps: [5, 10]}}}}\n" for i in range(5)) + "  - {name: post, position: [50, 50]}\n")
    run = tmp_path / "run"
    out = run_sim_sync(config_from_topology(load_topology(topo), seed=1, pairs=5, record=run))
    tl = Timeline.from_run(run)
    assert tl.skipped_count == 0 and tl.motion is not None
    series = tl.series()
    # where the simulator's observer saw the tree and the snake converge, so does the replay (both judge the graph
    # with its radio links; the fixed links alone leave six components, none of them converged); the report's times
    # are rounded to 0.1 ms
    tree_s, snake_s = tl.t_start + out["tree_converged_s"], tl.t_start + out["snake_converged_s"]
    assert not tl.at(tree_s - 1e-3)["tree"] and tl.at(tree_s + 1e-3)["tree"]
    assert not tl.at(snake_s - 1e-3)["snake"] and tl.at(snake_s + 1e-3)["snake"]
    assert all(p["components"] == 1 for p in series if p["live"] == 6)
    records = [json.loads(x) for x in (run / "mobility.jsonl").read_text().splitlines()]
    for r in records[:40]:  # at a sample's instant, the node is exactly where the file says
        if r["kind"] == "position":
            assert tl.at(r["mono_s"])["motion"]["positions"][r["node"]] == [round(r["x_m"], 3), round(r["y_m"], 3)]
    ups = [r for r in records if r["kind"] == "link_up" and r["mono_s"] > 0]
    assert ups
    r = ups[0]
    assert [r["a"], r["b"], r["radio"], r["made"]] in tl.at(r["mono_s"])["motion"]["radio_links"]
    assert [r["a"], r["b"], r["radio"], r["made"]] not in tl.at(r["mono_s"] - 1e-6)["motion"]["radio_links"]


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[Any, ...]] = []

    def position(self, *args: Any) -> None:
        self.lines.append(("position", *args))

    def link(self, *args: Any) -> None:
        self.lines.append(("link", *args))

    def close(self) -> None:
        self.lines.append(("close",))


def test_an_in_process_runs_radio_log_feeds_the_live_page_and_its_own_log() -> None:
    """MotionTee: what RadioLinks writes to its MobilityLog reaches a live page's Motion, and the run's own log."""
    inner, motion = _Log(), Motion(TOPO)
    tee = MotionTee(motion, inner)
    tee.position("a", (0.0, 0.0), 0.0)
    tee.position("a", (4.0, 2.0), 1.0)
    tee.link(LinkChange("a", "b", "bluetooth", True, "in_range", 8.0), "bluetooth", True, 1.0)
    tee.close()
    assert motion.frame(0.5) == {"positions": {"a": [2.0, 1.0]}, "radio_links": []}
    assert motion.frame(1.0)["radio_links"] == [["a", "b", "bluetooth", True]]
    assert [x[0] for x in inner.lines] == ["position", "position", "link", "close"]
    MotionTee(Motion(TOPO)).close()  # a run that records nothing


def test_a_chaos_run_in_process_feeds_its_live_page_the_nodes_where_they_are(tmp_path: Path) -> None:
    """`snekbed chaos --view` of a topology with radios: the live page's Motion gets every tick's positions and the
    radio link changes, as the run's own mobility.jsonl does (the engine wires the tee before the run starts)."""
    topo_path = tmp_path / "walkers.yaml"
    topo_path.write_text(WALKERS + "".join(f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: "
                                           f"[100, 100], speed_mps: [5, 10]}}}}\n" for i in range(5)))
    topo = load_topology(topo_path)
    sc = parse_scenario_yaml("name: walk\nsteps:\n  - {action: wait, s: 10}\n", topology=topo)
    prepared = make_backend(sc, topo, ChaosOptions(seed=1, record=tmp_path / "run"))
    assert prepared.live is not None and prepared.clock is not None
    live = prepared.live()
    trio.run(lambda: run_scenario(prepared.backend, sc, seed=1), clock=prepared.clock)
    records = [json.loads(x) for x in (tmp_path / "run" / "mobility.jsonl").read_text().splitlines()]
    last = {r["node"]: [round(r["x_m"], 3), round(r["y_m"], 3)] for r in records if r["kind"] == "position"}
    end = max(r["mono_s"] for r in records)
    assert live.motion is not None and live.motion.frame(end)["positions"] == last
    changed = [r for r in records if r["kind"] in ("link_up", "link_down") and r["mono_s"] > 0]
    assert changed and all(([r["a"], r["b"], r["radio"], r["made"]] in live.motion.frame(r["mono_s"])["radio_links"])
                           == (r["kind"] == "link_up") for r in changed[:20])  # fmt: skip


class _NoContainers:
    def containers(self, run_id: str) -> dict[str, Any]:
        return {}


def test_the_docker_live_source_tails_mobility_jsonl_as_the_run_appends_to_it(tmp_path: Path) -> None:
    """DockerLive reads the lines the orchestrator appends to mobility.jsonl at each poll (a line still being
    written waits for the next poll); the live graph document gets the radios."""
    run = tmp_path / "live1"
    run.mkdir()
    (run / "topology.json").write_text(json.dumps(TOPO))
    (run / "meta.json").write_text(json.dumps({"run_id": "live1", "nodes": {}, "mobility": {"tick_s": 1.0}}))
    live = DockerLive(RunDir(run), _NoContainers(), {}, GraphInfo.from_topology_doc(TOPO, {}))  # type: ignore[arg-type]
    try:
        assert live.motion is not None and [r["name"] for r in live.motion.graph_doc()["radios"]] == ["bluetooth", "lan"]
        assert live._poll()["motion"] == {"positions": {}, "radio_links": []}  # no file yet
        with open(run / "mobility.jsonl", "w") as f:
            f.write(json.dumps(_pos(0.0, "a", 1.0, 2.0)) + "\n" + json.dumps(_link(0.0, True, "a", "b", "lan"))[:20])
        assert live._poll()["motion"] == {"positions": {"a": [1.0, 2.0]}, "radio_links": []}
        with open(run / "mobility.jsonl", "a") as f:
            f.write(json.dumps(_link(0.0, True, "a", "b", "lan"))[20:] + "\n")
        assert live._poll()["motion"]["radio_links"] == [["a", "b", "lan", True]]
    finally:
        live.close()


def test_the_live_page_of_snekbed_sim_draws_the_walkers_where_they_are(tmp_path: Path) -> None:
    """`snekbed sim --clock real --view` of a topology with radios, as a user runs it: the page's graph has the
    radios, and its frames the walkers' positions, which change as they walk (the session wires the tee)."""
    topo_path = tmp_path / "walkers.yaml"
    topo_path.write_text(WALKERS + "".join(f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: "
                                           f"[100, 100], speed_mps: [5, 10]}}}}\n" for i in range(4)))
    args = ["sim", str(topo_path), "--clock", "real", "--view", "127.0.0.1:0", "--hold-s", "20", "--seed", "1",
            "--quiet"]
    with served(args) as (url, _proc):
        graph = httpx.get(url + "api/graph", timeout=10, trust_env=False).json()
        radios = (graph.get("mobility") or {}).get("radios") or []
        assert [r["name"] for r in radios] == ["bluetooth", "lan"], graph
        seen: list[dict[str, list[float]]] = []
        deadline = time.monotonic() + 60  # the walk is 10 s of real time; a loaded host gets room
        while time.monotonic() < deadline:
            frame = httpx.get(url + "api/frame", timeout=10, trust_env=False).json()
            positions = (frame.get("motion") or {}).get("positions") or {}
            if len(positions) == 4 and (not seen or positions != seen[-1]):
                seen.append(positions)
            if len(seen) >= 3:
                break
            time.sleep(0.5)  # a poll of the page, as the browser's: the frames are the thing waited on
        assert len(seen) >= 3, seen  # every walker placed, and the places changed twice: they walk on the page
