"""Steps dispatch on their class (orchestrator.chaos.apply), each backend implements every protocol of the chaos
backend (orchestrator.chaos.backend), and the in-process network's pause mechanics (hold, drop_peerings, release)."""

from __future__ import annotations

import random
from typing import Any, get_args

import networkx as nx
import pytest
import trio
import trio.testing

from node.core.variants import VariantSpec

from orchestrator.backends.inproc import InprocNetwork
from orchestrator.chaos import backend as protocols
from orchestrator.chaos.apply import StepApplier
from orchestrator.chaos.backend import ChaosBackend, Converged, TrafficSample
from orchestrator.chaos.checker import NodeState, PingOutcome
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.scenario import AnyStep, Scenario, parse_scenario_yaml
from orchestrator.chaos.targets import TargetError
from tests.ci import need_module

#: one step of every action, and the backend calls and actions.jsonl lines it makes on the fake below
EVERY_ACTION = """\
name: every-action
traffic: {rate_per_s: 2, pairs: 2}
steps:
  - {action: kill, target: c}
  - {action: restart, target: c}
  - {action: pause, target: b, for_s: 1}
  - {action: resume, target: b}
  - {action: remove_node, target: d}
  - {action: partition, groups: [[a], [rest]]}
  - {action: heal}
  - {action: link_down, link: [a, b]}
  - {action: link_up, link: [a, b]}
  - {action: flap, link: [b, c], count: 1, period_s: 2}
  - {action: link_change, link: [a, b], class: wifi}
  - {action: churn, fraction: 0.25, duration_s: 4, down_s: 1}
  - {action: join, node: e, peers: [a]}
  - {action: join, link: [a, c]}
  - {action: adversary, target: a, drop: {bootstrap: 100}}
  - {action: traffic, enabled: false}
  - {action: wait, s: 3}
  - {action: check}
  - {action: note, note: nothing}
  - {action: mobility, movement: stop}
  - {action: host_crash, host: root_host}
  - {action: host_restart, host: h1}
  - {action: host_partition, host: busiest_host}
"""


class FakeBackend(ChaosBackend):
    """A ring a-b-c-d that answers every call at once and writes down what it was asked."""

    name = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.t = 0.0
        self.graph = nx.cycle_graph(["a", "b", "c", "d"])

    def now(self) -> float:
        return self.t

    async def start(self, nursery: trio.Nursery | None = None) -> None: ...

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.calls.append(("sleep", seconds))

    async def stop(self) -> None: ...

    async def abort(self, exc: BaseException) -> None: ...

    def record_action(self, action: str, target: str | None, detail: dict | None, at: float) -> None: ...

    def live_graph(self) -> nx.Graph:
        return self.graph

    def known_nodes(self) -> list[str]:
        return ["a", "b", "c", "d"]

    async def states(self) -> dict[str, NodeState]:
        return {n: NodeState(bytes([i]), b"\x04", bytes([i - 1]) if i > 1 else None) for i, n in enumerate("abcd", 1)}

    async def parents(self) -> dict[str, str | None]:
        return {"a": "d", "b": "a", "c": "d", "d": None}

    async def wait_converged(self, since: float, within_s: float, give_up: Any = None) -> Converged:
        return Converged(0.0, 0.0, 0.0)

    def reconvergence_bound_s(self, margin_s: float) -> float:
        return margin_s

    async def ping(self, pairs: list[tuple[str, str]], modes: tuple[str, ...], timeout_s: float) -> list[PingOutcome]:
        return [PingOutcome(a, b, m, True) for m in modes for a, b in pairs]

    def traffic(self, enabled: bool, rate_per_s: float, pairs: list[tuple[str, str]], modes: tuple[str, ...],
                timeout_s: float) -> None:  # fmt: skip
        self.calls.append(("traffic", enabled))

    def traffic_samples(self) -> list[TrafficSample]:
        return []

    async def kill(self, name: str) -> None:
        self.calls.append(("kill", name))

    async def restart(self, name: str) -> None:
        self.calls.append(("restart", name))

    async def pause(self, name: str) -> None:
        self.calls.append(("pause", name))

    async def resume(self, name: str) -> None:
        self.calls.append(("resume", name))

    async def remove_node(self, name: str) -> bool:
        self.calls.append(("remove_node", name))
        return True

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: VariantSpec | None = None) -> None:  # fmt: skip
        self.calls.append(("add_node", name, peers))

    async def adversary(self, name: str, drop: dict[str, float], peer: str | None) -> None:
        self.calls.append(("adversary", name, drop))

    async def link_down(self, a: str, b: str) -> bool:
        self.calls.append(("link_down", a, b))
        return True

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        self.calls.append(("link_up", a, b))
        return True

    async def link_change(self, a: str, b: str, link_class: str | None, shaping: dict[str, float] | None) -> None:
        self.calls.append(("link_change", a, b, link_class))

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        self.calls.append(("partition", [sorted(g) for g in groups]))
        return [("a", "b"), ("a", "d")]

    async def heal(self) -> list[tuple[str, str]]:
        self.calls.append(("heal",))
        return [("a", "b"), ("a", "d")]

    async def mobility(self, step: Any) -> str | None:
        self.calls.append(("mobility", step.movement))
        return "movement stopped"

    async def host_fault(self, action: str, target: str, root: str | None) -> tuple[str, list[str],
                                                                                    list[tuple[str, str]]]:
        self.calls.append((action, target, root))
        return "h1", ["a", "b"], [("b", "c")]


