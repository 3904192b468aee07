"""The episodes of a run whose nodes move (pipeline.jobs.episodes, plain Python): every instant with a radio link
change the network made opens one episode whose graph has the radio links up then (docs/run-dataset.md)."""

from __future__ import annotations

import pytest

from pipeline.errors import JobInputError
from pipeline.jobs.episodes import Action, RadioChange, episode_rows, plan_episodes, radio_openings

KA, KB, KC, KD = ("1" * 64, "2" * 64, "a" * 64, "f" * 64)  # key order: A < B < C < D
NODES = {"a": KA, "b": KB, "c": KC, "d": KD}
FIXED = [("a", "b")]
ABC_D = {KA: (0, KC, None), KB: (0, KC, KA), KC: (0, KC, KB), KD: (1, KD, None)}  # d alone
ALL = {KA: (0, KD, None), KB: (0, KD, KA), KC: (0, KD, KB), KD: (0, KD, KC)}


def test_each_instant_with_a_made_radio_change_is_one_episode_on_the_radio_graph_then():
    radio = [
        RadioChange(0.2, True, "b", "c", "bluetooth", start=True),  # up from the run start
        RadioChange(2.0, True, "c", "d", "bluetooth"), RadioChange(2.0, True, "c", "d", "lan"),  # one tick
        RadioChange(3.0, False, "c", "d", "bluetooth"),  # c--d still joined by lan: one edge, still up
        RadioChange(4.0, True, "a", "d", "bluetooth", made=False),  # the network made no peering: no link
        RadioChange(5.0, False, "c", "d", "lan"),
        RadioChange(6.0, True, "c", "d", "bluetooth"),  # at a kill's instant: in the kill's episode
    ]
    eps = plan_episodes(NODES, FIXED, [Action(6.0, "kill", "a")], 0.5, radio)
    assert [(e["episode"], e["action"], e["target"], e["t0_s"], e["t1_s"]) for e in eps] == [
        (0, "start", None, 0.5, 2.0), (1, "radio", None, 2.0, 3.0), (2, "radio", None, 3.0, 5.0),
        (3, "radio", None, 5.0, 6.0), (4, "kill", "a", 6.0, None)]
    assert [e["expected"] for e in eps[:4]] == [ABC_D, ALL, ALL, ABC_D]
    assert eps[4]["expected"] == {KB: (0, KD, None), KC: (0, KD, KB), KD: (0, KD, KC)}
    # without radio changes: the fixed links only, one episode until the kill
    assert [e["action"] for e in plan_episodes(NODES, FIXED, [Action(6.0, "kill", "a")], 0.5)] == ["start", "kill"]


def test_episode_rows_group_a_ticks_link_lines_and_leave_positions_out():
    def line(t: float, kind: str, a: str | None = None, b: str | None = None, cause: str | None = None,
             n: int = 0) -> dict:  # fmt: skip
        return {"run_id": "r", "mono_s": t, "kind": kind, "a": a, "b": b, "radio": "lan", "made": True,
                "cause": cause, "line_no": n}

    mobility = [line(1.0, "position", n=1), line(1.0, "link_up", "a", "b", "start", 2),
                line(4.0, "link_up", "c", "d", "in_range", 4), line(4.0, "link_up", "b", "c", "in_range", 3),
                line(4.0, "position", n=5), line(7.0, "link_down", "a", "b", "out_of_range", 6)]
    args = ([{"run_id": "r", "start_s": 1.5}], [], [], [{"run_id": "r", "nodes": NODES}])
    rows = episode_rows(*args, mobility)
    assert sorted({(r[1], r[2], r[3], r[4], r[5]) for r in rows}) == [
        (0, 1.5, 4.0, "start", None), (1, 4.0, 7.0, "radio", None), (2, 7.0, None, "radio", None)]
    roots = {(r[1], r[6]): r[8] for r in rows}
    assert [roots[(0, k)] for k in (KA, KB, KC, KD)] == [KB, KB, KC, KD]  # a--b up from the start only
    assert {roots[(1, k)] for k in (KA, KB, KC, KD)} == {KD}
    assert [roots[(2, k)] for k in (KA, KB, KC, KD)] == [KA, KD, KD, KD]
    assert {r[1] for r in episode_rows(*args)} == {0}  # no mobility rows: the start only
    with pytest.raises(JobInputError, match="unknown node"):
        episode_rows(*args, [line(4.0, "link_up", "c", "zz", "in_range")])


def test_radio_openings_are_the_radio_episodes_instants():
    """What places pings in episodes (pipeline.jobs.delivery.enrich_pings) takes the radio episodes' instants from
    radio_openings: the same as the episodes table's, a tick at an action's instant in the action's episode."""
    def line(t: float, kind: str, a: str, b: str, made: bool = True, cause: str | None = "in_range") -> dict:
        return {"run_id": "r", "mono_s": t, "kind": kind, "a": a, "b": b, "radio": "lan", "made": made,
                "cause": cause, "line_no": 0}

    mobility = [line(1.0, "link_up", "a", "b", cause="start"), line(3.0, "link_up", "b", "c"),
                line(4.0, "link_up", "c", "d", made=False), line(5.0, "link_down", "b", "c"),
                line(6.0, "link_up", "c", "d"), line(8.0, "link_down", "a", "b")]
    bounds = [{"run_id": "r", "start_s": 1.5}, {"run_id": "idle", "start_s": None}]
    actions = [{"run_id": "r", "mono_s": 6.0, "action": "kill", "target": "a", "detail": None, "line_no": 1},
               {"run_id": "r", "mono_s": 7.0, "action": "converged", "target": None, "detail": None, "line_no": 2}]
    rows = episode_rows(bounds, [], actions, [{"run_id": "r", "nodes": NODES}], mobility)
    radio_t0 = sorted({r[2] for r in rows if r[4] == "radio"})
    assert radio_openings(bounds, actions, mobility) == [("r", t) for t in radio_t0] == [("r", 3.0), ("r", 5.0),
                                                                                          ("r", 8.0)]
    assert radio_openings(bounds, actions, None) == []
