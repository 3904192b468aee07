"""The transit fast path (``Router.bytes_received``) gives byte for byte what the full path gives,
and the router's transit cache is emptied by every kind of state change (PROTOCOL.md §6.5).

Two routers with the same identity get the same frames from the same peers: one as bytes through
``bytes_received`` (cache on), one decoded through ``frame_received`` (no cache). Every send, delivery,
event and counter must be identical, in order. Frames are really signed, so the checks run for real.
"""

from __future__ import annotations

import random

import pytest

from node.core import wire
from node.core.forward import splice_watermark, transit_key
from node.core.router import Router
from node.core.state import Encoded, frame_bytes
from node.core.types import INITIAL_WATERMARK, Announcement, Frame, FrameType, Watermark

from routerkit import identities

IDS = identities(6, "transit")
ROOT, B = IDS[-1], IDS[2]  # B is the router under test; the others are its peers (ROOT the strongest)
PEERS = [IDS[0], IDS[1], IDS[3], IDS[4], ROOT]
T0 = 100.0


def _announcement_via(ident, root_port: int, root=ROOT, seq: int = 1) -> bytes:
    """``root``'s announcement as ``ident`` relays it to B (root -> ident -> B), signed for real."""
    ann = wire.sign_announcement_for_port(Announcement(root.public_key, seq, ()), root, 3 if ident is root else root_port)
    if ident is not root:
        ann = wire.sign_announcement_for_port(ann, ident, 3)
    return wire.encode_frame(wire.announcement_frame(ann))


def _bootstrap(origin, seq: int) -> bytes:
    payload = wire.make_signed_root_payload(origin, seq, ROOT.public_key, 1)
    return wire.encode_frame(Frame(FrameType.BOOTSTRAP, destination_key=origin.public_key, watermark=INITIAL_WATERMARK,
                                   payload=wire.encode_signed_root_payload(payload)))  # fmt: skip


def _traffic(dest: bytes, src: bytes, payload: bytes = b"x" * 40, **kw) -> bytes:
    return wire.encode_frame(Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dest, source_key=src,
                                   payload=payload, **kw))  # fmt: skip


def _router(now: float = T0, **kw) -> tuple[Router, list[int]]:
    """B peered with every peer, ROOT's tree announced through each, and a bootstrap from each."""
    r = Router(B, now, **kw)
    ports = []
    for k, ident in enumerate(PEERS):
        port = r.add_peer(ident.public_key, 3, now)
        assert port is not None
        ports.append(port)
        r.bytes_received(port, [(1, _announcement_via(ident, 10 + k))], now)
        r.bytes_received(port, [(2, _bootstrap(ident, 1_700_000_000_000))], now)
    r.drain()
    return r, ports


def _sent(r: Router) -> list[tuple[int, bytes]]:
    return [(port, frame_bytes(item)) for port, item in r.drain().sends]


def _random_traffic(rng: random.Random, coords: list[tuple[int, ...]]) -> bytes:
    dest = rng.choice([*(i.public_key for i in IDS), rng.randbytes(32), B.public_key])
    src = rng.choice([i.public_key for i in IDS] + [rng.randbytes(32)])
    payload = rng.choice([b"x" * rng.randint(0, 300), wire.encode_ping(0, 1, src, dest), wire.encode_ping(1, 2, dest, src)])
    if rng.random() < 0.3 and coords:
        dc = rng.choice(coords + [(1, 2, 3), (200, 1), ()])
        return _traffic(dest, src, payload, destination_coords=dc, source_coords=rng.choice(coords))
    wm = rng.choice([INITIAL_WATERMARK, Watermark(rng.choice(IDS).public_key, rng.choice([0, 5, 300, 1_700_000_000_123]))])
    return _traffic(dest, src, payload, source_coords=rng.choice(coords + [(), (300, 2)]), watermark=wm)


