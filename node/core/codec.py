"""Wire primitives (PROTOCOL.md §4.1, §4.2): varu64, coordinates, key checks and the codec's constants.

No I/O, no clocks. Decoders raise only ``MalformedFrame`` on bad input; encoders raise ``ValueError`` for
values that cannot be encoded. :mod:`node.core.wire` (frames) and :mod:`node.core.payloads` (announcements,
signed root payloads, handshake, ping) build on these; import the public names from ``wire``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Final

from node.core.errors import MalformedFrame
from node.core.types import KEY_LEN, SIG_LEN

__all__ = [
    "FRAME_MAGIC", "FRAME_VERSION", "HANDSHAKE_LEN", "HANDSHAKE_VERSION", "CAPABILITIES", "SIGHOP_MIN_LEN",
    "PING_LEN", "PING_PREAMBLE", "PING", "PONG", "TREE_TYPE",
    "encode_varu64", "decode_varu64", "read_varu64", "encode_coords", "decode_coords", "read_coords",
    "check_key", "SMALL_VARU64", "EMPTY_COORDS", "U16", "Verify",
]  # fmt: skip

FRAME_MAGIC: Final = b"pine"
FRAME_VERSION: Final = 0
HANDSHAKE_VERSION: Final = 0x01
HANDSHAKE_LEN: Final = 104  # 8 + 32 + 64
CAPABILITIES: Final = 0x3B  # LengthenedRootInterval|CryptographicSetups|DedupedCoordinateInfo|SoftState|HybridRouting
SIGHOP_MIN_LEN: Final = 1 + KEY_LEN + SIG_LEN  # 97
PING_PREAMBLE: Final = b"pineping"
PING_LEN: Final = 75
PING: Final = 0
PONG: Final = 1
TREE_TYPE: Final = 1  # the frame type that carries a root announcement (error reports name it)

SMALL_VARU64: Final = tuple(bytes((i,)) for i in range(128))
EMPTY_COORDS: Final = b"\x00\x00"
U16: Final = struct.Struct(">H")
Verify = Callable[[bytes, bytes, bytes], bool]  # crypto.verify's shape: (key, message, signature) -> ok


def check_key(k: bytes, what: str) -> bytes:
    """``k`` when it is a 32-byte key; raises ValueError naming ``what`` otherwise."""
    if len(k) != KEY_LEN:
        raise ValueError(f"{what} must be {KEY_LEN} bytes, got {len(k)}")
    return k


# ---------------------------------------------------------------- varu64 (§4.1)
def encode_varu64(n: int) -> bytes:
    """Minimal big-endian base-128 encoding of ``n``. Raises ValueError outside 0..2**64-1."""
    if 0 <= n < 128:
        return SMALL_VARU64[n]
    if n < 0 or n >> 64:
        raise ValueError(f"varu64 value {n} outside 0..2**64-1")
    out = bytearray((n & 0x7F,))
    n >>= 7
    while n:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.reverse()
    return bytes(out)


def read_varu64(
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
    return read_varu64(buf, offset, len(buf), "value", minimal=minimal)


# ------------------------------------------------------------ coordinates (§4.2)
def encode_coords(ports: Iterable[int]) -> bytes:
    """``u16 byte length ‖ varu64 ports``. Raises ValueError for bad ports or over 65 535 bytes."""
    ports = tuple(ports)
    if not ports:
        return EMPTY_COORDS
    small = min(ports) >= 0 and max(ports) < 128
    body = bytes(ports) if small else b"".join([encode_varu64(p) for p in ports])
    if len(body) > 0xFFFF:
        raise ValueError(f"coordinates of {len(body)} bytes exceed the u16 length field")
    return U16.pack(len(body)) + body


def read_coords(buf: bytes | memoryview, i: int, end: int, what: str, t: int | None) -> tuple[tuple[int, ...], int]:
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
        v, i = read_varu64(buf, i, cend, f"{what} port", overrun="bad_coords", t=t)
        ports.append(v)
    return tuple(ports), i


def decode_coords(buf: bytes | memoryview, offset: int) -> tuple[tuple[int, ...], int]:
    """Decode coordinates at ``buf[offset]``; return (ports, offset after them).

    Raises MalformedFrame: "truncated" (no room for the length), "bad_coords" (declared length past the
    data, or a port crossing it), "bad_varu64". Raises ValueError for a negative ``offset``.
    """
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    return read_coords(buf, offset, len(buf), "coordinates", None)

