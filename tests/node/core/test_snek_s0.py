"""The ``snek-s0`` variant (node.core.snek_s0): seed S0's rules, one scenario per step, and where they differ
from the reference's (PROTOCOL.md §6.3, §10).

Every router state is reached by feeding really signed frames to a real Router (routerkit.py). Keys are named
by rank: ``K[0] < K[1] < ... < K[9]``; the router under test is ``ME = K[5]`` and the tree root is ``ROOT = K[9]``.
Each test names S0's section and step ("Next-hop calculation" step 4 is ``step4``).
"""

from __future__ import annotations

import itertools
import random

import pytest
from routerkit import Bench, Net, bootstrap_frame, bootstraps_in, chain, identities, of_type, traffic_frame

from node.core import wire
from node.core.snek import NONE_PORT, Entry, NextHop
from node.core.snek_reference import SnekReference
from node.core.snek_s0 import SnekS0
from node.core.types import INITIAL_WATERMARK, LOCAL_PORT, FrameType, LinkType, Root, Watermark
from node.core.variants import VARIANTS, VariantSpec

K = identities(10)
ME, ROOT = K[5], K[9]
R1 = Root(ROOT.public_key, 1)
S0 = "snek-s0"
W = Watermark(K[7].public_key, 4321)  # a frame's watermark: S0 hands it back untouched


def k(i: int) -> bytes:
    return K[i].public_key


def wm(i: int, seq: int = 0) -> Watermark:
    return Watermark(k(i), seq)


def under_parent(parent_path: list[int], snek: str = S0) -> tuple[Bench, int]:
    """ME with one peer, the last of ``parent_path`` (indexes into K, root first), as its parent."""
    b = Bench(ME, snek=snek)
    p = b.join(K[parent_path[-1]], [K[i] for i in parent_path[:-1]])
    assert b.r.parent == p and b.r.root == Root(k(parent_path[0]), 1)
    b.drain()
    return b, p


def with_table(snek: str = S0) -> tuple[Bench, int, int]:
    """ME under ROOT (port 1); Y = K[1] (port 2, a child of ROOT); a route to K[3] learnt from Y at t=1."""
    b, p = under_parent([9], snek)
    y = b.join(K[1], [ROOT])
    b.at(1.0).send(y, bootstrap_frame(K[3], 1000, R1))
    assert b.r.table.get(k(3)) is not None
    b.drain()
    return b, p, y


def _bootstrap_times(sent: list) -> list[float]:
    return [t for t, _, f in sent if f.type == FrameType.BOOTSTRAP and f.destination_key == ME.public_key]


def test_the_variant_is_registered_with_the_reference_wire_format() -> None:
    v = VARIANTS[S0]
    assert v.factory is SnekS0 and v.seeds == "000"
    assert v.capabilities == VARIANTS["snek"].capabilities  # same frames: s0 and snek nodes peer
    assert VariantSpec(S0).peering_refusal(VariantSpec("snek")) is None
    assert type(Bench(ME, snek=S0).r.snek) is SnekS0 and type(Bench(ME).r.snek) is SnekReference


# ------------------------------------------------------------------ "Next-hop calculation"


def test_s0_step1_every_frame_starts_at_the_local_port_bootstraps_too() -> None:
    b = Bench(ME, snek=S0)
    for d in (k(3), k(7)):
        assert b.hop(d, wm=W) == NextHop(LOCAL_PORT, W)
        assert b.hop(d, bootstrap=True, wm=W) == NextHop(LOCAL_PORT, W)  # the reference: none (§10 item 3)


def test_s0_step2_addressed_to_us_is_local_but_not_for_a_bootstrap() -> None:
    b, p = under_parent([9, 2])
    assert b.hop(ME.public_key, wm=W) == NextHop(LOCAL_PORT, W)
    assert b.hop(ME.public_key, bootstrap=True, wm=W) == NextHop(p, W)  # step 3.1: our own bootstrap goes up


def test_s0_step3_1_own_bootstrap_heads_for_the_root_with_the_initial_watermark() -> None:
    b, p = under_parent([9, 2])  # the parent K[2] is below us: only step 3.1 picks it
    sent = [(t, port, f) for t, port, f in b.tick(0.0) if f.type == FrameType.BOOTSTRAP]
    assert [(t, port, f.destination_key, f.watermark) for t, port, f in sent] == [
        (0.0, p, ME.public_key, INITIAL_WATERMARK)  # the reference writes (root, 0) here (§10 item 6)
    ]
    pl = wire.decode_signed_root_payload(sent[0][2].payload)
    assert (pl.seq, pl.root_key, pl.root_seq) == (b.r.wall_ms(0.0), k(9), 1)
    assert wire.verify_signed_root_payload(pl, ME.public_key)


