"""The contract's rules as Spark SQL expressions (text), for the ingest job.

Plain Python, no Spark: every function returns SQL text that ``ingest``
hands to ``F.expr`` once. Building a few large expressions from text is much
cheaper than building them from thousands of py4j Column calls.

Column conventions of the ingest plan: ``line`` (the raw line), one column per
contract field (from ``from_json``), ``__dir_run_id`` (the run directory's
run_id), ``__v`` (the line as a VARIANT, slow path only), ``__s`` (the line
with strings blanked and whitespace dropped, slow path only), ``__t_<field>``
(the JSON type of the field's value: NULL if absent, 'VOID' if null) and
``__x_<field>`` (the field read from the VARIANT).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contract.dataset import COMMON_FIELDS, EVENT_FIELDS, EVENT_TYPES, SCHEMA_VERSION, Field, Reason

__all__ = [
    "Check", "lit", "fast_field_ok", "fast_prelude", "event_fast_ok", "records_fast_ok", "tag", "vvalue",
    "field_checks", "prelude_checks", "event_checks", "records_checks", "verdict", "message", "slow_fields",
    "ONE_VALUE", "STRIPPED", "HEX_RE",
]

HEX_RE = "^[0-9a-f]{64}$"
# from_json turns any JSON value into a string for a string field: 5 -> "5",
# true -> "true", [1] -> "[1]". A string that cannot be such a rendering was a
# JSON string; one that could be is checked against the raw line.
TOKEN_LIKE = r"^(-?[0-9][0-9.eE+-]*|true|false|null|\[.*)$"
HEX_FAST = r"^(?=[0-9]*[a-f])[0-9a-f]{64}$"  # a 64-digit number would render as all digits
_VARIANT_TYPES = {
    "int": "bigint", "float": "double", "bool": "boolean", "str": "string", "hex": "string",
    "[int]": "array<bigint>", "[str]": "array<string>", "json": "string",
}

#: The line with every JSON string replaced by "" and whitespace removed.
STRIPPED = r"""regexp_replace(regexp_replace(line, '"(?:[^"\\\\]|\\\\.)*"', '""'), '\\s+', '')"""

#: True iff ``__s`` (STRIPPED) holds exactly one JSON value: its brackets close for the first
#: time at its last character (or it is a scalar).
ONE_VALUE = r"""
CASE WHEN substr(__s, 1, 1) IN ('{', '[') THEN
  aggregate(split(__s, ''), named_struct('d', 0, 'ended', false, 'bad', false),
    (acc, c) -> named_struct(
      'd', acc.d + CASE WHEN c IN ('{', '[') THEN 1 WHEN c IN ('}', ']') THEN -1 ELSE 0 END,
      'ended', acc.ended OR acc.d + CASE WHEN c IN ('{', '[') THEN 1 WHEN c IN ('}', ']') THEN -1 ELSE 0 END = 0,
      'bad', acc.bad OR acc.ended),
    acc -> acc.ended AND NOT acc.bad)
