"""The checker's honest view: while adversaries are present, adversarial nodes and pairs with an adversarial end are
not judged, and an honest node may name what it can know (orchestrator.chaos.checker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx

from orchestrator.chaos.checker import NodeState, PingOutcome, Reconvergence, adversaries_after, evaluate
from tests.ci import REPO
from tests.orchestrator.planted import write_two_rings


def _line() -> tuple[nx.Graph, dict[str, bytes]]:
    """a - b - c - d - e, keys in name order (e is the highest)."""
    g = nx.path_graph(["a", "b", "c", "d", "e"])
    return g, {n: bytes([i + 1]) for i, n in enumerate("abcde")}


def test_honest_view_ignores_the_adversary_and_its_pairs() -> None:
    g, k = _line()
    # c is an adversary that hides its key: d skips it and points at b; c names nonsense
    states = {
        "a": NodeState(k["a"], k["e"], None), "b": NodeState(k["b"], k["e"], k["a"]),
        "c": NodeState(k["c"], k["c"], None),
        "d": NodeState(k["d"], k["e"], k["b"]), "e": NodeState(k["e"], k["e"], k["d"]),
    }  # fmt: skip
    pings = [PingOutcome("a", "c", "snek", False), PingOutcome("a", "b", "snek", True)]
    plain = evaluate(g, states, pings=pings)
    assert not plain["one_root_per_component"].held and not plain["snake_ordered"].held
    assert not plain["pairs_reachable"].held
    honest = evaluate(g, states, pings=pings, adversaries={"c"})
    for name in ("one_root_per_component", "root_is_highest_key", "snake_ordered", "pairs_reachable"):
        assert honest[name].held, honest[name].detail
        assert honest[name].detail.startswith("honest view (1 adversarial node(s) ignored)")
    # a lost ping between honest nodes across the adversary still breaks reachability; so does a cut the adversary
    # made (each side converged on its own: d names d's side's root, not the component's)
    split = dict(states, d=NodeState(k["d"], k["e"], None), a=NodeState(k["a"], k["b"], None),
                 b=NodeState(k["b"], k["b"], k["a"]))
    got = evaluate(g, split, adversaries={"c"})
    assert not got["one_root_per_component"].held and not got["snake_ordered"].held
    cut = evaluate(g, states, pings=[PingOutcome("a", "e", "snek", False)], adversaries={"c"})
    assert not cut["pairs_reachable"].held
    assert set(plain) == set(honest)  # the invariant names are unchanged


def test_a_network_an_adversary_keeps_from_settling_is_not_judged_stuck_when_the_honest_nodes_hold() -> None:
    """A bootstrap dropper never gets its own descending entry, so the whole network's snake never converges and
    the re-convergence is 'stuck'; with the honest nodes' roots and snake in order that is not judged (was a false
    failure: a shrunk reference sequence without the adversary's peering failed reconverged_within_bound)."""
    g, k = _line()
    states = {n: NodeState(k[n], k["e"], k["abcde"["abcde".index(n) - 1]] if n != "a" else None) for n in "abcde"}
    states["d"] = NodeState(k["d"], k["e"], None)  # the adversary: its descending entry never forms
    stuck = Reconvergence(0.0, None, 45.0, horizon_s=135.0)
    honest = evaluate(g, states, adversaries={"d"}, reconvergence=stuck)["reconverged_within_bound"]
    assert not honest.evaluated and "not judged" in honest.detail and "stuck" in honest.detail
    plain = evaluate(g, states, reconvergence=stuck)["reconverged_within_bound"]
    assert plain.evaluated and not plain.ok  # without adversaries, stuck is stuck
    states["b"] = NodeState(k["b"], k["e"], None)  # an honest node out of order too: stuck is judged again
    judged = evaluate(g, states, adversaries={"d"}, reconvergence=stuck)["reconverged_within_bound"]
    assert judged.evaluated and not judged.ok


def test_honest_view_still_sees_honest_disorder_and_expectations() -> None:
    g, k = _line()
    states = {n: NodeState(k[n], k["e"], k["abcde"["abcde".index(n) - 1]] if n != "a" else None) for n in "abcde"}
    states["b"] = NodeState(k["b"], k["e"], k["d"])  # an honest node out of order
    inv = evaluate(g, states, adversaries={"c"}, expect={"snake_ordered": False})
    assert not inv["snake_ordered"].held and inv["snake_ordered"].ok  # broke, as the step expected
    # the adversary's key as root (it is the component's highest) is no honest node's fault
    states2 = {n: NodeState(k[n], k["e"], None) for n in "abcd"} | {"e": NodeState(k["e"], k["e"], None)}
    assert evaluate(g, states2, adversaries={"e"})["root_is_highest_key"].held


def test_adversaries_tracked_from_actions() -> None:
    s = adversaries_after((), "adversary", "x", {"drop": {"all": 100}})
    assert s == {"x"}
    s = adversaries_after(s, "join", "y", {"peers": ["x"], "adversary": True})
    assert s == {"x", "y"}
    s = adversaries_after(s, "adversary", "x", {"drop": {"all": 0}})
    assert s == {"y"}
    s = adversaries_after(s, "adversary", "y", {"strategy": "none"})
    assert s == set()
    assert adversaries_after({"z"}, "kill", "z", None) == {"z"}
    assert adversaries_after(set(), "adversary", "g", {"strategy": "greyhole", "forward": 0.3}) == {"g"}


EXPECT_BREAK_THEN_HOLD = """\
name: break-then-hold
traffic: {rate_per_s: 4, pairs: 30}
steps:
  - {action: wait, until: converged, within_s: 120}
  - {action: adversary, target: h, drop: {traffic: 100}, settle_s: 5, expect: {pairs_reachable: false}}
  - {action: adversary, target: h, drop: {traffic: 0}, settle_s: 5}
"""


def test_a_scenario_expects_a_break_during_the_attack_and_a_hold_after(tmp_path: Path) -> None:
    """Two rings joined at h; h drops every data frame: honest pairs across it are lost (expected), pings to and
    from h are not counted; once h turns honest, every invariant holds again on the plain view."""
    topo = write_two_rings(tmp_path / "two-rings.yaml")  # h is the only cut vertex
    sc = tmp_path / "sc.yaml"
    sc.write_text(EXPECT_BREAK_THEN_HOLD)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", str(sc), "--topology", str(topo),
                           "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    during, after = json.loads(done.stdout)["steps"][1:]
    reach = during["invariants"]["pairs_reachable"]
    assert reach["held"] is False and reach["ok"] is True
    assert reach["detail"].startswith("honest view (1 adversarial node(s) ignored)")
    assert "h->" not in reach["detail"] and "->h " not in reach["detail"]
    assert all(v["ok"] for v in after["invariants"].values())
    assert not any(v["detail"].startswith("honest view") for v in after["invariants"].values())
