"""The random nemesis: a seeded schedule of faults over a topology, as a replayable Scenario.

Each fault comes with its undo so the network can recover and the checker can
judge it: kill then restart, pause for a while, partition then heal, a link
down then up, a flap. Node and link names are written out, so the scenario
file replays the same schedule (roles such as ``root`` are resolved when a
step runs, deterministically for a given seed on the in-process backend).
"""

from __future__ import annotations

import random
from typing import Any

import networkx as nx

from orchestrator.model.topology import Topology
from orchestrator.chaos.scenario import Scenario

__all__ = ["FAULT_KINDS", "fault_steps", "random_scenario", "scenario_from_faults"]

FAULT_KINDS = ("kill_restart", "kill_root", "pause", "partition", "link_down_up", "flap", "restart")


def fault_steps(kind: str, rng: random.Random, nodes: list[str], edges: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The steps of one fault of ``kind`` with targets drawn from ``rng``."""
    if kind == "kill_restart":
        n = rng.choice(nodes)
        return [{"action": "kill", "target": n}, {"action": "restart", "target": n, "after_s": rng.choice([1, 5, 15])}]
    if kind == "kill_root":
        return [{"action": "kill", "target": "root"}]
    if kind == "restart":
        return [{"action": "restart", "target": rng.choice(nodes)}]
    if kind == "pause":
        return [{"action": "pause", "target": rng.choice(nodes), "for_s": rng.choice([2, 8, 15])}]
    if kind == "partition":
        g = nx.Graph(edges)
        g.add_nodes_from(nodes)
        start = rng.choice(nodes)
        size = rng.randint(1, max(1, len(nodes) // 2))
        side = list(nx.bfs_tree(g, start))[:size]  # a connected chunk around a random node
        return [{"action": "partition", "groups": [sorted(side), ["rest"]]},
                {"action": "heal", "after_s": rng.choice([2, 10])}]  # fmt: skip
    a, b = rng.choice(edges)
    if kind == "link_down_up":
        return [{"action": "link_down", "link": [a, b]}, {"action": "link_up", "link": [a, b], "after_s": 3}]
    if kind == "flap":
        return [{"action": "flap", "link": [a, b], "count": rng.randint(1, 5), "period_s": rng.choice([1, 2, 4])}]
    raise ValueError(f"unknown fault kind {kind!r}")


def scenario_from_faults(faults: list[dict[str, Any]], name: str, description: str = "") -> Scenario:
    steps: list[dict[str, Any]] = [{"action": "wait", "until": "converged", "within_s": 300}]
    for f in faults:
        steps += f["steps"]
    return Scenario.model_validate({"name": name, "description": description, "settle_s": 2,
                                    "traffic": {"rate_per_s": 2, "pairs": 10}, "steps": steps})  # fmt: skip


def random_scenario(topology: Topology, n: int, seed: int) -> Scenario:
    """``n`` faults drawn with ``seed`` (each with its undo), after a first wait for convergence."""
    rng = random.Random(f"nemesis-{seed}")
    nodes = topology.node_names
    edges = [(link.a, link.b) for link in topology.links]
    if not nodes or not edges:
        raise ValueError("the random nemesis needs a topology with links")
    faults = []
    for _ in range(n):
        kind = rng.choice(FAULT_KINDS)
        faults.append({"kind": kind, "steps": fault_steps(kind, rng, nodes, edges)})
    return scenario_from_faults(faults, f"random-{n}-seed{seed}",
                                f"{n} random faults on {topology.name}, seed {seed}: "
                                + ", ".join(f["kind"] for f in faults))  # fmt: skip
