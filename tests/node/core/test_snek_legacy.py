"""The older SNEK variant, one scenario per rule of PROTOCOL.md §7.3 (and §7.4 on the wire).

Every router state is reached by feeding really signed frames to a real ``Router(..., snek="legacy")``
(see routerkit.py). Keys are named by rank: ``K[0] < K[1] < ... < K[9]``; the router under test is
``ME = K[5]`` and the tree root is ``ROOT = K[9]``. The bench's tree (root first, our port to each peer):

* ROOT, our parent, on port 1: our coordinates are ``(1,)``;
* Y = K[1], a child of ROOT at ``(2,)``, on port 2;
* Z = K[7], a child of ROOT at ``(3,)``, on port 3;
* W = K[4], a child of ROOT at ``(4,)``, on port 4 (only where a test adds it).
"""

from __future__ import annotations

import random

import pytest
from routerkit import (
    Bench,
    Net,
    bootstrap_frame,
    chain,
    identities,
    legacy_ack_frame,
    legacy_bootstrap_frame,
    legacy_setup_frame,
    legacy_teardown_frame,
    of_type,
)

from node.core import wire
from node.core.crypto import verify
from node.core.router import Router
from node.core.snek import NONE_PORT, NextHop
from node.core.snek_legacy import LEGACY_EXPIRY_S, PathEntry, SnekLegacy
from node.core.types import INITIAL_WATERMARK, LOCAL_PORT, Frame, FrameType, LegacyFrameType, Root, Watermark
from node.core.variants import VARIANTS, VariantSpec

K = identities(10, "legacy")
ME, ROOT = K[5], K[9]
R1 = Root(K[9].public_key, 1)
BOOT, ACK, SETUP, TEARDOWN = (int(t) for t in LegacyFrameType)
PARENT, Y, Z, W = 1, 2, 3, 4
OUR_COORDS = (1,)


def k(i: int) -> bytes:
    return K[i].public_key


def pid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def bench(*, w: bool = False, z: bool = True, **kw: object) -> Bench:
    """ME under ROOT, with the children Y, Z (and W) of ROOT as peers; nothing sent yet."""
    b = Bench(ME, snek="legacy", **kw)  # type: ignore[arg-type]
    assert b.join(ROOT, ports=[1]) == PARENT
    assert b.join(K[1], [ROOT], ports=[2, 1]) == Y
    if z:
        assert b.join(K[7], [ROOT], ports=[3, 1]) == Z
    if w:
        assert b.join(K[4], [ROOT], ports=[4, 1]) == W
    assert b.r.parent == PARENT and b.r.coords == OUR_COORDS and b.r.root == R1
    b.drain()
    b.r.events.clear()
    return b


def snek(b: Bench) -> SnekLegacy:
    assert isinstance(b.r.snek, SnekLegacy)
    return b.r.snek


def sent_at(b: Bench, t: float, ftype: int) -> list[tuple[int, Frame]]:
    """What the timers sent of ``ftype`` up to ``t``."""
    return [(port, f) for _, port, f in b.tick(t) if f.type == ftype]


def teardowns(out: list[tuple[int, Frame]]) -> list[tuple[int, bytes, bytes]]:
    return [(port, f.destination_key, wire.decode_legacy_teardown_payload(f.payload)) for port, f in of_type(out, TEARDOWN)]


def desc_events(b: Bench) -> list[dict]:
    return [fields for kind, fields in b.r.events if kind == "descending_changed"]


def own_bootstrap(b: Bench, t: float = 0.0) -> bytes:
    """Run the maintenance tick at ``t``; the path ID of the one bootstrap it sent."""
    ((port, f),) = sent_at(b, t, BOOT)
    return wire.decode_legacy_bootstrap_payload(f.payload).path_id


