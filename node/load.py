"""The benchmark load protocol: closed-loop Traffic between two nodes' load endpoints.

A load frame is SNEK-routed Traffic whose payload starts with a 22-byte
``snekload`` header (:data:`LOAD_STRUCT`: magic, kind 0 data / 1 ack
(:data:`LOAD_DATA`, :data:`LOAD_ACK`), flags 1 = ack now (:data:`LOAD_ACK_NOW`),
flow id, sequence or count), then padding. The receiving node
acknowledges every :data:`LOAD_ACK_EVERY` data frames of a flow (or at once
when asked) with the count received so far; the sender
(:meth:`LoadEndpoint.run`, driven by ``POST /traffic``) keeps at most
``inflight`` frames unacknowledged and writes off frames unacknowledged for
0.5 s without progress as lost.

:class:`LoadEndpoint` needs two things from the node, passed in: ``send``
(queue a Traffic payload to a key, ``router.send_traffic``) and ``flush``
(drain the router's outputs to the peers).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

__all__ = [
    "LOAD_ACK", "LOAD_ACK_EVERY", "LOAD_ACK_NOW", "LOAD_DATA", "LOAD_HEADER_LEN", "LOAD_MAGIC", "LOAD_STRUCT",
    "LoadEndpoint", "LoadFlow", "load_payload",
]  # fmt: skip

LOAD_MAGIC = b"snekload"
LOAD_STRUCT = _LOAD = struct.Struct(">8sBBIQ")  # magic, kind, flags, flow id, sequence / count
LOAD_DATA, LOAD_ACK = 0, 1  # kinds: a data frame (its sequence number), an ack (the count received)
LOAD_ACK_NOW = 1  # flag of a data frame: acknowledge at once
LOAD_HEADER_LEN = _LOAD.size  # 22
LOAD_ACK_EVERY = 16
_LOAD_SINK_FLOWS = 1024
_STALL_S = 0.5  # frames unacknowledged this long are written off as lost

Send = Callable[[bytes, bytes, float], object]  # (destination key, payload, now)


def load_payload(kind: int, flags: int, flow: int, n: int, pad: bytes = b"") -> bytes:
    """A benchmark payload: ``snekload`` header then ``pad``."""
    return _LOAD.pack(LOAD_MAGIC, kind, flags, flow, n) + pad


def is_load(payload: bytes) -> bool:
    """Whether a delivered Traffic payload belongs to the load protocol."""
    return len(payload) >= LOAD_HEADER_LEN and payload.startswith(LOAD_MAGIC)


@dataclass(eq=False)
class LoadFlow:
    """A benchmark flow this node sends: the receiver's last acknowledged count."""

    acked: int = 0
    lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)


class LoadEndpoint:
    """One node's end of the load protocol: the sink that acknowledges, and the closed-loop sender."""

    def __init__(self, send: Send, flush: Callable[[], None]) -> None:
        self._send, self._flush = send, flush
        self.flows: dict[int, LoadFlow] = {}  # flow id -> sender state (run)
        self._rx: dict[tuple[bytes, int], int] = {}  # (source, flow) -> data frames received; an LRU

    def on_payload(self, source: bytes, p: bytes) -> None:
        """A delivered load payload (:func:`is_load`): count data and acknowledge it, or record an ack.

        Acks go through ``send`` without ``flush``: the node drains them in the same dispatch.
        """
        _, kind, flags, flow, n = _LOAD.unpack_from(p)
        if kind == LOAD_DATA:  # count it, ack every LOAD_ACK_EVERY frames or when asked
            k = (source, flow)
            count = self._rx.pop(k, 0) + 1
            self._rx[k] = count  # re-inserted last: the dict is an LRU
            if len(self._rx) > _LOAD_SINK_FLOWS:
                del self._rx[next(iter(self._rx))]
            if flags & LOAD_ACK_NOW or count % LOAD_ACK_EVERY == 0:
                self._send(source, load_payload(LOAD_ACK, 0, flow, count), trio.current_time())
        elif kind == LOAD_ACK:
            st = self.flows.get(flow)
            if st is not None and n > st.acked:
                st.acked = n
                st.lot.unpark_all()

    async def run(self, dest: bytes, payload_bytes: int, count: int, inflight: int, timeout_s: float) -> dict[str, Any]:
        """Closed-loop benchmark traffic to ``dest``, which acknowledges every 16 frames (its load sink).

        At most ``inflight`` frames are unacknowledged; frames unacknowledged for 0.5 s
        without any progress are written off as lost. Frames are SNEK-routed Traffic
        whose payload starts with the ``snekload`` header. Raises ValueError for a bad size.
        """
        if not LOAD_HEADER_LEN <= payload_bytes <= 60_000:
            raise ValueError(f"payload_bytes must be in {LOAD_HEADER_LEN}..60000, not {payload_bytes}")
        flow = random.getrandbits(32)
        st = self.flows[flow] = LoadFlow()
        pad = bytes(payload_bytes - LOAD_HEADER_LEN)
        pack = LOAD_STRUCT.pack
        send = self._send
        sent = lost = 0
        start = trio.current_time()
        try:
            with trio.move_on_after(timeout_s):
                while st.acked + lost < count:
                    room = min(inflight - (sent - st.acked - lost), count - sent, 32)
                    if room > 0:  # 32 at most between checkpoints (half a flow bucket): the writers drain in between
                        now = trio.current_time()
                        for _ in range(room):
                            sent += 1
                            flags = LOAD_ACK_NOW if (sent == count or sent - st.acked - lost >= inflight) else 0
                            send(dest, pack(LOAD_MAGIC, LOAD_DATA, flags, flow, sent) + pad, now)
                        self._flush()
                        await trio.lowlevel.checkpoint()
                        continue
                    before = st.acked
                    with trio.move_on_after(_STALL_S):
                        await st.lot.park()
                    if st.acked == before:
                        lost = sent - st.acked
            elapsed = trio.current_time() - start
            with trio.move_on_after(0.2):  # the last ack may still be on its way
                while st.acked < sent - lost:
                    await st.lot.park()
        finally:
            del self.flows[flow]
        return {
            "sent": sent,
            "delivered": st.acked,
            "lost": max(0, sent - st.acked),
            "elapsed_s": round(elapsed, 6),
            "frames_per_s": round(st.acked / elapsed, 1) if elapsed > 0 else 0.0,
        }
