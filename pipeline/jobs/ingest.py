"""Ingest: JSON lines -> typed rows, or quarantined rows with a reason.

Every line gets exactly one verdict, with the rules of
``contract.dataset.validate_event`` / ``validate_record`` (the pure-Python
oracle the tests compare against). There are no Python UDFs; two paths run
in the JVM:

* fast path, for every line: ``from_json`` with the typed schema plus cheap
  checks that together are *sufficient* for validity: the line is one flat
  object (starts with ``{``, its only ``}`` is the last character), every
  required value parsed with its type (Spark's JSON reader is strict for
  numbers and booleans), each string value appears verbatim as
  ``"key":"value"`` in the line (so it was a JSON string, not a number that
  Spark coerced), each null is a literal ``"key":null`` (so the key is
  present), hex keys match ``[0-9a-f]{64}``, enums are known, ``v`` is 1 and
  ``run_id`` is the run directory's.
* slow path, only for lines the fast path did not accept: the line is parsed
  into a VARIANT, which tells absent from null and a string from a number,
  and the checks run in contract order; the first failure names the reason:
  blank line, JSON (including trailing data after the value), object, common
  fields (missing, null, wrong type, bad value), ``v``, ``event``, ``run_id``,
  per-event fields. A line the slow path finds valid is accepted (e.g. pretty
  spacing, escaped strings, nested extra fields).

``validate_*`` returns every input line with the typed columns plus
``REASON``/``MESSAGE`` (null when valid); ``accepted`` and ``quarantined``
split the result into the table schemas.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from pipeline import schemas
from contract.dataset import ACTION_FIELDS, COMMON_FIELDS, EVENT_FIELDS, PING_FIELDS, Field
from pipeline.errors import JobInputError
from pipeline.jobs import rules

__all__ = [
    "triage_events",
    "triage_actions",
    "triage_pings",
    "TRIAGE",
    "validate_events",
    "validate_actions",
    "validate_pings",
    "accepted",
    "quarantined",
    "line_reconciliation",
    "REASON",
    "MESSAGE",
]

#: Verdict columns of a ``validate_*`` result (null on valid lines). Named so
#: they cannot clash with event fields such as ``reason``.
REASON, MESSAGE = "quarantine_reason", "quarantine_message"
#: The ``triage_events`` column: "accepted" (valid, final) or "suspect" (needs ``validate_events``).
TRIAGE = "ingest"
# from_json fills this when any value failed to convert (e.g. 1.5 or "1" for a long), even when a
# later duplicate key supplied a value: such lines always take the slow path.
_CORRUPT = "__corrupt_record"
_EVENT_FIELDS = list(COMMON_FIELDS) + list(EVENT_FIELDS)


def _require(df: DataFrame, job: str) -> None:
    missing = [c for c in ("run_id", "file", "line_no", "line") if c not in df.columns]
    if missing:
        raise JobInputError(job, f"input lacks columns {missing} (expected schemas.LINES_SCHEMA)")


def _parse(lines: DataFrame, fields: list[Field], fast_ok: str) -> DataFrame:
    """Fast path: typed fields via from_json, and ``__fast_ok`` = the fast checks passed."""
    json_schema = StructType([StructField(f.name, schemas.spark_type(f.kind), True) for f in fields]
                             + [StructField(_CORRUPT, StringType(), True)])
    parsed = lines.select(
        F.col("run_id").alias("__dir_run_id"), "file", "line_no", "line",
        F.from_json("line", json_schema, {"columnNameOfCorruptRecord": _CORRUPT}).alias("__j"),
    ).selectExpr("__dir_run_id", "file", "line_no", "line", *[f"__j.`{f.name}` AS `{f.name}`" for f in fields],
                 f"__j.{_CORRUPT} IS NULL AS __clean")
    return parsed.selectExpr("*", f"coalesce(__clean AND {fast_ok}, false) AS __fast_ok")


def _judge(parsed: DataFrame, fields: list[Field], checks: list[rules.Check], table: StructType,
           per_event: bool) -> DataFrame:
    """Slow path on the lines ``_parse`` did not accept; the verdict of every line."""
    slow = parsed.selectExpr(
        "*", "CASE WHEN NOT __fast_ok THEN try_parse_json(line) END AS __v",
        f"CASE WHEN NOT __fast_ok THEN {rules.STRIPPED} END AS __s",
    )
    by_name = {f.name: f for f in fields}
    exprs = []
    for name, cond in rules.slow_fields(fields, per_event).items():
        t, x = rules.tag(by_name[name]), rules.vvalue(by_name[name])
        exprs.append(f"{t if cond is None else f'CASE WHEN {cond} THEN {t} END'} AS `__t_{name}`")
        exprs.append(f"{x if cond is None else f'CASE WHEN {cond} THEN {x} END'} AS `__x_{name}`")
    tagged = slow.selectExpr("*", *exprs)
    checks = rules.prelude_checks() + checks
    judged = tagged.selectExpr("*", f"{rules.verdict(checks)} AS __verdict")
    judged = judged.selectExpr("*", "__verdict.r AS __reason", f"{rules.message(checks)} AS __message")
    json_value = {f.name: f"CASE WHEN NOT is_variant_null(variant_get(__v, '$.{f.name}')) "
                          f"THEN to_json(variant_get(__v, '$.{f.name}')) END"
                  for f in fields if f.kind == "json"}
    out = [c for c in table.fieldNames() if c not in ("run_id", "file", "line_no")]
    return judged.selectExpr(
        "__dir_run_id AS run_id", *[f"{json_value.get(c, f'`{c}`')} AS `{c}`" for c in out], "file", "line_no",
        "CASE WHEN __reason IS NOT NULL THEN line END AS line",
        f"__reason AS {REASON}", f"__message AS {MESSAGE}",
    )


def triage_events(lines: DataFrame) -> DataFrame:
    """lines -> EVENTS_SCHEMA + ``line`` (kept for suspects only) + ``TRIAGE`` ("accepted" | "suspect").

    The fast path alone, for big inputs: "accepted" rows are valid and final;
    "suspect" rows must go through ``validate_events`` (which accepts some and
    quarantines the rest). Splitting the work keeps the per-line code small.
    Raises JobInputError when ``lines`` lacks a column.
    """
    _require(lines, "ingest.triage_events")
    return _triage(_parse(lines, _EVENT_FIELDS, rules.event_fast_ok()), schemas.EVENTS_SCHEMA)


def triage_actions(lines: DataFrame) -> DataFrame:
    """lines -> ACTIONS_SCHEMA + ``line`` + ``TRIAGE``: ``triage_events`` for actions (suspects: ``validate_actions``)."""
    _require(lines, "ingest.triage_actions")
    return _triage(_parse(lines, list(ACTION_FIELDS), rules.records_fast_ok(ACTION_FIELDS)), schemas.ACTIONS_SCHEMA)


def triage_pings(lines: DataFrame) -> DataFrame:
    """lines -> PINGS_SCHEMA + ``line`` + ``TRIAGE``: ``triage_events`` for pings (suspects: ``validate_pings``)."""
    _require(lines, "ingest.triage_pings")
    return _triage(_parse(lines, list(PING_FIELDS), rules.records_fast_ok(PING_FIELDS)), schemas.PINGS_SCHEMA)


def _triage(parsed: DataFrame, table: StructType) -> DataFrame:
    out = [c for c in table.fieldNames() if c not in ("run_id", "file", "line_no")]
    return parsed.selectExpr(
        "__dir_run_id AS run_id", *[f"CASE WHEN __fast_ok THEN `{c}` END AS `{c}`" for c in out], "file", "line_no",
        "CASE WHEN NOT __fast_ok THEN line END AS line",
        f"CASE WHEN __fast_ok THEN 'accepted' ELSE 'suspect' END AS {TRIAGE}",
    )


def validate_events(lines: DataFrame) -> DataFrame:
    """lines (schemas.LINES_SCHEMA) -> EVENTS_SCHEMA + ``line`` (kept for bad lines) + ``REASON``, ``MESSAGE``.

    Raises JobInputError when ``lines`` lacks a column.
    """
    _require(lines, "ingest.validate_events")
    parsed = _parse(lines, _EVENT_FIELDS, rules.event_fast_ok())
    return _judge(parsed, _EVENT_FIELDS, rules.event_checks(), schemas.EVENTS_SCHEMA, per_event=True)


def _validate_records(lines: DataFrame, fields: tuple[Field, ...], table: StructType, job: str) -> DataFrame:
    _require(lines, job)
    parsed = _parse(lines, list(fields), rules.records_fast_ok(fields))
    return _judge(parsed, list(fields), rules.records_checks(fields), table, per_event=False)


def validate_actions(lines: DataFrame) -> DataFrame:
    """lines -> ACTIONS_SCHEMA + ``line``, ``REASON``, ``MESSAGE``. Raises JobInputError."""
    return _validate_records(lines, ACTION_FIELDS, schemas.ACTIONS_SCHEMA, "ingest.validate_actions")


def validate_pings(lines: DataFrame) -> DataFrame:
    """lines -> PINGS_SCHEMA + ``line``, ``REASON``, ``MESSAGE``. Raises JobInputError."""
    return _validate_records(lines, PING_FIELDS, schemas.PINGS_SCHEMA, "ingest.validate_pings")


def accepted(validated: DataFrame, schema: StructType) -> DataFrame:
    """The valid rows of a ``validate_*`` result, in ``schema`` (EVENTS/ACTIONS/PINGS_SCHEMA)."""
    return validated.where(F.col(REASON).isNull()).select(*schema.fieldNames())


def quarantined(validated: DataFrame, source: str) -> DataFrame:
    """The invalid rows of a ``validate_*`` result as QUARANTINE_SCHEMA, tagged with ``source``."""
    return validated.where(F.col(REASON).isNotNull()).select(
        "run_id", F.lit(source).alias("source"), "file", "line_no",
        F.col(REASON).alias("reason"), F.col(MESSAGE).alias("message"), "line",
    )


def line_reconciliation(counts: DataFrame, accepted_rows: DataFrame, quarantine: DataFrame) -> DataFrame:
    """Per input file: lines counted before parsing vs rows accepted + quarantined.

    counts: LINE_COUNTS_SCHEMA; accepted_rows: rows with (run_id, source, file) (the accepted
    tables unioned, with a source column); quarantine: QUARANTINE_SCHEMA.
    -> RECONCILIATION_SCHEMA, ``ok`` = lines == parsed + quarantined.
    """
    keys = ["run_id", "source", "file"]
    parsed = accepted_rows.groupBy(*keys).agg(F.count("*").alias("parsed"))
    bad = quarantine.groupBy(*keys).agg(F.count("*").alias("quarantined"))
    joined = counts.join(parsed, keys, "full_outer").join(bad, keys, "full_outer").select(
        *keys, *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in ("lines", "parsed", "quarantined")]
    )
    return joined.withColumn("ok", F.col("lines") == F.col("parsed") + F.col("quarantined")).orderBy(*keys)
