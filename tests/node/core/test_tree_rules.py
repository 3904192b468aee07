"""Spanning-tree rules, one scenario per rule of PROTOCOL.md §3.6, §3.7, §5.3-§5.6, §5.8.

Keys are named by rank (``K[0] < ... < K[9]``). In most scenarios the router
under test is ``ME = K[5]``, its parent is ``P = K[7]`` under the root
``R = K[8]``, ``S = K[3]`` is another peer that announced itself as root, and
``SR = K[9]`` is a root stronger than R.
"""

from __future__ import annotations

import pytest
from routerkit import (
    Bench,
    announcement,
    announcements_in,
    bootstrap_frame,
    chain,
    identities,
    traffic_frame,
    with_bad_signature,
)

from node.core.state import tree_distance
from node.core.types import LOCAL_PORT, Announcement, Frame, FrameType, LinkType, Root

K = identities(10)
ME, S, P, R, SR = K[5], K[3], K[7], K[8], K[9]


def k(i: int) -> bytes:
    return K[i].public_key


def summary(out: list[tuple[int, Frame]]) -> list[tuple[int, Root, list[bytes]]]:
    """Announcements in an outbox as (port, root, hop keys), signatures verified, sorted by port.

    Also checks that our own hop names the port the announcement went to.
    """
    res = []
    for port, ann in announcements_in(out):
        assert ann.hops[-1].key == ME.public_key and ann.hops[-1].port == port
        res.append((port, ann.root, [h.key for h in ann.hops]))
    return sorted(res, key=lambda x: x[0])


def timer_announcements(sent: list[tuple[float, int, Frame]]) -> list[tuple[int, Root, list[bytes]]]:
    return summary([(port, f) for _, port, f in sent])


def bootstrap_times(sent: list[tuple[float, int, Frame]]) -> list[float]:
    return [t for t, _, f in sent if f.type == FrameType.BOOTSTRAP and f.destination_key == ME.public_key]


def tree_bench() -> tuple[Bench, int, int]:
    """ME with parent P (path R -> P, port p) and S (announced itself as root, port s)."""
    b = Bench(ME)
    p = b.join(P, [R])
    s = b.join(S)
    assert b.r.parent == p and b.r.root == Root(k(8), 1) and b.r.tree.own_seq == 1
    b.drain()
    return b, p, s


def own_root_to(ports: list[int], seq: int) -> list[tuple[int, Root, list[bytes]]]:
    return [(port, Root(ME.public_key, seq), [ME.public_key]) for port in ports]


# ------------------------------------------------------------------ §3.6 greeting


def test_3_6_first_frame_is_own_root_announcement_when_root() -> None:
    b = Bench(ME)
    x = b.connect(P)
    out = b.drain()
    assert len(out) == 1 and out[0][1].type == FrameType.TREE_ANNOUNCEMENT
    assert summary(out) == own_root_to([x], b.r.tree.own_seq)


def test_3_6_first_frame_is_parents_announcement_signed_for_the_new_port() -> None:
    b, _p, _s = tree_bench()
    n = b.connect(K[1])
    out = b.drain()
    assert len(out) == 1
    assert summary(out) == [(n, Root(k(8), 1), [k(8), k(7), ME.public_key])]


# ------------------------------------------------------------------ §5.2 originating announcements


def test_5_2_root_reannounces_every_30_min_with_the_next_seq() -> None:
    b = Bench(ME)
    x = b.join(S)  # a weaker root: we stay root
    b.drain()
    assert timer_announcements(b.tick(1799.0)) == []
    assert timer_announcements(b.tick(1800.0)) == own_root_to([x], 2)


def test_5_2_non_root_never_bumps_its_own_seq() -> None:
    b, _, _ = tree_bench()
    assert timer_announcements(b.tick(3600.0)) == [] and b.r.tree.own_seq == 1


