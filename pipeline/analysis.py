"""The whole analysis: run directories in, Parquet tables and a report out.

Used by ``snekbed analyze`` (``pipeline.cli``), by ``spark-submit
pipeline/submit.py`` and by the benchmark. Stages (each reported to the
``progress`` callback):

1. ``ingest``: event logs through the fast path in one pass
   (``ingest.triage_events``, written once as ``events`` + suspects), suspects
   through the full check (``validate_events``): accepted rows are appended to
   ``events``, the rest go to ``quarantine``; actions and pings likewise;
2. ``reconcile``: lines per input file (counted by the driver from the bytes)
   against accepted + quarantined rows; any file that does not add up fails the
   analysis (``ReconciliationError``) after the table is written;
3. ``analyze``: the jobs, on the Parquet tables;
4. ``report``: report.md, report.html and the PNG plots.

Tables (``OUT/tables/<name>``): events, actions, pings, quarantine (partitioned
by run_id), runs, nodes, links, reconciliation, episodes, convergence, pings_enriched,
delivery, delivery_by_episode, delivery_timeline, overhead_by_node, overhead_by_class,
churn_timeline, churn_by_node, run_summary, compare_<field> (one per grouping), and, when some
runs are arms of an A/B experiment (meta.json ``ab``), ab_runs and ab (pipeline.jobs.ab), with the
A/B document in ``OUT/ab.json`` and ``AnalysisResult.ab``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import io, report, schemas
from pipeline.errors import PipelineError
from pipeline.jobs import ab, churn, compare, convergence, delivery, episodes, ingest, overhead

__all__ = ["AB_FILE", "AnalysisResult", "ReconciliationError", "analyze", "load_ab"]

Progress = Callable[[str, str], None]


class ReconciliationError(PipelineError):
    """Some input file's lines are not all accounted for (parsed + quarantined)."""


@dataclass
class AnalysisResult:
    out: Path
    runs: list[str]
    tables: dict[str, str]
    report_files: list[Path]
    reconciliation: list[dict]
    quarantined: int
    events: int
    stage_s: dict[str, float] = field(default_factory=dict)
    #: the A/B document (pipeline.jobs.ab.summarize): experiment -> arms, seeds and metrics; {} without A/B runs
    ab: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> dict:
        doc = {
            "out": str(self.out), "runs": self.runs, "events": self.events, "quarantined": self.quarantined,
            "reconciliation_ok": all(r["ok"] for r in self.reconciliation),
            "tables": self.tables, "report": [str(p) for p in self.report_files],
            "stage_s": {k: round(v, 3) for k, v in self.stage_s.items()},
        }
        if self.ab:
            doc["ab"] = self.ab
        return doc

    def ab_text(self) -> str:
        """The A/B document as a plain-text table ('' without A/B runs)."""
        return ab.summary_text(self.ab)


def _ingest(spark: SparkSession, runs: Sequence[io.RunDir], frames: io.RunFrames, out: Path,
            tables: dict[str, str], workers: int) -> DataFrame:  # fmt: skip
    """Write runs, nodes, links, events, actions, pings and quarantine; return the line counts of every input
    file. The per-run tables, the events, the actions and the pings are independent: written side by side."""
    # one layout for the three reads: the queries that consume them are planned (and laid out) after all three
    layout = io.read_layout([os.path.getsize(f) for r in runs for f in (*r.event_files, r.actions_file, r.pings_file)])
    ev_read = io.read_lines(spark, {f: r.run_id for r in runs for f in r.event_files}, "events", layout)
    records = {
        "actions": (io.read_lines(spark, {r.actions_file: r.run_id for r in runs}, "actions", layout),
                    ingest.validate_actions, schemas.ACTIONS_SCHEMA),
        "pings": (io.read_lines(spark, {r.pings_file: r.run_id for r in runs}, "pings", layout),
                  ingest.validate_pings, schemas.PINGS_SCHEMA),
    }  # fmt: skip
    # Each verdict table feeds two writes (accepted rows, then quarantine): cached, the validation
    # (the large slow-path plan, and the reading and numbering of actions and pings) runs once.
    checked: dict[str, DataFrame] = {}

    def run_tables() -> None:
        for name, df in (("runs", frames.runs), ("nodes", frames.nodes), ("links", frames.links)):
            _small(df, out, name, tables)

    def events() -> None:
        paths = io.write_split(ingest.triage_events(ev_read.lines), out, ingest.TRIAGE,
                               {"accepted": "events", "suspect": "ingest_suspects"})
        tables["events"] = paths["events"]
        if io.table_is_empty(out, "ingest_suspects"):  # no suspect line (the usual case): no slow path to run
            return
        suspects = io.read_table(spark, out, "ingest_suspects", schemas.LINES_SCHEMA)
        checked["events"] = ingest.validate_events(suspects).cache()
        io.write_table(ingest.accepted(checked["events"], schemas.EVENTS_SCHEMA), out, "events", append=True)

    def record_table(source: str) -> Callable[[], None]:
        read, validate, schema = records[source]

        def write() -> None:
            checked[source] = validate(read.lines).cache()
            tables[source] = io.write_table(ingest.accepted(checked[source], schema), out, source)
        return write

    try:
        _concurrently(workers, events, record_table("actions"), record_table("pings"), run_tables)
        quarantine = [ingest.quarantined(checked[source], source) for source in ("events", "actions", "pings")
                      if source in checked]
        q = quarantine[0]
        for extra in quarantine[1:]:
            q = q.unionByName(extra)
        tables["quarantine"] = io.write_table(q, out, "quarantine")
    finally:
        for df in checked.values():
            df.unpersist()
    io.drop_table(out, "ingest_suspects")
    all_counts = ev_read.counts
    for read, _, _ in records.values():
        all_counts = all_counts.unionByName(read.counts)
    return all_counts


