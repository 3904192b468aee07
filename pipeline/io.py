"""All reads and writes of the pipeline: Spark session, run directories, JSON lines, Parquet, files.

Jobs (``pipeline.jobs``) never touch storage; they take and return DataFrames.
This module turns run directories into DataFrames and DataFrames into files.

Line numbers. ``read_lines`` gives every physical line its exact 1-based
number in its file without shipping lines through Python and without reading
a whole file into one row (so any file size works). Spark reads each file
whole, in order, within one task, and ``monotonically_increasing_id()`` counts
the rows of a task. With a few files (``read_layout``) each file has a task
of its own (``ONE_FILE_PER_TASK``, checked against the plan) and a row's
index in its task is its line index. With many, a task reads several files
one after another (a task per file would cost more than the parsing): Spark's
plan lists each task's files in order, the driver's line counts then give
each file's first row id, and a row's line index is its id less that one.

The driver also counts the lines of every file from its bytes, without Spark:
that count is the input side of the reconciliation (lines = parsed +
quarantined), so a line lost anywhere in Spark would show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from pipeline import schemas
from contract.dataset import RunMeta, TopologyFile, class_mix
from pipeline.errors import PipelineError, RunDatasetError, SparkSetupError

__all__ = [
    "RunDir",
    "LineRead",
    "get_spark",
    "SMALL_INPUT_BYTES",
    "input_size",
    "discover_runs",
    "check_ab",
    "ab_meta",
    "observed_internal_errors",
    "load_run",
    "run_rows",
    "arrow_table",
    "count_rows",
    "read_lines",
    "write_table",
    "write_split",
    "write_arrow",
    "write_arrow_part",
    "staging_dir",
    "add_parts",
    "drop_table",
    "table_is_empty",
    "read_table",
    "write_files",
    "collect_all",
    "TableStore",
    "table_path",
    "count_lines",
    "ONE_FILE_PER_TASK",
    "ReadLayout",
    "read_layout",
    "PACK_FILES_ABOVE",
    "PACKED_FILES",
    "pack_table_reads",
]


# --------------------------------------------------------------------------- Spark session

JIT_FLAGS = "-XX:-DontCompileHugeMethods"
#: JVM flags for every session: class metadata may grow to 256 MB before it triggers a collection. Spark's classes
#: take some 140 MB of metadata by the end of a small analysis; from the default 21 MB threshold the JVM ran four
#: full (stop-the-world) collections on the way there, 217 ms of pauses in all (a flight recording of the demo-sized
#: analysis: cause "Metadata GC Threshold"), none of which could free a class.
METASPACE_FLAGS = "-XX:MetaspaceSize=256m"
#: JVM flags for every session that is not small (below): the throughput collector. Measured side by side
#: (pipeline_bench.py, 2 cores, local[2]): 166.3 s against 175.8 s with the default G1 at 10 M events, 58.1/61.4 s
#: against 61.7/63.2 s at 1 M; G1's write barriers and concurrent marking cost a batch job more than its shorter pauses
#: save.
BIG_JVM_FLAGS = "-XX:+UseParallelGC"
#: Inputs up to this many bytes (event logs, actions and pings together) are small: on a local master
#: the analysis is then a few dozen tiny queries, whose time goes to the JVM's start, its JIT compilers
#: and per-query planning, not to the data (300 to 400 bytes per event line: 16 MiB is some 50 000 lines).
SMALL_INPUT_BYTES = 16 << 20
#: JVM flags for small inputs on a local master: the client compiler only (C2's optimizing compilations
#: of Spark's own code and of the generated per-row code never pay for themselves on a short run, and
#: compete with it for the cores) and the serial collector (a small heap, no GC threads). The client-only
#: mode would shrink the code cache to 48 MB, which two analyses in one JVM (the demo's warm-up, then its run)
#: fill ("CodeCache is full. Compiler has been disabled"): it keeps the usual 240 MB.
SMALL_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
#: Core settings for small inputs on a local master (they apply when the JVM starts): 1 MB memory pages. Spark sizes
#: its pages from the heap (64 MB for a 4 GB driver on 2 cores), and every sort, hash aggregate or join of every
#: task allocates at least one, zeroed, even for ten rows: a small analysis allocated some 1 GB of such pages, and the
#: garbage collector's time grew with them. Measured on the demo's run: the analysis after a trivial action took
#: 12.1-12.3 s with 1 MB pages against 13.8-16.0 s (docs/performance.md, eighth session).
SMALL_CORE = {"spark.buffer.pageSize": "1m"}
#: SQL settings for small inputs on a local master: one shuffle partition, no adaptive execution (which would run
#: each shuffle stage as a job of its own and re-plan the query after it), and no code generation: expressions and
#: operators are interpreted. Each query of a small analysis touches a few thousand rows once, so compiling its
#: generated Java (janino, then the JIT) costs far more than it saves; the ingest's validation plans are even over
#: the JVM's method size limit, so their generated code was compiled only to be thrown away. Measured on the demo's
#: run: a cold analysis 20.6 s with code generation, 15.2 s without (docs/performance.md, seventh session).
SMALL_SQL = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
             "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def get_spark(
    master: str | None = "local[*]",
    app_name: str = "snekbed-analyze",
    *,
    ui: bool = False,
    shuffle_partitions: int | None = None,
    driver_memory: str | None = "4g",
    conf: Mapping[str, str] | None = None,
    input_bytes: int | None = None,
) -> SparkSession:
    """Get (or create) the SparkSession the pipeline runs on.

    ``master=None`` keeps whatever the launcher set (``spark-submit``).
    For ``local[...]`` masters the shuffle partitions default to 4 x cores
    (adaptive execution coalesces them further); the UI is off unless
    ``ui=True``. ``driver_memory`` only applies when this call starts the JVM.
    ``input_bytes`` (``input_size`` of the runs to analyze), when at most
    ``SMALL_INPUT_BYTES`` on a local master, tunes the session for a small input
    (``SMALL_JVM_FLAGS``, ``SMALL_CORE``, ``SMALL_SQL``): the same results, sooner.
    Raises SparkSetupError when Java is missing or Spark fails to start.
    """
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings: dict[str, str] = {
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.sql.variant.allowDuplicateKeys": "true",  # a repeated key keeps its last value, as from_json
        # write partitioned Parquet without a per-task sort while there are few runs per task
        "spark.sql.maxConcurrentOutputFileWriters": "32",
        "spark.sql.parquet.compression.codec": "zstd",
        # list input files and table directories on the driver: above 32 paths Spark lists them with a job of
        # its own, which took 5-8 s for the 2 000 event logs of a 1 M-event dataset (0.3 s on the driver)
        "spark.sql.sources.parallelPartitionDiscovery.threshold": str(1 << 16),
    }
    if master is not None and master.startswith("local"):
        # a local master talks to itself only: on loopback, whatever the host name resolves to
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
        cores = _local_cores(master)
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions or max(2, 4 * cores))
        if driver_memory:
            settings["spark.driver.memory"] = driver_memory
    elif shuffle_partitions:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    small = master is not None and master.startswith("local") and input_bytes is not None \
        and input_bytes <= SMALL_INPUT_BYTES
    if small:
        settings.update(SMALL_SQL)
        if shuffle_partitions:
            settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(ONE_FILE_PER_TASK)
    if not SparkSession.getActiveSession():
        # Generated per-row code for the event schema is larger than 8 KB; without this
        # flag HotSpot never compiles such methods and ingest runs several times slower.
        flags = f"{JIT_FLAGS} {METASPACE_FLAGS} {SMALL_JVM_FLAGS if small else BIG_JVM_FLAGS}"
        settings["spark.driver.extraJavaOptions"] = flags
        settings["spark.executor.extraJavaOptions"] = flags
        if small:
            settings.update(SMALL_CORE)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkSetupError("Java is needed to run Spark: install a JRE 17+ or set JAVA_HOME")
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j / launcher errors come in many types
        raise SparkSetupError(f"could not start Spark (master={master!r}): {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_codegen_fallback(spark)
    return spark


def _quiet_codegen_fallback(spark: SparkSession) -> None:
    """Keep Spark's whole-stage code generator from printing a stack trace when it falls back.

    The ingest slow path validates every contract field of a suspect line in one
    projection; its generated method is over the JVM's 64 KB limit, janino says so
    at ERROR level with a long trace, and Spark runs that stage with interpreted
    expressions instead (``spark.sql.codegen.fallback``, on by default): the same
    rows, only for the few suspect lines. Best effort: a JVM without log4j2's
    Configurator keeps the trace.
    """
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.FATAL
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator", level)
    except Exception:  # py4j raises several types for a missing class; nothing else depends on this
        pass


def _local_cores(master: str) -> int:
    inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    if inner.startswith("*") or not inner.split(",")[0].isdigit():
        return os.cpu_count() or 1
    return max(1, int(inner.split(",")[0]))


# --------------------------------------------------------------------------- run directories


@dataclass(frozen=True)
class RunDir:
    """A validated run directory (see docs/run-dataset.md)."""

    path: Path
    meta: RunMeta
    topology: TopologyFile
    event_files: tuple[Path, ...]
    actions_file: Path
    pings_file: Path

    @property
    def run_id(self) -> str:
        return self.meta.run_id


def _read_json_file(path: Path, model: type) -> object:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDatasetError(str(path), "missing (every run directory needs it)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunDatasetError(str(path), f"not readable JSON: {exc}") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise RunDatasetError(str(path), f"field {where}: {first['msg']}") from None


def load_run(path: str | Path) -> RunDir:
    """Validate one run directory. Raises RunDatasetError naming the file and the problem."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise RunDatasetError(str(root), "not a directory")
    meta: RunMeta = _read_json_file(root / "meta.json", RunMeta)  # type: ignore[assignment]
    topo: TopologyFile = _read_json_file(root / "topology.json", TopologyFile)  # type: ignore[assignment]
    names = {n.name for n in topo.nodes}
    if names != set(meta.nodes):
        diff = sorted(names ^ set(meta.nodes))
        raise RunDatasetError(str(root / "meta.json"), f"nodes differ from topology.json: {diff}")
    unknown = sorted(set(meta.variants or {}) - set(meta.nodes))
    if unknown:
        raise RunDatasetError(str(root / "meta.json"), f"field variants: names unknown node(s) {unknown}")
    for i, link in enumerate(topo.links):
        for end in (link.a, link.b):
            if end not in names:
                raise RunDatasetError(str(root / "topology.json"), f"links[{i}] names unknown node {end!r}")
    events_dir = root / "events"
    if not events_dir.is_dir():
        raise RunDatasetError(str(events_dir), "missing events/ directory")
    event_files = tuple(sorted(events_dir.glob("*.jsonl")))
    for name in ("actions.jsonl", "pings.jsonl"):
        if not (root / name).is_file():
            raise RunDatasetError(str(root / name), "missing (may be empty, must exist)")
    return RunDir(root, meta, topo, event_files, root / "actions.jsonl", root / "pings.jsonl")


