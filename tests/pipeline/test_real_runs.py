"""The pipeline on real runs: `snekbed sim TOPOLOGY --kill-root --record DIR` (the in-process backend).

What the pipeline derives from the event logs must match what the in-process
observer measured while the run was going on (meta.observer): convergence
within one maintenance tick (1 s), ping delivery and stretch exactly; every
input line is accounted for; the report of the multi-run analysis is written
and each plot has data.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.image import imread
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from pipeline import analysis, clean_files, line_reads, report, report_text, rundirs, schemas, tables
from pipeline.jobs import convergence, episodes
from tests.conftest import REPO, TOPOLOGIES, need
from tests.pipeline.conftest import assert_frames_equal, gen_events

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TICK_S = 1.0  # one SNEK maintenance tick (PROTOCOL.md §6.7)
RUNS = {  # topology file -> sim arguments
    "sim.txt": ["--seed", "0", "--pairs", "40"],
    "rtree-0050.txt": ["--seed", "1", "--pairs", "40"],
    "sim-medium.txt": ["--seed", "3", "--pairs", "40"],
}


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> list[Path]:
    need(TOPOLOGIES.is_dir(), f"pinecone topologies not found at {TOPOLOGIES}")
    root = tmp_path_factory.mktemp("real-runs")
    runs = []
    for name, args in RUNS.items():
        out = root / Path(name).stem
        cmd = [sys.executable, "-m", "orchestrator.cli", "sim", str(TOPOLOGIES / name), "--kill-root", "--json",
               "--record", str(out), *args]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode in (0, 1), proc.stderr[-2000:]
        assert (out / "meta.json").exists(), proc.stderr[-2000:]
        runs.append(out)
    return runs


@pytest.fixture(scope="session")
def real_analysis(spark, real_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("real-analysis")
    result = analysis.analyze(spark, real_runs, out)
    return out, result


@pytest.fixture(scope="session")
def close_faults(spark, tmp_path_factory) -> tuple[Path, Path, dict]:
    """A run with many faults close together: `snekbed chaos flap --topology line-5.yaml --record RUN --json` (in
    process: a link of the root down and up every second, five times, then a random link likewise: 20 faults, 1 s
    apart), analyzed alone. -> (the analysis's OUT, the run, the chaos JSON document)."""
    root = tmp_path_factory.mktemp("close-faults")
    run = root / "flap"
    cmd = [sys.executable, "-m", "orchestrator.cli", "chaos", "flap", "--topology",
           str(REPO / "compose" / "topologies" / "line-5.yaml"), "--record", str(run), "--json"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = root / "analysis"
    analysis.analyze(spark, [run], out)
    return out, run, json.loads(proc.stdout)


def observer(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())["observer"]


def table(spark, out: Path, name: str, schema) -> list[dict]:
    return [r.asDict() for r in tables.read_table(spark, out, name, schema).collect()]


def test_convergence_matches_the_observer(spark, real_runs, real_analysis):
    out, _ = real_analysis
    conv = {(r["run_id"], r["episode"]): r for r in table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)}
    for run in real_runs:
        meta = json.loads((run / "meta.json").read_text())
        obs, run_id = meta["observer"], meta["run_id"]
        start, kill = conv[(run_id, 0)], conv[(run_id, 1)]
        assert start["action"] == "start" and kill["action"] == "kill_root"
        assert kill["target"] == obs["root_kill"]["killed_name"]
        pairs = [
            (start["tree_converged_s"], obs["tree_converged_s"]),
            (start["snake_converged_s"], obs["snake_converged_s"]),
            (kill["tree_converged_s"], obs["root_kill"]["tree_reconverged_s"]),
            (kill["snake_converged_s"], obs["root_kill"]["snake_reconverged_s"]),
        ]
        for derived, measured in pairs:
            assert measured is not None and derived is not None, (run.name, pairs)
            assert abs(derived - measured) <= TICK_S, (run.name, pairs)


def test_delivery_and_stretch_match_the_observer(spark, real_runs, real_analysis):
    out, _ = real_analysis
    by_ep = {(r["run_id"], r["episode"]): r for r in table(spark, out, "delivery_by_episode",
                                                          schemas.DELIVERY_EPISODE_SCHEMA)}
    for run in real_runs:
        meta = json.loads((run / "meta.json").read_text())
        obs, run_id = meta["observer"], meta["run_id"]
        for episode, measured in ((0, obs), (1, obs["root_kill"])):
            got = by_ep[(run_id, episode)]
            assert (got["sent"], got["received"]) == (measured["pings"]["sent"], measured["pings"]["delivered"])
            st = measured["stretch"]
            assert got["stretch_mean"] == pytest.approx(st["mean"], abs=1e-4)
            assert got["stretch_median"] == pytest.approx(st["median"], abs=1e-4)
            assert got["stretch_p95"] == pytest.approx(st["p95"], abs=1e-4)


def test_every_line_is_accounted_for(spark, real_runs, real_analysis):
    out, result = real_analysis
    recon = table(spark, out, "reconciliation", schemas.RECONCILIATION_SCHEMA)
    files = {str(f.resolve()) for run in real_runs
             for f in [*(run / "events").glob("*.jsonl"), run / "actions.jsonl", run / "pings.jsonl"]}
    assert {r["file"] for r in recon} == files
    for r in recon:
        with open(r["file"], "rb") as fh:
            assert r["lines"] == len(fh.read().splitlines())
        assert r["ok"] and r["lines"] == r["parsed"] + r["quarantined"]
    assert result.quarantined == 0  # the recorder writes the contract exactly


def test_report_of_a_multi_run_analysis(spark, real_runs, real_analysis):
    out, result = real_analysis
    for name in ("report.md", "report.html", "plots.json", *report.PLOTS):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    from matplotlib.image import imread

    for png in report.PLOTS:
        pixels = imread(out / png)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0.01, png
    data = json.loads((out / "plots.json").read_text())
    assert len(data["convergence_cdf.png"]["tree"]) == 2 * len(real_runs)
    assert len(data["convergence_cdf.png"]["snake"]) >= len(real_runs)
    assert sum(count for _, count in data["stretch_hist.png"]["bins"]) > 0
    assert data["delivery_over_time.png"]["series"] and len(data["delivery_over_time.png"]["disruptions"]) == len(real_runs)
    assert data["overhead_by_class.png"]["control_bytes_per_node_s"] and data["overhead_by_class.png"]["traffic_bytes_per_node_s"]
    md = (out / "report.md").read_text()
    for run in real_runs:
        assert json.loads((run / "meta.json").read_text())["run_id"] in md
    assert "Reconciliation" in md and "Convergence" in md and "Comparison by topology" in md
    html = (out / "report.html").read_text()
    assert all(f'src="{png}"' in html for png in report.PLOTS)


def test_convergence_is_the_same_when_spark_plans_no_broadcast_join(spark, real_runs, real_analysis):
    """Regression: with sort-merge joins (what Spark picks once the tables outgrow the 10 MB broadcast
    threshold, e.g. a 40-run A/B analysis) the convergence job once returned null for every re-convergence,
    because one plan fed both timelines from the same intermediate. Forcing that plan on these small runs must
    give exactly the table the analysis wrote."""
    out, _ = real_analysis
    events = tables.read_table(spark, out, "events", schemas.EVENTS_SCHEMA)
    eps = tables.read_table(spark, out, "episodes", schemas.EPISODES_SCHEMA)
    bounds = spark.createDataFrame(episodes.run_bounds(events).collect(), "run_id string, start_s double, end_s double")
    key = "spark.sql.autoBroadcastJoinThreshold"
    before = spark.conf.get(key)
    spark.conf.set(key, "-1")
    try:
        again = {(r["run_id"], r["episode"]): r.asDict() for r in convergence.convergence(events, eps, bounds).collect()}
    finally:
        spark.conf.set(key, before)
    written = {(r["run_id"], r["episode"]): r for r in table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)}
    assert again == written
    assert all(r["snake_converged_s"] is not None for r in again.values()), again


