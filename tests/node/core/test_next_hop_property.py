"""§6.3 properties: the indexed SNEK next hop equals the step-by-step reference.

``SnekView.next_hop`` answers from sorted indexes; ``next_hop_reference`` is a
literal transcription of PROTOCOL.md §6.3. Hypothesis builds random states
(peers with random announcements from a small key pool, duplicate links,
random link types and receive orders, a random parent, table entries of random
ages, seqs and source ports) and random queries, and checks they agree.
A second property runs real routers through a random network history and
checks every router's live view (with its lazy rebuilds) against the reference.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from routerkit import Net, identities, peer_state

from node.core.state import PeerState
from node.core.snek import (
    NONE_PORT,
    Entry,
    NextHop,
    RoutingTable,
    SnekView,
    next_hop_reference,
)
from node.core.types import FULL_MASK, LOCAL_PORT, Announcement, Root, SigHop, Watermark

SIG = b"\0" * 64
NOW = 100.0


def _key(b: int) -> bytes:
    return bytes([b]) * 32


@st.composite
def snek_states(draw: st.DrawFn) -> dict:
    """Keyword arguments for the two next-hop functions, minus dest/bootstrap/wm."""
    raw = draw(st.lists(st.integers(1, 254), min_size=3, max_size=14, unique=True))
    split = draw(st.integers(2, len(raw) - 1))
    pool = sorted(_key(b) for b in raw[:split])  # keys of peers and their ancestors
    remote = sorted(_key(b) for b in raw[split:])  # keys only the routing table knows
    key = st.sampled_from(pool)
    own = draw(key)
    n = draw(st.integers(0, 6))
    ports = draw(st.lists(st.integers(1, 253), min_size=n, max_size=n, unique=True))
    orders = draw(st.permutations(list(range(1, n + 1))))
    peers: dict[int, PeerState] = {}
    for port, order in zip(ports, orders):
        peer_key, link_type, ann = draw(key), draw(st.integers(0, 4)), None
        if draw(st.integers(0, 9)) > 0:  # most peers have announced
            hop_keys = draw(st.lists(key, min_size=1, max_size=3))
            if draw(st.booleans()):
                hop_keys[-1] = peer_key  # as a real peer's announcement always ends
            root_key = hop_keys[0] if draw(st.booleans()) else draw(key)
            hops = tuple(SigHop(i + 1, hk, SIG) for i, hk in enumerate(hop_keys))
            ann = Announcement(root_key, draw(st.integers(0, 3)), hops)
        peers[port] = peer_state(port, peer_key, link_type, ann, order=order)
    parent = draw(st.sampled_from(ports)) if ports and draw(st.booleans()) else None
    if parent is not None and peers[parent].root is not None and draw(st.booleans()):
        root_key = peers[parent].root.key  # type: ignore[union-attr]  # what the Router passes
    else:
        root_key = draw(key)
    table = RoutingTable()
    for ek in draw(st.lists(st.sampled_from(pool + remote), unique=True, max_size=8)):
        source = draw(st.sampled_from(ports)) if ports and draw(st.integers(0, 9)) else 99  # 99: nobody's port
        age = draw(st.sampled_from([0.0, 1.0, 3.0, 9.999, 10.0, 11.0]))
        root = Root(draw(key), draw(st.integers(0, 3)))
        table.install(Entry(ek, source, draw(st.integers(-1, 5)), NOW - age, root, draw(st.integers(0, 5))))
    below = [(int.from_bytes(e.key, "big") - 1).to_bytes(32, "big") for e in table]  # just under an entry's key
    return {
        "own": own,
        "parent": parent,
        "root_key": root_key,
        "peers": peers,
        "table": table,
        "now": NOW,
        "_dests": pool + remote + below,
    }


def queries(dests: list[bytes]) -> st.SearchStrategy:
    key = st.sampled_from(dests)
    wm = st.builds(Watermark, st.sampled_from([FULL_MASK, FULL_MASK, *dests]), st.integers(0, 5))
    return st.lists(st.tuples(key, st.booleans(), wm), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_6_3_indexed_next_hop_equals_reference(data: st.DataObject) -> None:
    state = data.draw(snek_states())
    dests = state.pop("_dests")
    view = SnekView()  # one view answers every query: its indexes are built once, lazily
    for dest, bootstrap, wm in data.draw(queries(dests)):
        args = dict(state, dest=dest, bootstrap=bootstrap, wm=wm)
        expected = next_hop_reference(**args)
        assert view.next_hop(**args) == expected, args
        # the result is always one of: none (bootstraps only), local (traffic only), or a known port
        if expected.port == NONE_PORT:
            assert bootstrap
        elif expected.port == LOCAL_PORT:
            assert not bootstrap
        else:
            assert expected.port in state["peers"]


@pytest.mark.parametrize("stopped", ["peer", "parent"])
def test_6_3_indexed_next_hop_ignores_stopped_peers(stopped: str) -> None:
    own, low, mid, high = _key(0x50), _key(0x20), _key(0x30), _key(0x90)
    # A stopped peer whose announcement is not cleaned up yet: only ever so inside Router.remove_peer.
    parent = peer_state(1, high, 3, Announcement(high, 1, (SigHop(1, high, SIG),)), order=1, up=stopped != "parent")
    other = Announcement(high, 1, (SigHop(1, high, SIG), SigHop(2, mid, SIG)))
    peer = peer_state(2, mid, 3, other, order=2, up=stopped != "peer")
    dest = low if stopped == "peer" else _key(0x60)  # the stopped peer offers K30 / the stopped parent heads up
    args = {
        "own": own,
        "dest": dest,
        "bootstrap": False,
        "wm": Watermark(FULL_MASK, 0),
        "parent": 1,
        "root_key": high,
        "peers": {1: parent, 2: peer},
        "table": RoutingTable(),
        "now": NOW,
    }
    expected = next_hop_reference(**args)
    assert expected == NextHop(LOCAL_PORT, Watermark(own, 0))
    assert SnekView().next_hop(**args) == expected


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], list[tuple[float, str, int]]]:
    """A connected random graph of 3-6 routers, and timed link cuts / router-local traffic."""
    n = draw(st.integers(3, 6))
    links = [(i, draw(st.integers(0, i - 1))) for i in range(1, n)]  # a random spanning tree...
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3))
    links += [(a, b) for a, b in extra if a != b]  # ...plus a few extra (maybe parallel) links
    events = draw(
        st.lists(st.tuples(st.floats(0.5, 14.0), st.sampled_from(["cut", "check"]), st.integers(0, 50)), max_size=4)
    )
    return n, links, sorted(events)


def _check_every_router(net: Net) -> None:
    keys = [r.key for r in net.routers] + [_key(0), _key(0x80), FULL_MASK]
    for r in net.routers:
        for dest in keys:
            for bootstrap in (False, True):
                for wm in (Watermark(FULL_MASK, 0), Watermark(dest, 0)):
                    expected = next_hop_reference(
                        own=r.key,
                        dest=dest,
                        bootstrap=bootstrap,
                        wm=wm,
                        parent=r.parent,
                        root_key=r.root.key,
                        peers=r.peers,
                        table=r.table,
                        now=net.now,
                    )
                    assert r.snek_next_hop(dest, bootstrap, wm, net.now) == expected


# No shrinking: each example runs whole networks, and shrinking a failure took minutes.
# Hypothesis still prints the failing history as drawn.
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(histories())
def test_6_3_router_view_matches_reference_through_a_random_network_history(history) -> None:
    n, links, events = history
    net = Net(identities(n, tag="history"), links)
    rng = random.Random(n * 1000 + len(links))
    for at, kind, pick in events:
        net.run_until(at)
        if kind == "cut" and net.wires:
            net.cut(*sorted(net.wires)[pick % len(net.wires)])
        _check_every_router(net)
        src = rng.randrange(n)
        net.routers[src].send_traffic(net.routers[rng.randrange(n)].key, b"x", net.now, coords=())
        net.pump()
    net.run_until(16.0)
    _check_every_router(net)