def discover_runs(paths: Sequence[str | Path]) -> list[RunDir]:
    """Run directories named by ``paths``: each is a run directory (has meta.json)
    or a directory whose immediate subdirectories are run directories.

    Raises RunDatasetError for a path that is neither, for an invalid run, when two runs
    share a run_id, or for an inconsistent A/B experiment (``check_ab``).
    """
    runs: list[RunDir] = []
    for p in paths:
        root = Path(p)
        if (root / "meta.json").exists():
            runs.append(load_run(root))
            continue
        subdirs = sorted(d for d in root.iterdir() if (d / "meta.json").exists()) if root.is_dir() else []
        if not subdirs:
            raise RunDatasetError(str(root), "not a run directory (no meta.json) and contains none")
        runs.extend(load_run(d) for d in subdirs)
    seen: dict[str, Path] = {}
    for run in runs:
        if run.run_id in seen:
            raise RunDatasetError(str(run.path), f"run_id {run.run_id!r} also used by {seen[run.run_id]}")
        seen[run.run_id] = run.path
    check_ab(runs)
    return runs


def check_ab(runs: Sequence[RunDir]) -> None:
    """The A/B runs among ``runs`` (meta.json ``ab``) form consistent experiments: every run of an
    experiment names the same ``a`` and ``b`` specs, and no (experiment, arm, seed) has two runs.
    Raises RunDatasetError naming the meta.json at fault."""
    specs: dict[str, tuple[tuple[str, str], Path]] = {}
    slots: dict[tuple[str, str, int], Path] = {}
    for run in runs:
        ab = run.meta.ab
        if ab is None:
            continue
        where = str(run.path / "meta.json")
        first = specs.setdefault(ab.experiment, ((ab.a, ab.b), run.path))
        if first[0] != (ab.a, ab.b):
            raise RunDatasetError(where, f"field ab: experiment {ab.experiment!r} has a={ab.a!r} b={ab.b!r} here "
                                         f"but a={first[0][0]!r} b={first[0][1]!r} in {first[1]}")
        slot = (ab.experiment, ab.arm, ab.seed)
        if slot in slots:
            raise RunDatasetError(where, f"field ab: experiment {ab.experiment!r} arm {ab.arm} seed {ab.seed} "
                                         f"is also recorded by {slots[slot]}")
        slots[slot] = run.path


