"""JSON-lines input files read by Spark with exact line numbers, laid out over tasks (one file per task, or packed).

``read_lines`` gives every physical line its exact 1-based number in its file without shipping lines through
Python and without reading a whole file into one row (so any file size works). Spark reads each file whole, in
order, within one task, and ``monotonically_increasing_id()`` counts the rows of a task. With a few files
(``read_layout``) each file has a task of its own (``ONE_FILE_PER_TASK``, checked against the plan) and a row's
index in its task is its line index. With many, a task reads several files one after another (a task per file would
cost more than the parsing): Spark's plan lists each task's files in order, the driver's line counts then give each
file's first row id, and a row's line index is its id less that one.

The driver also counts the lines of every file from its bytes, without Spark (``count_lines``, ``count_rows``):
that count is the input side of the reconciliation (lines = parsed + quarantined), so a line lost anywhere in Spark
would show."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import schemas
from pipeline.errors import PipelineError, RunDatasetError

__all__ = ["LineRead", "ONE_FILE_PER_TASK", "PACK_FILES_ABOVE", "PACKED_FILES", "ReadLayout", "count_lines",
           "count_rows", "pack_table_reads", "read_layout", "read_lines"]


#: Session settings read_lines relies on: every input file is read whole, by
#: exactly one task, so a row's position in its task is its line number.
ONE_FILE_PER_TASK = {
    "spark.sql.files.maxPartitionBytes": str(1 << 50),
    "spark.sql.files.openCostInBytes": str(1 << 50),
}
#: Spark's own defaults: many small Parquet files packed into few tasks.
PACKED_FILES = {
    "spark.sql.files.maxPartitionBytes": "128MB",
    "spark.sql.files.openCostInBytes": "4MB",
}


#: ``read_layout`` packs the input files into tasks when there are more than this many. One task per file
#: costs a task's start and a Parquet writer per file (about 20 ms each on a local master): nothing for a
#: dozen event logs, most of the ingest for thousands of small ones (measured: writing the events of 1 M
#: lines in 2 000 files took 52 s one file per task, 16 s packed).
PACK_FILES_ABOVE = 64
#: Bytes of input lines per packed task (at most; ``read_layout`` also aims at 16 tasks or more).
PACK_TASK_BYTES = 64 << 20
#: What opening a file counts as, in bytes, when Spark packs files into a task (its default).
PACK_OPEN_COST = 4 << 20


@dataclass(frozen=True)
class ReadLayout:
    """How ``read_lines`` spreads its files over tasks: ``settings`` for the session, and whether several files
    share a task (``packed``). Every read of one ingest must use the same layout: a query's files are laid out
    when it is planned, from the session's settings at that moment."""

    packed: bool
    settings: Mapping[str, str]


