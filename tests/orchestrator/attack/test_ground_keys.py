"""Ground keys planned before a Docker run (orchestrator.chaos.ground_keys, docs/attacks.md): the seeds the plan
gives the containers of nodes that join later are the ones the in-process StepApplier grinds when the joins run,
and DockerAttacks (no Docker here: a stand-in with its keys) takes them, refusing any other with its reason."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
import trio
import trio.testing

from node.core.crypto import Identity
from orchestrator.chaos.apply import StepApplier
from orchestrator.chaos.docker_attacks import DockerAttacks
from orchestrator.chaos.engine import full_topology
from orchestrator.chaos.ground_keys import created_keys, plan_ground_seeds, with_planned_keys
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.scenario import Scenario, parse_scenario_yaml
from orchestrator.chaos.targets import TargetError
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.ci import REPO

RING8 = REPO / "compose" / "topologies" / "ring-8.yaml"
MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"

#: two sybils on one side of a victim (the second not bounded by the first: an adversary), an honest node
#: joining in between (it counts for the next grind), a usurper above all, and an honest node joining last
STEPS = """\
  - {action: join, node: syb-a, peers: [n04, n02], adversary: true, key: {near: n04, side: above}}
  - {action: join, node: syb-b, peers: [n04, n06], adversary: true, key: {near: n04, side: above}}
  - {action: join, node: mid, peers: [n01, n05]}
  - {action: join, node: usurper, peers: [n01, n05], adversary: true, key: {above_all: true}}
  - {action: join, node: last, peers: [n03]}
"""


def _scenario(steps: str = STEPS) -> Scenario:
    return parse_scenario_yaml(f"name: ground-plan\nsteps:\n{steps}")


def _in_process(topology: Topology, scenario: Scenario, seed: int) -> tuple[dict[str, bytes], list[tuple]]:
    """The scenario's steps applied in process by the StepApplier: the seeds it ground, and its actions."""
    acts: list[tuple[str, str | None, dict[str, Any] | None]] = []

    async def main() -> dict[str, bytes]:
        b = InprocChaos(topology, seed=seed)
        await b.start()
        assert (await b.wait_converged(b.now(), 120)).converged
        applier = StepApplier(b, scenario, random.Random(seed), lambda a, t, d: acts.append((a, t, d)))
        for step in scenario.steps:
            await applier.apply(step)
        try:
            return dict(b.ground_seeds)
        finally:
            await b.stop()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)), acts


@pytest.mark.parametrize(("path", "seed"), [(RING8, 0), (RING8, 7), (MESH12, 3)])
def test_the_planned_seeds_are_the_ones_the_step_applier_grinds_in_process(path: object, seed: int) -> None:
    topo = load_topology(path)  # type: ignore[arg-type]
    sc = _scenario()
    full = full_topology(topo, sc)
    plan = plan_ground_seeds(sc.steps, created_keys(full, seed), topo.node_names, seed)
    ground, acts = _in_process(topo, sc, seed)
    assert set(plan) == {"syb-a", "syb-b", "usurper"}
    assert plan == ground
    joined = {t: d for a, t, d in acts if a == "join" and d is not None and "key" in d}
    assert {n: Identity(s).public_key.hex() for n, s in plan.items()} == {n: d["key"] for n, d in joined.items()}
    made = with_planned_keys(full, sc.steps, topo.node_names, seed)  # the containers' seeds: the plan's, or as before
    assert {n: made.node(n).key_seed for n in plan} == {n: s.hex() for n, s in plan.items()}
    assert all(made.node(n).seed_bytes(seed) == full.node(n).seed_bytes(seed) for n in full.node_names
               if n not in plan)


def test_a_node_that_joins_later_does_not_bound_an_earlier_grind() -> None:
    keys = {"a": b"\x01" * 32, "b": b"\x02" * 32, "top": b"\xff" * 32, "u": b"\x00" * 32}
    first = _scenario("  - {action: join, node: u, peers: [a], key: {above_all: true, max_tries: 50}}\n"
                      "  - {action: join, node: top, peers: [b]}\n")
    assert set(plan_ground_seeds(first.steps, keys, ["a", "b"], 0)) == {"u"}
    # joined first, no key is above it: the step would fail (max_tries), so no seed, and the node does not join
    after = _scenario("  - {action: join, node: top, peers: [b]}\n"
                      "  - {action: join, node: u, peers: [a], key: {above_all: true, max_tries: 50}}\n"
                      "  - {action: join, node: v, peers: [u], key: {near: u, side: above, max_tries: 50}}\n")
    assert plan_ground_seeds(after.steps, keys | {"v": b"\x03" * 32}, ["a", "b"], 0) == {}
    alone = Topology.from_data({"name": "t", "nodes": ["a"], "links": []})
    assert with_planned_keys(alone, after.steps[:1], ["a"], 0) is alone  # no join with a key: nothing planned


class _Session:
    def __init__(self, topology: Topology, seed: int) -> None:
        self.keys = {n: k.hex() for n, k in created_keys(topology, seed).items()}


class _DockerStandIn(DockerAttacks):
    """DockerChaos's keys and joins, without Docker: every node created up front from the (planned) topology."""

    name = "docker"

    def __init__(self, topology: Topology, seed: int, start_stopped: set[str]) -> None:
        self.topology, self.seed, self._start_stopped = topology, seed, start_stopped
        self.session = _Session(topology, seed)
        self._admin = None

    async def add_node(self, name: str, *_: object) -> None:
        self.waiting.discard(name)


