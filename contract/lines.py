"""The run-dataset contract's JSON lines as plain Python data (no pyspark, no pydantic needed).

:mod:`contract.dataset` re-exports every name here next to the ``meta.json`` / ``topology.json``
models (pydantic); a node imports this module, not that one, so that it never loads pydantic (about
8-9 MiB of a node's memory: docs/performance.md, "A node's memory").

A run directory holds ``meta.json``, ``topology.json``, ``events/*.jsonl``,
``actions.jsonl`` and ``pings.jsonl``. This module is the single source of
truth for what each JSON line may contain: the recorder (``snekbed sim
--record``), the node's event logger and the Spark schemas in
``pipeline.schemas`` are all derived from, or checked against, these tables.
Frame type names (the ``frame_type`` field) come from :mod:`contract.frames`.
Human-readable version: ``docs/run-dataset.md`` and ``docs/events.md``.

Field kinds (``Field.kind``):

``int``    a JSON integer (no fraction, no exponent), stored as 64-bit
``float``  any finite JSON number
``bool``   ``true`` / ``false``
``str``    a JSON string
``hex``    a JSON string of exactly 64 lowercase hex digits (an ed25519 public key)
``[int]``  a JSON array of integers; ``[str]`` a JSON array of strings
``json``   any JSON value (stored as its JSON text)

``nullable`` means the key must be present but its value may be ``null``.
Unknown extra keys are always tolerated (forward compatibility).

``validate_event`` is a pure-Python reference validator with exactly the
rules the Spark ingest job applies; tests use it as an oracle, and a
recorder may use it to check what it writes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from contract.frames import FRAME_TYPE_NAMES

__all__ = [
    "SCHEMA_VERSION",
    "Field",
    "FIELD_KINDS",
    "COMMON_FIELDS",
    "EVENT_TYPES",
    "EVENT_FIELDS",
    "PING_MODES",
    "DIRECTIONS",
    "ACTION_FIELDS",
    "ACTIONS",
    "DISRUPTIVE_ACTIONS",
    "PING_FIELDS",
    "META_FIELDS",
    "META_BACKENDS",
    "META_CLOCKS",
    "RUN_FILES",
    "Reason",
    "validate_event",
    "validate_record",
]

SCHEMA_VERSION = 1

FIELD_KINDS = ("int", "float", "bool", "str", "hex", "[int]", "[str]", "json")


@dataclass(frozen=True, slots=True)
class Field:
    """One JSON key: its name, kind (see module doc), nullability and allowed values."""

    name: str
    kind: str
    nullable: bool = False
    choices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FIELD_KINDS:
            raise ValueError(f"field {self.name!r}: unknown kind {self.kind!r}")


PING_MODES = ("snek", "tree")
DIRECTIONS = ("sent", "received")

COMMON_FIELDS: tuple[Field, ...] = (
    Field("v", "int"),
    Field("event", "str"),
    Field("run_id", "str"),
    Field("node", "hex"),
    Field("node_name", "str", nullable=True),
    Field("mono_s", "float"),
    Field("wall_ts", "float"),
)

EVENT_TYPES: dict[str, tuple[Field, ...]] = {
    "node_started": (Field("listen", "[str]"), Field("variant", "str"), Field("version", "str")),
    "peer_up": (Field("port", "int"), Field("peer", "hex"), Field("link_class", "str")),
    "peer_down": (Field("port", "int"), Field("peer", "hex"), Field("reason", "str")),
    # a connection refused at the handshake (§3.2): reason as in snek_handshake_failures_total
    # (bad_capabilities when the two nodes run variants that cannot peer), remote = address or node name
    "handshake_failed": (Field("reason", "str"), Field("remote", "str")),
    "root_changed": (Field("root", "hex"), Field("root_seq", "int"), Field("prev_root", "hex", nullable=True)),
    "parent_changed": (Field("parent", "hex", nullable=True), Field("prev_parent", "hex", nullable=True)),
    "coords_changed": (Field("coords", "[int]"),),
    "descending_changed": (Field("descending", "hex", nullable=True), Field("prev", "hex", nullable=True)),
    "bootstrap_sent": (Field("seq", "int"), Field("port", "int")),
    "bootstrap_accepted": (Field("origin", "hex"), Field("from_port", "int"), Field("to_port", "int", nullable=True)),
    "bootstrap_rejected": (Field("origin", "hex"), Field("reason", "str")),
    "ping_result": (
        Field("target", "hex"),
        Field("mode", "str", choices=PING_MODES),
        Field("received", "bool"),
        Field("rtt_ms", "float", nullable=True),
        Field("hops", "int", nullable=True),
    ),
    "frame_dropped": (Field("frame_type", "str"), Field("reason", "str"), Field("count", "int")),
    "frame_stats": (
        Field("interval_s", "float"),
        Field("direction", "str", choices=DIRECTIONS),
        Field("frame_type", "str", choices=FRAME_TYPE_NAMES),
        Field("link_class", "str"),
        Field("frames", "int"),
        Field("bytes", "int"),
    ),
    "node_stopping": (Field("reason", "str"),),
}


def _union_fields(groups: list[tuple[Field, ...]]) -> tuple[Field, ...]:
    """All distinct field names in first-seen order; a name must keep one kind everywhere."""
    seen: dict[str, Field] = {}
    for group in groups:
        for f in group:
            old = seen.get(f.name)
            if old is None:
                seen[f.name] = Field(f.name, f.kind, nullable=True)
            elif old.kind != f.kind:
                raise ValueError(f"field {f.name!r} has kinds {old.kind!r} and {f.kind!r}")
    return tuple(seen.values())


#: Every per-event field, once, as it appears in the flat (wide) events table.
EVENT_FIELDS: tuple[Field, ...] = _union_fields(list(EVENT_TYPES.values()))

# An event's own fields are checked in EVENT_FIELDS (table column) order.
_CHECK_ORDER: dict[str, tuple[Field, ...]] = {
    name: tuple(sorted(fields, key=lambda f: [e.name for e in EVENT_FIELDS].index(f.name)))
    for name, fields in EVENT_TYPES.items()
}

ACTIONS = (
    "up", "converged", "kill", "kill_root", "restart", "partition", "heal",
    "link_down", "link_up", "link_change", "ping", "down",
    "pause", "resume", "join", "adversary", "step", "mobility",
    "link_shaped", "shaping_unapplied",
)
DISRUPTIVE_ACTIONS = (
    "kill", "kill_root", "partition", "heal", "link_down", "link_up", "link_change",
    "pause", "resume", "join", "adversary",
)

ACTION_FIELDS: tuple[Field, ...] = (
    Field("run_id", "str"),
    Field("mono_s", "float"),
    Field("wall_ts", "float"),
    Field("action", "str", choices=ACTIONS),
    Field("target", "str", nullable=True),
    Field("detail", "json", nullable=True),
)

PING_FIELDS: tuple[Field, ...] = (
    Field("run_id", "str"),
    Field("sender", "str"),
    Field("sender_key", "hex"),
    Field("target", "str"),
    Field("target_key", "hex"),
    Field("mode", "str", choices=PING_MODES),
    Field("sent_mono_s", "float"),
    Field("sent_wall_ts", "float"),
    Field("received", "bool"),
    Field("rtt_ms", "float", nullable=True),
    Field("hops", "int", nullable=True),
    Field("shortest_links", "int", nullable=True),
    Field("link_classes", "[str]"),
)

META_BACKENDS = ("inproc", "docker", "compose")
META_CLOCKS = ("virtual", "real")

#: meta.json keys: name -> short description (validated in pipeline.rundirs when a run is read).
META_FIELDS: dict[str, str] = {
    "run_id": "str: unique id of the run; every line of the run carries it",
    "backend": "str: one of " + ", ".join(META_BACKENDS),
    "variant": "str: protocol variant (e.g. 'snek')",
    "topology": "str: topology name",
    "seed": "int|null: seed of the run",
    "clock": "str: 'virtual' (in-process autojump clock) or 'real'",
    "link_delay_ms": "float|null: default one-way link delay",
    "boot_spread_s": "float|null: in-process runs: nodes booted a random time up to this long before the links came up",
    "nodes": "object: node name -> public key hex",
    "links": "array of {a, b, class, shaping_backend}",
    "versions": "object: component -> version string",
    "started_wall_ts": "float: unix time the run started",
    "observer": "object: free-form, what the orchestrator itself measured",
    "variants": "object|absent: node name -> variant spec, for nodes that run another spec than `variant`",
    "ab": "object|absent: {experiment, arm ('a'|'b'|'mixed'), seed, a, b}: the run is one arm of an A/B experiment "
          "(mixed: A's and B's nodes together)",
    "mobility": "object|absent: {model, tick_s, duration_s, radios: {name: {range_m, class, hysteresis}}}: the run's "
                "nodes moved (docs/mobility.md); its positions and radio link changes are in mobility.jsonl",
}

RUN_FILES = ("meta.json", "topology.json", "events/*.jsonl", "actions.jsonl", "pings.jsonl")

_HEX_KEY = re.compile(r"[0-9a-f]{64}")


class Reason:
    """Quarantine reason codes (the ``reason`` column); the ``message`` column says more."""

    BLANK = "blank_line"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING = "missing_field"
    NULL = "null_field"
    WRONG_TYPE = "wrong_type"
    BAD_VALUE = "bad_value"
    UNKNOWN_VERSION = "unknown_version"
    UNKNOWN_EVENT = "unknown_event"
    RUN_MISMATCH = "run_id_mismatch"

    ALL = (BLANK, NOT_JSON, NOT_OBJECT, MISSING, NULL, WRONG_TYPE, BAD_VALUE, UNKNOWN_VERSION, UNKNOWN_EVENT, RUN_MISMATCH)


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _loads(line: str) -> object:
    """Strict JSON as the Spark ingest reads it: no NaN/Infinity; a repeated key keeps its last value."""
    return json.loads(line, parse_constant=_no_constants)


_INT64 = range(-(1 << 63), 1 << 63)
_BLANK = re.compile(r"[ \t\n\x0b\f\r]*")


def _finite(value: int | float) -> bool:
    """Finite as a double: an integer too large for one (some 309 digits) is read as infinity, as Spark reads it."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _kind_ok(kind: str, value: object) -> bool:
    if kind == "int":
        return type(value) is int and value in _INT64
    if kind == "float":
        return type(value) in (int, float) and _finite(value)  # type: ignore[arg-type]
    if kind == "bool":
        return type(value) is bool
    if kind in ("str", "hex"):
        return type(value) is str
    if kind == "[int]":
        return type(value) is list and all(type(x) is int and x in _INT64 for x in value)
    if kind == "[str]":
        return type(value) is list and all(type(x) is str for x in value)
    return True  # json