def _apply_all(sc: Scenario) -> tuple[FakeBackend, list[tuple[str, Any, Any]], list[Any]]:
    backend, acts, results = FakeBackend(), [], []
    applier = StepApplier(backend, sc, random.Random(0), lambda a, t, d: acts.append((a, t, d)))

    async def main() -> None:
        for step in sc.steps:
            results.append(await applier.apply(step))

    trio.run(main)
    return backend, acts, results


def test_every_step_class_has_its_handler() -> None:
    sc = parse_scenario_yaml(EVERY_ACTION)
    assert sorted({type(st) for st in sc.steps}, key=str) == sorted(get_args(AnyStep), key=str)  # one of each
    backend, acts, results = _apply_all(sc)
    calls = [c for c in backend.calls if c[0] != "sleep"]
    assert calls[:12] == [
        ("kill", "c"), ("restart", "c"), ("pause", "b"), ("resume", "b"), ("resume", "b"), ("remove_node", "d"),
        ("partition", [["a"], ["b", "c", "d"]]), ("heal",), ("link_down", "a", "b"), ("link_up", "a", "b"),
        ("link_down", "b", "c"), ("link_up", "b", "c"),
    ]  # fmt: skip
    assert calls[12] == ("link_change", "a", "b", "wifi")
    churn = [c for c in calls[13:] if c[0] in ("kill", "restart")]
    assert [c[0] for c in churn] == ["kill", "restart"] and churn[0][1] == churn[1][1]  # 25 % of 4 nodes: one
    assert calls[-8:] == [("add_node", "e", ("a",)), ("link_up", "a", "c"), ("adversary", "a", {"bootstrap": 100.0}),
                          ("traffic", False), ("mobility", "stop"), ("host_crash", "root_host", "d"),
                          ("host_restart", "h1", None), ("host_partition", "busiest_host", None)]  # fmt: skip
    assert [a for a, _, _ in acts] == ["kill", "restart", "pause", "resume", "resume", "kill", "partition", "heal",
                                       "link_down", "link_up", "link_down", "link_up", "link_change", "kill",
                                       "restart", "join", "join", "adversary", "mobility", "host_crash",
                                       "host_restart", "host_partition"]  # fmt: skip
    assert acts[5] == ("kill", "d", {"remove": True})
    assert results[4] == (["d"], None) and results[5] == ([["a"], ["b", "c", "d"]], "2 link(s) cut")
    assert results[9] == ([["b", "c"]], "1 flap(s) of 2 s")
    assert results[-8:-3] == [([], "traffic off"), ([], None), ([], None), ([], None),  # traffic, wait, check, note
                              ([], "movement stopped")]  # mobility
    assert results[-3] == (["h1", "a", "b"], "host h1 down: 2 node(s), 1 cross-host link(s)")
    assert acts[-1] == ("host_partition", "h1", {"nodes": ["a", "b"], "links": ["b--c"]})


