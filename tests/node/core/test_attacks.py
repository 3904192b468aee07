"""The adversary strategies of node.core.attacks and the key grinding of node.core.grind, sans-IO."""

from __future__ import annotations

import pytest

from node.core import wire
from node.core.attacks import STRATEGY_NAMES, make_strategy, parse_strategy_spec
from node.core.grind import GrindError, above_all, grind, near
from node.core.types import Announcement, FrameType, Root

from routerkit import Bench, bootstrap_frame, identities, traffic_frame

T, B, A = int(FrameType.TRAFFIC), int(FrameType.BOOTSTRAP), int(FrameType.TREE_ANNOUNCEMENT)


def test_greyhole_forwards_the_given_share_of_transit_traffic_deterministically() -> None:
    def pattern(seed: int) -> list[bool]:
        g = make_strategy("greyhole", {"forward": 0.3, "seed": seed})
        f = traffic_frame(b"d" * 32, b"s" * 32)
        return [g.swallow(b"p" * 32, f, b"o" * 32, 0.0) for _ in range(2000)]

    a = pattern(1)
    assert a == pattern(1) and a != pattern(2)
    assert 0.65 < sum(a) / len(a) < 0.75  # about 70 % swallowed
    g = make_strategy("greyhole", {"forward": 0.0})
    assert not g.swallow(b"p" * 32, traffic_frame(b"o" * 32, b"s" * 32), b"o" * 32, 0.0)  # its own: delivered
    assert not g.swallow(b"p" * 32, bootstrap_frame(identities(1)[0], 1, Root(b"r" * 32, 1)), b"o" * 32, 0.0)


def test_sybil_swallows_what_is_meant_for_the_victim_and_what_it_would_hand_to_it() -> None:
    me, victim, other = identities(3, "sybil")
    bench = Bench(me)
    pv, po = bench.join(victim), bench.connect(other)
    bench.drain()
    bench.r.set_attack(make_strategy("sybil", {"victim": victim.public_key.hex()}), bench.now)
    bench.send(po, traffic_frame(victim.public_key, other.public_key))
    bench.send(po, bootstrap_frame(victim, 5, bench.r.root))
    assert bench.r.counters[("frame_dropped", T, "adversary")] == 1
    assert bench.r.counters[("frame_dropped", B, "adversary")] == 1
    s = bench.r.attack
    sends = [(pv, traffic_frame(b"x" * 32, other.public_key)), (pv, wire.announcement_frame(
        Announcement(victim.public_key, 1))), (po, traffic_frame(b"x" * 32, b"y" * 32))]
    s.outgoing(sends, bench.r)  # toward the victim: only its Traffic is swallowed
    assert [(p, f.type) for p, f in sends] == [(pv, A), (po, T)]


def test_root_takeover_drop_withhold_and_rejoin() -> None:
    bench, _, ports = _bench_root()
    r = bench.r
    r.set_attack(make_strategy("root_takeover", {"mode": "drop"}), bench.now)
    bench.send(ports[0], traffic_frame(b"\x01" * 32, b"s" * 32))
    assert r.counters[("frame_dropped", T, "adversary")] == 1
    w = make_strategy("root_takeover", {"mode": "withhold", "period_s": 2})
    r.set_attack(w, bench.now)
    sends = [(ports[0], wire.announcement_frame(r.tree.current_announcement()))]
    w.outgoing(sends, r)
    assert sends == [] and w.next_deadline() == bench.now + 2
    assert [f.type for _, f in w.tick(bench.now + 2, r)] == [A]
    rj = make_strategy("root_takeover", {"mode": "rejoin", "period_s": 10})
    r.set_attack(rj, bench.now)
    seq = r.root.seq
    bench.tick(bench.now + 25)
    assert r.root.seq >= seq + 2 and rj.describe()["rejoins"] == 2


def _bench_root() -> tuple[Bench, list, list[int]]:
    ids = sorted(identities(3, "takeover"), key=lambda i: i.public_key)
    bench = Bench(ids[-1])  # the highest key: the root
    ports = [bench.connect(i) for i in ids[:-1]]
    bench.drain()
    assert r_is_root(bench)
    return bench, ids, ports


def r_is_root(bench: Bench) -> bool:
    return bench.r.parent is None


def test_floods_send_at_a_multiple_of_the_protocol_rate() -> None:
    me, top = sorted(identities(2, "flood"), key=lambda i: i.public_key)
    bench = Bench(me)
    bench.join(top)
    bench.drain()
    bench.r.set_attack(make_strategy("bootstrap_flood", {"multiple": 10}, timers=bench.r.t), bench.now)
    sent = [f for _, _, f in bench.tick(bench.now + 10) if f.type == B]
    assert 20 <= len(sent) <= 25  # 21 floods (every 0.5 s from 0 to 10 s) and the node's own
    seqs = [wire.signed_root(f.payload, me.public_key).seq for f in sent]
    assert len(set(seqs)) == len(seqs)  # each fresh (a flood ahead of the node's own by 1 ms): honest nodes accept each
    root = Bench(top)
    root.connect(me)
    root.drain()
    root.r.set_attack(make_strategy("announcement_flood", {"multiple": 10}, timers=root.r.t), root.now)
    anns = [f for _, _, f in root.tick(root.now + 5) if f.type == A]
    assert len(anns) >= 10 and root.r.root.seq >= 10


