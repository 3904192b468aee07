"""The flight recorder's lines: what a node's ``GET /recorder`` answers and a chaos dump holds, one JSON object a line.

A node's flight recorder (node.core.recorder) keeps the last seconds of the frames it received, sent, forwarded
and dropped, headers only, with its routing events; a failing chaos step writes every live node's ring into its
run directory as ``recorder/<step>-<node>.jsonl`` (these lines) and ``recorder/<step>-<node>.pcapng`` (the same
frames for Wireshark: contract.pcapng, docs/capture.md). Human-readable version: docs/run-dataset.md,
"recorder/".

Every line carries every field of :data:`RECORDER_FIELDS` (``null`` where the record has none: an event has no
frame fields, a frame no event fields); check a line with
``contract.dataset.validate_record(line, RECORDER_FIELDS)``.
"""

from __future__ import annotations

from contract.lines import Field

__all__ = ["PING_KINDS", "RECORDER_FIELDS", "RECORDER_SCHEMA_VERSION", "RECORD_KINDS"]

RECORDER_SCHEMA_VERSION = 1

#: what a line records: a frame the node received from a peer, sent (it originated it, or it is its own protocol
#: frame), forwarded (sent on for another node), dropped (``reason`` says why), or a routing event
RECORD_KINDS = ("received", "sent", "forwarded", "dropped", "event")
#: a Traffic frame whose payload is a ping (PROTOCOL.md section 8) says which
PING_KINDS = ("ping", "pong")

RECORDER_FIELDS: tuple[Field, ...] = (
    Field("v", "int"),
    Field("node", "hex"),  # the recording node's key
    Field("node_name", "str", nullable=True),
    Field("mono_s", "float"),  # protocol time of the record (the event log's mono_s)
    Field("age_s", "float"),  # seconds between the record and the read-out
    Field("kind", "str", choices=RECORD_KINDS),
    Field("port", "int", nullable=True),  # the peer's port (0: the node itself), null for an event
    Field("frame_type", "str", nullable=True),  # contract.frames names ("unknown" outside the table)
    Field("length", "int", nullable=True),  # the whole frame's bytes on the wire
    Field("hop_limit", "int", nullable=True),
    Field("src_key", "hex", nullable=True),
    Field("dst_key", "hex", nullable=True),
    Field("src_coords", "[int]", nullable=True),
    Field("dst_coords", "[int]", nullable=True),
    Field("wm_key", "hex", nullable=True),  # the watermark (SNEK-routed Traffic, bootstraps)
    Field("wm_seq", "int", nullable=True),
    Field("ping", "str", nullable=True, choices=PING_KINDS),
    Field("ping_hops", "int", nullable=True),
    Field("reason", "str", nullable=True),  # why a frame was dropped
    Field("event", "str", nullable=True),  # an event's kind (docs/events.md)
    Field("fields", "json", nullable=True),  # an event's fields, as the event log writes them
)
