"""The Spark session the pipeline runs on, tuned for its input: JVM flags, Spark settings, small or big inputs.

``get_spark`` starts (or joins) the session; a small input on a local master (``SMALL_INPUT_BYTES``) gets a JVM and
settings for a few dozen tiny queries (``SMALL_JVM_FLAGS``, ``SMALL_CORE``, ``SMALL_SQL``), any other the throughput
collector (``BIG_JVM_FLAGS``). Every session reads each input file whole, in one task
(``line_reads.ONE_FILE_PER_TASK``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from pipeline.errors import SparkSetupError
from pipeline.line_reads import ONE_FILE_PER_TASK

__all__ = ["BIG_JVM_FLAGS", "JIT_FLAGS", "METASPACE_FLAGS", "SMALL_CORE", "SMALL_INPUT_BYTES", "SMALL_JVM_FLAGS",
           "SMALL_SQL", "get_spark"]


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
    else:
        if _on_loopback(master):  # a standalone master on this machine (``snekbed spark up``): so are its workers
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the Python workers run this interpreter
            settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
        if shuffle_partitions:
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


def _on_loopback(master: str | None) -> bool:
    """Whether ``master`` is a standalone master on this machine's loopback (``spark://127.0.0.1:PORT``)."""
    return master is not None and master.startswith(("spark://127.0.0.1:", "spark://localhost:"))


def _local_cores(master: str) -> int:
    inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    if inner.startswith("*") or not inner.split(",")[0].isdigit():
        return os.cpu_count() or 1
    return max(1, int(inner.split(",")[0]))

