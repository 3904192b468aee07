"""The observer's reading of a node: an expired descending entry is no descending neighbour."""

from __future__ import annotations

import trio
import trio.testing

from node.core.router import Router
from node.core.snek import EXPIRY_S, Entry
from node.core.types import Root
from orchestrator.model.generators import line
from orchestrator.sessions.sim import SimConfig, _Sim
from tests.node.core.routerkit import identities


def test_state_reports_an_expired_descending_entry_as_none() -> None:
    me, low = identities(2, "observe")
    r = Router(me, 0.0)
    entry = Entry(low.public_key, 1, -1, 0.0, Root(me.public_key, 1), 1)
    r.snek.descending = entry  # the router's own view: set by a bootstrap at t = 0
    assert r.state(now=EXPIRY_S - 0.01)["descending"] == low.public_key.hex()
    assert r.state(now=EXPIRY_S)["descending"] is None  # expired, though maintenance has not cleared it yet
    assert r.state()["descending"] == low.public_key.hex()  # without a clock: what the router holds


def test_sim_views_count_only_valid_descending_entries() -> None:
    topo = line(3)
    cfg = SimConfig(nodes=topo.node_names, links=[(lk.a, lk.b, lk.link_class) for lk in topo.links])

    async def main() -> tuple[dict, dict]:
        sim = _Sim(cfg, None)
        sim.net.start()
        await sim.converge(0.0)
        fresh = sim.views()
        for sn in sim.net.nodes.values():
            sn.timer_at = float("inf")  # freeze every router: nothing refreshes or clears the entries
        sim.net.now += EXPIRY_S + 1
        return fresh, sim.views()

    fresh, stale = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sum(v.descending is not None for v in fresh.values()) == 2  # a line of 3: two have a lower neighbour
    assert all(v.descending is None for v in stale.values())