def _reconcile(spark: SparkSession, out: Path, counts: DataFrame, tables: dict[str, str]) -> list[dict]:
    accepted = None
    for source, schema in (("events", schemas.EVENTS_SCHEMA), ("actions", schemas.ACTIONS_SCHEMA),
                           ("pings", schemas.PINGS_SCHEMA)):
        rows = io.read_table(spark, out, source, schema).select("run_id", "file", F.lit(source).alias("source"))
        accepted = rows if accepted is None else accepted.unionByName(rows)
    q = io.read_table(spark, out, "quarantine", schemas.QUARANTINE_SCHEMA)
    recon = ingest.line_reconciliation(counts, accepted, q)
    tables["reconciliation"] = io.write_table(recon.coalesce(1), out, "reconciliation", partition_by=())
    return [r.asDict() for r in io.read_table(spark, out, "reconciliation", schemas.RECONCILIATION_SCHEMA)
            .orderBy("run_id", "source", "file").collect()]


def _job_threads(spark: SparkSession) -> int:
    """How many of the analysis's independent jobs run at once: Spark's default parallelism (the cores of
    a local master), at least 2 and at most 4. Most of a small job's time is the driver's (planning, code
    generation, scheduling, committing its output), so two jobs at a time keep two cores busy; a big
    job's tasks still spread over all the cores."""
    return max(2, min(4, spark.sparkContext.defaultParallelism))


