"""SNEK rules, one scenario per rule of PROTOCOL.md §6.2, §6.3, §4.8, §6.4, §6.7 (§6.5: test_router_misc.py).

Every router state is reached by feeding really signed frames to a real
Router (see routerkit.py). Keys are named by rank: ``K[0] < K[1] < ... < K[9]``;
the router under test is ``ME = K[5]`` and the tree root is ``ROOT = K[9]``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from routerkit import (
    Bench,
    bootstrap_frame,
    bootstraps_in,
    chain,
    identities,
    of_type,
    peer_state,
    traffic_frame,
)

from node.core import wire
from node.core.state import PeerState
from node.core.snek import (
    NONE_PORT,
    Entry,
    NextHop,
    RoutingTable,
    SnekView,
    next_hop_reference,
)
from node.core.types import (
    FULL_MASK,
    INITIAL_WATERMARK,
    LOCAL_PORT,
    Announcement,
    Frame,
    FrameType,
    LinkType,
    Root,
    SigHop,
    Watermark,
)

K = identities(10)
ME, ROOT = K[5], K[9]
R1 = Root(ROOT.public_key, 1)


def k(i: int) -> bytes:
    return K[i].public_key


def wm(i: int, seq: int = 0) -> Watermark:
    return Watermark(k(i), seq)


def under_parent(parent_path: list[int], **kw: object) -> tuple[Bench, int]:
    """ME with one peer, the last of ``parent_path`` (indexes into K, root first), as its parent."""
    b = Bench(ME, **kw)  # type: ignore[arg-type]
    p = b.join(K[parent_path[-1]], [K[i] for i in parent_path[:-1]])
    assert b.r.parent == p and b.r.root == Root(k(parent_path[0]), 1)
    b.drain()
    return b, p


def with_table() -> tuple[Bench, int, int]:
    """ME under ROOT (port 1); Y = K[1] (port 2, a child of ROOT); a route to K[3] learnt from Y at t=1."""
    b, p = under_parent([9])
    y = b.join(K[1], [ROOT])
    b.at(1.0).send(y, bootstrap_frame(K[3], 1000, R1))
    assert b.r.table.get(k(3)) is not None
    b.drain()
    return b, p, y


# ------------------------------------------------------------------ §6.3 next hop


def test_6_3_step1_loopback_returns_local_with_watermark_unchanged() -> None:
    b, p = under_parent([9, 2])
    w = wm(7, 1234)
    assert b.hop(ME.public_key, wm=w) == NextHop(LOCAL_PORT, w)
    # a *bootstrap* for our own key is not loopback: it heads for the root (step 3.1)
    assert b.hop(ME.public_key, bootstrap=True, wm=w) == NextHop(p, Watermark(ROOT.public_key, 0))


def test_6_3_step2_init_bootstrap_without_candidates_is_none() -> None:
    b = Bench(ME)
    for d in (k(3), k(7), ME.public_key):
        assert b.hop(d, bootstrap=True) == NextHop(NONE_PORT, Watermark(ME.public_key, 0))


def test_6_3_step2_init_traffic_without_candidates_is_local() -> None:
    b = Bench(ME)
    for d in (k(3), k(7)):
        assert b.hop(d) == NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))


def test_6_3_step3_1_own_bootstrap_heads_for_the_root() -> None:
    # the parent K[2] is below us and offers nothing closer: only step 3.1 picks it
    b, p = under_parent([9, 2])
    assert b.hop(ME.public_key, bootstrap=True) == NextHop(p, Watermark(ROOT.public_key, 0))
    sent = b.tick(0.0)  # the first SNEK maintenance runs at start-up (§6.7)
    assert [(port, f.destination_key, f.watermark) for _, port, f in sent if f.type == FrameType.BOOTSTRAP] == [
        (p, ME.public_key, Watermark(ROOT.public_key, 0))
    ]


def test_6_2_own_bootstrap_frame_contents() -> None:
    b, p = under_parent([9, 2])
    boots = [(t, port, f) for t, port, f in b.tick(0.0) if f.type == FrameType.BOOTSTRAP]
    assert [(t, port, f.hop_limit, f.destination_key) for t, port, f in boots] == [(0.0, p, 0, ME.public_key)]
    pl = wire.decode_signed_root_payload(boots[0][2].payload)
    assert (pl.seq, pl.root_key, pl.root_seq) == (b.r.wall_ms(0.0), k(9), 1)  # Unix ms, our current root
    assert wire.verify_signed_root_payload(pl, ME.public_key)
    assert b.r.table.get(ME.public_key) is None  # we never process our own bootstrap


def test_6_2_root_never_bootstraps_and_retries_every_tick() -> None:
    b = Bench(ME)
    b.connect(K[2])
    assert _bootstrap_times(b.tick(2.5)) == []  # root: no bootstrap, last_bootstrap not updated
    b.join(ROOT)  # adopted at 2.5 (no "bootstrap soon" on this path)
    assert _bootstrap_times(b.tick(3.0)) == [3.0]  # the very next tick, not 5 s after start-up


@pytest.mark.parametrize("bootstrap", [False, True])
def test_6_3_step3_1_destination_above_us_heads_for_the_root(bootstrap: bool) -> None:
    b, p = under_parent([9, 2])  # Ordered(K5, K7, K9)
    assert b.hop(k(7), bootstrap=bootstrap) == NextHop(p, Watermark(ROOT.public_key, 0))


def test_6_3_step3_1_not_applied_for_an_intermediate_bootstrap_discrepancy_4() -> None:
    # K[3] lies between the parent K[2] and us: nothing is closer from above.
    # The seeds would send it up to the root; the reference dead-ends it here.
    b, _p = under_parent([9, 2])
    assert b.hop(k(3), bootstrap=True) == NextHop(NONE_PORT, Watermark(ME.public_key, 0))
    assert b.hop(k(3)) == NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))


@pytest.mark.parametrize(
    ("dest", "bootstrap", "expected"),
    [
        (7, False, 7),  # exact match above us (after step 3.1 took the root)
        (3, False, 3),  # exact match below us
        (2, False, 3),  # Ordered: the closest ancestor key above K2
        (2, True, 3),
        (0, False, 1),  # the closest of K3 and K1 above K0 is K1, whatever the hop order
        (3, True, None),  # exact match disabled for bootstraps: nothing strictly between K3 and K5
        (4, False, "local"),
    ],
)
def test_6_3_step3_2_parent_ancestors_offered(dest: int, bootstrap: bool, expected: int | str | None) -> None:
    b, p = under_parent([9, 7, 3, 1])  # the parent K[1]'s path: K9 -> K7 -> K3 -> K1
    nh = b.hop(k(dest), bootstrap=bootstrap)
    if expected == "local":
        assert nh == NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))
    elif expected is None:
        assert nh == NextHop(NONE_PORT, Watermark(ME.public_key, 0))
    else:
        assert nh == NextHop(p, wm(expected))  # type: ignore[arg-type]


def test_6_3_step3_2_parent_ancestors_are_offered_before_other_peers() -> None:
    b = Bench(ME)
    q = b.connect(K[0])  # port 1, lower than the parent's port
    p = b.join(K[1], [ROOT, K[3]])  # port 2, adopted first
    b.announce(q, chain([ROOT, K[3], K[0]]))  # same root and seq, later: the parent stays
    assert (q, p) == (1, 2) and b.r.parent == p
    assert b.hop(k(3)) == NextHop(p, wm(3))
    assert b.hop(k(2)) == NextHop(p, wm(3))


@pytest.mark.parametrize(
    ("dest", "bootstrap", "expected"),
    [
        (2, True, 3),  # discrepancy #5: the full offer rule, for a bootstrap, from a non-parent peer
        (2, False, 3),
        (3, False, 3),  # exact match for traffic
        (3, True, None),  # exact match disabled for bootstraps
        (8, False, 8),  # the peer's own key (its last hop) is an ancestor too
    ],
)
def test_6_3_step4_peers_ancestors_full_offer_rule(dest: int, bootstrap: bool, expected: int | None) -> None:
    b, _p = under_parent([9])
    q = b.join(K[8], [ROOT, K[3]])  # K8 is a child of K3, a child of the root
    nh = b.hop(k(dest), bootstrap=bootstrap)
    if expected is None:
        assert nh == NextHop(NONE_PORT, Watermark(ME.public_key, 0))
    else:
        assert nh == NextHop(q, wm(expected))


def test_6_3_step5_direct_peering_takes_the_last_port() -> None:
    # ROOT over two equal links; the link announcing the newer root seq becomes the parent.
    b = Bench(ME)
    a, c = b.connect(ROOT), b.connect(ROOT)
    b.announce(c, chain([ROOT], root_seq=1))
    b.announce(a, chain([ROOT], root_seq=2))
    assert b.r.parent == a
    # Step 3.1 takes the root via the parent (port a); step 5 moves to the LAST link to that key.
    # Step 7 leaves it there: same link type, but the two links carry different roots.
    assert b.hop(k(8)) == NextHop(c, Watermark(ROOT.public_key, 0))


def test_6_3_step6_table_entry_taken_with_its_seq() -> None:
    b, _p, y = with_table()
    assert b.hop(k(2)) == NextHop(y, wm(3, 1000))  # Ordered(K2, K3, K5)
    assert b.hop(k(2), bootstrap=True) == NextHop(y, wm(3, 1000))


def test_6_3_step6_table_exact_match_for_traffic_only() -> None:
    b, _p, y = with_table()
    assert b.hop(k(3)) == NextHop(y, wm(3, 1000))
    assert b.hop(k(3), bootstrap=True) == NextHop(NONE_PORT, Watermark(ME.public_key, 0))


def test_6_3_step6_table_entry_skipped_when_expired() -> None:
    b, _p, y = with_table()  # installed at t=1
    b.at(10.999)
    assert b.hop(k(2)) == NextHop(y, wm(3, 1000))
    b.at(11.0, timers=False)  # 10 s old: not valid any more, even before the 11.0 tick sweeps it
    assert b.r.table.get(k(3)) is not None
    assert b.hop(k(2)) == NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))


@pytest.mark.parametrize(
    ("w", "used"),
    [
        (wm(3, 2000), False),  # same key, higher seq: the entry's (K3, 1000) is worse
        (wm(2, 0), False),  # lower key: the entry's K3 is worse
        (wm(3, 1000), True),
        (wm(3, 0), True),  # §4.8: seq 0 is never better on seq grounds
        (wm(4, 5), True),
        (INITIAL_WATERMARK, True),
    ],
)
def test_6_3_step6_table_entry_skipped_when_watermark_worse(w: Watermark, used: bool) -> None:
    b, _p, y = with_table()
    expected = NextHop(y, wm(3, 1000)) if used else NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))
    assert b.hop(k(2), wm=w) == expected


def test_6_3_step6_table_entry_skipped_when_source_down() -> None:
    b, p, y = with_table()
    # A stopped peer is ignored at once (§0), but the router deletes its entries in the same
    # call that stops it (§3.7), so "entry whose source is down" only exists inside remove_peer.
    # Build that state on copies of the router's own objects and ask both §6.3 implementations.
    peers = {port: replace(q) for port, q in b.r.peers.items()}
    peers[y].up = False
    args = {
        "own": ME.public_key,
        "dest": k(2),
        "bootstrap": False,
        "wm": INITIAL_WATERMARK,
        "parent": p,
        "root_key": ROOT.public_key,
        "peers": peers,
        "table": b.r.table,
        "now": b.now,
    }
    local = NextHop(LOCAL_PORT, Watermark(ME.public_key, 0))
    assert next_hop_reference(**args) == local  # type: ignore[arg-type]
    assert SnekView().next_hop(**args) == local  # type: ignore[arg-type]


def test_3_7_step4_entries_through_a_disconnected_peer_are_deleted() -> None:
    b, p = under_parent([9])
    a = b.join(K[2], [ROOT])
    z = b.join(K[4], [ROOT])
    b.send(a, bootstrap_frame(K[3], 10, R1))  # on to z (K4 is the closest above K3)
    b.send(z, bootstrap_frame(K[1], 10, R1))  # on to a (K2 is the closest above K1)
    b.send(a, bootstrap_frame(K[6], 10, R1))  # above us: on to the parent
    routes = {i: (b.r.table.get(k(i)).source, b.r.table.get(k(i)).destination) for i in (1, 3, 6)}  # type: ignore[union-attr]
    assert routes == {3: (a, z), 1: (z, a), 6: (a, p)}
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    b.r.remove_peer(z, b.now)
    assert [i for i in (1, 3, 6) if b.r.table.get(k(i))] == [6]  # z was the source of K1's, the destination of K3's
    b.r.remove_peer(a, b.now)
    assert len(b.r.table) == 0 and b.r.descending is None  # §3.7 step 5: the descending entry came from a


def test_6_3_step7_lower_link_type_wins() -> None:
    b, _p = under_parent([9])
    fast = b.join(K[7], [ROOT], link_type=LinkType.MULTICAST)
    slow = b.join(K[7], [ROOT], link_type=LinkType.REMOTE)  # the last link: step 5 picks it
    assert fast < slow
    assert b.hop(k(7)) == NextHop(fast, wm(7))
    assert b.hop(k(6)) == NextHop(fast, wm(7))
    assert b.hop(k(6), bootstrap=True) == NextHop(fast, wm(7))


def test_6_3_step7_equal_link_type_same_root_lower_receive_order_wins() -> None:
    b, _p = under_parent([9])
    first, second = b.connect(K[7]), b.connect(K[7])
    b.announce(first, chain([ROOT, K[7]]))
    b.announce(second, chain([ROOT, K[7]]))
    assert b.hop(k(7)) == NextHop(first, wm(7))  # step 5 took `second`, step 7 moved to the earlier one
    b2, _ = under_parent([9])
    first, second = b2.connect(K[7]), b2.connect(K[7])
    b2.announce(second, chain([ROOT, K[7]]))  # now the higher port announced first
    b2.announce(first, chain([ROOT, K[7]]))
    assert b2.hop(k(7)) == NextHop(second, wm(7))


def _peer(port: int, key: bytes, link_type: int, hop_keys: list[bytes], order: int) -> PeerState:
    """A peer with an unsigned announcement (the pure §6.3 functions never check signatures)."""
    ann = Announcement(k(9), 1, tuple(SigHop(i + 1, hk, b"\0" * 64) for i, hk in enumerate(hop_keys)))
    return peer_state(port, key, link_type, ann, order=order)


def test_6_3_step7_best_seq_kept() -> None:
    # Unreachable through the Router: a peer's key is always its announcement's last hop
    # (§5.3 check 4), so step 4 offers it with seq 0 before step 6 can take it with a seq.
    # The rule is checked on the pure functions with a peer whose announcement lacks its key.
    peers = {
        1: _peer(1, k(9), LinkType.REMOTE, [k(9)], 1),  # parent
        2: _peer(2, k(1), LinkType.REMOTE, [k(9), k(1)], 2),  # Y: the entry's source
        3: _peer(3, k(3), LinkType.MULTICAST, [k(9)], 3),  # a direct link to K3, faster than Y
    }
    table = RoutingTable()
    table.install(Entry(k(3), 2, NONE_PORT, 0.0, R1, 1000))
    args = {
        "own": ME.public_key,
        "dest": k(2),
        "bootstrap": False,
        "wm": INITIAL_WATERMARK,
        "parent": 1,
        "root_key": k(9),
        "peers": peers,
        "table": table,
        "now": 1.0,
    }
    assert next_hop_reference(**args) == NextHop(3, wm(3, 1000))  # type: ignore[arg-type]
    assert SnekView().next_hop(**args) == NextHop(3, wm(3, 1000))  # type: ignore[arg-type]


def test_6_3_step8_returned_watermark_is_best_even_with_seq_0_discrepancy_6() -> None:
    b, p = under_parent([9, 3, 1])
    z = b.join(K[8], [ROOT])
    assert b.hop(k(2), wm=wm(4, 77)) == NextHop(p, wm(3))  # not the frame's (K4, 77)
    b.send(z, traffic_frame(k(2), k(8), watermark=wm(4, 77)))
    out = of_type(b.drain(), FrameType.TRAFFIC)
    assert [(port, f.watermark) for port, f in out] == [(p, wm(3))]  # the forwarder overwrites it


# ------------------------------------------------------------------ §4.8 worse-than


@pytest.mark.parametrize(
    ("x", "y", "worse"),
    [
        (wm(3, 5), wm(2, 9), True),  # higher key
        (wm(2, 5), wm(3, 0), False),  # lower key
        (wm(3, 5), wm(3, 9), True),  # same key, lower non-zero seq
        (wm(3, 9), wm(3, 5), False),
        (wm(3, 9), wm(3, 9), False),
        (wm(3, 0), wm(3, 9), False),  # seq 0 is never worse on seq grounds
        (wm(3, 9), wm(3, 0), False),
        (Watermark(FULL_MASK, 0), wm(9, 1), True),
        (wm(9, 1), Watermark(FULL_MASK, 0), False),
    ],
)
def test_4_8_worse_than(x: Watermark, y: Watermark, worse: bool) -> None:
    assert x.worse_than(y) is worse


def test_4_8_seq_0_next_hop_is_never_worse_on_seq_grounds() -> None:
    b, p = under_parent([9, 3, 1])
    z = b.join(K[8], [ROOT])
    b.send(z, traffic_frame(k(3), k(8), watermark=wm(3, 1000)))  # next hop: exact K3 via p, seq 0
    out = of_type(b.drain(), FrameType.TRAFFIC)
    assert [(port, f.watermark) for port, f in out] == [(p, wm(3))]


# ------------------------------------------------------------------ §6.4 bootstrap handling


def _assert_rejected(b: Bench, port: int, before: Entry | None, key: bytes) -> None:
    assert b.r.table.get(key) == before
    assert b.r.disconnects == [] and port in b.r.peers
    assert bootstraps_in(b.drain()) == []


def test_6_4_step1_malformed_payload_rejected_silently() -> None:
    b, _p, y = with_table()
    for junk in (
        b"",
        b"\x05",
        bootstrap_frame(K[2], 7, R1).payload + b"\x00",
        bootstrap_frame(K[2], 7, R1).payload[:-1],
    ):
        b.send(y, bootstrap_frame(K[2], 7, R1, payload=junk))
        _assert_rejected(b, y, None, k(2))


def test_6_4_step2_bad_signature_rejected() -> None:
    b, _p, y = with_table()
    b.send(y, bootstrap_frame(K[2], 7, R1, signer=K[4]))  # signed by someone else
    _assert_rejected(b, y, None, k(2))


@pytest.mark.parametrize("root", [Root(k(9), 2), Root(k(8), 1)])
def test_6_4_step3_root_mismatch_rejected(root: Root) -> None:
    b, _p, y = with_table()
    b.send(y, bootstrap_frame(K[2], 7, root))
    _assert_rejected(b, y, None, k(2))


@pytest.mark.parametrize("seq", [1000, 999])
def test_6_4_step4_replay_same_root_seq_not_higher_rejected(seq: int) -> None:
    b, _p, y = with_table()
    before = b.r.table.get(k(3))
    b.at(2.0).send(y, bootstrap_frame(K[3], seq, R1))
    _assert_rejected(b, y, before, k(3))
    assert b.r.table.get(k(3)).last_seen == 1.0  # type: ignore[union-attr]


def test_6_4_step4_expired_entry_not_yet_swept_still_counts() -> None:
    b, _p, y = with_table()
    before = b.r.table.get(k(3))
    b.at(10.5).at(11.0, timers=False).send(y, bootstrap_frame(K[3], 999, R1))  # 10 s old, not yet swept
    _assert_rejected(b, y, before, k(3))
    b.send(y, bootstrap_frame(K[3], 1001, R1))
    assert b.r.table.get(k(3)).last_seen == 11.0  # type: ignore[union-attr]


def test_6_4_step4_different_root_overwrites() -> None:
    b, p, y = with_table()
    b.at(2.0).announce(p, chain([ROOT], root_seq=2))  # our root becomes (ROOT, 2)
    assert b.r.root == Root(k(9), 2)
    b.at(3.0).send(y, bootstrap_frame(K[3], 500, Root(k(9), 2)))  # a LOWER seq, but a new root
    assert b.r.table.get(k(3)) == Entry(k(3), y, NONE_PORT, 3.0, Root(k(9), 2), 500)


def test_6_4_step5_install_fields_at_the_dead_end() -> None:
    b, _p = under_parent([9])
    y = b.join(K[1], [ROOT])
    b.at(1.5).send(y, bootstrap_frame(K[3], 1000, R1, watermark=wm(4, 42)))
    e = b.r.table.get(k(3))
    assert e == Entry(k(3), y, NONE_PORT, 1.5, R1, 1000)
    assert e.watermark == wm(3, 1000)  # (origin, bootstrap seq), not the header's (K4, 42): discrepancy #8
    assert bootstraps_in(b.drain()) == []  # dead end: not forwarded


def test_6_4_step5_install_fields_at_an_intermediate_hop() -> None:
    b, _p = under_parent([9])
    y = b.join(K[1], [ROOT])
    z = b.join(K[4], [ROOT])
    b.drain()
    b.at(1.5).send(y, bootstrap_frame(K[3], 1000, R1))
    assert b.r.table.get(k(3)) == Entry(k(3), y, z, 1.5, R1, 1000)
    out = bootstraps_in(b.drain())
    assert [(port, f.destination_key, f.watermark) for port, f in out] == [(z, k(3), wm(4))]
    assert out[0][1].payload == bootstrap_frame(K[3], 1000, R1).payload  # the signed payload is untouched


def test_6_4_step6_descending_updated_at_intermediate_hops_discrepancy_10() -> None:
    b, _p = under_parent([9])
    y = b.join(K[1], [ROOT])
    b.join(K[4], [ROOT])
    b.send(y, bootstrap_frame(K[3], 1000, R1))
    assert bootstraps_in(b.drain())  # forwarded on...
    assert b.r.descending is not None and b.r.descending.key == k(3)  # ...and still our descending


def test_6_4_step6_descending_accepts_refresh_and_closer_rejects_farther_while_valid() -> None:
    b, _p = under_parent([9])
    y = b.join(K[0], [ROOT])
    b.at(1.0).send(y, bootstrap_frame(K[2], 100, R1))
    assert b.r.descending.key == k(2)  # type: ignore[union-attr]
    b.at(2.0).send(y, bootstrap_frame(K[3], 100, R1))  # closer: Ordered(K2, K3, K5)
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    b.at(3.0).send(y, bootstrap_frame(K[2], 101, R1))  # farther, while K3's is valid
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    assert b.r.table.get(k(2)).seq == 101  # type: ignore[union-attr]  # the route is still installed
    b.at(4.0).send(y, bootstrap_frame(K[3], 101, R1))  # refresh from the same node
    assert (b.r.descending.key, b.r.descending.last_seen, b.r.descending.seq) == (k(3), 4.0, 101)  # type: ignore[union-attr]
    b.at(5.0).send(y, bootstrap_frame(K[7], 100, R1))  # above us: never descending
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    b.at(13.9)
    assert b.r.descending.key == k(3) and b.r.table.get(k(2)) is None  # type: ignore[union-attr]  # K2's expired
    b.at(14.0, timers=False)  # K3's entry is now 10 s old: expired, though not yet cleared
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    b.send(y, bootstrap_frame(K[2], 102, R1))  # farther, but the descending entry is expired: accept
    assert b.r.descending.key == k(2)  # type: ignore[union-attr]


def _bootstrap_times(sent: list[tuple[float, int, Frame]]) -> list[float]:
    return [t for t, _, f in sent if f.type == FrameType.BOOTSTRAP and f.destination_key == ME.public_key]


def test_6_4_step6_descending_set_or_changed_triggers_bootstrap_soon() -> None:
    b, _p = under_parent([9])
    y = b.join(K[0], [ROOT])
    assert _bootstrap_times(b.tick(0.0)) == [0.0]
    b.at(1.5).send(y, bootstrap_frame(K[3], 100, R1))  # descending set (was none)
    assert _bootstrap_times(b.tick(2.0)) == [2.0]  # not 5.0
    b.at(2.5).send(y, bootstrap_frame(K[3], 101, R1))  # a refresh: same key, no trigger
    assert _bootstrap_times(b.tick(6.9)) == []
    assert _bootstrap_times(b.tick(7.0)) == [7.0]  # the regular 5 s period
    b.at(7.5).send(y, bootstrap_frame(K[4], 100, R1))  # changed to a closer key
    assert _bootstrap_times(b.tick(8.0)) == [8.0]  # not 12.0


# ------------------------------------------------------------------ §6.7 maintenance


def test_6_7_entries_expire_at_10_s() -> None:
    b, _p, _y = with_table()  # installed at t=1.0
    b.tick(10.999)
    assert b.r.table.get(k(3)) is not None
    b.tick(11.0)
    assert b.r.table.get(k(3)) is None


def test_6_7_descending_cleared_on_expiry_with_bootstrap_soon() -> None:
    b, _p, _y = with_table()
    assert b.r.descending.key == k(3)  # type: ignore[union-attr]
    sent = b.tick(10.999)
    assert b.r.descending is not None
    assert _bootstrap_times(sent) == [2.0, 7.0]  # t=2: "soon" after the descending entry was set at t=1
    sent = b.tick(11.0)
    assert b.r.descending is None
    assert _bootstrap_times(sent) == [11.0]  # cleared at 11.0: "soon" (the period alone says 12.0)


def test_6_7_descending_cleared_on_root_change() -> None:
    b, p, _y = with_table()
    b.tick(2.0)
    b.at(2.5).announce(p, chain([ROOT], root_seq=2))  # newer root seq from the parent
    assert b.r.descending is not None  # cleared by maintenance, not on the spot
    sent = b.tick(3.0)
    assert b.r.descending is None
    assert b.r.table.get(k(3)) is not None  # the entry itself stays until it expires
    assert _bootstrap_times(sent) == [3.0]  # bootstrap soon (the period alone would say 6.0)


def test_6_7_bootstrap_every_5_s_only_when_not_root() -> None:
    b, _p = under_parent([9])
    sent = b.tick(30.0)
    assert _bootstrap_times(sent) == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
    root = Bench(ROOT)
    root.join(K[1], [])
    root.connect(K[2])
    assert root.r.parent is None
    assert bootstraps_in([(port, f) for _, port, f in root.tick(30.0)]) == []
