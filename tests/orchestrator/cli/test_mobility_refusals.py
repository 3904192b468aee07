"""A topology whose nodes move runs in process and on Docker (``up``, ``chaos`` with faults): the commands that would
run it with its fixed links alone (up on a swarm, a compose file, chaos on swarm) refuse it, and up and chaos on
Docker refuse a Pinecone reference node on a radio, exit 2, naming why and what does run it (docs/mobility.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.exit_codes import BAD_INPUT
from orchestrator.cli import main
from tests.ci import need_module

WALK = """\
name: walk
radios:
  bluetooth: {range_m: 10}
nodes:
  - {name: a, position: [0, 0]}
  - {name: b, mobility: {model: random_waypoint, area_m: [20, 20], speed_mps: 1}}
"""


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["up", "--backend", "swarm"], "not --backend swarm"),
        (["compose", "-o", "{tmp}/walk.yml"], "not a compose file"),
        (["chaos", "churn", "--backend", "swarm", "--topology"], "not snekbed chaos --backend swarm"),
    ],
)
def test_commands_that_cannot_move_nodes_refuse_them(tmp_path: Path, args: list[str], what: str) -> None:
    path = tmp_path / "walk.yaml"
    path.write_text(WALK)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + [str(path), "--runs-dir", str(tmp_path / "runs")]
    if args[0] != "up":
        argv = argv[:-2]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == BAD_INPUT, result.output
    assert "the topology's nodes move and are linked by radios (bluetooth)" in result.output
    assert "snekbed up --backend inproc|docker, snekbed chaos --backend inproc|docker" in result.output
    assert what in result.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "walk.yml").exists()


@pytest.mark.parametrize("command", [["chaos", "churn", "--topology"], ["up"]])
def test_docker_refuses_a_reference_node_on_a_radio(tmp_path: Path, command: list[str]) -> None:
    """Refused before any engine is asked (nothing is started, no run directory is made): its peerings could not
    be made through snekbed's admin API. Faults with radios are taken (test_chaos_mobility_docker), and up moves
    snekbed's nodes (test_up_moving_docker)."""
    need_module("docker", "the Docker SDK (the docker extra) for the Docker chaos backend")
    path = tmp_path / "walk.yaml"
    path.write_text(WALK.replace("{name: a, position: [0, 0]}", "{name: a, position: [0, 0], variant: pinecone}"))
    runs = str(tmp_path / "runs")
    result = CliRunner().invoke(main, [*command, str(path), "--backend", "docker", "--runs-dir", runs])
    assert result.exit_code == BAD_INPUT, result.output
    assert "a: a host node or a Pinecone reference node cannot be on a radio on Docker" in result.output
    assert not (tmp_path / "runs").exists()


def test_up_in_process_moves_them(tmp_path: Path) -> None:
    path = tmp_path / "walk.yaml"
    path.write_text(WALK)
    result = CliRunner().invoke(main, ["up", str(path), "--backend", "inproc", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    assert (run / "mobility.jsonl").stat().st_size > 0