def test_the_tables_do_not_depend_on_how_files_are_laid_out_over_tasks(spark, real_runs, real_analysis, tmp_path,
                                                                      monkeypatch):
    """These runs have more event logs than line_reads.PACK_FILES_ABOVE, so their analysis packed several files into
    each task (line numbers from Spark's plan and the driver's line counts). Analyzed again with one file per task (row
    index = line number), every ingested table and the results built on them are the same, line numbers included."""
    out, _ = real_analysis
    n_files = sum(len(list((run / "events").glob("*.jsonl"))) + 2 for run in real_runs)
    assert n_files > line_reads.PACK_FILES_ABOVE, n_files
    monkeypatch.setattr(line_reads, "PACK_FILES_ABOVE", 10**9)
    again = tmp_path / "one-file-per-task"
    analysis.analyze(spark, real_runs, again)
    line_reads.pack_table_reads(spark)
    for name, schema in (("events", schemas.EVENTS_SCHEMA), ("actions", schemas.ACTIONS_SCHEMA),
                         ("pings", schemas.PINGS_SCHEMA), ("quarantine", schemas.QUARANTINE_SCHEMA),
                         ("reconciliation", schemas.RECONCILIATION_SCHEMA),
                         ("convergence", schemas.CONVERGENCE_SCHEMA), ("delivery", schemas.DELIVERY_SCHEMA)):
        assert_frames_equal(tables.read_table(spark, again, name, schema), tables.read_table(spark, out, name, schema))


