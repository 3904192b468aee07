"""Frames against the reference's byte vectors (pinecone-wire-vectors.json) and PROTOCOL.md §4, §8:
encoding, decoding, malformed input and its messages, the stream decoder, the ping payload."""

from __future__ import annotations

from typing import Any

import pytest
from wirekit import pub

from node.core import wire
from node.core.crypto import Identity
from node.core.errors import MALFORMED_REASONS, BadSignature, HandshakeRejected, MalformedFrame, ProtocolError
from node.core.types import FULL_MASK, INITIAL_WATERMARK, Frame, FrameType, Watermark


# ------------------------------------------------------------------ frames


def _vector_frame(v: dict[str, Any], vectors: dict[str, Any], keys: dict[str, Identity]) -> tuple[Frame, Frame]:
    """(frame to encode from the vector's inputs, frame the decoder must return)."""
    inp = v["inputs"]
    t = inp["type"]

    def payload() -> bytes:
        if "payload_ascii" in inp:
            return inp["payload_ascii"].encode()
        if inp.get("payload") == "switch_announcements[hops=2].hex":
            return bytes.fromhex(vectors["switch_announcements"][2]["hex"])
        return bytes.fromhex(vectors[inp["payload"].removesuffix(".hex")]["hex"])

    def key(name: str) -> bytes:
        return FULL_MASK if name.startswith("FullMask") else pub(keys, name)

    if t == FrameType.KEEPALIVE:
        return Frame(FrameType.KEEPALIVE), Frame(FrameType.KEEPALIVE)
    if t == FrameType.TREE_ANNOUNCEMENT:
        f = Frame(FrameType.TREE_ANNOUNCEMENT, payload=payload())
        return f, f
    if t == FrameType.BOOTSTRAP:
        wm = Watermark(key(inp["watermark_key"]), inp["watermark_sequence"])
        f = Frame(FrameType.BOOTSTRAP, destination_key=key(inp["destination_key"]), watermark=wm, payload=payload())
        sent = Frame(
            f.type, 0, f.destination_key, b"", (), tuple(inp.get("source_coords_not_encoded", ())), wm, f.payload
        )
        return sent, f
    if t == FrameType.TRAFFIC:
        dc, sc = tuple(inp["destination_coords"]), tuple(inp["source_coords"])
        if dc:
            k, s = inp["watermark_not_encoded_when_destination_nonempty"].split("/")
            sent_wm, got_wm = Watermark(key(k), int(s)), INITIAL_WATERMARK
        else:
            sent_wm = got_wm = Watermark(key(inp["watermark_key"]), inp["watermark_sequence"])
        args = (FrameType.TRAFFIC, inp["hop_limit"], key(inp["destination_key"]), key(inp["source_key"]), dc, sc)
        return Frame(*args, sent_wm, payload()), Frame(*args, got_wm, payload())
    assert t == FrameType.WAKEUP_BROADCAST
    f = Frame(FrameType.WAKEUP_BROADCAST, inp["hop_limit"], source_key=key(inp["source_key"]), payload=payload())
    return f, f