def input_size(runs: Sequence[RunDir]) -> int:
    """Bytes of the input lines of ``runs`` (event logs, actions.jsonl, pings.jsonl): what
    ``get_spark(input_bytes=...)`` judges small or not."""
    total = 0
    for run in runs:
        for path in (*run.event_files, run.actions_file, run.pings_file):
            try:
                total += path.stat().st_size
            except OSError as exc:
                raise RunDatasetError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return total


def run_rows(runs: Sequence[RunDir]) -> dict[str, tuple[StructType, list[tuple]]]:
    """The small per-run tables built from meta.json and topology.json: runs, nodes and links, each as its schema
    (schemas.RUNS_SCHEMA, NODES_SCHEMA, LINKS_SCHEMA) and its rows."""
    run_rows, node_rows, link_rows = [], [], []
    for r in runs:
        m = r.meta
        shaping = {frozenset((ml.a, ml.b)): ml.shaping_backend for ml in m.links}
        classes = [link.link_class for link in r.topology.links]
        run_rows.append(
            (
                m.run_id, m.backend, m.variant, m.topology, m.seed, m.clock, m.link_delay_ms, m.started_wall_ts,
                dict(m.nodes), dict(m.versions), json.dumps(m.observer, sort_keys=True), class_mix(classes),
                len(m.nodes), len(r.topology.links), str(r.path),
            )
        )
        node_rows.extend((m.run_id, name, key) for name, key in sorted(m.nodes.items()))
        link_rows.extend(
            (m.run_id, lk.a, lk.b, lk.link_class, shaping.get(frozenset((lk.a, lk.b)))) for lk in r.topology.links
        )
    return {"runs": (schemas.RUNS_SCHEMA, run_rows), "nodes": (schemas.NODES_SCHEMA, node_rows),
            "links": (schemas.LINKS_SCHEMA, link_rows)}