@pytest.mark.parametrize("arrow_reads", [False, True], ids=["spark-reads", "arrow-reads"])
def test_the_tables_are_the_same_kept_in_memory_or_read_back_from_disk(spark, real_runs, real_analysis, tmp_path,
                                                                      arrow_reads):
    """Small inputs on a local master are analyzed with every table kept in memory (tables.TableStore): collected as
    Arrow, written from the driver, and read by later steps in one partition, the input files read on the driver
    (clean_files). Analyzed again on disk (each table written and read back from its Parquet files), the input files
    read by Spark's ingest or by Arrow's reader (arrow_ingest), every table is the same, row for row, and so is the
    report's data: the mode changes how the work is run, never its result."""
    out, result = real_analysis
    assert analysis.in_memory_default(spark, rundirs.discover_runs(real_runs)), "the fixture's runs should be small"
    on_disk = tmp_path / "on-disk"
    again = analysis.analyze(spark, real_runs, on_disk, in_memory=False, arrow_reads=arrow_reads)
    assert sorted(again.tables) == sorted(result.tables)
    assert len(again.tables) >= 20, again.tables
    for name in sorted(result.tables):
        if tables.table_is_empty(out, name):  # e.g. no quarantined line: no file in either
            assert tables.table_is_empty(on_disk, name), name
            continue
        assert_frames_equal(spark.read.parquet(tables.table_path(out, name)),
                            spark.read.parquet(tables.table_path(on_disk, name)))
    # the report's data: the same to 1e-9 (a mean sums its rows in the order the partitions give them)
    assert _close(json.loads((on_disk / "plots.json").read_text()), json.loads((out / "plots.json").read_text()))
    assert (on_disk / "report.md").read_text() == (out / "report.md").read_text()
    assert again.reconciliation == result.reconciliation and again.events == result.events
    arrow_parts = list((on_disk / "tables" / "events").rglob("part-arrow-*.parquet"))
    assert bool(arrow_parts) == arrow_reads  # the reader asked for read the event logs


