"""Issue 28, reference sequences judged: RemovePeer, RemoveNode and adversary configuration are faults, the checker
runs after each (by the next command at the latest) and at the end; the ``snekbed`` extension key carries ``expect``
and the reference ignores it. In process, virtual clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from node.core.crypto import Identity, derive_seed
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import INVARIANTS, ScenarioError, load_scenario, parse_reference_sequence
from orchestrator.chaos.sequence import EXTENSION_KEY
from orchestrator.cli.chaos import chaos
from tests.ci import REPO

NODES = ("Alice", "Bob", "Carol", "Dan", "Erin", "Frank")
RING = [("Alice", "Bob"), ("Bob", "Carol"), ("Carol", "Dan"), ("Dan", "Erin"), ("Erin", "Frank"), ("Frank", "Alice"),
        ("Alice", "Dan")]  # fmt: skip


def add(name: str, kind: str = "Default") -> dict[str, Any]:
    return {"Command": "AddNode", "Data": {"Name": name, "NodeType": kind}}


def peer(cmd: str, a: str, b: str) -> dict[str, Any]:
    return {"Command": cmd, "Data": {"Node": a, "Peer": b}}


def delay(ms: int) -> dict[str, Any]:
    return {"Command": "Delay", "Data": {"Length": ms}}


def network() -> list[dict[str, Any]]:
    return [*(add(n) for n in NODES), *(peer("AddPeer", a, b) for a, b in RING), {"Command": "StartPings", "Data": {}},
            delay(15000)]  # fmt: skip


def _run(doc: dict[str, Any], tmp_path: Path, seed: int = 1) -> dict[str, Any]:
    path = tmp_path / "seq.json"
    path.write_text(json.dumps(doc, indent=2))
    return execute(load_scenario(path), None, ChaosOptions(seed=seed))


def test_remove_peer_and_remove_node_are_judged_on_every_invariant_and_so_is_the_end(tmp_path: Path) -> None:
    events = [*network(), peer("RemovePeer", "Alice", "Dan"), delay(30000), {"Command": "RemoveNode",
              "Data": {"Name": "Carol"}}, delay(30000), peer("RemovePeer", "Erin", "Frank"), delay(2000)]  # fmt: skip
    out = _run({"EventSequence": events}, tmp_path)
    assert out["verdict"] == "pass", json.dumps(out["steps"], indent=1)[-4000:]
    faults = [s for s in out["steps"] if s["action"] in ("link_down", "remove_node")]
    end = out["steps"][-1]
    assert [s["action"] for s in faults] == ["link_down", "remove_node", "link_down"] and end["action"] == "check"
    for s in (faults[0], faults[1], end):  # 30 s to the next command: room for re-convergence and the settle window
        assert tuple(s["invariants"]) == INVARIANTS
        assert all(v["ok"] and v.get("evaluated", True) for v in s["invariants"].values()), s["invariants"]
    assert faults[0]["check_window"] == {"within_s": 30.0, "checked_after_s": faults[0]["check_window"]["checked_after_s"],
                                         "cut_short": False}  # fmt: skip
    assert faults[1]["at_s"] == pytest.approx(faults[0]["at_s"] + 30.0, abs=0.01)  # the commands keep their times
    # the last fault: nothing comes after it to hold back, so its check runs its full course, and the end is judged
    # again with re-convergence timed from the last command
    assert "check_window" not in faults[2] and tuple(faults[2]["invariants"]) == INVARIANTS
    assert all(v.get("evaluated", True) for v in faults[2]["invariants"].values())
    assert "tree" in end["invariants"]["reconverged_within_bound"]["detail"]
    assert end["invariants"]["pairs_reachable"]["detail"].startswith("delivered")


def test_a_check_cut_short_by_the_next_command_says_so_and_does_not_delay_it(tmp_path: Path) -> None:
    events = [*network(), peer("RemovePeer", "Alice", "Bob"), peer("RemovePeer", "Alice", "Dan"), delay(1000),
              peer("AddPeer", "Alice", "Bob"), delay(20000)]  # fmt: skip
    out = _run({"EventSequence": events}, tmp_path)
    first, second, readd = (s for s in out["steps"] if s["action"] in ("link_down", "join") and s["index"] > 13)
    assert first["check_window"]["cut_short"] and first["check_window"]["within_s"] == 0.0
    assert "the next command came 0 s after the fault" in first["check_window"]["reason"]
    assert second["at_s"] == first["at_s"]  # the checker did not hold the next command back
    not_judged = [k for k, v in first["invariants"].items() if v.get("evaluated") is False]
    for k in not_judged:
        assert k == "pairs_reachable" or first["invariants"][k]["detail"].startswith("not judged: the next command")
    assert readd["at_s"] == pytest.approx(second["at_s"] + 1.0, abs=1.01)  # at most one ping retry late
    assert out["steps"][-1]["action"] == "check" and out["verdict"] == "pass", out["failed_steps"]


def test_the_extension_key_carries_expect_and_a_break_that_does_not_come_fails(tmp_path: Path) -> None:
    events = [*network(), {**peer("RemovePeer", "Alice", "Dan"),
                           EXTENSION_KEY: {"expect": {"one_root_per_component": False}, "settle_s": 2}},
              delay(30000)]  # fmt: skip
    doc = {"EventSequence": events, EXTENSION_KEY: {"end": {"expect": {"pairs_reachable": True}}, "settle_s": 3}}
    sc = parse_reference_sequence(json.dumps(doc))
    step = next(s for s in sc.steps if s.action == "link_down")
    assert step.expect == {"one_root_per_component": False} and step.settle_s == 2 and sc.settle_s == 3
    out = _run(doc, tmp_path)
    bad = out["steps"][step_index(out, "link_down")]
    assert out["verdict"] == "fail" and bad["index"] in out["failed_steps"] and len(out["failed_steps"]) == 1
    assert bad["invariants"]["one_root_per_component"] == {**bad["invariants"]["one_root_per_component"], "ok": False,
                                                           "held": True, "expected": False}  # fmt: skip


def step_index(out: dict[str, Any], action: str) -> int:
    return next(s["index"] for s in out["steps"] if s["action"] == action)


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ({"EventSequence": [{**add("A"), EXTENSION_KEY: {"expct": {}}}]}, f"EventSequence[0].{EXTENSION_KEY}.expct"),
        ({"EventSequence": [{**add("A"), EXTENSION_KEY: {"expect": {"snake": False}}}]},
         f"EventSequence[0].{EXTENSION_KEY}.expect.snake"),
        ({"EventSequence": [add("A")], EXTENSION_KEY: {"end": {"expect": {"pairs": True}}}},
         f"{EXTENSION_KEY}.end.expect.pairs"),
        ({"EventSequence": [add("A")], EXTENSION_KEY: {"settle": 1}}, f"{EXTENSION_KEY}.settle"),
        ({"EventSequence": [{**delay(5), EXTENSION_KEY: {"check": True}}]}, f"EventSequence[0].{EXTENSION_KEY}"),
    ],
)
def test_a_bad_extension_names_its_field_and_exits_2(tmp_path: Path, where: dict[str, Any], field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(where, indent=1))
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert f": {field}: " in str(exc.value), str(exc.value)
    assert CliRunner().invoke(chaos, [str(path)]).exit_code == 2


def _reference_would_play(doc: dict[str, Any]) -> bool:
    """The reference UI's rules for a sequence file, as ui/modules/ui.js (validateEventSequence) applies them:
    an ``EventSequence``; each event a known ``Command`` and a ``Data`` with exactly that command's fields (and
    DropRates with exactly its six keys). Nothing else is looked at, and only ``Data`` is sent to the simulator."""
    fields = {"Debug": (), "Play": (), "Pause": (), "Delay": ("Length",), "AddNode": ("Name", "NodeType"),
              "RemoveNode": ("Name",), "AddPeer": ("Node", "Peer"), "RemovePeer": ("Node", "Peer"),
              "ConfigureAdversaryDefaults": ("Node", "DropRates"),
              "ConfigureAdversaryPeer": ("Node", "Peer", "DropRates"), "StartPings": (), "StopPings": ()}  # fmt: skip
    if "EventSequence" not in doc:
        return False
    for ev in doc["EventSequence"]:
        if ev.get("Command") not in fields or not isinstance(ev.get("Data"), dict):
            return False
        if set(ev["Data"]) != set(fields[ev["Command"]]):
            return False
    return True


def test_the_reference_ignores_the_extension_where_it_goes(tmp_path: Path) -> None:
    events = [*network(), {**peer("RemovePeer", "Alice", "Dan"), EXTENSION_KEY: {"expect": {"pairs_reachable": False}}}]
    doc = {"EventSequence": events, EXTENSION_KEY: {"settle_s": 2, "end": {"expect": {"snake_ordered": True}}}}
    assert _reference_would_play(doc)
    inside = json.loads(json.dumps(doc))
    inside["EventSequence"][-1]["Data"][EXTENSION_KEY] = {}  # inside Data the reference would refuse the event
    assert not _reference_would_play(inside)
    docs = (REPO / "docs" / "chaos.md").read_text()
    assert f'"{EXTENSION_KEY}"' in docs and "Reference sequences judged" in docs


def test_any_command_the_extension_asks_a_check_for_is_checked_by_the_next_command() -> None:
    events = [add("A"), add("B"), {**peer("AddPeer", "A", "B"), EXTENSION_KEY: {"check": True}}, delay(3000),
              {**peer("RemovePeer", "A", "B"), EXTENSION_KEY: {"check": False}}, delay(1000), add("C")]  # fmt: skip
    sc = parse_reference_sequence(json.dumps({"EventSequence": events}))
    addpeer, removepeer = sc.steps[2], sc.steps[3]
    assert addpeer.wants_check() and addpeer.check_within_s == 3.0
    assert not removepeer.wants_check() and removepeer.check_within_s is None
    assert not sc.steps[0].wants_check() and sc.steps[-1].action == "check" and sc.steps[-1].reconvergence


def test_a_node_added_again_after_its_removal_is_a_new_node_peered_only_by_later_addpeers(tmp_path: Path) -> None:
    """The reference's AddNode makes a fresh node (simulator CreateNode: a new ed25519 key, no peer until an AddPeer
    makes one). Carol added back after her RemoveNode has none of her old peerings (Bob, Dan) and a key of her own
    (ours from the seed, her name and her old key); the checker after the AddNode judges her as a component of her
    own, and the AddPeer after it links her to Bob alone. Pings to her first life keep that life's key and result."""
    events = [*network(), {"Command": "RemoveNode", "Data": {"Name": "Carol"}}, delay(20000),
              {**add("Carol"), EXTENSION_KEY: {"check": True}}, delay(20000), peer("AddPeer", "Carol", "Bob"),
              delay(20000)]  # fmt: skip
    path, run = tmp_path / "seq.json", tmp_path / "run"
    path.write_text(json.dumps({"EventSequence": events}, indent=2))
    out = execute(load_scenario(path), None, ChaosOptions(seed=1, record=run))
    assert out["verdict"] == "pass", out["failed_steps"]
    removal, readd, addpeer, end = out["steps"][-4:]
    assert removal["action"] == "remove_node" and readd["targets"] == ["Carol"] and addpeer["action"] == "join"
    # judged on the graph with Carol alone: six live nodes in two components, each with its own root
    assert (readd["live_nodes"], readd["components"]) == (6, 2)
    assert readd["invariants"]["one_root_per_component"]["detail"] == "2 component(s), one root each"
    assert all(v["ok"] and v.get("evaluated", True) for v in readd["invariants"].values()), readd["invariants"]
    assert readd["confirmed"]["how"] == "join Carol: Carol answers (no live neighbour to peer with)"
    assert (end["live_nodes"], end["components"]) == (6, 1) and all(v["ok"] for v in end["invariants"].values())
    # what Carol wrote: two lives with two keys; the second peers with Bob alone, after the AddPeer
    log = [json.loads(line) for line in (run / "events" / "Carol.jsonl").read_text().splitlines()]
    first, second = (e["node"] for e in log if e["event"] == "node_started")
    assert second == Identity(derive_seed(1, "Carol", bytes.fromhex(first))).public_key.hex() != first
    meta = json.loads((run / "meta.json").read_text())
    assert meta["nodes"]["Carol"] == second
    ups = [(e["mono_s"], e["peer"]) for e in log if e["event"] == "peer_up" and e["node"] == second]
    assert [p for _, p in ups] == [meta["nodes"]["Bob"]] and ups[0][0] >= addpeer["at_s"]
    pings = [json.loads(line) for line in (run / "pings.jsonl").read_text().splitlines()]
    before = [p for p in pings if p["target"] == "Carol" and p["sent_mono_s"] < removal["at_s"]]
    assert before and all(p["target_key"] == first and p["received"] for p in before)
    assert {p["target_key"] for p in pings if p["target"] == "Carol" and p["sent_mono_s"] > readd["at_s"]} == {second}
