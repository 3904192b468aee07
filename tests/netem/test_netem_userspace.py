"""The userspace link shaper: rate, queue, delay/jitter, loss and order, with seeded randomness."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.links import LinkShape, default_classes
from netem.userspace import LinkShaper, Verdict, shaper_factory

FRAME = 1500


def shaper(seed: int = 1, **shape: float) -> LinkShaper:
    return LinkShaper(LinkShape(**shape), random.Random(seed))


def test_1000_frames_at_1_5_mbit_take_8_seconds():
    s = shaper(rate_mbit=1.5)
    times = [s.schedule(0.0, FRAME) for _ in range(1000)]
    assert None not in times
    assert times[0] == pytest.approx(FRAME * 8 / 1.5e6)  # 8 ms per frame
    assert times[-1] == pytest.approx(1000 * FRAME * 8 / 1.5e6) == pytest.approx(8.0)
    gaps = {round(b - a, 9) for a, b in zip(times, times[1:])}  # type: ignore[operator]
    assert gaps == {0.008}


def test_paced_sender_below_the_rate_sees_no_queueing():
    s = shaper(rate_mbit=1.5, delay_ms=30)
    for i in range(100):
        now = i * 0.010  # 10 ms apart, 8 ms to serialise
        assert s.schedule(now, FRAME) == pytest.approx(now + 0.008 + 0.030)
        assert s.backlog(now) == 0


def test_bluetooth_class_end_to_end_time_and_loss():
    s = LinkShaper(default_classes()["bluetooth"].shape, random.Random(7))
    times = [s.schedule(i * 0.008, FRAME) for i in range(1000)]  # exactly at the line rate
    delivered = [t for t in times if t is not None]
    assert s.stats.dropped_queue == 0
    assert len(delivered) == 1000 - s.stats.dropped_loss
    assert 0.01 < s.stats.dropped_loss / 1000 < 0.03
    assert 8.0 + 0.025 <= max(delivered) <= 8.0 + 0.035  # last bit at 8 s, then 30 +/- 5 ms


def test_mean_delay_is_delay_ms_and_jitter_is_bounded():
    s = shaper(seed=3, delay_ms=30, jitter_ms=5)
    delays = []
    for i in range(10_000):
        now = i * 0.020  # spaced wider than 2 x jitter, so keeping order never holds a frame back
        at = s.schedule(now, 100)
        assert at is not None
        delays.append(at - now)
    assert statistics.fmean(delays) == pytest.approx(0.030, abs=0.0002)
    assert 0.025 <= min(delays) < 0.0255 and 0.0345 < max(delays) <= 0.035
    assert statistics.pstdev(delays) == pytest.approx(0.005 / 3**0.5, rel=0.05)  # uniform +/- 5 ms


def test_normal_jitter_option():
    s = LinkShaper(LinkShape(delay_ms=30, jitter_ms=5), random.Random(3), jitter="normal", ordered=False)
    delays = [s.schedule(i * 0.02, 100) - i * 0.02 for i in range(10_000)]  # type: ignore[operator]
    assert statistics.fmean(delays) == pytest.approx(0.030, abs=0.0003)
    assert statistics.pstdev(delays) == pytest.approx(0.005, rel=0.05)


@pytest.mark.parametrize("loss_pct", [0.2, 2, 10, 50])
def test_loss_ratio_matches_loss_pct(loss_pct):
    s = shaper(seed=11, loss_pct=loss_pct)
    n = 50_000
    lost = sum(s.schedule(i * 0.001, 100) is None for i in range(n))
    sigma = (loss_pct / 100 * (1 - loss_pct / 100) / n) ** 0.5
    assert abs(lost / n - loss_pct / 100) < 4 * sigma
    assert s.stats.dropped_loss == lost and s.stats.delivered == n - lost


def test_ordered_stream_never_delivers_out_of_order_even_with_heavy_jitter():
    s = shaper(seed=5, delay_ms=30, jitter_ms=30)
    times = [s.schedule(i * 0.001, 100) for i in range(5000)]
    assert times == sorted(times)  # type: ignore[type-var]
    datagram = LinkShaper(LinkShape(delay_ms=30, jitter_ms=30), random.Random(5), ordered=False)
    dtimes = [datagram.schedule(i * 0.001, 100) for i in range(5000)]
    assert dtimes != sorted(dtimes)  # type: ignore[type-var]  # the same jitter does reorder datagrams


def test_queue_limit_tail_drops():
    s = LinkShaper(default_classes()["bluetooth"].shape.model_copy(update={"loss_pct": 0.0}), random.Random(1))
    verdicts = [s.send(0.0, FRAME) for _ in range(100)]
    accepted = [v for v in verdicts if v.deliver_at]
    assert len(accepted) == 21  # one being serialised + 20 waiting
    assert all(v == Verdict((), "queue") for v in verdicts[21:])
    assert s.backlog(0.0) == 20 and s.stats.dropped_queue == 79
    # 8 ms later one frame has started serialising: room for exactly one more
    assert s.backlog(0.008) == 19
    assert s.send(0.008, FRAME).deliver_at and s.send(0.008, FRAME).dropped == "queue"
    # once drained, the link accepts again and the time adds up
    assert s.busy_until == pytest.approx(22 * 0.008)
    assert s.schedule(1.0, FRAME) == pytest.approx(1.008 + 0.030, abs=0.0051)


def test_default_queue_is_1000_packets_with_a_rate():
    s = shaper(rate_mbit=1)
    drops = sum(s.schedule(0.0, FRAME) is None for _ in range(1100))
    assert drops == 1100 - 1001


def test_same_seed_same_run():
    shape = default_classes()["bluetooth"].shape
    a, b = LinkShaper(shape, random.Random(42)), LinkShaper(shape, random.Random(42))
    assert [a.send(i * 0.005, 700) for i in range(500)] == [b.send(i * 0.005, 700) for i in range(500)]


def test_retransmit_mode_delays_instead_of_dropping_and_blocks_the_stream():
    s = LinkShaper(LinkShape(delay_ms=10, loss_pct=20), random.Random(2), loss_mode="retransmit", rto_s=0.2)
    verdicts = [s.send(i * 0.001, 100) for i in range(2000)]
    assert all(v.deliver_at for v in verdicts)
    retried = [(i, v) for i, v in enumerate(verdicts) if v.retransmits]
    assert 0.15 < len(retried) / 2000 < 0.25
    i, v = retried[0]
    assert v.deliver_at[0] >= i * 0.001 + 0.010 + 0.2
    assert verdicts[i + 1].deliver_at[0] >= v.deliver_at[0]  # head-of-line blocking
    assert any(v.retransmits >= 2 for _, v in retried)  # lost again: backed off
    times = [v.deliver_at[0] for v in verdicts]
    assert times == sorted(times)


def test_stream_treats_corruption_as_loss_and_ignores_duplicates_and_reorder():
    s = shaper(delay_ms=5, corrupt_pct=100)
    assert s.send(0.0, 10) == Verdict((), "corrupt")
    s = shaper(delay_ms=5, duplicate_pct=100, reorder_pct=100)
    assert s.send(0.0, 10) == Verdict((0.005,))


def test_datagram_duplicate_corrupt_and_reorder():
    s = LinkShaper(LinkShape(delay_ms=5, duplicate_pct=100, corrupt_pct=100), random.Random(1), ordered=False)
    v = s.send(0.0, 10)
    assert v.deliver_at == (0.005, 0.005) and v.corrupt and s.stats.duplicated == 1 and s.stats.corrupted == 1
    r = LinkShaper(LinkShape(delay_ms=5, reorder_pct=100), random.Random(1), ordered=False)
    assert r.schedule(1.0, 10) == 1.0  # reordered frames skip the delay (netem semantics)


def test_no_shape_delivers_immediately():
    s = shaper()
    assert s.schedule(3.5, 1) == 3.5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"loss_mode": "maybe"}, "loss_mode"), ({"jitter": "pareto"}, "jitter"), ({"rto_s": 0}, "rto_s")],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinkShaper(LinkShape(), random.Random(), **kwargs)


def test_time_must_not_go_backwards_and_frames_have_bytes():
    s = shaper()
    s.schedule(2.0, 10)
    with pytest.raises(ValueError, match=r"time went backwards: now=1.0 after 2.0"):
        s.schedule(1.0, 10)
    with pytest.raises(ValueError, match="nbytes must be a positive int"):
        s.schedule(3.0, 0)


shapes = st.builds(
    lambda d, j, loss, rate, q: LinkShape(delay_ms=d, jitter_ms=min(j, d), loss_pct=loss, rate_mbit=rate,
                                          queue_limit_pkts=q if rate else None),
    st.floats(0, 100), st.floats(0, 100), st.floats(0, 100), st.one_of(st.none(), st.floats(0.1, 1000)),
    st.integers(1, 50),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(shapes, st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 9000)), max_size=60), st.integers(0, 2**32))
def test_stream_invariants(shape, frames, seed):
    s = LinkShaper(shape, random.Random(seed))
    now, last = 0.0, float("-inf")
    for gap, nbytes in frames:
        now += gap
        at = s.schedule(now, nbytes)
        if at is None:
            continue
        assert at >= now + max(0.0, shape.delay_ms - shape.jitter_ms) / 1000 - 1e-12
        assert at >= last  # in order
        last = at
    assert s.stats.frames == len(frames)
    assert s.stats.delivered + s.stats.dropped_queue + s.stats.dropped_loss == len(frames)


def test_shaper_factory_gives_each_link_end_its_own_shaper():
    make = shaper_factory(LinkShape(rate_mbit=1.5))
    a, b = make(random.Random(1)), make(random.Random(2))
    assert a(0.0, FRAME) == pytest.approx(0.008) and a(0.0, FRAME) == pytest.approx(0.016)
    assert b(0.0, FRAME) == pytest.approx(0.008)  # b's serialiser is independent of a's
    with pytest.raises(ValueError, match="loss_mode"):
        shaper_factory(LinkShape(), loss_mode="sometimes")


def test_stats_count_delayed_queue_and_loss_drops_for_the_metrics():
    s = shaper()  # no shape: nothing is late
    for i in range(5):
        s.send(float(i), FRAME)
    assert (s.stats.delayed, s.stats.dropped_queue, s.stats.dropped_loss) == (0, 0, 0)
    s = shaper(delay_ms=10)
    for i in range(5):
        s.send(float(i), FRAME)
    assert s.stats.delayed == 5 and s.stats.delivered == 5
    s = shaper(loss_pct=100)
    for i in range(7):
        s.send(float(i), FRAME)
    assert (s.stats.dropped_loss, s.stats.delayed) == (7, 0)
    s = LinkShaper(default_classes()["bluetooth"].shape.model_copy(update={"loss_pct": 0.0}), random.Random(1))
    for _ in range(30):
        s.send(0.0, FRAME)
    assert s.stats.dropped_queue == 9 and s.stats.delayed == 21  # 21 accepted, each later than offered


@settings(max_examples=40, deadline=None)
@given(delay=st.floats(0, 200), jitter=st.floats(0, 50), rate=st.one_of(st.none(), st.floats(0.01, 100)),
       queue=st.integers(1, 50), seed=st.integers(0, 2**32), gaps=st.lists(st.floats(0, 0.05), min_size=1,
                                                                             max_size=300),
       mode=st.sampled_from(["uniform", "normal"]))  # fmt: skip
def test_clean_stream_fast_path_matches_the_general_model(delay: float, jitter: float, rate: float | None,
                                                          queue: int, seed: int, gaps: list[float], mode: str) -> None:
    """A clean ordered stream (no random loss, corruption, duplication or reordering) takes the inlined
    _schedule_clean; the same frames through the general model (send) give the same times, drops and stats."""
    shape = LinkShape(delay_ms=delay, jitter_ms=min(jitter, delay), rate_mbit=rate,
                      queue_limit_pkts=queue if rate else None)
    fast = LinkShaper(shape, random.Random(seed), jitter=mode)  # type: ignore[arg-type]
    general = LinkShaper(shape, random.Random(seed), jitter=mode)  # type: ignore[arg-type]
    assert fast._clean_stream
    general._clean_stream = False
    now, sizes = 0.0, random.Random(seed + 1)
    for gap in gaps:
        now += gap
        n = sizes.randrange(1, 3000)
        assert fast.schedule(now, n) == general.schedule(now, n)
    assert fast.stats == general.stats
