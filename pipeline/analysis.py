"""The whole analysis: run directories in, Parquet tables and a report out.

Used by ``snekbed analyze`` (``pipeline.cli``), by ``spark-submit
pipeline/submit.py`` and by the benchmark. Stages (each reported to the
``progress`` callback):

1. ``ingest``: a plan decides which reader takes each input file (``ingest_plan``: with a local master, clean
   files, nearly all, are read on the driver: ``clean_files`` for a small input kept in memory, ``arrow_ingest``
   on disk; Spark's ingest reads the others), and ``ingest_exec`` carries it out: Spark's fast path, then the
   full check of the suspect lines, whose rejects go to ``quarantine``;
2. ``reconcile``: lines per input file (counted by the driver from the bytes)
   against accepted + quarantined rows; any file that does not add up fails the
   analysis (``ReconciliationError``) after the table is written;
3. ``analyze``: the jobs, on the Parquet tables (a small analysis kept in memory also gathers the report's inputs
   that do not read the comparison's tables, and draws the PNG plots, beside the comparison across runs);
4. ``report``: report.md, report.html (and the plots, when not drawn already).

Tables (``OUT/tables/<name>``): events, actions, pings, quarantine (partitioned
by run_id), runs, nodes, links, reconciliation, episodes, convergence, pings_enriched,
delivery, delivery_by_episode, delivery_timeline, overhead_by_node, overhead_by_class,
churn_timeline, churn_by_node, mobility_timeline, mobility_runs (runs whose nodes move: their mobility.jsonl, read on
the driver), run_summary, compare_<field> (one per grouping), and, when some
runs are arms of an A/B experiment (meta.json ``ab``), ab_runs and ab (pipeline.jobs.ab), with the
A/B document in ``OUT/ab.json`` and ``AnalysisResult.ab``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from pipeline import ingest_exec, ingest_plan, line_reads, parallel, report, schemas, tables
from pipeline.errors import PipelineError
from pipeline.ingest_exec import Ingested
from pipeline.jobs import ab, churn, compare, convergence, delivery, episodes, ingest, mobility, overhead
from pipeline.mobility_reads import read_mobility
from pipeline.rundirs import RunDir, ab_meta, discover_runs, input_size
from pipeline.session import SMALL_INPUT_BYTES

__all__ = ["AB_FILE", "AnalysisResult", "ReconciliationError", "analyze", "in_memory_default", "load_ab"]

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


#: The run bounds (``episodes.run_bounds``): run_id, earliest node_started, latest event.
BOUNDS_SCHEMA = StructType([StructField("run_id", StringType()), StructField("start_s", DoubleType()),
                            StructField("end_s", DoubleType())])


def _run_bounds(events: pa.Table) -> list[tuple[str, float | None, float | None]]:
    """``episodes.run_bounds`` of the events' rows on the driver: (run_id, earliest node_started, latest event)."""
    started = pc.if_else(pc.equal(events.column("event"), "node_started"), events.column("mono_s"), None)
    by_run = pa.table({"run_id": events.column("run_id"), "start_s": started, "end_s": events.column("mono_s")}
                      ).group_by("run_id").aggregate([("start_s", "min"), ("end_s", "max")])
    return list(zip(*(by_run.column(c).to_pylist() for c in ("run_id", "start_s_min", "end_s_max"))))


def _reconcile(spark: SparkSession, store: tables.TableStore, ingested: Ingested) -> list[dict]:
    """The reconciliation table: per input file, lines counted against rows parsed and quarantined. When the driver
    read every file itself (and so quarantined nothing), it knows the rows of each: the table is built on the driver;
    else Spark counts the rows of the tables."""
    if ingested.parsed is not None:
        rows = sorted((run_id, source, file, lines, ingested.parsed[source].get(file, 0), 0,
                       lines == ingested.parsed[source].get(file, 0))
                      for run_id, source, file, lines in ingested.counts)
        table = tables.arrow_table(schemas.RECONCILIATION_SCHEMA, rows)
        store.put_arrow("reconciliation", table, schemas.RECONCILIATION_SCHEMA, ())
        return table.to_pylist()
    counts = spark.createDataFrame(list(ingested.counts), schemas.LINE_COUNTS_SCHEMA)
    accepted = None
    for source, schema in (("events", schemas.EVENTS_SCHEMA), ("actions", schemas.ACTIONS_SCHEMA),
                           ("pings", schemas.PINGS_SCHEMA)):
        rows = store.get(source, schema).select("run_id", "file", F.lit(source).alias("source"))
        accepted = rows if accepted is None else accepted.unionByName(rows)
    q = store.get("quarantine", schemas.QUARANTINE_SCHEMA)
    store.put("reconciliation", ingest.line_reconciliation(counts, accepted, q), (), one_file=True)
    return [r.asDict() for r in store.get("reconciliation", schemas.RECONCILIATION_SCHEMA)
            .orderBy("run_id", "source", "file").collect()]


