"""A peer's queues (PROTOCOL.md §3.4): protocol frames before traffic, per-flow buckets with head drop.

The FairQueue is tested on its own; the writer's order through a real PeerConn
on a memory stream under the virtual clock (``autojump_clock``).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from node.config import LinkSpec, Timeouts
from node.fairqueue import BLUETOOTH_BUCKETS, REFERENCE_BUCKETS, FairQueue
from node.peer import PeerConn


def test_a_full_bucket_drops_its_oldest_frame_and_counts_it() -> None:
    q = FairQueue(buckets=4, depth=3)
    assert [q.push(0, bytes([i])) for i in range(5)] == [0, 0, 0, 1, 1]
    assert (len(q), q.dropped, q.nbytes) == (3, 2, 3)
    out: list[bytes] = []
    q.pop_into(out, 1 << 20)
    assert out == [b"\x02", b"\x03", b"\x04"]  # the two oldest went
    assert (len(q), bool(q), q.nbytes) == (0, False, 0)


def test_buckets_are_served_round_robin_so_a_heavy_flow_cannot_starve_a_light_one() -> None:
    q = FairQueue(buckets=4, depth=16)
    for i in range(6):
        q.push(1, b"heavy%d" % i)
    q.push(2, b"light0")
    q.push(2, b"light1")
    out: list[bytes] = []
    q.pop_into(out, 1 << 20)
    assert out == [b"heavy0", b"light0", b"heavy1", b"light1", b"heavy2", b"heavy3", b"heavy4", b"heavy5"]


def test_a_bucket_is_bounded_in_bytes_too_but_one_frame_always_fits() -> None:
    q = FairQueue(buckets=2, depth=100, bucket_bytes=10)
    assert q.push(0, b"a" * 6) == 0
    assert q.push(0, b"b" * 6) == 1  # 12 bytes would exceed 10: the oldest goes
    assert q.push(0, b"c" * 50) == 1  # bigger than the bound on its own: still queued, alone
    assert (len(q), q.nbytes, q.dropped) == (1, 50, 2)


def test_pop_stops_at_the_byte_budget_and_keeps_the_rest() -> None:
    q = FairQueue(buckets=8, depth=16)
    for b in range(3):
        q.push(b, b"x" * 100)
    out: list[bytes] = []
    assert q.pop_into(out, 150) == 200  # the budget is checked before each frame
    assert (len(out), len(q), q.nbytes) == (2, 1, 100)
    assert q.clear() == 1 and len(q) == 0


def test_flows_map_to_stable_buckets_and_bad_sizes_are_refused() -> None:
    q = FairQueue()
    a, b = b"a" * 32, b"b" * 32
    assert q.bucket_of(a, b) == q.bucket_of(a, b)
    assert 0 <= q.bucket_of(a, b) < REFERENCE_BUCKETS
    with pytest.raises(ValueError, match="must be positive"):
        FairQueue(buckets=0)


def _peer(stream: trio.abc.Stream, link: LinkSpec, drops: list[tuple[int, str, int]], flow_depth: int = 16) -> PeerConn:
    return PeerConn(port=1, key=b"k" * 32, link=link, stream=stream, remote="mem", timeouts=Timeouts(),
                    on_frames=lambda peer, frames: None, on_drop=lambda t, r, n: drops.append((t, r, n)),
                    flow_depth=flow_depth, protocol_limit=16)  # fmt: skip


async def test_the_writer_sends_protocol_frames_before_traffic(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    drops: list[tuple[int, str, int]] = []
    peer = _peer(ours, LinkSpec(), drops)
    src, dst = b"s" * 32, b"d" * 32
    peer.push_traffic(b"<traffic 1>", src, dst)
    peer.push_traffic(b"<traffic 2>", src, dst)
    peer.push_protocol(1, b"<announcement>")
    peer.push_protocol(2, b"<bootstrap>")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.run)
        got = await theirs.receive_some()
        peer.close("done")
    assert bytes(got) == b"<announcement><bootstrap><traffic 1><traffic 2>"  # one write, protocol first
    assert peer.tx_frames[1:4] == [1, 1, 2] and drops == []


async def test_queue_overflow_is_reported_as_drops(autojump_clock: trio.testing.MockClock) -> None:
    ours, _theirs = trio.testing.memory_stream_pair()
    drops: list[tuple[int, str, int]] = []
    peer = _peer(ours, LinkSpec("bluetooth", 4), drops, flow_depth=2)
    assert peer.traffic._n == BLUETOOTH_BUCKETS  # Bluetooth peers get 16 buckets (§3.4)
    for i in range(5):
        peer.push_traffic(b"t%d" % i, b"s" * 32, b"d" * 32)
    for i in range(17):
        peer.push_protocol(1, b"p%d" % i)
    assert drops == [(3, "queue_full", 1)] * 3 + [(1, "queue_full", 1)]
    assert (len(peer.traffic), len(peer.protocol)) == (2, 16)
