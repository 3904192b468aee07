"""The flight recorder's ring (node.core.recorder) with explicit time: the bounds in time and in entries, headers
not payloads."""

from __future__ import annotations

import pytest

from node.core import wire
from node.core.recorder import CONTROL_KEEP, PEEK, SMALL_KEEP, FlightRecorder, head_of
from node.core.state import Encoded
from node.core.types import Frame, FrameType

ME, YOU, THEM = b"\x0a" * 32, b"\x0b" * 32, b"\x0c" * 32


def traffic(src: bytes = YOU, dst: bytes = THEM, payload: bytes = b"x" * 64) -> Frame:
    return Frame(FrameType.TRAFFIC, 10, dst, src, (), (1, 2), payload=payload)


def raw(f: Frame) -> bytes:
    return wire.encode_frame(f)


def test_entries_older_than_the_window_are_gone() -> None:
    rec = FlightRecorder(window_s=30.0, max_entries=1000)
    rec.received(1, [(3, raw(traffic()))], now=0.0)
    rec.event("parent_changed", {"parent": None, "prev_parent": None}, now=10.0)
    rec.received(2, [(3, raw(traffic()))] * 2, now=29.0)
    assert [e[0] for e in rec.entries(now=29.9)] == [0.0, 10.0, 29.0, 29.0]
    assert [e[0] for e in rec.entries(now=30.5)] == [10.0, 29.0, 29.0]  # 0.0 is more than 30 s before 30.5
    assert [e[0] for e in rec.entries(now=59.5)] == []
    assert rec.recorded == 4 and rec.size == 0


def test_the_ring_holds_at_most_max_entries_the_oldest_going_first() -> None:
    rec = FlightRecorder(window_s=30.0, max_entries=5)
    frames = [(3, raw(traffic(payload=bytes([i]) * 64))) for i in range(12)]
    for i, fr in enumerate(frames):
        rec.received(1, [fr], now=i * 0.001)  # a storm: all within the window
    got = rec.entries(now=0.02)
    assert len(got) == 5 and rec.recorded == 12
    assert [e[0] for e in got] == [pytest.approx(i * 0.001) for i in range(7, 12)]
    # one batch larger than the ring keeps its last entries, in order
    rec.sent([(2, Encoded(3, YOU, THEM, fr[1])) for fr in frames], now=1.0)
    assert [e[3] for e in rec.entries(now=1.0)] == [fr[1] for fr in frames[-5:]]


def test_a_window_or_a_size_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        FlightRecorder(window_s=0.0)
    with pytest.raises(ValueError, match="max_entries"):
        FlightRecorder(max_entries=0)


def test_headers_are_kept_not_payloads() -> None:
    big = raw(traffic(payload=b"p" * 1200))
    head = head_of(big)
    assert len(big) > SMALL_KEEP and len(head) == len(big) - 1200 + PEEK
    assert int.from_bytes(head[8:10], "big") == len(big)  # the length field still says the whole frame's
    rec = FlightRecorder()
    rec.received(1, [(3, big)], now=1.0)
    rec.sent([(2, traffic(src=ME, payload=b"q" * 1200))], now=1.0)  # a frame object: a copy, payload cut
    kept = [e[3] for e in rec.entries(now=1.0)]
    assert kept[0] == head and len(kept[1].payload) == PEEK and rec.entries(now=1.0)[1][4] == 1200
    control = Frame(FrameType.TREE_ANNOUNCEMENT, payload=b"a" * (CONTROL_KEEP + 100))
    assert len(head_of(raw(control))) == 12  # a control frame over CONTROL_KEEP: its header only