def _check_fields(obj: dict, fields: tuple[Field, ...]) -> tuple[str, str] | None:
    for f in fields:
        if f.name not in obj:
            return Reason.MISSING, f"missing field '{f.name}'"
        value = obj[f.name]
        if value is None:
            if f.nullable:
                continue
            return Reason.NULL, f"field '{f.name}' must not be null"
        if not _kind_ok(f.kind, value):
            if f.kind == "float" and type(value) in (int, float):
                return Reason.BAD_VALUE, f"field '{f.name}' must be finite"
            return Reason.WRONG_TYPE, f"field '{f.name}' must be {f.kind}"
        if f.kind == "hex" and not _HEX_KEY.fullmatch(value):  # type: ignore[arg-type]
            return Reason.BAD_VALUE, f"field '{f.name}' must be 64 lowercase hex digits"
        if f.choices is not None and value not in f.choices:
            return Reason.BAD_VALUE, f"field '{f.name}' must be one of {', '.join(f.choices)}"
    return None


def _parse_object(line: str) -> dict | tuple[str, str]:
    """The line as a JSON object, or the ``(reason, message)`` of the first prelude check it fails."""
    if _BLANK.fullmatch(line):
        return Reason.BLANK, "blank line"
    try:
        obj = _loads(line)
    except ValueError:
        return Reason.NOT_JSON, "not valid JSON"
    if not isinstance(obj, dict):
        return Reason.NOT_OBJECT, "not a JSON object"
    return obj


