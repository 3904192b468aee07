"""The whole analysis: run directories in, Parquet tables and a report out.

Used by ``snekbed analyze`` (``pipeline.cli``), by ``spark-submit
pipeline/submit.py`` and by the benchmark. Stages (each reported to the
``progress`` callback):

1. ``ingest``: with a local master, clean files (every line valid; nearly all) are
   read on the driver: ``clean_files`` for a small input kept in memory,
   ``arrow_ingest`` (Arrow's JSON reader, event logs and pings) on disk; the other
   files' lines go through Spark's fast path in one pass (``ingest.triage_events``,
   written once as ``events`` + suspects), suspects through the full check
   (``validate_events``): accepted rows are appended to ``events``, the rest go to
   ``quarantine``; actions and pings likewise;
2. ``reconcile``: lines per input file (counted by the driver from the bytes)
   against accepted + quarantined rows; any file that does not add up fails the
   analysis (``ReconciliationError``) after the table is written;
3. ``analyze``: the jobs, on the Parquet tables (a small analysis kept in memory also gathers the report's inputs
   that do not read the comparison's tables, and draws the PNG plots, beside the comparison across runs);
4. ``report``: report.md, report.html (and the plots, when not drawn already).

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
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from pipeline import arrow_ingest, clean_files, line_reads, report, rundirs, schemas, session, tables
from pipeline.errors import PipelineError
from pipeline.jobs import ab, churn, compare, convergence, delivery, episodes, ingest, overhead

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


@dataclass(frozen=True)
class _Source:
    """One kind of input line: its files (path -> run_id), the ingest's fast path (``triage``) and full check
    (``validate``) for it, and its table's schema."""

    name: str
    files: dict[Path, str]
    triage: Callable[[DataFrame], DataFrame]
    validate: Callable[[DataFrame], DataFrame]
    schema: StructType


def _sources(runs: Sequence[rundirs.RunDir]) -> list[_Source]:
    """The three sources of ``runs``; each file once, by its resolved path (as ``line_reads.read_lines`` reads it: a symbolic
    link to another input file does not read its lines twice)."""
    def files(pairs: Iterable[tuple[Path, str]]) -> dict[Path, str]:
        return {Path(f).resolve(): run_id for f, run_id in pairs}

    return [
        _Source("events", files((f, r.run_id) for r in runs for f in r.event_files), ingest.triage_events,
                ingest.validate_events, schemas.EVENTS_SCHEMA),
        _Source("actions", files((r.actions_file, r.run_id) for r in runs), ingest.triage_actions,
                ingest.validate_actions, schemas.ACTIONS_SCHEMA),
        _Source("pings", files((r.pings_file, r.run_id) for r in runs), ingest.triage_pings, ingest.validate_pings,
                schemas.PINGS_SCHEMA),
    ]


#: Bytes of input files whose Arrow rows (``_arrow_stage``) are written as one Parquet file: big enough that a big
#: input makes few files (each of Spark's scans opens every one), small enough that the batches in flight (one per
#: job thread) stay within the driver's memory (a batch takes some 3 times its bytes: the bytes, a joined copy, the
#: rows).
ARROW_BATCH_BYTES = 64 << 20
#: A file larger than this is left to Spark's ingest, which streams it: the driver would hold it whole, three times.
ARROW_FILE_BYTES = 4 * ARROW_BATCH_BYTES


