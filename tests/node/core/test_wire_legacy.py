"""The older variant's frames and payloads (PROTOCOL.md §7.4), byte for byte."""

from __future__ import annotations

from typing import Any

import pytest

from node.core import wire
from node.core.errors import MALFORMED_REASONS, MalformedFrame
from node.core.types import INITIAL_WATERMARK, Frame, LegacyBootstrapPayload, LegacyFrameType, LegacyPathPayload


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
