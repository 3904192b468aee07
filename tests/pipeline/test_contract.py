"""The plain-Python contract: field tables and the reference validator (no Spark)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from contract import dataset as contract
from contract.dataset import Reason, validate_event, validate_record

KEY = "ab" * 32
OTHER = "cd" * 32


def event(kind: str, **fields) -> dict:
    base = {"v": 1, "event": kind, "run_id": "r1", "node": KEY, "node_name": "a", "mono_s": 1.5, "wall_ts": 1e9}
    base.update(fields)
    return base


VALID = {
    "node_started": dict(listen=[], variant="snek", version="0.1.0"),
    "peer_up": dict(port=1, peer=OTHER, link_class="lan"),
    "peer_down": dict(port=1, peer=OTHER, reason="timeout"),
    "handshake_failed": dict(reason="bad_capabilities", remote="10.0.0.3:7000"),
    "root_changed": dict(root=OTHER, root_seq=3, prev_root=None),
    "parent_changed": dict(parent=None, prev_parent=OTHER),
    "coords_changed": dict(coords=[1, 2]),
    "descending_changed": dict(descending=OTHER, prev=None),
    "bootstrap_sent": dict(seq=1_700_000_000_000, port=2),
    "bootstrap_accepted": dict(origin=OTHER, from_port=1, to_port=None),
    "bootstrap_rejected": dict(origin=OTHER, reason="replay"),
    "ping_result": dict(target=OTHER, mode="snek", received=True, rtt_ms=1.25, hops=3),
    "frame_dropped": dict(frame_type="traffic", reason="queue full", count=4),
    "frame_stats": dict(interval_s=10, direction="sent", frame_type="keepalive", link_class="lan", frames=3, bytes=30),
    "node_stopping": dict(reason="killed"),
}


def test_every_event_type_has_a_valid_example():
    assert set(VALID) == set(contract.EVENT_TYPES)
    for kind, fields in VALID.items():
        assert validate_event(json.dumps(event(kind, **fields)), "r1") is None, kind


def test_event_fields_are_the_union_with_one_kind_per_name():
    names = [f.name for f in contract.EVENT_FIELDS]
    assert len(names) == len(set(names))
    for fields in contract.EVENT_TYPES.values():
        for f in fields:
            assert f.name in names
    assert not {f.name for f in contract.COMMON_FIELDS} & set(names)


@pytest.mark.parametrize(
    "line, reason, message",
    [
        ("", Reason.BLANK, "blank line"),
        ("  \t", Reason.BLANK, "blank line"),
        ("{", Reason.NOT_JSON, "not valid JSON"),
        ('{"v": NaN}', Reason.NOT_JSON, "not valid JSON"),
        ('{"v":1} {"v":1}', Reason.NOT_JSON, "not valid JSON"),
        ("[1]", Reason.NOT_OBJECT, "not a JSON object"),
        ('"text"', Reason.NOT_OBJECT, "not a JSON object"),
        ('{"v": 1}', Reason.MISSING, "missing field 'event'"),
    ],
)
def test_line_level_reasons(line, reason, message):
    assert validate_event(line) == (reason, message)


@pytest.mark.parametrize(
    "changes, reason, field",
    [
        ({"node": None}, Reason.NULL, "node"),
        ({"node_name": None}, None, None),
        ({"mono_s": "1.5"}, Reason.WRONG_TYPE, "mono_s"),
        ({"mono_s": 2}, None, None),
        ({"v": 1.0}, Reason.WRONG_TYPE, "v"),
        ({"v": 2}, Reason.UNKNOWN_VERSION, None),
        ({"event": "teleported"}, Reason.UNKNOWN_EVENT, None),
        ({"event": 7}, Reason.WRONG_TYPE, "event"),
        ({"node": KEY.upper()}, Reason.BAD_VALUE, "node"),
        ({"run_id": "r2"}, Reason.RUN_MISMATCH, None),
        ({"port": "1"}, Reason.WRONG_TYPE, "port"),
        ({"port": 1 << 63}, Reason.WRONG_TYPE, "port"),
        ({"link_class": 5}, Reason.WRONG_TYPE, "link_class"),
        ({"peer": None}, Reason.NULL, "peer"),
        ({"extra": {"nested": [1, {"x": None}]}}, None, None),
    ],
)
def test_field_level_reasons(changes, reason, field):
    obj = event("peer_up", **VALID["peer_up"])
    obj.update(changes)
    got = validate_event(json.dumps(obj), "r1")
    if reason is None:
        assert got is None
    else:
        assert got[0] == reason
        if field:
            assert f"'{field}'" in got[1]


def test_absent_nullable_field_is_missing_not_null():
    obj = event("bootstrap_accepted", **VALID["bootstrap_accepted"])
    del obj["to_port"]
    assert validate_event(json.dumps(obj)) == (Reason.MISSING, "missing field 'to_port'")


def test_event_fields_are_checked_in_table_column_order():
    # frame_stats declares interval_s first, but link_class comes first in the table
    obj = event("frame_stats", **VALID["frame_stats"])
    obj["interval_s"] = "x"
    obj["link_class"] = None
    assert validate_event(json.dumps(obj)) == (Reason.NULL, "field 'link_class' must not be null")


def test_choices_and_finite_floats():
    obj = event("ping_result", **dict(VALID["ping_result"], mode="carrier-pigeon"))
    assert validate_event(json.dumps(obj))[0] == Reason.BAD_VALUE
    line = json.dumps(event("ping_result", **VALID["ping_result"])).replace('"rtt_ms": 1.25', '"rtt_ms": 1e400')
    assert validate_event(line) == (Reason.BAD_VALUE, "field 'rtt_ms' must be finite")


def test_repeated_key_keeps_the_last_value():
    line = json.dumps(event("node_stopping", reason="x"))[:-1] + ', "mono_s": "late"}'
    assert validate_event(line) == (Reason.WRONG_TYPE, "field 'mono_s' must be float")


def test_actions_and_pings_records():
    action = {"run_id": "r1", "mono_s": 3.0, "wall_ts": 1e9, "action": "kill_root", "target": "a",
              "detail": {"key": KEY}}
    assert validate_record(json.dumps(action), contract.ACTION_FIELDS, "r1") is None
    assert validate_record(json.dumps(dict(action, action="nuke")), contract.ACTION_FIELDS)[0] == Reason.BAD_VALUE
    ping = {"run_id": "r1", "sender": "a", "sender_key": KEY, "target": "b", "target_key": OTHER, "mode": "snek",
            "sent_mono_s": 1.0, "sent_wall_ts": 1e9, "received": False, "rtt_ms": None, "hops": None,
            "shortest_links": 2, "link_classes": ["lan", "wifi"]}
    assert validate_record(json.dumps(ping), contract.PING_FIELDS, "r1") is None
    assert validate_record(json.dumps(dict(ping, link_classes=["lan", None])), contract.PING_FIELDS)[0] == \
        Reason.WRONG_TYPE
    assert validate_record(json.dumps(ping), contract.PING_FIELDS, "r9")[0] == Reason.RUN_MISMATCH


def test_run_meta_model_checks_keys_and_literals():
    meta = {"run_id": "r", "backend": "inproc", "variant": "snek", "topology": "t", "clock": "virtual",
            "nodes": {"a": KEY}, "links": [{"a": "a", "b": "a", "class": "lan", "shaping_backend": "tc"}],
            "started_wall_ts": 1.0, "future_key": 1}
    parsed = contract.RunMeta.model_validate(meta)
    assert parsed.links[0].link_class == "lan"
    with pytest.raises(ValidationError):
        contract.RunMeta.model_validate(dict(meta, backend="vm"))
    with pytest.raises(ValidationError):
        contract.RunMeta.model_validate(dict(meta, nodes={"a": "xyz"}))


def test_class_mix_is_canonical():
    assert contract.class_mix(["wifi", "lan", "wifi"]) == "lan+wifi"
    assert contract.class_mix([]) == ""