def _arrow_stage(files: dict[Path, str], source: str, out: Path, workers: int,
                 ) -> tuple[Path, dict[Path, str]]:  # fmt: skip
    """Read the clean files of ``files`` (path -> run_id) with ``arrow_ingest`` on ``workers`` threads, in batches of
    one run's files (``ARROW_BATCH_BYTES``), each written as Parquet parts into a new staging directory. Returns
    the staging directory and the files left to Spark, with why (path -> reason)."""
    batches: list[list[tuple[Path, str]]] = []
    big = {}
    room = 0
    for path, run_id in sorted(files.items(), key=lambda kv: (kv[1], str(kv[0]))):
        size = os.path.getsize(path)
        if size > ARROW_FILE_BYTES:
            big[path] = f"{size} bytes: Spark's ingest streams a file this large"
            continue
        if not batches or batches[-1][0][1] != run_id or size > room:  # a batch holds one run's files
            batches.append([])
            room = ARROW_BATCH_BYTES
        batches[-1].append((path, run_id))
        room -= size

    def one(index: int) -> dict[str, str]:
        paths = [path for path, _ in batches[index]]
        rows, left = arrow_ingest.batch(paths, batches[index][0][1], source)
        if rows.num_rows:
            tables.write_arrow_part(rows, staging, f"arrow-{index:06d}")
        return {path: why.reason for path, why in left.items()}

    staging = tables.staging_dir(out)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snekbed-arrow") as pool:
            left = {Path(path): why for got in pool.map(one, range(len(batches))) for path, why in got.items()}
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    left.update(big)
    return staging, left


@dataclass(frozen=True)
class _Ingested:
    """What the ingest leaves for the reconciliation: the driver's line count of every input file
    (schemas.LINE_COUNTS_SCHEMA rows), and, when the tables are kept in memory and the driver read every file itself
    (``clean_files``: nothing quarantined), the rows it parsed from each (source -> resolved path -> rows); else None
    (Spark read some file, or the tables are on disk: Spark counts the rows of the tables)."""

    counts: list[tuple[str, str, str, int]]
    parsed: dict[str, dict[str, int]] | None
    #: the events table's rows, when they were all read on the driver into an in-memory table (else None)
    events: pa.Table | None = None


#: The run bounds (``episodes.run_bounds``): run_id, earliest node_started, latest event.
BOUNDS_SCHEMA = StructType([StructField("run_id", StringType()), StructField("start_s", DoubleType()),
                            StructField("end_s", DoubleType())])


def _run_bounds(events: pa.Table) -> list[tuple[str, float | None, float | None]]:
    """``episodes.run_bounds`` of the events' rows on the driver: (run_id, earliest node_started, latest event)."""
    started = pc.if_else(pc.equal(events.column("event"), "node_started"), events.column("mono_s"), None)
    by_run = pa.table({"run_id": events.column("run_id"), "start_s": started, "end_s": events.column("mono_s")}
                      ).group_by("run_id").aggregate([("start_s", "min"), ("end_s", "max")])
    return list(zip(*(by_run.column(c).to_pylist() for c in ("run_id", "start_s_min", "end_s_max"))))


def _rows_per_file(rows: pa.Table) -> dict[str, int]:
    return {v["values"]: v["counts"] for v in pc.value_counts(rows.column("file")).to_pylist()}