def test_s0_step3_1_deviation_an_intermediate_bootstrap_is_not_sent_to_the_root() -> None:
    # K[3] lies between the parent K[2] and us. The literal S0 would send it up to the root (it never
    # dead-ends: snek_s0 deviation 1); the variant keeps it here, at the local port.
    b, _p = under_parent([9, 2])
    assert b.hop(k(3), bootstrap=True, wm=W) == NextHop(LOCAL_PORT, W)


@pytest.mark.parametrize("bootstrap", [False, True])
def test_s0_step3_2_destination_above_us_heads_for_the_root(bootstrap: bool) -> None:
    b, p = under_parent([9, 2])  # Ordered(K5, K7, K9)
    assert b.hop(k(7), bootstrap=bootstrap, wm=W) == NextHop(p, W)


@pytest.mark.parametrize(
    ("dest", "bootstrap", "via_parent"),
    [
        (7, False, True),  # 3.3.1 exact match above us (after 3.2 took the root)
        (3, False, True),  # 3.3.1 exact match below us
        (2, False, True),  # 3.3.2 Ordered(K2, K3, K5)
        (2, True, True),
        (3, True, False),  # no exact match for bootstraps, nothing strictly between K3 and K5: local
        (4, False, False),
    ],
)
def test_s0_step3_3_parent_ancestors(dest: int, bootstrap: bool, via_parent: bool) -> None:
    b, p = under_parent([9, 7, 3, 1])  # the parent K[1]'s path: K9 -> K7 -> K3 -> K1
    assert b.hop(k(dest), bootstrap=bootstrap, wm=W) == NextHop(p if via_parent else LOCAL_PORT, W)


@pytest.mark.parametrize(
    ("dest", "bootstrap", "s0", "snek"),
    [
        (3, False, "q", ("q", 3)),  # 4.1.1: the exact match, for traffic
        (8, False, "q", ("q", 8)),  # the peer's own key is its last ancestor
        (2, False, "local", ("q", 3)),  # S0: no "Ordered" offer from a peer's ancestors (§10 item 5)
        (2, True, "local", ("q", 3)),
        (3, True, "local", (None, 5)),  # no exact match for bootstraps in either
    ],
)
def test_s0_step4_peer_ancestors_only_exact_match(dest: int, bootstrap: bool, s0: str, snek: tuple) -> None:
    got = {}
    for variant in (S0, "snek"):
        b, _p = under_parent([9], variant)
        q = b.join(K[8], [ROOT, K[3]])  # K8 is a child of K3, a child of the root; not our parent
        got[variant] = (b.hop(k(dest), bootstrap=bootstrap, wm=W), q)
    nh, q = got[S0]
    assert nh == NextHop(q if s0 == "q" else LOCAL_PORT, W)
    ref, q = got["snek"]
    port = {"q": q, None: NONE_PORT}[snek[0]]
    assert ref == NextHop(port, wm(snek[1]))


def test_s0_step5_a_direct_peer_carries_its_key_the_last_link_even_unannounced() -> None:
    b, _p = under_parent([9])
    q = b.join(K[7], [ROOT])
    bare = b.connect(K[7])  # a second link to K7 that has not announced yet
    assert q < bare
    assert b.hop(k(7), wm=W) == NextHop(bare, W)  # step 4 found K7 via q; step 5 takes the last link
    assert b.hop(k(6), wm=W) == NextHop(b.r.parent, W)  # K7 is no candidate for K6: no "Ordered" in step 4


def test_s0_no_link_refinement() -> None:
    # Two links to K7: the reference's third loop (§6.3 step 7) moves to the lower link type; S0 has no
    # third loop, so step 5's last link stays.
    hops = {}
    for variant in (S0, "snek"):
        b, _p = under_parent([9], variant)
        fast = b.join(K[7], [ROOT], link_type=LinkType.MULTICAST)
        slow = b.join(K[7], [ROOT], link_type=LinkType.REMOTE)
        assert fast < slow
        hops[variant] = (b.hop(k(7), wm=W).port, fast, slow)
    assert hops[S0][0] == hops[S0][2]  # slow
    assert hops["snek"][0] == hops["snek"][1]  # fast