def test_replay_resends_captured_frames_out_of_order() -> None:
    me, a, b = identities(3, "replay")
    bench = Bench(me)
    pa, pb = bench.join(a), bench.connect(b)
    bench.drain()
    rp = make_strategy("replay", {"interval_s": 1, "seed": 3})
    bench.r.set_attack(rp, bench.now)
    for seq in range(1, 6):
        bench.send(pa, bootstrap_frame(b, seq, bench.r.root))
    out = [f for _, _, f in bench.tick(bench.now + 20) if f.type == B and f.destination_key == b.public_key]
    seqs = [wire.signed_root(f.payload, b.public_key).seq for f in out]
    assert len(seqs) >= 15 and seqs != sorted(seqs)


def test_forged_frames_are_rejected_and_counted_by_an_honest_node() -> None:
    adv, honest, top = sorted(identities(3, "forge"), key=lambda i: i.public_key)
    a = Bench(adv)
    a.join(top)
    pa = a.connect(honest)
    a.drain()
    a.r.set_attack(make_strategy("forge", {"rate_per_s": 2, "seed": 1}), a.now)
    forged = [(p, f) for _, p, f in a.tick(a.now + 1.6) if p == pa]
    assert [f.type for _, f in forged][:3] == [B, A, A]
    for kind, (_, frame) in zip(("bootstrap", "announcement", "coords"), forged[:3]):
        h = Bench(honest)
        h.join(top)
        port = h.join(adv, [top])
        h.send(port, frame)  # must not raise
        c = h.r.counters
        if kind == "bootstrap":
            assert c[("bootstrap_rejected", "bad_signature")] == 1 and port in h.r.peers
        elif kind == "announcement":
            assert c[("disconnect", "bad_signature")] == 1
        else:
            assert c[("disconnect", "announcement_port_zero")] == 1


@pytest.mark.parametrize(("strategy", "params", "err"), [
    ("greyhole", {"forward": 2}, "forward"), ("sybil", {}, "victim"), ("sybil", {"victim": "zz"}, "victim"),
    ("root_takeover", {"mode": "sulk"}, "mode"), ("bootstrap_flood", {"multiple": 0}, "multiple"),
    ("forge", {"kinds": "bootstrap+magic"}, "kinds"), ("forge", {"rate_per_s": "x"}, "rate_per_s"),
    ("greyhole", {"speed": 1}, "speed"), ("chaos", {}, "strategy"), ("replay", {"seed": 1.5}, "seed"),
])
def test_bad_parameters_name_the_field(strategy: str, params: dict, err: str) -> None:
    with pytest.raises(ValueError, match=err):
        make_strategy(strategy, params)


def test_spec_syntax() -> None:
    assert parse_strategy_spec("greyhole:forward=0.3, seed=2") == ("greyhole", {"forward": "0.3", "seed": "2"})
    assert parse_strategy_spec("none") == ("none", {})
    assert make_strategy("forge", {"kinds": "bootstrap+coords"}).params()["kinds"] == ["bootstrap", "coords"]
    assert "drop" in STRATEGY_NAMES
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_strategy_spec("greyhole:forward")


def test_none_makes_the_node_honest_again() -> None:
    me, a = identities(2, "none")
    bench = Bench(me)
    bench.join(a)
    bench.r.set_adversary({"traffic": 100})
    bench.r.set_attack(make_strategy("greyhole", {"forward": 0}), bench.now)
    bench.r.set_attack(make_strategy("none"), bench.now)
    assert bench.r.attack is None and bench.r.adversary is None


def test_grinding_is_seeded_bounded_and_counts_its_tries() -> None:
    honest = [i.public_key for i in identities(50, "grind")]
    victim = sorted(honest)[20]
    up = grind(7, "sybil-1", near(victim, honest, "above"))
    assert up == grind(7, "sybil-1", near(victim, honest, "above")) and up.tries >= 1
    assert victim < up.key < sorted(honest)[21]
    down = grind(7, "sybil-2", near(victim, honest, "below"))
    assert sorted(honest)[19] < down.key < victim
    top = grind(7, "root", above_all(honest))
    assert top.key > max(honest)
    with pytest.raises(GrindError, match="3 tries") as e:
        grind(7, "x", lambda k: False, max_tries=3)
    assert e.value.tries == 3
    with pytest.raises(ValueError, match="side"):
        near(victim, honest, "beside")