def validate_record(line: str, fields: tuple[Field, ...], run_id: str | None = None) -> tuple[str, str] | None:
    """Check one actions/pings line; return ``(reason, message)`` or None when valid."""
    obj = _parse_object(line)
    if isinstance(obj, tuple):
        return obj
    bad = _check_fields(obj, fields)
    if bad is None and run_id is not None and obj.get("run_id") != run_id:
        return Reason.RUN_MISMATCH, f"run_id does not match meta.json ({run_id})"
    return bad


def validate_event(line: str, run_id: str | None = None) -> tuple[str, str] | None:
    """Check one event-log line; return ``(reason, message)`` or None when valid.

    The order of the checks (and so which reason wins when several apply) is
    the one the Spark ingest uses: blank, JSON, object, common fields in
    ``COMMON_FIELDS`` order, ``v``, ``event``, run id, per-event fields.
    """
    obj = _parse_object(line)
    if isinstance(obj, tuple):
        return obj
    bad = _check_fields(obj, COMMON_FIELDS)
    if bad is not None:
        return bad
    if obj["v"] != SCHEMA_VERSION:
        return Reason.UNKNOWN_VERSION, f"unknown schema version {obj['v']}"
    if obj["event"] not in EVENT_TYPES:
        return Reason.UNKNOWN_EVENT, f"unknown event '{obj['event']}'"
    if run_id is not None and obj["run_id"] != run_id:
        return Reason.RUN_MISMATCH, f"run_id does not match meta.json ({run_id})"
    return _check_fields(obj, _CHECK_ORDER[obj["event"]])