def test_5_6_becoming_root_restarts_the_30_min_timer() -> None:
    b, p, s = tree_bench()
    b.at(100.0).r.remove_peer(p, b.now)  # no alternative: become root, seq 2
    assert summary(b.drain()) == own_root_to([s], 2)
    assert timer_announcements(b.tick(1899.0)) == []  # not at 1800
    assert timer_announcements(b.tick(1900.0)) == own_root_to([s], 3)


# ------------------------------------------------------------------ §5.3 receive


SANITY_CASES = {
    "no_hops": lambda: Announcement(R.public_key, 1, ()),
    "first_hop_not_root": lambda: announcement(R.public_key, 1, [(K[6], 1), (P, 1)]),
    "port_zero_first_hop": lambda: chain([R, P], [0, 1]),
    "port_zero_last_hop": lambda: chain([R, P], [1, 0]),
    "last_hop_not_peer": lambda: chain([R, K[6]]),
    "duplicate_key": lambda: chain([R, P, K[6], P]),
    "duplicate_root_key": lambda: chain([R, K[6], R, P]),
}


@pytest.mark.parametrize("case", sorted(SANITY_CASES))
def test_5_3_step2_sanity_check_failure_disconnects(case: str) -> None:
    b = Bench(ME)
    s = b.join(S)
    x = b.connect(P)
    b.announce(x, SANITY_CASES[case]())
    assert [port for port, _ in b.r.disconnects] == [x]
    assert x not in b.r.peers and s in b.r.peers
    assert b.r.parent is None and b.r.root == Root(ME.public_key, 1)  # the (stronger) root was not adopted


@pytest.mark.parametrize("hop", [0, 1, 2])
def test_5_3_step1_bad_signature_disconnects(hop: int) -> None:
    b = Bench(ME)
    x = b.connect(P)
    b.announce(x, with_bad_signature(chain([R, K[6], P]), hop))
    assert [port for port, _ in b.r.disconnects] == [x] and x not in b.r.peers
    assert b.r.parent is None


KNOWN_PREFIX_CASES = {
    "bad_last_signature": lambda: with_bad_signature(chain([R, P, K[6]]), 2),
    "port_zero_last_hop": lambda: chain([R, P, K[6]], [1, 1, 0]),
    "last_hop_not_peer": lambda: chain([R, P, K[4]]),
    "duplicate_key": lambda: chain([R, K[6], P, K[6]]),
}


@pytest.mark.parametrize("case", sorted(KNOWN_PREFIX_CASES))
def test_5_3_checks_hold_when_the_prefix_was_already_verified(case: str) -> None:
    # The router may parse only the last hop of an announcement whose prefix it already
    # verified (here: the parent's own announcement). The checks must not change.
    b = Bench(ME)
    p = b.join(P, [R])
    b.join(K[6], [R, P])  # valid announcements from other peers: their prefixes are now known
    b.join(P, [R, K[6]])  # [R, K6, P]: the prefix of the duplicate-key case
    assert b.r.disconnects == [] and b.r.parent == p
    x = b.connect(K[6])
    b.announce(x, KNOWN_PREFIX_CASES[case]())
    assert [port for port, _ in b.r.disconnects] == [x] and x not in b.r.peers and b.r.parent == p


def test_5_3_step3_replay_lower_seq_same_root_disconnects() -> None:
    b, _p, s = tree_bench()
    b.announce(s, chain([R, S], root_seq=3))
    b.announce(s, chain([R, S], root_seq=2))
    assert [port for port, _ in b.r.disconnects] == [s] and s not in b.r.peers


def test_5_3_step3_equal_seq_and_other_roots_are_not_replays() -> None:
    b, _p, s = tree_bench()
    b.announce(s, chain([R, S], root_seq=3))
    b.announce(s, chain([R, S], root_seq=3))  # equal: allowed
    b.announce(s, chain([K[4], S], root_seq=1))  # lower seq, but another root key
    assert b.r.disconnects == [] and b.r.peers[s].root == Root(k(4), 1)


