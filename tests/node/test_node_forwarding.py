"""The forwarding cache gives byte-for-byte what the router gives, and the traffic queue behaves.

Two nodes with the same identity get the same frames from the same (fake) peers:
one with the forwarding cache, one without. Every queued output must be identical,
in the same order. Frames are really signed, so the router's checks run for real.
"""

from __future__ import annotations

import os
import random

import pytest
import trio
import trio.testing

from node.config import LinkSpec, NodeConfig
from node.core import wire
from node.core.crypto import Identity, derive_seed
from node.core.types import INITIAL_WATERMARK, Announcement, Frame, FrameType, Watermark
from node.fairqueue import FairQueue
from node.peer import PeerConn, splice_watermark, transit_key
from node.runtime import Node

IDS = sorted((Identity(derive_seed("fwdtest", i)) for i in range(6)), key=lambda i: i.public_key)
ROOT, B = IDS[-1], IDS[2]  # B is the node under test; the others are its peers (ROOT the strongest)
PEERS = [IDS[0], IDS[1], IDS[3], IDS[4], ROOT]


def _node(fast: bool) -> Node:
    node = Node(NodeConfig(identity=B, listen=None, admin=None, metrics=None))
    node._fwd_enabled = fast
    return node


def _attach(node: Node, ident: Identity) -> PeerConn:
    port = node.router.add_peer(ident.public_key, 3, trio.current_time())
    assert port is not None
    a, _ = trio.testing.memory_stream_pair()
    peer = PeerConn(port=port, key=ident.public_key, link=LinkSpec(), stream=a, remote="test", timeouts=node.cfg.timeouts,
                    on_frames=node._on_frames, on_drop=node._on_drop)  # fmt: skip
    node.peers[port] = peer
    node.flush()
    return peer


def _announcement_via(ident: Identity, root_port: int) -> bytes:
    """ROOT's announcement as ``ident`` relays it to B (ROOT -> ident -> B), signed for real."""
    if ident is ROOT:
        ann = wire.sign_announcement_for_port(Announcement(ROOT.public_key, 1, ()), ROOT, 3)
    else:
        ann = wire.sign_announcement_for_port(Announcement(ROOT.public_key, 1, ()), ROOT, root_port)
        ann = wire.sign_announcement_for_port(ann, ident, 3)
    return wire.encode_frame(wire.announcement_frame(ann))


def _bootstrap(origin: Identity, seq: int) -> bytes:
    payload = wire.make_signed_root_payload(origin, seq, ROOT.public_key, 1)
    return wire.encode_frame(Frame(FrameType.BOOTSTRAP, destination_key=origin.public_key, watermark=INITIAL_WATERMARK,
                                   payload=wire.encode_signed_root_payload(payload)))  # fmt: skip


def _random_traffic(rng: random.Random, coords: list[tuple[int, ...]]) -> bytes:
    dest = rng.choice([*(i.public_key for i in IDS), os.urandom(32), B.public_key])
    src = rng.choice([i.public_key for i in IDS] + [os.urandom(32)])
    kind = rng.random()
    payload = rng.choice([b"x" * rng.randint(0, 300), wire.encode_ping(0, 1, src, dest), wire.encode_ping(1, 2, dest, src)])
    if kind < 0.3 and coords:
        dc = rng.choice(coords + [(1, 2, 3), (200, 1), ()])
        return wire.encode_frame(Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dest, source_key=src,
                                       destination_coords=dc, source_coords=rng.choice(coords), payload=payload))  # fmt: skip
    wm = rng.choice([INITIAL_WATERMARK, Watermark(rng.choice(IDS).public_key, rng.choice([0, 5, 300, 1_700_000_000_123]))])
    return wire.encode_frame(Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dest, source_key=src,
                                   source_coords=rng.choice(coords + [(), (300, 2)]), watermark=wm, payload=payload))  # fmt: skip


def _drain(node: Node) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for port, p in sorted(node.peers.items()):
        items = [d for _, d in p.protocol]
        p.protocol.clear()
        p.traffic.pop_into(items, 1 << 40)
        out[port] = items
    return out