def test_episodes_planned_from_the_drivers_rows_are_those_collected_by_spark(spark, real_runs, real_analysis,
                                                                           tmp_path):
    """A small analysis plans the episodes from the rows its in-memory store already holds on the driver
    (``TableStore.arrow``: Arrow's rows, the runs' nodes as a list of pairs), with no Spark query. The planner is the
    same either way (``episodes.episode_rows``); what differs is the form of its inputs, and from Arrow's rows it gives
    the episodes it gives from the rows Spark collects from the same tables (``episodes.episodes``), in the same
    order, and those of the analysis's table. A table the store does not hold is not kept on the driver."""
    runs = rundirs.discover_runs(real_runs)
    store = tables.TableStore(spark, tmp_path / "in-memory", in_memory=True, hold=analysis.HELD_ON_THE_DRIVER)
    for name, (schema, rows) in rundirs.run_rows(runs).items():
        store.put_arrow(name, tables.arrow_table(schema, rows), schema, ())
    store.put_arrow("actions", pa.concat_tables([clean_files.rows(r.actions_file, r.run_id, "actions") for r in runs]),
                    schemas.ACTIONS_SCHEMA)
    events = pa.concat_tables([clean_files.rows(f, r.run_id, "events") for r in runs for f in r.event_files])
    bounds = analysis._run_bounds(events)
    assert len(bounds) == len(runs) and all(start is not None for _, start, _ in bounds)
    held = {name: store.arrow(name) for name in ("links", "actions", "runs")}
    assert all(isinstance(rows, pa.Table) and rows.num_rows for rows in held.values())
    mine = episodes.episode_rows([{"run_id": r, "start_s": s} for r, s, _ in bounds], held["links"].to_pylist(),
                                 held["actions"].to_pylist(), held["runs"].to_pylist())
    by_spark = episodes.episodes(store.get("runs", schemas.RUNS_SCHEMA), store.get("links", schemas.LINKS_SCHEMA),
                                 store.get("actions", schemas.ACTIONS_SCHEMA),
                                 spark.createDataFrame(bounds, "run_id string, start_s double, end_s double"))
    assert mine == [tuple(r) for r in by_spark.collect()]
    assert {ep[4] for ep in mine} >= {"start", "kill_root"}  # the runs' start and their root kills
    out, _ = real_analysis
    written = table(spark, out, "episodes", schemas.EPISODES_SCHEMA)
    assert sorted(mine) == sorted(tuple(r[f] for f in schemas.EPISODES_SCHEMA.fieldNames()) for r in written)
    store.drop("runs")
    assert store.arrow("runs") is None
    store.put_arrow("events", events, schemas.EVENTS_SCHEMA)
    assert "events" not in analysis.HELD_ON_THE_DRIVER and store.arrow("events") is None  # kept for Spark only
    assert tables.TableStore(spark, tmp_path / "on-disk").arrow("links") is None  # on disk: nothing held on the driver


def test_the_reports_plain_reads_from_the_drivers_rows_are_sparks(spark, real_analysis):
    """The report's plain reads (report.PLAIN_READS) of rows the driver holds are sorted there: for every such table
    of a real analysis, the same rows, values and types, in the same order as Spark's query (the table's columns in
    its schema's types). On a table with nulls and a negative zero in its keys, Spark's order (nulls first); a
    column of integers read in a schema of doubles comes out as doubles; a NaN in a key (Spark orders it after every
    number, Arrow does not) and a column the schema's type cannot take exactly are left to Spark."""
    out, _ = real_analysis
    for name, (table, schema, keys, left_out) in report.PLAIN_READS.items():
        held = pa.concat_tables([pq.read_table(f) for f in sorted((out / "tables" / table).rglob("*.parquet"))])
        mine = report._sorted_rows(held, schema, keys, left_out)
        query = tables.read_table(spark, out, table, schema) if schema is not None \
            else spark.read.parquet(tables.table_path(out, table))
        theirs = [r.asDict() for r in query.drop(*left_out).orderBy(*keys).collect()]
        assert mine == theirs, name
        assert mine or table.startswith("mobility_"), name  # the real runs' nodes do not move: no mobility rows
        assert [type(v) for r in mine for v in r.values()] == [type(v) for r in theirs for v in r.values()], name
    rows = pa.table({"run_id": ["b", None, "a", "a", None], "t": [1.0, 2.0, None, -0.0, -1.0], "n": [1, 2, 3, 4, 5]})
    mine = report._sorted_rows(rows, None, ("run_id", "t"), ("n",))
    assert mine == [r.asDict() for r in spark.createDataFrame(rows).orderBy("run_id", "t").drop("n").collect()]
    assert mine[:3] == [{"run_id": None, "t": -1.0}, {"run_id": None, "t": 2.0}, {"run_id": "a", "t": None}]
    doubles = StructType([StructField("run_id", StringType()), StructField("n", DoubleType())])
    assert report._sorted_rows(rows, doubles, ("run_id",), ())[2:] == [{"run_id": "a", "n": 3.0},
                                                                       {"run_id": "a", "n": 4.0}, {"run_id": "b", "n": 1.0}]
    fractions = pa.table({"t": [1.5, 2.0]})  # Spark's cast would truncate 1.5, Arrow's refuses: Spark answers
    assert report._sorted_rows(fractions, StructType([StructField("t", LongType())]), ("t",), ()) is None
    with_nan = pa.table({"run_id": ["a", "a"], "t": [float("nan"), 1.0]})
    assert report._sorted_rows(with_nan, None, ("run_id", "t"), ()) is None
    assert math.isnan(report._sorted_rows(with_nan, None, ("run_id",), ())[0]["t"])  # a NaN outside the keys: sorted here