def with_ascending(b: Bench, acker: int = 7, at: float = 0.5) -> bytes:
    """ME bootstraps at t=0 and accepts an ACK from K[acker] (a child of Z, or Z itself) at ``at``."""
    path_id = own_bootstrap(b)
    coords = (3,) if acker == 7 else (3, acker)
    b.at(at).send(Z, legacy_ack_frame(ME, K[acker], path_id, R1, dest_coords=OUR_COORDS, source_coords=coords))
    assert snek(b).ascending is not None and snek(b).ascending.origin == k(acker)
    b.drain()
    return path_id


def transit(b: Bench, low: int = 3, high: int = 7, n: int = 1, arrive: int = Y, coords: tuple[int, ...] = (3,)) -> PathEntry:
    """A setup for the path (K[low], pid(n)) towards K[high] at ``coords`` passes through ME."""
    b.send(arrive, legacy_setup_frame(K[low], K[high], pid(n), R1, dest_coords=coords))
    e = snek(b).table.get(k(low), pid(n))
    assert e is not None
    b.drain()
    return e


# ------------------------------------------------------------------ §7.4 on the wire


def test_7_4_variant_registration_capabilities_and_expiry_knob() -> None:
    v = VARIANTS["legacy"]
    assert (v.factory, v.capabilities, v.seeds) == (SnekLegacy, 0x8000003B, "002/003")
    r = Router(ME, 0.0, snek="legacy")
    assert type(r.snek) is SnekLegacy and r.snek.expiry_s == LEGACY_EXPIRY_S == 3600.0
    spec = VariantSpec.parse("legacy,entry_expiry=60")
    assert Router(ME, 0.0, **spec.router_options()).snek.expiry_s == 60.0  # type: ignore[attr-defined]
    assert VariantSpec.parse("snek").peering_refusal(VariantSpec.parse("legacy")) is not None


def test_7_4_received_type_2_bootstrap_is_dropped_and_counted() -> None:
    b = bench()
    b.send(Y, bootstrap_frame(K[3], 1000, R1))
    assert b.drain() == [] and b.r.disconnects == [] and Y in b.r.peers
    assert b.r.counters[("frame_dropped", 2, "legacy_mode")] == 1
    assert len(b.r.table) == 0 and b.r.descending is None


@pytest.mark.parametrize("broadcasts", [False, True])
def test_7_4_a_legacy_network_puts_only_types_0_1_3_and_e0_e3_on_the_wire(broadcasts: bool) -> None:
    """Never type 2. Wakeup broadcasts (type 4, §6.8) are the router's, not the variant's: the
    ``wakeup_broadcasts`` knob (on by default) decides whether a legacy network sends them too."""
    ids = identities(8, "legacy-wire")
    links = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (0, 4), (2, 6)]
    net = Net(ids, links, snek="legacy", broadcasts=broadcasts)
    net.run_until(20.0)
    for i, r in enumerate(net.routers):  # pings over SNEK between every pair (§8)
        for j in range(len(ids)):
            if i != j:
                r.ping.start(ids[j].public_key, net.now, mode="snek")
    net.pump()
    net.run_until(25.0)
    types = {int(f.type) for _, _, f in net.tap}
    assert types <= {0, 1, 3, BOOT, ACK, SETUP, TEARDOWN} | ({4} if broadcasts else set()) and 2 not in types
    assert {1, 3, BOOT, ACK, SETUP} <= types
    snek_traffic = [f for _, _, f in net.tap if f.type == FrameType.TRAFFIC and not f.destination_coords]
    assert snek_traffic and all(f.watermark == INITIAL_WATERMARK for f in snek_traffic)  # (FullMask, 0)
    results = [res for r in net.routers for res in r.ping.results]
    assert len(results) == 8 * 7 and all(res.received for res in results)


# ------------------------------------------------------------------ §7.3.1 maintenance and bootstrap


def test_7_3_1_root_nodes_never_bootstrap() -> None:
    b = Bench(ROOT, snek="legacy")
    b.join(K[1], [])  # a weaker root: we stay root
    b.connect(K[2])
    assert b.r.parent is None
    assert sent_at(b, 10.0, BOOT) == []