def test_frame_vectors(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    names = [v["name"] for v in vectors["frames"]]
    assert names == [
        "keepalive",
        "tree_announcement",
        "bootstrap",
        "bootstrap_initial_watermark",
        "traffic_tree_routed",
        "traffic_snek_routed",
        "traffic_snek_initial_watermark",
        "wakeup_broadcast",
    ]
    for v in vectors["frames"]:
        sent, expected = _vector_frame(v, vectors, keys)
        data = wire.encode_frame(sent)
        assert data.hex() == v["hex"], v["name"]
        assert len(data) == v["length"]
        got = wire.decode_frame(data)
        assert got == expected, v["name"]
        assert wire.decode_frame(memoryview(bytearray(data))) == expected
        assert wire.encode_frame(got) == data
    assert wire.decode_frame(bytes.fromhex(vectors["frames"][4]["hex"])).watermark is INITIAL_WATERMARK


def test_constants_match_vectors(vectors: dict[str, Any]) -> None:
    c = vectors["constants"]
    assert wire.FRAME_MAGIC.hex() == c["FrameMagicBytes_hex"]
    assert wire.FRAME_VERSION == c["Version0"]
    assert FULL_MASK.hex() == c["FullMask_hex"]
    assert {n: int(t) for n, t in vectors["frame_types"].items()} == {
        "Keepalive": FrameType.KEEPALIVE,
        "TreeAnnouncement": FrameType.TREE_ANNOUNCEMENT,
        "VirtualSnakeBootstrap": FrameType.BOOTSTRAP,
        "Traffic": FrameType.TRAFFIC,
        "WakeupBroadcast": FrameType.WAKEUP_BROADCAST,
    }


def test_spec_example_frame_sizes() -> None:
    """§4.4: the 124- and 97-byte traffic frames and an 82-byte bootstrap (5-byte payload, watermark seq 100)."""
    k = bytes(range(32))
    snek = Frame(FrameType.TRAFFIC, 10, k, k, (), (4, 3, 2, 1), Watermark(k, 0), b"1234567")
    tree = Frame(FrameType.TRAFFIC, 10, k, k, (1, 2, 3, 4, 5000), (4, 3, 2, 1), INITIAL_WATERMARK, b"1234567")
    boot = Frame(FrameType.BOOTSTRAP, destination_key=k, watermark=Watermark(k, 100), payload=b"hello")
    for frame, size in ((snek, 124), (tree, 97), (boot, 82)):
        data = wire.encode_frame(frame)
        assert len(data) == size and data[8:10] == size.to_bytes(2, "big")
        assert wire.decode_frame(data) == frame
    assert wire.encode_frame(tree)[12:26].hex() == "0006010203" + "04a708" + "0004040302" + "01"
    assert wire.encode_frame(Frame(FrameType.KEEPALIVE)).hex() == "70696e6500000000000a"


def test_keepalive_body_ignored_and_unknown_types_kept() -> None:
    assert wire.decode_frame(bytes.fromhex("70696e6500000000000c") + b"xy") == Frame(FrameType.KEEPALIVE)
    unknown = Frame(0xC8, 0, payload=b"historical ping body")  # §8: type 200, removed in 2022
    data = wire.encode_frame(unknown)
    assert data[:10] == bytes.fromhex("70696e6500c80000") + len(data).to_bytes(2, "big")
    assert wire.decode_frame(data) == unknown
    # The stream stays in sync past an unknown type.
    frames = wire.FrameDecoder().feed(data + wire.encode_frame(Frame(FrameType.KEEPALIVE)))
    assert frames == [unknown, Frame(FrameType.KEEPALIVE)]


@pytest.mark.parametrize(
    ("hexstr", "reason", "message"),
    [
        ("70696e6500000000", "truncated", "frame of 8 bytes is shorter than the 10-byte header (at byte 8)"),
        ("70696e6600000000000a", "bad_magic", "frame magic 70696e66 is not 70696e65 ('pine') (at byte 0)"),
        ("70696e65000000000007", "short_length", "frame length 7 below header size 10 (at byte 8)"),
        ("70696e6500000000000b", "truncated", "frame length field says 11 bytes but 10 were given (at byte 8)"),
        (
            "70696e6500010000000c000000",
            "trailing_bytes",
            "frame length field says 12 bytes but 13 were given (at byte 8)",
        ),
        (
            "70696e6500010000000d000200",
            "bad_payload_length",
            "tree announcement payload length field says 2 but 1 bytes remain (at byte 10)",
        ),
        ("70696e6500010000000b00", "truncated", "tree announcement frame ends before its payload length (at byte 11)"),
        (
            "70696e6500030000000e00000005",
            "bad_coords",
            "traffic destination coordinates declare 5 bytes, only 0 remain (at byte 12)",
        ),
        ("70696e65000300000010000000000000", "truncated", "traffic frame ends inside its keys (at byte 16)"),
        (
            "70696e650002000000140000" + "00" * 8,
            "truncated",
            "bootstrap frame ends inside its destination key (at byte 20)",
        ),
    ],
)
def test_malformed_frame_messages(hexstr: str, reason: str, message: str) -> None:
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_frame(bytes.fromhex(hexstr))
    assert exc.value.reason == reason and reason in MALFORMED_REASONS
    assert str(exc.value) == message


def test_traffic_fields_must_add_up_exactly(vectors: dict[str, Any]) -> None:
    for name in ("traffic_tree_routed", "traffic_snek_routed", "bootstrap", "wakeup_broadcast", "tree_announcement"):
        data = bytearray(bytes.fromhex(next(f["hex"] for f in vectors["frames"] if f["name"] == name)))
        for delta in (-1, 1):
            bad = bytearray(data)
            bad[10:12] = (int.from_bytes(data[10:12], "big") + delta).to_bytes(2, "big")
            with pytest.raises(MalformedFrame) as exc:
                wire.decode_frame(bytes(bad))
            assert exc.value.reason == "bad_payload_length" and exc.value.frame_type == data[5]
    # A snek frame cut inside its watermark sequence.
    snek = bytes.fromhex(next(f["hex"] for f in vectors["frames"] if f["name"] == "traffic_snek_routed"))
    cut = snek[:114] + b"\x82"
    cut = cut[:8] + len(cut).to_bytes(2, "big") + cut[10:]
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_frame(cut)
    assert exc.value.reason == "truncated"


def test_encode_frame_caller_bugs() -> None:
    k = b"k" * 32
    with pytest.raises(ValueError, match="over the 65535-byte limit"):
        wire.encode_frame(Frame(FrameType.TRAFFIC, 10, k, k, (1,), (2,), payload=b"x" * (65535 - 81)))
    biggest = Frame(FrameType.TRAFFIC, 10, k, k, (1,), (2,), payload=b"x" * (65535 - 82))
    data = wire.encode_frame(biggest)
    assert len(data) == 65535 and wire.FrameDecoder().feed(data) == [biggest]
    with pytest.raises(ValueError, match="traffic keys must be 32 bytes, got 31 and 32"):
        wire.encode_frame(Frame(FrameType.TRAFFIC, 10, k[:31], k))
    with pytest.raises(ValueError, match="bootstrap destination key must be 32 bytes"):
        wire.encode_frame(Frame(FrameType.BOOTSTRAP))
    with pytest.raises(ValueError, match="cannot encode tree announcement frame"):
        wire.encode_frame(Frame(FrameType.TREE_ANNOUNCEMENT, hop_limit=256))
    with pytest.raises(ValueError):
        wire.encode_frame(Frame(300))


# ----------------------------------------------------------- FrameDecoder


def test_decoder_byte_by_byte_over_all_vectors(vectors: dict[str, Any]) -> None:
    stream = b"".join(bytes.fromhex(f["hex"]) for f in vectors["frames"])
    expected = [wire.decode_frame(bytes.fromhex(f["hex"])) for f in vectors["frames"]]
    dec = wire.FrameDecoder()
    got: list[Frame] = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
        assert dec.buffered < 65535
    assert got == expected
    assert dec.buffered == 0 and dec.position == len(stream)
    raw = wire.FrameDecoder().feed_raw(memoryview(stream))
    assert [(t, bytes(b)) for t, b in raw] == [
        (f["inputs"]["type"], bytes.fromhex(f["hex"])) for f in vectors["frames"]
    ]


def test_decoder_holds_partial_frame() -> None:
    data = wire.encode_frame(Frame(FrameType.TREE_ANNOUNCEMENT, payload=b"z" * 500))
    dec = wire.FrameDecoder()
    assert dec.feed(data[:300]) == []
    assert dec.buffered == 300
    assert dec.feed(data[300:] + data[:5]) == [Frame(FrameType.TREE_ANNOUNCEMENT, payload=b"z" * 500)]
    assert dec.buffered == 5


def test_decoder_rejects_bad_framing_early() -> None:
    with pytest.raises(MalformedFrame) as exc:
        wire.FrameDecoder().feed(b"GET ")
    assert exc.value.reason == "bad_magic"
    assert str(exc.value) == "frame magic 47455420 is not 70696e65 ('pine') (at byte 0)"
    dec = wire.FrameDecoder()
    assert dec.feed(b"pi") == []
    with pytest.raises(MalformedFrame) as exc:
        dec.feed(b"ng")
    assert exc.value.reason == "bad_magic"
    dec = wire.FrameDecoder()
    keepalive = wire.encode_frame(Frame(FrameType.KEEPALIVE))
    with pytest.raises(MalformedFrame) as exc:
        dec.feed(keepalive + bytes.fromhex("70696e65000000000009"))
    assert (exc.value.reason, exc.value.offset, dec.position) == ("short_length", 8, 10)


# -------------------------------------------------------------------- ping


def test_ping_payload_layout_and_hooks(keys: dict[str, Identity]) -> None:
    a, b = pub(keys, "k1"), pub(keys, "k2")
    ping = wire.encode_ping(wire.PING, 1, a, b)
    assert len(ping) == wire.PING_LEN == 75
    assert ping[:11] == b"pineping\x00\x00\x01" and ping[11:43] == a and ping[43:] == b
    assert wire.decode_ping(ping) == (wire.PING, 1, a, b)
    assert wire.decode_ping(ping + b"extra") == (wire.PING, 1, a, b)
    assert wire.decode_ping(ping[:74]) is None
    assert wire.decode_ping(b"pinepong" + ping[8:]) is None
    assert wire.decode_ping(ping[:8] + b"\x07" + ping[9:]) is None
    assert wire.decode_ping(b"") is None
    bumped = wire.increment_ping_hops(ping)
    assert wire.decode_ping(bumped) == (wire.PING, 2, a, b)
    pong = wire.encode_ping(wire.PONG, 5, a, b)
    assert wire.increment_ping_hops(pong) is pong
    assert wire.increment_ping_hops(b"not a ping") == b"not a ping"
    wrap = wire.encode_ping(wire.PING, 0xFFFF, a, b)
    assert wire.decode_ping(wire.increment_ping_hops(wrap)) == (wire.PING, 0, a, b)
    with pytest.raises(ValueError):
        wire.encode_ping(2, 1, a, b)
    with pytest.raises(ValueError):
        wire.encode_ping(wire.PING, 1, a[:31], b)


def test_error_family_is_typed() -> None:
    err = MalformedFrame("truncated", "x", offset=3, frame_type=2)
    assert isinstance(err, ProtocolError) and (err.reason, err.offset, err.frame_type) == ("truncated", 3, 2)
    with pytest.raises(AssertionError):
        MalformedFrame("made_up", "x", offset=0)
    with pytest.raises(AssertionError):
        HandshakeRejected("made_up", "x")
    import pickle

    again = pickle.loads(pickle.dumps(err))
    assert (type(again), str(again), again.reason) == (MalformedFrame, "x (at byte 3)", "truncated")
    bs = pickle.loads(pickle.dumps(BadSignature("hop 2 bad", hop_index=2, key=b"k")))
    assert (bs.hop_index, bs.key, bs.reason) == (2, b"k", "bad_signature")
