"""Issue 28, validation: finite waits, nodes looked up when the file is loaded, one step's error without noise.

Every refusal is exit 2 from ``snekbed chaos`` with ``file:line: field: message``, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.chaos.scenario import MAX_WAIT_S, ScenarioError, load_scenario, parse_scenario_yaml
from orchestrator.cli.chaos import chaos
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO

MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"


def _cli(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(chaos, list(args))
    return done.exit_code, done.output


@pytest.mark.parametrize(
    ("step", "line_field", "what"),
    [
        ("{action: wait, s: .inf}", "steps[1].s", "finite"),
        ("{action: wait, s: 1000000000.0}", "steps[1].s", f"less than or equal to {MAX_WAIT_S:.0f}"),
        ("{action: wait, until: converged, within_s: .inf}", "steps[1].within_s", "finite"),
        ("{action: wait, s: .nan}", "steps[1].s", "finite"),
        ("{action: kill, target: root, after_s: 1.0e+12}", "steps[1].after_s", "less than or equal"),
        ("{action: pause, target: root, for_s: .inf}", "steps[1].for_s", "finite"),
        ("{action: churn, duration_s: 1.0e+10}", "steps[1].duration_s", "less than or equal"),
    ],
)
def test_a_wait_without_end_is_refused_at_load_with_exit_2(tmp_path: Path, step: str, line_field: str,
                                                           what: str) -> None:  # fmt: skip
    path = tmp_path / "forever.yaml"
    path.write_text(f"steps:\n  - {{action: kill, target: root}}\n  - {step}\n")
    code, out = _cli(str(path), "--topology", str(MESH))
    assert code == 2, out
    assert f"{path}:3: {line_field}: " in out and what in out, out


def test_a_reference_delay_without_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "seq.json"
    events = [{"Command": "AddNode", "Data": {"Name": "A", "NodeType": "Default"}},
              {"Command": "Delay", "Data": {"Length": 1e15}}]  # fmt: skip
    text = json.dumps({"EventSequence": events}, indent=1)
    path.write_text(text)
    code, out = _cli(str(path))
    line = text[:text.index('"Delay"')].count("\n") + 1
    assert code == 2 and f"{path}:{line}: EventSequence[1].Data.Length: Length must be 0 to" in out, out


@pytest.mark.parametrize(
    ("step", "field"),
    [
        ("{action: kill, target: n99}", "steps[1].target"),
        ("{action: link_down, link: [n01, n77]}", "steps[1].link[1]"),
        ("{action: partition, groups: [[n01, nX], [rest]]}", "steps[1].groups[0][1]"),
        ("{action: join, node: n13, peers: [n01, ghost]}", "steps[1].peers[1]"),
        ("{action: adversary, target: n01, drop: {bootstrap: 100}, peer: nobody}", "steps[1].peer"),
        ("{action: join, link: [n01, zed]}", "steps[1].link[1]"),
        ("{action: kill, target: [n01, n42]}", "steps[1].target[1]"),
    ],
)
def test_an_unknown_node_is_refused_at_load_with_exit_2(tmp_path: Path, step: str, field: str) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(f"steps:\n  - {{action: wait, s: 1}}\n  - {step}\n")
    code, out = _cli(str(path), "--topology", str(MESH))
    assert code == 2, out
    assert f"{path}:3: {field}: unknown node" in out and "not in the topology" in out, out


def test_nodes_a_join_step_adds_are_known_and_roles_are_not_names() -> None:
    text = ("steps:\n  - {action: join, node: n13, peers: [n01]}\n  - {action: kill, target: n13}\n"
            "  - {action: kill, target: root}\n  - {action: link_down, link: bridge}\n")  # fmt: skip
    sc = parse_scenario_yaml(text, file="ok.yaml", topology=load_topology(MESH))
    assert [s.action for s in sc.steps] == ["join", "kill", "kill", "link_down"]
    parse_scenario_yaml("steps:\n  - {action: kill, target: n99}\n")  # no topology: nothing to look up in


def test_a_target_may_list_nodes_but_never_roles_repeats_or_none_and_remove_node_takes_one() -> None:
    sc = parse_scenario_yaml("steps:\n  - {action: adversary, target: [n03, n01], drop: {traffic: 100}}\n",
                             topology=load_topology(MESH))
    assert sc.steps[0].target == ("n03", "n01") and sc.steps[0].named == ("n03", "n01")
    for target, message in (("[n01, root]", "'root' is not a node name (a list names nodes, never roles)"),
                            ("[n01, n02, n01]", "names n01 more than once"), ("[]", "an empty list names no node")):
        with pytest.raises(ScenarioError) as exc:
            parse_scenario_yaml(f"steps:\n  - {{action: kill, target: {target}}}\n", file="l.yaml")
        assert str(exc.value).startswith("l.yaml:2: steps[0].target: ") and message in str(exc.value), exc.value
    with pytest.raises(ScenarioError, match="remove_node takes one node, not a list"):
        parse_scenario_yaml("steps:\n  - {action: remove_node, target: [n01, n02]}\n")


def test_a_sequence_without_topology_is_looked_up_in_the_nodes_it_adds(tmp_path: Path) -> None:
    events = [{"Command": "AddNode", "Data": {"Name": "A", "NodeType": "Default"}},
              {"Command": "RemovePeer", "Data": {"Node": "A", "Peer": "Zed"}},  # a removal: a no-op, as in the reference
              {"Command": "RemoveNode", "Data": {"Name": "Ghost"}},
              {"Command": "AddPeer", "Data": {"Node": "A", "Peer": "Bob"}}]  # fmt: skip
    path = tmp_path / "seq.json"
    text = json.dumps({"EventSequence": events}, indent=1)
    path.write_text(text)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    line = text[:text.index('"AddPeer"')].count("\n") + 1
    assert str(exc.value) == f"{path}:{line}: EventSequence[3].Data.Peer: unknown node 'Bob': no step adds it"
    events.insert(0, {"Command": "AddNode", "Data": {"Name": "Bob", "NodeType": "Default"}})
    path.write_text(json.dumps({"EventSequence": events}, indent=1))
    assert load_scenario(path).builds_network


@pytest.mark.parametrize(
    ("step", "field", "message"),
    [
        ("{action: link_down, link: [a]}", "steps[0].link[1]", "required field is missing"),
        ("{action: wait, s: .inf}", "steps[0].s", "finite"),
        ("{action: kill, target: root, bogus: 1}", "steps[0].bogus", "unknown field"),
        ("{action: partition, groups: [[a]]}", "steps[0]", "at least two groups"),
    ],
)
def test_a_one_step_scenario_shows_the_real_error_alone(step: str, field: str, message: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario_yaml(f"steps:\n  - {step}\n", file="one.yaml")
    text = str(exc.value)
    assert text.startswith(f"one.yaml:2: {field}: ") and message in text, text
    assert "more:" not in text and "after validation" not in text and "valid string" not in text, text


def test_an_empty_scenario_still_says_it_needs_a_step() -> None:
    with pytest.raises(ScenarioError, match="at least 1 item"):
        parse_scenario_yaml("steps: []\n", file="none.yaml")