def test_5_3_step6_stored_while_waiting_but_not_acted_on() -> None:
    b, p, s = tree_bench()
    b.at(1.0).announce(p, chain([R, P]))  # a repeat from the parent: root with hold
    assert b.r.tree.waiting and b.r.parent is None
    b.drain()
    b.at(1.2).announce(s, chain([SR, S]))  # a stronger root, while waiting
    assert b.r.peers[s].root == Root(k(9), 1)  # stored...
    assert b.r.parent is None and summary(b.drain()) == []  # ...but not adopted, nothing sent
    t = b.connect(K[1])
    b.drain()
    b.announce(t, chain([K[1]]))  # a first announcement while waiting: only §5.3 step 4's broadcast
    assert [(port, f.type) for port, f in b.drain()] == [(t, FrameType.WAKEUP_BROADCAST)]
    b.at(2.0)  # the hold ends: parent selection finds the stored announcement
    assert not b.r.tree.waiting and b.r.parent == s and b.r.root == Root(k(9), 1)


# ------------------------------------------------------------------ §5.4 decision table: P is the parent


def test_5_4_parent_loop_becomes_root_with_hold() -> None:
    b, p, s = tree_bench()
    b.announce(p, chain([R, ME, P], root_seq=2))  # a newer seq, but through us: the loop row wins
    assert b.r.parent is None and b.r.tree.waiting and b.r.tree.own_seq == 2
    assert summary(b.drain()) == own_root_to([p, s], 2)


def test_5_4_parent_weaker_root_becomes_root_with_hold() -> None:
    b, p, s = tree_bench()
    b.announce(p, chain([K[6], P]))
    assert b.r.parent is None and b.r.tree.waiting and b.r.tree.own_seq == 2
    assert summary(b.drain()) == own_root_to([p, s], 2)


def test_5_4_parent_repeat_same_seq_becomes_root_with_hold() -> None:
    b, p, s = tree_bench()
    b.announce(p, chain([R, P]))
    assert b.r.parent is None and b.r.tree.waiting and b.r.tree.own_seq == 2
    assert summary(b.drain()) == own_root_to([p, s], 2)


def test_5_4_parent_stronger_root_accepted_and_sent_to_all_including_parent() -> None:
    b, p, s = tree_bench()
    b.announce(p, chain([SR, P]))
    assert b.r.parent == p and not b.r.tree.waiting and b.r.root == Root(k(9), 1)
    via_p = [k(9), k(7), ME.public_key]
    assert summary(b.drain()) == [(p, Root(k(9), 1), via_p), (s, Root(k(9), 1), via_p)]


def test_5_4_parent_newer_seq_accepted_and_sent_to_all() -> None:
    b, p, s = tree_bench()
    b.announce(p, chain([R, P], root_seq=2))
    assert b.r.parent == p and not b.r.tree.waiting and b.r.root == Root(k(8), 2)
    via_p = [k(8), k(7), ME.public_key]
    assert summary(b.drain()) == [(p, Root(k(8), 2), via_p), (s, Root(k(8), 2), via_p)]
    # The table's last parent row ("otherwise: nothing") would be a lower seq of the same root,
    # which §5.3 step 3 already rejects as a replay (test_5_3_step3_replay_...).


# ------------------------------------------------------------------ §5.4 decision table: P is not the parent


def test_5_4_non_parent_loop_does_nothing() -> None:
    b, p, s = tree_bench()
    b.announce(s, chain([SR, ME, S]))  # stronger root, but through us
    assert b.r.parent == p and b.r.root == Root(k(8), 1) and summary(b.drain()) == []
    assert b.r.peers[s].root == Root(k(9), 1)  # stored all the same


