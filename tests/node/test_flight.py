"""The flight recorder read out (node.flight): what happened to each frame, in lines that the run-dataset contract
(contract.recorder) accepts, and a pcapng that holds each frame once with its payload cut."""

from __future__ import annotations

import json

import pytest

from contract.dataset import validate_record
from contract.recorder import RECORDER_FIELDS
from node.core import wire
from node.core.recorder import PEEK, FlightRecorder
from node.core.state import Encoded
from node.core.types import Frame, FrameType
from node.flight import read_out, to_jsonl, to_pcapng

ME, YOU, THEM = b"\x0a" * 32, b"\x0b" * 32, b"\x0c" * 32


def traffic(src: bytes = YOU, dst: bytes = THEM, payload: bytes = b"x" * 64) -> Frame:
    return Frame(FrameType.TRAFFIC, 10, dst, src, (), (1, 2), payload=payload)


def raw(f: Frame) -> bytes:
    return wire.encode_frame(f)


def _lines(rec: FlightRecorder, now: float, own: bytes = ME) -> list[dict]:
    records = read_out(rec.entries(now), now, own, "me")
    text = to_jsonl(records).decode()
    for line in text.splitlines():
        assert validate_record(line, RECORDER_FIELDS) is None, line
    return [json.loads(line) for line in text.splitlines()]


def test_read_out_says_what_happened_to_each_frame_in_contract_lines() -> None:
    rec = FlightRecorder()
    ping = wire.encode_ping(wire.PING, 3, YOU, THEM)
    rec.received(1, [(3, raw(traffic(payload=ping)))], now=5.0)
    rec.sent([(2, Encoded(3, YOU, THEM, raw(traffic(payload=b"y" * 1200))))], now=5.0)  # passed on: forwarded
    rec.wrote(1, raw(traffic(src=ME, dst=YOU)), now=5.1)  # our own: sent
    rec.dropped(2, traffic(), "loop", now=5.2)
    rec.dropped(1, None, "bad_magic", now=5.3)
    rec.event("root_changed", {"root": THEM.hex(), "root_seq": 4, "prev_root": None}, now=5.4)
    lines = _lines(rec, now=6.0)
    assert [x["kind"] for x in lines] == ["received", "forwarded", "sent", "dropped", "dropped", "event"]
    got = lines[0]
    assert got["frame_type"] == "traffic" and got["port"] == 1 and got["src_key"] == YOU.hex()
    assert got["dst_key"] == THEM.hex() and got["src_coords"] == [1, 2] and got["dst_coords"] == []
    assert got["ping"] == "ping" and got["ping_hops"] == 3 and got["age_s"] == pytest.approx(1.0)
    assert lines[1]["length"] == len(raw(traffic(payload=b"y" * 1200)))
    assert lines[3]["reason"] == "loop" and lines[4]["reason"] == "bad_magic" and lines[4]["frame_type"] == "unknown"
    assert lines[5]["event"] == "root_changed" and lines[5]["fields"]["root_seq"] == 4 and lines[5]["port"] is None


def test_the_pcapng_holds_each_frame_once_with_its_payload_cut() -> None:
    rec = FlightRecorder()
    rec.received(1, [(3, raw(traffic(payload=b"z" * 1200)))], now=1.0)
    rec.event("coords_changed", {"coords": [1]}, now=1.0)
    rec.dropped(1, traffic(), "adversary", now=1.0)
    data = to_pcapng(read_out(rec.entries(1.0), 1.0, ME, None), now=1.0)
    assert data[:4] == b"\x0a\x0d\x0d\x0a"  # a pcapng section header block
    assert b"z" * (PEEK + 1) not in data and b"received port 1" in data and b"dropped (adversary) port 1" in data
