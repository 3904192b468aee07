"""The radio graph: links within range, hysteresis at the edge, one link per radio, changes with their cause."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.mobility import distance
from orchestrator.model.radio_graph import LinkChange, Radio, RadioGraph, combined_loss_pct, link_changes, radio_links

BT = Radio("bluetooth", 10.0, "bluetooth", hysteresis=0.2)
LAN = Radio("lan", 50.0, "lan", hysteresis=0.1)


def test_a_pair_oscillating_at_the_edge_makes_one_link_up_not_many() -> None:
    graph = RadioGraph([BT])
    changes: list[LinkChange] = []
    for k in range(100):  # 9.5 m .. 11.5 m and back, across the 10 m range, within 10 * 1.2 = 12 m
        x = 10.5 - math.cos(k / 3)
        changes += graph.step({"a": (0.0, 0.0), "b": (x, 0.0)})
    assert [(c.up, c.cause) for c in changes] == [(True, "start")]
    changes = graph.step({"a": (0.0, 0.0), "b": (12.01, 0.0)})  # beyond range * (1 + hysteresis): down, once
    assert [(c.link, c.up, c.cause, c.distance_m) for c in changes] == [(("a", "b", "bluetooth"), False,
                                                                        "out_of_range", 12.01)]
    assert graph.step({"a": (0.0, 0.0), "b": (11.0, 0.0)}) == []  # in the band, but down: stays down
    assert [c.cause for c in graph.step({"a": (0.0, 0.0), "b": (10.0, 0.0)})] == ["in_range"]  # at range: up


def test_without_hysteresis_the_same_pair_flaps() -> None:
    graph = RadioGraph([Radio("bluetooth", 10.0, "bluetooth", hysteresis=0.0)])
    ups = sum(c.up for k in range(100) for c in graph.step({"a": (0.0, 0.0), "b": (10.5 - math.cos(k / 3), 0.0)}))
    assert ups == 6  # once per swing inside the range: 100 ticks are 5.3 periods of 6 pi ticks


def test_each_radio_is_a_link_of_its_own_and_only_its_nodes_carry_it() -> None:
    only_ab = Radio("lan", 50.0, "lan", members=frozenset({"a", "b"}))
    at = {"a": (0.0, 0.0), "b": (5.0, 0.0), "c": (0.0, 8.0)}
    assert radio_links(at, [BT, only_ab]) == {("a", "b", "bluetooth"), ("a", "b", "lan"), ("a", "c", "bluetooth"),
                                              ("b", "c", "bluetooth")}
    at["c"] = (0.0, 30.0)
    assert radio_links(at, [BT, only_ab]) == {("a", "b", "bluetooth"), ("a", "b", "lan")}


def test_changes_put_downs_before_ups_and_name_their_cause() -> None:
    at = {"a": (0.0, 0.0), "b": (5.0, 0.0), "c": (100.0, 0.0)}
    first = link_changes(None, radio_links(at, [BT]), at)
    assert [(c.link, c.up, c.cause) for c in first] == [(("a", "b", "bluetooth"), True, "start")]
    before = radio_links(at, [BT])
    at = {"a": (0.0, 0.0), "b": (50.0, 0.0), "c": (55.0, 0.0)}
    after = radio_links(at, [BT], before)
    assert [(c.link, c.up, c.cause) for c in link_changes(before, after, at)] == [
        (("a", "b", "bluetooth"), False, "out_of_range"),
        (("b", "c", "bluetooth"), True, "in_range"),
    ]
    gone = link_changes(after, frozenset(), {"b": (50.0, 0.0)})
    assert [(c.cause, c.distance_m) for c in gone] == [("node_gone", None)]


points = st.tuples(st.floats(-200, 200), st.floats(-200, 200))


@settings(max_examples=80, deadline=None)
@given(at=st.lists(points, min_size=0, max_size=40), linked=st.sets(st.tuples(st.integers(0, 39), st.integers(0, 39))))
def test_the_grid_finds_exactly_the_pairs_a_comparison_of_all_pairs_finds(at, linked) -> None:
    positions = {f"n{i:02d}": p for i, p in enumerate(at)}
    previous = frozenset((f"n{min(i, j):02d}", f"n{max(i, j):02d}", "lan") for i, j in linked if i != j)
    expected = set()
    for (a, pa), (b, pb) in itertools.combinations(sorted(positions.items()), 2):
        d = distance(pa, pb)
        if d <= LAN.range_m or ((a, b, "lan") in previous and d <= LAN.drop_m):
            expected.add((a, b, "lan"))
    assert radio_links(positions, [LAN], previous) == expected


def test_loss_grows_linearly_with_distance_within_range() -> None:
    r = Radio("bluetooth", 10.0, "bluetooth", loss_start_fraction=0.5, loss_edge_pct=20.0)
    assert [r.loss_pct(d) for d in (0.0, 5.0, 7.5, 10.0, 11.0)] == [0.0, 0.0, 10.0, 20.0, 20.0]
    assert BT.loss_pct(9.9) == 0.0  # no loss model: none
    assert combined_loss_pct(2.0, 10.0) == pytest.approx(11.8)


@pytest.mark.parametrize("kw", [{"range_m": 0.0}, {"range_m": -1.0}, {"hysteresis": -0.1},
                                {"loss_start_fraction": 1.0}, {"loss_edge_pct": 101.0}])
def test_impossible_radios_are_caller_bugs(kw) -> None:
    with pytest.raises(ValueError):
        Radio("r", **{"range_m": 10.0, "link_class": "lan", **kw})