def test_5_4_non_parent_stronger_root_adopted_and_sent_to_all() -> None:
    b, p, s = tree_bench()
    b.announce(s, chain([SR, S]))
    assert b.r.parent == s and b.r.root == Root(k(9), 1)
    via_s = [k(9), k(3), ME.public_key]
    assert summary(b.drain()) == [(p, Root(k(9), 1), via_s), (s, Root(k(9), 1), via_s)]


def test_5_4_non_parent_weaker_not_first_sends_last_to_that_peer_only() -> None:
    b, p, s = tree_bench()  # S's first announcement was [S]
    b.announce(s, chain([S], root_seq=2))
    assert summary(b.drain()) == [(s, Root(k(8), 1), [k(8), k(7), ME.public_key])]
    assert b.r.parent == p


def test_5_4_non_parent_weaker_first_sends_no_announcement() -> None:
    b, p, _s = tree_bench()
    t = b.connect(K[2])
    b.drain()
    b.announce(t, chain([K[2]]))
    assert summary(b.drain()) == [] and b.r.parent == p


def test_5_4_non_parent_equal_runs_parent_selection_unchanged() -> None:
    b, p, s = tree_bench()
    assert bootstrap_times(b.tick(0.0)) == [0.0]
    b.at(1.5).announce(s, chain([R, S]))  # same root and seq as the parent's, received later
    assert b.r.parent == p and summary(b.drain()) == []
    assert bootstrap_times(b.tick(4.9)) == []  # no "bootstrap soon"


def test_5_4_non_parent_equal_runs_parent_selection_changed_bootstrap_soon() -> None:
    b, p, s = tree_bench()
    assert bootstrap_times(b.tick(0.0)) == [0.0]
    b.at(1.5).announce(s, chain([R, S], root_seq=2))  # same root key, newer seq
    assert b.r.parent == s and b.r.root == Root(k(8), 2)
    via_s = [k(8), k(3), ME.public_key]
    assert summary(b.drain()) == [(p, Root(k(8), 2), via_s), (s, Root(k(8), 2), via_s)]
    sent = b.tick(2.0)
    assert bootstrap_times(sent) == [2.0]  # "bootstrap soon" (the period alone says 5.0)
    # ...on to P, not the new parent: K7 (P) is the closest key above ours (§6.3 step 4)
    assert [port for _, port, f in sent if f.type == FrameType.BOOTSTRAP] == [p]


# ------------------------------------------------------------------ §5.5 parent selection (run by losing the parent)


def losing_parent(anns: list[tuple[int, list[int], int]], order: list[int] | None = None) -> tuple[Bench, list[int]]:
    """ME under K9 (port 1) plus peers announcing ``(peer index, path above, root seq)``; then K9 goes away.

    ``order`` gives the announcement order as indexes into ``anns`` (default: as listed).
    Returns the bench and the peers' ports.
    """
    b = Bench(ME)
    root = b.join(K[9])
    ports = [b.connect(K[i]) for i, _, _ in anns]
    for j in order or range(len(anns)):
        i, above, seq = anns[j]
        b.announce(ports[j], chain([*(K[a] for a in above), K[i]], root_seq=seq))
    assert b.r.parent == root
    b.at(1.0).r.remove_peer(root, b.now)
    return b, ports


def test_5_5_higher_root_key_wins() -> None:
    b, (_a, c, _d) = losing_parent([(2, [7], 1), (3, [8], 1), (4, [6], 1)])
    assert b.r.parent == c and b.r.root == Root(k(8), 1)


def test_5_5_higher_root_seq_wins() -> None:
    b, (_a, c, _d) = losing_parent([(2, [8], 3), (3, [8], 5), (4, [8], 4)])
    assert b.r.parent == c and b.r.root == Root(k(8), 5)


def test_5_5_lower_receive_order_wins() -> None:
    b, (_a, _c, d) = losing_parent([(2, [8], 1), (3, [8], 1), (4, [8], 1)], order=[2, 0, 1])
    assert b.r.parent == d  # announced first, though on the highest port


