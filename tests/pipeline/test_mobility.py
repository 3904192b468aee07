"""The mobility job (pipeline.jobs.mobility): radio links over time and delivery among connected pairs, from the
runs' mobility.jsonl (read on the driver: pipeline.mobility_reads) and their pings, and the convergence of their
radio episodes; and a recorded chaos run whose nodes move, analyzed end to end, against its own --json document."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from contract.mobility import MOBILITY_FIELDS
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import parse_scenario_yaml
from orchestrator.model.topology import Topology
from pipeline import analysis, schemas
from pipeline.jobs import mobility
from pipeline.report_mobility import mobility_figures, mobility_plots
from tests.pipeline.conftest import assert_frames_equal


def _mob(kind: str, t: float, **kw: object) -> tuple:
    row = dict.fromkeys(f.name for f in MOBILITY_FIELDS) | {"run_id": "r", "mono_s": t, "wall_ts": t, "kind": kind}
    row |= kw
    return (*(row[f.name] for f in MOBILITY_FIELDS), "r/mobility.jsonl", int(t * 10))


def _ping(t: float, received: bool, shortest: int | None, hops: int | None = None) -> tuple:
    row = dict.fromkeys(schemas.PINGS_SCHEMA.fieldNames()) | {"run_id": "r", "sent_mono_s": t, "received": received,
                                                             "shortest_links": shortest, "hops": hops}
    return tuple(row[n] for n in schemas.PINGS_SCHEMA.fieldNames())


def _stats(node: str, t: float, frame_type: str, frames: int, direction: str = "sent", run: str = "r") -> tuple:
    row = dict.fromkeys(schemas.EVENTS_SCHEMA.fieldNames()) | {
        "run_id": run, "event": "frame_stats", "node": node, "mono_s": t, "interval_s": 2.0, "direction": direction,
        "frame_type": frame_type, "link_class": "bluetooth", "frames": frames, "bytes": 10 * frames}
    return tuple(row[n] for n in schemas.EVENTS_SCHEMA.fieldNames())


def _episode(run: str, episode: int, action: str, tree_s: float | None, snake_s: float | None) -> tuple:
    return (run, episode, action, None, float(episode), float(episode), 8, 1, tree_s, snake_s, tree_s, snake_s)


def _stretch(pings: list[dict]) -> list[float]:
    """PROTOCOL.md §8: hops are links + 1; stretch = path links / shortest-path links, on delivered pings."""
    return [(p["hops"] - 1) / p["shortest_links"] for p in pings if p["received"] and p["shortest_links"]]


@pytest.mark.spark
def test_links_over_time_and_delivery_among_connected_pairs(spark) -> None:
    link = {"a": "a", "b": "b", "radio": "bluetooth", "link_class": "bluetooth", "distance_m": 5.0, "made": True}
    moves = spark.createDataFrame([
        _mob("position", 1.0, node="a", x_m=0.0, y_m=0.0), _mob("position", 1.0, node="b", x_m=5.0, y_m=0.0),
        _mob("link_up", 1.0, **link, cause="start"), _mob("link_up", 1.0, **{**link, "b": "c"}, cause="start"),
        _mob("position", 3.0, node="a", x_m=3.0, y_m=4.0),  # a moved 5 m
        _mob("link_down", 3.0, **link, cause="out_of_range"), _mob("link_up", 7.0, **link, cause="in_range"),
        _mob("position", 11.0, node="a", x_m=3.0, y_m=14.0),  # and 10 m more: 15 m by 2 nodes over 10 s
    ], schemas.MOBILITY_SCHEMA)
    ping_rows = [_ping(2.0, True, 1, 2), _ping(3.5, False, None), _ping(4.0, False, 2), _ping(8.0, True, 2, 4),
                 _ping(8.5, True, 1, 3), _ping(9.0, True, None, 3)]
    pings = spark.createDataFrame(ping_rows, schemas.PINGS_SCHEMA)
    bounds = spark.createDataFrame([("r", 1.0, 11.0)], "run_id string, start_s double, end_s double")
    assert_frames_equal(mobility.mobility_timeline(moves, pings, bounds, 5.0), spark.createDataFrame([
        ("r", 0.0, 0, 1, 1, 2, 1, 0.5, 1, 0),  # 2 links at the start, one down at 3 s: 1 up at the bin's end
        ("r", 5.0, 1, 0, 2, 2, 2, 1.0, 1, 1),  # a disconnected pair's ping that got through (a path came back)
    ], schemas.MOBILITY_TIMELINE_SCHEMA))  # bins with neither a link change nor a ping have no row
    bad = spark.createDataFrame([("r", 2)], "run_id string, bad_lines long")
    # a covers 4 s (two emissions of 2 s), b 2 s: 6 node-seconds; sent control frames 3 + 3 + 1, traffic and
    # received frames left out; run s's frames (no mobility.jsonl) too
    events = spark.createDataFrame([
        _stats("a", 2.0, "keepalive", 3), _stats("a", 2.0, "traffic", 50), _stats("a", 4.0, "keepalive", 3),
        _stats("b", 4.0, "tree_announcement", 1), _stats("b", 4.0, "keepalive", 7, "received"),
        _stats("s", 4.0, "keepalive", 9, run="s")], schemas.EVENTS_SCHEMA)
    stretch = _stretch([dict(zip(schemas.PINGS_SCHEMA.fieldNames(), p)) for p in ping_rows])
    assert stretch == [1.0, 1.5, 2.0]
    row = ("r", 2, 10.0, 0.75, 1, 1, 0.2, 4, 3, 3 / 4, 2, 1, 2, statistics.mean(stretch), statistics.median(stretch),
           7 / 6, 70 / 6)
    assert_frames_equal(mobility.mobility_runs(moves, pings, bad, events), spark.createDataFrame(
        [(*row, None, None, None, None, None)], schemas.MOBILITY_RUNS_SCHEMA))  # no convergence table: unknown
    conv = spark.createDataFrame([  # three radio episodes: both converged, the tree only, neither (cut short)
        _episode("r", 0, "start", 0.4, 0.9), _episode("r", 1, "radio", 0.5, 1.0), _episode("r", 2, "radio", 0.2, None),
        _episode("r", 3, "kill", 2.0, 3.0), _episode("r", 4, "radio", None, None),
        _episode("s", 1, "radio", 9.0, 9.0)], schemas.CONVERGENCE_SCHEMA)  # s: no mobility.jsonl, left out
    assert_frames_equal(mobility.mobility_runs(moves, pings, bad, events, conv), spark.createDataFrame(
        [(*row, 3, 2 / 3, 1 / 3, 0.35, 1.0)], schemas.MOBILITY_RUNS_SCHEMA))


WALK = {"name": "walk", "movement": {"tick_s": 1, "duration_s": 40},
        "radios": {"bluetooth": {"range_m": 15}, "lan": {"range_m": 40, "class": "lan"}},
        "nodes": [{"name": f"n{i}", "mobility": {"model": "random_waypoint", "area_m": [80, 80],
                                                "speed_mps": [1, 2]}} for i in range(8)],
        "links": []}
SCENARIO = "name: walk\nsteps:\n  - {action: wait, s: 40}\n  - {action: check}\n"


@pytest.mark.spark
def test_a_recorded_moving_run_analyzed_end_to_end(spark, tmp_path: Path) -> None:
    topo = Topology.from_data(WALK)
    run = tmp_path / "runs" / "walk"
    doc = execute(parse_scenario_yaml(SCENARIO, topology=topo), topo, ChaosOptions(seed=3, record=run))
    with open(run / "mobility.jsonl", "a") as f:
        f.write('{"kind": "teleport"}\n')  # a line that breaks the contract: counted, left out
    analysis.analyze(spark, [tmp_path / "runs"], tmp_path / "out")

    def rows(table: str) -> list[dict]:
        return pq.read_table(next((tmp_path / "out" / "tables" / table).rglob("*.parquet"))).to_pylist()

    (got,) = rows("mobility_runs")
    m = doc["mobility"]
    assert (got["nodes"], got["link_ups"], got["link_downs"], got["bad_lines"]) == (8, m["link_ups"], m["link_downs"], 1)
    assert got["moved_s"] == pytest.approx(40.0) and got["mean_speed_mps"] == pytest.approx(m["mean_speed_mps"], 1e-3)
    pinged = len((run / "pings.jsonl").read_text().splitlines())
    assert got["connected_sent"] + got["disconnected_sent"] == pinged
    assert 0 < got["connected_delivery"] <= 1
    stretch = _stretch([json.loads(line) for line in (run / "pings.jsonl").read_text().splitlines()])
    assert len(stretch) > 10 and got["stretch_mean"] == pytest.approx(statistics.mean(stretch))
    assert got["stretch_median"] == pytest.approx(statistics.median(stretch))
    (summary,) = rows("run_summary")  # control overhead: the overhead job's figure for the same run
    assert got["control_bytes_per_node_s"] == pytest.approx(summary["control_bytes_per_node_s"]) and (
        got["control_bytes_per_node_s"] > 0 and got["control_frames_per_node_s"] > 0)
    timeline = rows("mobility_timeline")
    assert sum(r["link_ups"] for r in timeline) == m["link_ups"] and sum(r["link_downs"] for r in timeline) == (
        m["link_downs"])
    assert timeline[-1]["radio_links"] == m["radio_links"]
    assert json.loads((run / "meta.json").read_text())["mobility"]["tick_s"] == 1.0
    conv = sorted(rows("convergence"), key=lambda r: r["episode"])
    _radio_episodes(got, conv, run, m)
    # each ping is in the episode, numbered as the convergence table numbers them, whose time holds its sending
    t0 = [r["t0_s"] for r in conv]
    assert len(t0) > 2 and [r["episode"] for r in conv] == list(range(len(t0)))
    enriched = rows("pings_enriched")
    assert len(enriched) == pinged and {r["episode"] for r in enriched} > {0, 1}
    for p in enriched:
        e = p["episode"]
        assert (e == 0 or t0[e] <= p["sent_mono_s"]) and (e + 1 == len(t0) or p["sent_mono_s"] < t0[e + 1]), p
    report = (tmp_path / "out" / "report.md").read_text()
    for title in ("## Mobility: radio links and delivery over time", "## Mobility: delivery against speed",
                  "## Mobility: convergence between radio link changes"):
        assert title in report
    assert f"| {got['run_id']} | 8 | 40 |" in report  # the run's row: its nodes and the time they moved
    html = (tmp_path / "out" / "report.html").read_text()
    drawn = json.loads((tmp_path / "out" / "plots.json").read_text())
    for png in ("mobility_over_time.png", "mobility_against_speed.png"):  # the plots: drawn, shown, with their data
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in report
        assert f'src="{png}"' in html
    over_time = drawn["mobility_over_time.png"]
    assert [t for t, _ in over_time["link_changes"][got["run_id"]]] == [r["t_bin_s"] for r in timeline]
    assert sum(n for _, n in over_time["link_changes"][got["run_id"]]) == m["link_ups"] + m["link_downs"]
    against_speed = drawn["mobility_against_speed.png"]
    assert against_speed["connected_delivery"] == [[got["mean_speed_mps"], got["connected_delivery"], got["run_id"]]]
    assert against_speed["stretch_mean"] == [[got["mean_speed_mps"], got["stretch_mean"], got["run_id"]]]


def test_no_moving_run_no_mobility_plots() -> None:
    assert mobility_plots([], []) == ({}, {}) and mobility_figures([], []) == []


def _radio_episodes(got: dict, conv: list[dict], run: Path, m: dict) -> None:
    """A radio episode per tick with a radio link change made after the start, and mobility_runs's figures of them
    those of the convergence table."""
    start = conv[0]["t0_s"]
    lines = [json.loads(line) for line in (run / "mobility.jsonl").read_text().splitlines()[:-1]]
    ticks = sorted({ln["mono_s"] for ln in lines if ln["kind"] in ("link_up", "link_down") and ln["made"] and
                    ln["cause"] != "start" and ln["mono_s"] > start})  # fmt: skip
    radio = [r for r in conv if r["action"] == "radio"]
    assert [r["t0_s"] for r in radio] == ticks and got["radio_episodes"] == len(ticks) > 10
    assert [r["action"] for r in conv] == ["start"] + ["radio"] * len(ticks)  # the scenario has no fault
    assert conv[-1]["components"] == m["components"]  # the graph after the last change: the observer's at the end
    for kind in ("tree", "snake"):
        done = [r[f"{kind}_converged_s"] for r in radio if r[f"{kind}_converged_s"] is not None]
        assert got[f"radio_{kind}_converged_share"] == pytest.approx(len(done) / len(radio))
        assert got[f"radio_{kind}_median_s"] == (pytest.approx(statistics.median(done)) if done else None)