def arrow_table(schema: StructType, rows: Sequence[tuple]) -> pa.Table:
    """``rows`` (tuples in ``schema``'s column order) as an Arrow table of the types Spark gives ``schema``'s columns."""
    target = to_arrow_schema(schema)
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(target.names)}, schema=target)


def observed_internal_errors(observer: Mapping) -> int | None:
    """meta.json ``observer.internal_errors``: a number, or {node: number} (summed); None when absent
    or of another shape."""
    value = observer.get("internal_errors")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
        return sum(value.values())
    return None


def ab_meta(spark: SparkSession, runs: Sequence[RunDir]) -> DataFrame | None:
    """schemas.AB_META_SCHEMA for the runs with meta.json ``ab`` (None when there are none):
    run_id, experiment, arm, seed, spec (the arm's), a, b, variants (JSON text or null),
    observer_internal_errors (``observed_internal_errors``)."""
    rows = [
        (r.run_id, r.meta.ab.experiment, r.meta.ab.arm, r.meta.ab.seed, r.meta.ab.spec, r.meta.ab.a, r.meta.ab.b,
         json.dumps(r.meta.variants, sort_keys=True) if r.meta.variants else None,
         observed_internal_errors(r.meta.observer))
        for r in runs if r.meta.ab is not None
    ]  # fmt: skip
    return spark.createDataFrame(rows, schemas.AB_META_SCHEMA) if rows else None


