"""Big inputs: the rows of clean input files, parsed on the driver by Arrow's JSON reader and checked column by column.

At millions of event lines Spark's ingest costs some 10 s per million lines on two cores (numbering the lines,
``from_json`` of the 37-field schema, the fast path's checks, the Parquet write: docs/performance.md). Nearly every
file of a run is clean (every line valid), and for such a file the work is mechanical: Arrow's JSON reader (C++,
with the GIL released) parses a million lines in about 3 s of one core, and the contract's rules then hold or fail
for whole columns at a time. This module does that for the sources whose fields are all flat (the events and the
pings; ``supported``); any other file, whole, goes through Spark's ingest (``pipeline.jobs.ingest``) as before, so
what a line becomes never depends on which side read its file.

A file is taken only when every line is certain to become the row Spark's ingest would make of it, and to pass
``contract.dataset.validate_event`` / ``validate_record``:

* **its bytes**: no ``\\r`` (Spark's text reader also ends lines there), no backslash (no escape anywhere, so every
  string is its own bytes and a ``"`` always delimits one), no NUL, no ``NaN`` or ``Inf`` (Arrow's reader takes
  ``NaN``, ``Inf`` and ``Infinity`` as numbers, JSON does not), ASCII or valid UTF-8; a line longer than
  ``PLAIN_LINE`` bytes is parsed by ``clean_files.parse``, which refuses what comes near a limit of Spark's JSON
  parser (numbers and keys of 500 characters, nesting 500 deep, lines of 1 MiB);
* **one value per line**: Arrow's reader takes a line end inside a value as whitespace, so every line must start
  with ``{`` and end with ``}`` (``_line_problem`` says why that leaves no value spread over lines), and the reader
  must make exactly one row per line: row i is line i;
* **Arrow's reader**, given the table's schema: it refuses malformed JSON, a key given twice, a value of another JSON
  type than its column's (a number for a string, ``1.0`` or ``1e2`` for an integer, an integer beyond 64 bits, an
  array nested in a list), a raw control character in a string;
* **the columns**, the contract's rules for every row (``contract.dataset``'s tables, not a copy of them): ``v``, a
  known ``event``, the run directory's ``run_id``; every field its event requires is not null; hex keys are 64
  lowercase hex digits, floats finite, lists without a null, values among their ``choices``; no row carries a value
  for a field of another event (Spark's fast path would keep it; ``clean_files`` leaves such lines to Spark too);
* **a null in a nullable field** must be a key that is present (``"key": null``), not an absent one (a missing field):
  such rows' lines must hold ``"key":`` and exactly one ``{`` (no nested object, so it is the line's own key).

``rows`` returns None (``why_not`` says why) for any other file, and the caller hands it to Spark.
``tests/pipeline/test_arrow_ingest.py`` compares the rows with Spark's ingest for clean files and tricky values, and
checks that each line of the ingest's tricky corpus leaves its file to Spark or becomes the same row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from contract.dataset import COMMON_FIELDS, EVENT_FIELDS, EVENT_TYPES, SCHEMA_VERSION, Field
from pipeline import clean_files
from pipeline.errors import RunDatasetError

__all__ = ["PLAIN_LINE", "Left", "batch", "rows", "supported", "table", "why_not"]

#: Lines up to this many bytes hold no number, key or nesting near Spark's JSON parser's limits (``clean_files``
#: bounds them at 500); a longer line is parsed by ``clean_files.parse`` first.
PLAIN_LINE = 500
#: Arrow's reader parses in blocks of this many bytes, side by side on its threads (a line longer than half a block
#: is refused; clean_files.parse refuses lines of 1 MiB already).
_BLOCK = 4 << 20
_HEX = "^[0-9a-f]{64}$"
_META = ("file", "line_no", "line")


@dataclass(frozen=True)
class Left:
    """A file left to Spark's ingest, and why."""

    reason: str


def supported(source: str) -> bool:
    """Whether files of ``source`` (events|actions|pings) can be read here: every field is flat (no ``json`` value,
    which only Spark renders)."""
    return all(f.kind != "json" for f in clean_files.fields_of(source))


def rows(path: str | Path, run_id: str, source: str) -> pa.Table | None:
    """The rows of ``path`` (a file of ``source``, of run ``run_id``) as ``clean_files.table_schema(source)`` in
    Arrow, when every line is valid and sure to convert as Spark converts it; else None (the file is for Spark).
    Raises RunDatasetError when the file cannot be read."""
    got = why_not(path, run_id, source)
    return None if isinstance(got, Left) else got


def why_not(path: str | Path, run_id: str, source: str) -> pa.Table | Left:
    """``rows``, with the reason when the file is left to Spark."""
    return table([(_read(path), str(Path(path).resolve()))], run_id, source)