#: The A/B document (pipeline.jobs.ab.summarize) under the output directory, when there are A/B runs.
AB_FILE = "ab.json"


def load_ab(out: str | Path) -> dict[str, dict]:
    """The A/B document an analysis wrote to ``out`` ({} when it had no A/B runs)."""
    path = Path(out) / AB_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _ab(spark: SparkSession, store: tables.TableStore, ab_runs: DataFrame | None, events: DataFrame,
        enriched: DataFrame, control: DataFrame, confidence: float) -> dict[str, dict]:  # fmt: skip
    """The A/B tables and document; without A/B runs, none (and those of an earlier analysis in ``out``
    are removed, so that a re-used output directory never shows a stale A/B result)."""
    if ab_runs is None:
        for name in ("ab_runs", "ab"):
            store.drop(name)
        (store.out / AB_FILE).unlink(missing_ok=True)
        return {}
    conv = store.get("convergence", schemas.CONVERGENCE_SCHEMA)
    store.put("ab_runs", ab.ab_runs(ab_runs, conv, enriched, control, events), (), one_file=True)
    rows = [r.asDict() for r in store.get("ab_runs", schemas.AB_RUNS_SCHEMA).collect()]
    doc = ab.summarize(rows, confidence)
    store.put("ab", spark.createDataFrame(ab.summary_rows(doc), schemas.AB_SCHEMA), (), one_file=True)
    return doc


#: The tables whose rows an in-memory analysis also keeps on the driver (``tables.TableStore.arrow``): the episodes'
#: inputs, and the tables of the report's plain reads (``report.PLAIN_READS``); not the big ones (events, pings).
HELD_ON_THE_DRIVER = frozenset({"runs", "links", "actions", *(table for table, *_ in report.PLAIN_READS.values())})


def in_memory_default(spark: SparkSession, runs: Sequence[RunDir]) -> bool:
    """Whether ``analyze`` keeps its tables in memory by default: small inputs (``session.SMALL_INPUT_BYTES``) on a
    local master (where the driver's memory is the executors')."""
    return spark.sparkContext.master.startswith("local") and input_size(runs) <= SMALL_INPUT_BYTES


