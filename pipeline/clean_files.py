"""Small inputs: the rows of clean input files, built on the driver with the contract's own validator.

An analysis kept in memory (a small input on a local master, ``io.TableStore``) spends most of its ingest on
Spark's first queries in a cold JVM: a few thousand lines, and seconds of class loading, planning of the
validation's large expressions and interpreted execution. Yet nearly every file of a real run is clean: each
of its lines is valid. For such a file this module builds the table rows in Python, as Arrow, and Spark only
receives them; any other file goes through Spark's ingest (``pipeline.jobs.ingest``) exactly as before.

A file is taken here only when every line is certain to become the same row Spark's ingest would make of it:

* the bytes decode as UTF-8 and hold no ``\\r`` (Spark's text reader also ends lines at ``\\r``); the lines are
  then what ``io.read_lines`` reads, numbered from 1, and as many as ``io.count_lines`` counts;
* ``contract.dataset.validate_event`` / ``validate_record`` accepts every line (they are the rules the Spark
  ingest implements, and its tests compare the two);
* no line repeats a key, carries a field of the events table that its own event does not have (Spark's fast
  path would keep it), or has a string that is not valid Unicode (a lone surrogate escape);
* no line comes near a limit of Spark's JSON parser (Jackson refuses a number of more than 1000 characters and
  values nested more than 1000 deep; here 500 is the bound, and 1 MiB for a line), nor of Python's (a nesting
  deeper than ``json`` can recurse);
* every value converts as Spark converts it: numbers of a ``float`` field parse to the same double (both are
  correctly rounded; an integer above 2**63 is left to Spark), and a ``json`` field is rendered as Spark's
  ``to_json`` renders the value parsed as a VARIANT (``spark_json``: keys sorted by UTF-16 code units, as Java
  sorts strings; numbers as parsed; compact), for the values whose rendering this module knows (no number with an
  exponent, at most 38 digits, no control character but tab and newline in a string); any other value leaves the
  file to Spark.

``rows`` returns None for any other file, and the caller hands it to Spark: nothing is decided here that Spark
would decide otherwise. ``tests/pipeline/test_clean_files.py`` compares ``spark_json`` with Spark's rendering,
and whole tables built both ways.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Context, Decimal
from pathlib import Path

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from contract.dataset import (
    ACTION_FIELDS,
    COMMON_FIELDS,
    EVENT_FIELDS,
    EVENT_TYPES,
    PING_FIELDS,
    Field,
    validate_event,
    validate_record,
)
from pipeline import schemas
from pipeline.errors import RunDatasetError

__all__ = ["arrow_schema", "fields_of", "parse", "rows", "spark_json", "table_schema", "Unsure"]

#: Spark's VARIANT keeps a number without an exponent as a decimal of at most this many digits (then a double).
_DECIMAL_DIGITS = 38
#: Spark's JSON parser (Jackson, with Spark's JSONOptions) refuses a number of more than 1000 characters, values
#: nested more than 1000 deep, a key of more than 50 000 characters and a string of more than 20 M characters: a line
#: near any of these limits is left to Spark (which quarantines it as not_json), with a margin.
_LONGEST_TOKEN = 500
_DEEPEST = 500
_LONGEST_LINE = 1 << 20
_WIDE = Context(prec=200)
_INT64 = range(-(1 << 63), 1 << 63)
_EVENT_KEYS = frozenset(f.name for f in EVENT_FIELDS)
_OWN_KEYS = {name: frozenset(f.name for f in (*COMMON_FIELDS, *fields)) for name, fields in EVENT_TYPES.items()}


class Unsure(ValueError):
    """A line or value whose Spark form this module does not reproduce: its file goes to Spark's ingest."""


class _NumberText(str):
    """A JSON number with a fraction or an exponent, as written (json.loads' ``parse_float``)."""


def _float_text(text: str) -> _NumberText:
    if len(text) > _LONGEST_TOKEN:
        raise Unsure("a number longer than Spark's JSON parser reads")
    return _NumberText(text)


def _int(text: str) -> int:
    if len(text) > _LONGEST_TOKEN:
        raise Unsure("a number longer than Spark's JSON parser reads")
    return int(text)


