"""The flight recorder read out: its entries (node.core.recorder) as JSON lines and as pcapng.

Used by the admin API (``GET /recorder``, ``GET /recorder.pcapng``) and by the orchestrator for in-process nodes,
so both give the same files.

* :func:`read_out` decodes each entry once: the line of the run-dataset contract (contract.recorder) and, for a
  frame, the bytes the pcapng holds: the kept header rebuilt into a whole frame (a Traffic frame's length fields
  say what was kept: its header and the first payload bytes; every other type was kept whole).
* :func:`to_jsonl` and :func:`to_pcapng` write them.

**The pcapng** (contract.pcapng, LINKTYPE_RAW with made-up IPv4/TCP headers, as ``snekbed sim --pcap``; tshark
with the project's dissector reads it): the node is ``10.78.0.1`` port 7000; its peer on port ``N`` is
``10.78.1.N`` (port 0, the node itself: ``10.78.1.0``), one TCP connection each: received frames come from the
peer, sent and forwarded ones go to it. Dropped frames go from the node to ``10.78.2.N`` (N: the port they
came from, or were bound for), one more connection per port. Every packet's comment (``frame.comment``) says
what the record was: ``forwarded port 3``, ``dropped (loop) port 2``, with the payload bytes left out. Routing
events, and frames that could not be rebuilt whole (one that did not decode, or a control frame over
``node.core.recorder.CONTROL_KEEP`` bytes, kept as its 12-byte header), are in the JSON lines only.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from contract.frames import frame_type_name
from contract.pcapng import PcapngWriter, TcpFlow
from contract.recorder import RECORDER_FIELDS, RECORDER_SCHEMA_VERSION
from node.core import wire
from node.core.errors import MalformedFrame
from node.core.recorder import DROPPED, EVENT, RECEIVED, Entry, head_of
from node.core.types import Frame, FrameType, LegacyFrameType

__all__ = ["NODE_ADDRESS", "Record", "read_out", "to_jsonl", "to_pcapng"]

#: the node's own address in its pcapng
NODE_ADDRESS = bytes([10, 78, 0, 1])
NODE_PORT = 7000  # the port the dissector claims outright
_PEER_NET, _DROP_NET = 1, 2  # third byte of a peer's address, and of the sink of the frames dropped on a port
_TRAFFIC = int(FrameType.TRAFFIC)
_ORIGIN_IS_SOURCE = (int(FrameType.TRAFFIC), int(FrameType.WAKEUP_BROADCAST), int(LegacyFrameType.LEGACY_BOOTSTRAP_ACK),
                     int(LegacyFrameType.LEGACY_SETUP))  # fmt: skip
_ORIGIN_IS_DESTINATION = (int(FrameType.BOOTSTRAP), int(LegacyFrameType.LEGACY_BOOTSTRAP))
_KIND_NAMES = {RECEIVED: "received", DROPPED: "dropped"}
_NULLS: dict[str, Any] = {f.name: None for f in RECORDER_FIELDS}

#: one read-out record: its JSON line's object, and the whole frame the pcapng holds (None: not in the pcapng)
Record = tuple[dict[str, Any], bytes | None]


def _patched(head: bytes, header_len: int) -> bytes:
    """A Traffic frame's kept head as a whole frame: its length fields rewritten to what was kept."""
    return head[:8] + struct.pack(">HH", len(head), len(head) - header_len) + head[12:]


def _read(raw: bytes) -> bytes | None:
    """What is read out of the whole frame ``raw`` (node.core.recorder.head_of) as a whole frame, or None (a
    control frame over CONTROL_KEEP bytes, of which only the header is read out)."""
    head = head_of(raw)
    if len(head) == len(raw):
        return raw
    if raw[5] == _TRAFFIC:
        return _patched(head, len(raw) - ((raw[10] << 8) | raw[11]))
    return None


def _rebuilt(item: Any, note: Any) -> tuple[bytes | None, int | None, int | None]:
    """(what the pcapng holds of an entry's frame, as a whole self-consistent frame, or None; the frame's length
    on the wire; its type number) of what the entry holds: bytes (whole, or cut by head_of: the length field
    says), a Frame (``note``: its payload's length when the payload was cut), a type number or None."""
    if isinstance(item, Frame):
        try:
            raw = wire.encode_frame(item)
        except ValueError:
            return None, None, int(item.type)
        if type(note) is int:  # a Traffic frame whose payload was cut to PEEK bytes
            return raw, len(raw) - len(item.payload) + note, raw[5]
        return _read(raw), len(raw), raw[5]
    if type(item) is int:
        return None, None, item
    if type(item) is not bytes or len(item) < 10:
        return None, None, None
    t, length = item[5], (item[8] << 8) | item[9]  # the frame's own length field
    if len(item) == length:
        return _read(item), length, t
    if t == _TRAFFIC and len(item) >= 12:  # cut by head_of when it was recorded
        header_len = length - ((item[10] << 8) | item[11])  # the payload is the frame's tail
        if header_len <= len(item):
            return _patched(item, header_len), length, t
    return None, length, t


