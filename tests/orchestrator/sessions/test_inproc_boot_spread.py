"""``InprocNetwork(boot_spread_s=...)``: nodes that did not all boot in the same instant.

With every router booted at the start instant, every node's 1 s SNEK maintenance tick (and so every bootstrap
of the network) falls on the same instants; on graphs of a few thousand nodes those synchronised rounds race
each other's route refreshes and the snake never settles (docs/performance.md, "A 10 000-node graph"). A boot
spread gives each router its own timer phase, drawn from the seed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import trio
import trio.testing

from orchestrator.backends.inproc import InprocNetwork
from orchestrator.model.generators import preferential

RUN_S = 30.0


def _bootstrap_times(spread: float, seed: int = 3) -> dict[str, list[float]]:
    """Every node's bootstrap send times over the first RUN_S seconds of a 40-node preferential graph."""
    topo = preferential(40, 4, seed=1)
    links = [(l.a, l.b, l.link_class) for l in topo.links]
    net = InprocNetwork(topo.node_names, links, seed=seed, detail_events=True, boot_spread_s=spread)
    sent: dict[str, list[float]] = defaultdict(list)

    def on_event(node, kind, fields, now) -> None:
        if kind == "bootstrap_sent":
            sent[node.name].append(now)

    net.on_event = on_event

    async def run() -> None:
        net.start()
        await net.run_until(RUN_S)

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(sent) == len(topo.node_names) - 1, "every node but the root bootstraps"
    return sent


def _phases(times: list[float]) -> set[float]:
    return {round(t % 1.0, 6) % 1.0 for t in times}


def test_without_a_spread_every_bootstrap_of_the_network_leaves_in_the_same_instants() -> None:
    sent = _bootstrap_times(0.0)
    assert set().union(*(_phases(ts) for ts in sent.values())) == {0.0}


def test_a_spread_gives_each_router_its_own_timer_phase() -> None:
    sent = _bootstrap_times(1.0)
    phases = {name: _phases(ts) for name, ts in sent.items()}
    assert all(len(p) == 1 for p in phases.values()), phases  # one node keeps its phase ...
    distinct = set().union(*phases.values())
    assert len(distinct) == len(sent)  # ... and no two nodes share one
    assert _bootstrap_times(1.0) == sent  # drawn from the seed
    assert _bootstrap_times(1.0, seed=4) != sent


def test_a_negative_spread_is_refused() -> None:
    with pytest.raises(ValueError, match="boot_spread_s"):
        InprocNetwork(["a"], [], boot_spread_s=-1.0)
