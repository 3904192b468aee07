"""Byte-exact Pinecone wire codec (PROTOCOL.md §3.2, §4, §7.4, §8): protocol types <-> bytes, plus FrameDecoder.

No I/O, no clocks. Decoders raise only ``ProtocolError`` subclasses (``MalformedFrame``, ``HandshakeRejected``,
``BadSignature``) on bad input; any other exception is a bug. Encoders raise ``ValueError`` for values that
cannot be encoded (a caller bug): a 31-byte key, a frame over 65 535 bytes (§4.3: drop it locally), ...

Decisions where the spec leaves room:
  * A Keepalive with a body decodes fine and the body is ignored (the reference does not check it).
  * An unknown type decodes to ``Frame(type=t, hop_limit, payload=body)``; the router drops it (§4.3).
  * The older variant's types 0xE0-0xE3 (§7.4) are known types: their envelope (plen, keys, coordinates) is
    checked like the others', and their payloads are left to :mod:`node.core.payloads` (as for a bootstrap,
    whose malformed payload is dropped, not a disconnect). Every node decodes them, whatever its variant:
    a garbled one costs even a reference-variant node the peer, where §4.3 would drop an unknown type
    silently. Only a broken or hostile peer can send one, since variants never peer (§7.4 capabilities).
  * Header version and extra bytes are ignored on receipt. The hop limit is decoded for every type and
    encoded as given (callers leave it 0 where §4.9 says "sent as 0").
  * Varu64s are strict (<= 10 bytes, < 2**64). Only root announcements reject non-minimal encodings (§4.1):
    their bytes are re-signed; signed root payloads are verified over a minimal re-encoding anyway.
"""


from __future__ import annotations

import struct
from dataclasses import fields
from typing import Final

from node.core.codec import (
    CAPABILITIES,
    EMPTY_COORDS,
    FRAME_MAGIC,
    FRAME_VERSION,
    HANDSHAKE_LEN,
    HANDSHAKE_VERSION,
    PING,
    PING_LEN,
    PING_PREAMBLE,
    PONG,
    SIGHOP_MIN_LEN,
    SMALL_VARU64,
    check_key,
    decode_coords,
    decode_varu64,
    encode_coords,
    encode_varu64,
    read_coords,
    read_varu64,
)
from node.core.errors import MalformedFrame
from node.core.payloads import (
    announcement_frame,
    decode_announcement,
    decode_handshake,
    decode_ping,
    decode_legacy_bootstrap_payload,
    decode_legacy_path_payload,
    decode_legacy_teardown_payload,
    decode_signed_root_payload,
    encode_announcement,
    encode_handshake,
    encode_legacy_bootstrap_payload,
    encode_legacy_path_payload,
    encode_legacy_teardown_payload,
    encode_ping,
    encode_signed_root_payload,
    increment_ping_hops,
    legacy_dest_signed_bytes,
    legacy_source_signed_bytes,
    make_signed_root_payload,
    sign_announcement_for_port,
    signed_root,
    signed_root_protected_bytes,
    verify_announcement,
    verify_signed_root_payload,
)
from node.core.types import (
    FULL_MASK,
    HEADER_LEN,
    INITIAL_WATERMARK,
    KEY_LEN,
    MAX_FRAME_LEN,
    Frame,
    FrameType,
    LegacyFrameType,
    Watermark,
)

__all__ = [
    "FRAME_MAGIC", "FRAME_VERSION", "HANDSHAKE_LEN", "HANDSHAKE_VERSION", "CAPABILITIES", "SIGHOP_MIN_LEN",
    "PING_LEN", "PING_PREAMBLE", "PING", "PONG",
    "encode_varu64", "decode_varu64", "encode_coords", "decode_coords",
    "encode_frame", "decode_frame", "FrameDecoder",
    "encode_announcement", "decode_announcement", "sign_announcement_for_port", "verify_announcement",
    "announcement_frame",
    "encode_signed_root_payload", "decode_signed_root_payload", "signed_root_protected_bytes",
    "make_signed_root_payload", "verify_signed_root_payload", "signed_root",
    "encode_handshake", "decode_handshake", "encode_ping", "decode_ping", "increment_ping_hops",
    "legacy_source_signed_bytes", "legacy_dest_signed_bytes",
    "encode_legacy_bootstrap_payload", "decode_legacy_bootstrap_payload",
    "encode_legacy_path_payload", "decode_legacy_path_payload",
    "encode_legacy_teardown_payload", "decode_legacy_teardown_payload",
]  # fmt: skip