def _ingest(spark: SparkSession, runs: Sequence[rundirs.RunDir], store: tables.TableStore, workers: int, arrow_reads: bool,
            say: Progress) -> _Ingested:  # fmt: skip
    """Write runs, nodes, links, events, actions, pings and quarantine; return the line counts of every input
    file, and the rows parsed from each when the driver read them all. The per-run tables, the events, the actions
    and the pings are independent: written side by side.
    ``arrow_reads``: on disk, clean files are read on the driver (``pipeline.arrow_ingest``), not by Spark."""
    sources = _sources(runs)
    # one layout for the three reads: the queries that consume them are planned (and laid out) after all three
    layout = line_reads.read_layout([os.path.getsize(f) for src in sources for f in src.files])
    # Each verdict table feeds two writes (accepted rows, then quarantine): cached, the validation
    # (the large slow-path plan, and the reading and numbering of actions and pings) runs once.
    checked: dict[str, DataFrame] = {}
    cached: list[DataFrame] = []
    counts: dict[str, list[tuple[str, str, str, int]]] = {src.name: [] for src in sources}
    # source -> file -> rows, for the sources whose every file the driver read into an in-memory table
    parsed: dict[str, dict[str, int]] = {}
    driver_events: list[pa.Table] = []  # the events' rows, when the driver read every event log

    def run_tables() -> None:
        for name, (schema, rows) in rundirs.run_rows(runs).items():
            if store.in_memory:  # rows the driver has: no Spark job
                store.put_arrow(name, tables.arrow_table(schema, rows), schema, ())
            else:
                store.put(name, spark.createDataFrame(rows, schema), (), one_file=True)

    def on_disk(src: _Source) -> None:
        # clean files (the usual case) are parsed on the driver by Arrow (pipeline.arrow_ingest) and staged as
        # Parquet; the others go through Spark's ingest, which writes the table; the staged parts join it after
        if not (arrow_reads and arrow_ingest.supported(src.name)):
            (events_on_disk if src.name == "events" else records_on_disk)(src, src.files)
            return
        staged, left = _arrow_stage(src.files, src.name, store.out, workers)
        try:
            files = {p: src.files[p] for p in left}
            taken = {p: r for p, r in src.files.items() if p not in left}
            counts[src.name] += line_reads.count_rows(taken, src.name)
            say("ingest", f"{src.name}: {len(taken)} file(s) read by Arrow, {len(files)} left to Spark"
                + (f" (e.g. {next(iter(left))}: {next(iter(left.values()))})" if left else ""))
            if files:  # Spark's ingest replaces the table, with the rows of the files left to it
                (events_on_disk if src.name == "events" else records_on_disk)(src, files)
            else:  # the staged parts are the whole table: nothing of an earlier analysis into ``out`` may stay
                tables.drop_table(store.out, src.name)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        store.written(src.name, tables.add_parts(staged, store.out, src.name))

    def events_on_disk(src: _Source, files: dict[Path, str]) -> None:
        paths = tables.write_split(src.triage(read(src, files)), store.out, ingest.TRIAGE,
                               {"accepted": "events", "suspect": "ingest_suspects"})
        store.written("events", paths["events"])
        if tables.table_is_empty(store.out, "ingest_suspects"):  # no suspect line (the usual case): no slow path to run
            return
        suspects = tables.read_table(spark, store.out, "ingest_suspects", schemas.LINES_SCHEMA)
        checked["events"] = ingest.validate_events(suspects).cache()
        tables.write_table(ingest.accepted(checked["events"], schemas.EVENTS_SCHEMA), store.out, "events", append=True)

    def records_on_disk(src: _Source, files: dict[Path, str]) -> None:
        checked[src.name] = src.validate(read(src, files)).cache()
        store.put(src.name, ingest.accepted(checked[src.name], src.schema))

    def read(src: _Source, files: dict[Path, str]) -> DataFrame:
        lines = line_reads.read_lines(spark, files, src.name, layout)
        counts[src.name] += lines.count_rows
        return lines.lines

    def in_memory(src: _Source) -> None:
        # clean files (the usual case: all of them) become rows on the driver, with no Spark job
        # (pipeline.clean_files); the others take Spark's fast path, their suspect lines the slow path
        clean, rest = [], {}
        for path, run_id in src.files.items():
            got = clean_files.rows(path, run_id, src.name)
            if got is None:
                rest[path] = run_id
            else:
                clean.append(got)
        schema = clean_files.table_schema(src.name)
        rows = pa.concat_tables(clean) if clean else clean_files.arrow_schema(src.name).empty_table()
        counts[src.name] += line_reads.count_rows({p: r for p, r in src.files.items() if p not in rest}, src.name)
        if not rest:
            store.put_arrow(src.name, rows, schema)
            parsed[src.name] = _rows_per_file(rows)
            if src.name == "events":
                driver_events.append(rows)
            return
        lines = line_reads.read_lines(spark, rest, src.name, layout)
        counts[src.name] += lines.count_rows
        tri = src.triage(lines.lines).cache()
        cached.append(tri)
        # the columns of the table on disk: the events' keep ``line`` (null on every accepted row; write_split)
        accepted = tri.where(F.col(ingest.TRIAGE) == "accepted").select(*schema.fieldNames())
        suspects = tri.where(F.col(ingest.TRIAGE) == "suspect").select(*schemas.LINES_SCHEMA.fieldNames())
        if not suspects.isEmpty():
            checked[src.name] = src.validate(suspects).cache()
            more = ingest.accepted(checked[src.name], src.schema)
            if src.name == "events":
                more = more.withColumn("line", F.lit(None).cast("string"))
            accepted = accepted.unionByName(more)
        if clean:
            accepted = spark.createDataFrame(rows).unionByName(accepted)
        store.put(src.name, accepted)

    def task(src: _Source) -> Callable[[], None]:
        if store.in_memory:
            return lambda: in_memory(src)
        return lambda: on_disk(src)

    try:
        _concurrently(workers, *[task(src) for src in sources], run_tables)
        quarantine = [ingest.quarantined(checked[src.name], src.name) for src in sources if src.name in checked]
        # a source whose every line passed the fast path has no verdicts: none at all, no quarantine
        if not quarantine and store.in_memory:
            store.put_arrow("quarantine", tables.arrow_table(schemas.QUARANTINE_SCHEMA, []), schemas.QUARANTINE_SCHEMA)
        else:
            q = quarantine[0] if quarantine else spark.createDataFrame([], schemas.QUARANTINE_SCHEMA)
            for extra in quarantine[1:]:
                q = q.unionByName(extra)
            store.put("quarantine", q)
    finally:
        for df in (*checked.values(), *cached):
            df.unpersist()
    tables.drop_table(store.out, "ingest_suspects")
    every = [row for src in sources for row in counts[src.name]]
    return _Ingested(every, parsed if len(parsed) == len(sources) and not checked else None,
                     driver_events[0] if driver_events else None)


