"""Property tests for the wire codec: round trips under any chunking, and bad input only ever raises ProtocolError."""

from __future__ import annotations

import contextlib
import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.core import wire
from node.core.errors import ProtocolError
from node.core.types import (
    INITIAL_WATERMARK,
    Announcement,
    Frame,
    FrameType,
    LegacyBootstrapPayload,
    LegacyFrameType,
    LegacyPathPayload,
    SigHop,
    SignedRootPayload,
    Watermark,
    with_hop_limit,
    with_payload,
    without_destination_coords,
)

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U64 = st.integers(0, 2**64 - 1)
keys = st.binary(min_size=32, max_size=32)
sigs = st.binary(min_size=64, max_size=64)
ports = st.one_of(st.integers(0, 253), U64)
coords = st.lists(ports, max_size=8).map(tuple)
nonempty_coords = st.lists(ports, min_size=1, max_size=8).map(tuple)
watermarks = st.one_of(st.just(INITIAL_WATERMARK), st.builds(Watermark, keys, st.one_of(st.integers(0, 300), U64)))
payloads = st.binary(max_size=300)
hops = st.integers(0, 255)

keepalives = st.builds(Frame, st.just(FrameType.KEEPALIVE), hops)
tree_anns = st.builds(Frame, st.just(FrameType.TREE_ANNOUNCEMENT), hops, payload=payloads)
bootstraps = st.builds(
    Frame, st.just(FrameType.BOOTSTRAP), hops, destination_key=keys, watermark=watermarks, payload=payloads
)
broadcasts = st.builds(Frame, st.just(FrameType.WAKEUP_BROADCAST), hops, source_key=keys, payload=payloads)
snek_traffic = st.builds(
    Frame, st.just(FrameType.TRAFFIC), hops, keys, keys, st.just(()), coords, watermarks, payloads
)  # fmt: skip
tree_traffic = st.builds(
    Frame, st.just(FrameType.TRAFFIC), hops, keys, keys, nonempty_coords, coords, st.just(INITIAL_WATERMARK), payloads
)  # fmt: skip
legacy = st.one_of(  # §7.4: fields in each type's layout, any payload bytes
    st.builds(Frame, st.just(LegacyFrameType.LEGACY_BOOTSTRAP), hops, destination_key=keys, source_coords=coords,
              payload=payloads),
    st.builds(Frame, st.just(LegacyFrameType.LEGACY_BOOTSTRAP_ACK), hops, keys, keys, coords, coords, payload=payloads),
    st.builds(Frame, st.just(LegacyFrameType.LEGACY_SETUP), hops, keys, keys, coords, payload=payloads),
    st.builds(Frame, st.just(LegacyFrameType.LEGACY_TEARDOWN), hops, destination_key=keys, payload=payloads),
)  # fmt: skip
unknown = st.builds(Frame, st.integers(5, 255).filter(lambda t: not 0xE0 <= t <= 0xE3), hops, payload=payloads)
frames = st.one_of(keepalives, tree_anns, bootstraps, broadcasts, snek_traffic, tree_traffic, legacy, unknown)

announcements = st.builds(
    Announcement, keys, U64, st.lists(st.builds(SigHop, ports, keys, sigs), max_size=4).map(tuple)
)  # fmt: skip
signed_payloads = st.builds(SignedRootPayload, U64, keys, U64, sigs)
path_ids = st.binary(min_size=8, max_size=8)
legacy_bootstrap_payloads = st.builds(LegacyBootstrapPayload, path_ids, keys, U64, sigs)
legacy_path_payloads = st.builds(LegacyPathPayload, path_ids, keys, U64, sigs, sigs)
LEGACY_PAYLOADS = {
    LegacyFrameType.LEGACY_BOOTSTRAP: wire.decode_legacy_bootstrap_payload,
    LegacyFrameType.LEGACY_BOOTSTRAP_ACK: wire.decode_legacy_path_payload,
    LegacyFrameType.LEGACY_SETUP: wire.decode_legacy_path_payload,
    LegacyFrameType.LEGACY_TEARDOWN: wire.decode_legacy_teardown_payload,
}


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@PROPS
@given(st.lists(frames, max_size=12), st.lists(st.integers(0, 2**16), max_size=12))
def test_roundtrip_survives_any_chunking(sent: list[Frame], cuts: list[int]) -> None:
    stream = b"".join(wire.encode_frame(f) for f in sent)
    dec, got = wire.FrameDecoder(), []
    for chunk in _chunks(stream, cuts):
        got += dec.feed(chunk)
    assert got == sent
    assert dec.buffered == 0 and dec.position == len(stream)


@PROPS
@given(frames)
def test_encode_decode_is_identity_both_ways(frame: Frame) -> None:
    data = wire.encode_frame(frame)
    assert len(data) == int.from_bytes(data[8:10], "big") <= 65535
    assert data[:5] == b"pine\x00" and data[5] == frame.type and data[7] == frame.hop_limit
    back = wire.decode_frame(data)
    assert back == frame
    assert wire.encode_frame(back) == data