_KEEPALIVE: Final = 0
_TREE: Final = 1
_BOOTSTRAP: Final = 2
_TRAFFIC: Final = 3
_BROADCAST: Final = 4
_TYPES: Final = tuple(FrameType)  # index by type byte for the known types
_NAMES: Final = ("keepalive", "tree announcement", "bootstrap", "traffic", "wakeup broadcast")
_L_BOOT: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP)  # §7.4: 0xE0-0xE3
_L_ACK: Final = int(LegacyFrameType.LEGACY_BOOTSTRAP_ACK)
_L_SETUP: Final = int(LegacyFrameType.LEGACY_SETUP)
_L_TEARDOWN: Final = int(LegacyFrameType.LEGACY_TEARDOWN)
_LEGACY_TYPES: Final = tuple(LegacyFrameType)
_LEGACY_NAMES: Final = {_L_BOOT: "legacy bootstrap", _L_ACK: "legacy bootstrap ACK", _L_SETUP: "legacy setup",
                 _L_TEARDOWN: "legacy teardown"}  # fmt: skip

_HDR: Final = struct.Struct(">4sBBBBH")  # magic, version, type, extra, hop limit, total length
_HDR_PLEN: Final = struct.Struct(">4sBBBBHH")  # ... plus the u16 payload length every known body starts with
_Coords = tuple[int, ...]
_KEEPALIVE_FRAME: Final = _HDR.pack(FRAME_MAGIC, FRAME_VERSION, _KEEPALIVE, 0, 0, HEADER_LEN)


def _tname(t: int) -> str:
    if isinstance(t, int) and 0 <= t < len(_NAMES):
        return _NAMES[t]
    return _LEGACY_NAMES.get(t, f"type-{t!r}")


# ------------------------------------------------------------- frames (§4.3/4.4)
def _wm_bytes(wm: Watermark) -> bytes:
    seq = wm.seq
    return check_key(wm.key, "watermark key") + (SMALL_VARU64[seq] if 0 <= seq < 128 else encode_varu64(seq))


def encode_frame(frame: Frame) -> bytes:
    """Encode one frame, header included. Fields its type does not carry are ignored.

    Raises ValueError when it cannot be encoded: a key that is not 32 bytes, a hop limit or type outside
    a byte, a port or sequence outside varu64, or a total length over 65 535 bytes.
    """
    t = frame.type
    try:
        if t == _TRAFFIC:
            dc = frame.destination_coords
            dcb = encode_coords(dc) if dc else EMPTY_COORDS
            sc = frame.source_coords
            scb = encode_coords(sc) if sc else EMPTY_COORDS
            wmb = b"" if dc else _wm_bytes(frame.watermark)
            dk, sk, payload = frame.destination_key, frame.source_key, frame.payload
            if len(dk) != KEY_LEN or len(sk) != KEY_LEN:
                raise ValueError(f"traffic keys must be {KEY_LEN} bytes, got {len(dk)} and {len(sk)}")
            total = 12 + 2 * KEY_LEN + len(dcb) + len(scb) + len(wmb) + len(payload)
            parts: tuple[bytes, ...] = (dcb, scb, dk, sk, wmb, payload)
        elif t == _BOOTSTRAP:
            payload = frame.payload
            dk = check_key(frame.destination_key, "bootstrap destination key")
            wmb = _wm_bytes(frame.watermark)
            total = 12 + KEY_LEN + len(wmb) + len(payload)
            parts = (dk, wmb, payload)
        elif t == _TREE:
            payload = frame.payload
            total = 12 + len(payload)
            parts = (payload,)
        elif t == _BROADCAST:
            payload = frame.payload
            total = 12 + KEY_LEN + len(payload)
            parts = (check_key(frame.source_key, "broadcast source key"), payload)
        elif t == _KEEPALIVE:
            hop = frame.hop_limit
            return _HDR.pack(FRAME_MAGIC, FRAME_VERSION, t, 0, hop, HEADER_LEN) if hop else _KEEPALIVE_FRAME
        elif _L_BOOT <= t <= _L_TEARDOWN:
            payload = frame.payload
            parts = _legacy_fields(frame, t) + (payload,)
            total = 12 + sum(len(p) for p in parts)
        else:  # unknown type: the payload is the raw body
            payload, total = frame.payload, HEADER_LEN + len(frame.payload)
            if total <= MAX_FRAME_LEN:
                return _HDR.pack(FRAME_MAGIC, FRAME_VERSION, t, 0, frame.hop_limit, total) + payload
        if total > MAX_FRAME_LEN:
            raise ValueError(f"{_tname(t)} frame would be {total} bytes, over the {MAX_FRAME_LEN}-byte limit")
        header = _HDR_PLEN.pack(FRAME_MAGIC, FRAME_VERSION, t, 0, frame.hop_limit, total, len(payload))
        return b"".join((header, *parts))
    except struct.error as exc:
        raise ValueError(f"cannot encode {_tname(t)} frame: {exc}") from None