def _origin(f: Frame) -> bytes | None:
    if f.type in _ORIGIN_IS_SOURCE:
        return f.source_key
    if f.type in _ORIGIN_IS_DESTINATION:
        return f.destination_key
    return None  # announcements, keepalives, teardowns: the node's own


def _frame_fields(f: Frame) -> dict[str, Any]:
    out: dict[str, Any] = {"hop_limit": f.hop_limit}
    for name, key in (("src_key", f.source_key), ("dst_key", f.destination_key)):
        if key:
            out[name] = key.hex()
    if f.type in (_TRAFFIC, FrameType.BOOTSTRAP) or f.source_coords or f.destination_coords:
        out["src_coords"], out["dst_coords"] = list(f.source_coords), list(f.destination_coords)
    if f.type == FrameType.BOOTSTRAP or (f.type == _TRAFFIC and not f.destination_coords):
        out["wm_key"], out["wm_seq"] = f.watermark.key.hex(), f.watermark.seq
    if f.type == _TRAFFIC:
        ping = wire.decode_ping(f.payload) if len(f.payload) >= wire.PING_LEN else None
        if ping is None and len(f.payload) >= 11 and f.payload.startswith(wire.PING_PREAMBLE):
            ping = (f.payload[8], (f.payload[9] << 8) | f.payload[10])  # the kept part: kind and hop count
        if ping is not None and ping[0] in (wire.PING, wire.PONG):
            out["ping"], out["ping_hops"] = ("ping", "pong")[ping[0]], ping[1]
    return out


def _record(entry: Entry, now: float, base: dict[str, Any], own: bytes) -> Record:
    t, kind, port, item, note = entry
    line = {**_NULLS, **base, "mono_s": round(t, 6), "age_s": round(now - t, 6)}
    if kind == EVENT:
        line.update(kind="event", event=item, fields=note)
        return line, None
    data, length, ftype = _rebuilt(item, note)
    line.update(port=port, length=length, frame_type=frame_type_name(ftype) if ftype is not None else "unknown",
                reason=note if kind == DROPPED else None)  # fmt: skip
    frame = None
    if data is not None:
        try:
            frame = wire.decode_frame(data)
        except MalformedFrame:
            data = None
    if frame is not None:
        line.update(_frame_fields(frame))
    name = _KIND_NAMES.get(kind)
    if name is None:  # SENT: our own frame, or one we pass on for another node
        origin = _origin(frame) if frame is not None else None
        name = "forwarded" if origin is not None and origin != own else "sent"
    line["kind"] = name
    return line, data


def read_out(entries: Iterable[Entry], now: float, key: bytes, name: str | None) -> list[Record]:
    """Each entry, oldest first, as its JSON line's object and its frame for the pcapng (``now``: the read-out's
    protocol time; ``key``, ``name``: the recording node's)."""
    base = {"v": RECORDER_SCHEMA_VERSION, "node": key.hex(), "node_name": name}
    return [_record(e, now, base, key) for e in entries]


def to_jsonl(records: Sequence[Record]) -> bytes:
    """The JSON lines (contract.recorder), one a record, each ending in a newline."""
    return b"".join(json.dumps(line, separators=(",", ":"), default=_jsonable).encode() + b"\n" for line, _ in records)


def _jsonable(value: object) -> object:
    """An event field JSON has no form for: bytes as hex, anything else as its text."""
    return value.hex() if isinstance(value, bytes) else str(value)


def _comment(line: dict[str, Any], data: bytes) -> str:
    what = f"{line['kind']}" + (f" ({line['reason']})" if line["reason"] else "") + f" port {line['port']}"
    if line["length"] is not None and line["length"] > len(data):
        what += f", {line['length']}-byte frame: {line['length'] - len(data)} payload bytes not kept"
    return what


def to_pcapng(records: Sequence[Record], now: float) -> bytes:
    """The records' frames as pcapng (the module docstring says how it is laid out); ``now`` closes the flows."""
    out = io.BytesIO()
    writer = PcapngWriter(out)
    flows: dict[tuple[int, int], TcpFlow] = {}
    for line, data in records:
        if data is None:
            continue
        port = line["port"] & 0xFF
        net = _DROP_NET if line["kind"] == "dropped" else _PEER_NET
        flow = flows.get((net, port))
        if flow is None:
            flow = flows[(net, port)] = TcpFlow(writer, (bytes([10, 78, net, port]), 40000 + 256 * net + port),
                                                (NODE_ADDRESS, NODE_PORT))  # fmt: skip
            flow.open(line["mono_s"])
        flow.send(line["mono_s"], "a" if line["kind"] == "received" else "b", data, _comment(line, data))
    for flow in flows.values():
        flow.close(now)
    return out.getvalue()