def _close(a, b) -> bool:
    """JSON values equal, floats to a relative 1e-9."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def test_a_run_whose_every_line_passes_the_fast_path_is_analyzed_in_memory(spark, tmp_path):
    """In memory only the suspect lines get the slow path's verdicts; a run with none (synthetic event logs, and an
    empty actions.jsonl and pings.jsonl, as the dataset contract allows) still gets an empty quarantine table, every
    line accounted for, and the same tables as on disk."""
    run = tmp_path / "clean"
    gen_events.generate_run(run, "clean", nodes=6, duration_s=30.0, seed=3, variant="snek")
    (run / "actions.jsonl").write_text("")
    (run / "pings.jsonl").write_text("")
    got = analysis.analyze(spark, [run], tmp_path / "mem", in_memory=True)
    assert got.quarantined == 0 and got.events > 0 and all(r["ok"] for r in got.reconciliation)
    assert tables.read_table(spark, tmp_path / "mem", "quarantine", schemas.QUARANTINE_SCHEMA).count() == 0
    disk = analysis.analyze(spark, [run], tmp_path / "disk", in_memory=False, arrow_reads=False)  # Spark's ingest
    assert disk.reconciliation == got.reconciliation
    for name, schema in (("events", schemas.EVENTS_SCHEMA), ("episodes", schemas.EPISODES_SCHEMA),
                         ("convergence", schemas.CONVERGENCE_SCHEMA), ("overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA)):
        assert_frames_equal(tables.read_table(spark, tmp_path / "mem", name, schema),
                            tables.read_table(spark, tmp_path / "disk", name, schema))


# --------------------------------------------------------------------------- what the report shows (issue 29)


def md_sections(md: str) -> dict[str, tuple[str, list[str], list[list[str]]]]:
    """report.md's table sections: title -> (caption, header cells, rows of cells)."""
    out = {}
    for chunk in md.split("\n## ")[1:]:
        title, *lines = chunk.splitlines()
        cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines if line.startswith("|")]
        caption = " ".join(line for line in lines if line and line[0] not in "|#!")
        out[title] = (caption, cells[0], [row for row in cells[2:]])
    return out


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _red(pixels) -> int:
    rgb = pixels[..., :3]
    return int(((rgb[..., 0] > 0.8) & (rgb[..., 1] < 0.65) & (rgb[..., 2] < 0.65)).sum())


