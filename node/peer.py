"""One peering over a byte stream: the handshake, then a reader and a writer task (PROTOCOL.md §3).

* :func:`handshake` sends our 104 bytes first, then reads the peer's, all within
  the handshake timeout (10 s); it raises :class:`HandshakeFailed` with a bounded
  ``reason`` (bad_version, bad_capabilities, bad_signature, timeout, eof, io_error).
* :class:`PeerConn` runs a connected peer. The reader splits the stream into
  frames under a per-frame read deadline (5 s) and a frame-size bound, and hands
  them to the node in slices, yielding between slices so that one busy peer
  cannot starve the others. The writer sends queued protocol frames before
  traffic frames, gathers everything queued into one ``send_all`` (one syscall
  for many frames), bounds each write by the write deadline (3 s) and sends a
  keepalive after 3 s without writes. With a userspace link shape the writer
  passes every frame through a :class:`netem.userspace.LinkShaper` and holds it
  until its delivery time.

A peer ends for one reason, :attr:`PeerConn.reason`: one of :data:`END_REASONS`
(``read_timeout``, ``eof``, ``bad_magic``, ``oversize``...), or whatever the node
passed to :meth:`PeerConn.close`. The frames a peering drops are reported to the
node under the reasons of :data:`DROP_TYPES`.
"""

from __future__ import annotations

import logging
import math
import random
import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, get_args

import trio

from contract.frames import FRAME_TYPE_NAMES, FRAME_TYPE_SLOTS, UNKNOWN_FRAME_SLOT, UNKNOWN_FRAME_TYPE
from contract.links import LinkShape
from netem.userspace import DropReason, LinkShaper
from node.core import wire
from node.core.crypto import Identity
from node.core.errors import MALFORMED_REASONS, HandshakeRejected, MalformedFrame
from node.core.reasons import ALL_TYPES, DECODE_HEADER_REASONS
from node.core.types import MAX_FRAME_LEN, Frame, FrameType
from node.core.variants import variants_advertising
from node.fairqueue import BLUETOOTH_BUCKETS, REFERENCE_BUCKETS, FairQueue

if TYPE_CHECKING:
    from node.config import LinkSpec, Timeouts

__all__ = [
    "DROP_TYPES",
    "END_REASONS",
    "KEEPALIVE_BYTES",
    "NTYPES",
    "HandshakeFailed",
    "PeerClosed",
    "PeerConn",
    "handshake",
]

log = logging.getLogger("snekbed.node.peer")

KEEPALIVE_BYTES = wire.encode_frame(Frame(FrameType.KEEPALIVE))
NTYPES = UNKNOWN_FRAME_SLOT + 1  # one slot per frame type, and a last one for unknown types
_SLOT = FRAME_TYPE_SLOTS  # type byte -> slot (contract.frames: the numbers are not contiguous)
_TRAFFIC = int(FrameType.TRAFFIC)
_KEEPALIVE_SLOT = _SLOT[FrameType.KEEPALIVE]
_TRAFFIC_SLOT = _SLOT[FrameType.TRAFFIC]
_HS_CAPABILITIES = struct.Struct(">4xI")  # §3.2: version, 3 unused bytes, then the capabilities (u32 BE)
RECV_BYTES = 65_536
WRITE_BUDGET_BYTES = 256 * 1024  # bytes gathered into one send_all
SLICE_FRAMES = 32  # frames handed to the node between checkpoints
MAX_DELAY_LINE = 100_000  # frames held by userspace shaping (delay only) before dropping
#: The delay line's release clock (docs/netem.md, "Userspace shaping"). trio's timers wake through epoll, whose
#: timeout is whole milliseconds rounded up, and a busy host runs a woken task later still, so a frame released only
#: once due leaves late: 0.3-1 ms a way on an idle host, a few ms on a loaded one, and every shaped link would be
#: slower than its class asks. So the writer wakes ``lead`` before the head frame is due and releases the frames due
#: by then; after each such timed wake ``lead`` steps towards the timer's median lateness (up when the head frame
#: still left late, down when it left early), so that the median frame leaves when due, whatever the load.
LEAD_START_S = 0.0005
LEAD_STEP_S = 0.00005  # 20 timed wakes move it by a millisecond
LEAD_MAX_S = 0.005  # never more than 5 ms early: past that the host is too busy for any delay to hold

#: Why a peering's own tasks end it (:attr:`PeerConn.reason` when the node did not close it): the stream ended
#: or failed, a deadline passed, or a frame was malformed or too long (the codec's reasons, node.core.errors).
END_REASONS: Final[frozenset[str]] = MALFORMED_REASONS | {"eof", "read_timeout", "write_timeout", "io_error", "closed"}