def test_a_role_is_resolved_on_the_live_graph_and_recorded_as_kill_root() -> None:
    sc = parse_scenario_yaml("steps: [{action: kill, target: root}]")
    backend, acts, results = _apply_all(sc)
    assert results == [(["d"], None)] and acts == [("kill_root", "d", None)]  # d has the highest key


def test_a_list_target_applies_to_every_node_named_in_one_step() -> None:
    sc = parse_scenario_yaml("steps:\n  - {action: adversary, target: [c, a], drop: {traffic: 100}}\n"
                             "  - {action: kill, target: [a, b]}\n")
    backend, acts, results = _apply_all(sc)
    assert results[0] == (["c", "a"], "drops traffic 100%") and results[1] == (["a", "b"], None)
    assert [(a, t) for a, t, _ in acts] == [("adversary", "c"), ("adversary", "a"), ("kill", "a"), ("kill", "b")]
    with pytest.raises(TargetError, match=r"unknown node\(s\) 'zed'"):
        _apply_all(parse_scenario_yaml("steps: [{action: kill, target: [a, zed]}]"))


def _members(proto: type) -> set[str]:
    """The attributes and methods a protocol declares, its bases' included."""
    out: set[str] = set()
    for cls in proto.__mro__:
        if getattr(cls, "_is_protocol", False) and cls.__module__ == protocols.__name__:
            out |= {n for n in vars(cls) if not n.startswith("_")} | set(vars(cls).get("__annotations__", {}))
    return out


@pytest.mark.parametrize("proto", [protocols.Lifecycle, protocols.Observation, protocols.BackgroundTraffic,
                                   protocols.NodeFaults, protocols.LinkFaults])  # fmt: skip
def test_each_backend_implements_each_protocol_itself(proto: type) -> None:
    """Every member is the backend's own (a backend subclasses ChaosBackend, so a member it forgot would be the
    protocol's stub, which does nothing)."""
    need_module("docker", "the Docker SDK (the docker extra) for the Docker and swarm chaos backends")
    from orchestrator.chaos.docker_backend import DockerChaos
    from orchestrator.chaos.swarm_backend import SwarmChaos

    backends: list[type] = [InprocChaos, DockerChaos, SwarmChaos]
    assert _members(proto)
    assert _members(protocols.ChaosBackend) >= _members(proto)
    for cls in backends:
        for name in _members(proto):
            owner = next(c for c in cls.__mro__ if name in vars(c))
            assert not getattr(owner, "_is_protocol", False), f"{cls.__name__}.{name} is the protocol's stub"


def test_a_held_node_gets_its_frames_on_release_and_its_peers_drop_it() -> None:
    """InprocNetwork.hold / drop_peerings / release: what a paused node is, in process."""
    net = InprocNetwork(["a", "b", "c"], [("a", "b", "pipe"), ("b", "c", "pipe")], seed=1)

    async def main() -> None:
        net.start()
        await net.run_until(3.0)
        got: list[tuple[str, float]] = []
        net.on_frame = lambda node, direction, frame, cls, now: got.append((direction, now)) if (
            node.name == "b" and direction == "received") else None
        net.hold("b")
        await net.run_until(4.0)
        assert got == []  # nothing reaches a held node
        net.release("b")
        await net.run_until(4.0)
        assert got and {t for _, t in got} == {4.0}  # what was held arrives at the release, all at once
        net.hold("b")
        dropped = net.drop_peerings("b")  # its peers time it out: the links go, b is not told
        assert sorted(lid for _, lid in dropped) == [1, 2] and not net.links and not list(net.edges())
        assert net.nodes["a"].router.peers == {} and len(net.nodes["b"].router.peers) == 2
        net.release("b", [port for port, _ in dropped])
        assert net.nodes["b"].router.peers == {}  # told on release

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