def _object(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise Unsure("a repeated key")
    if any(len(k) > _LONGEST_TOKEN for k in obj):
        raise Unsure("a key longer than Spark's JSON parser reads")
    return obj


def _refuse_constant(name: str) -> object:
    raise Unsure(f"{name} is not JSON")


def parse(line: str) -> object:
    """``line`` parsed as ``spark_json`` needs it: numbers with a fraction or an exponent kept as written. Raises
    ValueError when it is not JSON, Unsure when an object repeats a key."""
    if len(line) > _LONGEST_LINE:
        raise Unsure("a line longer than Spark's JSON parser reads")
    if line.count("[") + line.count("{") > _DEEPEST:
        _nesting_ok(line)
    return json.loads(line, parse_float=_float_text, parse_int=_int, object_pairs_hook=_object,
                      parse_constant=_refuse_constant)


def _nesting_ok(line: str) -> None:
    """Raise Unsure when the brackets of ``line`` (outside strings) nest deeper than ``_DEEPEST``."""
    depth, in_string, escaped = 0, False, False
    for c in line:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > _DEEPEST:
                raise Unsure("values nested deeper than Spark's JSON parser reads")
        elif c in "]}":
            depth -= 1


def _string(text: str) -> str:
    if any(c < " " and c not in "\t\n" for c in text):
        raise Unsure("a control character in a json value")
    return json.dumps(text, ensure_ascii=False)


def spark_json(value: object) -> str:
    """``value`` (as ``parse`` gives it) as Spark's ``to_json`` renders the same JSON parsed as a VARIANT: compact,
    object keys sorted (by UTF-16 code units), an integer as written, a decimal number without its trailing zeros
    (``1.50`` -> ``1.5``, ``100.0`` -> ``100``). Raises Unsure for a value Spark renders otherwise than this function
    knows (a number with an exponent or more than 38 digits: Spark makes it a double)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, _NumberText):
        if "e" in value or "E" in value:
            raise Unsure(f"number {value} has an exponent")
        d = Decimal(value)
        digits, exponent = d.as_tuple()[1:]
        if len(digits) > _DECIMAL_DIGITS or -int(exponent) > _DECIMAL_DIGITS:
            raise Unsure(f"number {value} has more than {_DECIMAL_DIGITS} digits")
        return "0" if d == 0 else format(d.normalize(_WIDE), "f")
    if isinstance(value, int):
        if abs(value) >= 10**_DECIMAL_DIGITS:
            raise Unsure(f"number {value} has more than {_DECIMAL_DIGITS} digits")
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(spark_json(v) for v in value) + "]"
    if isinstance(value, dict):
        # Spark's VARIANT sorts an object's keys as Java strings: by UTF-16 code units, not by code points
        return "{" + ",".join(f"{_string(k)}:{spark_json(value[k])}" for k in sorted(value, key=_utf16)) + "}"
    raise Unsure(f"a value of type {type(value).__name__}")


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _float(value: object) -> float:
    if isinstance(value, int) and value not in _INT64:
        raise Unsure("an integer above 2**63 in a float field")
    return float(value)  # type: ignore[arg-type]


def _convert(f: Field) -> Callable[[object], object]:
    if f.kind == "float":
        return _float
    if f.kind == "json":
        return spark_json
    return lambda v: v  # int, bool, str, hex and the lists: the validator checked their types


def fields_of(source: str) -> tuple[Field, ...]:
    """The contract's fields of a line of ``source`` (events|actions|pings), in the table's column order."""
    return {"events": (*COMMON_FIELDS, *EVENT_FIELDS), "actions": ACTION_FIELDS, "pings": PING_FIELDS}[source]


def table_schema(source: str) -> StructType:
    """The schema of the rows ``rows`` builds: the table's (schemas.EVENTS/ACTIONS/PINGS_SCHEMA), and for the
    events the ``line`` column the events table keeps (null on every accepted row)."""
    if source == "events":
        return StructType([*schemas.EVENTS_SCHEMA.fields, StructField("line", StringType(), True)])
    return {"actions": schemas.ACTIONS_SCHEMA, "pings": schemas.PINGS_SCHEMA}[source]


def arrow_schema(source: str) -> pa.Schema:
    """``table_schema(source)`` as Arrow: the schema of the tables ``rows`` returns."""
    return to_arrow_schema(table_schema(source))


def rows(path: str | Path, run_id: str, source: str) -> pa.Table | None:
    """The rows of ``path`` (a file of ``source``: events|actions|pings, of run ``run_id``) as an Arrow table in
    ``table_schema(source)``, when every line is valid and sure to convert as Spark converts it; else None (the
    file is for Spark's ingest). Raises RunDatasetError when the file cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RunDatasetError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if b"\r" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last line's end, or an empty file
    fields = fields_of(source)
    convert = [(f.name, _convert(f)) for f in fields]
    columns: dict[str, list] = {f.name: [] for f in fields}
    try:
        for line in lines:
            verdict = validate_event(line, run_id) if source == "events" else validate_record(line, fields, run_id)
            if verdict is not None:
                return None
            obj = parse(line)
            if source == "events" and not (obj.keys() & _EVENT_KEYS) <= _OWN_KEYS[obj["event"]]:
                return None  # another event's field: Spark's fast path would keep its value
            if "\\u" in line:
                json.dumps(obj, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be encoded
            for name, conv in convert:
                value = obj.get(name)
                columns[name].append(None if value is None else conv(value))
    # RecursionError: nesting deeper than Python's json parses; OverflowError: an integer no double holds
    except (Unsure, UnicodeEncodeError, RecursionError, OverflowError):
        return None
    n = len(lines)
    columns["file"] = [str(Path(path).resolve())] * n
    columns["line_no"] = list(range(1, n + 1))
    if source == "events":
        columns["line"] = [None] * n
    schema = arrow_schema(source)
    return pa.table({name: columns[name] for name in schema.names}, schema=schema)
