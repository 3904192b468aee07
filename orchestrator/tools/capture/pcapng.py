"""Write snek byte streams as pcapng that Wireshark, tshark and the dissector read like a live capture.

The link-layer type is **LINKTYPE_RAW (101)**: each packet is a bare IPv4 header and a TCP header
followed by the bytes. Every in-process link becomes one TCP connection between two made-up
addresses (``10.77.x.y``, one per node, port 7000 at the listener), opened by a three-way handshake
so the capture holds the whole stream: each side's 104-byte handshake, then its frames, cut into
segments of at most ``mss`` bytes (a frame may span segments; a segment may hold several frames).
Checksums are left at zero (Wireshark does not check them unless asked). Timestamps are protocol
time in microseconds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["LINKTYPE_RAW", "PcapngWriter", "TcpFlow"]

LINKTYPE_RAW = 101
_SHB, _IDB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
_SYN, _ACK, _PSH, _FIN = 0x02, 0x10, 0x08, 0x01


def _block(kind: int, body: bytes) -> bytes:
    pad = (-len(body)) % 4
    total = 12 + len(body) + pad
    return struct.pack("<II", kind, total) + body + b"\0" * pad + struct.pack("<I", total)


class PcapngWriter:
    """One section, one LINKTYPE_RAW interface; :meth:`packet` appends an enhanced packet block."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        out.write(_block(_SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        # snaplen 0 = unlimited; option if_tsresol defaults to microseconds
        out.write(_block(_IDB, struct.pack("<HHI", LINKTYPE_RAW, 0, 0)))

    def packet(self, t_s: float, data: bytes) -> None:
        us = max(0, round(t_s * 1e6))
        self.out.write(_block(_EPB, struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(data), len(data)) + data))


def _ip(src: bytes, dst: bytes, payload_len: int, ident: int) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident & 0xFFFF, 0x4000, 64, 6, 0, src, dst)


@dataclass
class TcpFlow:
    """One TCP connection ``a`` (the dialler) -> ``b``; each direction's bytes become numbered segments."""

    writer: PcapngWriter
    a: tuple[bytes, int]  # (IPv4 address, port)
    b: tuple[bytes, int]
    mss: int = 1448
    seq: dict[str, int] = field(default_factory=lambda: {"a": 1000, "b": 5000})
    _ident: int = 0

    def _segment(self, t_s: float, side: str, flags: int, data: bytes = b"") -> None:
        (src, sport), (dst, dport) = (self.a, self.b) if side == "a" else (self.b, self.a)
        other = "b" if side == "a" else "a"
        tcp = struct.pack("!HHIIBBHHH", sport, dport, self.seq[side] & 0xFFFFFFFF, self.seq[other] & 0xFFFFFFFF,
                          5 << 4, flags, 65535, 0, 0)  # fmt: skip
        self._ident += 1
        self.writer.packet(t_s, _ip(src, dst, len(tcp) + len(data), self._ident) + tcp + data)
        self.seq[side] += len(data) + (1 if flags & (_SYN | _FIN) else 0)

    def open(self, t_s: float) -> None:
        """The three-way handshake (so the capture shows the stream from its first byte)."""
        self._segment(t_s, "a", _SYN)
        self._segment(t_s, "b", _SYN | _ACK)
        self._segment(t_s, "a", _ACK)

    def send(self, t_s: float, side: str, data: bytes) -> None:
        """``side`` ("a" or "b") writes ``data``: one or more segments of at most ``mss`` bytes."""
        for i in range(0, len(data), self.mss):
            self._segment(t_s, side, _PSH | _ACK, data[i : i + self.mss])

    def close(self, t_s: float) -> None:
        self._segment(t_s, "a", _FIN | _ACK)
        self._segment(t_s, "b", _FIN | _ACK)


def write_streams(path: Path, streams: list[tuple[bytes, bytes]], *, mss: int = 1448) -> Path:
    """A pcapng of ``streams``: each (bytes the dialler wrote, bytes the listener wrote) as one connection."""
    with path.open("wb") as out:
        w = PcapngWriter(out)
        for i, (a_bytes, b_bytes) in enumerate(streams):
            flow = TcpFlow(w, (bytes([10, 77, 0, 2 * i + 1]), 40000 + i), (bytes([10, 77, 0, 2 * i + 2]), 7000),
                           mss=mss)  # fmt: skip
            flow.open(i)
            flow.send(i + 0.001, "a", a_bytes)
            flow.send(i + 0.002, "b", b_bytes)
            flow.close(i + 0.003)
    return path
