"""The ingest's plan: which reader takes each input file, as plain data, decided before a line is read.

Three sources of input lines (``SOURCES``: the event logs, actions.jsonl, pings.jsonl), each file read whole by one
of two readers:

* **Arrow**, on the driver: the file's lines become table rows as Arrow, with no Spark job. ``clean_files`` (the
  contract's validator, line by line) when the tables are kept in memory (a small input), ``arrow_ingest`` (Arrow's
  JSON reader, a batch of one run's files at a time) on disk. Either takes a file only when every line is certain
  to be valid and to become Spark's row of it, and it can tell only by parsing the file, which is the reading
  itself: so the plan gives such files to Arrow *first* (``DriverBatch``), and a file the reader refuses goes to
  Spark then, with its reason (``ingest_exec``);
* **Spark** (``ToSpark``, with the reason): Spark's ingest (``pipeline.jobs.ingest``), the fast path, then the full
  check of its suspect lines. That check is where quarantine happens: a line that fails it becomes a row of the
  ``quarantine`` table (its reason and text), the file's other lines are accepted. Quarantine is a verdict on a
  line of a file Spark reads, never a route for a whole file.

``plan`` decides from the mode, the source and the file's size only (no file is opened); ``ingest_exec.execute``
carries the plan out. The plan is the same for the same inputs, so tests can check the routes without Spark.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import arrow_ingest
from pipeline.line_reads import ReadLayout, read_layout
from pipeline.rundirs import RunDir

__all__ = ["ARROW_BATCH_BYTES", "ARROW_FILE_BYTES", "ARROW_INGEST", "CLEAN_FILES", "SOURCES", "DriverBatch",
           "InputFile", "IngestPlan", "SourcePlan", "ToSpark", "plan"]

#: The sources of input lines, in the order the ingest reads them (and counts their lines).
SOURCES = ("events", "actions", "pings")
#: The driver's readers (``SourcePlan.reader``).
CLEAN_FILES = "clean_files"
ARROW_INGEST = "arrow_ingest"
#: Bytes of input files whose Arrow rows (``arrow_ingest``, on disk) are written as one Parquet file: big enough that
#: a big input makes few files (each of Spark's scans opens every one), small enough that the batches in flight (one
#: per job thread) stay within the driver's memory (a batch takes some 3 times its bytes: the bytes, a joined copy,
#: the rows).
ARROW_BATCH_BYTES = 64 << 20
#: A file larger than this is left to Spark's ingest, which streams it: the driver would hold it whole, three times.
ARROW_FILE_BYTES = 4 * ARROW_BATCH_BYTES


@dataclass(frozen=True)
class InputFile:
    """An input file: its resolved path (each file once: a symbolic link to another input file does not read its
    lines twice), the run_id of its run directory, and its size in bytes."""

    path: Path
    run_id: str
    size: int


@dataclass(frozen=True)
class DriverBatch:
    """Files the driver reads together, in this order, and writes as one part (``index`` names it): on disk one run's
    files up to ``ARROW_BATCH_BYTES``, in memory every file of the source. A file its reader refuses goes to Spark."""

    index: int
    files: tuple[InputFile, ...]


@dataclass(frozen=True)
class ToSpark:
    """A file Spark's ingest reads from the start, and why the driver does not."""

    file: InputFile
    reason: str


@dataclass(frozen=True)
class SourcePlan:
    """One source's files (``files``: all of them, in the order of the run directories and their files): those
    offered to the driver's ``reader`` (``CLEAN_FILES``, ``ARROW_INGEST``; None when it is offered none), in batches,
    and those Spark reads."""

    source: str
    files: tuple[InputFile, ...]
    reader: str | None
    driver: tuple[DriverBatch, ...]
    spark: tuple[ToSpark, ...]

    def run_of(self, paths: Iterable[Path] | None = None) -> dict[Path, str]:
        """path -> run_id of ``paths`` (in their order; default: every file of the source, in ``files``' order)."""
        run_id = {f.path: f.run_id for f in self.files}
        return {p: run_id[p] for p in (run_id if paths is None else paths)}


@dataclass(frozen=True)
class IngestPlan:
    """The ingest of an analysis: the tables kept in memory or not, each source's plan, and the one layout of every
    Spark read (``line_reads.read_layout`` of all the input files: the queries that consume the reads are planned, and
    laid out, after all of them)."""

    in_memory: bool
    sources: tuple[SourcePlan, ...]
    layout: ReadLayout


def plan(runs: Sequence[RunDir], *, in_memory: bool, arrow_reads: bool) -> IngestPlan:
    """Which reader takes each input file of ``runs``. ``in_memory``: the tables are kept in memory (a small input on a
    local master), and ``clean_files`` is offered every file; else, with ``arrow_reads`` (a local master), Arrow's
    reader is offered the files of the sources it reads (``arrow_ingest.supported``) up to ``ARROW_FILE_BYTES``, and
    Spark reads the others; without, Spark reads every file. Raises OSError for a file that cannot be sized."""
    files = _input_files(runs)
    layout = read_layout([f.size for source in SOURCES for f in files[source]])
    return IngestPlan(in_memory, tuple(_source_plan(s, files[s], in_memory, arrow_reads) for s in SOURCES), layout)


def _input_files(runs: Sequence[RunDir]) -> dict[str, list[InputFile]]:
    """Each source's files, once each by resolved path (the last run naming a path owns it, at its first place)."""

    def once(pairs: Iterable[tuple[Path, str]]) -> list[InputFile]:
        by_path = {Path(f).resolve(): run_id for f, run_id in pairs}
        return [InputFile(path, run_id, os.path.getsize(path)) for path, run_id in by_path.items()]

    return {
        "events": once((f, r.run_id) for r in runs for f in r.event_files),
        "actions": once((r.actions_file, r.run_id) for r in runs),
        "pings": once((r.pings_file, r.run_id) for r in runs),
    }


def _source_plan(source: str, files: list[InputFile], in_memory: bool, arrow_reads: bool) -> SourcePlan:
    every = tuple(files)
    if in_memory:  # a small input: every file offered to clean_files, one after another
        driver = (DriverBatch(0, tuple(files)),) if files else ()
        return SourcePlan(source, every, CLEAN_FILES, driver, ())
    if not arrow_reads:
        return SourcePlan(source, every, None, (), tuple(ToSpark(f, "Spark reads every file") for f in files))
    if not arrow_ingest.supported(source):
        why = f"{source}: a json value, which only Spark renders"
        return SourcePlan(source, every, None, (), tuple(ToSpark(f, why) for f in files))
    batches: list[list[InputFile]] = []
    big, room = [], 0
    for f in sorted(files, key=lambda f: (f.run_id, str(f.path))):
        if f.size > ARROW_FILE_BYTES:
            big.append(ToSpark(f, f"{f.size} bytes: Spark's ingest streams a file this large"))
            continue
        if not batches or batches[-1][0].run_id != f.run_id or f.size > room:  # a batch holds one run's files
            batches.append([])
            room = ARROW_BATCH_BYTES
        batches[-1].append(f)
        room -= f.size
    return SourcePlan(source, every, ARROW_INGEST, tuple(DriverBatch(i, tuple(b)) for i, b in enumerate(batches)),
                      tuple(big))