@PROPS
@given(U64)
def test_varu64_roundtrip_and_length(n: int) -> None:
    data = wire.encode_varu64(n)
    assert len(data) == max(1, -(-n.bit_length() // 7))
    assert data[0] != 0x80 and all(b & 0x80 for b in data[:-1]) and not data[-1] & 0x80
    assert wire.decode_varu64(data, 0, minimal=True) == (n, len(data))


@PROPS
@given(announcements)
def test_announcement_roundtrip(a: Announcement) -> None:
    assert wire.decode_announcement(wire.encode_announcement(a)) == a


@PROPS
@given(signed_payloads)
def test_signed_root_payload_roundtrip(p: SignedRootPayload) -> None:
    assert wire.decode_signed_root_payload(wire.encode_signed_root_payload(p)) == p


@PROPS
@given(legacy_bootstrap_payloads, legacy_path_payloads, path_ids)
def test_legacy_payload_roundtrip(b: LegacyBootstrapPayload, p: LegacyPathPayload, path_id: bytes) -> None:
    assert wire.decode_legacy_bootstrap_payload(wire.encode_legacy_bootstrap_payload(b)) == b
    assert wire.decode_legacy_path_payload(wire.encode_legacy_path_payload(p)) == p
    assert wire.decode_legacy_teardown_payload(wire.encode_legacy_teardown_payload(path_id)) == path_id


def _only_protocol_errors(data: bytes) -> None:
    """Every decoder on ``data``: success or a ProtocolError; anything else propagates and fails."""
    with contextlib.suppress(ProtocolError):
        wire.FrameDecoder().feed(data)
    with contextlib.suppress(ProtocolError):
        wire.FrameDecoder().feed_raw(data)
    with contextlib.suppress(ProtocolError):
        wire.decode_frame(data)
    with contextlib.suppress(ProtocolError):
        wire.verify_announcement(wire.decode_announcement(data))
    with contextlib.suppress(ProtocolError):
        wire.decode_signed_root_payload(data)
    with contextlib.suppress(ProtocolError):
        wire.decode_handshake(data)
    for decode in LEGACY_PAYLOADS.values():
        with contextlib.suppress(ProtocolError):
            decode(data)
    with contextlib.suppress(ProtocolError):
        wire.decode_varu64(data, 0, minimal=True)
    with contextlib.suppress(ProtocolError):
        wire.decode_coords(data, 0)
    wire.decode_ping(data)
    wire.increment_ping_hops(data)


@PROPS
@given(st.binary(max_size=300))
def test_garbage_raises_only_protocol_errors(junk: bytes) -> None:
    _only_protocol_errors(junk)


@PROPS
@given(st.one_of(st.integers(0, 7), st.integers(0xE0, 0xE4)), hops, st.binary(max_size=200))
def test_well_framed_garbage_bodies_raise_only_protocol_errors(t: int, hop: int, body: bytes) -> None:
    """A correct header around a random body, so the per-type body parsers see the junk."""
    data = b"pine\x00" + bytes((t, 0, hop)) + (10 + len(body)).to_bytes(2, "big") + body
    _only_protocol_errors(data)
    with contextlib.suppress(ProtocolError):
        frame = wire.decode_frame(data)
        assert wire.decode_frame(wire.encode_frame(frame)) == frame


_mutation = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 2**16), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 2**16), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 2**16), st.just(0)),
)


@PROPS
@given(st.one_of(frames, announcements.map(wire.announcement_frame)), st.lists(_mutation, min_size=1, max_size=4))
def test_mutated_frames_raise_only_protocol_errors(frame: Frame, mutations: list[tuple[str, int, int]]) -> None:
    data = bytearray(wire.encode_frame(frame))
    for op, pos, val in mutations:
        pos %= len(data) + (op == "insert")
        if op == "set" and data:
            data[pos % len(data)] = val
        elif op == "insert":
            data.insert(pos, val)
        elif data:
            del data[pos % len(data)]
    _only_protocol_errors(bytes(data))
    with contextlib.suppress(ProtocolError):
        decoded = wire.decode_frame(bytes(data))
        if decoded.type == FrameType.TREE_ANNOUNCEMENT:
            _only_protocol_errors(decoded.payload)
        elif decoded.type in (FrameType.BOOTSTRAP, FrameType.WAKEUP_BROADCAST):
            with contextlib.suppress(ProtocolError):
                wire.decode_signed_root_payload(decoded.payload)
        elif decoded.type in LEGACY_PAYLOADS:
            with contextlib.suppress(ProtocolError):
                LEGACY_PAYLOADS[decoded.type](decoded.payload)


@PROPS
@given(
    st.lists(frames, min_size=1, max_size=5),
    st.binary(min_size=1, max_size=40),
    st.lists(st.integers(0, 2**16), max_size=6),
)
def test_decoder_on_valid_then_garbage(sent: list[Frame], junk: bytes, cuts: list[int]) -> None:
    """Frames before the garbage come out intact (when fed separately); the garbage raises only ProtocolError."""
    stream = b"".join(wire.encode_frame(f) for f in sent)
    dec, got = wire.FrameDecoder(), []
    for chunk in _chunks(stream, cuts):
        got += dec.feed(chunk)
    assert got == sent
    with contextlib.suppress(ProtocolError):
        dec.feed(junk)
        assert dec.buffered <= len(junk)


@given(frames, hops, st.binary(max_size=64))
def test_the_hot_path_copies_equal_dataclasses_replace(frame: Frame, hop: int, payload: bytes) -> None:
    """with_hop_limit, with_payload and without_destination_coords (the forwarding and flooding copies, written
    out for speed) change the one field dataclasses.replace would, and keep every other."""
    assert with_hop_limit(frame, hop) == dataclasses.replace(frame, hop_limit=hop)
    assert with_payload(frame, payload) == dataclasses.replace(frame, payload=payload)
    assert without_destination_coords(frame) == dataclasses.replace(frame, destination_coords=())
