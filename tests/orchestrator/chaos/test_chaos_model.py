"""Scenario files, the checker's invariants and target roles: pure logic, no backend."""

from __future__ import annotations

import json
import random

import networkx as nx
import pytest

from orchestrator.chaos.checker import NodeState, PingOutcome, Reconvergence, TransientWatch, evaluate, verdict_of
from orchestrator.chaos.scenario import (
    INVARIANTS,
    ScenarioError,
    load_scenario,
    parse_reference_sequence,
    parse_scenario_yaml,
)
from orchestrator.chaos.targets import (
    TargetError,
    TargetView,
    balanced_halves,
    min_cut_groups,
    resolve_link,
    resolve_nodes,
)
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO, SHARED

# -- scenario files --------------------------------------------------------------------------------

GOOD = """\
name: demo
settle_s: 3
traffic: {rate_per_s: 10, pairs: 5}
steps:
  - action: wait
    until: converged
    within_s: 60
  - action: kill
    target: root
  - action: partition
    by: halves
    after_s: 2
  - action: heal
  - action: flap
    link: [n01, n02]
    period_s: 1
    count: 3
  - action: adversary
    target: cut_vertex
    drop: {traffic: 100, bootstrap: 100}
    expect: {pairs_reachable: false}
"""


def test_yaml_scenario_loads_with_defaults() -> None:
    s = parse_scenario_yaml(GOOD, file="demo.yaml")
    assert [st.action for st in s.steps] == ["wait", "kill", "partition", "heal", "flap", "adversary"]
    assert s.traffic is not None and s.traffic.modes == ("snek", "tree")
    assert s.steps[2].after_s == 2 and s.steps[2].by == "halves"
    assert s.steps[0].wants_check() is False and s.steps[1].wants_check() is True
    assert s.steps[5].expect == {"pairs_reachable": False}


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("steps:\n  - action: kill\n    target: root\n  - action: explode\n", "x.yaml:4: steps[1].action", "explode"),
        ("steps:\n  - action: kill\n    target: root\n    after_s: -2\n", "x.yaml:4: steps[0].after_s", "greater"),
        ("steps:\n  - action: kill\n", "x.yaml:2: steps[0].target", "missing"),
        ("steps:\n  - action: kill\n    target: root\n    expect: {snake_sorted: false}\n",
         "x.yaml:4: steps[0].expect.snake_sorted", "snake_ordered"),
        ("steps:\n  - action: partition\n    groups: [[a]]\n", "x.yaml:2: steps[0]", "at least two groups"),
        ("steps:\n  - action: flap\n    link: [a, a]\n", "x.yaml:3: steps[0].link", "itself"),
        ("steps:\n  - action: adversary\n    target: n1\n    drop: {traffic: 150}\n", "x.yaml:4: steps[0].drop",
         "0-100"),
        ("steps: []\n", "x.yaml:1: steps", "at least 1"),
        ("steps:\n  - action: kill\n    target: root\n    taget: x\n", "x.yaml:4: steps[0].taget", "unknown field"),
        ("steps: [\n", "x.yaml:", "syntax error"),
    ],
)
def test_bad_yaml_names_file_line_and_field(text: str, where: str, what: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario_yaml(text, file="x.yaml")
    assert str(exc.value).startswith(where), str(exc.value)
    assert what in str(exc.value)


REFERENCE = {
    "EventSequence": [
        {"Command": "Debug", "Data": {}},
        {"Command": "RemoveNode", "Data": {"Name": "Alice"}},
        {"Command": "AddNode", "Data": {"Name": "Alice", "NodeType": "Default"}},
        {"Command": "AddNode", "Data": {"Name": "Mallory", "NodeType": "GeneralAdversary"}},
        {"Command": "AddPeer", "Data": {"Node": "Alice", "Peer": "Mallory"}},
        {"Command": "Delay", "Data": {"Length": 1500}},
        {"Command": "ConfigureAdversaryDefaults", "Data": {"Node": "Mallory", "DropRates": {
            "Overall": "0", "Keepalive": "0", "TreeAnnouncement": "0", "VirtualSnakeBootstrap": "100",
            "WakeupBroadcast": "100", "OverlayTraffic": "100"}}},
        {"Command": "ConfigureAdversaryPeer", "Data": {"Node": "Mallory", "Peer": "Alice", "DropRates": {"Overall": 50}}},
        {"Command": "StartPings", "Data": {}},
        {"Command": "Delay", "Data": {"Length": 250}},
        {"Command": "StopPings", "Data": {}},
        {"Command": "RemovePeer", "Data": {"Node": "Alice", "Peer": "Mallory"}},
        {"Command": "Play", "Data": {}},
        {"Command": "Pause", "Data": {}},
    ]
}


def test_reference_sequence_translates_every_command(tmp_path) -> None:
    path = tmp_path / "seq.json"
    path.write_text(json.dumps(REFERENCE, indent=2))
    s = load_scenario(path)
    assert s.builds_network and s.traffic is None
    actions = [st.action for st in s.steps]
    assert actions == ["note", "remove_node", "join", "join", "join", "adversary", "adversary", "traffic", "traffic",
                       "link_down", "note", "note", "check"]  # the end of a sequence is judged (docs/chaos.md)
    adv = s.steps[5]
    assert adv.after_s == 1.5 and adv.target == "Mallory" and adv.peer is None
    assert adv.drop == {"all": 0, "keepalive": 0, "tree_announcement": 0, "bootstrap": 100, "wakeup_broadcast": 100,
                        "traffic": 100}
    assert s.steps[6].peer == "Alice" and s.steps[6].drop == {"all": 50}
    assert s.steps[3].adversary is True and s.steps[2].adversary is False
    assert s.steps[8].enabled is False and s.steps[8].after_s == 0.25
    assert s.steps[4].link == ("Alice", "Mallory")


@pytest.mark.parametrize(
    ("event", "field", "what"),
    [
        ({"Command": "Frob", "Data": {}}, "EventSequence[1].Command", "unknown command"),
        ({"Command": "AddNode", "Data": {"NodeType": "Default"}}, "EventSequence[1].Data.Name", "missing"),
        ({"Command": "AddNode", "Data": {"Name": "A", "NodeType": "Evil"}}, "EventSequence[1].Data.NodeType",
         "GeneralAdversary"),
        ({"Command": "Delay", "Data": {"Length": "soon"}}, "EventSequence[1].Data.Length", "milliseconds"),
        ({"Command": "ConfigureAdversaryDefaults", "Data": {"Node": "A", "DropRates": {"Bootstrap": "1"}}},
         "EventSequence[1].Data.DropRates.Bootstrap", "VirtualSnakeBootstrap"),
        ({"Command": "ConfigureAdversaryDefaults", "Data": {"Node": "A", "DropRates": {"Overall": "x"}}},
         "EventSequence[1].Data.DropRates.Overall", "percentage"),
    ],
)
def test_bad_reference_sequence_names_line_and_field(event: dict, field: str, what: str) -> None:
    text = json.dumps({"EventSequence": [{"Command": "AddNode", "Data": {"Name": "B"}}, event]}, indent=1)
    with pytest.raises(ScenarioError) as exc:
        parse_reference_sequence(text, file="s.json")
    line = [i for i, ln in enumerate(text.splitlines(), 1) if '"Command"' in ln][1]  # the second event
    assert str(exc.value).startswith(f"s.json:{line}: {field}"), str(exc.value)
    assert what in str(exc.value)


# -- the checker -----------------------------------------------------------------------------------


def _states(keys: dict[str, int], roots: dict[str, int], desc: dict[str, int | None]) -> dict[str, NodeState]:
    b = lambda i: bytes([i]) * 32  # noqa: E731
    return {n: NodeState(b(k), b(roots[n]), b(desc[n]) if desc[n] is not None else None) for n, k in keys.items()}


def test_checker_passes_a_converged_line_and_fails_each_broken_invariant() -> None:
    g = nx.path_graph(["a", "b", "c"])
    keys = {"a": 1, "b": 3, "c": 2}
    good = _states(keys, {n: 3 for n in keys}, {"a": None, "b": 2, "c": 1})
    inv = evaluate(g, good, pings=[PingOutcome("a", "c", "snek", True)], errors_before={},
                   reconvergence=Reconvergence(1.0, 4.0, 30.0))  # fmt: skip
    assert tuple(inv) == INVARIANTS and verdict_of(inv) == "pass", {k: v.detail for k, v in inv.items()}

    split = _states(keys, {"a": 1, "b": 3, "c": 3}, {"a": None, "b": 2, "c": 1})
    inv = evaluate(g, split)
    assert not inv["one_root_per_component"].ok and not inv["root_is_highest_key"].ok
    assert "a do not name b" in inv["root_is_highest_key"].detail

    bad_snake = _states(keys, {n: 3 for n in keys}, {"a": None, "b": 1, "c": 1})
    inv = evaluate(g, bad_snake)
    assert inv["one_root_per_component"].ok and not inv["snake_ordered"].ok
    assert "b: descending a, expected c" in inv["snake_ordered"].detail

    lost = evaluate(g, good, pings=[PingOutcome("a", "c", "tree", False), PingOutcome("c", "a", "snek", True)])
    assert not lost["pairs_reachable"].ok and "a->c (tree)" in lost["pairs_reachable"].detail
    assert "snek 1/1, tree 0/1" in lost["pairs_reachable"].detail

    errs = evaluate(g, {**good, "b": NodeState(good["b"].key, good["b"].root, good["b"].descending, 2)},
                    errors_before={"b": 1})  # fmt: skip
    assert not errs["no_internal_errors"].ok and errs["no_internal_errors"].detail == "b: +1"

    slow = evaluate(g, good, reconvergence=Reconvergence(1.0, None, 30.0))
    assert not slow["reconverged_within_bound"].ok and "snake not converged" in slow["reconverged_within_bound"].detail


def test_checker_components_are_judged_apart_and_expected_breaks_pass() -> None:
    g = nx.Graph([("a", "b"), ("c", "d")])
    keys = {"a": 1, "b": 2, "c": 3, "d": 4}
    st = _states(keys, {"a": 2, "b": 2, "c": 4, "d": 4}, {"a": None, "b": 1, "c": None, "d": 3})
    inv = evaluate(g, st)
    assert verdict_of(inv) == "pass", {k: v.detail for k, v in inv.items()}
    cut = evaluate(g, st, pings=[PingOutcome("a", "b", "snek", False)], expect={"pairs_reachable": False})
    assert cut["pairs_reachable"].ok and not cut["pairs_reachable"].held and verdict_of(cut) == "pass"
    held = evaluate(g, st, pings=[PingOutcome("a", "b", "snek", True)], expect={"pairs_reachable": False})
    assert not held["pairs_reachable"].ok and verdict_of(held) == "fail"
    nothing = evaluate(g, st, expect={"pairs_reachable": False})
    assert not nothing["pairs_reachable"].ok  # expecting a break that was never measured is not a pass


def test_nodes_without_state_are_left_out_of_components() -> None:
    g = nx.path_graph(["a", "b", "c"])  # b paused: a and c are judged as two components
    st = _states({"a": 1, "c": 2}, {"a": 1, "c": 2}, {"a": None, "c": None})
    assert verdict_of(evaluate(g, st)) == "pass"


def _line(desc: dict[str, int | None]) -> tuple[nx.Graph, dict[str, NodeState]]:
    """A line a-b-c-d with keys 1-4 (d the root) and the given descending keys."""
    keys = {"a": 1, "b": 2, "c": 3, "d": 4}
    return nx.path_graph(["a", "b", "c", "d"]), _states(keys, {n: 4 for n in keys}, desc)


ORDERED = {"a": None, "b": 1, "c": 2, "d": 3}


def test_a_transient_holds_when_each_node_comes_back_on_its_own_time() -> None:
    # the first reading: b and c out of order; then b is back while d breaks, then c is back while b breaks again:
    # the snake is never ordered at one instant, yet every node that was out of order came back within the limit
    g, first = _line({**ORDERED, "b": None, "c": 1})
    inv = evaluate(g, first, pings=[PingOutcome("a", "d", "snek", False), PingOutcome("d", "a", "snek", True)])
    assert not inv["snake_ordered"].ok and not inv["pairs_reachable"].ok
    watch = TransientWatch.start(100.0, 16.0, g, first, [PingOutcome("a", "d", "snek", False)])
    assert set(watch.nodes) == {"b", "c"} and watch.lost_pairs() == [("a", "d")] and watch.lost_modes() == ("snek",)
    watch.read(103.0, *_line({**ORDERED, "c": 1, "d": None}))
    assert set(watch.nodes) == {"c"} and watch.back == {"b": 3.0}
    watch.read(107.5, *_line({**ORDERED, "b": None, "d": None}))
    assert not watch.nodes and watch.back == {"b": 3.0, "c": 7.5} and not watch.settled
    watch.pinged(108.0, [PingOutcome("a", "d", "snek", True)])
    assert watch.settled and watch.open(116.0) and not watch.open(116.5)
    snake = watch.snake_ordered(inv["snake_ordered"])
    assert snake.ok and snake.held
    assert snake.detail.startswith("transient, held again within 7.5 s, each of 2 back on its own")
    assert "first reading: 2 node(s) out of order: b: descending none, expected a" in snake.detail
    pairs = watch.pairs_reachable(inv["pairs_reachable"])
    assert pairs.ok and "held again within 8.0 s" in pairs.detail and "a->d (snek)" in pairs.detail


def test_a_break_that_outlasts_the_limit_fails_and_names_what_it_kept() -> None:
    g, first = _line({**ORDERED, "c": 1})
    inv = evaluate(g, first, pings=[PingOutcome("a", "d", "tree", False)])
    watch = TransientWatch.start(0.0, 16.0, g, first, [PingOutcome("a", "d", "tree", False)])
    for t in (4.0, 8.0, 12.0, 16.0):  # c keeps the wrong entry; a ping answered in another mode does not count
        watch.read(t, *_line({**ORDERED, "c": 1}))
        watch.pinged(t, [PingOutcome("a", "d", "snek", True), PingOutcome("a", "d", "tree", False)])
    snake, pairs = watch.snake_ordered(inv["snake_ordered"]), watch.pairs_reachable(inv["pairs_reachable"])
    assert not snake.ok and not snake.held and "1 node(s) still out of order 16 s later: c" in snake.detail
    assert snake.detail.startswith(inv["snake_ordered"].detail)
    assert not pairs.ok and "1 pair(s) still lost 16 s later: a->d (tree)" in pairs.detail
    # a node that leaves the live graph (killed, paused) is no longer out of order in it
    gone = {n: s for n, s in first.items() if n != "c"}
    watch.read(17.0, g, gone)
    assert not watch.nodes and watch.back == {"c": 17.0}
    # an invariant that held at the first reading is left as it was
    ok = evaluate(g, _line(ORDERED)[1])["snake_ordered"]
    assert watch.snake_ordered(ok) is ok


def test_a_reference_sources_lost_pair_has_its_coordinate_caches_limit_and_nothing_else_does() -> None:
    # b runs the Go reference: its pings go to cached coordinates for up to a minute, so a pair it lost may answer
    # within the longer limit; a snekbed source's pair and a node out of order keep the soft-state limit
    g, first = _line({**ORDERED, "c": 1})
    lost = [PingOutcome("b", "d", "snek", False), PingOutcome("a", "d", "snek", False)]
    inv = evaluate(g, first, pings=lost)
    watch = TransientWatch.start(0.0, 16.0, g, first, lost, {"b": 65.0})
    assert watch.pair_limit_s == {("b", "d", "snek"): 65.0}
    watch.read(10.0, *_line({**ORDERED, "c": 1}))
    assert set(watch.nodes) == {"c"} and watch.open(16.0)
    assert not watch.open(16.5)  # a node still out of order closes the window at the soft-state limit
    g2, first2 = _line(ORDERED)
    ok_first = evaluate(g2, first2, pings=lost)
    watch = TransientWatch.start(0.0, 16.0, g2, first2, lost, {"b": 65.0})
    assert watch.open(60.0) and not watch.open(65.5)  # open for b's pair only
    watch.pinged(40.0, [PingOutcome("b", "d", "snek", True), PingOutcome("a", "d", "snek", True)])
    assert watch.pairs == {("a", "d", "snek")}  # a's answer came after its 16 s limit
    pairs = watch.pairs_reachable(ok_first["pairs_reachable"])
    assert not pairs.ok and "1 pair(s) still lost 16 s later: a->d (snek)" in pairs.detail
    assert "a reference source (b) routes to cached coordinates for up to 65 s" in pairs.detail
    watch = TransientWatch.start(0.0, 16.0, g2, first2, lost[:1], {"b": 65.0})
    watch.pinged(40.0, [PingOutcome("b", "d", "snek", True)])
    pairs = watch.pairs_reachable(ok_first["pairs_reachable"])
    assert pairs.ok and "held again within 40.0 s" in pairs.detail and "up to 65 s" in pairs.detail
    del inv


# -- targets ---------------------------------------------------------------------------------------


def _view() -> TargetView:
    # a - b - c - d, plus b - e: b and c are cut vertices; key order: d highest
    g = nx.Graph([("a", "b"), ("b", "c"), ("c", "d"), ("b", "e")])
    keys = {n: bytes([i + 1]) * 32 for i, n in enumerate("abecd")}
    roots = {n: keys["d"] for n in keys}
    parents = {"a": "b", "b": "c", "c": "d", "d": None, "e": "b"}
    return TargetView(g, keys, roots, parents)


def test_roles_resolve_deterministically() -> None:
    v, rng = _view(), random.Random(1)
    assert resolve_nodes("root", v, rng) == ["d"]
    assert resolve_nodes("root_children", v, rng) == ["c"]
    assert resolve_nodes("highest_key", v, rng) == ["d"] and resolve_nodes("lowest_key", v, rng) == ["a"]
    assert resolve_nodes("max_degree", v, rng) == ["b"]
    assert resolve_nodes("cut_vertex", v, rng) == ["b"]  # cuts off a and e (c would cut off d only)
    assert resolve_nodes("random", v, random.Random(7), count=2) == resolve_nodes("random", v, random.Random(7), 2)
    assert resolve_nodes("all", v, rng) == ["a", "b", "c", "d", "e"]
    assert resolve_link("bridge", v, rng) in {("a", "b"), ("b", "c"), ("b", "e"), ("c", "d")}
    assert resolve_link("root_link", v, rng) == ("d", "c")
    small, big = min_cut_groups(v)
    assert small | big == set("abcde") and len(small) <= len(big)
    assert sum(1 for x, y in v.graph.edges if (x in small) != (y in small)) == 1  # a tree: one link is a min cut
    assert min_cut_groups(v) == (small, big)
    with pytest.raises(TargetError, match="unknown node"):
        resolve_nodes("zz", v, rng)
    ring = TargetView(nx.cycle_graph(["a", "b", "c"]), {n: bytes([i]) * 32 for i, n in enumerate("abc")})
    with pytest.raises(TargetError, match="no cut vertex"):
        resolve_nodes("cut_vertex", ring, rng)
    with pytest.raises(TargetError, match="no bridge"):
        resolve_link("bridge", ring, rng)


def test_balanced_halves_are_connected_and_even_on_the_shipped_topologies() -> None:
    for path in (REPO / "compose" / "topologies" / "mesh-12.yaml", SHARED / "topologies" / "pinecone" / "graph-250.txt"):
        g = load_topology(path).simple_graph()
        view = TargetView(g, {n: n.encode().ljust(32, b"\0") for n in g.nodes})
        a, b = balanced_halves(view, random.Random(0))
        assert a | b == set(g.nodes) and not a & b and abs(len(a) - len(b)) <= 1
        assert nx.is_connected(g.subgraph(a)) and nx.is_connected(g.subgraph(b)), path.name
