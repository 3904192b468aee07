"""Carrying out an ingest plan (``ingest_plan``): the input files read into the events, actions, pings and quarantine
tables, the runs, nodes and links tables written, and what the reconciliation needs returned (``Ingested``).

Each source is ingested on a job thread of its own, beside the per-run tables (the four are independent): a thread
is given its source's plan and returns what it did (``SourceDone``: the line counts, the driver's rows, Spark's
verdicts on the suspect lines). The caller then writes the quarantine from the verdicts the threads returned, and
releases what they cached. The tables go through the store (``tables.TableStore``, which is thread-safe), each
written by the one thread that owns it.

How a source is read:

* in memory (``CLEAN_FILES``): every file through ``clean_files``; the files it refuses through Spark's fast path
  and, when some line is suspect, the full check; one table from both, collected to the driver;
* on disk with Arrow (``ARROW_INGEST``): the batches parsed by ``arrow_ingest`` on the job threads, each written as
  Parquet parts into a staging directory; the files refused, and those planned for Spark, through Spark's ingest,
  which writes the table; the staged parts then join it (or are the whole table, when Spark read no file);
* on disk without (Spark reads every file): Spark's ingest writes the table (the events' suspect lines through a
  table of their own, ``ingest_suspects``, read back for the full check).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline import arrow_ingest, clean_files, line_reads, parallel, schemas, tables
from pipeline.errors import PipelineError
from pipeline.ingest_plan import ARROW_INGEST, CLEAN_FILES, DriverBatch, IngestPlan, SourcePlan
from pipeline.jobs import ingest
from pipeline.rundirs import RunDir, run_rows

__all__ = ["Ingested", "SourceDone", "execute", "ingest_source"]

Progress = Callable[[str, str], None]
LineCount = tuple[str, str, str, int]  # schemas.LINE_COUNTS_SCHEMA: run_id, source, file, lines


@dataclass(frozen=True)
class Ingested:
    """What the ingest leaves for the reconciliation: the driver's line count of every input file
    (schemas.LINE_COUNTS_SCHEMA rows), and, when the tables are kept in memory and the driver read every file itself
    (``clean_files``: nothing quarantined), the rows it parsed from each (source -> resolved path -> rows); else None
    (Spark read some file, or the tables are on disk: Spark counts the rows of the tables)."""

    counts: tuple[LineCount, ...]
    parsed: dict[str, dict[str, int]] | None
    #: the events table's rows, when they were all read on the driver into an in-memory table (else None)
    events: pa.Table | None = None


@dataclass(frozen=True)
class SourceDone:
    """One source's ingest, as its thread returns it: the line counts of its files (``line_reads.count_rows``),
    and, when the driver read every file into an in-memory table, the rows per file and the rows themselves; else
    Spark's verdicts on the suspect lines (``ingest.validate_*``, cached: the quarantine's input; None when no line
    was suspect) and any other cached frame, released by the caller."""

    source: str
    counts: tuple[LineCount, ...]
    parsed: dict[str, int] | None = None
    rows: pa.Table | None = None
    verdicts: DataFrame | None = None
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        for df in (self.verdicts, *self.cached):
            if df is not None:
                df.unpersist()


@dataclass(frozen=True)
class _SparkIngest:
    """Spark's ingest of a source: the fast path, the full check, the table's schema."""

    triage: Callable[[DataFrame], DataFrame]
    validate: Callable[[DataFrame], DataFrame]
    schema: StructType


_SPARK = {
    "events": _SparkIngest(ingest.triage_events, ingest.validate_events, schemas.EVENTS_SCHEMA),
    "actions": _SparkIngest(ingest.triage_actions, ingest.validate_actions, schemas.ACTIONS_SCHEMA),
    "pings": _SparkIngest(ingest.triage_pings, ingest.validate_pings, schemas.PINGS_SCHEMA),
}


def execute(spark: SparkSession, plan: IngestPlan, runs: list[RunDir], store: tables.TableStore, workers: int,
            say: Progress) -> Ingested:  # fmt: skip
    """Carry out ``plan``: write runs, nodes, links, events, actions, pings and quarantine into ``store`` (whose mode
    must be the plan's), each source on a job thread beside the per-run tables; return the line counts of every input
    file, and the rows parsed from each when the driver read them all. ``say(stage, detail)`` reports progress."""
    if plan.in_memory != store.in_memory:
        raise PipelineError(f"an ingest planned {'in' if plan.in_memory else 'not in'} memory, into a store "
                            f"{'in' if store.in_memory else 'not in'} memory")
    calls = [partial(ingest_source, spark, plan, store, src, workers, say) for src in plan.sources]
    futures = parallel.outcomes(workers, *calls, partial(_write_run_tables, spark, runs, store))
    done: list[SourceDone] = [f.result() for f in futures[: len(calls)] if f.exception() is None]
    try:
        for future in futures:
            future.result()  # the first failure, if any, once every thread has ended
        _write_quarantine(spark, store, done)
    finally:
        for d in done:
            d.release()
    tables.drop_table(store.out, "ingest_suspects")
    counts = tuple(row for d in done for row in d.counts)
    parsed = {d.source: d.parsed for d in done} if all(d.parsed is not None for d in done) else None
    events = next((d.rows for d in done if d.source == "events"), None)
    return Ingested(counts, parsed, events)


def ingest_source(spark: SparkSession, plan: IngestPlan, store: tables.TableStore, src: SourcePlan, workers: int,
                  say: Progress) -> SourceDone:  # fmt: skip
    """Read the files of one source as ``src`` plans, into its table in ``store``."""
    if src.reader == CLEAN_FILES:
        return _in_memory(spark, plan, store, src)
    if src.reader == ARROW_INGEST:
        return _arrow_then_spark(spark, plan, store, src, workers, say)
    return _spark_on_disk(spark, plan, store, src.source, src.run_of())


def _write_run_tables(spark: SparkSession, runs: list[RunDir], store: tables.TableStore) -> None:
    for name, (schema, rows) in run_rows(runs).items():
        if store.in_memory:  # rows the driver has: no Spark job
            store.put_arrow(name, tables.arrow_table(schema, rows), schema, ())
        else:
            store.put(name, spark.createDataFrame(rows, schema), (), one_file=True)


def _write_quarantine(spark: SparkSession, store: tables.TableStore, done: list[SourceDone]) -> None:
    quarantine = [ingest.quarantined(d.verdicts, d.source) for d in done if d.verdicts is not None]
    # a source whose every line passed the fast path has no verdicts: none at all, no quarantine
    if not quarantine and store.in_memory:
        store.put_arrow("quarantine", tables.arrow_table(schemas.QUARANTINE_SCHEMA, []), schemas.QUARANTINE_SCHEMA)
        return
    q = quarantine[0] if quarantine else spark.createDataFrame([], schemas.QUARANTINE_SCHEMA)
    for extra in quarantine[1:]:
        q = q.unionByName(extra)
    store.put("quarantine", q)


def _rows_per_file(rows: pa.Table) -> dict[str, int]:
    return {v["values"]: v["counts"] for v in pc.value_counts(rows.column("file")).to_pylist()}


# --------------------------------------------------------------------------- in memory


def _in_memory(spark: SparkSession, plan: IngestPlan, store: tables.TableStore, src: SourcePlan) -> SourceDone:
    """Clean files (the usual case: all of them) become rows on the driver, with no Spark job (``clean_files``); the
    others take Spark's fast path, their suspect lines the full check."""
    clean, refused = [], []
    for f in (f for batch in src.driver for f in batch.files):
        got = clean_files.rows(f.path, f.run_id, src.source)
        if got is None:
            refused.append(f.path)
        else:
            clean.append(got)
    rows = pa.concat_tables(clean) if clean else clean_files.arrow_schema(src.source).empty_table()
    left = set(refused)
    counts = tuple(line_reads.count_rows({p: r for p, r in src.run_of().items() if p not in left}, src.source))
    if not refused:
        store.put_arrow(src.source, rows, clean_files.table_schema(src.source))
        return SourceDone(src.source, counts, _rows_per_file(rows), rows)
    done = _spark_in_memory(spark, plan, store, src.source, src.run_of(refused), rows if clean else None)
    return replace(done, counts=counts + done.counts)


def _spark_in_memory(spark: SparkSession, plan: IngestPlan, store: tables.TableStore, source: str,
                     files: dict[Path, str], driver_rows: pa.Table | None) -> SourceDone:  # fmt: skip
    """Spark's ingest of ``files`` into an in-memory table, with ``driver_rows`` (the clean files' rows) added."""
    spec = _SPARK[source]
    read = line_reads.read_lines(spark, files, source, plan.layout)
    schema = clean_files.table_schema(source)
    tri = spec.triage(read.lines).cache()
    verdicts = None
    try:
        # the columns of the table on disk: the events' keep ``line`` (null on every accepted row; write_split)
        accepted = tri.where(F.col(ingest.TRIAGE) == "accepted").select(*schema.fieldNames())
        suspects = tri.where(F.col(ingest.TRIAGE) == "suspect").select(*schemas.LINES_SCHEMA.fieldNames())
        if not suspects.isEmpty():
            verdicts = spec.validate(suspects).cache()
            more = ingest.accepted(verdicts, spec.schema)
            if source == "events":
                more = more.withColumn("line", F.lit(None).cast("string"))
            accepted = accepted.unionByName(more)
        if driver_rows is not None:
            accepted = spark.createDataFrame(driver_rows).unionByName(accepted)
        store.put(source, accepted)
    except BaseException:
        SourceDone(source, (), verdicts=verdicts, cached=(tri,)).release()
        raise
    return SourceDone(source, read.count_rows, verdicts=verdicts, cached=(tri,))


# --------------------------------------------------------------------------- on disk


def _arrow_then_spark(spark: SparkSession, plan: IngestPlan, store: tables.TableStore, src: SourcePlan, workers: int,
                      say: Progress) -> SourceDone:  # fmt: skip
    """Clean files (the usual case) are parsed on the driver by Arrow (``arrow_ingest``) and staged as Parquet; the
    others go through Spark's ingest, which writes the table; the staged parts join it after."""
    staged, refused = _stage_batches(src, store.out, workers)
    try:
        left = {**refused, **{s.file.path: s.reason for s in src.spark}}
        taken = {p: r for p, r in src.run_of().items() if p not in left}
        counts = tuple(line_reads.count_rows(taken, src.source))
        say("ingest", f"{src.source}: {len(taken)} file(s) read by Arrow, {len(left)} left to Spark"
            + (f" (e.g. {next(iter(left))}: {next(iter(left.values()))})" if left else ""))
        if left:  # Spark's ingest replaces the table, with the rows of the files left to it
            done = _spark_on_disk(spark, plan, store, src.source, src.run_of(left))
        else:  # the staged parts are the whole table: nothing of an earlier analysis into ``out`` may stay
            tables.drop_table(store.out, src.source)
            done = SourceDone(src.source, ())
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    try:
        store.written(src.source, tables.add_parts(staged, store.out, src.source))
    except BaseException:
        done.release()
        raise
    return replace(done, counts=counts + done.counts)


def _stage_batches(src: SourcePlan, out: Path, workers: int) -> tuple[Path, dict[Path, str]]:
    """Parse ``src``'s driver batches with ``arrow_ingest`` on ``workers`` threads, each written as Parquet parts into
    a new staging directory. Returns the staging directory and the files refused (path -> why), in batch order."""
    staging = tables.staging_dir(out)
    try:
        got = parallel.side_by_side(workers, *(partial(_arrow_batch, b, src.source, staging) for b in src.driver),
                                    name="snekbed-arrow")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, {path: why for refused in got for path, why in refused.items()}


def _arrow_batch(batch: DriverBatch, source: str, staging: Path) -> dict[Path, str]:
    """One batch through ``arrow_ingest``: its clean files' rows written as a part under ``staging``; returns the
    files it refused (path -> why)."""
    rows, left = arrow_ingest.batch([f.path for f in batch.files], batch.files[0].run_id, source)
    if rows.num_rows:
        tables.write_arrow_part(rows, staging, f"arrow-{batch.index:06d}")
    return {Path(path): why.reason for path, why in left.items()}


def _spark_on_disk(spark: SparkSession, plan: IngestPlan, store: tables.TableStore, source: str,
                   files: dict[Path, str]) -> SourceDone:  # fmt: skip
    """Spark's ingest of ``files`` into the table on disk (replacing it). Each verdict table feeds two writes
    (accepted rows, then quarantine): cached, the full check (and the reading and numbering of the lines) runs once."""
    read = line_reads.read_lines(spark, files, source, plan.layout)
    if source == "events":
        return _events_on_disk(spark, store, read)
    verdicts = _SPARK[source].validate(read.lines).cache()
    try:
        store.put(source, ingest.accepted(verdicts, _SPARK[source].schema))
    except BaseException:
        verdicts.unpersist()
        raise
    return SourceDone(source, read.count_rows, verdicts=verdicts)


def _events_on_disk(spark: SparkSession, store: tables.TableStore, read: line_reads.LineRead) -> SourceDone:
    """The events' fast path, written once as ``events`` and ``ingest_suspects``; the suspects' full check, its
    accepted rows appended to ``events``."""
    paths = tables.write_split(ingest.triage_events(read.lines), store.out, ingest.TRIAGE,
                               {"accepted": "events", "suspect": "ingest_suspects"})
    store.written("events", paths["events"])
    if tables.table_is_empty(store.out, "ingest_suspects"):  # no suspect line (the usual case): no full check to run
        return SourceDone("events", read.count_rows)
    suspects = tables.read_table(spark, store.out, "ingest_suspects", schemas.LINES_SCHEMA)
    verdicts = ingest.validate_events(suspects).cache()
    try:
        tables.write_table(ingest.accepted(verdicts, schemas.EVENTS_SCHEMA), store.out, "events", append=True)
    except BaseException:
        verdicts.unpersist()
        raise
    return SourceDone("events", read.count_rows, verdicts=verdicts)