def _reconcile(spark: SparkSession, store: tables.TableStore, ingested: _Ingested) -> list[dict]:
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
    counts = spark.createDataFrame(ingested.counts, schemas.LINE_COUNTS_SCHEMA)
    accepted = None
    for source, schema in (("events", schemas.EVENTS_SCHEMA), ("actions", schemas.ACTIONS_SCHEMA),
                           ("pings", schemas.PINGS_SCHEMA)):
        rows = store.get(source, schema).select("run_id", "file", F.lit(source).alias("source"))
        accepted = rows if accepted is None else accepted.unionByName(rows)
    q = store.get("quarantine", schemas.QUARANTINE_SCHEMA)
    store.put("reconciliation", ingest.line_reconciliation(counts, accepted, q), (), one_file=True)
    return [r.asDict() for r in store.get("reconciliation", schemas.RECONCILIATION_SCHEMA)
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


#: The A/B document (pipeline.jobs.ab.summarize) under the output directory, when there are A/B runs.
AB_FILE = "ab.json"


def load_ab(out: str | Path) -> dict[str, dict]:
    """The A/B document an analysis wrote to ``out`` ({} when it had no A/B runs)."""
    path = Path(out) / AB_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _ab(spark: SparkSession, store: tables.TableStore, ab_meta: DataFrame | None, events: DataFrame,
        enriched: DataFrame, control: DataFrame) -> dict[str, dict]:  # fmt: skip
    """The A/B tables and document; without A/B runs, none (and those of an earlier analysis in ``out``
    are removed, so that a re-used output directory never shows a stale A/B result)."""
    if ab_meta is None:
        for name in ("ab_runs", "ab"):
            store.drop(name)
        (store.out / AB_FILE).unlink(missing_ok=True)
        return {}
    conv = store.get("convergence", schemas.CONVERGENCE_SCHEMA)
    store.put("ab_runs", ab.ab_runs(ab_meta, conv, enriched, control, events), (), one_file=True)
    rows = [r.asDict() for r in store.get("ab_runs", schemas.AB_RUNS_SCHEMA).collect()]
    doc = ab.summarize(rows)
    store.put("ab", spark.createDataFrame(ab.summary_rows(doc), schemas.AB_SCHEMA), (), one_file=True)
    return doc


#: The tables whose rows an in-memory analysis also keeps on the driver (``tables.TableStore.arrow``): the episodes'
#: inputs, and the tables of the report's plain reads (``report.PLAIN_READS``); not the big ones (events, pings).
HELD_ON_THE_DRIVER = frozenset({"runs", "links", "actions", *(table for table, *_ in report.PLAIN_READS.values())})


def in_memory_default(spark: SparkSession, runs: Sequence[rundirs.RunDir]) -> bool:
    """Whether ``analyze`` keeps its tables in memory by default: small inputs (``session.SMALL_INPUT_BYTES``) on a
    local master (where the driver's memory is the executors')."""
    return spark.sparkContext.master.startswith("local") and rundirs.input_size(runs) <= session.SMALL_INPUT_BYTES


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
) -> AnalysisResult:
    """Analyze ``run_dirs`` into ``out`` (tables/ and report files).

    ``in_memory`` (default: ``in_memory_default``): keep every table cached in one partition as well as writing
    it, so later steps read it from memory (``tables.TableStore``); the same tables and report either way.
    ``arrow_reads`` (default: on disk with a local master): clean event logs and pings are parsed on the driver by
    Arrow (``pipeline.arrow_ingest``) instead of by Spark; the same tables either way.
    Raises RunDatasetError for an invalid run directory, ReconciliationError when lines are
    unaccounted for (tables and report are still written), PipelineError for other failures.
    """
    say = progress or (lambda stage, detail: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage_s: dict[str, float] = {}
    t = time.perf_counter()

    say("discover", f"{len(run_dirs)} path(s)")
    runs = rundirs.discover_runs(run_dirs)
    store = tables.TableStore(spark, out, in_memory=in_memory_default(spark, runs) if in_memory is None else in_memory,
                          hold=HELD_ON_THE_DRIVER)
    try:
        if arrow_reads is None:  # a local master's driver sees the input files, and its cores are the executors'
            arrow_reads = not store.in_memory and spark.sparkContext.master.startswith("local")
        return _analyze_stages(spark, runs, store, say, stage_s, t, timeline_bin_s, churn_bin_s,
                               check_reconciliation, arrow_reads)
    finally:
        store.release()


def _analyze_stages(spark: SparkSession, runs: list[rundirs.RunDir], store: tables.TableStore, say: Progress,
                    stage_s: dict[str, float], t: float, timeline_bin_s: float, churn_bin_s: float,
                    check_reconciliation: bool, arrow_reads: bool) -> AnalysisResult:  # fmt: skip
    ab_meta = rundirs.ab_meta(spark, runs)
    workers = _job_threads(spark)
    n_files = sum(len(r.event_files) for r in runs)
    say("ingest", f"{len(runs)} run(s), {n_files} event files" + (", tables kept in memory" if store.in_memory else ""))
    ingested = _ingest(spark, runs, store, workers, arrow_reads, say)
    line_reads.pack_table_reads(spark)  # every input line has been read: from here on only tables are scanned
    stage_s["ingest"] = time.perf_counter() - t

    t = time.perf_counter()
    say("reconcile", "lines = parsed + quarantined, per file")
    recon = _reconcile(spark, store, ingested)
    stage_s["reconcile"] = time.perf_counter() - t

    t = time.perf_counter()
    say("analyze", "episodes and convergence, delivery and stretch, control overhead and churn (side by side)")
    get, put = store.get, store.put
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

    def convergence_chain() -> None:
        held = [store.arrow(name) for name in ("links", "actions", "runs")]
        if all(rows is not None for rows in held):  # in memory: the planner's inputs are on the driver already
            link_rows, action_rows, run_rows = (rows.to_pylist() for rows in held)
            planned = episodes.episode_rows([{"run_id": r, "start_s": s} for r, s, _ in bound_rows], link_rows,
                                            action_rows, run_rows)
            store.put_arrow("episodes", tables.arrow_table(schemas.EPISODES_SCHEMA, planned), schemas.EPISODES_SCHEMA, ())
        else:
            put("episodes", episodes.episodes(runs_df, links, actions, bounds), (), one_file=True)
        eps = get("episodes", schemas.EPISODES_SCHEMA)
        put("convergence", convergence.convergence(events, eps, bounds), (), one_file=True)

    def delivery_chain() -> None:
        put("pings_enriched", delivery.enrich_pings(pings, actions, bounds), (), one_file=True)
        enriched = get("pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
        put("delivery", delivery.delivery_summary(enriched), (), one_file=True)
        put("delivery_by_episode", delivery.delivery_by_episode(enriched), (), one_file=True)
        put("delivery_timeline", delivery.delivery_timeline(enriched, timeline_bin_s), (), one_file=True)

    def overhead_chain() -> None:
        put("overhead_by_node", overhead.overhead_by_node(events), (), one_file=True)
        by_node = get("overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA)
        put("overhead_by_class", overhead.overhead_by_class(by_node), (), one_file=True)

    def churn_chain() -> None:
        put("churn_timeline", churn.churn_timeline(events, bounds, churn_bin_s), (), one_file=True)
        put("churn_by_node", churn.churn_by_node(events), (), one_file=True)

    _concurrently(workers, convergence_chain, delivery_chain, overhead_chain, churn_chain)

    say("analyze", "comparison across runs" + ("; beside it, the report's other inputs and its plots"
                                                 if store.in_memory else ""))
    enriched = get("pings_enriched", schemas.PINGS_ENRICHED_SCHEMA)
    control = overhead.control_per_run(get("overhead_by_node", schemas.OVERHEAD_NODE_SCHEMA))
    ab_doc: dict[str, dict] = {}
    ahead: dict[str, list[dict]] = {}
    drawn: list[report.Plots] = []
    failed = threading.Event()

    def comparison() -> None:
        try:
            summary = compare.run_summary(
                runs_df, get("convergence", schemas.CONVERGENCE_SCHEMA), enriched, control,
                get("churn_by_node", schemas.CHURN_NODE_SCHEMA),
            )
            put("run_summary", summary, (), one_file=True)
            summary = get("run_summary", schemas.RUN_SUMMARY_SCHEMA)
            _concurrently(workers, *[lambda by=by: put(f"compare_{by}", compare.compare(summary, [by]), (),
                                                       one_file=True) for by in compare.GROUPINGS])
            if ab_meta is not None:
                say("analyze", "A/B experiments: per-run metrics, arms paired by seed")
            ab_doc.update(_ab(spark, store, ab_meta, events, enriched, control))
        except BaseException:
            failed.set()  # the plots beside it are not drawn for an analysis that fails (or is stopped)
            raise

    def report_ahead() -> None:
        # a small analysis's comparison is a short chain of small queries, which leaves a core idle: the report's
        # inputs that do not read the comparison's tables, and the plots drawn from them, use it
        ahead.update(report.gather(spark, store.out, [n for n in report.INPUTS if n not in report.COMPARISON_INPUTS],
                                   workers, read=get, held=store.arrow))
        if not failed.is_set():
            drawn.append(report.plots(ahead))

    if store.in_memory:
        _concurrently(2, comparison, report_ahead)
    else:  # big inputs: the report's queries scan big tables, after the comparison as before (not measured beside it)
        comparison()
    stage_s["analyze"] = time.perf_counter() - t

    t = time.perf_counter()
    say("report", "tables, plots, report.md, report.html")
    files = report.render(report.collect_inputs(spark, store.out, recon, ab=ab_doc, workers=workers, read=get,
                                                held=store.arrow, gathered=ahead), drawn[0] if drawn else None)
    if ab_doc:
        files[AB_FILE] = json.dumps(ab_doc, indent=1, allow_nan=False)
    written = tables.write_files(store.out, files)
    stage_s["report"] = time.perf_counter() - t

    n_events = sum(r["parsed"] for r in recon if r["source"] == "events")
    n_quarantined = sum(r["quarantined"] for r in recon)
    result = AnalysisResult(store.out, [r.run_id for r in runs], dict(store.paths), written, recon, n_quarantined,
                            n_events, stage_s, ab_doc)
    bad = [r for r in recon if not r["ok"]]
    if check_reconciliation and bad:
        raise ReconciliationError(
            f"{len(bad)} file(s) do not add up (lines != parsed + quarantined), e.g. {bad[0]['file']}: "
            f"{bad[0]['lines']} lines, {bad[0]['parsed']} parsed, {bad[0]['quarantined']} quarantined")
    return result