def _on_docker(topology: Topology, steps: str, seed: int) -> tuple[list[dict[str, Any] | None], list[str]]:
    """The join steps applied by the StepApplier to the stand-in: each join's recorded detail, each failure."""
    sc = _scenario(steps)
    full = full_topology(topology, sc)
    later = {n for n in full.node_names if n not in topology.node_names}
    b = _DockerStandIn(with_planned_keys(full, sc.steps, topology.node_names, seed), seed, later)
    acts: list[dict[str, Any] | None] = []
    failed: list[str] = []
    applier = StepApplier(b, sc, random.Random(seed), lambda a, t, d: acts.append(d))  # type: ignore[arg-type]

    async def main() -> None:
        for step in sc.steps:
            try:
                await applier.apply(step)
            except TargetError as exc:
                failed.append(str(exc))

    trio.run(main)
    return acts, failed


def test_docker_takes_the_planned_key_and_lists_a_node_only_once_it_joined() -> None:
    topo = load_topology(RING8)
    acts, failed = _on_docker(topo, STEPS, 5)
    assert not failed
    sc = _scenario()
    plan = plan_ground_seeds(sc.steps, created_keys(full_topology(topo, sc), 5), topo.node_names, 5)
    assert [d["key"] for d in acts if d and "key" in d] == [Identity(plan[n]).public_key.hex()
                                                           for n in ("syb-a", "syb-b", "usurper")]
    b = _DockerStandIn(topo, 0, {"x"})
    assert "x" not in trio.run(b.node_keys) and set(trio.run(b.node_keys)) == set(topo.node_names)


def test_docker_refuses_a_ground_key_for_a_node_made_with_the_run_or_joined_before() -> None:
    topo = load_topology(RING8)
    _, failed = _on_docker(topo, "  - {action: join, node: n03, peers: [n04], key: {above_all: true}}\n", 0)
    assert len(failed) == 1 and "n03 started with the run" in failed[0], failed
    again = STEPS + "  - {action: join, node: syb-a, peers: [n04], key: {near: n02, side: below}}\n"
    _, failed = _on_docker(topo, again, 0)
    assert len(failed) == 1 and "syb-a has joined before" in failed[0], failed


def _top_seed() -> str:
    """A key seed whose key starts with 0xff: above every derived key of ring-8 (about 256 tries to find)."""
    i = 0
    while Identity(seed := hashlib.sha256(f"top-{i}".encode()).digest()).public_key[0] != 0xFF:
        i += 1
    return seed.hex()


def test_a_topology_adversary_does_not_bound_a_ground_key() -> None:
    """A node the topology makes an adversary (``adversary:``) is not honest: a key ground above all is placed
    above the honest keys only, in process and in the Docker plan alike. Here the adversary holds the highest key
    (0xff...): bounded by it, the grind would need some 256 times the tries and fail at ``max_tries: 100``."""
    doc = load_topology(RING8).to_dict()
    doc["nodes"] = [{**n, "adversary": "drop:traffic=100", "key_seed": _top_seed()} if n["name"] == "n05" else n
                    for n in doc["nodes"]]  # fmt: skip
    topo = Topology.from_data(doc)
    sc = _scenario("  - {action: join, node: usurper, peers: [n01, n03], adversary: true,\n"
                   "     key: {above_all: true, max_tries: 100}}\n")
    seeds, acts = _in_process(topo, sc, 0)
    keys = created_keys(topo, 0)
    usurper = Identity(seeds["usurper"]).public_key
    assert max(k for n, k in keys.items() if n != "n05") < usurper < keys["n05"]
    assert [d["key_rule"] for a, _, d in acts if a == "join" and d] == ["above all"]
    full = full_topology(topo, sc)
    assert plan_ground_seeds(sc.steps, created_keys(full, 0), topo.node_names, 0, {"n05"}) == seeds
    assert with_planned_keys(full, sc.steps, topo.node_names, 0).node("usurper").key_seed == seeds["usurper"].hex()


def test_a_node_turned_adversary_mid_run_does_not_bound_a_ground_key_until_it_is_honest_again() -> None:
    """An ``adversary`` step makes its target one of the adversaries for the grinds after it (the checker's rule),
    in process and in the Docker plan alike; lifting it (drops at 0) makes it honest again. n05 holds the highest
    key (0xff...): while it is an adversary a key above all honest ones is found within 100 tries; once it is
    honest, 100 tries are not enough (the step fails and the plan gives no seed)."""
    doc = load_topology(RING8).to_dict()
    doc["nodes"] = [{**n, "key_seed": _top_seed()} if n["name"] == "n05" else n for n in doc["nodes"]]
    topo = Topology.from_data(doc)
    turned = "  - {action: adversary, target: n05, drop: {traffic: 100}}\n"
    join = ("  - {action: join, node: usurper, peers: [n01, n03], adversary: true,\n"
            "     key: {above_all: true, max_tries: 100}}\n")
    sc = _scenario(turned + join)
    seeds, acts = _in_process(topo, sc, 0)
    keys = created_keys(topo, 0)
    assert max(k for n, k in keys.items() if n != "n05") < Identity(seeds["usurper"]).public_key < keys["n05"]
    full = full_topology(topo, sc)
    assert plan_ground_seeds(sc.steps, created_keys(full, 0), topo.node_names, 0) == seeds
    lifted = _scenario(turned + "  - {action: adversary, target: n05, drop: {traffic: 0}}\n" + join)
    assert plan_ground_seeds(lifted.steps, created_keys(full, 0), topo.node_names, 0) == {}
