"""The traffic fair queue behaves (the transit fast path is tested in the core: tests/node/core/test_transit.py)."""

from __future__ import annotations

from node.fairqueue import FairQueue


def test_fair_queue_round_robin_and_head_drop() -> None:
    q = FairQueue(buckets=4, depth=3, bucket_bytes=100)
    for i in range(5):
        q.push(0, b"a%d" % i)
    assert q.dropped == 2 and len(q) == 3  # bucket 0 kept its newest three
    q.push(1, b"b0")
    q.push(1, b"b1")
    out: list[bytes] = []
    q.pop_into(out, 1 << 20)
    assert out == [b"a2", b"b0", b"a3", b"b1", b"a4"]
    assert len(q) == 0 and q.nbytes == 0
    assert q.push(2, b"x" * 60) == 0
    assert q.push(2, b"y" * 60) == 1  # the byte bound drops the older frame
    assert q.nbytes == 60
    out.clear()
    q.pop_into(out, 1)
    assert out == [b"y" * 60]