def analyze(
    spark: SparkSession,
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    progress: Progress | None = None,
    timeline_bin_s: float = 5.0,
    churn_bin_s: float = 1.0,
    check_reconciliation: bool = True,
    in_memory: bool | None = None,
    arrow_reads: bool | None = None,
    confidence: float = ab.CONFIDENCE,
) -> AnalysisResult:
    """Analyze ``run_dirs`` into ``out`` (tables/ and report files).

    ``in_memory`` (default: ``in_memory_default``): keep every table cached in one partition as well as writing
    it, so later steps read it from memory (``tables.TableStore``); the same tables and report either way.
    ``arrow_reads`` (default: on disk with a local master): clean event logs and pings are parsed on the driver by
    Arrow (``pipeline.arrow_ingest``) instead of by Spark; the same tables either way.
    ``confidence``: the A/B intervals' level (``snekbed ab --alpha A`` gives 1 - A), in the tables, the report and
    the A/B document alike.
    Raises RunDatasetError for an invalid run directory, ReconciliationError when lines are
    unaccounted for (tables and report are still written), PipelineError for other failures.
    """
    say = progress or (lambda stage, detail: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()

    say("discover", f"{len(run_dirs)} path(s)")
    runs = discover_runs(run_dirs)
    store = tables.TableStore(spark, out, in_memory=in_memory_default(spark, runs) if in_memory is None
                              else in_memory, hold=HELD_ON_THE_DRIVER)
    try:
        if arrow_reads is None:  # a local master's driver sees the input files, and its cores are the executors'
            arrow_reads = not store.in_memory and spark.sparkContext.master.startswith("local")
        result = _analyze_stages(spark, runs, store, say, t, timeline_bin_s, churn_bin_s, arrow_reads, confidence)
    finally:
        store.release()
    bad = [r for r in result.reconciliation if not r["ok"]]
    if check_reconciliation and bad:
        raise ReconciliationError(
            f"{len(bad)} file(s) do not add up (lines != parsed + quarantined), e.g. {bad[0]['file']}: "
            f"{bad[0]['lines']} lines, {bad[0]['parsed']} parsed, {bad[0]['quarantined']} quarantined")
    return result


def _analyze_stages(spark: SparkSession, runs: list[RunDir], store: tables.TableStore, say: Progress, t: float,
                    timeline_bin_s: float, churn_bin_s: float, arrow_reads: bool,
                    confidence: float) -> AnalysisResult:  # fmt: skip
    """The stages after discovery (``t``: when it began): ingest, reconcile, analyze, report."""
    stage_s: dict[str, float] = {}
    ab_runs = ab_meta(spark, runs)
    workers = parallel.job_threads(spark)
    n_files = sum(len(r.event_files) for r in runs)
    say("ingest", f"{len(runs)} run(s), {n_files} event files" + (", tables kept in memory" if store.in_memory else ""))
    plan = ingest_plan.plan(runs, in_memory=store.in_memory, arrow_reads=arrow_reads)
    ingested = ingest_exec.execute(spark, plan, runs, store, workers, say)
    line_reads.pack_table_reads(spark)  # every input line has been read: from here on only tables are scanned
    stage_s["ingest"] = time.perf_counter() - t

    t = time.perf_counter()
    say("reconcile", "lines = parsed + quarantined, per file")
    recon = _reconcile(spark, store, ingested)
    stage_s["reconcile"] = time.perf_counter() - t

    t = time.perf_counter()
    say("analyze", "episodes and convergence, delivery and stretch, control overhead and churn (side by side)")
    moving, bad_lines = read_mobility(runs)
    inputs = dataclasses.replace(_job_inputs(spark, store, ingested, timeline_bin_s, churn_bin_s),
                                 confidence=confidence, run_dirs=tuple(runs), mobility_rows=tuple(moving),
                                 mobility_bad=tuple(sorted(bad_lines.items())))
    parallel.side_by_side(workers, *(partial(chain, inputs) for chain in _CHAINS))
    say("analyze", "comparison across runs" + ("; beside it, the report's other inputs and its plots"
                                                 if store.in_memory else ""))
    ab_doc, ahead, drawn = _compare(spark, inputs, ab_runs, workers, say)
    stage_s["analyze"] = time.perf_counter() - t

    t = time.perf_counter()
    say("report", "tables, plots, report.md, report.html")
    files = report.render(report.collect_inputs(spark, store.out, recon, ab=ab_doc, workers=workers, read=store.get,
                                                held=store.arrow, gathered=ahead), drawn)
    if ab_doc:
        files[AB_FILE] = json.dumps(ab_doc, indent=1, allow_nan=False)
    written = tables.write_files(store.out, files)
    stage_s["report"] = time.perf_counter() - t

    n_events = sum(r["parsed"] for r in recon if r["source"] == "events")
    n_quarantined = sum(r["quarantined"] for r in recon)
    return AnalysisResult(store.out, [r.run_id for r in runs], dict(store.paths), written, recon, n_quarantined,
                          n_events, stage_s, ab_doc)


# --------------------------------------------------------------------------- the jobs


@dataclass(frozen=True)
class _JobInputs:
    """What the jobs read: the store (each chain writes its own tables), the ingested tables, the run bounds (and
    their rows on the driver), the bin widths."""

    store: tables.TableStore
    events: DataFrame
    actions: DataFrame
    pings: DataFrame
    runs: DataFrame
    links: DataFrame
    bounds: DataFrame
    bound_rows: list[tuple]
    timeline_bin_s: float
    churn_bin_s: float
    confidence: float = ab.CONFIDENCE  # the A/B intervals' level
    run_dirs: tuple[RunDir, ...] = ()  # the runs' directories (mobility.jsonl is read from them on the driver)
    mobility_rows: tuple[tuple, ...] = ()  # their mobility.jsonl lines (MOBILITY_SCHEMA rows: read_mobility)
    mobility_bad: tuple[tuple[str, int], ...] = ()  # (run_id, bad lines) of each run with a mobility.jsonl


def _job_inputs(spark: SparkSession, store: tables.TableStore, ingested: Ingested, timeline_bin_s: float,
                churn_bin_s: float) -> _JobInputs:  # fmt: skip
    get = store.get
    events = get("events", schemas.EVENTS_SCHEMA)
    actions = get("actions", schemas.ACTIONS_SCHEMA)
    pings = get("pings", schemas.PINGS_SCHEMA)
    runs_df = get("runs", schemas.RUNS_SCHEMA)
    links = get("links", schemas.LINKS_SCHEMA)
    # the events' rows on the driver (a small analysis of clean files): no Spark query on every chain's path
    bound_rows = [tuple(r) for r in episodes.run_bounds(events).collect()] if ingested.events is None \
        else _run_bounds(ingested.events)
    # from Arrow, like the tables: the path into the JVM the ingest has just warmed up (Python rows take another)
    bounds = spark.createDataFrame(tables.arrow_table(BOUNDS_SCHEMA, bound_rows))
    if store.in_memory:
        bounds = bounds.coalesce(1)  # like every other input of the jobs: one partition, no exchange
    return _JobInputs(store, events, actions, pings, runs_df, links, bounds, bound_rows, timeline_bin_s, churn_bin_s)


def _convergence_chain(i: _JobInputs) -> None:
    """Episodes (a moving run's radio link changes among them) and convergence; then the moving runs' table, which
    gives their radio episodes' convergence."""
    store = i.store
    held = [store.arrow(name) for name in ("links", "actions", "runs")]
    names = schemas.MOBILITY_SCHEMA.fieldNames()
    radio = [dict(zip(names, r)) for r in i.mobility_rows] or None
    if all(rows is not None for rows in held):  # in memory: the planner's inputs are on the driver already
        link_rows, action_rows, run_rows = (rows.to_pylist() for rows in held)
        planned = episodes.episode_rows([{"run_id": r, "start_s": s} for r, s, _ in i.bound_rows], link_rows,
                                        action_rows, run_rows, radio)
        store.put_arrow("episodes", tables.arrow_table(schemas.EPISODES_SCHEMA, planned), schemas.EPISODES_SCHEMA, ())
    else:
        store.put("episodes", episodes.episodes(i.runs, i.links, i.actions, i.bounds, radio), (), one_file=True)
    eps = store.get("episodes", schemas.EPISODES_SCHEMA)
    store.put("convergence", convergence.convergence(i.events, eps, i.bounds), (), one_file=True)
    _mobility_table(i, "mobility_runs")


def _radio_marks(i: _JobInputs) -> DataFrame | None:
    """The instants the moving runs' radio link changes open episodes (episodes.radio_openings), as the episodes
    table numbers them; None when no run moves (no query then)."""
    if not i.mobility_rows:
        return None
    names = schemas.MOBILITY_SCHEMA.fieldNames()
    held = i.store.arrow("actions")
    acts = held.to_pylist() if held is not None else \
        [r.asDict() for r in i.actions.select("run_id", "mono_s", "action").collect()]
    marks = episodes.radio_openings([{"run_id": r, "start_s": s} for r, s, _ in i.bound_rows], acts,
                                    [dict(zip(names, r)) for r in i.mobility_rows])
    schema = StructType([StructField("run_id", StringType()), StructField("t", DoubleType())])
    return i.store.spark.createDataFrame(marks, schema).coalesce(1)


def _delivery_chain(i: _JobInputs) -> None:
    store = i.store
    store.put("pings_enriched", delivery.enrich_pings(i.pings, i.actions, i.bounds, _radio_marks(i)), (),
              one_file=True)
    enriched = store.get("pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
    store.put("delivery", delivery.delivery_summary(enriched), (), one_file=True)
    store.put("delivery_by_episode", delivery.delivery_by_episode(enriched), (), one_file=True)
    store.put("delivery_timeline", delivery.delivery_timeline(enriched, i.timeline_bin_s), (), one_file=True)


def _overhead_chain(i: _JobInputs) -> None:
    i.store.put("overhead_by_node", overhead.overhead_by_node(i.events), (), one_file=True)
    by_node = i.store.get("overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA)
    i.store.put("overhead_by_class", overhead.overhead_by_class(by_node), (), one_file=True)


def _churn_chain(i: _JobInputs) -> None:
    i.store.put("churn_timeline", churn.churn_timeline(i.events, i.bounds, i.churn_bin_s), (), one_file=True)
    i.store.put("churn_by_node", churn.churn_by_node(i.events), (), one_file=True)


MOBILITY_BAD_SCHEMA = StructType([StructField("run_id", StringType()), StructField("bad_lines", LongType())])


def _mobility_table(i: _JobInputs, name: str) -> None:
    """A table of the runs whose nodes move (pipeline.jobs.mobility), from their mobility.jsonl read on the driver:
    ``mobility_timeline``, or ``mobility_runs`` (after the convergence table: it gives the radio episodes'). Without
    any such run, written empty with no Spark job (in memory) or one."""
    store = i.store
    schema = schemas.MOBILITY_TIMELINE_SCHEMA if name == "mobility_timeline" else schemas.MOBILITY_RUNS_SCHEMA
    if not i.mobility_bad and store.in_memory:
        store.put_arrow(name, tables.arrow_table(schema, []), schema, ())
        return
    spark = i.pings.sparkSession
    moving = spark.createDataFrame(tables.arrow_table(schemas.MOBILITY_SCHEMA, list(i.mobility_rows))).coalesce(1)
    if name == "mobility_timeline":
        store.put(name, mobility.mobility_timeline(moving, i.pings, i.bounds, i.timeline_bin_s), (), one_file=True)
        return
    bad_lines = spark.createDataFrame(tables.arrow_table(MOBILITY_BAD_SCHEMA, list(i.mobility_bad)))
    conv = store.get("convergence", schemas.CONVERGENCE_SCHEMA)
    store.put(name, mobility.mobility_runs(moving, i.pings, bad_lines, i.events, conv), (), one_file=True)


def _mobility_chain(i: _JobInputs) -> None:
    """The moving runs' radio links and delivery over time (their table of runs follows the convergence chain)."""
    _mobility_table(i, "mobility_timeline")


#: The jobs' independent chains, run side by side (each writes its own tables).
_CHAINS = (_convergence_chain, _delivery_chain, _overhead_chain, _churn_chain, _mobility_chain)


def _compare(spark: SparkSession, i: _JobInputs, ab_runs: DataFrame | None, workers: int, say: Progress,
             ) -> tuple[dict[str, dict], dict[str, list[dict]], report.Plots | None]:  # fmt: skip
    """The comparison across runs and the A/B step: the A/B document. In memory, beside it, the report's inputs that
    do not read the comparison's tables, and the plots drawn from them (else {} and None: the report gathers them)."""
    enriched = i.store.get("pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
    control = overhead.control_per_run(i.store.get("overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA))
    comparison = partial(_comparison, spark, i, ab_runs, enriched, control, workers, say)
    if not i.store.in_memory:  # big inputs: the report's queries scan big tables, after the comparison as before
        return comparison(threading.Event()), {}, None
    # a small analysis's comparison is a short chain of small queries, which leaves a core idle: the report's
    # inputs that do not read the comparison's tables, and the plots drawn from them, use it
    failed = threading.Event()  # set by the comparison when it fails: the plots beside it are then not drawn
    ab_doc, (ahead, drawn) = parallel.side_by_side(2, partial(comparison, failed),
                                                   partial(_report_ahead, spark, i.store, workers, failed))
    return ab_doc, ahead, drawn


def _comparison(spark: SparkSession, i: _JobInputs, ab_runs: DataFrame | None, enriched: DataFrame,
                control: DataFrame, workers: int, say: Progress, failed: threading.Event,
                ) -> dict[str, dict]:  # fmt: skip
    """The run summary, the comparison by each grouping, the A/B step; returns the A/B document. Sets ``failed`` when
    it fails (or is stopped)."""
    store = i.store
    try:
        summary = compare.run_summary(i.runs, store.get("convergence", schemas.CONVERGENCE_SCHEMA), enriched, control,
                                      store.get("churn_by_node", schemas.CHURN_NODE_SCHEMA))
        store.put("run_summary", summary, (), one_file=True)
        summary = store.get("run_summary", schemas.RUN_SUMMARY_SCHEMA)
        parallel.side_by_side(workers, *(partial(_put_comparison, store, summary, by) for by in compare.GROUPINGS))
        if ab_runs is not None:
            say("analyze", "A/B experiments: per-run metrics, arms paired by seed")
        return _ab(spark, store, ab_runs, i.events, enriched, control, i.confidence)
    except BaseException:
        failed.set()
        raise


def _put_comparison(store: tables.TableStore, summary: DataFrame, by: str) -> None:
    store.put(f"compare_{by}", compare.compare(summary, [by]), (), one_file=True)


def _report_ahead(spark: SparkSession, store: tables.TableStore, workers: int, failed: threading.Event,
                  ) -> tuple[dict[str, list[dict]], report.Plots | None]:  # fmt: skip
    """The report's inputs that do not read the comparison's tables, and (unless the comparison failed) its plots."""
    ahead = report.gather(spark, store.out, [n for n in report.INPUTS if n not in report.COMPARISON_INPUTS], workers,
                          read=store.get, held=store.arrow)
    return ahead, (None if failed.is_set() else report.plots(ahead))