def test_s0_no_link_refinement_by_receive_order() -> None:
    b, _p = under_parent([9])
    first, second = b.connect(K[7]), b.connect(K[7])
    b.announce(first, chain([ROOT, K[7]]))
    b.announce(second, chain([ROOT, K[7]]))
    assert b.hop(k(7), wm=W) == NextHop(second, W)  # the reference moves to `first` (same root, earlier)


def test_s0_step6_table_entries_taken_exact_match_for_traffic_only() -> None:
    b, _p, y = with_table()
    assert b.hop(k(2), wm=W) == NextHop(y, W)  # 6.3: Ordered(K2, K3, K5)
    assert b.hop(k(2), bootstrap=True, wm=W) == NextHop(y, W)
    assert b.hop(k(3), wm=W) == NextHop(y, W)  # 6.2: exact
    assert b.hop(k(3), bootstrap=True, wm=W) == NextHop(LOCAL_PORT, W)


@pytest.mark.parametrize("w", [wm(3, 2000), wm(2, 0), wm(0, 7), INITIAL_WATERMARK])
def test_s0_step6_no_watermark_check(w: Watermark) -> None:
    b, _p, y = with_table()
    assert b.hop(k(2), wm=w) == NextHop(y, w)  # the reference skips the entry for the first three (§6.3 step 6)


def test_s0_step6_1_expired_entries_skipped() -> None:
    b, _p, y = with_table()  # installed at t=1
    b.at(10.999)
    assert b.hop(k(2), wm=W) == NextHop(y, W)
    b.at(11.0, timers=False)  # 10 s old: expired, before maintenance removes it
    assert b.r.table.get(k(3)) is not None
    assert b.hop(k(2), wm=W) == NextHop(LOCAL_PORT, W)


def test_s0_traffic_keeps_its_watermark_and_is_never_dropped_for_it() -> None:
    b, p, y = with_table()
    low = Watermark(k(0), 0)  # lower than every candidate: the reference drops this frame (§6.5 step 4)
    b.send(p, traffic_frame(k(2), k(8), watermark=low))
    assert [(port, f.watermark) for port, f in of_type(b.drain(), FrameType.TRAFFIC)] == [(y, low)]
    ref, p, y = with_table("snek")
    ref.send(p, traffic_frame(k(2), k(8), watermark=low))
    assert of_type(ref.drain(), FrameType.TRAFFIC) == []
    assert ref.r.counters[("frame_dropped", FrameType.TRAFFIC, "watermark")] == 1


# ------------------------------------------------------------------ snek vs snek-s0 on the same router state


def _links_state(snek: str) -> tuple[Bench, dict[str, int]]:
    """ME under ROOT; K7 over a fast and a slow link; K8, a child of K3, over a third."""
    b, p = under_parent([9], snek)
    ports = {"parent": p}
    ports["fast"] = b.join(K[7], [ROOT], link_type=LinkType.MULTICAST)
    ports["slow"] = b.join(K[7], [ROOT], link_type=LinkType.REMOTE)
    ports["k8"] = b.join(K[8], [ROOT, K[3]])
    b.drain()
    return b, ports


def _table_state(snek: str) -> tuple[Bench, dict[str, int]]:
    b, p, y = with_table(snek)
    return b, {"parent": p, "y": y}


@pytest.mark.parametrize(
    ("state", "dest", "bootstrap", "w", "s0", "snek"),
    [
        (_links_state, 7, False, INITIAL_WATERMARK, "slow", "fast"),  # no link refinement (§6.3 step 7)
        (_links_state, 6, False, INITIAL_WATERMARK, "parent", "fast"),  # K7 offered by "Ordered" in step 4
        (_links_state, 2, False, INITIAL_WATERMARK, "local", "k8"),  # K3, K8's ancestor: "Ordered" in step 4
        (_links_state, 2, True, INITIAL_WATERMARK, "local", "k8"),  # ...for a bootstrap too (§10 item 5)
        (_table_state, 2, False, wm(2), "y", "local"),  # the entry (K3, 1000) is worse than (K2, 0)
        (_table_state, 2, False, wm(3, 2000), "y", "local"),  # ...and than (K3, 2000): §6.3 step 6 skips it
    ],
)
def test_snek_and_snek_s0_choose_different_next_hops(state, dest: int, bootstrap: bool, w: Watermark, s0: str,
                                                      snek: str) -> None:  # fmt: skip
    chosen = {}
    for variant in (S0, "snek"):
        b, ports = state(variant)
        assert type(b.r.snek) is {S0: SnekS0, "snek": SnekReference}[variant]
        nh = b.hop(k(dest), bootstrap=bootstrap, wm=w)
        names = {**{port: name for name, port in ports.items()}, LOCAL_PORT: "local", NONE_PORT: "none"}
        chosen[variant] = names[nh.port]
    assert chosen == {S0: s0, "snek": snek}