@pytest.mark.parametrize("seed", [1234, 7, 99])
def test_fast_path_matches_the_full_path_byte_for_byte(seed: int) -> None:
    (fast, ports), (slow, _) = _router(), _router()
    assert fast.state() == slow.state()
    coords = [tuple(p["coords"]) for p in fast.state()["peers"]]
    rng = random.Random(seed)
    templates = [_random_traffic(rng, coords) for _ in range(40)]  # recurring flows, so the cache gets hits
    now = T0
    seen: dict[str, list] = {"fast": [], "slow": []}
    for i in range(300):
        batch = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.005:  # a fresh bootstrap now and then changes the routing table
                batch.append((2, _bootstrap(rng.choice(PEERS), 1_700_000_000_000 + rng.randint(1, 10**6))))
            elif rng.random() < 0.8:
                batch.append((3, rng.choice(templates)))
            else:
                batch.append((3, _random_traffic(rng, coords)))
        port = rng.choice(ports)
        if i >= 200:  # the last 100 batches span 20 s: timers run and routes expire on the way
            now += 0.2
        for name, r in (("fast", fast), ("slow", slow)):
            if now >= r.next_deadline():
                r.handle_timer(now)
            if name == "fast":
                r.bytes_received(port, batch, now)
            else:
                for _t, raw in batch:
                    r.frame_received(port, wire.decode_frame(raw), now)
            out = r.drain()
            seen[name].append(([(p, frame_bytes(f)) for p, f in out.sends], list(out.delivered), list(out.events)))
    assert fast.fast_forwards > 30, fast.fast_forwards  # the cache was really used
    assert slow.fast_forwards == 0
    assert seen["fast"] == seen["slow"]
    assert sum(len(s) for s, _, _ in seen["fast"]) > 500
    assert fast.counters == slow.counters


def test_transit_key_and_splice() -> None:
    src, dst = IDS[0].public_key, IDS[4].public_key
    snek = _traffic(dst, src, b"hello", source_coords=(1, 2), watermark=Watermark(IDS[3].public_key, 7))
    _key, ws, we, d, s = transit_key(snek, B.public_key)
    assert (d, s) == (dst, src) and snek[ws:we] == IDS[3].public_key + b"\x07"
    assert transit_key(snek, dst) is None  # addressed to us: full path
    longer = IDS[1].public_key + wire.encode_varu64(1_700_000_000_000)
    out = splice_watermark(snek, ws, we, longer)
    assert wire.decode_frame(out).watermark == Watermark(IDS[1].public_key, 1_700_000_000_000)
    assert wire.decode_frame(out).payload == b"hello"
    ping = _traffic(dst, src, wire.encode_ping(0, 1, src, dst))
    assert transit_key(ping, B.public_key) is None  # pings count hops on the way
    odd = bytearray(snek)
    odd[4] = 1  # a non-zero version byte: the encoder would rewrite it
    assert transit_key(bytes(odd), B.public_key) is None
    assert transit_key(snek[:-1], B.public_key) is None  # plen no longer adds up


# ------------------------------------------------------------------ invalidation


def _hit(r: Router, port: int, raw: bytes, now: float) -> int:
    """Send ``raw`` twice on ``port``; the second must come from the cache. Returns the next port."""
    r.bytes_received(port, [(3, raw)], now)
    first = r.drain().sends
    before = r.fast_forwards
    r.bytes_received(port, [(3, raw)], now)
    second = r.drain().sends
    assert r.fast_forwards == before + 1 and type(second[0][1]) is Encoded
    assert [(p, frame_bytes(f)) for p, f in first] == [(p, frame_bytes(f)) for p, f in second]
    assert r.forwarding.transit.entries
    return second[0][0]


def _full_path(r: Router, port: int, raw: bytes, now: float) -> list[tuple[int, bytes]]:
    """Send ``raw`` once; it must take the full path. Returns what was sent."""
    before = r.fast_forwards
    r.bytes_received(port, [(3, raw)], now)
    assert r.fast_forwards == before
    return _sent(r)


