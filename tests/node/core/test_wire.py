"""The wire codec against the reference's byte vectors (pinecone-wire-vectors.json) and PROTOCOL.md §3.2/§4/§8."""

from __future__ import annotations

import json
from typing import Any

import pytest

from node.core import wire
from node.core.crypto import Identity, verify
from node.core.errors import (
    HANDSHAKE_REASONS,
    MALFORMED_REASONS,
    BadSignature,
    HandshakeRejected,
    MalformedFrame,
    ProtocolError,
)
from node.core.types import (
    FULL_MASK,
    INITIAL_WATERMARK,
    Announcement,
    Frame,
    FrameType,
    LegacyBootstrapPayload,
    LegacyFrameType,
    LegacyPathPayload,
    SignedRootPayload,
    Watermark,
)
from tests.ci import SHARED, need

VECTORS_PATH = SHARED / "spec/pinecone-wire-vectors.json"


def _load_vectors() -> dict[str, Any]:
    need(VECTORS_PATH.exists(), f"wire vectors not found at {VECTORS_PATH}")
    return json.loads(VECTORS_PATH.read_text())


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    return _load_vectors()


@pytest.fixture(scope="module")
def keys(vectors: dict[str, Any]) -> dict[str, Identity]:
    ids = {k["name"]: Identity(bytes.fromhex(k["seed_hex"])) for k in vectors["keys"]}
    for k in vectors["keys"]:
        assert ids[k["name"]].public_key.hex() == k["public_key_hex"]
    return ids


def _pub(keys: dict[str, Identity], name: str) -> bytes:
    return keys[name].public_key


# ------------------------------------------------------------------ varu64


def test_varu64_vectors(vectors: dict[str, Any]) -> None:
    assert len(vectors["varu64"]) == 10
    for v in vectors["varu64"]:
        value, data = int(v["value"]), bytes.fromhex(v["hex"])
        assert wire.encode_varu64(value) == data
        assert len(data) == v["length"]
        assert wire.decode_varu64(data, 0, minimal=True) == (value, len(data))
        assert wire.decode_varu64(b"\xaa" + data + b"\xbb", 1) == (value, 1 + len(data))