def test_5_5_skips_loops() -> None:
    b = Bench(ME)
    root = b.join(K[9])
    a = b.connect(K[2])
    b.announce(a, chain([K[8], ME, K[2]]))  # the stronger candidate, but through us
    c = b.join(K[3], [K[7]])
    b.r.remove_peer(root, b.now)
    assert b.r.parent == c and b.r.root == Root(k(7), 1)


@pytest.mark.parametrize(("lost_at", "winner"), [(2699.0, "old"), (2701.0, "fresh")])
def test_5_5_skips_announcements_older_than_45_min(lost_at: float, winner: str) -> None:
    b = Bench(ME)
    root = b.join(K[9])
    old = b.join(K[2], [K[8]])  # t=0, the stronger candidate
    b.at(2000.0)
    fresh = b.join(K[3], [K[7]])
    b.at(lost_at).r.remove_peer(root, b.now)
    assert b.r.parent == {"old": old, "fresh": fresh}[winner]


# ------------------------------------------------------------------ §5.6 hold


def test_5_6_hold_lasts_1_s_then_reselects_and_bootstraps_soon() -> None:
    b, p, s = tree_bench()
    q = b.join(K[4], [R])  # same root as the parent's, received later: P stays the parent
    assert b.r.parent == p
    b.tick(10.5)
    b.announce(p, chain([K[6], P]))  # bad news from the parent
    assert b.r.tree.waiting and b.r.parent is None
    sent = b.tick(11.49)
    assert b.r.tree.waiting and b.r.parent is None and timer_announcements(sent) == []
    sent = b.tick(11.5)
    assert not b.r.tree.waiting and b.r.parent == q and b.r.root == Root(k(8), 1)  # R via Q beats K6 via P
    via_q = [k(8), k(4), ME.public_key]
    assert timer_announcements(sent) == [(port, Root(k(8), 1), via_q) for port in (p, s, q)]
    assert bootstrap_times(b.tick(12.0)) == [12.0]  # "soon": the last one was at 10.0, the period says 15.0


# ------------------------------------------------------------------ §3.7 disconnects


def test_3_7_step1_frames_queued_for_the_peer_are_dropped() -> None:
    b, p, s = tree_bench()
    b.r.send_traffic(k(1), b"x", b.now)  # S (K3) is the closest key above K1
    b.r.send_traffic(k(6), b"y", b.now)  # P (K7) is the closest key above K6
    assert sorted(port for port, _ in b.r.outbox) == [p, s]
    b.r.remove_peer(s, b.now)
    assert [port for port, _ in b.r.outbox] == [p]


def test_3_7_parent_lost_with_alternative_reparents_and_bootstraps_soon() -> None:
    b, p, s = tree_bench()
    q = b.join(K[4], [R])
    b.drain()
    b.tick(0.0)
    b.at(1.5).r.remove_peer(p, b.now)
    assert b.r.parent == q and b.r.root == Root(k(8), 1)
    via_q = [k(8), k(4), ME.public_key]
    assert summary(b.drain()) == [(s, Root(k(8), 1), via_q), (q, Root(k(8), 1), via_q)]
    assert bootstrap_times(b.tick(2.0)) == [2.0]
    assert b.connect(K[1]) == p  # §3.7 step 7: the port is free again (lowest free port)


def test_3_7_parent_lost_without_alternative_becomes_root() -> None:
    b, p, s = tree_bench()
    b.r.remove_peer(p, b.now)
    assert b.r.parent is None and b.r.tree.own_seq == 2
    assert summary(b.drain()) == own_root_to([s], 2)


