"""The ingest job agrees with the plain-Python contract on every line, and keeps every line."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.sql import functions as F

from contract import dataset as contract
from pipeline import line_reads, rundirs, schemas
from contract.dataset import Reason
from pipeline.jobs import ingest
from tests.pipeline.conftest import assert_frames_equal, gen_events
from tests.pipeline.test_contract import KEY, OTHER, VALID, event

pytestmark = pytest.mark.spark


def tricky_lines() -> list[str]:
    """Valid lines in unusual spellings, and invalid lines of every kind."""
    out = []
    for kind, fields in VALID.items():
        obj = event(kind, **fields)
        out.append(json.dumps(obj, separators=(",", ":")))  # compact, as the recorder writes
        out.append(json.dumps(obj))  # ", " and ": " separators
        shuffled = list(obj.items())
        random.Random(kind).shuffle(shuffled)
        out.append(json.dumps(dict(shuffled), indent=None) + "  ")  # other key order, trailing spaces
        out.append(json.dumps(dict(obj, extra={"nested": {"deep": [1, "}"]}})))  # unknown nested field
    odd = event("node_started", listen=["tcp://[::1]:1"], variant="snek", version="0.1.0", node_name="né")
    out.append(json.dumps(odd))  # non-empty [str], escaped unicode
    out.append(json.dumps(odd, ensure_ascii=False))
    out.append(json.dumps(event("node_stopping", reason='say "}"')))  # quote and brace inside a string
    bad = [
        "", "   ", "not json", "{", '{"v":1}{"v":1}', '{"v":1} trailing', "[1, 2]", "42", '"text"',
        '{"v": NaN, "event": "x"}', '{"v": 1, "event": "peer_up"}',
        json.dumps(event("peer_up", port="1", peer=OTHER, link_class="lan")),
        json.dumps(event("peer_up", port=1.5, peer=OTHER, link_class="lan")),
        json.dumps(event("peer_up", port=1, peer=OTHER, link_class=7)),
        json.dumps(event("peer_up", port=1, peer=OTHER, link_class=["lan"])),
        json.dumps(event("peer_up", port=1, peer=OTHER, link_class=True)),
        json.dumps(event("peer_up", port=1, peer="1" * 64, link_class="lan")).replace(f'"{"1" * 64}"', "1" * 64),
        json.dumps(event("peer_up", port=1, peer=KEY.upper(), link_class="lan")),
        json.dumps(event("peer_up", port=1, peer=None, link_class="lan")),
        json.dumps(event("peer_up", port=1, link_class="lan")),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), run_id=5)),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), run_id="r9")),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), v=2)),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), event="warp")),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), mono_s="soon")),
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), mono_s=10**400)),  # no double holds it
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), node_name=3)),
        json.dumps(event("bootstrap_accepted", origin=OTHER, from_port=1)),  # to_port absent, not null
        json.dumps(event("bootstrap_accepted", origin=OTHER, from_port=1, to_port=2.5)),
        json.dumps(event("ping_result", target=OTHER, mode="smoke", received=True, rtt_ms=1.0, hops=2)),
        json.dumps(event("ping_result", target=OTHER, mode="snek", received="yes", rtt_ms=1.0, hops=2)),
        json.dumps(event("ping_result", target=OTHER, mode="snek", received=True, rtt_ms=None, hops=2)).replace(
            '"rtt_ms": null', '"rtt_ms": 1e400'),
        json.dumps(event("coords_changed", coords=[1, None])),
        json.dumps(event("coords_changed", coords=[1, 2.5])),
        json.dumps(event("node_started", listen=[1], variant="snek", version="1")),
        json.dumps(event("frame_stats", **dict(VALID["frame_stats"], frame_type="carrier"))),
        json.dumps(event("frame_stats", **dict(VALID["frame_stats"], direction=None))),
        json.dumps(event("root_changed", root=OTHER, root_seq=1, prev_root=None))[:-1] + ', "root_seq": "x"}',
    ]
    return out + bad


def lines_frame(spark, lines: list[str], run_id: str = "r1", file: str = "/f.jsonl"):
    rows = [(run_id, file, i, line) for i, line in enumerate(lines, 1)]
    return spark.createDataFrame(rows, schemas.LINES_SCHEMA)


def expected_events(spark, lines: list[str], run_id: str, file: str):
    """What the events table must hold for ``lines``: the oracle decides, json.loads gives the values."""
    rows = []
    for i, line in enumerate(lines, 1):
        if contract.validate_event(line, run_id) is not None:
            continue
        obj = json.loads(line)
        values = [obj.get(name) for name in schemas.EVENTS_SCHEMA.fieldNames()]
        values[schemas.EVENTS_SCHEMA.fieldNames().index("file")] = file
        values[schemas.EVENTS_SCHEMA.fieldNames().index("line_no")] = i
        rows.append([float(v) if f.dataType.simpleString() == "double" and v is not None else v
                     for v, f in zip(values, schemas.EVENTS_SCHEMA.fields)])
    return spark.createDataFrame(rows, schemas.EVENTS_SCHEMA)


def expected_quarantine(spark, lines, run_id, file, source="events", validate=None):
    rows = []
    for i, line in enumerate(lines, 1):
        verdict = (validate or (lambda l: contract.validate_event(l, run_id)))(line)
        if verdict is not None:
            rows.append((run_id, source, file, i, verdict[0], line))
    return spark.createDataFrame(rows, "run_id string, source string, file string, line_no long, reason string, "
                                       "line string")


def test_every_verdict_and_value_matches_the_contract(spark):
    lines = tricky_lines()
    validated = ingest.validate_events(lines_frame(spark, lines))
    assert_frames_equal(ingest.accepted(validated, schemas.EVENTS_SCHEMA),
                        expected_events(spark, lines, "r1", "/f.jsonl"))
    assert_frames_equal(ingest.quarantined(validated, "events").drop("message"),
                        expected_quarantine(spark, lines, "r1", "/f.jsonl"))


def test_messages_name_the_field(spark):
    lines = [json.dumps(event("peer_up", port="1", peer=OTHER, link_class="lan")),
             json.dumps(dict(event("node_stopping", reason="x"), run_id="r9"))]
    got = {r.line_no: (r.reason, r.message) for r in ingest.quarantined(
        ingest.validate_events(lines_frame(spark, lines)), "events").collect()}
    assert got == {1: (Reason.WRONG_TYPE, "field 'port' must be int, got STRING"),
                   2: (Reason.RUN_MISMATCH, "run_id does not match the run directory's: 'r9' vs meta.json 'r1'")}


def test_triage_then_validate_suspects_equals_validate_all(spark):
    lines = tricky_lines()
    frame = lines_frame(spark, lines)
    triaged = ingest.triage_events(frame)
    first = triaged.where(f"{ingest.TRIAGE} = 'accepted'")
    suspects = triaged.where(f"{ingest.TRIAGE} = 'suspect'").select("run_id", "file", "line_no", "line")
    second = ingest.validate_events(suspects)
    both = first.select(*schemas.EVENTS_SCHEMA.fieldNames()).unionByName(
        ingest.accepted(second, schemas.EVENTS_SCHEMA))
    assert_frames_equal(both, expected_events(spark, lines, "r1", "/f.jsonl"))
    assert_frames_equal(ingest.quarantined(second, "events").drop("message"),
                        expected_quarantine(spark, lines, "r1", "/f.jsonl"))
    # the compact lines a recorder writes never need the slow path
    compact = [json.dumps(event(k, **f), separators=(",", ":")) for k, f in VALID.items() if k != "node_started"]
    assert ingest.triage_events(lines_frame(spark, compact)).where(f"{ingest.TRIAGE} = 'suspect'").count() == 0


def test_actions_and_pings(spark):
    good_action = {"run_id": "r1", "mono_s": 3.0, "wall_ts": 1e9, "action": "kill_root", "target": "a",
                   "detail": {"key": KEY, "n": [1, 2]}}
    actions = [json.dumps(good_action), json.dumps(dict(good_action, detail=None, target=None)),
               json.dumps(dict(good_action, action="nuke")), json.dumps(dict(good_action, mono_s=None)), "oops"]
    validated = ingest.validate_actions(lines_frame(spark, actions, file="/a.jsonl"))
    got = {r.line_no: (r.action, r.target, r.detail) for r in ingest.accepted(validated, schemas.ACTIONS_SCHEMA).collect()}
    assert got == {1: ("kill_root", "a", json.dumps({"key": KEY, "n": [1, 2]}, separators=(",", ":"))),
                   2: ("kill_root", None, None)}
    assert_frames_equal(
        ingest.quarantined(validated, "actions").drop("message"),
        expected_quarantine(spark, actions, "r1", "/a.jsonl", "actions",
                            lambda l: contract.validate_record(l, contract.ACTION_FIELDS, "r1")))
    ping = {"run_id": "r1", "sender": "a", "sender_key": KEY, "target": "b", "target_key": OTHER, "mode": "snek",
            "sent_mono_s": 1.0, "sent_wall_ts": 1e9, "received": True, "rtt_ms": 2.5, "hops": 3,
            "shortest_links": 2, "link_classes": ["lan", "wifi"]}
    pings = [json.dumps(ping), json.dumps(dict(ping, received=False, rtt_ms=None, hops=None, link_classes=[])),
             json.dumps(dict(ping, hops="3")), json.dumps(dict(ping, link_classes=[1]))]
    validated = ingest.validate_pings(lines_frame(spark, pings, file="/p.jsonl"))
    assert sorted(r.line_no for r in ingest.accepted(validated, schemas.PINGS_SCHEMA).collect()) == [1, 2]
    assert_frames_equal(
        ingest.quarantined(validated, "pings").drop("message"),
        expected_quarantine(spark, pings, "r1", "/p.jsonl", "pings",
                            lambda l: contract.validate_record(l, contract.PING_FIELDS, "r1")))


def test_injected_bad_lines_in_a_run_end_up_in_quarantine(spark, tmp_path):
    run = tmp_path / "run"
    gen_events.generate_run(run, "inj", nodes=6, duration_s=45.0, seed=7)
    meta = json.loads((run / "meta.json").read_text())
    target = run / "events" / "n002.jsonl"
    injected = gen_events.bad_lines(target, "inj", meta["nodes"]["n002"])
    (r,) = rundirs.discover_runs([run])
    read = line_reads.read_lines(spark, {f: r.run_id for f in r.event_files}, "events")
    validated = ingest.validate_events(read.lines)
    q = ingest.quarantined(validated, "events")
    expected = spark.createDataFrame([("inj", "events", str(target), n, reason) for n, reason in injected],
                                     "run_id string, source string, file string, line_no long, reason string")
    assert_frames_equal(q.select("run_id", "source", "file", "line_no", "reason"), expected)
    accepted_rows = ingest.accepted(validated, schemas.EVENTS_SCHEMA).select("run_id", "file")
    recon = ingest.line_reconciliation(spark.createDataFrame(read.count_rows, schemas.LINE_COUNTS_SCHEMA), accepted_rows.withColumn("source", F.lit("events")), q)
    rows = recon.collect()
    assert len(rows) == len(r.event_files) and all(row.ok for row in rows)
    by_file = {row.file: row for row in rows}
    assert by_file[str(target)].quarantined == len(injected)
    assert sum(row.lines for row in rows) == sum(len(f.read_text().splitlines()) for f in r.event_files)