def test_removing_the_next_peer_empties_the_cache() -> None:
    r, ports = _router()
    # SNEK traffic for a direct peer's key goes straight to it (§6.3 step 5)
    raw = _traffic(IDS[3].public_key, IDS[0].public_key, source_coords=(1,))
    out = _hit(r, ports[0], raw, T0)
    assert out == ports[2]
    r.remove_peer(ports[2], T0, "eof")
    assert not r.forwarding.transit.entries
    assert all(p != ports[2] for p, _ in _full_path(r, ports[0], raw, T0))


def test_a_parent_change_empties_the_cache() -> None:
    r, ports = _router()
    assert r.parent == ports[0] and r.coords == (10, 3)  # the first to relay ROOT's announcement
    raw = _traffic(IDS[1].public_key, IDS[3].public_key, destination_coords=(11,), source_coords=(12,))
    assert _hit(r, ports[2], raw, T0) == ports[1]  # tree routing to IDS[1] (coordinates (11,))
    r.bytes_received(ports[1], [(1, _announcement_via(IDS[1], 11, seq=2))], T0)  # ROOT's next sequence, via IDS[1]
    assert r.parent == ports[1] and not r.forwarding.transit.entries
    r.drain()
    _full_path(r, ports[2], raw, T0)


def test_route_expiry_bounds_the_cache_without_a_timer() -> None:
    r, ports = _router()
    far = identities(1, "transit-far")[0]  # not a peer: reachable only through its routing-table entry
    r.bytes_received(ports[3], [(2, _bootstrap(far, 1_700_000_000_001))], T0 + 1)
    r.drain()
    assert r.table.get(far.public_key) is not None
    raw = _traffic(far.public_key, IDS[0].public_key, source_coords=(1,))
    assert _hit(r, ports[0], raw, T0 + 1) == ports[3]
    assert r.forwarding.transit.until == T0 + 10  # the peers' bootstraps (at T0) expire first
    r.bytes_received(ports[0], [(3, raw)], T0 + 9.99)
    assert type(r.drain().sends[0][1]) is Encoded  # still valid just before
    _full_path(r, ports[0], raw, T0 + 10)  # no handle_timer in between: the bound alone ends it


def test_a_timer_empties_the_cache() -> None:
    r, ports = _router()
    raw = _traffic(IDS[3].public_key, IDS[0].public_key, source_coords=(1,))
    _hit(r, ports[0], raw, T0)
    r.handle_timer(T0 + 0.5)
    assert not r.forwarding.transit.entries
    r.drain()
    _full_path(r, ports[0], raw, T0 + 0.5)


def test_any_other_frame_empties_the_cache() -> None:
    r, ports = _router()
    raw = _traffic(IDS[3].public_key, IDS[0].public_key, source_coords=(1,))
    _hit(r, ports[0], raw, T0)
    r.bytes_received(ports[1], [(0, wire.encode_frame(Frame(FrameType.KEEPALIVE)))], T0)
    assert not r.forwarding.transit.entries
    _full_path(r, ports[0], raw, T0)
    _hit(r, ports[0], raw, T0)
    r.add_peer(identities(1, "transit-new")[0].public_key, 3, T0)
    assert not r.forwarding.transit.entries


def test_hop_limiting_and_pings_never_take_the_fast_path() -> None:
    r, ports = _router(hop_limiting=True)
    raw = _traffic(IDS[3].public_key, IDS[0].public_key, source_coords=(1,))
    for _ in range(3):
        sent = _full_path(r, ports[0], raw, T0)
        assert wire.decode_frame(sent[0][1]).hop_limit == 9
    r, ports = _router()
    src, dst = IDS[0].public_key, IDS[3].public_key
    ping = _traffic(dst, src, wire.encode_ping(0, 1, src, dst), source_coords=(1,))
    hops = [wire.decode_ping(wire.decode_frame(_full_path(r, ports[0], ping, T0)[0][1]).payload)[1] for _ in range(3)]
    assert hops == [2, 2, 2] and not r.forwarding.transit.entries  # each hop counted, never cached
