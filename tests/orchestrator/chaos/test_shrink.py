"""Issue 28, shrinking: ``snekbed chaos FILE.json --shrink`` delta-debugs a failing reference sequence to one at most a
third as long, in the same format, failing the same invariant, in at most 60 reruns (in process, virtual clock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import load_scenario, parse_reference_sequence
from orchestrator.chaos.sequence import EXTENSION_KEY, needs
from orchestrator.chaos.shrink import failed_invariant, shrink
from orchestrator.cli.chaos import chaos
from tests.orchestrator.chaos.test_sequence import _reference_would_play

#: Mallory drops every bootstrap it receives (the reference's DropRates: all six keys, percentages as strings)
BOOTSTRAPS = {"Overall": "0", "Keepalive": "0", "TreeAnnouncement": "0", "VirtualSnakeBootstrap": "100",
              "WakeupBroadcast": "0", "OverlayTraffic": "0"}  # fmt: skip
NEAR = ["Alice", "Bob", "Carol", "Dan"]
FAR = [f"F{i}" for i in range(1, 9)]


def _ev(cmd: str, **data: Any) -> dict[str, Any]:
    return {"Command": cmd, "Data": data}


def failing_sequence() -> dict[str, Any]:
    """36 commands, nothing planted: a GeneralAdversary, Mallory, joins a line (Alice - Bob - Mallory - Carol - Dan)
    and is told to drop every bootstrap; a node whose next higher key is Mallory's can then never be its descending
    neighbour, and the snake stays out of order (``snake_ordered`` fails at the end, on a real run). Around it, a
    second network of eight nodes comes and goes: peerings added and removed, a node removed (its peers were added
    earlier) and added back, pings started and stopped, a UI command. The failure needs a combination: Mallory (an
    adversary), a node peered with it whose bootstraps it must take, that peering, and the configuration."""
    events = [*(_ev("AddNode", Name=n, NodeType="Default") for n in NEAR[:2]),
              _ev("AddNode", Name="Mallory", NodeType="GeneralAdversary"),
              *(_ev("AddNode", Name=n, NodeType="Default") for n in FAR[:4]),
              *(_ev("AddNode", Name=n, NodeType="Default") for n in NEAR[2:]),
              *(_ev("AddPeer", Node=a, Peer=b) for a, b in zip(FAR[:4], FAR[1:4] + FAR[:1])),
              _ev("AddPeer", Node="Alice", Peer="Bob"), _ev("AddPeer", Node="Bob", Peer="Mallory"),
              _ev("StartPings"), _ev("Delay", Length=5000),
              _ev("AddPeer", Node="Mallory", Peer="Carol"), _ev("AddPeer", Node="Carol", Peer="Dan"),
              *(_ev("AddNode", Name=n, NodeType="Default") for n in FAR[4:]),
              *(_ev("AddPeer", Node=a, Peer=b) for a, b in zip(FAR[4:], FAR[5:])),
              _ev("AddPeer", Node="F4", Peer="F5"), _ev("Delay", Length=8000),
              _ev("RemovePeer", Node="F1", Peer="F2"), _ev("Delay", Length=6000),
              _ev("ConfigureAdversaryDefaults", Node="Mallory", DropRates=BOOTSTRAPS), _ev("Delay", Length=4000),
              _ev("RemoveNode", Name="F6"), _ev("Debug"), _ev("Delay", Length=6000),
              _ev("AddNode", Name="F6", NodeType="Default"), _ev("AddPeer", Node="F6", Peer="F7"), _ev("StopPings"),
              _ev("StartPings"), _ev("Delay", Length=6000), _ev("RemovePeer", Node="F7", Peer="F8"),
              _ev("AddPeer", Node="F1", Peer="F2"), _ev("Delay", Length=5000)]  # fmt: skip
    return {"EventSequence": events}


def _commands(doc: dict[str, Any]) -> int:
    return sum(ev["Command"] != "Delay" for ev in doc["EventSequence"])


def _run(text: str) -> dict[str, Any]:
    return execute(parse_reference_sequence(text, name="cand"), None, ChaosOptions(seed=2))


def test_needs_keeps_what_later_commands_cannot_run_without() -> None:
    events = failing_sequence()["EventSequence"]
    deps = needs(events)
    index = {json.dumps(ev, sort_keys=True): i for i, ev in enumerate(events)}  # the last of equal events

    def at(cmd: str, **data: Any) -> int:
        return index[json.dumps(_ev(cmd, **data), sort_keys=True)]

    assert deps[at("AddPeer", Node="F1", Peer="F2")] == {3, 4}  # both AddNodes (the last AddPeer F1-F2)
    assert deps[at("ConfigureAdversaryDefaults", Node="Mallory", DropRates=BOOTSTRAPS)] == {2}
    first_f6 = next(i for i, ev in enumerate(events) if ev == _ev("AddNode", Name="F6", NodeType="Default"))
    back = at("AddNode", Name="F6", NodeType="Default")  # F6 added back after its RemoveNode
    assert first_f6 < back and deps[at("AddPeer", Node="F6", Peer="F7")] == {back, at("AddNode", Name="F7",
                                                                                          NodeType="Default")}


def test_a_failing_sequence_shrinks_to_a_third_in_at_most_60_reruns(tmp_path: Path) -> None:
    doc = failing_sequence()
    text = json.dumps(doc, indent=2)
    before = _commands(doc)
    assert before >= 30
    original = _run(text)
    assert original["verdict"] == "fail" and failed_invariant(original) == "snake_ordered"
    result = shrink(text, _run, original=original)  # the default budget (200): the reruns it takes are counted
    assert result is not None and result.invariant == "snake_ordered"
    small = json.loads(result.text)
    assert _commands(small) <= before / 3 and result.reruns <= 60 and not result.budget_spent, result.to_dict()
    # the same format: the reference's UI would play it, and it fails the same invariant loaded from a file
    assert _reference_would_play(small)
    path = tmp_path / "small.json"
    path.write_text(result.text)
    again = execute(load_scenario(path), None, ChaosOptions(seed=2))
    assert failed_invariant(again) == "snake_ordered"
    # judged on the honest view (Mallory, the adversary, is not judged): an honest node lost its descending entry
    assert "1 adversarial node(s) ignored" in next(s["invariants"]["snake_ordered"]["detail"] for s in again["steps"]
                                                   if not s.get("invariants", {}).get("snake_ordered",
                                                                                        {"ok": True})["ok"])  # fmt: skip
    # what it kept is the combination the failure needs: the adversary, a peering with it, its configuration
    events = small["EventSequence"]
    kept = [(ev["Command"], ev["Data"]) for ev in events if ev["Command"] != "Delay"]
    assert ("AddNode", {"Name": "Mallory", "NodeType": "GeneralAdversary"}) in kept
    added = {d["Name"] for c, d in kept if c == "AddNode"}
    assert all({d["Node"], d["Peer"]} <= added for c, d in kept if c == "AddPeer")  # every AddPeer kept its nodes
    configure = next(i for i, ev in enumerate(events) if ev["Command"] == "ConfigureAdversaryDefaults")
    peering = next(i for i, ev in enumerate(events) if ev["Command"] == "AddPeer" and "Mallory" in ev["Data"].values())
    assert events[configure]["Data"] == {"Node": "Mallory", "DropRates": BOOTSTRAPS}
    # and none of it can go: without Mallory's peering, or without its configuration, the same run passes
    for left_out in (peering, configure):
        rest = [ev for i, ev in enumerate(events) if i != left_out]
        assert failed_invariant(_run(json.dumps({"EventSequence": rest}))) is None, events[left_out]


def test_a_guess_that_was_wrong_is_run_before_the_result_is_called_one_minimal() -> None:
    """ddmin takes a subset of a candidate that passed to pass too, without a run. Where that is wrong (here Bob's
    AddNode hides Alice's failure unless Carol's is there too, so Alice and Carol fail, Alice, Bob and Carol fail,
    Alice and Bob pass, and Alice alone fails), the last check runs every candidate one command smaller and goes on
    from one that fails: the result is Alice alone (with the guesses trusted, Alice and Carol, called 1-minimal)."""
    events = [_ev("AddNode", Name=n, NodeType="Default") for n in ("Alice", "Bob", "Carol", "Dan", "F1", "F2")]
    runs: list[set[str]] = []

    def run(text: str) -> dict[str, Any]:  # stands in for a run, with that failure
        names = {ev["Data"]["Name"] for ev in json.loads(text)["EventSequence"]}
        runs.append(names)
        bad = "Alice" in names and ("Bob" not in names or "Carol" in names)
        return {"steps": [{"verdict": "fail" if bad else "pass", "invariants": {"snake_ordered": {"ok": not bad}}}]}

    result = shrink(json.dumps({"EventSequence": events}), run)
    assert result is not None and result.kept == [0] and not result.budget_spent, (result.to_dict(), runs)
    assert {"Alice"} in runs and result.reruns == len(runs) - 1  # run, not guessed; the original's run not counted


def test_the_command_shrinks_writes_and_says_how_many_reruns(tmp_path: Path) -> None:
    path = tmp_path / "fails.json"
    path.write_text(json.dumps(failing_sequence(), indent=2))
    out = tmp_path / "min.json"
    done = CliRunner().invoke(chaos, [str(path), "--shrink", "--shrink-out", str(out), "--seed", "2", "--json"])
    assert done.exit_code == 1, done.output  # the shrunk sequence fails, as the original did
    report = json.loads(done.output[done.output.index("{"):])["shrink"]
    assert report["written"] == str(out) and report["reruns"] <= 60 and report["invariant"] == "snake_ordered"
    assert report["commands_after"] == _commands(json.loads(out.read_text())) <= report["commands_before"] / 3


def test_shrink_refuses_what_it_cannot_shrink(tmp_path: Path) -> None:
    yaml = tmp_path / "s.yaml"
    yaml.write_text("steps:\n  - {action: check}\n")
    assert CliRunner().invoke(chaos, [str(yaml), "--shrink"]).exit_code == 2
    passing = tmp_path / "ok.json"
    passing.write_text(json.dumps({"EventSequence": failing_sequence()["EventSequence"][:15]}))
    done = CliRunner().invoke(chaos, [str(passing), "--shrink"])
    assert done.exit_code == 0 and "nothing to shrink" in done.output
    assert not (tmp_path / "ok.shrunk.json").exists()
