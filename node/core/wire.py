"""Byte-exact Pinecone wire codec (PROTOCOL.md §3.2, §4, §8): protocol types <-> bytes, plus FrameDecoder.

No I/O, no clocks. Decoders raise only ``ProtocolError`` subclasses (``MalformedFrame``, ``HandshakeRejected``,
``BadSignature``) on bad input; any other exception is a bug. Encoders raise ``ValueError`` for values that
cannot be encoded (a caller bug): a 31-byte key, a frame over 65 535 bytes (§4.3: drop it locally), ...

Decisions where the spec leaves room:
  * A Keepalive with a body decodes fine and the body is ignored (the reference does not check it).
  * An unknown type decodes to ``Frame(type=t, hop_limit, payload=body)``; the router drops it (§4.3).
  * Header version and extra bytes are ignored on receipt. The hop limit is decoded for every type and
    encoded as given (callers leave it 0 where §4.9 says "sent as 0").
  * Varu64s are strict (<= 10 bytes, < 2**64). Only root announcements reject non-minimal encodings (§4.1):
    their bytes are re-signed; signed root payloads are verified over a minimal re-encoding anyway.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import fields

from node.core import crypto
from node.core.crypto import Identity
from node.core.errors import BadSignature, HandshakeRejected, MalformedFrame
from node.core.types import (
    FULL_MASK,
    HEADER_LEN,
    INITIAL_WATERMARK,
    KEY_LEN,
    MAX_FRAME_LEN,
    SIG_LEN,
    Announcement,
    Frame,
    FrameType,
    SigHop,
    SignedRootPayload,
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
    "make_signed_root_payload", "verify_signed_root_payload",
    "encode_handshake", "decode_handshake", "encode_ping", "decode_ping", "increment_ping_hops",
]  # fmt: skip

FRAME_MAGIC = b"pine"
FRAME_VERSION = 0
HANDSHAKE_VERSION = 0x01
HANDSHAKE_LEN = 104  # 8 + 32 + 64
CAPABILITIES = 0x3B  # LengthenedRootInterval|CryptographicSetups|DedupedCoordinateInfo|SoftState|HybridRouting
SIGHOP_MIN_LEN = 1 + KEY_LEN + SIG_LEN  # 97
PING_PREAMBLE = b"pineping"
PING_LEN = 75
PING, PONG = 0, 1

_KEEPALIVE, _TREE, _BOOTSTRAP, _TRAFFIC, _BROADCAST = 0, 1, 2, 3, 4
_TYPES = tuple(FrameType)  # index by type byte for the known types
_NAMES = ("keepalive", "tree announcement", "bootstrap", "traffic", "wakeup broadcast")

_HDR = struct.Struct(">4sBBBBH")  # magic, version, type, extra, hop limit, total length
_HDR_PLEN = struct.Struct(">4sBBBBHH")  # ... plus the u16 payload length every known body starts with
_U16 = struct.Struct(">H")
_HS_HEAD = struct.Struct(">B3xI")
_PING = struct.Struct(">8sBH32s32s")
_SMALL = tuple(bytes((i,)) for i in range(128))
_EMPTY_COORDS = b"\x00\x00"
_Coords = tuple[int, ...]
_Verify = Callable[[bytes, bytes, bytes], bool]  # crypto.verify's shape: (key, message, signature) -> ok
_KEEPALIVE_FRAME = _HDR.pack(FRAME_MAGIC, FRAME_VERSION, _KEEPALIVE, 0, 0, HEADER_LEN)


def _tname(t: int) -> str:
    return _NAMES[t] if isinstance(t, int) and 0 <= t < len(_NAMES) else f"type-{t!r}"


# ---------------------------------------------------------------- varu64 (§4.1)
def encode_varu64(n: int) -> bytes:
    """Minimal big-endian base-128 encoding of ``n``. Raises ValueError outside 0..2**64-1."""
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0 or n >> 64:
        raise ValueError(f"varu64 value {n} outside 0..2**64-1")
    out = bytearray((n & 0x7F,))
    n >>= 7
    while n:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.reverse()
    return bytes(out)


def _read_varu64(
    buf: bytes | memoryview, i: int, end: int, what: str, *,
    minimal: bool = False, overrun: str = "truncated", t: int | None = None,
) -> tuple[int, int]:  # fmt: skip
    """Decode one varu64 at ``buf[i]`` that must end before ``end``; ``what`` names the field in errors."""
    start, v = i, 0
    if minimal and i < end and buf[i] == 0x80:
        raise MalformedFrame("non_minimal_varu64", f"{what} is a non-minimal varu64", offset=i, frame_type=t)
    limit = min(end, start + 10)
    while i < limit:
        b = buf[i]
        i += 1
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            if v >> 64:
                raise MalformedFrame("bad_varu64", f"{what} varu64 {v} is 2**64 or more", offset=start, frame_type=t)
            return v, i
    if limit == start + 10:
        raise MalformedFrame("bad_varu64", f"{what} is a varu64 longer than 10 bytes", offset=start, frame_type=t)
    raise MalformedFrame(overrun, f"{what} is a varu64 cut off after {i - start} bytes", offset=start, frame_type=t)


def decode_varu64(buf: bytes | memoryview, offset: int, *, minimal: bool = False) -> tuple[int, int]:
    """Decode the varu64 at ``buf[offset]``; return (value, offset after it).

    Raises MalformedFrame: "truncated" (no terminating byte), "bad_varu64" (over 10 bytes or >= 2**64),
    "non_minimal_varu64" (``minimal`` and a leading 0x80). Raises ValueError for a negative ``offset``.
    """
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    return _read_varu64(buf, offset, len(buf), "value", minimal=minimal)


# ------------------------------------------------------------ coordinates (§4.2)
def encode_coords(ports: Iterable[int]) -> bytes:
    """``u16 byte length ‖ varu64 ports``. Raises ValueError for bad ports or over 65 535 bytes."""
    ports = tuple(ports)
    if not ports:
        return _EMPTY_COORDS
    small = min(ports) >= 0 and max(ports) < 128
    body = bytes(ports) if small else b"".join([encode_varu64(p) for p in ports])
    if len(body) > 0xFFFF:
        raise ValueError(f"coordinates of {len(body)} bytes exceed the u16 length field")
    return _U16.pack(len(body)) + body


def _read_coords(buf: bytes | memoryview, i: int, end: int, what: str, t: int | None) -> tuple[tuple[int, ...], int]:
    """Coordinates at ``buf[i]`` ending before ``end``; fast paths for empty and all-one-byte port lists."""
    if end - i < 2:
        raise MalformedFrame("truncated", f"{what} length needs 2 bytes, {end - i} remain", offset=i, frame_type=t)
    clen = (buf[i] << 8) | buf[i + 1]
    if not clen:
        return (), i + 2
    i += 2
    cend = i + clen
    if cend > end:
        detail = f"{what} declare {clen} bytes, only {end - i} remain"
        raise MalformedFrame("bad_coords", detail, offset=i - 2, frame_type=t)
    seg = buf[i:cend]
    if max(seg) < 0x80:
        return tuple(seg), cend
    ports = []
    while i < cend:
        v, i = _read_varu64(buf, i, cend, f"{what} port", overrun="bad_coords", t=t)
        ports.append(v)
    return tuple(ports), i


def decode_coords(buf: bytes | memoryview, offset: int) -> tuple[tuple[int, ...], int]:
    """Decode coordinates at ``buf[offset]``; return (ports, offset after them).

    Raises MalformedFrame: "truncated" (no room for the length), "bad_coords" (declared length past the
    data, or a port crossing it), "bad_varu64". Raises ValueError for a negative ``offset``.
    """
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    return _read_coords(buf, offset, len(buf), "coordinates", None)


# ------------------------------------------------------------- frames (§4.3/4.4)
def _key(k: bytes, what: str) -> bytes:
    if len(k) != KEY_LEN:
        raise ValueError(f"{what} must be {KEY_LEN} bytes, got {len(k)}")
    return k


def _wm_bytes(wm: Watermark) -> bytes:
    seq = wm.seq
    return _key(wm.key, "watermark key") + (_SMALL[seq] if 0 <= seq < 128 else encode_varu64(seq))


def encode_frame(frame: Frame) -> bytes:
    """Encode one frame, header included. Fields its type does not carry are ignored.

    Raises ValueError when it cannot be encoded: a key that is not 32 bytes, a hop limit or type outside
    a byte, a port or sequence outside varu64, or a total length over 65 535 bytes.
    """
    t = frame.type
    try:
        if t == _TRAFFIC:
            dc = frame.destination_coords
            dcb = encode_coords(dc) if dc else _EMPTY_COORDS
            sc = frame.source_coords
            scb = encode_coords(sc) if sc else _EMPTY_COORDS
            wmb = b"" if dc else _wm_bytes(frame.watermark)
            dk, sk, payload = frame.destination_key, frame.source_key, frame.payload
            if len(dk) != KEY_LEN or len(sk) != KEY_LEN:
                raise ValueError(f"traffic keys must be {KEY_LEN} bytes, got {len(dk)} and {len(sk)}")
            total = 12 + 2 * KEY_LEN + len(dcb) + len(scb) + len(wmb) + len(payload)
            parts: tuple[bytes, ...] = (dcb, scb, dk, sk, wmb, payload)
        elif t == _BOOTSTRAP:
            payload = frame.payload
            dk = _key(frame.destination_key, "bootstrap destination key")
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
            parts = (_key(frame.source_key, "broadcast source key"), payload)
        elif t == _KEEPALIVE:
            hop = frame.hop_limit
            return _HDR.pack(FRAME_MAGIC, FRAME_VERSION, t, 0, hop, HEADER_LEN) if hop else _KEEPALIVE_FRAME
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
        detail = f"{_NAMES[t]} payload length field says {plen} but {n - i} bytes remain"
        raise MalformedFrame("bad_payload_length", detail, offset=10, frame_type=t)


def _frame(t: int, hop: int, dk: bytes, sk: bytes, dc: _Coords, sc: _Coords, wm: Watermark, p: bytes) -> Frame:
    """``Frame(...)`` minus the frozen-dataclass ``__init__`` cost: it sets the very same slots."""
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
_FRAME_FIELDS = "type hop_limit destination_key source_key destination_coords source_coords watermark payload"
if " ".join(f.name for f in fields(Frame)) != _FRAME_FIELDS or hasattr(Frame, "__post_init__"):
    _frame = Frame  # type: ignore[assignment]  # types.py changed shape: stay correct, lose the shortcut


def _decode_body(data: bytes, t: int, hop_limit: int, n: int) -> Frame:
    """Parse the body of a frame whose header is already checked (``len(data) == n``)."""
    if t > _BROADCAST:
        return _frame(t, hop_limit, b"", b"", (), (), INITIAL_WATERMARK, data[HEADER_LEN:])
    if t == _KEEPALIVE:
        # A keepalive body is ignored, as the reference does.
        return _frame(_TYPES[t], hop_limit, b"", b"", (), (), INITIAL_WATERMARK, b"")
    if n < 12:
        raise MalformedFrame("truncated", f"{_NAMES[t]} frame ends before its payload length", offset=n, frame_type=t)
    plen = (data[10] << 8) | data[11]
    if t == _TRAFFIC:
        dc, i = _read_coords(data, 12, n, "traffic destination coordinates", t)
        sc, i = _read_coords(data, i, n, "traffic source coordinates", t)
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
        seq, i = _read_varu64(data, i, n, f"{_NAMES[t]} watermark sequence", t=t)
    if seq == 0 and key == FULL_MASK:
        return INITIAL_WATERMARK, i
    return Watermark(key, seq), i


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


# -------------------------------------------------------- root announcement (§4.5)
def encode_announcement(a: Announcement) -> bytes:
    """``RootKey ‖ varu64 RootSeq ‖ (varu64 Port ‖ Key ‖ Sig)*``. Raises ValueError on bad field sizes."""
    parts = [_key(a.root_key, "root key"), encode_varu64(a.root_seq)]
    for idx, h in enumerate(a.hops):
        if len(h.signature) != SIG_LEN:
            raise ValueError(f"hop {idx} signature must be {SIG_LEN} bytes, got {len(h.signature)}")
        parts += (encode_varu64(h.port), _key(h.key, f"hop {idx} key"), h.signature)
    return b"".join(parts)


def decode_announcement(payload: bytes | memoryview) -> Announcement:
    """Parse a root announcement (structure only; see :func:`verify_announcement`).

    Raises MalformedFrame ("bad_announcement", "non_minimal_varu64",
    "bad_varu64"); offsets are counted from the payload start.
    """
    buf = payload if type(payload) is bytes else bytes(payload)
    n = len(buf)
    if n < KEY_LEN + 1:
        raise MalformedFrame("bad_announcement", f"root announcement of {n} bytes, under 33", offset=n, frame_type=1)
    root_seq, i = _read_varu64(buf, KEY_LEN, n, "root sequence", minimal=True, overrun="bad_announcement", t=_TREE)
    hops: list[SigHop] = []
    while n - i >= SIGHOP_MIN_LEN:
        k = len(hops)
        port, i = _read_varu64(buf, i, n, f"hop {k} port", minimal=True, overrun="bad_announcement", t=_TREE)
        if n - i < KEY_LEN + SIG_LEN:
            detail = f"hop {k} needs 96 bytes of key and signature, {n - i} remain"
            raise MalformedFrame("bad_announcement", detail, offset=i, frame_type=_TREE)
        hops.append(SigHop(port, buf[i : i + KEY_LEN], buf[i + KEY_LEN : i + KEY_LEN + SIG_LEN]))
        i += KEY_LEN + SIG_LEN
    if i != n:
        detail = f"{n - i} leftover bytes after the last hop, fewer than the {SIGHOP_MIN_LEN} a hop needs"
        raise MalformedFrame("bad_announcement", detail, offset=i, frame_type=_TREE)
    return Announcement(buf[:KEY_LEN], root_seq, tuple(hops))


def sign_announcement_for_port(a: Announcement, identity: Identity, port: int) -> Announcement:
    """Append our hop for peer ``port``: sign the encoding of ``a`` (§4.5 "to send").

    The caller must not send an announcement that already holds its own key.
    Raises ValueError for an unencodable announcement or port.
    """
    sig = identity.sign(encode_announcement(a))
    encode_varu64(port)  # validates the port
    return Announcement(a.root_key, a.root_seq, (*a.hops, SigHop(port, identity.public_key, sig)))


def verify_announcement(a: Announcement, verify: _Verify = crypto.verify) -> None:
    """Check every hop: ``Sig_i`` by ``Key_i`` over root ‖ hops before i.

    Raises BadSignature naming the first failing hop (0 = the root's hop).
    """
    prefix = bytearray(a.root_key)
    prefix += encode_varu64(a.root_seq)
    for idx, h in enumerate(a.hops):
        if not verify(h.key, bytes(prefix), h.signature):
            detail = f"root announcement hop {idx} (port {h.port}) signature by {h.key.hex()[:16]}… does not verify"
            raise BadSignature(detail, hop_index=idx, key=h.key)
        prefix += encode_varu64(h.port)
        prefix += h.key
        prefix += h.signature


def announcement_frame(a: Announcement) -> Frame:
    """A TreeAnnouncement frame (hop limit 0) carrying ``a``."""
    return Frame(FrameType.TREE_ANNOUNCEMENT, payload=encode_announcement(a))


# ------------------------------------------- bootstrap / broadcast payload (§4.6/4.7)
def signed_root_protected_bytes(seq: int, root_key: bytes, root_seq: int) -> bytes:
    """The signed bytes: ``varu64(seq) ‖ RootKey ‖ varu64(RootSeq)``. Raises ValueError on bad values."""
    return encode_varu64(seq) + _key(root_key, "root key") + encode_varu64(root_seq)


def encode_signed_root_payload(p: SignedRootPayload) -> bytes:
    """Protected bytes then the 64-byte signature. Raises ValueError on bad field sizes."""
    if len(p.signature) != SIG_LEN:
        raise ValueError(f"signature must be {SIG_LEN} bytes, got {len(p.signature)}")
    return signed_root_protected_bytes(p.seq, p.root_key, p.root_seq) + p.signature


def decode_signed_root_payload(b: bytes | memoryview) -> SignedRootPayload:
    """Parse a bootstrap or wakeup broadcast payload; the length must match exactly.

    Raises MalformedFrame ("truncated", "trailing_bytes", "bad_varu64");
    offsets are counted from the payload start.
    """
    buf = b if type(b) is bytes else bytes(b)
    n = len(buf)
    seq, i = _read_varu64(buf, 0, n, "payload sequence")
    if n - i < KEY_LEN:
        raise MalformedFrame("truncated", f"signed root payload has {n - i} of 32 root key bytes", offset=n)
    root_key = buf[i : i + KEY_LEN]
    root_seq, i = _read_varu64(buf, i + KEY_LEN, n, "payload root sequence")
    if n - i < SIG_LEN:
        raise MalformedFrame("truncated", f"signed root payload has {n - i} of 64 signature bytes", offset=n)
    if n - i > SIG_LEN:
        raise MalformedFrame(
            "trailing_bytes", f"{n - i - SIG_LEN} bytes after the signed root payload", offset=i + SIG_LEN
        )
    return SignedRootPayload(seq, root_key, root_seq, buf[i:])


def make_signed_root_payload(identity: Identity, seq: int, root_key: bytes, root_seq: int) -> SignedRootPayload:
    """A payload signed by ``identity``. Raises ValueError on bad values."""
    signature = identity.sign(signed_root_protected_bytes(seq, root_key, root_seq))
    return SignedRootPayload(seq, root_key, root_seq, signature)


def verify_signed_root_payload(p: SignedRootPayload, key: bytes, verify: _Verify = crypto.verify) -> bool:
    """True when ``key`` (bootstrap: header DestinationKey; broadcast: SourceKey) signed ``p``."""
    try:
        protected = signed_root_protected_bytes(p.seq, p.root_key, p.root_seq)
    except ValueError:
        return False
    return verify(key, protected, p.signature)


# ------------------------------------------------------------- handshake (§3.2)
def encode_handshake(identity: Identity, capabilities: int = CAPABILITIES) -> bytes:
    """Our 104-byte handshake. Raises ValueError if ``capabilities`` is not a u32."""
    if not 0 <= capabilities <= 0xFFFF_FFFF:
        raise ValueError(f"capabilities {capabilities} outside u32")
    head = _HS_HEAD.pack(HANDSHAKE_VERSION, capabilities) + identity.public_key
    return head + identity.sign(head)


def decode_handshake(
    data: bytes | memoryview, expected_capabilities: int = CAPABILITIES, *, verify: _Verify = crypto.verify
) -> bytes:
    """Check a peer's handshake in spec order; return the peer's public key.

    Only the first 104 bytes are read; anything after them belongs to the
    frame stream. Raises HandshakeRejected with reason "truncated",
    "bad_version", "bad_capabilities" or "bad_signature".
    """
    if len(data) < HANDSHAKE_LEN:
        raise HandshakeRejected("truncated", f"got {len(data)} of {HANDSHAKE_LEN} bytes")
    hs = bytes(data[:HANDSHAKE_LEN])
    if hs[0] != HANDSHAKE_VERSION:
        raise HandshakeRejected("bad_version", f"version byte 0x{hs[0]:02x} is not 0x01 (at byte 0)")
    caps = int.from_bytes(hs[4:8], "big")
    if caps != expected_capabilities:
        detail = f"capabilities 0x{caps:08x} are not exactly 0x{expected_capabilities:08x} (at byte 4)"
        raise HandshakeRejected("bad_capabilities", detail)
    key = hs[8:40]
    if not verify(key, hs[:40], hs[40:]):
        raise HandshakeRejected("bad_signature", f"signature by {key.hex()[:16]}… does not verify (at byte 40)")
    return key


# ------------------------------------------------------------------ ping (§8)
def encode_ping(kind: int, hops: int, origin: bytes, destination: bytes) -> bytes:
    """The 75-byte ping payload. Raises ValueError for a bad kind, hops or key."""
    if kind not in (PING, PONG):
        raise ValueError(f"ping kind must be 0 (ping) or 1 (pong), got {kind}")
    if not 0 <= hops <= 0xFFFF:
        raise ValueError(f"ping hops {hops} outside u16")
    return _PING.pack(PING_PREAMBLE, kind, hops, _key(origin, "ping origin"), _key(destination, "ping destination"))


def decode_ping(payload: bytes | memoryview) -> tuple[int, int, bytes, bytes] | None:
    """(kind, hops, origin, destination), or None when ``payload`` is not a ping.

    Not a ping: shorter than 75 bytes, a wrong preamble, or a kind other than
    0/1. Bytes after the first 75 are ignored, as the reference does.
    """
    if len(payload) < PING_LEN or payload[:8] != PING_PREAMBLE:
        return None
    _, kind, hops, origin, destination = _PING.unpack_from(payload)
    if kind not in (PING, PONG):
        return None
    return kind, hops, origin, destination


def increment_ping_hops(payload: bytes) -> bytes:
    """For a Ping payload, a copy with ``hops`` + 1 (u16, wrapping); anything else unchanged."""
    if len(payload) < PING_LEN or payload[8] != PING or payload[:8] != PING_PREAMBLE:
        return payload
    out = bytearray(payload)
    _U16.pack_into(out, 9, (_U16.unpack_from(out, 9)[0] + 1) & 0xFFFF)
    return bytes(out)
