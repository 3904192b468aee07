"""The analysis's tables and files under its output directory: Parquet written by Spark or from Arrow rows, read
back, staged parts, and the table store (``TableStore``: on disk, or kept in memory for a small input).

Jobs (``pipeline.jobs``) never touch storage; they take and return DataFrames. This module turns DataFrames (and
the driver's Arrow rows) into Parquet tables, tables back into DataFrames, and writes the report's files.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from pipeline.errors import PipelineError, RunDatasetError

__all__ = ["TableStore", "add_parts", "arrow_table", "drop_table", "read_table", "staging_dir",
           "table_is_empty", "table_path", "write_arrow", "write_arrow_part", "write_files", "write_split",
           "write_table"]


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


def arrow_table(schema: StructType, rows: Sequence[tuple]) -> pa.Table:
    """``rows`` (tuples in ``schema``'s column order) as an Arrow table of the types Spark gives ``schema``'s columns."""
    target = to_arrow_schema(schema)
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(target.names)}, schema=target)

