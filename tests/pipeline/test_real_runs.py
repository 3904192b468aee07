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
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from pipeline import analysis, clean_files, line_reads, report, rundirs, schemas, tables
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
    assert data["overhead_by_class.png"]["bytes_per_node_s"]
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
        assert mine and mine == theirs, name
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
