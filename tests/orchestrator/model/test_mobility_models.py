"""The mobility models: the same seed moves the same way, positions stay in their area, speeds in their range."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.mobility import (Disc, GaussMarkov, GroupMember, RandomWaypoint, Rect, Static, TraceMover,
                                         distance, mover_rng)

AREA = Rect.of_size(200.0, 100.0)
TIMES = [k * 0.5 for k in range(0, 1201)]  # 0 .. 600 s


def _rwp(seed: int, **kw) -> RandomWaypoint:
    return RandomWaypoint(AREA, 0.5, 2.0, mover_rng(seed, "n1"), pause_min_s=0.0, pause_max_s=5.0, **kw)


def _gm(seed: int) -> GaussMarkov:
    return GaussMarkov(AREA, 1.5, mover_rng(seed, "n1"), max_speed_mps=3.0, alpha=0.6, speed_sd_mps=1.0,
                       direction_sd_rad=math.radians(60))


def _group(seed: int) -> GroupMember:
    ref = RandomWaypoint(AREA, 1.0, 2.0, mover_rng(seed, "group:g"))
    return GroupMember(ref, RandomWaypoint(Disc(5.0), 0.2, 1.0, mover_rng(seed, "n1")))


MAKERS = {"random_waypoint": _rwp, "gauss_markov": _gm, "group": _group}


@pytest.mark.parametrize("model", MAKERS)
def test_same_seed_same_movements_other_seed_others(model: str) -> None:
    make = MAKERS[model]
    a, b, c = make(1), make(1), make(2)
    track_a = [a.position(t) for t in TIMES]
    assert track_a == [b.position(t) for t in TIMES]
    assert track_a != [c.position(t) for t in TIMES]
    assert a.model == model


@pytest.mark.parametrize("model", MAKERS)
def test_the_answer_does_not_depend_on_the_order_of_the_questions(model: str) -> None:
    forwards, backwards = MAKERS[model](4), MAKERS[model](4)
    late_first = {t: backwards.position(t) for t in reversed(TIMES[::7])}
    assert {t: forwards.position(t) for t in TIMES[::7]} == late_first


def _max_speed(track: list[tuple[float, float]], dt: float) -> float:
    return max(distance(p, q) for p, q in zip(track, track[1:])) / dt


def test_random_waypoint_stays_in_its_area_within_its_speeds() -> None:
    for seed in range(5):
        m = _rwp(seed)
        track = [m.position(t) for t in TIMES]
        assert all(AREA.contains(p) for p in track)
        assert _max_speed(track, 0.5) <= 2.0 + 1e-9
        for leg in m._legs.legs[1:]:  # each leg's own speed is drawn in [min, max]
            speed = distance(leg.start, leg.end) / (leg.t1 - leg.t0)
            assert 0.5 - 1e-9 <= speed <= 2.0 + 1e-9
        assert m._legs.legs[-1].t0 > 100  # it kept moving for the whole time asked


def test_random_waypoint_pauses_and_starts_where_told() -> None:
    m = RandomWaypoint(AREA, 1.0, 1.0, mover_rng(0, "n"), pause_min_s=10.0, pause_max_s=10.0, start=(5.0, 5.0))
    assert m.position(0.0) == (5.0, 5.0)
    m.position(2000.0)
    first, second = m._legs.legs[1], m._legs.legs[2]
    assert second.t0 == pytest.approx(first.t1 + 10.0)  # ten seconds at the waypoint
    assert m.position(first.t1 + 5.0) == first.end


def test_gauss_markov_stays_in_its_area_below_its_top_speed() -> None:
    for seed in range(5):
        m = _gm(seed)
        track = [m.position(t) for t in TIMES]
        assert all(AREA.contains(p) for p in track)
        assert _max_speed(track, 0.5) <= 3.0 + 1e-9
        assert _max_speed(track, 0.5) > 0.5  # and it does move
        assert all(0 <= s.speed <= 3.0 for s in m._states)


def test_gauss_markov_with_full_memory_goes_straight_at_its_mean_speed() -> None:
    m = GaussMarkov(Rect.of_size(1000.0, 1000.0), 2.0, mover_rng(0, "n"), max_speed_mps=2.0, alpha=1.0,
                    speed_sd_mps=1.0, start=(500.0, 500.0))
    assert distance(m.position(0.0), m.position(10.0)) == pytest.approx(20.0)


def test_a_group_member_stays_near_its_reference_point() -> None:
    for seed in range(5):
        m = _group(seed)
        for t in TIMES:
            assert distance(m.position(t), m.reference.position(t)) <= 5.0 + 1e-9
        assert _max_speed([m.position(t) for t in TIMES], 0.5) <= 2.0 + 1.0 + 1e-9


def test_members_of_one_group_move_together() -> None:
    ref = RandomWaypoint(AREA, 1.0, 2.0, mover_rng(0, "group:g"))
    a = GroupMember(ref, RandomWaypoint(Disc(3.0), 0.2, 1.0, mover_rng(0, "a")))
    b = GroupMember(ref, RandomWaypoint(Disc(3.0), 0.2, 1.0, mover_rng(0, "b")))
    assert all(distance(a.position(t), b.position(t)) <= 6.0 + 1e-9 for t in TIMES)
    assert distance(a.position(0), a.position(600)) > 6.0  # while the group itself goes places


def test_static_never_moves() -> None:
    m = Static((3.0, 4.0))
    assert {m.position(t) for t in TIMES} == {(3.0, 4.0)}


def test_trace_mover_follows_setdest_as_ns2_does() -> None:
    m = TraceMover((0.0, 0.0), [(10.0, 0.0, 0.0, 1.0), (2.0, 10.0, 0.0, 2.0), (20.0, 5.0, 5.0, 0.0)])
    assert m.position(1.0) == (0.0, 0.0)  # still until its first move
    assert m.position(4.0) == pytest.approx((4.0, 0.0))  # heading east at 2 m/s from t = 2
    assert m.position(7.0) == pytest.approx((10.0, 0.0))  # arrived at 7 s, waits
    assert m.position(15.0) == pytest.approx((5.0, 0.0))  # t = 10: back west at 1 m/s
    assert m.position(20.0) == pytest.approx((0.0, 0.0))
    assert m.position(30.0) == pytest.approx((0.0, 0.0))  # speed 0 stops it where it is


def test_a_new_destination_turns_the_node_on_the_spot() -> None:
    m = TraceMover((0.0, 0.0), [(0.0, 100.0, 0.0, 1.0), (10.0, 10.0, 10.0, 1.0)])
    assert m.position(10.0) == pytest.approx((10.0, 0.0))
    assert m.position(15.0) == pytest.approx((10.0, 5.0))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), w=st.floats(1, 500), h=st.floats(1, 500), lo=st.floats(0.1, 5), spread=st.floats(0, 5))
def test_random_waypoint_bounds_hold_for_any_area_and_speeds(seed: int, w: float, h: float, lo: float,
                                                              spread: float) -> None:
    area = Rect.of_size(w, h)
    m = RandomWaypoint(area, lo, lo + spread, mover_rng(seed, "x"))
    track = [m.position(t) for t in range(0, 120)]
    assert all(area.contains(p, 1e-6) for p in track)
    assert _max_speed(track, 1.0) <= lo + spread + 1e-6


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), w=st.floats(1, 500), h=st.floats(1, 500), mean=st.floats(0.1, 20),
       alpha=st.floats(0, 1))
def test_gauss_markov_bounds_hold_for_any_area_and_memory(seed: int, w: float, h: float, mean: float,
                                                          alpha: float) -> None:
    area = Rect.of_size(w, h)
    m = GaussMarkov(area, mean, mover_rng(seed, "x"), max_speed_mps=2 * mean, alpha=alpha, speed_sd_mps=mean,
                    direction_sd_rad=1.0, step_s=1.0)
    track = [m.position(t * 0.25) for t in range(0, 400)]
    assert all(area.contains(p, 1e-6) for p in track)
    assert _max_speed(track, 0.25) <= 2 * mean + 1e-6


def test_bad_parameters_are_caller_bugs() -> None:
    with pytest.raises(ValueError, match="speeds"):
        RandomWaypoint(AREA, 0.0, 1.0, mover_rng(0, "x"))
    with pytest.raises(ValueError, match="speeds"):
        RandomWaypoint(AREA, 2.0, 1.0, mover_rng(0, "x"))
    with pytest.raises(ValueError, match="speeds"):
        GaussMarkov(AREA, 2.0, mover_rng(0, "x"), max_speed_mps=1.0)
    with pytest.raises(ValueError, match="alpha"):
        GaussMarkov(AREA, 1.0, mover_rng(0, "x"), max_speed_mps=1.0, alpha=1.5)