ELSE __s RLIKE '^(""|-?[0-9][0-9.eE+-]*|true|false|null)$' END
"""


def lit(text: str) -> str:
    """A Spark SQL string literal (backslash and quote escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _c(name: str) -> str:
    return f"`{name}`"


def _any(parts: Sequence[str]) -> str:
    return "(" + " OR ".join(parts) + ")"


def _all(parts: Sequence[str]) -> str:
    return "(" + " AND ".join(parts) + ")" if parts else "true"


# --------------------------------------------------------------------------- fast path


def _raw_starts(name: str, texts: Sequence[str]) -> str:
    """The line has top-level key ``name`` and its value's text starts with one of ``texts``
    (after optional spaces). Needs the flat-object rule of ``fast_prelude`` (so the first
    ``"name":`` is the top-level key); costs two scans of the line, so it only runs where a
    cheaper test is not conclusive."""
    key = lit(f'"{name}":')
    width = max(len(t) for t in texts) + 3
    after = f"ltrim(substr(line, instr(line, {key}) + {len(name) + 3}, {width}))"
    return _all([f"instr(line, {key}) > 0", _any([f"startswith({after}, {lit(t)})" for t in texts])])


def fast_field_ok(f: Field) -> str:
    """Sufficient condition for field ``f`` (as from_json read it) to meet the contract."""
    v = _c(f.name)
    if f.kind == "float":
        ok = f"({v} IS NOT NULL AND NOT isnan({v}) AND abs({v}) != CAST('Infinity' AS DOUBLE))"
    elif f.kind in ("int", "bool") or (f.kind == "str" and f.choices is not None):
        ok = f"({v} IS NOT NULL)"  # strict in from_json / no rendering of a non-string is a choice
    elif f.kind == "str":
        ok = _all([f"{v} IS NOT NULL", _any([f"NOT {v} RLIKE {lit(TOKEN_LIKE)}", _raw_starts(f.name, ['"'])])])
    elif f.kind == "hex":
        ok = _any([f"{v} RLIKE {lit(HEX_FAST)}", _all([f"{v} RLIKE {lit(HEX_RE)}", _raw_starts(f.name, ['"'])])])
    elif f.kind == "[int]":
        ok = f"({v} IS NOT NULL AND NOT exists({v}, x -> x IS NULL))"
    elif f.kind == "[str]":  # Spark would coerce [1] to ["1"]: only the empty list is taken on trust
        ok = _all([f"size({v}) = 0", _raw_starts(f.name, ["[]"])])
    else:  # json: always checked on the slow path
        ok = "false"
    if f.choices is not None:
        ok = _all([ok, f"{v} IN ({', '.join(lit(c) for c in f.choices)})"])
    if f.nullable:  # null: the key must be there (absent is a different verdict)
        null = _any([f"contains(line, {lit(chr(34) + f.name + chr(34) + ':null')})",
                     f"contains(line, {lit(chr(34) + f.name + chr(34) + ': null')})"])
        ok = f"(CASE WHEN {v} IS NULL THEN {null} ELSE {ok} END)"
    return ok


def fast_prelude() -> str:
    """One flat JSON object: starts with '{' and its only '}' is the last character (so there is
    no nested object and nothing after the object). One regex: cheaper than ``instr``, which
    counts characters as it goes, or than trimming, which copies the line."""
    return r"(line RLIKE '^\\{[^}]*\\}$')"


def event_fast_ok() -> str:
    # ``event`` is checked by the CASE over the known events: no rendering of a non-string is one.
    common = [fast_prelude()] + [fast_field_ok(f) if f.name != "event" else "event IS NOT NULL"
                                 for f in COMMON_FIELDS]
    common += [f"v = {SCHEMA_VERSION}", "run_id = __dir_run_id"]
    cases = " ".join(f"WHEN {lit(name)} THEN {_all([fast_field_ok(f) for f in fields])}"
                     for name, fields in EVENT_TYPES.items())
    return _all(common + [f"(CASE event {cases} ELSE false END)"])


def records_fast_ok(fields: Sequence[Field]) -> str:
    return _all([fast_prelude()] + [fast_field_ok(f) for f in fields] + ["run_id = __dir_run_id"])


# --------------------------------------------------------------------------- slow path


@dataclass(frozen=True)
class Check:
    """A slow-path check: when ``cond`` holds, the line is quarantined with ``reason`` and
    ``message`` (+ the value of ``suffix`` when given)."""

    cond: str
    reason: str
    message: str
    suffix: str | None = None


def tag(f: Field) -> str:
    return f"schema_of_variant(variant_get(__v, {lit('$.' + f.name)}))"


def vvalue(f: Field) -> str:
    return f"try_variant_get(__v, {lit('$.' + f.name)}, {lit(_VARIANT_TYPES[f.kind])})"


def _wrong_kind(kind: str, t: str) -> str:
    allowed = {
        "int": ("BIGINT",), "bool": ("BOOLEAN",), "str": ("STRING",), "hex": ("STRING",),
        "[int]": ("ARRAY<BIGINT>", "ARRAY<VOID>"), "[str]": ("ARRAY<STRING>", "ARRAY<VOID>"),
    }
    if kind == "float":
        return f"NOT ({t} IN ('BIGINT', 'DOUBLE') OR startswith({t}, 'DECIMAL'))"
    if kind == "json":
        return "false"
    return f"NOT {t} IN ({', '.join(lit(a) for a in allowed[kind])})"


def field_checks(f: Field, when: str | None = None) -> list[Check]:
    """The checks of one field, in contract order, on the VARIANT columns."""
    t, x = _c(f"__t_{f.name}"), _c(f"__x_{f.name}")
    present = f"({t} IS NOT NULL AND {t} != 'VOID')"
    checks = [Check(f"{t} IS NULL", Reason.MISSING, f"missing field '{f.name}'")]
    if not f.nullable:
        checks.append(Check(f"{t} = 'VOID'", Reason.NULL, f"field '{f.name}' must not be null"))
    checks.append(Check(f"{present} AND {_wrong_kind(f.kind, t)}", Reason.WRONG_TYPE,
                        f"field '{f.name}' must be {f.kind}, got ", t))
    if f.kind == "float":
        checks.append(Check(f"{present} AND (isnan({x}) OR abs({x}) = CAST('Infinity' AS DOUBLE))",
                            Reason.BAD_VALUE, f"field '{f.name}' must be finite"))
    if f.kind in ("[int]", "[str]"):
        checks.append(Check(f"{present} AND exists({x}, e -> e IS NULL)", Reason.WRONG_TYPE,
                            f"field '{f.name}' must be {f.kind}, got an array with nulls"))
    if f.kind == "hex":
        checks.append(Check(f"{present} AND NOT {x} RLIKE {lit(HEX_RE)}", Reason.BAD_VALUE,
                            f"field '{f.name}' must be 64 lowercase hex digits"))
    if f.choices is not None:
        checks.append(Check(f"{present} AND NOT {x} IN ({', '.join(lit(c) for c in f.choices)})", Reason.BAD_VALUE,
                            f"field '{f.name}' must be one of {', '.join(f.choices)}"))
    if when is None:
        return checks
    return [Check(f"({when}) AND {c.cond}", c.reason, c.message, c.suffix) for c in checks]


def prelude_checks() -> list[Check]:
    return [
        Check(r"line RLIKE '^\\s*$'", Reason.BLANK, "blank line"),
        Check("__v IS NULL", Reason.NOT_JSON, "not valid JSON"),
        Check(f"NOT ({ONE_VALUE})", Reason.NOT_JSON, "not valid JSON (more after the first value)"),
        Check(r"NOT line RLIKE '^\\s*\\{'", Reason.NOT_OBJECT, "not a JSON object"),
    ]


_QUOTE = lit("'")


def _run_check() -> Check:
    return Check("`__x_run_id` != __dir_run_id", Reason.RUN_MISMATCH, "run_id does not match the run directory's: ",
                 f"concat({_QUOTE}, `__x_run_id`, {lit(chr(39) + ' vs meta.json ' + chr(39))}, __dir_run_id, {_QUOTE})")


def event_checks() -> list[Check]:
    """Every event-line check after the prelude, in contract order."""
    checks = [c for f in COMMON_FIELDS for c in field_checks(f)]
    checks.append(Check(f"`__x_v` != {SCHEMA_VERSION}", Reason.UNKNOWN_VERSION, "unknown schema version ",
                        "CAST(`__x_v` AS STRING)"))
    checks.append(Check(f"NOT `__x_event` IN ({', '.join(lit(e) for e in EVENT_TYPES)})", Reason.UNKNOWN_EVENT,
                        "unknown event ", f"concat({_QUOTE}, `__x_event`, {_QUOTE})"))
    checks.append(_run_check())
    # One set of checks per distinct definition of a field (frame_type has two), in column order.
    for column in EVENT_FIELDS:
        defs: dict[Field, list[str]] = {}
        for name, fields in EVENT_TYPES.items():
            for f in fields:
                if f.name == column.name:
                    defs.setdefault(f, []).append(name)
        for f, events in defs.items():
            checks += field_checks(f, when=f"`__x_event` IN ({', '.join(lit(e) for e in events)})")
    return checks


def records_checks(fields: Sequence[Field]) -> list[Check]:
    return [c for f in fields for c in field_checks(f)] + [_run_check()]


def slow_fields(fields: Sequence[Field], per_event: bool) -> dict[str, str | None]:
    """Field name -> condition under which its VARIANT tag/value is read (None: always)."""
    if not per_event:
        return {f.name: None for f in fields}
    out: dict[str, str | None] = {f.name: None for f in COMMON_FIELDS}
    event = "try_variant_get(__v, '$.event', 'string')"
    for column in EVENT_FIELDS:
        names = [n for n, fs in EVENT_TYPES.items() if any(f.name == column.name for f in fs)]
        out[column.name] = f"{event} IN ({', '.join(lit(n) for n in names)})"
    return out


def verdict(checks: Sequence[Check]) -> str:
    """struct(r, m, i) of the first failing check; null when ``__fast_ok`` or when none fails.

    Each verdict is a constant struct, which keeps the generated code small."""
    whens = " ".join(
        f"WHEN {c.cond} THEN named_struct('r', {lit(c.reason)}, 'm', {lit(c.message)}, 'i', {i})"
        for i, c in enumerate(checks)
    )
    return f"CASE WHEN __fast_ok THEN NULL ELSE (CASE {whens} END) END"


def message(checks: Sequence[Check], col: str = "__verdict") -> str:
    """The verdict's message, with the dynamic suffix of the check that failed."""
    suffixes = " ".join(f"WHEN {i} THEN {c.suffix}" for i, c in enumerate(checks) if c.suffix is not None)
    if not suffixes:
        return f"{col}.m"
    return f"concat({col}.m, coalesce(CASE {col}.i {suffixes} END, ''))"