def test_3_7_last_peer_gone_full_reset_keeps_own_seq() -> None:
    b = Bench(ME)
    b.tick(3600.0)  # tree maintenance while root: t=0 -> 1, 1800 -> 2, 3600 -> 3
    assert b.r.tree.own_seq == 3
    p = b.join(P, [R])
    b.send(p, bootstrap_frame(K[3], 10, Root(k(8), 1)))
    assert b.r.table.get(k(3)) is not None and b.r.descending is not None
    b.at(3601.0).r.remove_peer(p, b.now)
    assert (b.r.parent, b.r.descending, len(b.r.table), b.r.tree.waiting) == (None, None, 0, False)
    assert b.r.tree.own_seq == 4 and b.r.root == Root(ME.public_key, 4)  # kept, then bumped by start-up maintenance
    assert b.r.next_deadline() == b.now  # SNEK maintenance restarts at once, as at start-up
    x = b.join(K[6], [R])
    assert b.r.peers[x].order == 1  # the receive order counter restarted from 0


# ------------------------------------------------------------------ §5.8 tree distance and next hop


def test_5_8_distance_example() -> None:
    a, c = (1, 3, 5, 3, 4), (1, 3, 5, 7, 6, 1)
    assert tree_distance(a, c) == tree_distance(c, a) == 5
    assert tree_distance(a, a) == 0 and tree_distance((), (2, 3)) == 2


def siblings(
    link_a: int = LinkType.REMOTE, link_c: int = LinkType.REMOTE, c_first: bool = False, c_path: list[int] | None = None
) -> tuple[Bench, int, int, int]:
    """ME at (1, 1) under X = K6 (port x) under ROOT K9; A = K2 at (2,) and C = K3 at (3,) are R's children."""
    b = Bench(ME)
    x = b.join(K[6], [K[9]], ports=[1, 1])
    a, c = b.connect(K[2], link_a), b.connect(K[3], link_c)
    ann_a = chain([K[9], K[2]], [2, 1])
    ann_c = chain([K[i] for i in c_path] + [K[3]], [4, 1]) if c_path else chain([K[9], K[3]], [3, 1])
    for port, ann in [(c, ann_c), (a, ann_a)] if c_first else [(a, ann_a), (c, ann_c)]:
        b.announce(port, ann)
    assert b.r.coords == (1, 1) and b.r.parent == x
    b.drain()
    return b, x, a, c


def test_5_8_next_hop_never_to_a_peer_not_strictly_closer() -> None:
    b = Bench(ME)
    p = b.join(K[9], ports=[1])
    a = b.join(K[2], [K[9]], ports=[2, 1])
    b.join(K[3], [K[9]], ports=[3, 1])
    assert b.r.coords == (1,)
    assert b.r.tree.next_hop((4,), p) is None  # A and C are 2 away, like us
    assert b.r.tree.next_hop((4,), LOCAL_PORT) == p
    assert b.r.tree.next_hop((2, 7), p) == a
    assert b.r.tree.next_hop((1,), p) == LOCAL_PORT
    b.drain()
    b.send(p, traffic_frame(k(0), k(8), dest_coords=(4,)))
    # not tree-forwarded to A or C: SNEK-routed instead, to A (K2 is the closest key above K0)
    assert [(port, f.destination_coords) for port, f in b.drain()] == [(a, ())]


def test_5_8_tie_break_lower_link_type() -> None:
    b, x, _a, c = siblings(link_a=LinkType.REMOTE, link_c=LinkType.MULTICAST)
    assert b.r.tree.next_hop((4, 9), x) == c  # A and C are both 3 away (we are 4)


def test_5_8_tie_break_lower_receive_order() -> None:
    b, x, a, c = siblings(c_first=True)
    assert a < c and b.r.tree.next_hop((4, 9), x) == c
    b, x, a, c = siblings(c_first=False)
    assert b.r.tree.next_hop((4, 9), x) == a


def test_5_8_peer_with_another_root_is_skipped() -> None:
    b, x, a, c = siblings(c_path=[4])  # C announces root K4, coords (4,): closest, but another root
    assert b.r.peers[c].coords == (4,)
    assert b.r.tree.next_hop((4, 9), x) == a