@pytest.mark.parametrize(
    ("value", "hexstr"),
    [
        (0, "00"),
        (127, "7f"),
        (128, "8100"),
        (300, "822c"),
        (1234, "8952"),
        (5000, "a708"),
        (16384, "818000"),
        (123456, "87c440"),
        (1_700_000_000_000, "b1bcff95d000"),
        (2**64 - 1, "81ffffffffffffffff7f"),
    ],
)
def test_varu64_spec_examples(value: int, hexstr: str) -> None:
    assert wire.encode_varu64(value).hex() == hexstr
    assert wire.decode_varu64(bytes.fromhex(hexstr), 0) == (value, len(hexstr) // 2)


@pytest.mark.parametrize(
    ("data", "minimal", "reason", "message"),
    [
        (b"\x81", False, "truncated", "value is a varu64 cut off after 1 bytes (at byte 0)"),
        (b"", False, "truncated", "value is a varu64 cut off after 0 bytes (at byte 0)"),
        (b"\x81" * 10 + b"\x00", False, "bad_varu64", "value is a varu64 longer than 10 bytes (at byte 0)"),
        (b"\x82" + b"\x80" * 8 + b"\x00", False, "bad_varu64", f"value varu64 {2**64} is 2**64 or more (at byte 0)"),
        (b"\x80\x01", True, "non_minimal_varu64", "value is a non-minimal varu64 (at byte 0)"),
    ],
)
def test_varu64_strict(data: bytes, minimal: bool, reason: str, message: str) -> None:
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_varu64(data, 0, minimal=minimal)
    assert exc.value.reason == reason
    assert str(exc.value) == message


def test_varu64_non_minimal_accepted_when_not_required() -> None:
    assert wire.decode_varu64(b"\x80\x01", 0) == (1, 2)


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_encode_varu64_out_of_range_is_caller_bug(bad: int) -> None:
    with pytest.raises(ValueError, match="outside 0..2\\*\\*64-1"):
        wire.encode_varu64(bad)


# ------------------------------------------------------------- coordinates


def test_coordinates_vectors(vectors: dict[str, Any]) -> None:
    for v in vectors["coordinates"]:
        data = bytes.fromhex(v["hex"])
        assert wire.encode_coords(v["ports"]) == data
        assert wire.decode_coords(data, 0) == (tuple(v["ports"]), len(data))


def test_coordinates_spec_example() -> None:
    assert wire.encode_coords([1, 2, 3, 4, 5000]).hex() == "00060102030" + "4a708"
    assert wire.decode_coords(bytes.fromhex("0006010203" + "04a708ff"), 0) == ((1, 2, 3, 4, 5000), 8)


@pytest.mark.parametrize(
    ("hexstr", "reason", "message"),
    [
        ("00", "truncated", "coordinates length needs 2 bytes, 1 remain (at byte 0)"),
        ("000301", "bad_coords", "coordinates declare 3 bytes, only 1 remain (at byte 0)"),
        ("00018100", "bad_coords", "coordinates port is a varu64 cut off after 1 bytes (at byte 2)"),
    ],
)
def test_coordinates_must_fill_exactly(hexstr: str, reason: str, message: str) -> None:
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_coords(bytes.fromhex(hexstr), 0)
    assert (exc.value.reason, str(exc.value)) == (reason, message)


# --------------------------------------------------------------- handshake


def test_handshake_vector(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    hs = vectors["handshake"]
    data = wire.encode_handshake(keys["k1"])
    assert data.hex() == hs["hex"]
    assert len(data) == wire.HANDSHAKE_LEN == hs["length"] == 104
    assert data[:8] == bytes.fromhex("010000000000003b")
    assert wire.CAPABILITIES == hs["capabilities"]
    assert wire.decode_handshake(data).hex() == hs["public_key_hex"]
    # Bytes after the 104 belong to the frame stream and are not read.
    assert wire.decode_handshake(data + b"pine").hex() == hs["public_key_hex"]


def _rejected(data: bytes, **kw: Any) -> HandshakeRejected:
    with pytest.raises(HandshakeRejected) as exc:
        wire.decode_handshake(data, **kw)
    assert exc.value.reason in HANDSHAKE_REASONS
    assert isinstance(exc.value, ProtocolError)
    return exc.value


def test_handshake_rejections_each_reason(keys: dict[str, Identity]) -> None:
    good = wire.encode_handshake(keys["k2"])
    err = _rejected(good[:103])
    assert (err.reason, str(err)) == ("truncated", "handshake rejected: got 103 of 104 bytes")

    err = _rejected(b"\x02" + good[1:])
    assert (err.reason, str(err)) == ("bad_version", "handshake rejected: version byte 0x02 is not 0x01 (at byte 0)")

    # A superset of our capabilities is rejected too: the check is equality (§3.2, §10 #28).
    superset = wire.encode_handshake(keys["k2"], capabilities=0x3F)
    err = _rejected(superset)
    assert err.reason == "bad_capabilities"
    assert str(err) == "handshake rejected: capabilities 0x0000003f are not exactly 0x0000003b (at byte 4)"
    assert wire.decode_handshake(superset, expected_capabilities=0x3F) == _pub(keys, "k2")

    tampered = bytearray(good)
    tampered[-1] ^= 0x01
    err = _rejected(bytes(tampered))
    assert err.reason == "bad_signature"
    assert str(err).startswith("handshake rejected: signature by 8139770ea87d175f")

    # The unused bytes are covered by the signature but not checked by value.
    unused = bytearray(good)
    unused[2] = 0xFF
    assert _rejected(bytes(unused)).reason == "bad_signature"
    # Another key's signature over our bytes.
    forged = good[:40] + keys["k3"].sign(good[:40])
    assert _rejected(forged).reason == "bad_signature"


def test_handshake_checks_in_spec_order(keys: dict[str, Identity]) -> None:
    good = bytearray(wire.encode_handshake(keys["k1"]))
    good[-1] ^= 0xFF  # bad signature everywhere below
    bad_caps = bytearray(good)
    bad_caps[7] = 0x3A
    assert _rejected(bytes(bad_caps)).reason == "bad_capabilities"
    bad_all = bytearray(bad_caps)
    bad_all[0] = 0x00
    assert _rejected(bytes(bad_all)).reason == "bad_version"


# ---------------------------------------------------------- announcements


def _build_announcement(vectors: dict[str, Any], keys: dict[str, Identity], hops: int) -> Announcement:
    v = vectors["switch_announcements"][hops]
    root = keys["k1"].public_key
    assert root.hex() == v["root_public_hex"]
    ann = Announcement(root, v["root_sequence"])
    for sig in v["signatures"] or []:
        ann = wire.sign_announcement_for_port(ann, keys[sig["signer"]], sig["hop_port"])
    return ann


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
def test_switch_announcement_vectors(vectors: dict[str, Any], keys: dict[str, Identity], hops: int) -> None:
    v = vectors["switch_announcements"][hops]
    ann = _build_announcement(vectors, keys, hops)
    data = wire.encode_announcement(ann)
    assert data.hex() == v["hex"]
    assert len(data) == v["length"]
    assert ann.coords == tuple(v["coords"])
    for hop, sig in zip(ann.hops, v["signatures"] or [], strict=True):
        assert hop.signature.hex() == sig["signature_hex"]
        assert hop.key.hex() == sig["signer_pub_hex"]
    decoded = wire.decode_announcement(data)
    assert decoded == ann
    wire.verify_announcement(decoded)


def test_announcement_signature_coverage(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    ann = _build_announcement(vectors, keys, 3)
    hops = list(ann.hops)

    def fails_at(a: Announcement) -> int:
        with pytest.raises(BadSignature) as exc:
            wire.verify_announcement(a)
        assert exc.value.reason == "bad_signature"
        return exc.value.hop_index

    assert fails_at(Announcement(ann.root_key, 6, ann.hops)) == 0  # root seq is covered by every hop
    # Hop 0's port is covered by hop 1's signature, not by its own.
    assert fails_at(Announcement(ann.root_key, 5, (type(hops[0])(2, hops[0].key, hops[0].signature), *hops[1:]))) == 1
    sig = bytearray(hops[1].signature)
    sig[0] ^= 1
    err_ann = Announcement(ann.root_key, 5, (hops[0], type(hops[1])(3, hops[1].key, bytes(sig)), hops[2]))
    with pytest.raises(BadSignature) as exc:
        wire.verify_announcement(err_ann)
    assert exc.value.hop_index == 1
    assert str(exc.value) == "root announcement hop 1 (port 3) signature by 8139770ea87d175f… does not verify"
    # The last hop's port is protected only by the handshake-key check (§4.5), not by a signature.
    wire.verify_announcement(
        Announcement(ann.root_key, 5, (*hops[:2], type(hops[2])(7, hops[2].key, hops[2].signature)))
    )


def test_announcement_frame_vector(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    frame = wire.announcement_frame(_build_announcement(vectors, keys, 2))
    v = next(f for f in vectors["frames"] if f["name"] == "tree_announcement")
    assert wire.encode_frame(frame).hex() == v["hex"]


def test_decode_announcement_structure_errors(vectors: dict[str, Any]) -> None:
    one_hop = bytes.fromhex(vectors["switch_announcements"][1]["hex"])
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop + b"\x00" * 5)
    assert exc.value.reason == "bad_announcement"
    assert str(exc.value) == "5 leftover bytes after the last hop, fewer than the 97 a hop needs (at byte 130)"
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:20])
    assert exc.value.reason == "bad_announcement"
    # Non-minimal root sequence and port are rejected: they would change the signed bytes.
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:32] + b"\x80\x05" + one_hop[33:])
    assert (exc.value.reason, exc.value.offset) == ("non_minimal_varu64", 32)
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:33] + b"\x80\x01" + one_hop[34:])
    assert (exc.value.reason, exc.value.offset) == ("non_minimal_varu64", 33)
    # A two-byte port leaves 97 bytes but only 95 for key and signature.
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_announcement(one_hop[:33] + b"\x81\x80\x01" + one_hop[34:-2])
    assert exc.value.reason == "bad_announcement"