def batch(paths: Sequence[str | Path], run_id: str, source: str) -> tuple[pa.Table, dict[str, Left]]:
    """The rows of the files of ``paths`` (of ``source``, all of run ``run_id``) that are clean, in the order of
    ``paths``, and the others (resolved path -> why). The files are parsed and checked together (one call of Arrow's
    reader, which parses on its own threads, and one check per rule); when some file is not clean, each is then
    taken or left on its own. Raises RunDatasetError when a file cannot be read."""
    parts = [(_read(p), str(Path(p).resolve())) for p in paths]
    got = table(parts, run_id, source)
    if not isinstance(got, Left):
        return got, {}
    tables, left = [], {}
    for part in parts:
        alone = table([part], run_id, source)
        if isinstance(alone, Left):
            left[part[1]] = alone
        else:
            tables.append(alone)
    return (pa.concat_tables(tables) if tables else clean_files.arrow_schema(source).empty_table()), left


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise RunDatasetError(str(path), f"cannot read: {exc.strerror or exc}") from None


def table(parts: Sequence[tuple[bytes, str]], run_id: str, source: str) -> pa.Table | Left:
    """The rows of files given as (bytes, path as the table records it), all of run ``run_id``, or why not (for
    the first problem found in any of them)."""
    if not supported(source):
        return Left(f"{source} has json fields")
    schema = clean_files.arrow_schema(source)
    parts = [(data, file) for data, file in parts if data]  # an empty file has no line
    if not parts:
        return schema.empty_table()
    data = b"".join(d if d.endswith(b"\n") else d + b"\n" for d, _ in parts) if len(parts) > 1 else parts[0][0]
    bad = _bytes_problem(data)
    if bad:
        return Left(bad)
    offsets = _line_offsets(data)
    n = len(offsets) - 1
    bad = _line_problem(data, offsets)
    if bad:
        return Left(bad)
    lengths = np.diff(offsets)
    if lengths.max() >= _BLOCK // 2:
        return Left("a line longer than half a block")
    for i in np.flatnonzero(lengths > PLAIN_LINE):
        try:
            clean_files.parse(data[offsets[i]:offsets[i + 1]].decode("utf-8"))
        except clean_files.Unsure as exc:
            return Left(f"a line: {exc}")
        except (ValueError, RecursionError):
            return Left("a line: not JSON")
    columns = [f for f in schema if f.name not in _META]
    try:
        parsed = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=True, block_size=_BLOCK),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema(columns), unexpected_field_behavior="ignore",
                                          newlines_in_values=False),
        )
    except pa.ArrowInvalid as exc:
        return Left(f"Arrow's reader: {str(exc).splitlines()[0]}")
    if parsed.num_rows != n:
        return Left(f"{parsed.num_rows} rows for {n} lines")
    lines = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    bad = _events_problem(parsed, lines, run_id) if source == "events" else _records_problem(parsed, lines, run_id,
                                                                                             source)
    if bad:
        return Left(bad)
    # each part ends with a line end in ``data``: its lines are the offsets within it
    ends = np.cumsum([len(d) + (not d.endswith(b"\n")) for d, _ in parts])
    per_part = np.diff(np.searchsorted(offsets[:-1], np.concatenate(([0], ends))))
    first = np.repeat(np.cumsum(per_part) - per_part, per_part)
    extra = {"file": pc.take(pa.array([file for _, file in parts], pa.string()),
                             pa.array(np.repeat(np.arange(len(parts)), per_part))),
             "line_no": pa.array(np.arange(n, dtype=np.int64) - first + 1),
             "line": pa.nulls(n, pa.string())}
    return pa.table([extra[f.name] if f.name in extra else parsed.column(f.name) for f in schema], schema=schema)


def _bytes_problem(data: bytes) -> str | None:
    if b"\r" in data:
        return "a \\r"
    if b"\\" in data:
        return "an escape"
    if b"\x00" in data:
        return "a NUL byte"
    # memchr first: the capitals are rare in event logs, the words rarer still. Arrow's parser (RapidJSON) takes
    # NaN, Inf and Infinity, with a sign or not, as numbers; JSON has none of them
    if (b"N" in data and b"NaN" in data) or (b"I" in data and b"Inf" in data):
        return "NaN or Inf"
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return "not UTF-8"
    return None


def _line_problem(data: bytes, offsets: np.ndarray) -> str | None:
    """Whether each line may not hold exactly one JSON value: every line must start with ``{`` and end with ``}``
    (trailing spaces and tabs aside). Arrow's reader takes a line end inside a value as whitespace, so it alone
    cannot tell a value spread over two lines from two lines. But in valid JSON a ``}`` that does not end the value
    is followed by ``,``, ``}`` or ``]``, never by the ``{`` that starts the next line (nor by the end of the input):
    so every line ends its value, and ``table`` then counts one row per line (a line with two values would make one
    row too many, and no line makes none). A raw line end inside a string is refused by the reader itself."""
    raw = np.frombuffer(data, np.uint8)
    if not (raw[offsets[:-1]] == ord("{")).all():
        return "a line does not start with {"
    last = offsets[1:] - 1
    last -= raw[last] == ord("\n")  # the line's last byte before its end, if it has one
    odd = np.flatnonzero(raw[last] != ord("}"))
    if len(odd) and not all(data[offsets[i]:last[i] + 1].rstrip(b" \t").endswith(b"}") for i in odd):
        return "a line does not end with }"
    return None


