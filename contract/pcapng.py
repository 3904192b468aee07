"""Write snek byte streams as pcapng that Wireshark, tshark and the project's dissector read like a live capture.

The format every snekbed pcapng shares (``snekbed sim --pcap``, a node's ``GET /recorder.pcapng``, the flight
recorder's dumps; docs/capture.md): the link-layer type is **LINKTYPE_RAW (101)**, each packet a bare IPv4 header
and a TCP header followed by the bytes. A snek peering becomes one TCP connection between two made-up
addresses, opened by a three-way handshake so the capture holds the whole stream; each side's bytes are cut
into segments of at most ``mss`` bytes (a frame may span segments; a segment may hold several frames).
Checksums are left at zero (Wireshark does not check them unless asked). Timestamps are protocol time in
microseconds. A packet may carry a comment (pcapng's ``opt_comment``; tshark's ``frame.comment``).

Pure bytes in, bytes out: no project imports, so the node and the orchestrator both write it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO

__all__ = ["LINKTYPE_RAW", "PcapngWriter", "TcpFlow"]

LINKTYPE_RAW = 101
_SHB, _IDB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
_SYN, _ACK, _PSH, _FIN = 0x02, 0x10, 0x08, 0x01
_OPT_COMMENT, _OPT_END = 1, 0


def _padded(data: bytes) -> bytes:
    return data + b"\0" * ((-len(data)) % 4)


def _block(kind: int, body: bytes) -> bytes:
    body = _padded(body)
    total = 12 + len(body)
    return struct.pack("<II", kind, total) + body + struct.pack("<I", total)


class PcapngWriter:
    """One section, one LINKTYPE_RAW interface; :meth:`packet` appends an enhanced packet block."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        out.write(_block(_SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        # snaplen 0 = unlimited; option if_tsresol defaults to microseconds
        out.write(_block(_IDB, struct.pack("<HHI", LINKTYPE_RAW, 0, 0)))

    def packet(self, t_s: float, data: bytes, comment: str | None = None) -> None:
        us = max(0, round(t_s * 1e6))
        body = _padded(struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(data), len(data)) + data)
        if comment:
            text = comment.encode()[:0xFFFF]
            body += struct.pack("<HH", _OPT_COMMENT, len(text)) + _padded(text) + struct.pack("<HH", _OPT_END, 0)
        self.out.write(_block(_EPB, body))


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

    def _segment(self, t_s: float, side: str, flags: int, data: bytes = b"", comment: str | None = None) -> None:
        (src, sport), (dst, dport) = (self.a, self.b) if side == "a" else (self.b, self.a)
        other = "b" if side == "a" else "a"
        tcp = struct.pack("!HHIIBBHHH", sport, dport, self.seq[side] & 0xFFFFFFFF, self.seq[other] & 0xFFFFFFFF,
                          5 << 4, flags, 65535, 0, 0)  # fmt: skip
        self._ident += 1
        self.writer.packet(t_s, _ip(src, dst, len(tcp) + len(data), self._ident) + tcp + data, comment)
        self.seq[side] += len(data) + (1 if flags & (_SYN | _FIN) else 0)

    def open(self, t_s: float) -> None:
        """The three-way handshake (so the capture shows the stream from its first byte)."""
        self._segment(t_s, "a", _SYN)
        self._segment(t_s, "b", _SYN | _ACK)
        self._segment(t_s, "a", _ACK)

    def send(self, t_s: float, side: str, data: bytes, comment: str | None = None) -> None:
        """``side`` ("a" or "b") writes ``data``: one or more segments of at most ``mss`` bytes (``comment`` on the
        first)."""
        for i in range(0, len(data), self.mss):
            self._segment(t_s, side, _PSH | _ACK, data[i : i + self.mss], comment if i == 0 else None)

    def close(self, t_s: float) -> None:
        self._segment(t_s, "a", _FIN | _ACK)
        self._segment(t_s, "b", _FIN | _ACK)