def _legacy_fields(frame: Frame, t: int) -> tuple[bytes, ...]:
    """The addressing fields of a §7.4 frame, between ``plen`` and the payload, in wire order."""
    name = _LEGACY_NAMES[t]
    if t == _L_BOOT:
        return (check_key(frame.destination_key, f"{name} path key"), encode_coords(frame.source_coords))
    if t == _L_TEARDOWN:
        return (check_key(frame.destination_key, f"{name} path key"),)
    keys = (check_key(frame.destination_key, f"{name} destination key"),
            check_key(frame.source_key, f"{name} source key"))  # fmt: skip
    if t == _L_ACK:
        return (encode_coords(frame.destination_coords), encode_coords(frame.source_coords), *keys)
    return (encode_coords(frame.destination_coords), *keys)


def decode_frame(data: bytes | memoryview) -> Frame:
    """Decode exactly one complete frame, header included; error offsets count from the frame start.

    Raises MalformedFrame ("bad_magic", "short_length", "truncated", "trailing_bytes", "bad_coords",
    "bad_varu64", "bad_payload_length"); any other exception is a bug.
    """
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    if n < HEADER_LEN:
        raise MalformedFrame("truncated", f"frame of {n} bytes is shorter than the {HEADER_LEN}-byte header", offset=n)
    magic, _version, t, _extra, hop_limit, length = _HDR.unpack_from(data)
    if magic != FRAME_MAGIC:
        raise _bad_magic(magic)
    if length < HEADER_LEN:
        raise _short_length(length)
    if length != n:
        reason = "truncated" if length > n else "trailing_bytes"
        detail = f"frame length field says {length} bytes but {n} were given"
        raise MalformedFrame(reason, detail, offset=8, frame_type=t)
    return _decode_body(data, t, hop_limit, n)


def _bad_magic(magic: bytes) -> MalformedFrame:
    return MalformedFrame("bad_magic", f"frame magic {magic.hex()} is not 70696e65 ('pine')", offset=0)


def _short_length(length: int) -> MalformedFrame:
    return MalformedFrame("short_length", f"frame length {length} below header size {HEADER_LEN}", offset=8)


def _check_payload(plen: int, i: int, n: int, t: int) -> None:
    if n - i != plen:
        detail = f"{_tname(t)} payload length field says {plen} but {n - i} bytes remain"
        raise MalformedFrame("bad_payload_length", detail, offset=10, frame_type=t)


def _frame(
    t: FrameType | LegacyFrameType | int, hop: int, dk: bytes, sk: bytes, dc: _Coords, sc: _Coords, wm: Watermark, p: bytes
) -> Frame:
    """``Frame(...)``; interpreted, minus the frozen-dataclass ``__init__`` cost: it sets the very same slots."""
    if not _SHORTCUT:
        return Frame(t, hop, dk, sk, dc, sc, wm, p)
    f = _new(Frame)
    _set(f, "type", t)
    _set(f, "hop_limit", hop)
    _set(f, "destination_key", dk)
    _set(f, "source_key", sk)
    _set(f, "destination_coords", dc)
    _set(f, "source_coords", sc)
    _set(f, "watermark", wm)
    _set(f, "payload", p)
    return f