# --------------------------------------------------------------------------- JSON lines with line numbers

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


# --------------------------------------------------------------------------- Parquet tables and files


def table_path(out: str | Path, name: str) -> str:
    """Where table ``name`` lives under the output directory ``out``."""
    return str(Path(out) / "tables" / name)


def write_table(
    df: DataFrame, out: str | Path, name: str, partition_by: Iterable[str] = ("run_id",), *, append: bool = False
) -> str:
    """Write ``df`` as Parquet table ``name`` under ``out`` (overwriting it, or appending); return its path."""
    path = table_path(out, name)
    writer = df.write.mode("append" if append else "overwrite")
    cols = list(partition_by)
    if cols:
        writer = writer.partitionBy(*cols)
    writer.parquet(path)
    return path


def write_arrow(rows: pa.Table, out: str | Path, name: str, partition_by: Iterable[str] = ("run_id",)) -> str:
    """Write ``rows`` (a small table collected from Spark with ``toArrow``) as Parquet table ``name`` under ``out``,
    replacing it, laid out as ``write_table`` lays it out: a ``col=value`` directory per value of the partition
    columns (which the files then omit), zstd-compressed. A table with no rows: an empty directory when partitioned
    (``read_table`` reads it as empty), else one file with the schema and no row. Returns its path."""
    path = Path(table_path(out, name))
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    cols = list(partition_by)
    if cols and rows.num_rows:
        pq.write_to_dataset(rows, str(path), partition_cols=cols, compression="zstd",
                            basename_template="part-{i}.zstd.parquet")
    elif not cols:
        pq.write_table(rows, str(path / "part-0.zstd.parquet"), compression="zstd")
    return str(path)


def write_arrow_part(rows: pa.Table, directory: str | Path, part: str, partition_by: Iterable[str] = ("run_id",)) -> None:
    """Add ``rows`` to the Parquet files under ``directory``, laid out as ``write_arrow`` lays out a table (a
    ``col=value`` directory per value of the partition columns, zstd), in new files named after ``part`` (several
    writers may add parts to one directory at once, each with its own ``part``)."""
    pq.write_to_dataset(rows, str(directory), partition_cols=list(partition_by), compression="zstd",
                        basename_template=f"part-{part}-{{i}}.zstd.parquet")


def staging_dir(out: str | Path) -> Path:
    """A new, empty directory under ``out``'s tables for parts that become a table later (``add_parts``)."""
    path = Path(out) / "tables" / f"_staging-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


def add_parts(staging: str | Path, out: str | Path, name: str) -> str:
    """Move the Parquet files under ``staging`` (``write_arrow_part``) into table ``name`` under ``out``, each into the
    same ``col=value`` directory there (the table is created, empty, if it does not exist); remove ``staging``.
    Returns the table's path."""
    target = Path(table_path(out, name))
    target.mkdir(parents=True, exist_ok=True)
    for part in sorted(Path(staging).rglob("*.parquet")):
        into = target / part.parent.relative_to(staging)
        into.mkdir(parents=True, exist_ok=True)
        os.replace(part, into / part.name)
    shutil.rmtree(staging)
    return str(target)


