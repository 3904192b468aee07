"""Adversary strategies in process (docs/attacks.md): chaos steps with ``strategy:`` and joins with a ground ``key``
on graph-250 and smaller graphs, the virtual clock; the damage each one does, and the honest nodes' counts."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from orchestrator.chaos.apply import StepApplier
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.inproc_links import REDIAL_MAX_S
from orchestrator.chaos.scenario import ScenarioError, parse_scenario_yaml
from orchestrator.model.generators import ring
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.ci import SHARED

GRAPH_250 = SHARED / "topologies" / "pinecone" / "graph-250.txt"


def _drive(topology: Topology, steps_yaml: str, then: Callable[[InprocChaos, list], Awaitable[Any]],
           seed: int = 0) -> Any:  # fmt: skip
    """Start ``topology`` in process, wait for convergence, apply the steps one by one, then ``then(backend, acts)``."""
    scenario = parse_scenario_yaml(f"name: attack\nsteps:\n{steps_yaml}")
    acts: list[tuple[str, str | None, dict]] = []

    async def main() -> Any:
        b = InprocChaos(topology, seed=seed)
        await b.start()
        assert (await b.wait_converged(b.now(), 180)).converged
        applier = StepApplier(b, scenario, random.Random(seed), lambda a, t, d: acts.append((a, t, d)))
        for step in scenario.steps:
            await b.sleep(step.after_s)
            await applier.apply(step)
        try:
            return await then(b, acts)
        finally:
            await b.stop()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _victim_and_spots(topology: Topology) -> tuple[str, list[str]]:
    """A victim of middling degree, and nodes two hops from it: each sybil peers with the victim and one of them."""
    adj: dict[str, set[str]] = {}
    for ln in topology.links:
        adj.setdefault(ln.a, set()).add(ln.b)
        adj.setdefault(ln.b, set()).add(ln.a)
    victim = sorted(adj, key=lambda n: (len(adj[n]), n))[len(adj) // 2]
    two = sorted({m for n in adj[victim] for m in adj[n]} - adj[victim] - {victim})
    return victim, two


async def _reach(b: InprocChaos, victim: str, n: int = 40) -> float:
    """The share of SNEK pings from ``n`` honest nodes that reach ``victim`` (and come back)."""
    rng = random.Random(5)
    sources = rng.sample(sorted(x for x in b.known_nodes() if x != victim and not x.startswith("syb")), n)
    out = await b.ping([(s, victim) for s in sources], ("snek",), 5.0)
    return sum(1 for o in out if o.delivered) / len(out)


@pytest.mark.slow
def test_a_sybil_pair_next_to_the_victim_eclipses_it_on_graph_250() -> None:
    topo = load_topology(GRAPH_250)
    victim, spots = _victim_and_spots(topo)
    joins = (f"  - {{action: join, node: syb-a, peers: ['{victim}', '{spots[0]}'], key: {{near: '{victim}', side: above}}}}\n"
             f"  - {{action: join, node: syb-b, peers: ['{victim}', '{spots[1]}'], key: {{near: '{victim}', side: below}}}}\n"
             "  - {action: wait, s: 20}\n")

    async def reach(b: InprocChaos, acts: list) -> tuple[float, list]:
        await b.sleep(60)  # the victim's old routes expire
        return await _reach(b, victim), acts

    honest, acts = _drive(topo, joins, reach)
    assert honest >= 0.9, f"without the attack the victim is reachable ({honest:.0%})"
    grinds = [d for a, _, d in acts if a == "join"]
    assert len(grinds) == 2 and all(d["key_tries"] >= 1 and d["key"] for d in grinds)
    attacked, acts = _drive(topo, joins + "".join(
        f"  - {{action: adversary, target: {s}, strategy: sybil, victim: '{victim}'}}\n" for s in ("syb-a", "syb-b")),
        reach)  # fmt: skip
    assert attacked <= 0.2, f"with the sybils next to it the victim stays reachable ({attacked:.0%})"
    assert [d["strategy"] for a, _, d in acts if a == "adversary"] == ["sybil", "sybil"]


@pytest.mark.slow
def test_many_sybils_on_one_side_of_a_victim_are_ground_among_the_honest_keys_only() -> None:
    """12 sybils (fraction 0.05 of graph-250) just above one victim: each key lies between the victim and the next
    honest key above it. Earlier sybils do not narrow the gap (they are not honest), so each costs about as many
    tries as the first; bounded by each other, the 12th would need ~2^11 times as many (a review's finding)."""
    topo = load_topology(GRAPH_250)
    victim, spots = _victim_and_spots(topo)
    joins = "".join(f"  - {{action: join, node: syb-{i}, peers: ['{victim}', '{spots[i % len(spots)]}'], "
                    f"adversary: true, key: {{near: '{victim}', side: above, max_tries: 20000}}}}\n"
                    for i in range(12))  # fmt: skip

    async def keys(b: InprocChaos, acts: list) -> tuple[dict[str, bytes], list]:
        return await b.node_keys(), acts

    got, acts = _drive(topo, joins, keys)
    honest = sorted(k for n, k in got.items() if not n.startswith("syb-"))
    above = next(k for k in honest if k > got[victim])
    sybils = [got[f"syb-{i}"] for i in range(12)]
    assert all(got[victim] < k < above for k in sybils)
    assert len({*sybils}) == 12
    tries = [d["key_tries"] for a, _, d in acts if a == "join"]
    assert len(tries) == 12 and max(tries) <= 20000, tries


@pytest.mark.slow
def test_root_takeover_makes_the_ground_key_the_root_of_every_component() -> None:
    topo = load_topology(GRAPH_250)
    steps = ("  - {action: join, node: usurper, peers: ['171', '176'], key: {above_all: true}}\n"
             "  - {action: adversary, target: usurper, strategy: root_takeover, mode: drop}\n"
             "  - {action: wait, s: 30}\n")  # fmt: skip

    async def roots(b: InprocChaos, acts: list) -> tuple[set[str], str, dict]:
        states = await b.states()
        key = (await b.node_keys(["usurper"]))["usurper"].hex()
        return {s.root.hex() for s in states.values() if s is not None}, key, acts[0][2]

    seen, key, join = _drive(topo, steps, roots)
    assert seen == {key}
    assert join["key"] == key and join["key_rule"] == "above all" and join["key_tries"] >= 1


def test_forged_frames_are_rejected_and_counted_by_every_honest_peer() -> None:
    topo = ring(12)
    steps = "  - {action: adversary, target: n03, strategy: forge, rate_per_s: 2, kinds: [bootstrap]}\n" \
            "  - {action: adversary, target: n08, strategy: forge, rate_per_s: 2}\n" \
            "  - {action: wait, s: 10}\n"  # fmt: skip

    async def counts(b: InprocChaos, acts: list) -> dict[str, Any]:
        await b.sleep(10)
        states = await b.states()
        return {n: dict(node.router.counters) for n, node in b.net.nodes.items()} | {
            "_errors": [n for n, s in states.items() if s is not None and s.internal_errors]}

    c = _drive(topo, steps, counts)
    for peer in ("n02", "n04"):  # n3's peers: every forged bootstrap rejected, the peering kept
        assert c[peer].get(("bootstrap_rejected", "bad_signature"), 0) >= 10
    for peer in ("n07", "n09"):  # n8's: forged bootstraps rejected, forged announcements end the peering
        assert c[peer].get(("bootstrap_rejected", "bad_signature"), 0) >= 1
        assert c[peer].get(("disconnect", "bad_signature"), 0) + c[peer].get(
            ("disconnect", "announcement_port_zero"), 0) >= 1
    assert not c["_errors"]


def test_a_peering_ended_for_a_forged_frame_is_redialled_with_backoff_and_back_once_the_forger_stops() -> None:
    """As a TCP node's dialer does (node/peering.py): the honest neighbours of a forger of announcements end the
    peering, it is dialled again after the backoff (doubling while the peering keeps ending within 10 s), and once
    the forger stops every link of the ring is up again and the network converges."""
    topo = ring(12)
    steps = "  - {action: adversary, target: n08, strategy: forge, rate_per_s: 2, kinds: [announcement]}\n" \
            "  - {action: wait, s: 20}\n" \
            "  - {action: adversary, target: n08, strategy: none}\n"  # fmt: skip

    async def after(b: InprocChaos, acts: list) -> tuple[list, int, bool]:
        redials = list(b.redials)
        pending = b.pending_redial_s()  # counted into the re-convergence bound: the links come back by then
        assert 0 <= pending <= REDIAL_MAX_S * 1.2, pending
        await b.sleep(REDIAL_MAX_S * 1.2)  # the longest wait a dialer makes: every link is dialled again by then
        assert b.pending_redial_s() == 0
        edges = sum(1 for _ in b.net.edges())
        converged = (await b.wait_converged(b.now(), b.reconvergence_bound_s(10))).converged
        return redials, edges, converged

    redials, edges, converged = _drive(topo, steps, after)
    assert converged and edges == 12
    ends = {(spec, node) for _, spec, node, _, _ in redials}
    assert {node for _, node in ends} <= {"n07", "n09"} and len(redials) >= 4, redials
    for spec in {s for s, _ in ends}:
        waits = [w for _, s, _, _, w in redials if s == spec]
        assert waits[0] <= 0.5 * 1.2 and max(waits) > 0.5 * 1.2, waits  # the backoff grew while it kept ending


@pytest.mark.parametrize(("step", "words"), [
    ("{action: adversary, target: n01, strategy: sybil, victim: n99}", "victim"),
    ("{action: adversary, target: n01, strategy: greyhole, forward: 1.5}", "forward"),
    ("{action: adversary, target: n01, strategy: greyhole, victim: n02}", "not a parameter of greyhole"),
    ("{action: adversary, target: n1}", "give 'drop'"),
    ("{action: join, node: x, peers: [n01], key: {near: n02, above_all: true}}", "near"),
    ("{action: join, link: [n01, n02], key: {above_all: true}}", "joining 'node'"),
])
def test_bad_attack_steps_name_the_field(step: str, words: str) -> None:
    with pytest.raises(ScenarioError, match=words):
        parse_scenario_yaml(f"name: bad\nsteps:\n  - {step}\n", topology=ring(4))


def test_a_seeded_strategy_without_a_seed_gets_one_per_run_and_node() -> None:
    """Greyholes given no seed draw independent streams (seeded by the run's seed and the node's name), so the
    seeds of a damage curve sample the strategy's randomness; a seed the step gives is kept."""
    steps = ("  - {action: adversary, target: n02, strategy: greyhole, forward: 0.5}\n"
             "  - {action: adversary, target: n05, strategy: greyhole, forward: 0.5}\n"
             "  - {action: adversary, target: n07, strategy: greyhole, forward: 0.5, seed: 7}\n")  # fmt: skip

    async def seeds(b: InprocChaos, acts: list) -> dict[str, int]:
        return {t: d["seed"] for a, t, d in acts if a == "adversary"}

    one, again, other = (_drive(ring(8), steps, seeds, seed=s) for s in (1, 1, 2))
    assert one == again and one["n07"] == other["n07"] == 7
    assert len({one["n02"], one["n05"], other["n02"], other["n05"]}) == 4