_new, _set = object.__new__, object.__setattr__
_FRAME_FIELDS: Final = "type hop_limit destination_key source_key destination_coords source_coords watermark payload"


def _shortcut_works() -> bool:
    """Whether :func:`_frame` may set a Frame's slots itself: not when types.py changed shape (stay correct,
    lose the shortcut), nor for a Frame compiled by mypyc (whose own constructor is as cheap, and the only way)."""
    if " ".join(f.name for f in fields(Frame)) != _FRAME_FIELDS or hasattr(Frame, "__post_init__"):
        return False
    try:
        _new(Frame)
    except TypeError:  # "object.__new__(Frame) is not safe": a compiled class
        return False
    return True


_SHORTCUT: Final = _shortcut_works()
_new_tuple: Final = tuple.__new__  # builds a NamedTuple in C (calling the class runs a Python-level __new__)


def _decode_body(data: bytes, t: int, hop_limit: int, n: int) -> Frame:
    """Parse the body of a frame whose header is already checked (``len(data) == n``)."""
    if t > _BROADCAST:
        if _L_BOOT <= t <= _L_TEARDOWN:
            return _decode_legacy_body(data, t, hop_limit, n)
        return _frame(t, hop_limit, b"", b"", (), (), INITIAL_WATERMARK, data[HEADER_LEN:])
    if t == _KEEPALIVE:
        # A keepalive body is ignored, as the reference does.
        return _frame(_TYPES[t], hop_limit, b"", b"", (), (), INITIAL_WATERMARK, b"")
    if n < 12:
        raise MalformedFrame("truncated", f"{_NAMES[t]} frame ends before its payload length", offset=n, frame_type=t)
    plen = (data[10] << 8) | data[11]
    if t == _TRAFFIC:
        dc, i = read_coords(data, 12, n, "traffic destination coordinates", t)
        sc, i = read_coords(data, i, n, "traffic source coordinates", t)
        if n - i < 2 * KEY_LEN:
            raise MalformedFrame("truncated", "traffic frame ends inside its keys", offset=n, frame_type=t)
        dk = data[i : i + KEY_LEN]
        sk = data[i + KEY_LEN : i + 2 * KEY_LEN]
        i += 2 * KEY_LEN
        if dc:
            wm = INITIAL_WATERMARK
        else:
            wm, i = _read_watermark(data, i, n, t)
        if n - i != plen:
            _check_payload(plen, i, n, t)
        return _frame(_TYPES[t], hop_limit, dk, sk, dc, sc, wm, data[i:])
    if t == _BOOTSTRAP:
        if n < 12 + KEY_LEN:
            raise MalformedFrame("truncated", "bootstrap frame ends inside its destination key", offset=n, frame_type=t)
        wm, i = _read_watermark(data, 12 + KEY_LEN, n, t)
        _check_payload(plen, i, n, t)
        return _frame(_TYPES[t], hop_limit, data[12 : 12 + KEY_LEN], b"", (), (), wm, data[i:])
    if t == _TREE:
        _check_payload(plen, 12, n, t)
        return _frame(_TYPES[t], hop_limit, b"", b"", (), (), INITIAL_WATERMARK, data[12:])
    if n < 12 + KEY_LEN:
        raise MalformedFrame("truncated", "wakeup broadcast frame ends inside its source key", offset=n, frame_type=t)
    _check_payload(plen, 12 + KEY_LEN, n, t)
    return _frame(_TYPES[t], hop_limit, b"", data[12 : 12 + KEY_LEN], (), (), INITIAL_WATERMARK, data[12 + KEY_LEN :])