def check_fault_labels(out: Path) -> list[dict]:
    """The faults named on delivery_over_time.png, checked from the plot's geometry (``plots.json`` layout: the boxes
    matplotlib measured, in PNG pixels) against the PNG itself: each fault named once; no two names overlap, and none
    overlaps the title or the plot; each name is drawn (red text in its box) beside its fault's dashed line, which
    is drawn through the plot at that x. Returns the labels."""
    data = json.loads((out / "plots.json").read_text())["delivery_over_time.png"]
    layout, pixels = data["layout"], imread(out / "delivery_over_time.png")
    height, width = pixels.shape[:2]
    assert [width, height] == [round(v) for v in layout["size_px"]]
    labels = layout["labels"]
    assert sorted((m["t"], m["action"]) for m in labels) == sorted(map(tuple, data["disruptions"][:50]))
    title, axes = layout["title"], layout["axes"]
    assert (pixels[round(title[1]):round(title[3]), round(title[0]):round(title[2]), :3].max(axis=2) < 0.3).sum() > 20
    for i, m in enumerate(labels):
        box = m["box"]
        assert 0 <= box[0] < box[2] <= width and 0 <= box[1] < box[3] <= height, m
        assert not _overlap(box, title) and not _overlap(box, axes), (m, title, axes)
        for other in labels[i + 1:]:
            assert not _overlap(box, other["box"]), (m, other)
        assert _red(pixels[round(box[1]):round(box[3]), round(box[0]):round(box[2])]) >= 10, m
        assert 0 <= box[0] - m["x_px"] <= 6 or 0 <= m["x_px"] - box[2] <= 6, m  # it starts (or ends) at its line
        x = round(m["x_px"])
        assert _red(pixels[round(axes[1]):round(axes[3]), x - 1:x + 2]) > 60, m  # the dashed line, top to bottom
    return labels


def test_faults_are_named_on_the_delivery_plot_without_any_overlap(close_faults, real_analysis):
    out, _, _ = close_faults
    labels = check_fault_labels(out)
    assert len(labels) == 20 and {m["action"] for m in labels} == {"link_down", "link_up"}
    # close together: in one row, a name would run over the next fault's; here they take several lanes
    by_x = sorted(labels, key=lambda m: m["x_px"])
    assert any(b["x_px"] - a["x_px"] < a["box"][2] - a["box"][0] for a, b in zip(by_x, by_x[1:]))
    assert len({m["lane"] for m in labels}) >= 3
    assert [m["action"] for m in check_fault_labels(real_analysis[0])] == ["kill_root"] * len(RUNS)


def test_control_overhead_by_frame_type_keeps_the_pings_apart(real_analysis):
    """The report's control overhead has no ping traffic in it: the traffic frames (pings and pongs) are a table and
    a panel of their own. Each row is the mean over the runs of the overhead_by_class table's sent rows; a class's
    "all control" row is the mean over the runs of their control types summed."""
    out, _ = real_analysis
    sent = [r for r in pq.read_table(out / "tables" / "overhead_by_class").to_pylist() if r["direction"] == "sent"]
    per_type: dict[tuple, list[float]] = {}
    per_run: dict[tuple, float] = {}
    for r in sent:
        per_type.setdefault((r["link_class"], r["frame_type"]), []).append(r["bytes_per_node_s"])
        if r["frame_type"] != "traffic":
            per_run[(r["run_id"], r["link_class"])] = per_run.get((r["run_id"], r["link_class"]), 0.0) + r["bytes_per_node_s"]
    mean = {k: sum(v) / len(v) for k, v in per_type.items()}
    for cls in {c for _, c in per_run}:
        totals = [v for (_, c), v in per_run.items() if c == cls]
        mean[(cls, "all control")] = sum(totals) / len(totals)
    assert {t for _, t in per_type} >= {"traffic", "tree_announcement", "bootstrap"}
    sections = md_sections((out / "report.md").read_text())
    shown = {}
    for title in ("Control overhead by link class and frame type", "Ping traffic by link class"):
        _, head, rows = sections[title]
        assert head == ["link_class", "frame_type", "frames_per_node_s", "bytes_per_node_s", "what"]
        shown[title] = {(r[0], r[1]): float(r[3]) for r in rows}
    control, traffic = shown.values()
    assert {t for _, t in traffic} == {"traffic"} and "traffic" not in {t for _, t in control}
    assert set(control) | set(traffic) == set(mean)
    for key, value in {**control, **traffic}.items():
        assert value == pytest.approx(mean[key], rel=1e-3), key
    data = json.loads((out / "plots.json").read_text())["overhead_by_class.png"]
    assert not [k for k in data["control_bytes_per_node_s"] if k.endswith("/traffic") or k.endswith("/all control")]
    assert data["traffic_bytes_per_node_s"] == pytest.approx({c: v for (c, t), v in mean.items() if t == "traffic"})
    assert traffic and all(v > 0 for v in traffic.values())  # the runs' pings: counted, apart