# ------------------------------------------------------------------ "Handling bootstrap messages"


def test_s0_install_route_at_every_hop_and_forward_with_the_watermark_untouched() -> None:
    b, p = under_parent([9, 4])  # the parent K4, an ancestor between K3 and us (step 3.3.2)
    y = b.join(K[1], [ROOT])
    b.drain()
    f = bootstrap_frame(K[3], 1000, R1, watermark=wm(8, 42))
    b.at(1.5).send(y, f)
    assert b.r.table.get(k(3)) == Entry(k(3), y, p, 1.5, R1, 1000)  # source, destination = the next hop
    assert bootstraps_in(b.drain()) == [(p, f)]  # the reference writes (K4, 0) into it
    assert b.r.descending is None  # only the dead end updates it (§10 item 10)


def test_s0_install_route_at_the_dead_end_and_take_it_as_descending() -> None:
    b, _p = under_parent([9])
    y = b.join(K[1], [ROOT])
    b.join(K[4], [ROOT])  # a closer direct peer: S0's step 4 offers a bootstrap nothing from it
    b.at(1.5).send(y, bootstrap_frame(K[3], 1000, R1))
    e = b.r.table.get(k(3))
    assert e == Entry(k(3), y, NONE_PORT, 1.5, R1, 1000)  # no destination port at the dead end
    assert b.r.descending is e
    assert bootstraps_in(b.drain()) == []


@pytest.mark.parametrize("seq", [1000, 999, 1])
def test_s0_install_route_overwrites_without_a_replay_check(seq: int) -> None:
    b, _p, y = with_table()
    b.at(2.0).send(y, bootstrap_frame(K[3], seq, R1))
    assert b.r.table.get(k(3)) == Entry(k(3), y, NONE_PORT, 2.0, R1, seq)  # the reference rejects these
    assert b.r.counters[("bootstrap_accepted",)] == 2


def test_s0_bootstrap_with_bad_signature_malformed_or_other_root_is_dropped() -> None:
    b, _p, y = with_table()
    good = bootstrap_frame(K[2], 7, R1)
    for f in (
        bootstrap_frame(K[2], 7, R1, signer=K[4]),
        bootstrap_frame(K[2], 7, R1, payload=good.payload[:-1]),
        bootstrap_frame(K[2], 7, Root(k(9), 2)),
        bootstrap_frame(K[2], 7, Root(k(8), 1)),
    ):
        b.send(y, f)
    assert b.r.table.get(k(2)) is None and b.r.descending.key == k(3)  # type: ignore[union-attr]
    reasons = {key[1]: n for key, n in b.r.counters.items() if key[0] == "bootstrap_rejected"}
    assert reasons == {"bad_signature": 1, "malformed": 1, "root_mismatch": 2}
    assert y in b.r.peers and b.r.disconnects == []


def test_s0_descending_closer_or_the_same_node_farther_only_once_removed() -> None:
    b, _p = under_parent([9])
    y = b.join(K[0], [ROOT])
    b.at(1.0).send(y, bootstrap_frame(K[2], 100, R1))
    assert b.r.descending.key == k(2)  # type: ignore[union-attr]
    b.at(2.0).send(y, bootstrap_frame(K[3], 100, R1))  # closer
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    b.at(3.0).send(y, bootstrap_frame(K[2], 101, R1))  # farther (sent back towards K3: no dead end here)
    assert b.r.descending.key == k(3) and b.r.table.get(k(2)).seq == 101  # type: ignore[union-attr]
    b.at(4.0).send(y, bootstrap_frame(K[3], 101, R1))  # an update from our descending node
    assert (b.r.descending.key, b.r.descending.last_seen) == (k(3), 4.0)  # type: ignore[union-attr]
    b.at(13.9)
    b.at(14.0, timers=False).send(y, bootstrap_frame(K[2], 102, R1))  # K3's has expired, not yet removed
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]  # the reference takes K2 here
    b.at(14.0)  # maintenance step 1 removes it...
    assert b.r.descending is None
    b.at(14.5).send(y, bootstrap_frame(K[2], 103, R1))  # ...and the farther node may now take its place
    assert b.r.descending.key == k(2)  # type: ignore[union-attr]