def test_7_3_1_without_an_ascending_path_bootstrap_every_tick_with_fresh_signed_path_ids() -> None:
    b = bench()
    boots = [(t, port, f) for t, port, f in b.tick(2.0) if f.type == BOOT]
    assert [(t, port) for t, port, _ in boots] == [(0.0, Z), (1.0, Z), (2.0, Z)]  # K7 is the lowest key above us
    ids = set()
    for _, _, f in boots:
        assert (f.destination_key, f.source_coords, f.hop_limit) == (ME.public_key, OUR_COORDS, 0)
        p = wire.decode_legacy_bootstrap_payload(f.payload)
        assert p.root == R1
        assert verify(ME.public_key, ME.public_key + p.path_id, p.source_sig)  # §7.2: path key ‖ path ID
        ids.add(p.path_id)
    assert len(ids) == 3
    assert b.r.counters[("bootstrap_sent",)] == 3 and len(b.r.table) == 0  # nothing installed by sending


def test_7_3_1_path_ids_are_reproducible_and_never_reused_across_a_full_reset() -> None:
    a, c = bench(), bench()
    first = [own_bootstrap(a, t) for t in (0.0, 1.0)]
    assert first == [own_bootstrap(c, t) for t in (0.0, 1.0)]  # a pure function of key, clock and counter
    for port in sorted(a.r.peers):
        a.r.remove_peer(port, a.now)  # the last peer goes: full reset (§3.7)
    a.join(ROOT, ports=[1])
    assert own_bootstrap(a, 1.0) not in first


def test_7_3_1_no_bootstrap_while_the_ascending_path_is_valid_under_our_root() -> None:
    b = bench()
    with_ascending(b)
    assert sent_at(b, 100.0, BOOT) == []


def test_7_3_1_root_change_rebootstraps_discrepancy_27() -> None:
    b = bench()
    with_ascending(b)
    b.at(10.5).announce(PARENT, chain([ROOT], [1], root_seq=2))  # our parent announces a newer root sequence
    assert b.r.root == Root(k(9), 2) and snek(b).ascending is not None  # the path itself stays
    assert [t for t, _, f in b.tick(12.0) if f.type == BOOT] == [11.0, 12.0]


def test_7_3_1_next_hop_best_port_starts_local_for_bootstraps_too_discrepancy_3() -> None:
    b = Bench(ME, snek="legacy")
    for d in (k(3), k(7), ME.public_key):
        assert b.hop(d, bootstrap=True) == NextHop(LOCAL_PORT, INITIAL_WATERMARK)
    assert b.hop(k(3)) == NextHop(LOCAL_PORT, INITIAL_WATERMARK)


def test_7_3_1_next_hop_has_no_watermark() -> None:
    b = bench()
    for w in (INITIAL_WATERMARK, Watermark(k(0), 7), Watermark(k(8), 0)):
        assert b.hop(k(8), wm=w) == NextHop(PARENT, INITIAL_WATERMARK)  # above us: towards the root
        assert b.hop(k(7), wm=w) == NextHop(Z, INITIAL_WATERMARK)  # a direct peer (step 5)


def test_7_3_1_own_bootstrap_heads_for_the_root_but_others_only_when_above_us_discrepancy_4() -> None:
    b = bench(z=False)  # no known key between us and the root
    assert b.hop(ME.public_key, bootstrap=True).port == PARENT
    assert b.hop(k(6), bootstrap=True).port == PARENT  # Ordered(K5, K6, K9): above us
    assert b.hop(k(3), bootstrap=True).port == LOCAL_PORT  # below us, nothing in (K3, K5): a dead end here
    b = bench()
    assert b.hop(ME.public_key, bootstrap=True).port == Z  # Ordered(K5, K7, K9): Z's key beats the root
    assert b.hop(k(6), bootstrap=True).port == Z


