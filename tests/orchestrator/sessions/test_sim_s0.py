"""The ``snek-s0`` variant in whole networks, in process (docs/variants.md, "snek-s0 in detail"): alone, and sharing a network
with ``snek`` (every other node). Each run is deterministic for its topology and seed."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from node.core.variants import VariantSpec
from orchestrator.chaos.engine import shipped_scenarios
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import load_scenario
from orchestrator.model.generators import mesh_mixed
from orchestrator.sessions.sim import run_sim_sync
from orchestrator.sessions.sim import config_from_topology
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.conftest import TOPOLOGIES, need

S0 = VariantSpec("snek-s0")


def _topology(name: str) -> Topology:
    if name.startswith("mesh-"):
        return mesh_mixed(int(name.split("-")[1]), seed=1)
    path = TOPOLOGIES / f"{name}.txt"
    need(path.exists(), f"topology {path} missing (SNEKBED_SHARED names shared/ elsewhere)")
    return load_topology(path)


def _mixed(topo: Topology) -> Topology:
    """``topo`` with every other node (in node order) running ``snek``; the run's variant is ``snek-s0``."""
    nodes = [n.model_copy(update={"variant": "snek"}) if i % 2 == 0 else n for i, n in enumerate(topo.nodes)]
    return topo.model_copy(update={"nodes": nodes})


@pytest.mark.parametrize(("name", "mixed"), [("grid4-0049", False), ("rtree-0050", True), ("mesh-40", False),
                                             ("mesh-40", True)])  # fmt: skip
def test_s0_converges_delivers_and_recovers_from_root_kill(name: str, mixed: bool) -> None:
    topo = _topology(name)
    if mixed:
        topo = _mixed(topo)
    out = run_sim_sync(config_from_topology(topo, seed=1, pairs=60, kill_root=True, variant=S0))
    n = len(topo.nodes)
    assert out["variants"] == ({"snek": (n + 1) // 2, "snek-s0": n // 2} if mixed else {"snek-s0": n})
    assert out["snake_converged_s"] is not None, out
    assert out["pings"] == {"sent": 60, "delivered": 60}, out
    rk = out["root_kill"]
    assert rk["snake_reconverged_s"] is not None, rk
    assert rk["pings"]["sent"] > 0 and rk["pings"]["delivered"] == rk["pings"]["sent"], rk


def test_the_variant_changes_what_the_network_does() -> None:
    topo = _topology("grid4-0049")
    runs = {v: run_sim_sync(config_from_topology(topo, seed=1, pairs=60, variant=VariantSpec(v)))
            for v in ("snek", "snek-s0")}  # fmt: skip
    assert runs["snek"]["variants"] == {"snek": 49} and runs["snek-s0"]["variants"] == {"snek-s0": 49}
    # the same tree; a different snake: S0 finds successors more slowly (docs/variants.md, "snek-s0 in detail")
    assert runs["snek"]["tree_converged_s"] == runs["snek-s0"]["tree_converged_s"]
    assert runs["snek"]["snake_converged_s"] < runs["snek-s0"]["snake_converged_s"]


def _chaos(topology: Topology, name: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        chaos = InprocChaos(topology, seed=3, variant=S0)
        return await run_scenario(chaos, load_scenario(shipped_scenarios()[name]), seed=3)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.slow
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("name", ["root-kill-x3", "partition-heal", "root-kill-partitioned"])
def test_s0_passes_the_root_kill_and_partition_scenarios_on_a_100_node_mixed_mesh(name: str, mixed: bool) -> None:
    topo = mesh_mixed(100, seed=3)
    out = _chaos(_mixed(topo) if mixed else topo, name)
    failures = [(s["index"], s["action"], {k: v["detail"] for k, v in s["invariants"].items() if not v["ok"]})
                for s in out["steps"] if s["verdict"] != "pass"]  # fmt: skip
    assert out["verdict"] == "pass", failures
    assert out["traffic"]["delivered"] > 0