# ------------------------------------------------------------------ "Routine maintenance" and "Bootstrapping"


def test_s0_maintenance_drops_descending_with_other_root() -> None:
    b, p, _y = with_table()
    b.tick(2.0)
    b.at(2.5).announce(p, chain([ROOT], root_seq=2))  # a newer root sequence from the parent
    assert b.r.descending is not None
    sent = b.tick(3.0)
    assert b.r.descending is None  # step 2: different root information
    assert b.r.table.get(k(3)) is not None  # the route itself stays until it expires (step 3)
    assert _bootstrap_times(sent) == []  # and no "bootstrap soon": the reference bootstraps at 3.0
    assert _bootstrap_times(b.tick(5.0)) == [5.0]


def test_s0_maintenance_drops_expired_descending_and_routes() -> None:
    b, _p, _y = with_table()  # installed at t=1
    b.tick(10.999)
    assert b.r.descending is not None and b.r.table.get(k(3)) is not None
    sent = b.tick(11.0)
    assert b.r.descending is None and b.r.table.get(k(3)) is None
    assert _bootstrap_times(sent) == []  # no "bootstrap soon" on the descending entry going


def test_s0_bootstraps_every_interval_and_never_sooner() -> None:
    b, _p = under_parent([9])
    y = b.join(K[0], [ROOT])
    assert _bootstrap_times(b.tick(0.0)) == [0.0]
    b.at(1.5).send(y, bootstrap_frame(K[3], 100, R1))  # descending set: the reference bootstraps at 2.0
    b.at(2.5).send(y, bootstrap_frame(K[4], 100, R1))  # and changed: again "soon" in the reference
    b.r.remove_peer(_p, b.now)  # the parent goes: K0 is the new parent, "bootstrap soon" in the reference
    assert b.r.parent == y
    assert _bootstrap_times(b.tick(20.0)) == [5.0, 10.0, 15.0, 20.0]


def test_s0_a_root_tries_but_sends_nothing_and_keeps_the_period() -> None:
    b = Bench(ME, snek=S0)
    b.connect(K[2])
    assert _bootstrap_times(b.tick(2.5)) == []  # root: the next hop is local, nothing is sent
    b.join(ROOT)  # a parent from 2.5: the next bootstrap is the period's, at 5.0 (the reference: 3.0)
    assert _bootstrap_times(b.tick(10.0)) == [5.0, 10.0]


def test_s0_honours_the_entry_expiry_and_root_filter_knobs() -> None:
    b = Bench(ME, **VariantSpec.parse("snek-s0,entry_expiry=4,root_filter=1").router_options())  # type: ignore[arg-type]
    assert type(b.r.snek) is SnekS0
    p = b.join(ROOT)
    y = b.join(K[1], [ROOT])
    b.at(1.0).send(y, bootstrap_frame(K[3], 1000, R1))
    assert b.hop(k(2), wm=W) == NextHop(y, W)
    b.at(2.0).announce(p, chain([ROOT], root_seq=2))  # our root moves on; the entry was made under (K9, 1)
    assert b.hop(k(2), wm=W) == NextHop(LOCAL_PORT, W)  # root_filter: skipped
    b.at(4.999)
    assert b.r.table.get(k(3)) is not None
    b.at(5.0)
    assert b.r.table.get(k(3)) is None  # entry_expiry: 4 s


# ------------------------------------------------------------------ a small network


@pytest.mark.parametrize("mixed", [False, True])
def test_s0_line_converges_and_delivers_between_all_pairs(mixed: bool) -> None:
    ids = identities(6, tag="s0-line")
    random.Random(1).shuffle(ids)
    reference = {i.public_key for i in ids[::2]} if mixed else set()  # mixed: every other router runs snek

    def factory(host, now: float):
        return (SnekReference if host.key in reference else SnekS0)(host, now)

    net = Net.line(ids, snek=factory)
    assert sum(type(r.snek) is SnekS0 for r in net.routers) == (3 if mixed else 6)
    net.run_until(40.0)
    keys = sorted(i.public_key for i in ids)
    for r in net.routers:
        assert r.root.key == keys[-1]
        i = keys.index(r.key)
        assert (r.descending.key if r.descending else None) == (keys[i - 1] if i else None)
    for i, j in itertools.permutations(range(6), 2):
        src, dst = net.routers[i], net.routers[j]
        before = len(dst.delivered)
        src.send_traffic(dst.key, b"x", net.now, coords=())  # force SNEK routing
        net.pump()
        assert len(dst.delivered) == before + 1, (i, j)