def test_7_3_1_table_loop_offers_path_keys_through_valid_remote_source_ports() -> None:
    b = bench()
    e = transit(b, low=3)  # (K3, 1): source Y, destination Z
    assert (e.path_key, e.origin, e.source, e.destination) == (k(3), k(3), Y, Z)
    assert b.hop(k(2)) == NextHop(Y, INITIAL_WATERMARK)  # Ordered(K2, K3, K5): through the source port
    assert b.hop(k(3)) == NextHop(Y, INITIAL_WATERMARK)  # exact match, traffic only
    assert b.hop(k(3), bootstrap=True).port == LOCAL_PORT  # never delivered to its own key
    assert b.hop(k(2), bootstrap=True).port == Y
    b.at(3600.0, timers=False)  # 1 h old: expired, not yet swept
    assert b.hop(k(2)).port == LOCAL_PORT


def test_7_3_1_table_loop_skips_entries_whose_source_port_is_down() -> None:
    b = bench()
    transit(b, low=3)
    # §0: a stopped peer is ignored at once. The router deletes its entries in the very call that stops it
    # (§3.7), so this state exists only inside remove_peer: build it by hand, as remove_peer's first step does.
    b.r.peers[Y].up = False
    b.r.snek.peers_changed()
    assert b.hop(k(2)).port == LOCAL_PORT


def test_7_3_1_bootstrap_forwarded_unchanged_towards_a_closer_key() -> None:
    b = bench(w=True)
    f = legacy_bootstrap_frame(K[3], pid(9), R1, (2, 7))
    b.send(Y, f)
    assert b.drain() == [(W, f)]  # K4 lies in (K3, K5): forwarded as it came, nothing installed
    assert len(b.r.table) == 0
    b.send(W, f)  # from W itself: the next hop is the arrival port
    assert b.drain() == [] and b.r.counters[("frame_dropped", BOOT, "loop")] == 1


def test_7_3_1_dead_end_acks_tree_routed_to_the_bootstraps_source_coords() -> None:
    b = bench()
    boot = legacy_bootstrap_frame(K[3], pid(9), R1, (2, 7))  # K3 sits below Y
    b.at(1.0).send(Y, boot)
    ((port, ack),) = b.drain()
    assert port == Y and ack.type == ACK  # tree next hop towards (2, 7)
    assert (ack.destination_coords, ack.source_coords) == ((2, 7), OUR_COORDS)
    assert (ack.destination_key, ack.source_key) == (k(3), ME.public_key)
    p = wire.decode_legacy_path_payload(ack.payload, ACK)
    ssig = wire.decode_legacy_bootstrap_payload(boot.payload).source_sig
    assert (p.path_id, p.root, p.source_sig) == (pid(9), R1, ssig)  # our root; the source sig copied
    assert verify(ME.public_key, ssig + k(3) + pid(9), p.dest_sig)  # §7.2: source sig ‖ path key ‖ path ID
    assert len(b.r.table) == 0 and b.r.counters[("bootstrap_ack_sent",)] == 1


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (legacy_bootstrap_frame(K[3], pid(9), R1, (2, 7), signer=K[4]), "bad_signature"),
        (legacy_bootstrap_frame(K[3], pid(9), Root(k(9), 2), (2, 7)), "root_mismatch"),
        (legacy_bootstrap_frame(K[3], pid(9), Root(k(8), 1), (2, 7)), "root_mismatch"),
    ],
)
def test_7_3_1_dead_end_drops_a_bad_source_sig_or_another_root_silently(frame: Frame, reason: str) -> None:
    b = bench()
    b.send(Y, frame)
    assert b.drain() == [] and b.r.disconnects == []
    assert b.r.counters[("bootstrap_rejected", reason)] == 1