def _line_offsets(data: bytes) -> np.ndarray:
    """Where each line starts, and the end: line i is ``data[o[i]:o[i + 1]]`` with its ``\\n``."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n")) + 1
    if ends.size and ends[-1] == len(data):
        return np.concatenate(([0], ends)).astype(np.int64)
    return np.concatenate(([0], ends, [len(data)])).astype(np.int64)


def _any(mask: pa.ChunkedArray | pa.Array) -> bool:
    return bool(pc.any(mask).as_py())


def _field_problem(col: pa.ChunkedArray, f: Field, rows: pa.ChunkedArray | None, lines: pa.LargeStringArray,
                   ) -> str | None:  # fmt: skip
    """The rules of ``f`` on ``col``, for the rows where ``rows`` is true (None: every row)."""
    null = pc.is_null(col)
    where_null = null if rows is None else pc.and_(rows, null)
    if not f.nullable and _any(where_null):
        return f"{f.name}: missing or null"
    if f.nullable and _any(where_null):
        # a nullable key must be present: the line holds "key": and no nested object that could hold it instead
        sub = pc.filter(lines, where_null)
        if not pc.all(pc.match_substring_regex(sub, f'"{f.name}"[ \\t]*:')).as_py():
            return f"{f.name}: missing"
        if not pc.all(pc.equal(pc.count_substring(sub, "{"), 1)).as_py():
            return f"{f.name}: null, in a line with a nested object"
    if f.choices is not None:
        outside = pc.invert(pc.is_in(col, value_set=pa.array(f.choices, pa.string())))
        if _any(pc.and_(pc.is_valid(col), outside if rows is None else pc.and_(rows, outside))):
            return f"{f.name}: a value not in its choices"
    return None


def _kind_problem(col: pa.ChunkedArray, f: Field) -> str | None:
    """The rules of ``f``'s kind on every value of ``col`` (whichever row holds it)."""
    if f.kind == "hex":
        keys = pc.unique(col.drop_null())
        if len(keys) and not pc.all(pc.match_substring_regex(keys, _HEX)).as_py():
            return f"{f.name}: not 64 lowercase hex digits"
    elif f.kind == "float":
        if not pc.all(pc.is_finite(col)).as_py() in (True, None):
            return f"{f.name}: not finite"
        zeros = col.filter(pc.equal(col, 0.0))
        if len(zeros) and np.signbit(zeros.to_numpy()).any():
            # "-0" is the integer 0 to Spark (0.0) but -0.0 to Arrow, "-0.0" is -0.0 to both: the text decides
            return f"{f.name}: a negative zero"
    elif f.kind in ("[int]", "[str]"):
        if pc.list_flatten(col).null_count:
            return f"{f.name}: a null in a list"
    return None


def _run_problem(parsed: pa.Table, run_id: str) -> str | None:
    if not pc.all(pc.equal(parsed.column("run_id"), run_id)).as_py():
        return "run_id: not the run's"
    return None


def _records_problem(parsed: pa.Table, lines: pa.LargeStringArray, run_id: str, source: str) -> str | None:
    for f in clean_files.fields_of(source):
        col = parsed.column(f.name)
        bad = _field_problem(col, f, None, lines) or _kind_problem(col, f)
        if bad:
            return bad
    return _run_problem(parsed, run_id)


def _events_problem(parsed: pa.Table, lines: pa.LargeStringArray, run_id: str) -> str | None:
    for f in COMMON_FIELDS:
        col = parsed.column(f.name)
        bad = _field_problem(col, f, None, lines) or _kind_problem(col, f)
        if bad:
            return bad
    if not pc.all(pc.equal(parsed.column("v"), SCHEMA_VERSION)).as_py():
        return "v: not the schema version"
    event = parsed.column("event")
    if not pc.all(pc.is_in(event, value_set=pa.array(list(EVENT_TYPES), pa.string()))).as_py():
        return "event: unknown"
    bad = _run_problem(parsed, run_id)
    if bad:
        return bad
    present = set(pc.unique(event).to_pylist())
    of_event = {e: pc.equal(event, e) for e in present}
    for e in present:
        for f in EVENT_TYPES[e]:
            bad = _field_problem(parsed.column(f.name), f, of_event[e], lines)
            if bad:
                return f"{e}: {bad}"
    for union in EVENT_FIELDS:
        col = parsed.column(union.name)
        if col.null_count == len(col):
            continue
        owners = [e for e in present if any(f.name == union.name for f in EVENT_TYPES[e])]
        if not owners or _any(pc.and_(pc.is_valid(col), pc.invert(pc.is_in(event, value_set=pa.array(owners))))):
            return f"{union.name}: a value in a row of another event"
        bad = _kind_problem(col, union)
        if bad:
            return bad
    return None