def read_layout(sizes: Sequence[int]) -> ReadLayout:
    """The layout for input files of ``sizes`` bytes: one file per task (``ONE_FILE_PER_TASK``) for up to
    ``PACK_FILES_ABOVE`` files; above, files packed into tasks of up to ``PACK_TASK_BYTES`` but never split.
    Spark splits a file only when it is larger than min(maxPartitionBytes, max(openCostInBytes, input bytes
    / minPartitionNum)): with minPartitionNum 1 that is maxPartitionBytes, which is at least the largest
    file (``read_lines`` checks Spark's plan). minPartitionNum 1 also keeps the layout from depending on the
    cores Spark knows of (a cluster's grow as executors register), so the plan ``read_lines`` reads is the
    one its lines are consumed with."""
    if len(sizes) <= PACK_FILES_ABOVE:
        return ReadLayout(False, ONE_FILE_PER_TASK)
    largest = max(1, *sizes)
    task_bytes = min(PACK_TASK_BYTES, sum(sizes) // 16)  # some 16 tasks or more: the cores stay evenly busy
    return ReadLayout(True, {"spark.sql.files.maxPartitionBytes": str(max(largest, task_bytes)),
                             "spark.sql.files.openCostInBytes": str(min(largest, PACK_OPEN_COST)),
                             "spark.sql.files.minPartitionNum": "1"})


def pack_table_reads(spark: SparkSession) -> None:
    """Let scans planned from now on pack many files into one task (Spark's defaults).

    ``read_lines`` needs one task per file; the tables it produces hold one file per
    input file and run, and reading those one per task costs a task each (250 tasks
    for a 1 M-event dataset of 50-node runs, on every scan). Call this once every
    ``read_lines`` result has been consumed: the setting applies when a query is planned.
    """
    for key, value in PACKED_FILES.items():
        spark.conf.set(key, value)
    spark.conf.unset("spark.sql.files.minPartitionNum")  # read_layout's, for a packed read: back to the cores


@dataclass(frozen=True)
class LineRead:
    """``lines``: schemas.LINES_SCHEMA (lazy). ``count_rows``: schemas.LINE_COUNTS_SCHEMA rows (run_id, source,
    file, lines), counted by the driver from the bytes of each file, independently of Spark (the reconciliation's
    input side)."""

    lines: DataFrame
    count_rows: tuple[tuple[str, str, str, int], ...]


def count_lines(path: str | Path, chunk_bytes: int = 1 << 24) -> int:
    """Lines in a file as Spark's text reader splits it: ends are \\n, \\r\\n or \\r, and a last
    line without an end still counts."""
    ends, last, size = 0, b"", 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            size += len(chunk)
            ends += chunk.count(b"\n")
            if b"\r" in chunk:  # rare: one memchr when there is none
                ends += chunk.count(b"\r") - chunk.count(b"\r\n")
            if last == b"\r" and chunk[:1] == b"\n":
                ends -= 1  # a \r\n split across two chunks
            last = chunk[-1:]
    return ends + (1 if size and last not in (b"\n", b"\r") else 0)


def _uri_key(uri: Column | str) -> Column | str:
    """``file:///x`` and ``file:/x`` (Spark uses both spellings) -> ``/x``; other schemes unchanged."""
    if isinstance(uri, str):
        return re.sub(r"^file:/+", "/", uri)
    return F.regexp_replace(uri, r"^file:/+", "/")


def read_lines(spark: SparkSession, files: Mapping[Path, str], source: str,
               layout: ReadLayout | None = None) -> LineRead:  # fmt: skip
    """Read JSON-lines files as (run_id, file, line_no, line) with exact 1-based line numbers.

    ``files`` maps each file (a local path) to the run_id of its run directory;
    ``source`` (events|actions|pings) labels the counts. ``layout`` (``read_layout``; by default that of
    these files) is set on the session; every ``read_lines`` whose lines are consumed together must be given
    the same one.

    * One file per task: Spark's plan is checked to read each file whole, in order, in a task of its own; the
      line number is then the row's index in its task. Runs no Spark job.
    * Packed: a task reads several files, each whole and in order, one after another. Spark's plan lists the
      files of each task in order (checked: none split, each once); with the driver's line counts that gives
      each file's first row id, and a row's line number is its id less that one, plus 1. Runs no Spark job.
      Every numbered row asserts that its number is within its file's lines, so a layout other than the
      planned one (it cannot be, for the same files and settings) would fail the query, never number a line
      wrongly.

    ``lines`` is lazy. Files must not change while the pipeline runs.
    Raises RunDatasetError if a file is missing, PipelineError if Spark would split files.
    """
    run_of = {str(Path(f).resolve()): run_id for f, run_id in files.items()}
    counts = _counted(run_of, source)
    nonempty = [p for p in run_of if os.path.getsize(p) > 0]
    if not nonempty:
        return LineRead(spark.createDataFrame([], schemas.LINES_SCHEMA), tuple(counts))
    layout = layout or read_layout([os.path.getsize(p) for p in nonempty])
    for key, value in layout.settings.items():
        spark.conf.set(key, value)
    row_id = F.monotonically_increasing_id()
    if layout.packed:
        # one scan per run, unioned: a task then holds files of one run only, and writes one file per table
        # partitioned by run_id (one scan of all files mixes every run in every task: a file per run per task);
        # the runs with a single file (e.g. each run's pings) share one scan: a file per task at worst, as before
        by_run: dict[str, list[str]] = {}
        for path in nonempty:
            by_run.setdefault(run_of[path], []).append(path)
        groups = [paths for _, paths in sorted(by_run.items()) if len(paths) > 1]
        alone = [paths[0] for _, paths in sorted(by_run.items()) if len(paths) == 1]  # e.g. each run's pings
        scans = [spark.read.text(paths).select(F.col("_metadata.file_path").alias("key"), "value")
                 for paths in groups + ([alone] if alone else [])]
        scan = scans[0]
        for extra in scans[1:]:
            scan = scan.union(extra)
        lines = _packed_lines(spark, scan, run_of, {path: n for _, _, path, n in counts}, row_id)
    else:
        lines = _one_per_task_lines(spark, spark.read.text(nonempty), run_of, nonempty, row_id)
    return LineRead(lines, tuple(counts))


def _counted(run_of: Mapping[str, str], source: str) -> list[tuple[str, str, str, int]]:
    counts = []
    for path, run_id in run_of.items():
        try:
            counts.append((run_id, source, path, count_lines(path)))
        except OSError as exc:
            raise RunDatasetError(path, f"cannot read: {exc.strerror or exc}") from None
    return counts


def count_rows(files: Mapping[Path, str], source: str) -> list[tuple[str, str, str, int]]:
    """schemas.LINE_COUNTS_SCHEMA rows (run_id, source, file, lines) of ``files`` (a local path -> the run_id of its
    run directory), counted by the driver (``count_lines``): the input side of the reconciliation, for files whose
    lines ``read_lines`` does not read. Raises RunDatasetError if a file cannot be read."""
    return _counted({str(Path(f).resolve()): r for f, r in files.items()}, source)


def _local_path(uri: str) -> str:
    return str(Path(unquote(urlparse(uri).path)).resolve()) if uri.startswith("file:") else uri


def _one_per_task_lines(spark: SparkSession, scan: DataFrame, run_of: Mapping[str, str], nonempty: list[str],
                        row_id: Column) -> DataFrame:  # fmt: skip
    if scan.rdd.getNumPartitions() != len(nonempty):
        raise PipelineError(
            f"Spark planned {scan.rdd.getNumPartitions()} tasks for {len(nonempty)} files; line numbers need one "
            f"task per file (is spark.sql.files.maxPartitionNum set?)"
        )
    mapping = []
    for uri in scan.inputFiles():
        path = _local_path(uri)
        if path not in run_of:
            raise RunDatasetError(path, f"Spark lists a file it was not asked to read ({uri})")
        # _metadata.file_path spells local files "file:/x", inputFiles() "file:///x": map both
        for key in {uri, _uri_key(uri), "file:" + _uri_key(uri)}:
            mapping.append((key, run_of[path], path))
    files_df = spark.createDataFrame(mapping, "key string, run_id string, file string")
    numbered = scan.select(
        F.col("_metadata.file_path").alias("key"),
        (row_id - F.spark_partition_id().cast("long") * (1 << 33) + 1).alias("line_no"),
        F.col("value").alias("line"),
    )
    return numbered.join(F.broadcast(files_df), "key").select("run_id", "file", "line_no", "line")


def _packed_lines(spark: SparkSession, scan: DataFrame, run_of: Mapping[str, str], lines_in: Mapping[str, int],
                  row_id: Column) -> DataFrame:  # fmt: skip
    """Number the lines of a packed read (``scan``: text scans with the file as ``key``, unioned): Spark's plan lists the
    files of each task in reading order, so a file's first row id is its task's base id plus the lines of the
    files before it (counted by the driver)."""
    mapping = []
    seen: set[str] = set()
    for part in scan._jdf.queryExecution().toRdd().partitions():
        base = part.index() << 33  # monotonically_increasing_id: the task's index in the upper 31 bits
        files = part.parentPartition() if part.getClass().getSimpleName() == "UnionPartition" else part
        for pf in files.files():
            uri = pf.filePath().toString()
            path = _local_path(uri)
            if path not in run_of or path in seen:
                raise RunDatasetError(path, f"Spark planned to read a file it was not asked to, or twice ({uri})")
            if pf.start() != 0 or pf.length() != os.path.getsize(path):
                raise PipelineError(f"Spark split {path} over several tasks; line numbers need each file read whole "
                                    f"(spark.sql.files.maxPartitionBytes / openCostInBytes below its size?)")
            seen.add(path)
            for key in {uri, _uri_key(uri), "file:" + _uri_key(uri)}:
                mapping.append((key, run_of[path], path, base, lines_in[path]))
            base += lines_in[path]
    missing = sorted(set(p for p in run_of if os.path.getsize(p) > 0) - seen)
    if missing:
        raise PipelineError(f"Spark's plan reads {len(seen)} files, not {missing[0]} (and {len(missing) - 1} more)")
    files_df = spark.createDataFrame(mapping, "key string, run_id string, file string, first_id long, rows long")
    line_no = F.col("id") - F.col("first_id") + 1
    in_file = F.assert_true(line_no.between(1, F.col("rows")),
                            F.lit("read_lines: a line numbered outside its file (Spark laid the files out otherwise "
                                  "than planned, or split its lines otherwise than count_lines)"))
    numbered = scan.select("key", row_id.alias("id"), F.col("value").alias("line"))
    return numbered.join(F.broadcast(files_df), "key").select(
        "run_id", "file", F.coalesce(in_file.cast("long"), line_no).alias("line_no"), "line")