def _concurrently(workers: int, *tasks: Callable[[], None]) -> None:
    """Run ``tasks`` on ``workers`` threads, each submitting its own Spark jobs; wait for all of them,
    then raise the first failure, if any. No task reads a table another one writes, so the tables are
    those of running the tasks one after another."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snekbed-analyze") as pool:
        futures = [pool.submit(task) for task in tasks]
    for future in futures:
        future.result()


def _small(df: DataFrame, out: Path, name: str, tables: dict[str, str]) -> None:
    tables[name] = io.write_table(df.coalesce(1), out, name, partition_by=())


#: The A/B document (pipeline.jobs.ab.summarize) under the output directory, when there are A/B runs.
AB_FILE = "ab.json"


def load_ab(out: str | Path) -> dict[str, dict]:
    """The A/B document an analysis wrote to ``out`` ({} when it had no A/B runs)."""
    path = Path(out) / AB_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _ab(spark: SparkSession, out: Path, ab_meta: DataFrame | None, events: DataFrame, enriched: DataFrame,
        control: DataFrame, tables: dict[str, str]) -> dict[str, dict]:  # fmt: skip
    """The A/B tables and document; without A/B runs, none (and those of an earlier analysis in ``out``
    are removed, so that a re-used output directory never shows a stale A/B result)."""
    if ab_meta is None:
        for name in ("ab_runs", "ab"):
            io.drop_table(out, name)
        (out / AB_FILE).unlink(missing_ok=True)
        return {}
    conv = io.read_table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)
    _small(ab.ab_runs(ab_meta, conv, enriched, control, events), out, "ab_runs", tables)
    rows = [r.asDict() for r in io.read_table(spark, out, "ab_runs", schemas.AB_RUNS_SCHEMA).collect()]
    doc = ab.summarize(rows)
    _small(spark.createDataFrame(ab.summary_rows(doc), schemas.AB_SCHEMA), out, "ab", tables)
    return doc


def analyze(
    spark: SparkSession,
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    progress: Progress | None = None,
    timeline_bin_s: float = 5.0,
    churn_bin_s: float = 1.0,
    check_reconciliation: bool = True,
) -> AnalysisResult:
    """Analyze ``run_dirs`` into ``out`` (tables/ and report files).

    Raises RunDatasetError for an invalid run directory, ReconciliationError when lines are
    unaccounted for (tables and report are still written), PipelineError for other failures.
    """
    say = progress or (lambda stage, detail: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage_s: dict[str, float] = {}
    tables: dict[str, str] = {}
    t = time.perf_counter()

    say("discover", f"{len(run_dirs)} path(s)")
    runs = io.discover_runs(run_dirs)
    frames = io.run_frames(spark, runs)
    ab_meta = io.ab_meta(spark, runs)
    workers = _job_threads(spark)
    n_files = sum(len(r.event_files) for r in runs)
    say("ingest", f"{len(runs)} run(s), {n_files} event files")
    counts = _ingest(spark, runs, frames, out, tables, workers)
    io.pack_table_reads(spark)  # every input line has been read: from here on only tables are scanned
    stage_s["ingest"] = time.perf_counter() - t

    t = time.perf_counter()
    say("reconcile", "lines = parsed + quarantined, per file")
    recon = _reconcile(spark, out, counts, tables)
    stage_s["reconcile"] = time.perf_counter() - t

    t = time.perf_counter()
    say("analyze", "episodes and convergence, delivery and stretch, control overhead and churn (side by side)")
    events = io.read_table(spark, out, "events", schemas.EVENTS_SCHEMA)
    actions = io.read_table(spark, out, "actions", schemas.ACTIONS_SCHEMA)
    pings = io.read_table(spark, out, "pings", schemas.PINGS_SCHEMA)
    runs_df = io.read_table(spark, out, "runs", schemas.RUNS_SCHEMA)
    links = io.read_table(spark, out, "links", schemas.LINKS_SCHEMA)
    bounds = spark.createDataFrame(episodes.run_bounds(events).collect(), "run_id string, start_s double, end_s double")

    def convergence_chain() -> None:
        _small(episodes.episodes(runs_df, links, actions, bounds), out, "episodes", tables)
        eps = io.read_table(spark, out, "episodes", schemas.EPISODES_SCHEMA)
        _small(convergence.convergence(events, eps, bounds), out, "convergence", tables)

    def delivery_chain() -> None:
        _small(delivery.enrich_pings(pings, actions, bounds), out, "pings_enriched", tables)
        enriched = io.read_table(spark, out, "pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
        _small(delivery.delivery_summary(enriched), out, "delivery", tables)
        _small(delivery.delivery_by_episode(enriched), out, "delivery_by_episode", tables)
        _small(delivery.delivery_timeline(enriched, timeline_bin_s), out, "delivery_timeline", tables)

    def overhead_chain() -> None:
        _small(overhead.overhead_by_node(events), out, "overhead_by_node", tables)
        by_node = io.read_table(spark, out, "overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA)
        _small(overhead.overhead_by_class(by_node), out, "overhead_by_class", tables)

    def churn_chain() -> None:
        _small(churn.churn_timeline(events, bounds, churn_bin_s), out, "churn_timeline", tables)
        _small(churn.churn_by_node(events), out, "churn_by_node", tables)

    _concurrently(workers, convergence_chain, delivery_chain, overhead_chain, churn_chain)

    say("analyze", "comparison across runs")
    enriched = io.read_table(spark, out, "pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
    by_node = io.read_table(spark, out, "overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA)
    summary = compare.run_summary(
        runs_df, io.read_table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA), enriched,
        overhead.control_per_run(by_node), io.read_table(spark, out, "churn_by_node", schemas.CHURN_NODE_SCHEMA),
    )
    _small(summary, out, "run_summary", tables)
    summary = io.read_table(spark, out, "run_summary", schemas.RUN_SUMMARY_SCHEMA)
    _concurrently(workers, *[lambda by=by: _small(compare.compare(summary, [by]), out, f"compare_{by}", tables)
                             for by in compare.GROUPINGS])
    if ab_meta is not None:
        say("analyze", "A/B experiments: per-run metrics, arms paired by seed")
    ab_doc = _ab(spark, out, ab_meta, events, enriched, overhead.control_per_run(by_node), tables)
    stage_s["analyze"] = time.perf_counter() - t

    t = time.perf_counter()
    say("report", "tables, plots, report.md, report.html")
    files = report.render(report.collect_inputs(spark, out, recon, ab=ab_doc, workers=workers))
    if ab_doc:
        files[AB_FILE] = json.dumps(ab_doc, indent=1, allow_nan=False)
    written = io.write_files(out, files)
    stage_s["report"] = time.perf_counter() - t

    n_events = sum(r["parsed"] for r in recon if r["source"] == "events")
    n_quarantined = sum(r["quarantined"] for r in recon)
    result = AnalysisResult(out, [r.run_id for r in runs], tables, written, recon, n_quarantined, n_events, stage_s,
                            ab_doc)
    bad = [r for r in recon if not r["ok"]]
    if check_reconciliation and bad:
        raise ReconciliationError(
            f"{len(bad)} file(s) do not add up (lines != parsed + quarantined), e.g. {bad[0]['file']}: "
            f"{bad[0]['lines']} lines, {bad[0]['parsed']} parsed, {bad[0]['quarantined']} quarantined")
    return result