def test_7_3_1_ack_is_only_forwarded_where_its_coords_are_not_ours() -> None:
    b = bench()
    path_id = own_bootstrap(b)
    ack = legacy_ack_frame(K[1], K[7], path_id, R1, dest_coords=(2,), source_coords=(3,))
    b.send(Z, ack)
    assert b.drain() == [(Y, ack)] and snek(b).ascending is None


def test_7_3_1_ack_accepted_without_ascending_when_the_source_key_is_above_us() -> None:
    b = bench()
    path_id = own_bootstrap(b)
    ack = legacy_ack_frame(ME, K[8], path_id, R1, dest_coords=OUR_COORDS, source_coords=(3, 6))
    b.at(0.5).send(Z, ack)
    ((port, setup),) = b.drain()
    assert port == Z and setup.type == SETUP  # tree-routed towards the acker's coordinates
    assert (setup.destination_key, setup.source_key, setup.destination_coords) == (k(8), ME.public_key, (3, 6))
    sp, ap = wire.decode_legacy_path_payload(setup.payload), wire.decode_legacy_path_payload(ack.payload)
    assert sp == ap  # path ID, our root, both signatures copied
    assert snek(b).ascending == PathEntry(ME.public_key, path_id, k(8), LOCAL_PORT, Z, 0.5, R1, 3600.0)
    assert snek(b).table.get(ME.public_key, path_id) is snek(b).ascending


def test_7_3_1_ack_accepted_when_source_key_between_us_and_ascending() -> None:
    b = bench()
    old = with_ascending(b, acker=8)  # ascending: K8, via Z
    b.at(1.0).send(Z, _ack(pid(2), acker=7))  # Ordered(K5, K7, K8)
    out = b.drain()
    assert [p for p, f in out if f.type == SETUP] == [Z]
    assert teardowns(out) == [(Z, ME.public_key, old)]  # first our previous ascending path, to its destination
    assert snek(b).ascending.origin == k(7) and snek(b).table.get(ME.public_key, old) is None  # type: ignore[union-attr]


def test_7_3_1_ack_same_ascending_node_with_a_new_path_id_replaces_it() -> None:
    b = bench()
    old = with_ascending(b, acker=7)
    b.at(1.0).send(Z, _ack(pid(2), acker=7))
    assert teardowns(b.drain()) == [(Z, ME.public_key, old)]
    assert snek(b).ascending.path_id == pid(2)  # type: ignore[union-attr]
    b.send(Z, _ack(pid(2), acker=7))  # the same path ID again
    assert b.drain() == [] and b.r.counters[("ack_rejected", "not_closer")] == 1


def _ack(path_id: bytes, *, acker: int = 7, root: Root = R1, coords: tuple[int, ...] = (3,), **signers: object) -> Frame:
    """An ACK for our path ``path_id`` from K[acker] at ``coords``, arriving where our coordinates are."""
    return legacy_ack_frame(ME, K[acker], path_id, root, dest_coords=OUR_COORDS, source_coords=coords, **signers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"source_signer": K[3]}, "bad_signature"),  # the source sig is not ours
        ({"dest_signer": K[3]}, "bad_signature"),  # the destination sig is not the acker's
        ({"acker": 5}, "from_self"),
        ({"root": Root(k(9), 2)}, "root_mismatch"),  # not our parent's last announcement
        ({"root": Root(k(8), 1)}, "root_mismatch"),
        ({"acker": 3}, "not_closer"),  # no ascending path, and K3 is below us
        ({"coords": OUR_COORDS}, "no_route"),  # the tree next hop towards the acker is local: abandon
    ],
)
def test_7_3_1_ack_rejected_without_any_teardown(kw: dict, reason: str) -> None:
    b = bench()
    path_id = own_bootstrap(b)
    b.send(Z, _ack(path_id, **kw))
    assert b.drain() == [] and snek(b).ascending is None and len(b.r.table) == 0
    assert b.r.counters[("ack_rejected", reason)] == 1