def write_split(
    df: DataFrame, out: str | Path, by: str, tables: Mapping[str, str], partition_by: Iterable[str] = ("run_id",)
) -> dict[str, str]:
    """Write ``df`` once, as several tables: rows whose column ``by`` equals a key of
    ``tables`` become the table named by the value (``by`` itself is dropped).

    One Spark job instead of one per table (the input is read and parsed once).
    Every listed table is replaced; one with no rows is written empty. Returns name -> path.
    Raises PipelineError for values of ``by`` not in ``tables``.
    """
    staging = staging_dir(out)
    df.write.mode("overwrite").partitionBy(by, *partition_by).parquet(str(staging))
    unknown = [d.name for d in staging.iterdir() if d.is_dir() and d.name.split("=", 1)[1] not in tables]
    if unknown:
        raise PipelineError(f"write_split: rows with {unknown} have no table")
    paths = {}
    for value, name in tables.items():
        target = Path(table_path(out, name))
        if target.exists():
            shutil.rmtree(target)
        src = staging / f"{by}={value}"
        if src.exists():
            os.replace(src, target)
        else:
            target.mkdir(parents=True)
        paths[name] = str(target)
    shutil.rmtree(staging)
    return paths


def drop_table(out: str | Path, name: str) -> None:
    """Remove table ``name`` under ``out`` if it exists."""
    shutil.rmtree(table_path(out, name), ignore_errors=True)


def table_is_empty(out: str | Path, name: str) -> bool:
    """Whether table ``name`` under ``out`` has no data file (a table ``write_split`` wrote no row to, or none)."""
    return next(Path(table_path(out, name)).rglob("*.parquet"), None) is None


def read_table(spark: SparkSession, out: str | Path, name: str, schema: StructType) -> DataFrame:
    """Read table ``name`` written by ``write_table``/``write_split``, with columns in ``schema`` order.

    An empty table reads as an empty DataFrame. Raises RunDatasetError when the table does not exist.
    """
    path = Path(table_path(out, name))
    if not path.exists():
        raise RunDatasetError(str(path), f"table {name!r} has not been written")
    if table_is_empty(out, name):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(str(path)).select(*schema.fieldNames())