def test_live_capture_frames_decode_and_verify(vectors: dict[str, Any], keys: dict[str, Identity]) -> None:
    cap = vectors["live_capture"]
    for name, root_seq in (("first_frame", cap["first_frame_root_sequence"]), ("second_frame", 1)):
        data = bytes.fromhex(cap[f"{name}_hex"])
        frame = wire.decode_frame(data)
        assert frame.type == FrameType.TREE_ANNOUNCEMENT == cap[f"{name}_type"]
        ann = wire.decode_announcement(frame.payload)
        assert ann.root_key == _pub(keys, "k1") and ann.root_seq == root_seq
        assert ann.coords == (1,) and ann.hops[0].key == _pub(keys, "k1")
        wire.verify_announcement(ann)
        assert wire.encode_frame(frame) == data
        rebuilt = wire.sign_announcement_for_port(Announcement(ann.root_key, root_seq), keys["k1"], 1)
        assert wire.encode_frame(wire.announcement_frame(rebuilt)) == data


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
        return FULL_MASK if name.startswith("FullMask") else _pub(keys, name)

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


@pytest.mark.parametrize("name", ["bootstrap_payload", "wakeup_broadcast_payload"])
def test_signed_root_payload_vectors(vectors: dict[str, Any], keys: dict[str, Identity], name: str) -> None:
    v = vectors[name]
    root_key = bytes.fromhex(v["root_public_hex"])
    seq = int(v["sequence"])
    assert wire.signed_root_protected_bytes(seq, root_key, v["root_sequence"]).hex() == v["protected_payload_hex"]
    p = wire.make_signed_root_payload(keys["k4"], seq, root_key, v["root_sequence"])
    assert p.signature.hex() == v["signature_hex"]
    data = wire.encode_signed_root_payload(p)
    assert data.hex() == v["hex"]
    assert wire.decode_signed_root_payload(data) == p
    assert wire.verify_signed_root_payload(p, _pub(keys, "k4"))
    assert not wire.verify_signed_root_payload(p, _pub(keys, "k5"))
    assert not wire.verify_signed_root_payload(
        SignedRootPayload(seq + 1, root_key, v["root_sequence"], p.signature), _pub(keys, "k4")
    )
    # The verifier key comes from the frame header (DestinationKey / SourceKey), §4.6/§4.7.
    frame = wire.decode_frame(
        bytes.fromhex(next(f["hex"] for f in vectors["frames"] if f["inputs"].get("payload") == f"{name}.hex"))
    )
    header_key = frame.destination_key if frame.type == FrameType.BOOTSTRAP else frame.source_key
    assert wire.verify_signed_root_payload(wire.decode_signed_root_payload(frame.payload), header_key, verify)


