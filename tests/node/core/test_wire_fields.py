"""The wire codec's fields and the handshake against the reference's byte vectors
(pinecone-wire-vectors.json): varu64, coordinates (PROTOCOL.md §4.1, §4.2) and §3.2."""

from __future__ import annotations

from typing import Any

import pytest
from wirekit import pub

from node.core import wire
from node.core.crypto import Identity
from node.core.errors import HANDSHAKE_REASONS, HandshakeRejected, MalformedFrame, ProtocolError


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
    assert wire.decode_handshake(superset, expected_capabilities=0x3F) == pub(keys, "k2")

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