class TableStore:
    """The tables of one analysis under ``out``: written as Parquet by ``put``, read back by ``get``.

    On disk (big inputs, or any cluster): Spark writes each table, and ``get`` reads its Parquet files, so a later
    step never holds what an earlier one computed. In memory (``in_memory``: small inputs on a local master): ``put``
    collects the table's rows to the driver as Arrow (one Spark job), writes them as Parquet from there
    (``write_arrow``: the same layout and rows) and keeps them; ``get`` returns them in one partition, in the
    table's schema. Every query of a small analysis then reads a few in-memory rows from a single partition: Spark
    plans it with no shuffle (one partition satisfies every grouping, join and ordering) and runs it as one stage of
    one task, instead of listing and opening Parquet files, exchanging a few rows between stages, and committing a
    write job per table. ``release`` drops what is kept (a JVM can run several analyses). Thread-safe: the
    analysis's concurrent chains call ``put`` and ``get``.
    """

    def __init__(self, spark: SparkSession, out: str | Path, *, in_memory: bool = False,
                 hold: Iterable[str] = ()) -> None:
        self.spark = spark
        self.out = Path(out)
        self.in_memory = in_memory
        #: in memory: the tables whose rows are also kept on the driver (``arrow``)
        self.hold = frozenset(hold)
        #: table name -> its path (what ``AnalysisResult.tables`` reports)
        self.paths: dict[str, str] = {}
        self._kept: dict[str, DataFrame] = {}
        self._rows: dict[str, pa.Table] = {}  # in memory: the rows of the tables in ``hold``, on the driver
        self._lock = threading.Lock()

    def put(self, name: str, df: DataFrame, partition_by: Iterable[str] = ("run_id",), *, one_file: bool = False) -> str:
        """Write ``df`` as table ``name`` (replacing it), partitioned by ``partition_by``; ``one_file``: written by one
        task (a small table: one file, or one per partition value). In memory, the table is kept too."""
        if self.in_memory:
            return self.put_arrow(name, df.coalesce(1).toArrow(), df.schema, partition_by)  # the table's one Spark job
        path = write_table(df.coalesce(1) if one_file else df, self.out, name, partition_by)
        with self._lock:
            self.paths[name] = path
        return path

    def put_arrow(self, name: str, rows: pa.Table, schema: StructType, partition_by: Iterable[str] = ("run_id",)) -> str:
        """In memory: table ``name`` (replacing it) from ``rows``, in ``schema`` (Spark's types of the Arrow columns),
        written as Parquet (``write_arrow``) and kept, with no Spark job. Raises PipelineError on disk."""
        if not self.in_memory:
            raise PipelineError(f"table {name!r}: a store on disk writes its tables with put()")
        path = write_arrow(rows, self.out, name, partition_by)
        # no rows: an empty Arrow table of ``schema``'s types, so every table takes the one (Arrow) path into the JVM
        kept = self.spark.createDataFrame(rows if rows.num_rows else arrow_table(schema, []))
        with self._lock:
            self.paths[name] = path
            self._kept[name] = kept.coalesce(1)
            if name in self.hold:
                self._rows[name] = rows
        return path

    def arrow(self, name: str) -> pa.Table | None:
        """In memory: the rows of table ``name`` (one of ``hold``) on the driver, as written (Arrow, in the types Spark
        gives its columns); None when the store is on disk, or the table is not held or not written. For steps whose
        work is the driver's anyway (planning the episodes from a few rows, sorting a table for the report): no Spark
        query to collect what the driver already has."""
        with self._lock:
            return self._rows.get(name)

    def written(self, name: str, path: str) -> None:
        """Record table ``name`` as written at ``path`` by other means (``write_split``, an append): on disk only."""
        if self.in_memory:
            raise PipelineError(f"table {name!r}: an in-memory store writes its tables with put()")
        with self._lock:
            self.paths[name] = path

    def get(self, name: str, schema: StructType | None = None) -> DataFrame:
        """Table ``name``, with ``schema``'s columns and types (None: as written). Raises RunDatasetError when it has
        not been written."""
        with self._lock:
            kept = self._kept.get(name)
        if kept is None:
            if schema is None:
                if not Path(table_path(self.out, name)).exists():
                    raise RunDatasetError(table_path(self.out, name), f"table {name!r} has not been written")
                return self.spark.read.parquet(table_path(self.out, name))
            return read_table(self.spark, self.out, name, schema)
        if schema is None:
            return kept
        have = {f.name: f.dataType.simpleString() for f in kept.schema.fields}
        differ = {f.name for f in schema.fields if have.get(f.name) != f.dataType.simpleString()}
        if not differ:
            return kept.select(*schema.fieldNames())  # one call: a column object each would cost a py4j round trip
        return kept.select(*[F.col(f.name).cast(f.dataType).alias(f.name) if f.name in differ else f.name
                             for f in schema.fields])

    def drop(self, name: str) -> None:
        """Remove table ``name`` (and the rows kept of it) if it exists."""
        with self._lock:
            self._kept.pop(name, None)
            self._rows.pop(name, None)
            self.paths.pop(name, None)
        drop_table(self.out, name)

    def release(self) -> None:
        """Let go of the rows kept in memory (the JVM frees them with the DataFrames); the tables on disk stay, and
        ``get`` reads them from there."""
        with self._lock:
            self._kept.clear()
            self._rows.clear()


def collect_all(queries: Mapping[str, DataFrame], workers: int = 2) -> dict[str, list[Row]]:
    """Collect every query of ``queries`` (name -> DataFrame, each a small result), ``workers`` at a time: a
    small query's time is mostly the driver's (planning, scheduling), so side by side they keep the cores busy.
    Returns name -> rows, in ``queries``' order; raises the first failure, after the others have ended."""
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="snekbed-collect") as pool:
        futures = {name: pool.submit(df.collect) for name, df in queries.items()}
    return {name: future.result() for name, future in futures.items()}


def write_files(out: str | Path, files: Mapping[str, bytes | str]) -> list[Path]:
    """Write report files (name relative to ``out`` -> content); return the paths written."""
    written = []
    for name, content in files.items():
        path = Path(out) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        written.append(path)
    return written