def test_7_3_1_ack_farther_than_the_ascending_node_is_dropped_silently() -> None:
    b = bench()
    with_ascending(b, acker=7)
    b.send(Z, _ack(pid(2), acker=8, coords=(3, 8)))
    assert b.drain() == [] and snek(b).ascending.origin == k(7)  # type: ignore[union-attr]
    assert b.r.counters[("ack_rejected", "not_closer")] == 1


def test_7_3_1_an_expired_ascending_path_counts_as_none_for_acks() -> None:
    b = bench()
    with_ascending(b, acker=7, at=0.5)
    b.at(3600.5, timers=False)  # expired, not yet torn down by maintenance
    b.send(Z, _ack(pid(2), acker=8, coords=(3, 8)))  # farther than K7, but K7's path has expired
    assert snek(b).ascending.origin == k(8)  # type: ignore[union-attr]


# ------------------------------------------------------------------ §7.3.2 path setup at each hop


def test_7_3_2_intermediate_hop_forwards_then_installs() -> None:
    b = bench()
    f = legacy_setup_frame(K[3], K[7], pid(1), R1, dest_coords=(3,))
    b.at(2.0).send(Y, f)
    assert b.drain() == [(Z, f)]  # forwarded untouched, tree-routed
    assert snek(b).table.get(k(3), pid(1)) == PathEntry(k(3), pid(1), k(3), Y, Z, 2.0, R1, 3600.0)
    assert b.r.descending is None and b.r.counters[("path_installed", "transit")] == 1


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (legacy_setup_frame(K[3], K[7], pid(1), R1, dest_coords=(3,), source_signer=K[2]), "bad_signature"),
        (legacy_setup_frame(K[3], K[7], pid(1), R1, dest_coords=(3,), dest_signer=K[2]), "bad_signature"),
        (legacy_setup_frame(K[3], K[7], pid(1), Root(k(9), 2), dest_coords=(3,)), "root_mismatch"),
        (legacy_setup_frame(K[3], K[8], pid(1), R1, dest_coords=OUR_COORDS), "no_route"),  # our coords, not our key
    ],
)
def test_7_3_2_rejected_setup_sends_a_teardown_back_to_the_arrival_port(frame: Frame, reason: str) -> None:
    b = bench()
    b.send(Y, frame)
    assert teardowns(b.drain()) == [(Y, k(3), pid(1))]  # a "rejected-path teardown": nothing installed here
    assert len(b.r.table) == 0 and b.r.counters[("setup_rejected", reason)] == 1


def test_7_3_2_duplicate_setup_tears_down_both_ways() -> None:
    b = bench(w=True)
    transit(b, low=3, n=1)  # source Y, destination Z
    b.send(Y, legacy_setup_frame(K[3], K[7], pid(1), R1, dest_coords=(3,)))  # again, on the source port
    assert sorted(teardowns(b.drain())) == [(Y, k(3), pid(1)), (Z, k(3), pid(1))]  # one each way, not two to Y
    assert snek(b).table.get(k(3), pid(1)) is None
    transit(b, low=3, n=2)
    b.send(W, legacy_setup_frame(K[3], K[7], pid(2), R1, dest_coords=(3,)))  # again, on a third port
    assert sorted(teardowns(b.drain())) == [(Y, k(3), pid(2)), (Z, k(3), pid(2)), (W, k(3), pid(2))]
    assert b.r.counters[("setup_rejected", "duplicate")] == 2


def test_7_3_2_endpoint_accepts_a_lower_key_as_descending() -> None:
    b = bench()
    b.at(3.0).send(Y, legacy_setup_frame(K[3], ME, pid(1), R1, dest_coords=OUR_COORDS))
    assert b.drain() == []
    d = b.r.descending
    assert d == PathEntry(k(3), pid(1), k(3), Y, NONE_PORT, 3.0, R1, 3600.0)
    assert (d.key, d.valid(3.0), d.expires_at) == (k(3), True, 3603.0)  # type: ignore[union-attr]
    assert desc_events(b) == [{"descending": k(3).hex(), "prev": None}]
    assert b.r.state(3.0)["descending"] == k(3).hex()


