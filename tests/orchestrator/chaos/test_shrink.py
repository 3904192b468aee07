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

NODES = [f"N{i}" for i in range(1, 10)]
LINKS = [*zip(NODES, NODES[1:] + NODES[:1]), ("N1", "N5"), ("N3", "N7"), ("N2", "N8")]


def _ev(cmd: str, **data: Any) -> dict[str, Any]:
    return {"Command": cmd, "Data": data}


def failing_sequence() -> dict[str, Any]:
    """36 commands. The failure is planted honestly: one RemovePeer carries an ``expect`` the network cannot meet
    (the tree to have more than one root in a component after a chord is cut: a ring stays one tree)."""
    events = [*(_ev("AddNode", Name=n, NodeType="Default") for n in NODES),
              *(_ev("AddPeer", Node=a, Peer=b) for a, b in LINKS), _ev("StartPings"), _ev("Delay", Length=8000),
              _ev("RemovePeer", Node="N1", Peer="N2"), _ev("Delay", Length=6000), _ev("AddPeer", Node="N1", Peer="N2"),
              _ev("RemoveNode", Name="N4"), _ev("Delay", Length=6000),
              {**_ev("RemovePeer", Node="N3", Peer="N7"), EXTENSION_KEY: {"expect": {"one_root_per_component": False}}},
              _ev("Delay", Length=6000), _ev("AddNode", Name="N4", NodeType="Default"),
              _ev("AddPeer", Node="N4", Peer="N5"), _ev("AddPeer", Node="N3", Peer="N4"), _ev("Delay", Length=6000),
              _ev("RemovePeer", Node="N8", Peer="N9"), _ev("StopPings"), _ev("StartPings"), _ev("Debug"),
              _ev("RemovePeer", Node="N6", Peer="N7"), _ev("Delay", Length=3000), _ev("AddPeer", Node="N6", Peer="N7"),
              _ev("Delay", Length=2000)]  # fmt: skip
    return {"EventSequence": events}


def _commands(doc: dict[str, Any]) -> int:
    return sum(ev["Command"] != "Delay" for ev in doc["EventSequence"])


def test_needs_keeps_what_later_commands_cannot_run_without() -> None:
    events = failing_sequence()["EventSequence"]
    deps = needs(events)
    first_peer = next(i for i, ev in enumerate(events) if ev["Command"] == "AddPeer")
    assert deps[first_peer] == {0, 1}  # N1-N2 needs both AddNodes
    readd = max(i for i, ev in enumerate(events) if ev["Command"] == "AddPeer" and ev["Data"]["Node"] == "N4")
    assert max(deps[readd]) > 9  # the AddNode N4 that came back, not the first one


def test_a_failing_sequence_shrinks_to_a_third_in_at_most_60_reruns(tmp_path: Path) -> None:
    doc = failing_sequence()
    text = json.dumps(doc, indent=2)
    before = _commands(doc)
    assert before >= 30

    def run(t: str) -> dict[str, Any]:
        return execute(parse_reference_sequence(t, name="cand"), None, ChaosOptions(seed=2))

    original = run(text)
    assert original["verdict"] == "fail" and failed_invariant(original) == "one_root_per_component"
    result = shrink(text, run, original=original, max_runs=60)
    assert result is not None and result.invariant == "one_root_per_component"
    small = json.loads(result.text)
    assert _commands(small) <= before / 3 and result.reruns <= 60, (result.to_dict(), small)
    # the same format, and it still fails the same invariant when run from a file, as the reference would load it
    path = tmp_path / "small.json"
    path.write_text(result.text)
    again = execute(load_scenario(path), None, ChaosOptions(seed=2))
    assert failed_invariant(again) == "one_root_per_component"
    planted = [ev for ev in small["EventSequence"] if EXTENSION_KEY in ev]
    assert planted and planted[0]["Command"] == "RemovePeer"
    for ev in small["EventSequence"]:  # every AddPeer kept its nodes
        if ev["Command"] == "AddPeer":
            added = {e["Data"]["Name"] for e in small["EventSequence"] if e["Command"] == "AddNode"}
            assert {ev["Data"]["Node"], ev["Data"]["Peer"]} <= added


def test_the_command_shrinks_writes_and_says_how_many_reruns(tmp_path: Path) -> None:
    path = tmp_path / "fails.json"
    path.write_text(json.dumps(failing_sequence(), indent=2))
    out = tmp_path / "min.json"
    done = CliRunner().invoke(chaos, [str(path), "--shrink", "--shrink-out", str(out), "--seed", "2", "--json"])
    assert done.exit_code == 1, done.output  # the shrunk sequence fails, as the original did
    report = json.loads(done.output[done.output.index("{"):])["shrink"]
    assert report["written"] == str(out) and report["reruns"] <= 60 and report["invariant"] == "one_root_per_component"
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
