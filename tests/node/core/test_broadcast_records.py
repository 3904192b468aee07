"""The two layouts of §6.8's wakeup-broadcast records (node.core.broadcast_records) behave the same, bit for bit: the
same operations give the same filter answers, records, order and evictions. A simulation's routers use the flat
one (they share a key index), a TCP node the dict."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from node.core.broadcast_records import DictRecords, FlatRecords, KeyIndex

KEYS = [bytes([i]) * 32 for i in range(12)]

_admit = st.tuples(st.just("admit"), st.integers(0, len(KEYS) - 1), st.integers(0, 6), st.floats(0, 40))
_expire = st.tuples(st.just("expire"), st.just(0), st.just(0), st.floats(0, 40))
_big_seq = st.tuples(st.just("admit"), st.integers(0, len(KEYS) - 1), st.integers(2**32 - 2, 2**40), st.floats(0, 40))
_clear = st.tuples(st.just("clear"), st.just(0), st.just(0), st.just(0.0))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(_admit, _admit, _admit, _expire, _big_seq, _clear), max_size=80),
       max_cached=st.integers(1, 8))  # fmt: skip
def test_the_flat_records_do_what_the_dict_does(ops: list[tuple[str, int, int, float]], max_cached: int) -> None:
    shared = KeyIndex()
    for key in reversed(KEYS):  # another router made the index: numbers in another order than first seen here
        shared.number(key)
    flat, plain = FlatRecords(shared, max_cached), DictRecords(max_cached)
    now = 0.0
    for op, k, seq, dt in ops:
        now += dt  # protocol time only goes forward
        if op == "admit":
            assert flat.admit(KEYS[k], seq, now, 10.0) == plain.admit(KEYS[k], seq, now, 10.0), (op, k, seq, now)
        elif op == "expire":
            flat.expire(now, 30.0)
            plain.expire(now, 30.0)
        else:
            flat.clear()
            plain.clear()
        assert flat.items() == plain.items() and len(flat) == len(plain) <= max_cached
        assert all(flat.get(key) == plain.get(key) for key in KEYS)


def test_the_filter_eviction_and_expiry_of_section_6_8() -> None:
    records = FlatRecords(KeyIndex(), max_cached=2)
    a, b, c = KEYS[:3]
    assert records.admit(a, 5, 0.0, 10.0) and records.get(a) == (5, 0.0)
    assert not records.admit(a, 6, 9.5, 10.0)  # within the filter's 10 s
    assert not records.admit(a, 5, 20.0, 10.0)  # not a newer sequence
    assert records.admit(a, 6, 20.0, 10.0) and records.get(a) == (6, 20.0)  # an update keeps its place
    assert records.admit(b, 1, 21.0, 10.0) and records.admit(c, 1, 22.0, 10.0)  # full: a, the oldest, goes
    assert [k for k, _, _ in records.items()] == [b, c] and records.get(a) is None
    records.expire(21.0 + 30.0, 30.0)  # b is exactly 30 s old: gone; c stays
    assert records.items() == [(c, 1, 22.0)]
    assert records.admit(a, 2**40, 60.0, 10.0) and records.get(a) == (2**40, 60.0)  # a sequence past 32 bits
    assert records.get(KEYS[5]) is None and not math.isnan(records.items()[-1][2])