#: The userspace shaper's drop reasons (netem.userspace) as a peering counts them.
_LINK_DROPS: Final[dict[str, str]] = {r: f"link_{r}" for r in get_args(DropReason)}

#: Why a peering drops frames -> the frame types (contract.frames names) it can drop for it.
DROP_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "queue_full": FRAME_TYPE_NAMES,  # push_protocol, push_traffic: the bounded queue is full
    "oversize": ALL_TYPES,  # _reader, _deliver: over --max-frame-bytes (unknown: before its header is whole)
    **{r: (UNKNOWN_FRAME_TYPE,) for r in sorted(DECODE_HEADER_REASONS)},  # _reader: the header does not parse
    **{r: FRAME_TYPE_NAMES for r in _LINK_DROPS.values()},  # _take_shaped: the userspace shape drops it
    "link_overflow": FRAME_TYPE_NAMES,  # _take_shaped: the delay line is full
}


class HandshakeFailed(Exception):
    """The peer's handshake did not arrive or did not check out; ``reason`` is a bounded slug."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"handshake failed ({reason}): {detail}")
        self.reason, self.detail = reason, detail


class PeerClosed(Exception):
    """Raised inside a peer's tasks to end the peering; ``reason`` is a bounded slug."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


async def handshake(
    stream: trio.abc.Stream, identity: Identity, timeout_s: float, capabilities: int = wire.CAPABILITIES
) -> tuple[bytes, bytes]:
    """Exchange handshakes (§3.2) advertising ``capabilities`` (the variant's, §7.4) and requiring exactly
    the same of the peer; return (peer key, bytes received after the handshake).

    Raises HandshakeFailed; never waits for the peer before sending our own bytes. A capability mismatch
    names the variants on both sides.
    """
    buf = bytearray()
    try:
        with trio.fail_after(timeout_s):
            await stream.send_all(wire.encode_handshake(identity, capabilities))
            while len(buf) < wire.HANDSHAKE_LEN:
                data = await stream.receive_some(4096)
                if not data:
                    raise HandshakeFailed("eof", f"stream closed after {len(buf)} of {wire.HANDSHAKE_LEN} bytes")
                buf += data
    except trio.TooSlowError:
        raise HandshakeFailed("timeout", f"got {len(buf)} of {wire.HANDSHAKE_LEN} bytes in {timeout_s:g} s") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise HandshakeFailed("io_error", f"{type(exc).__name__}: {exc}") from None
    try:
        key = wire.decode_handshake(bytes(buf[: wire.HANDSHAKE_LEN]), capabilities)
    except HandshakeRejected as exc:
        detail = str(exc)
        if exc.reason == "bad_capabilities":
            (theirs,) = _HS_CAPABILITIES.unpack_from(buf)
            detail += f": the peer runs {variants_advertising(theirs)}, this node {variants_advertising(capabilities)}"
        raise HandshakeFailed(exc.reason, detail) from None
    return key, bytes(buf[wire.HANDSHAKE_LEN :])


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


OnFrames = Callable[["PeerConn", list[tuple[int, bytes]]], None]
OnDrop = Callable[[int | None, str, int], None]  # (wire frame type, None if unknown; reason; count)


