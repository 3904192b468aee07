"""The adversary's deterministic drop pattern (reference GeneralAdversary semantics)."""

from __future__ import annotations

import pytest

from node.core import wire
from node.core.adversary import Adversary, parse_drop_spec
from node.core.types import FrameType

from routerkit import Bench, identities, traffic_frame

A, B = b"a" * 32, b"b" * 32


def _pattern(adv: Adversary, peer: bytes, t: int, n: int) -> list[bool]:
    return [adv.drops(peer, t) for _ in range(n)]


def test_rates_drop_exactly_that_share_of_each_kind_per_peer() -> None:
    adv = Adversary({"bootstrap": 100, "traffic": 25})
    assert all(_pattern(adv, A, FrameType.BOOTSTRAP, 10))
    assert _pattern(adv, A, FrameType.TRAFFIC, 8) == [True, False, False, False] * 2
    assert not any(_pattern(adv, A, FrameType.TREE_ANNOUNCEMENT, 10))
    assert _pattern(adv, B, FrameType.TRAFFIC, 4) == [True, False, False, False]  # each peer counted apart
    assert adv.dropped == 10 + 2 + 1


def test_overall_rate_applies_to_every_kind_and_peer_rates_replace_defaults() -> None:
    adv = Adversary({"all": 50})
    assert _pattern(adv, A, FrameType.KEEPALIVE, 4) == [True, False, True, False]
    adv.configure({"traffic": 0}, peer=B)
    assert not any(_pattern(adv, B, FrameType.TRAFFIC, 5)) and not any(_pattern(adv, B, FrameType.KEEPALIVE, 5))
    assert Adversary().active is False and adv.active is True
    assert _pattern(Adversary({"traffic": 33.3}), A, FrameType.TRAFFIC, 1000).count(True) == 333


@pytest.mark.parametrize(
    ("spec", "err"),
    [("bootstrap", "KIND=PERCENT"), ("boot=1", "unknown frame kind"), ("traffic=x", "not a percentage"),
     ("traffic=101", "0 to 100"), ("", "at least one"), ("traffic=1@zz", "64-hex-digit")],
)
def test_bad_specs_say_what_is_wrong(spec: str, err: str) -> None:
    with pytest.raises(ValueError, match=err):
        parse_drop_spec(spec)


def test_spec_parses_rates_and_peer() -> None:
    assert parse_drop_spec("bootstrap=100, wakeup_broadcast=50") == ({"bootstrap": 100.0, "wakeup_broadcast": 50.0}, None)
    assert parse_drop_spec("all=10@" + "AB" * 32) == ({"all": 10.0}, "ab" * 32)


def test_an_adversarial_router_drops_what_it_is_told_and_counts_it() -> None:
    me, a, b = identities(3, "adversary")
    bench = Bench(me)
    pa, pb = bench.join(a), bench.connect(b)
    bench.drain()
    bench.r.set_adversary({"traffic": 100}, peer=a.public_key)
    bench.send(pa, traffic_frame(b.public_key, a.public_key))
    assert bench.drain() == [] and bench.r.counters[("frame_dropped", FrameType.TRAFFIC, "adversary")] == 1
    bench.send(pb, traffic_frame(a.public_key, b.public_key))  # from b: defaults (nothing) apply
    assert [p for p, f in bench.drain() if f.type == FrameType.TRAFFIC] == [pa]
    # an adversary never takes the transit fast path: every frame is judged
    bench.r.set_adversary({"all": 100})
    raw = wire.encode_frame(traffic_frame(a.public_key, b.public_key))
    bench.r.bytes_received(pb, [(raw[5], raw)] * 3, bench.now)
    assert bench.drain() == [] and bench.r.fast_forwards == 0
    assert bench.r.counters[("frame_dropped", FrameType.TRAFFIC, "adversary")] == 4