def _decode_legacy_body(data: bytes, t: int, hop_limit: int, n: int) -> Frame:
    """§7.4: the body of a LegacyBootstrap / BootstrapACK / Setup / Teardown (header already checked)."""
    name = _LEGACY_NAMES[t]
    if n < 12:
        raise MalformedFrame("truncated", f"{name} frame ends before its payload length", offset=n, frame_type=t)
    plen = (data[10] << 8) | data[11]
    dk = sk = b""
    dc: _Coords = ()
    sc: _Coords = ()
    i = 12
    if t == _L_BOOT or t == _L_TEARDOWN:
        if n - i < KEY_LEN:
            raise MalformedFrame("truncated", f"{name} frame ends inside its path key", offset=n, frame_type=t)
        dk = data[i : i + KEY_LEN]
        i += KEY_LEN
        if t == _L_BOOT:
            sc, i = read_coords(data, i, n, f"{name} source coordinates", t)
    else:
        dc, i = read_coords(data, i, n, f"{name} destination coordinates", t)
        if t == _L_ACK:
            sc, i = read_coords(data, i, n, f"{name} source coordinates", t)
        if n - i < 2 * KEY_LEN:
            raise MalformedFrame("truncated", f"{name} frame ends inside its keys", offset=n, frame_type=t)
        dk = data[i : i + KEY_LEN]
        sk = data[i + KEY_LEN : i + 2 * KEY_LEN]
        i += 2 * KEY_LEN
    _check_payload(plen, i, n, t)
    return _frame(_LEGACY_TYPES[t - _L_BOOT], hop_limit, dk, sk, dc, sc, INITIAL_WATERMARK, data[i:])


def _read_watermark(data: bytes, i: int, n: int, t: int) -> tuple[Watermark, int]:
    if n - i < KEY_LEN + 1:
        raise MalformedFrame("truncated", f"{_NAMES[t]} frame ends inside its watermark", offset=n, frame_type=t)
    key = data[i : i + KEY_LEN]
    i += KEY_LEN
    b = data[i]
    if b < 0x80:
        seq, i = b, i + 1
    elif n - i >= 2 and data[i + 1] < 0x80:
        seq, i = ((b & 0x7F) << 7) | data[i + 1], i + 2
    else:
        seq, i = read_varu64(data, i, n, f"{_NAMES[t]} watermark sequence", t=t)
    if seq == 0 and key == FULL_MASK:
        return INITIAL_WATERMARK, i
    return _new_tuple(Watermark, (key, seq)), i  # Watermark(key, seq)


class FrameDecoder:
    """Split a byte stream into frames, whatever the chunking (§4.3).

    Holds at most one incomplete frame (< 65 535 bytes) between calls. After it raises MalformedFrame the
    stream is out of sync: close the peer, drop the decoder. Error offsets count from the offending frame's
    start; ``position`` is the number of stream bytes split off as complete frames so far.
    """

    __slots__ = ("_buf", "position")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.position = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add ``data``; return every frame it completes, in order.

        Raises MalformedFrame for bad framing or a malformed known-type body;
        frames completed earlier in the same call are then discarded too.
        """
        return [_decode_body(f, t, f[7], len(f)) for t, f in self.feed_raw(data)]

    def feed_raw(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """Like :meth:`feed` but only frames: return (type, whole frame bytes).

        Checks the magic and length field only (raises MalformedFrame
        "bad_magic" / "short_length"); bodies are not parsed.
        """
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray | memoryview = buf
        else:
            src = data
        out: list[tuple[int, bytes]] = []
        n = len(src)
        i = 0
        with memoryview(src) as mv:
            while n - i >= HEADER_LEN:
                if mv[i : i + 4] != FRAME_MAGIC:
                    raise _bad_magic(bytes(mv[i : i + 4]))
                length = (mv[i + 8] << 8) | mv[i + 9]
                if length < HEADER_LEN:
                    raise _short_length(length)
                if n - i < length:
                    break
                out.append((mv[i + 5], bytes(mv[i : i + length])))
                i += length
                self.position += length
            k = min(n - i, 4)
            if k and mv[i : i + k] != FRAME_MAGIC[:k]:
                raise _bad_magic(bytes(mv[i : i + k]))
            tail = b"" if src is buf else bytes(mv[i:])
        if src is buf:
            del buf[:i]
        else:
            buf += tail
        return out