def test_signed_root_payload_exact_length(vectors: dict[str, Any]) -> None:
    data = bytes.fromhex(vectors["bootstrap_payload"]["hex"])
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_signed_root_payload(data + b"\x00")
    assert (exc.value.reason, str(exc.value)) == (
        "trailing_bytes",
        "1 bytes after the signed root payload (at byte 103)",
    )
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_signed_root_payload(data[:-1])
    assert (exc.value.reason, str(exc.value)) == (
        "truncated",
        "signed root payload has 63 of 64 signature bytes (at byte 102)",
    )


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


# ------------------------------------------------------------------ §7.4 legacy frames

_PK, _SK = bytes(range(32)), bytes(range(100, 132))  # path/destination key, source key
_PID = bytes.fromhex("0102030405060708")
_SIG1, _SIG2 = b"\x51" * 64, b"\x52" * 64


def _hdr(t: int, total: int) -> str:
    return "70696e6500" + f"{t:02x}" + "0000" + f"{total:04x}"


def test_7_4_legacy_frame_layouts_are_byte_exact() -> None:
    """§7.4's table, field by field: header unchanged, then plen, the addressing fields, the payload."""
    pk, sk, pay = _PK.hex(), _SK.hex(), "c0ffee"
    cases = [
        (Frame(LegacyFrameType.LEGACY_BOOTSTRAP, destination_key=_PK, source_coords=(1, 2, 5000), payload=b"\xc0\xff\xee"),
         "0003" + pk + "0004" + "0102a708" + pay),  # plen ‖ PathKey ‖ SourceCoords ‖ payload
        (Frame(LegacyFrameType.LEGACY_BOOTSTRAP_ACK, 0, _PK, _SK, (1, 2, 5000), (7,), payload=b"\xc0\xff\xee"),
         "0003" + "0004" + "0102a708" + "0001" + "07" + pk + sk + pay),  # plen ‖ DestCoords ‖ SourceCoords ‖ keys
        (Frame(LegacyFrameType.LEGACY_SETUP, 0, _PK, _SK, (9,), payload=b"\xc0\xff\xee"),
         "0003" + "0001" + "09" + pk + sk + pay),  # plen ‖ DestCoords ‖ DestKey ‖ SourceKey ‖ payload
        (Frame(LegacyFrameType.LEGACY_TEARDOWN, destination_key=_PK, payload=_PID),
         "0008" + pk + _PID.hex()),  # plen ‖ PathKey ‖ PathID
    ]  # fmt: skip
    for frame, body in cases:
        want = _hdr(int(frame.type), 10 + len(body) // 2) + body
        assert wire.encode_frame(frame).hex() == want
        back = wire.decode_frame(bytes.fromhex(want))
        assert back == frame and type(back.type) is LegacyFrameType and back.watermark == INITIAL_WATERMARK
    # root coordinates are "00 00" like everywhere (§4.2)
    root_boot = Frame(LegacyFrameType.LEGACY_BOOTSTRAP, destination_key=_PK)
    assert wire.encode_frame(root_boot).hex() == _hdr(0xE0, 46) + "0000" + pk + "0000"


def test_7_4_legacy_payload_layouts_and_signed_bytes() -> None:
    rk = bytes(range(200, 232))
    boot = LegacyBootstrapPayload(_PID, rk, 300, _SIG1)
    data = wire.encode_legacy_bootstrap_payload(boot)
    assert data == _PID + rk + bytes.fromhex("822c") + _SIG1  # PathID ‖ RootKey ‖ RootSeq ‖ SourceSig
    assert wire.decode_legacy_bootstrap_payload(data) == boot and boot.root == (rk, 300)
    path = LegacyPathPayload(_PID, rk, 1, _SIG1, _SIG2)
    data = wire.encode_legacy_path_payload(path)
    assert data == _PID + rk + b"\x01" + _SIG1 + _SIG2  # ... ‖ DestSig
    assert wire.decode_legacy_path_payload(data) == path
    assert wire.decode_legacy_teardown_payload(wire.encode_legacy_teardown_payload(_PID)) == _PID
    # §7.2: source sig over path key ‖ path ID; destination sig over source sig ‖ path key ‖ path ID
    assert wire.legacy_source_signed_bytes(_PK, _PID) == _PK + _PID
    assert wire.legacy_dest_signed_bytes(_SIG1, _PK, _PID) == _SIG1 + _PK + _PID
    for bad in (lambda: wire.legacy_source_signed_bytes(_PK, _PID[:7]),
                lambda: wire.legacy_dest_signed_bytes(_SIG1[:63], _PK, _PID),
                lambda: wire.encode_legacy_path_payload(LegacyPathPayload(_PID, rk, 1, _SIG1, b"")),
                lambda: wire.encode_legacy_teardown_payload(b"123456789"),
                lambda: wire.encode_frame(Frame(LegacyFrameType.LEGACY_SETUP, destination_key=_PK))):  # fmt: skip
        with pytest.raises(ValueError):
            bad()


@pytest.mark.parametrize(
    ("hexstr", "reason", "message"),
    [
        (_hdr(0xE0, 11) + "00", "truncated", "legacy bootstrap frame ends before its payload length (at byte 11)"),
        (_hdr(0xE0, 22) + "000a" + "00" * 10, "truncated", "legacy bootstrap frame ends inside its path key (at byte 22)"),
        (_hdr(0xE0, 46) + "0000" + _PK.hex() + "0005", "bad_coords",
         "legacy bootstrap source coordinates declare 5 bytes, only 0 remain (at byte 44)"),
        (_hdr(0xE1, 26) + "0000" + "0000" + "0000" + "00" * 10, "truncated",
         "legacy bootstrap ACK frame ends inside its keys (at byte 26)"),
        (_hdr(0xE2, 86) + "0009" + "0000" + _PK.hex() + _SK.hex() + "00" * 8, "bad_payload_length",
         "legacy setup payload length field says 9 but 8 bytes remain (at byte 10)"),
        (_hdr(0xE3, 26) + "0008" + "00" * 14, "truncated", "legacy teardown frame ends inside its path key (at byte 26)"),
        (_hdr(0xE3, 51) + "0008" + _PK.hex() + "00" * 7, "bad_payload_length",
         "legacy teardown payload length field says 8 but 7 bytes remain (at byte 10)"),
    ],
)  # fmt: skip
def test_7_4_malformed_legacy_frames(hexstr: str, reason: str, message: str) -> None:
    with pytest.raises(MalformedFrame) as exc:
        wire.decode_frame(bytes.fromhex(hexstr))
    assert exc.value.reason == reason and reason in MALFORMED_REASONS
    assert str(exc.value) == message and exc.value.frame_type == int(hexstr[10:12], 16)


@pytest.mark.parametrize(
    ("decode", "data", "reason", "message"),
    [
        (wire.decode_legacy_bootstrap_payload, b"\0" * 39, "truncated",
         "legacy bootstrap payload has 39 of its 40 path ID and root key bytes (at byte 39)"),
        (wire.decode_legacy_bootstrap_payload, b"\0" * 40 + b"\x80", "truncated",
         "legacy bootstrap root sequence is a varu64 cut off after 1 bytes (at byte 40)"),
        (wire.decode_legacy_bootstrap_payload, b"\0" * 40 + b"\xff" * 11, "bad_varu64",
         "legacy bootstrap root sequence is a varu64 longer than 10 bytes (at byte 40)"),
        (wire.decode_legacy_bootstrap_payload, b"\0" * 106, "trailing_bytes",
         "1 bytes after the legacy bootstrap payload (at byte 105)"),
        (wire.decode_legacy_path_payload, b"\0" * 141, "truncated",
         "legacy setup payload has 100 of 128 signature bytes (at byte 141)"),
        (wire.decode_legacy_teardown_payload, b"\0" * 7, "truncated",
         "legacy teardown payload of 7 bytes is not an 8-byte path ID (at byte 7)"),
        (wire.decode_legacy_teardown_payload, b"\0" * 9, "trailing_bytes",
         "legacy teardown payload of 9 bytes is not an 8-byte path ID (at byte 8)"),
    ],
)  # fmt: skip
def test_7_4_malformed_legacy_payloads(decode: Any, data: bytes, reason: str, message: str) -> None:
    with pytest.raises(MalformedFrame) as exc:
        decode(data)
    assert exc.value.reason == reason and str(exc.value) == message


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
    a, b = _pub(keys, "k1"), _pub(keys, "k2")
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
