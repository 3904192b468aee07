"""The run as a library (orchestrator.chaos.engine): options in one dataclass, backends made by a registered
factory, no backend name known to ``execute``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config import HostPort

from orchestrator.chaos.engine import (
    BACKENDS, ChaosOptions, ChaosSetupError, PreparedRun, execute, load_inputs, make_backend, register_backend,
)  # fmt: skip
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.scenario import Scenario, ScenarioError, parse_scenario_yaml
from orchestrator.model.generators import ring
from orchestrator.model.topology import Topology
from tests.ci import REPO
from tests.orchestrator.chaos.test_chaos_apply import FakeBackend

SCENARIO = """\
name: engine
settle_s: 0
traffic: null
steps:
  - {action: kill, target: c}
  - {action: note, note: done}
"""


@pytest.fixture
def fake_backend() -> Iterator[list[tuple[Scenario, Topology | None, ChaosOptions]]]:
    """A backend registered as ``fake`` for the test, and the calls of its factory."""
    made: list[tuple[Scenario, Topology | None, ChaosOptions]] = []

    @register_backend("fake")
    def make(sc: Scenario, topology: Topology | None, options: ChaosOptions) -> PreparedRun:
        made.append((sc, topology, options))
        return PreparedRun(FakeBackend(), "fake-run", None, report={"fake": True})

    try:
        yield made
    finally:
        del BACKENDS["fake"]


def test_the_registry_lists_the_backends_in_the_order_of_the_flag() -> None:
    assert list(BACKENDS)[:3] == ["inproc", "docker", "swarm"]


def test_execute_runs_any_registered_backend_and_adds_its_keys(fake_backend: list) -> None:
    sc = parse_scenario_yaml(SCENARIO)
    out = execute(sc, None, ChaosOptions(backend="fake", seed=4))
    assert len(fake_backend) == 1 and fake_backend[0][2].seed == 4
    assert out["backend"] == "fake" and out["seed"] == 4 and out["verdict"] == "pass"
    assert [s["action"] for s in out["steps"]] == ["kill", "note"] and out["steps"][0]["targets"] == ["c"]
    assert list(out)[-3:] == ["run_dir", "variant", "fake"] and out["run_dir"] is None and out["variant"] == "snek"


def test_an_unknown_backend_is_a_setup_error() -> None:
    with pytest.raises(ChaosSetupError, match="unknown backend 'nope' \\(known: inproc, docker, swarm"):
        make_backend(parse_scenario_yaml(SCENARIO), None, ChaosOptions(backend="nope"))


def test_the_in_process_factory_makes_the_backend_its_clock_and_its_keys(tmp_path: Path) -> None:
    sc = parse_scenario_yaml(SCENARIO)
    prepared = make_backend(sc, ring(4), ChaosOptions(seed=2, boot_spread_s=0.5, record=tmp_path / "run"))
    assert isinstance(prepared.backend, InprocChaos) and prepared.backend.seed == 2
    assert prepared.clock is not None and prepared.metrics is None and prepared.live is not None
    assert (prepared.run_id, prepared.run_dir) == ("run", str(tmp_path / "run"))
    assert prepared.report == {"boot_spread_s": 0.5}
    real = make_backend(sc, ring(4), ChaosOptions(clock="real", metrics_at=HostPort("127.0.0.1", 0)))
    assert real.clock is None and real.metrics is not None and real.run_id == "engine"


def test_the_live_view_is_refused_on_docker_before_anything_is_made() -> None:
    with pytest.raises(ChaosSetupError, match="--view serves an in-process"):
        make_backend(parse_scenario_yaml(SCENARIO), ring(4), ChaosOptions(backend="docker",
                                                                          view_at=HostPort("127.0.0.1", 0)))


def test_execute_in_process_gives_the_json_document() -> None:
    out = execute(parse_scenario_yaml(SCENARIO.replace("target: c", "target: root")), ring(4), ChaosOptions(seed=1))
    assert out["backend"] == "inproc" and out["verdict"] == "pass" and out["boot_spread_s"] == 1.0
    assert "prepare_s" not in out  # a wall-clock figure: Docker's alone


def test_load_inputs_needs_a_topology_unless_the_scenario_builds_its_network() -> None:
    with pytest.raises(ScenarioError, match="needs --topology"):
        load_inputs("demo", None)
    sc, topology = load_inputs("demo", REPO / "compose" / "topologies" / "mesh-12.yaml")
    assert sc.name == "demo" and topology is not None and len(topology.node_names) == 12