def test_one_clock_for_episode_times_named_in_every_table_and_plot(spark, real_analysis, close_faults):
    """Every time of an episode in the report is on the run clock (s since the run's first node_started), named in
    the header of each table that has one and on the delivery plot's axis; the faults marked on the plot are at the
    Convergence table's t0; the chaos JSON names its own clock (scenario) and its origin, from which its at_s
    converts to the run clock as the report says."""
    for out in (real_analysis[0], close_faults[0]):
        md = (out / "report.md").read_text()
        assert report_text.CLOCK_TEXT in md and "t0_rel_s" not in md
        sections = md_sections(md)
        t0_of = {}
        for title in ("Convergence", "Delivery per episode"):
            _, head, rows = sections[title]
            col = head.index("t0 (run clock, s)")
            t0_of[title] = {(r[0], r[1]): r[col] for r in rows}
        assert t0_of["Delivery per episode"] and t0_of["Delivery per episode"].items() <= t0_of["Convergence"].items()
        data = json.loads((out / "plots.json").read_text())["delivery_over_time.png"]
        assert data["clock"] == "run" and data["layout"]["x_label"] == report_text.RUN_CLOCK_AXIS
        conv = table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)
        assert sorted(map(tuple, data["disruptions"])) == sorted((r["t0_rel_s"], r["action"]) for r in conv if r["episode"])
    out, _, doc = close_faults
    assert doc["time_origin"]["clock"] == "scenario"
    conv = table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)
    [zero] = [r["t0_s"] for r in conv if r["episode"] == 0]
    faults = [r["t0_rel_s"] for r in conv if r["episode"]]
    for step in (s for s in doc["steps"] if s["action"] == "flap"):
        on_run_clock = step["at_s"] + doc["time_origin"]["mono_s"] - zero
        assert min(abs(on_run_clock - t) for t in faults) <= 2e-3, (step, faults)


def test_captions_add_to_the_titles_and_every_row_is_explained(real_analysis, close_faults):
    """Each figure's caption says what its title does not; each table says what one of its rows is; the rows that
    need more say it: delivery rows without a path (the flap run's pings across a cut link), the overhead rows'
    frame types, the episodes of the delivery."""
    no_path = []
    for out in (real_analysis[0], close_faults[0]):
        md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
        for title in report.FIGURE_TITLES.values():
            [caption] = [line for line in md.splitlines() if line.startswith(f"*{title}: ")]
            assert len(set(caption.lower().split()) - set(title.lower().split())) >= 15, caption
            assert f'alt="{title}"><figcaption><b>{title}</b>: ' in html
        sections = md_sections(md)
        assert len(sections) >= 15
        for title, (caption, _, _) in sections.items():
            assert "row" in caption and len(set(caption.lower().split()) - set(title.lower().split())) >= 10, title
        caption, head, rows = sections["Delivery and stretch by class mix, hop distance and time since disruption"]
        mix, shortest = head.index("class_mix"), head.index("shortest_links")
        assert all(r[mix] for r in rows) and report_text.NO_PATH in caption
        no_path += [r for r in rows if r[shortest] == "–"]
        for title in ("Control overhead by link class and frame type", "Ping traffic by link class"):
            _, head, rows = sections[title]
            assert rows and all(r[head.index("what")] == report_text.FRAME_TYPE_WHAT[r[1]] for r in rows), title
        _, head, rows = sections["Delivery per episode"]
        conv = {(r[0], r[1]): r[2] for r in sections["Convergence"][2]}
        assert [r[head.index("action")] for r in rows] == [conv[(r[0], r[1])] for r in rows]
    assert no_path and all(r[mix] == report_text.NO_PATH for r in no_path)
