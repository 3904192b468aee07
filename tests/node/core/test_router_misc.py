"""Forwarding (§6.5), wakeup broadcasts (§6.8, §5.3 step 4), ports (§3.3), hop limits (§4.9), the
coordinates cache (§6.6), pings (§8), and whole small networks.

Keys are named by rank (``K[0] < ... < K[9]``); the router under test is
``ME = K[5]`` under the root ``K[9]``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from routerkit import (
    Bench,
    Net,
    broadcast_frame,
    chain,
    identities,
    of_type,
    traffic_frame,
)

from node.core import wire
from node.core.ping import PING, PONG
from node.core.types import Frame, FrameType, LinkType, Root, Watermark

K = identities(10)
ME = K[5]
R9 = Root(K[9].public_key, 1)


def k(i: int) -> bytes:
    return K[i].public_key


def broadcast_bench() -> tuple[Bench, int, int, int, int]:
    """ME at (3,) under K9 (port p); child K1 at (3, c) (port c); sibling K7 at (4,) (port s);
    K2 connected without an announcement (port n)."""
    b = Bench(ME)
    p = b.join(K[9], ports=[3])
    c = b.connect(K[1])
    b.announce(c, chain([K[9], ME, K[1]], [3, c, 1]))
    s = b.join(K[7], [K[9]], ports=[4, 1])
    n = b.connect(K[2])
    assert b.r.coords == (3,) and b.r.peers[c].coords == (3, c) and b.r.peers[s].coords == (4,)
    b.drain()
    return b, p, c, s, n


def flooded(b: Bench) -> list[tuple[int, int]]:
    """(port, hop limit) of the broadcasts just sent, by port."""
    return sorted((port, f.hop_limit) for port, f in of_type(b.drain(), FrameType.WAKEUP_BROADCAST))


# ------------------------------------------------------------------ §6.5 forwarding


def forwarding_bench() -> tuple[Bench, int, int, int]:
    """ME at coords (3,) under K[9] (port p); sibling K7 at (4,) (port q); child K1 at (3, 3) (port c)."""
    b = Bench(ME)
    p = b.join(K[9], ports=[3])
    q = b.join(K[7], [K[9]], ports=[4, 1])
    c = b.connect(K[1])
    b.announce(c, chain([K[9], ME, K[1]], [3, c, 1]))  # contains our key: stored, not acted on
    assert b.r.coords == (3,) and b.r.peers[q].coords == (4,) and b.r.peers[c].coords == (3, c)
    b.drain()
    return b, p, q, c


def test_6_5_step1_traffic_for_us_is_delivered_and_source_coords_cached() -> None:
    b, _p, q, _c = forwarding_bench()
    f = traffic_frame(ME.public_key, k(8), b"hello", source_coords=(4, 2), watermark=Watermark(k(6), 3))
    b.at(2.0).send(q, f)
    assert b.r.delivered == [f]  # untouched: watermark and hop limit kept
    assert b.r.coords_cache[k(8)] == ((4, 2), 2.0)
    b.r.send_traffic(k(8), b"reply", b.now)  # §6.6: the reply is tree-routed to the cached coords
    out = of_type(b.drain(), FrameType.TRAFFIC)
    assert [(port, f.destination_coords, f.source_coords) for port, f in out] == [(q, (4, 2), (3,))]


def test_6_5_step2_tree_routed_traffic_with_usable_coords_goes_tree_next_hop() -> None:
    b, p, q, _c = forwarding_bench()
    f = traffic_frame(k(0), k(8), dest_coords=(4, 5))  # SNEK would pick the child (K1 is closest above K0)
    b.send(p, f)
    assert b.drain() == [(q, f)]  # tree next hop, frame (and its watermark) unchanged


def test_6_5_step2_unusable_coords_are_cleared_and_snek_routed() -> None:
    b, p, _q, c = forwarding_bench()
    f = traffic_frame(k(0), k(8), dest_coords=(3, 9))  # nobody but us is that close, and it is not us
    b.send(p, f)
    assert b.drain() == [(c, replace(f, destination_coords=(), watermark=Watermark(k(1), 0)))]


def test_6_5_step2_tree_routed_frame_reaching_our_coords_is_delivered_even_for_another_key() -> None:
    b, p, _q, _c = forwarding_bench()
    f = traffic_frame(k(6), k(8), dest_coords=(3,))
    b.send(p, f)
    assert b.r.delivered == [f] and b.drain() == []


def test_6_5_step4_watermark_drop() -> None:
    b, _p, q, _c = forwarding_bench()
    b.send(q, traffic_frame(k(4), k(8), watermark=Watermark(k(2), 0)))  # best is (K5, 0): worse than (K2, 0)
    assert b.r.delivered == [] and b.drain() == []
    f = traffic_frame(k(4), k(8))  # same dead end with the initial watermark: handed to the app (#30)
    b.send(q, f)
    assert b.r.delivered == [replace(f, watermark=Watermark(ME.public_key, 0))] and b.drain() == []


def test_6_5_step4_loop_drop_next_hop_is_arrival_port() -> None:
    b, p, q, _c = forwarding_bench()
    b.send(p, traffic_frame(k(8), k(0)))  # K8 is above us: up to the root, which is where it came from
    assert b.r.delivered == [] and b.drain() == []
    b.send(q, traffic_frame(k(8), k(0)))  # the same frame from elsewhere goes up
    assert [port for port, _ in b.drain()] == [p]


def test_6_5_step4_locally_originated_frame_whose_next_hop_is_local_is_dropped() -> None:
    b, _p, _q, _c = forwarding_bench()
    b.r.send_traffic(k(4), b"x", b.now)  # nobody closer to K4 than us
    assert b.r.delivered == [] and b.drain() == []
    b.r.send_traffic(ME.public_key, b"self", b.now)  # to our own key: §6.5 step 1 delivers it
    assert [f.payload for f in b.r.delivered] == [b"self"]


def test_6_5_step3_unknown_frame_type_silently_dropped_peer_stays() -> None:
    b, _p, q, _c = forwarding_bench()
    b.send(q, Frame(7, payload=b"experimental"))
    b.send(q, Frame(0xE0, payload=b"legacy bootstrap"))
    assert b.r.disconnects == [] and q in b.r.peers and b.r.peers[q].announcement is not None
    assert b.drain() == [] and b.r.delivered == []


# ------------------------------------------------------------------ §6.8 receiving broadcasts


@pytest.mark.parametrize("hop_limit", [5, 10])
def test_6_8_classic_flood_while_hop_limit_after_decrement_at_least_4(hop_limit: int) -> None:
    b, p, c, s, n = broadcast_bench()
    f = broadcast_frame(K[0], 1000, R9, hop_limit=hop_limit)
    b.send(p, f)
    out = of_type(b.drain(), FrameType.WAKEUP_BROADCAST)
    assert sorted(out, key=lambda x: x[0]) == [(port, replace(f, hop_limit=hop_limit - 1)) for port in (c, s, n)]


@pytest.mark.parametrize("hop_limit", [4, 2])
def test_6_8_tree_flood_below_4_only_parent_and_children(hop_limit: int) -> None:
    b, p, c, s, _n = broadcast_bench()
    b.send(s, broadcast_frame(K[0], 1000, R9, hop_limit=hop_limit))
    assert flooded(b) == [(p, hop_limit - 1), (c, hop_limit - 1)]  # not the sibling, not the silent peer
    b.send(p, broadcast_frame(K[1], 1000, R9, hop_limit=hop_limit))
    assert flooded(b) == [(c, hop_limit - 1)]


def test_6_8_hop_limit_1_is_recorded_but_not_forwarded() -> None:
    b, p, _c, _s, _n = broadcast_bench()
    b.send(p, broadcast_frame(K[0], 1000, R9, hop_limit=1))
    assert flooded(b) == []
    b.at(1.0).send(p, broadcast_frame(K[0], 2000, R9))  # recorded above: filtered now
    assert flooded(b) == []


def test_6_8_30_s_filter_per_source() -> None:
    b, p, _c, _s, _n = broadcast_bench()
    b.at(1.0).send(p, broadcast_frame(K[0], 1000, R9))
    assert len(flooded(b)) == 3
    b.at(20.0).send(p, broadcast_frame(K[0], 2000, R9))  # newer, but within 30 s
    assert flooded(b) == []
    b.at(25.0).send(p, broadcast_frame(K[8], 2000, R9))  # another source is not affected
    assert len(flooded(b)) == 3
    b.at(32.0).send(p, broadcast_frame(K[0], 900, R9))  # 31 s later, but not a newer seq
    assert flooded(b) == []
    b.send(p, broadcast_frame(K[0], 1000, R9))  # equal seq: still dropped
    assert flooded(b) == []
    b.send(p, broadcast_frame(K[0], 3000, R9))
    assert len(flooded(b)) == 3


def test_6_8_root_key_mismatch_dropped_root_seq_not_compared() -> None:
    b, p, _c, _s, _n = broadcast_bench()
    b.send(p, broadcast_frame(K[0], 1000, Root(k(8), 1)))
    assert flooded(b) == []
    b.send(p, broadcast_frame(K[0], 1000, Root(k(9), 7)))  # same key, other seq: fine
    assert len(flooded(b)) == 3


@pytest.mark.parametrize("bad", ["signature", "payload"])
def test_6_8_bad_broadcast_disconnects(bad: str) -> None:
    b, _p, _c, _s, n = broadcast_bench()
    f = broadcast_frame(K[0], 1000, R9, signer=K[4])
    if bad == "payload":
        f = replace(broadcast_frame(K[0], 1000, R9), payload=b"\x01\x02")
    b.send(n, f)
    assert [port for port, _ in b.r.disconnects] == [n] and n not in b.r.peers
    assert flooded(b) == []


def test_6_8_one_link_per_peer_key() -> None:
    b, p, c, s, n = broadcast_bench()
    slow_twin = b.connect(K[1], LinkType.BLUETOOTH)  # a third link to K1, slower, no announcement
    fast_twin = b.connect(K[1], LinkType.MULTICAST)  # another link to K1, faster, no announcement
    b.drain()
    b.send(p, broadcast_frame(K[0], 1000, R9))
    ports = [port for port, _ in flooded(b)]
    assert ports == sorted([fast_twin, s, n])  # K1 gets it once, on its fastest link
    assert c not in ports and slow_twin not in ports


def test_6_8_own_broadcast_every_60_s_first_at_60_s_one_link_per_key() -> None:
    b = Bench(ME)
    x = b.join(K[7], [K[8]])
    x2 = b.join(K[7], [K[8]], link_type=LinkType.MULTICAST)
    y = b.join(K[3])
    b.drain()

    def own(sent: list[tuple[float, int, Frame]]) -> list[tuple[float, int]]:
        return [
            (t, port) for t, port, f in sent if f.type == FrameType.WAKEUP_BROADCAST and f.source_key == ME.public_key
        ]

    assert own(b.tick(59.9)) == []
    assert own(b.tick(60.0)) == [(60.0, x2), (60.0, y)]
    assert own(b.tick(119.9)) == []
    assert own(b.tick(120.0)) == [(120.0, x2), (120.0, y)]
    assert x < x2


def test_5_3_step4_first_announcement_triggers_a_wakeup_broadcast_to_that_peer() -> None:
    b = Bench(ME)
    x = b.connect(K[7])
    b.drain()
    b.at(1.0).announce(x, chain([K[8], K[7]]))
    wake = of_type(b.drain(), FrameType.WAKEUP_BROADCAST)
    assert [port for port, _ in wake] == [x]
    f = wake[0][1]
    assert (f.hop_limit, f.source_key) == (5, ME.public_key)
    p = wire.decode_signed_root_payload(f.payload)
    assert wire.verify_signed_root_payload(p, ME.public_key)
    assert (p.root_key, p.root_seq) == (k(8), 1)  # sent at the end: our root is already the new one
    b.announce(x, chain([K[8], K[7]], root_seq=2))  # not the first any more
    assert of_type(b.drain(), FrameType.WAKEUP_BROADCAST) == []
    twin = b.connect(K[7])
    b.announce(twin, chain([K[8], K[7]], root_seq=2))  # first on this link, but K7 is known on another
    assert of_type(b.drain(), FrameType.WAKEUP_BROADCAST) == []


# ------------------------------------------------------------------ §3.3 ports, §4.9 hop limit


def test_3_3_lowest_free_port_up_to_253_then_refused() -> None:
    b = Bench(ME, broadcasts=False)
    assert [b.connect(K[i % 10]) for i in range(253)] == list(range(1, 254))
    assert b.r.add_peer(k(1), LinkType.REMOTE, b.now) is None
    b.r.remove_peer(17, b.now)
    b.r.remove_peer(5, b.now)
    assert (b.connect(K[1]), b.connect(K[1])) == (5, 17)


def test_4_9_hop_limiting_when_on_decrements_on_forward_only() -> None:
    b = Bench(ME, hop_limiting=True)
    p = b.join(K[9])
    q = b.join(K[7], [K[9]])
    b.drain()
    b.send(q, traffic_frame(k(8), k(0), hop_limit=3))  # K8 is above us: up to the root
    assert [(port, f.hop_limit) for port, f in b.drain()] == [(p, 2)]
    b.send(q, traffic_frame(k(8), k(0), hop_limit=1))
    assert b.drain() == []  # would need a decrement it cannot take
    b.send(q, traffic_frame(ME.public_key, k(0), hop_limit=1))
    assert [f.hop_limit for f in b.r.delivered] == [1]  # the destination does not decrement
    b.r.send_traffic(k(8), b"x", b.now)
    assert [(port, f.hop_limit) for port, f in b.drain()] == [(p, 9)]  # the origin's own step counts
    off = Bench(ME)  # off by default: untouched
    p = off.join(K[9])
    q = off.join(K[7], [K[9]])
    off.drain()
    off.send(q, traffic_frame(k(8), k(0), hop_limit=1))
    assert [(port, f.hop_limit) for port, f in off.drain()] == [(p, 1)]


# ------------------------------------------------------------------ §6.6 coordinates cache


def test_6_6_coords_cache_lifetime_60_s_and_cleared_when_a_parent_change_alters_the_root_key() -> None:
    b = Bench(ME)
    p = b.join(K[7], [K[8]])
    s = b.join(K[3])
    b.at(1.0).send(p, traffic_frame(ME.public_key, k(0), source_coords=(2, 6)))
    b.drain()

    def dest_coords_of_reply() -> tuple[int, ...]:
        b.r.send_traffic(k(0), b"reply", b.now)
        return next(f.destination_coords for _, f in of_type(b.drain(), FrameType.TRAFFIC))

    assert dest_coords_of_reply() == (2, 6)
    b.at(60.9)
    assert dest_coords_of_reply() == (2, 6)  # 59.9 s old
    b.at(61.0)
    assert dest_coords_of_reply() == ()  # 60 s old: not younger than 60 s, SNEK instead
    b.send(p, traffic_frame(ME.public_key, k(0), source_coords=(2, 6)))
    b.announce(p, chain([K[8], K[7]], root_seq=2))  # same root key: kept
    assert b.r.coords_cache
    b.announce(s, chain([K[9], K[3]]))  # a new parent with another root key
    assert b.r.parent == s and b.r.coords_cache == {}


# ------------------------------------------------------------------ §8 pings across real routers


def line_of_3(order: tuple[int, int, int]) -> Net:
    """Routers A - B - C whose keys rank as ``order`` (e.g. (0, 2, 1): A lowest, B highest)."""
    ids = identities(3, tag="ping-line")
    net = Net.line([ids[i] for i in order])
    net.run_until(12.0)  # tree settled, two rounds of bootstraps
    return net


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
@pytest.mark.parametrize("mode", ["snek", "tree"])
def test_8_ping_hops_is_links_plus_one_across_a_3_router_line(order: tuple[int, int, int], mode: str) -> None:
    net = line_of_3(order)
    a, b, c = net.routers
    for src, dst, links in ((a, c, 2), (c, a, 2), (a, b, 1), (b, c, 1)):
        coords = dst.coords if mode == "tree" else None
        assert src.ping.start(dst.key, net.now, mode=mode, coords=coords)
        net.pump()
        res = src.ping.results[-1]
        assert (res.target, res.received, res.hops, res.links) == (dst.key, True, links + 1, links)


def test_8_ping_counts_every_forward_including_the_origin_and_pong_keeps_hops() -> None:
    net = line_of_3((0, 1, 2))
    a, _b, c = net.routers
    net.tap.clear()
    a.ping.start(c.key, net.now)
    net.pump()
    seen = []
    for src, dst, f in net.tap:
        parsed = wire.decode_ping(f.payload) if f.type == FrameType.TRAFFIC else None
        if parsed is not None:
            seen.append((src, dst, parsed[0], parsed[1]))
    assert seen == [(0, 1, PING, 2), (1, 2, PING, 3), (2, 1, PONG, 3), (1, 0, PONG, 3)]
    assert a.ping.results[-1].hops == 3


# ------------------------------------------------------------------ whole networks through the kit


@pytest.mark.parametrize("seed", range(4))
def test_net_line_of_5_converges_on_the_highest_key_and_snek_delivers_between_all_pairs(seed: int) -> None:
    import random

    ids = identities(5, tag=f"line-{seed}")
    random.Random(seed).shuffle(ids)
    net = Net.line(ids)
    net.run_until(15.0)
    top = max(i.public_key for i in ids)
    assert all(r.root.key == top for r in net.routers)
    assert len({r.coords for r in net.routers}) == 5  # distinct coordinates
    for i, j in itertools.permutations(range(5), 2):
        src, dst = net.routers[i], net.routers[j]
        before = len(dst.delivered)
        src.send_traffic(dst.key, f"{i}->{j}".encode(), net.now, coords=())  # force SNEK routing
        net.pump()
        assert [f.payload for f in dst.delivered[before:]] == [f"{i}->{j}".encode()], (i, j)


def test_memory_bounds_routing_table_and_caches_under_hostile_input() -> None:
    """Validly signed bootstraps from made-up keys, and traffic from made-up sources, cannot grow state without bound."""
    from node.core import wire as _wire
    from node.core.crypto import Identity as _Identity, derive_seed as _derive
    from node.core.router import Router as _Router
    from node.core.types import Frame as _Frame, FrameType as _FT

    me, peer = _Identity(_derive("bounds", 0)), _Identity(_derive("bounds", 1))
    r = _Router(me, 0.0, max_routes=5, max_cached=3, broadcasts=False)
    port = r.add_peer(peer.public_key, 3, 0.0)
    root = r.root
    for i in range(10):
        fake = _Identity(_derive("bounds-fake", i))
        payload = _wire.encode_signed_root_payload(_wire.make_signed_root_payload(fake, 1000 + i, root.key, root.seq))
        r.frame_received(port, _Frame(_FT.BOOTSTRAP, destination_key=fake.public_key, payload=payload), 0.1)
    assert len(r.table) == 5
    assert r.counters[("bootstrap_rejected", "table_full")] == 5
    for i in range(10):
        src = _derive("bounds-src", i)
        r.frame_received(port, _Frame(_FT.TRAFFIC, destination_key=me.public_key, source_key=src,
                                      source_coords=(1, i + 1), payload=b"x"), 0.2)
    assert len(r.coords_cache) == 3 and _derive("bounds-src", 9) in r.coords_cache