class PeerConn:
    """A connected, handshaken peer on ``port``. See the module docstring."""

    def __init__(
        self,
        *,
        port: int,
        key: bytes,
        link: LinkSpec,
        stream: trio.abc.Stream,
        remote: str,
        timeouts: Timeouts,
        on_frames: OnFrames,
        on_drop: OnDrop,
        leftover: bytes = b"",
        max_frame_bytes: int = MAX_FRAME_LEN,
        flow_depth: int = 16,
        protocol_limit: int = 4096,
        shaper_seed: int = 0,
    ) -> None:
        self.port, self.key, self.link, self.stream, self.remote = port, key, link, stream, remote
        self.t = timeouts
        self._on_frames, self._on_drop = on_frames, on_drop
        self._leftover = leftover
        self.max_frame_bytes = max_frame_bytes
        buckets = BLUETOOTH_BUCKETS if link.type_name == "bluetooth" else REFERENCE_BUCKETS
        self.traffic = FairQueue(buckets, flow_depth)
        self.protocol: deque[tuple[int, bytes]] = deque()
        self.protocol_limit = protocol_limit
        self.shaper = LinkShaper(link.shape, random.Random(shaper_seed)) if link.shape is not None else None
        self._shaper_seed = shaper_seed
        self._delay_line: deque[tuple[float, int, bytes]] = deque()
        self.lead_s = LEAD_START_S  # how long before its due time the delay line wakes for a frame (see LEAD_START_S)
        self._timed: float | None = None  # the due time of the frame the writer's last timed wake was for
        self._lot = trio.lowlevel.ParkingLot()
        self._scope = trio.CancelScope()
        self.closed = False
        self.reason = ""
        self.connected_at = trio.current_time()
        # counters, indexed by frame type slot (contract.frames; the last slot: unknown types)
        self.rx_frames = [0] * NTYPES
        self.rx_bytes = [0] * NTYPES
        self.tx_frames = [0] * NTYPES
        self.tx_bytes = [0] * NTYPES
        self.reported: tuple[list[int], list[int], list[int], list[int]] = ([0] * NTYPES, [0] * NTYPES, [0] * NTYPES, [0] * NTYPES)

    # ------------------------------------------------------------ queues (called synchronously by the node)

    def push_protocol(self, ftype: int, data: bytes) -> None:
        """Queue a protocol frame (sent before any traffic). Drops it when the bounded queue is full."""
        if len(self.protocol) >= self.protocol_limit:
            self._on_drop(ftype, "queue_full", 1)
            return
        self.protocol.append((ftype, data))
        if self._lot:
            self._lot.unpark()

    def push_traffic(self, data: bytes, source_key: bytes, destination_key: bytes) -> None:
        """Queue a traffic frame in its flow bucket; the bucket's oldest frames go if it is full."""
        q = self.traffic
        dropped = q.push(q.bucket_of(source_key, destination_key), data)
        if dropped:
            self._on_drop(FrameType.TRAFFIC, "queue_full", dropped)
        if self._lot:
            self._lot.unpark()

    def close(self, reason: str) -> None:
        """End this peering (from any task); the first reason given wins. Queued frames are dropped."""
        if not self.closed:
            self.closed = True
            self.reason = reason
        self._scope.cancel()

    # ------------------------------------------------------------ tasks

    async def run(self) -> str:
        """Run reader and writer until either ends or :meth:`close` is called; return the reason."""
        with self._scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._reader()
            except* PeerClosed as group:
                first = _first_leaf(group)
                self._set_reason(first.reason if isinstance(first, PeerClosed) else "closed")
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
                self._set_reason("io_error")
                log.debug("peer %d: %s", self.port, group.exceptions[0])
        self.closed = True
        if not self.reason:
            self.reason = "closed"
        queued = len(self.protocol) + len(self.traffic) + len(self._delay_line)
        if queued:
            self.protocol.clear()
            self.traffic.clear()
            self._delay_line.clear()
        with trio.move_on_after(1) as cs:
            cs.shield = True
            try:
                await self.stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        return self.reason

    def _set_reason(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.reason = reason

    async def _reader(self) -> None:
        decoder = wire.FrameDecoder()
        stream = self.stream
        read_s = self.t.read_s
        data = self._leftover
        self._leftover = b""
        # one scope for the whole loop; its deadline moves on with every complete frame (§3.5)
        with trio.CancelScope(deadline=trio.current_time() + read_s) as deadline:
            while True:
                if data:
                    try:
                        frames = decoder.feed_raw(data)
                    except MalformedFrame as exc:
                        self._on_drop(exc.frame_type, exc.reason, 1)
                        raise PeerClosed(exc.reason, str(exc)) from None
                    if decoder.buffered > self.max_frame_bytes:
                        self._on_drop(None, "oversize", 1)
                        raise PeerClosed("oversize", f"a frame is longer than {self.max_frame_bytes} bytes")
                    if frames:
                        deadline.deadline = trio.current_time() + read_s
                        await self._deliver(frames)
                data = await stream.receive_some(RECV_BYTES)
                if not data:
                    raise PeerClosed("eof", "the peer closed the stream")
        raise PeerClosed("read_timeout", f"no complete frame for {read_s:g} s")

    async def _deliver(self, frames: list[tuple[int, bytes]]) -> None:
        rxf, rxb = self.rx_frames, self.rx_bytes
        limit = self.max_frame_bytes
        for t, raw in frames:
            n = len(raw)
            if n > limit:
                self._on_drop(t, "oversize", 1)
                raise PeerClosed("oversize", f"{n}-byte frame is longer than {limit} bytes")
            i = _SLOT[t]
            rxf[i] += 1
            rxb[i] += n
        if len(frames) <= SLICE_FRAMES:
            self._on_frames(self, frames)
            return
        for i in range(0, len(frames), SLICE_FRAMES):
            if self.closed:
                raise PeerClosed(self.reason)
            self._on_frames(self, frames[i : i + SLICE_FRAMES])
            await trio.lowlevel.checkpoint()

    def set_shape(self, shape: LinkShape) -> None:
        """Shape this peering's writes with ``shape`` from now on (a link whose class changed mid-run).

        Frames already held keep their delivery times and the stream's order: later frames queue behind them.
        """
        old = self.shaper
        self.shaper = LinkShaper(shape, random.Random(self._shaper_seed + 1))
        if old is not None:
            self.shaper.stats = old.stats  # the peering's counters go on (metrics count per peering)
        self._lot.unpark_all()

    async def _writer(self) -> None:
        t = self.t
        stream = self.stream
        last_write = trio.current_time()
        batch: list[bytes] = []
        while True:
            now = trio.current_time()
            if self.shaper is None:
                self._take_plain(batch)
            else:
                self._take_shaped(batch, now)
            if not batch and now >= last_write + t.keepalive_s:  # the wake-up's own sum: a difference can round
                # below keepalive_s at the instant the deadline fires, and the writer would spin until time moves
                batch.append(KEEPALIVE_BYTES)
                self.tx_frames[_KEEPALIVE_SLOT] += 1
                self.tx_bytes[_KEEPALIVE_SLOT] += len(KEEPALIVE_BYTES)
            if batch:
                data = batch[0] if len(batch) == 1 else b"".join(batch)
                batch.clear()
                try:
                    with trio.fail_after(t.write_s):
                        await stream.send_all(data)
                except trio.TooSlowError:
                    raise PeerClosed("write_timeout", f"a {len(data)}-byte write took over {t.write_s:g} s") from None
                last_write = trio.current_time()
                continue
            wake = last_write + t.keepalive_s
            head = self._delay_line[0][0] - self.lead_s if self._delay_line else math.inf
            if self.protocol or self.traffic:
                continue
            with trio.move_on_at(min(wake, head)) as timer:
                await self._lot.park()
            self._timed = self._delay_line[0][0] if timer.cancelled_caught and head <= wake else None

    def _take_plain(self, batch: list[bytes]) -> None:
        proto = self.protocol
        if proto:
            txf, txb = self.tx_frames, self.tx_bytes
            budget = WRITE_BUDGET_BYTES
            while proto and budget > 0:
                ftype, data = proto.popleft()
                batch.append(data)
                slot = _SLOT[ftype]
                txf[slot] += 1
                txb[slot] += len(data)
                budget -= len(data)
        if self.traffic:
            start = len(batch)
            used = self.traffic.pop_into(batch, WRITE_BUDGET_BYTES)
            self.tx_frames[_TRAFFIC_SLOT] += len(batch) - start
            self.tx_bytes[_TRAFFIC_SLOT] += used

    def _take_shaped(self, batch: list[bytes], now: float) -> None:
        """Pass newly queued frames through the shaper, then release the ones that are due."""
        shaper = self.shaper
        assert shaper is not None
        pending: list[tuple[int, bytes]] = []
        while self.protocol:
            pending.append(self.protocol.popleft())
        if self.traffic:
            items: list[bytes] = []
            self.traffic.pop_into(items, 1 << 62)
            pending.extend((_TRAFFIC, d) for d in items)
        line = self._delay_line
        for ftype, data in pending:
            verdict = shaper.send(now, len(data))
            if verdict.dropped is not None or not verdict.deliver_at:
                self._on_drop(ftype, _LINK_DROPS[verdict.dropped or "loss"], 1)
            elif len(line) >= MAX_DELAY_LINE:
                self._on_drop(ftype, "link_overflow", 1)
            else:
                line.append((verdict.deliver_at[0], ftype, data))
        if self._timed is not None and line and line[0][0] == self._timed:  # woken by the timer for this frame
            late = now - self._timed
            self.lead_s = min(LEAD_MAX_S, max(0.0, self.lead_s + (LEAD_STEP_S if late > 0.0 else -LEAD_STEP_S)))
        self._timed = None
        txf, txb = self.tx_frames, self.tx_bytes
        budget = WRITE_BUDGET_BYTES
        due = now + self.lead_s
        while line and line[0][0] <= due and budget > 0:
            _, ftype, data = line.popleft()
            batch.append(data)
            slot = _SLOT[ftype]
            txf[slot] += 1
            txb[slot] += len(data)
            budget -= len(data)