@pytest.mark.parametrize("seed", [1234, 7, 99])
async def test_forwarding_cache_matches_the_router_byte_for_byte(seed: int) -> None:
    nodes = [_node(True), _node(False)]
    peers = [[_attach(n, i) for i in PEERS] for n in nodes]
    for n, ps in zip(nodes, peers):
        for k, (p, ident) in enumerate(zip(ps, PEERS)):
            n._on_frames(p, [(1, _announcement_via(ident, 10 + k))])
            n._on_frames(p, [(2, _bootstrap(ident, 1_700_000_000_000))])
    assert nodes[0].router.state() == nodes[1].router.state()
    coords = [tuple(p["coords"]) for p in nodes[0].router.state()["peers"]]
    rng = random.Random(seed)
    templates = [_random_traffic(rng, coords) for _ in range(40)]  # recurring flows, so the cache gets hits
    batches = []
    for _ in range(300):
        batch = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.005:  # a fresh bootstrap now and then changes the routing table
                ident = rng.choice(PEERS)
                batch.append((2, _bootstrap(ident, 1_700_000_000_000 + rng.randint(1, 10**6))))
            elif rng.random() < 0.8:
                batch.append((3, rng.choice(templates)))
            else:
                batch.append((3, _random_traffic(rng, coords)))
        batches.append((rng.randrange(len(PEERS)), batch))
    for n, ps in zip(nodes, peers):
        _drain(n)
        for i, batch in batches:
            n._on_frames(ps[i], batch)
    fast, slow = _drain(nodes[0]), _drain(nodes[1])
    assert nodes[0].fast_forwards > 50, nodes[0].fast_forwards  # the cache was really used
    assert nodes[1].fast_forwards == 0
    assert fast == slow
    assert sum(len(v) for v in fast.values()) > 500
    assert nodes[0].counters.drops == nodes[1].counters.drops
    assert nodes[0].router.counters == nodes[1].router.counters


def test_transit_key_and_splice() -> None:
    src, dst = IDS[0].public_key, IDS[4].public_key
    snek = wire.encode_frame(Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dst, source_key=src,
                                   source_coords=(1, 2), watermark=Watermark(IDS[3].public_key, 7), payload=b"hello"))  # fmt: skip
    _key, ws, we, d, s = transit_key(snek, B.public_key)
    assert (d, s) == (dst, src) and snek[ws:we] == IDS[3].public_key + b"\x07"
    assert transit_key(snek, dst) is None  # addressed to us: full path
    longer = IDS[1].public_key + wire.encode_varu64(1_700_000_000_000)
    out = splice_watermark(snek, ws, we, longer)
    assert wire.decode_frame(out).watermark == Watermark(IDS[1].public_key, 1_700_000_000_000)
    assert wire.decode_frame(out).payload == b"hello"
    ping = wire.encode_frame(Frame(FrameType.TRAFFIC, destination_key=dst, source_key=src, payload=wire.encode_ping(0, 1, src, dst)))
    assert transit_key(ping, B.public_key) is None  # pings count hops on the way
    odd = bytearray(snek)
    odd[4] = 1  # a non-zero version byte: the encoder would rewrite it
    assert transit_key(bytes(odd), B.public_key) is None
    assert transit_key(snek[:-1], B.public_key) is None  # plen no longer adds up


def test_fair_queue_round_robin_and_head_drop() -> None:
    q = FairQueue(buckets=4, depth=3, bucket_bytes=100)
    for i in range(5):
        q.push(0, b"a%d" % i)
    assert q.dropped == 2 and len(q) == 3  # bucket 0 kept its newest three
    q.push(1, b"b0")
    q.push(1, b"b1")
    out: list[bytes] = []
    q.pop_into(out, 1 << 20)
    assert out == [b"a2", b"b0", b"a3", b"b1", b"a4"]
    assert len(q) == 0 and q.nbytes == 0
    assert q.push(2, b"x" * 60) == 0
    assert q.push(2, b"y" * 60) == 1  # the byte bound drops the older frame
    assert q.nbytes == 60
    out.clear()
    q.pop_into(out, 1)
    assert out == [b"y" * 60]