@pytest.mark.parametrize("low", [7, 5])
def test_7_3_2_endpoint_rejects_a_key_not_below_us(low: int) -> None:
    b = bench()
    b.send(Z, legacy_setup_frame(K[low], ME, pid(1), R1, dest_coords=OUR_COORDS))
    assert teardowns(b.drain()) == [(Z, k(low), pid(1))] and b.r.descending is None


def test_7_3_2_endpoint_replaces_descending_only_with_a_closer_key_or_a_new_path_of_the_same() -> None:
    b = bench()
    b.at(1.0).send(Y, legacy_setup_frame(K[3], ME, pid(1), R1, dest_coords=OUR_COORDS))
    b.drain()
    b.send(Y, legacy_setup_frame(K[2], ME, pid(2), R1, dest_coords=OUR_COORDS))  # farther: rejected
    assert teardowns(b.drain()) == [(Y, k(2), pid(2))] and b.r.descending.path_id == pid(1)  # type: ignore[union-attr]
    b.send(Y, legacy_setup_frame(K[4], ME, pid(3), R1, dest_coords=OUR_COORDS))  # closer: the old path goes
    assert teardowns(b.drain()) == [(Y, k(3), pid(1))]
    assert b.r.descending.key == k(4) and snek(b).table.get(k(3), pid(1)) is None  # type: ignore[union-attr]
    b.send(Z, legacy_setup_frame(K[4], ME, pid(4), R1, dest_coords=OUR_COORDS))  # same node, new path
    assert teardowns(b.drain()) == [(Y, k(4), pid(3))]
    assert (b.r.descending.key, b.r.descending.source) == (k(4), Z)  # type: ignore[union-attr]
    # one event per change of key, none for a new path to the same key (as the reference)
    assert [e["descending"] for e in desc_events(b)] == [k(3).hex(), k(4).hex()]


# ------------------------------------------------------------------ §7.3.4 teardown


@pytest.mark.parametrize(("arrive", "onward"), [(Y, Z), (Z, Y)])
def test_7_3_4_teardown_forwarded_out_of_the_other_port(arrive: int, onward: int) -> None:
    b = bench()
    transit(b, low=3)
    b.send(arrive, legacy_teardown_frame(k(3), pid(1)))
    assert teardowns(b.drain()) == [(onward, k(3), pid(1))]
    assert len(b.r.table) == 0


def test_7_3_4_teardown_on_foreign_port_dropped() -> None:
    b = bench()
    e = transit(b, low=3)
    b.send(PARENT, legacy_teardown_frame(k(3), pid(1)))
    assert b.drain() == [] and snek(b).table.get(k(3), pid(1)) is e
    assert b.r.counters[("frame_dropped", TEARDOWN, "foreign_port")] == 1


def test_7_3_4_unknown_path_teardown_dropped_and_not_forwarded() -> None:
    b = bench()
    transit(b, low=3)
    b.send(Y, legacy_teardown_frame(k(3), pid(2)))
    assert b.drain() == [] and len(b.r.table) == 1
    assert b.r.counters[("frame_dropped", TEARDOWN, "unknown_path")] == 1


def test_7_3_4_malformed_teardown_payload_dropped_without_disconnect() -> None:
    b = bench()
    b.send(Y, Frame(TEARDOWN, destination_key=k(3), payload=b"\x00" * 7))
    assert b.drain() == [] and b.r.disconnects == []
    assert b.r.counters[("frame_dropped", TEARDOWN, "malformed")] == 1


def test_7_3_4_descending_torn_down_from_its_source_port() -> None:
    b = bench()
    b.send(Y, legacy_setup_frame(K[3], ME, pid(1), R1, dest_coords=OUR_COORDS))
    b.send(Y, legacy_teardown_frame(k(3), pid(1)))
    assert b.drain() == [] and b.r.descending is None  # no destination port: not forwarded
    assert desc_events(b)[-1] == {"descending": None, "prev": k(3).hex()}


def test_7_3_4_ascending_torn_down_bootstraps_again_at_once() -> None:
    b = bench()
    path_id = with_ascending(b, at=0.5)
    b.at(5.25).send(Z, legacy_teardown_frame(ME.public_key, path_id))
    out = b.drain()
    assert snek(b).ascending is None and teardowns(out) == []  # the source is local: not forwarded
    assert [port for port, f in out if f.type == BOOT] == [Z]  # at 5.25, not at the next tick


def test_7_3_1_expired_ascending_and_descending_are_torn_down_after_one_hour() -> None:
    b = bench()
    path_id = with_ascending(b, at=0.5)
    b.at(0.5).send(Y, legacy_setup_frame(K[3], ME, pid(1), R1, dest_coords=OUR_COORDS))
    b.drain()
    assert [f for _, _, f in b.tick(3600.0) if f.type in (BOOT, TEARDOWN)] == []
    sent = [(port, f) for _, port, f in b.tick(3601.0)]
    assert sorted(teardowns(sent)) == [(Y, k(3), pid(1)), (Z, ME.public_key, path_id)]
    assert [port for port, f in sent if f.type == BOOT] == [Z]  # no ascending path any more
    assert snek(b).ascending is None and b.r.descending is None


def test_7_3_4_peer_removed_deletes_its_entries_and_tears_down_the_other_way() -> None:
    b = bench(w=True)
    transit(b, low=3, n=1)  # Y -> Z
    transit(b, low=4, n=2, arrive=W, coords=(2,))  # W -> Y
    b.send(Z, legacy_setup_frame(K[3], ME, pid(3), R1, dest_coords=OUR_COORDS))  # descending through Z
    b.drain()
    b.r.remove_peer(Z, b.now)
    assert teardowns(b.drain()) == [(Y, k(3), pid(1))]  # the descending entry has no other port
    assert [(e.path_key, e.path_id) for e in snek(b).table] == [(k(4), pid(2))]
    assert b.r.descending is None


# ------------------------------------------------------------------ §7 whole networks


def _check_snake(net: Net, alive: list[int]) -> None:
    keys = sorted(net.routers[i].key for i in alive)
    for i in alive:
        r = net.routers[i]
        pos = keys.index(r.key)
        assert r.root.key == keys[-1]
        assert (r.descending.key if r.descending else None) == (keys[pos - 1] if pos else None)
        asc = r.snek.ascending  # type: ignore[attr-defined]
        assert (asc.origin if asc else None) == (keys[pos + 1] if pos + 1 < len(keys) else None)


def test_7_small_networks_converge_to_the_snake_and_reconverge_without_their_root() -> None:
    rng = random.Random(7)
    ids = identities(14, "legacy-net")
    order = list(range(14))
    rng.shuffle(order)
    links = {tuple(sorted((order[i], order[rng.randrange(i)]))) for i in range(1, 14)}  # a random tree...
    links |= {tuple(sorted(rng.sample(range(14), 2))) for _ in range(6)}  # ...plus shortcuts
    net = Net(ids, sorted(links), snek="legacy")  # type: ignore[arg-type]
    net.run_until(30.0)
    _check_snake(net, list(range(14)))
    root = 13  # identities are sorted: the last is the highest key
    for a, port in [end for end in net.wires if end[0] == root]:
        net.cut(a, port)
    net.run_until(60.0)
    _check_snake(net, list(range(13)))
    for r in net.routers[:13]:
        r.ping.start(net.routers[0].key if r is not net.routers[0] else net.routers[12].key, net.now, mode="snek")
    net.pump()
    net.run_until(65.0)
    assert all(res.received for r in net.routers[:13] for res in r.ping.results)
