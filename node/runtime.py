"""The node process: one sans-IO Router wrapped in one trio nursery.

Everything that touches protocol state runs synchronously between two awaits
(trio is single-threaded), so the router needs no lock: a peer's reader hands
its frames to :meth:`Node._on_frames`, which feeds them to the router as bytes
(``Router.bytes_received``) and then drains the router's outputs in one call
(``Router.drain``, in :meth:`Node._dispatch`):

* ``sends``: a Frame (encoded here) or an already-encoded transit frame, queued
  on the peer's protocol queue or its traffic fair queue; the peer's writer
  sends protocol frames first, in batches;
* ``disconnects``: the router already forgot the peer; its stream is closed;
* ``delivered``: application traffic (the load sink of the benchmark; anything
  else is counted and discarded: a node has no application of its own);
* ``events``: written to the event log (schema v1), counted for metrics;
* ``ping_results``: handed to whoever waits in :meth:`Node.ping`.

One timer task sleeps until ``router.next_deadline()``; any input that moves
that deadline earlier wakes it. Shutdown (:meth:`Node.request_stop`) closes
every peer, writes the final ``frame_stats`` / ``frame_dropped`` /
``node_stopping`` events and returns from :meth:`Node.run`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import struct
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import trio

from node.config import (
    LINK_TYPE_NAMES,
    LinkSpec,
    NodeConfig,
    PeerSpec,
    parse_peer_uri,
)
from node.core import wire
from node.core.crypto import derive_seed
from node.core.errors import MalformedFrame
from node.core.ping import PingResult
from node.core.router import Encoded, Router
from node.core.state import Send
from node.core.types import Frame, LinkType
from node.events import EventLog, FrameStats, frame_type_name
from node.peer import (
    NTYPES,
    HandshakeFailed,
    PeerClosed,
    PeerConn,
    handshake,
)
from node.transports import tcp
from node.transports.tcp import Dialer

__all__ = [
    "LOAD_HEADER_LEN", "LOAD_MAGIC", "LOAD_STRUCT", "Dialer", "LoadFlow", "Node", "load_payload", "snekbed_version",
]  # fmt: skip

log = logging.getLogger("snekbed.node")

LOAD_MAGIC = b"snekload"
LOAD_STRUCT = _LOAD = struct.Struct(">8sBBIQ")  # magic, kind (0 data, 1 ack), flags (1 = ack now), flow id, sequence / count
LOAD_HEADER_LEN = _LOAD.size  # 22
LOAD_ACK_EVERY = 16
_LOAD_SINK_FLOWS = 1024


def snekbed_version() -> str:
    try:
        return version("snekbed")
    except PackageNotFoundError:
        return "0+unknown"


def load_payload(kind: int, flags: int, flow: int, n: int, pad: bytes = b"") -> bytes:
    """A benchmark payload: ``snekload`` header then ``pad``."""
    return _LOAD.pack(LOAD_MAGIC, kind, flags, flow, n) + pad


MAX_HANDSHAKING = 256  # connections allowed to be in their handshake at once


@dataclass(eq=False)
class LoadFlow:
    """A benchmark flow this node sends: the receiver's last acknowledged count."""

    acked: int = 0
    lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)


class Node:
    """A running node. Construct inside ``trio.run`` (the router reads the trio clock)."""

    def __init__(self, cfg: NodeConfig) -> None:
        from node.metrics import (
            NodeMetrics,  # metrics reads Node attributes; import here avoids a cycle
        )

        self.cfg = cfg
        self.identity = cfg.identity
        self.key = cfg.identity.public_key
        now = trio.current_time()
        self.router = Router(
            cfg.identity,
            now,
            wall_offset_ms=int(time.time() * 1000 - now * 1000),
            hop_limiting=cfg.hop_limiting,
            detail_events=cfg.detail_events,
            broadcasts=cfg.broadcasts,
        )
        self.peers: dict[int, PeerConn] = {}
        self.dialers: list[Dialer] = []
        self.events = EventLog(cfg.events, run_id=cfg.run_id, node_key=self.key, node_name=cfg.name)
        self.started_at = now
        self.stopping = False
        self.stop_reason = ""
        self._stop = trio.Event()
        self._servers_stop = trio.Event()
        # Set once node_started is logged: no peer is added before it, so a node's event log
        # always begins with node_started (the pipeline reads node_started as a state reset).
        self._started = trio.Event()
        self._timer_lot = trio.lowlevel.ParkingLot()
        self._timer_deadline = float("inf")
        self.info: dict[str, Any] = {"public_key": self.key.hex(), "pid": os.getpid()}
        # shell counters (the router keeps its own in router.counters)
        self.handshake_failures: Counter[str] = Counter()
        self.disconnects: Counter[str] = Counter()
        self.drops: Counter[tuple[str, str]] = Counter()
        self.event_counts: Counter[str] = Counter()
        self.dial_failures = 0
        self.delivered_frames = 0
        self.internal_errors = 0
        self.pings: Counter[tuple[str, str]] = Counter()
        self.frame_stats = FrameStats(now, NTYPES)
        self._router_drops_seen: Counter[tuple] = Counter()
        self.ping_locks: dict[bytes, trio.Lock] = {}  # one outstanding ping per target (admin.ping)
        self.ping_waiters: dict[bytes, list[PingResult]] = {}
        self.ping_lot = trio.lowlevel.ParkingLot()
        self.load_flows: dict[int, LoadFlow] = {}  # flow id -> sender state (admin.run_load)
        self._load_rx: dict[tuple[bytes, int], int] = {}
        self._handshaking = 0
        self.metrics = NodeMetrics(self)

    # ================================================================ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[dict[str, Any]] = trio.TASK_STATUS_IGNORED) -> None:
        """Start listeners, servers, dialers and timers; return after a clean stop.

        Raises OSError when an address cannot be bound (before anything else starts).
        """
        from node import admin, metrics
        from node.transports import multicast

        cfg = self.cfg
        try:
            async with trio.open_nursery() as nursery:
                listen: list[str] = []
                if cfg.listen is not None:
                    listeners = await nursery.start(tcp.serve, self._accept, cfg.listen.host, cfg.listen.port)
                    listen = [tcp.local_address(li) for li in listeners]
                    self.info["listen"] = listen[0]
                    self.info["listen_all"] = list(listen)
                if cfg.admin is not None:
                    self.info["admin"] = await nursery.start(admin.serve, self, cfg.admin, self._servers_stop.wait)
                if cfg.metrics is not None:
                    self.info["metrics"] = await nursery.start(
                        metrics.serve, self.metrics, cfg.metrics, self._servers_stop.wait
                    )
                if cfg.multicast:
                    mc = multicast.MulticastDiscovery(self, cfg.multicast)
                    self.info["multicast_listen"] = await nursery.start(mc.run)
                    listen.append(self.info["multicast_listen"])
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._stats_loop)
                for spec in cfg.peers:
                    self.start_dialer(spec, nursery)
                self._nursery = nursery
                self.events.emit("node_started", listen=listen, variant="snek", version=snekbed_version())
                self._started.set()
                self._write_ready_file()
                log.info("node %s up: %s", self.key.hex()[:16], json.dumps(self.info))
                task_status.started(self.info)
                await self._stop.wait()
                self._shutdown()
                self._servers_stop.set()
                with trio.move_on_after(2):
                    await trio.sleep(0.05)  # let the HTTP servers see the trigger
                nursery.cancel_scope.cancel()
        finally:
            self.events.close()

    def request_stop(self, reason: str = "requested") -> None:
        """Begin a clean shutdown (idempotent); :meth:`run` returns when it is done."""
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()

    def _shutdown(self) -> None:
        self.stopping = True
        for d in list(self.dialers):
            d.scope.cancel()
        now = trio.current_time()
        for port in sorted(self.peers):
            peer = self.peers.pop(port)
            peer.close("node_stopping")
            self.disconnects["node_stopping"] += 1
            self.router.remove_peer(port, now, "node_stopping")
            self._fold_peer(peer)
        self._dispatch()
        self._emit_stats()
        self.events.emit("node_stopping", reason=self.stop_reason or "requested")
        self.events.close()

    def _write_ready_file(self) -> None:
        path = self.cfg.ready_file
        if path is None:
            return
        tmp = Path(f"{path}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.info))
        os.replace(tmp, path)

    # ================================================================ peers

    def start_dialer(self, spec: PeerSpec, nursery: trio.Nursery | None = None) -> Dialer:
        """Dial ``spec`` now and redial with backoff whenever the peering ends."""
        d = Dialer(spec)
        self.dialers.append(d)
        (nursery or self._nursery).start_soon(tcp.dial_loop, self, d)
        return d

    async def _accept(self, stream: trio.SocketStream) -> None:
        host, port = tcp.remote_address(stream)
        await self._guarded_connection(stream, self.cfg.inbound_link(host), f"tcp://{host}:{port}", None)

    async def accept_with(self, stream: trio.SocketStream, link: LinkSpec) -> None:
        """Run an accepted stream with a given link spec (multicast listener). Never raises."""
        host, port = tcp.remote_address(stream)
        await self._guarded_connection(stream, link, f"tcp://{host}:{port}", None)

    async def dial_once(self, host: str, port: int, link: LinkSpec) -> str:
        """One connection attempt, run until it ends (multicast discovery). Returns the close reason."""
        try:
            stream = await tcp.connect(host, port, self.cfg.timeouts.dial_s)
        except (OSError, trio.TooSlowError) as exc:
            self.dial_failures += 1
            return f"dial_failed: {exc}"
        return await self._guarded_connection(stream, link, f"tcp://{host}:{port}", None)

    async def run_dialed(self, stream: trio.SocketStream, d: Dialer) -> str:
        """Run a stream a Dialer opened, until the peering ends; return why it ended. Never raises."""
        return await self._guarded_connection(stream, d.spec.link, d.spec.uri, d)

    async def _guarded_connection(self, stream: trio.SocketStream, link: LinkSpec, remote: str, d: Dialer | None) -> str:
        """:meth:`_connection`, with bugs logged instead of taking the node down."""
        try:
            return await self._connection(stream, link, remote, d)
        except Exception:  # a bug reached by a peer's input must cost that peer, not the node
            self.internal_errors += 1
            log.exception("internal error on the connection with %s", remote)
            return "internal_error"
        finally:
            with trio.move_on_after(1) as cs:
                cs.shield = True
                try:
                    await stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass

    async def _connection(self, stream: trio.SocketStream, link: LinkSpec, remote: str, d: Dialer | None) -> str:
        cfg = self.cfg
        if self._handshaking >= MAX_HANDSHAKING:  # connections that never authenticate must not eat every fd
            self.handshake_failures["overload"] += 1
            return "handshake_overload"
        self._handshaking += 1
        try:
            key, leftover = await handshake(stream, self.identity, cfg.timeouts.handshake_s)
        except HandshakeFailed as exc:
            self.handshake_failures[exc.reason] += 1
            log.info("handshake with %s failed: %s", remote, exc)
            return f"handshake_{exc.reason}"
        finally:
            self._handshaking -= 1
        await self._started.wait()  # a peer that authenticates while the listeners start waits for node_started
        if self.stopping:
            return "node_stopping"
        port = self.router.add_peer(key, link.link_type, trio.current_time())
        if port is None:
            self.disconnects["ports_full"] += 1
            log.warning("refusing %s (%s): all 253 ports are in use", remote, key.hex()[:16])
            return "ports_full"
        peer = PeerConn(
            port=port, key=key, link=link, stream=stream, remote=remote, timeouts=cfg.timeouts,
            on_frames=self._on_frames, on_drop=self._on_drop, leftover=leftover,
            max_frame_bytes=cfg.max_frame_bytes, flow_depth=cfg.flow_queue_frames,
            protocol_limit=cfg.protocol_queue_frames,
            shaper_seed=self._shaper_seed(key, port),
        )  # fmt: skip
        self.peers[port] = peer
        if d is not None:
            d.port = port
            d.changed.unpark_all()
        log.info("peer up: port %d key %s class %s via %s", port, key.hex()[:16], link.link_class, remote)
        try:
            self._dispatch()
            await peer.run()
        finally:
            if self.peers.get(port) is peer:  # we end it (error, timeout, EOF): tell the router
                del self.peers[port]
                peer.close(peer.reason or "internal_error")
                self.disconnects[peer.reason] += 1
                self.router.remove_peer(port, trio.current_time(), peer.reason)
                self._dispatch()
            self._fold_peer(peer)
            if d is not None and d.port == port:
                d.port = None
            log.info("peer down: port %d key %s reason %s", port, key.hex()[:16], peer.reason)
        return peer.reason

    def _shaper_seed(self, key: bytes, port: int) -> int:
        """Reproducible per-link shaping seed from --shaping-seed (random without it)."""
        base = self.cfg.shaping_seed if self.cfg.shaping_seed is not None else random.getrandbits(64)
        return int.from_bytes(derive_seed("shaping", base, self.key, key, port)[:8], "big")

    def drop_peer(self, port: int, reason: str = "admin_removed") -> PeerConn | None:
        """Close the peering on ``port`` and stop redialling its URI, if it was dialled. None if no such peer."""
        peer = self.peers.pop(port, None)
        for d in list(self.dialers):
            if d.port == port:
                d.scope.cancel()
        if peer is None:
            return None
        peer.close(reason)
        self.disconnects[reason] += 1
        self.router.remove_peer(port, trio.current_time(), reason)
        self._dispatch()
        return peer

    async def add_peer(self, uri: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Dial ``uri`` (redialled with backoff until dropped); wait up to ``timeout_s`` for it to come up.

        Raises ConfigError for a bad URI.
        """
        spec = parse_peer_uri(uri, what="uri")
        d = self.start_dialer(spec)
        with trio.move_on_after(timeout_s):
            while d.port is None and d in self.dialers:
                await d.changed.park()
        if d.port is not None and d.port in self.peers:
            p = self.peers[d.port]
            return {"uri": uri, "status": "connected", "port": p.port, "key": p.key.hex(), "class": p.link.type_name}
        return {"uri": uri, "status": "dialing", "attempts": d.attempts, "last_error": d.last_error}

    def state(self) -> dict[str, Any]:
        """The ``GET /state`` document."""
        from node.admin import state_document

        return state_document(self)

    def connected_keys(self) -> set[bytes]:
        return {p.key for p in self.peers.values()}

    # ================================================================ the hot path

    def _on_frames(self, peer: PeerConn, frames: list[tuple[int, bytes]]) -> None:
        """Hand complete frames from ``peer`` to the router, then drain it. Raises PeerClosed for a malformed frame.

        The router parses them (transit Traffic takes its fast path: :mod:`node.core.forward`).
        """
        try:
            self.router.bytes_received(peer.port, frames, trio.current_time())
        except MalformedFrame as exc:
            self._on_drop(exc.frame_type if exc.frame_type is not None else -1, exc.reason, 1)
            self._dispatch()
            raise PeerClosed(exc.reason, str(exc)) from None
        self._dispatch()

    def flush(self) -> None:
        """Drain the router's outputs now (after calling the router directly, e.g. ``router.send_traffic``)."""
        self._dispatch()

    def _dispatch(self) -> None:
        """Drain every router output (see the module docstring) with :meth:`Router.drain`."""
        r = self.router
        for _ in range(8):  # delivering (load acks) may feed the router again; bounded
            out = r.drain()
            if out.sends:
                self._send(out.sends)
            for port, reason in out.disconnects:
                p = self.peers.pop(port, None)
                if p is not None:
                    log.info("router dropped peer %d (%s): %s", port, p.key.hex()[:16], reason)
                    p.close(reason)
            if out.events:
                self._on_events(out.events)
            if out.ping_results:
                self._on_ping_results(out.ping_results)
            if out.delivered:
                self._on_delivered(out.delivered)
                continue
            break
        if r.next_deadline() < self._timer_deadline:
            self._timer_lot.unpark_all()

    def _send(self, sends: Sequence[Send]) -> None:
        """Queue the router's sends: Traffic on the peer's fair queue, the rest on its protocol queue."""
        peers = self.peers
        encode = wire.encode_frame
        for port, f in sends:
            p = peers.get(port)
            if p is None or p.closed:
                self._on_drop(f.type, "peer_gone", 1)
                continue
            if type(f) is Encoded:  # transit fast path: already in wire form
                p.push_traffic(f.data, f.source_key, f.destination_key)
                continue
            try:
                data = encode(f)
            except ValueError:
                self._on_drop(f.type, "unencodable", 1)
                continue
            if f.type == 3:
                p.push_traffic(data, f.source_key, f.destination_key)
            else:
                p.push_protocol(f.type, data)

    def _on_drop(self, ftype: int, reason: str, n: int) -> None:
        self.drops[(frame_type_name(ftype), reason)] += n
        self.events.count_drop(ftype, reason, n)

    def _on_events(self, evs: Sequence[tuple[str, dict[str, Any]]]) -> None:
        emit = self.events.emit
        for kind, fields in evs:
            self.event_counts[kind] += 1
            if kind == "peer_up":
                fields = dict(fields)
                lt = fields.pop("link_type", LinkType.REMOTE)
                p = self.peers.get(fields.get("port", -1))
                fields["link_class"] = p.link.link_class if p is not None else LINK_TYPE_NAMES.get(lt, str(lt))
            elif kind == "peer_down":
                fields = {k: v for k, v in fields.items() if k in ("port", "peer", "reason")}
            try:
                emit(kind, **fields)
            except ValueError:  # an event kind the schema does not know: count it, do not crash
                log.debug("event %s not in the schema: %s", kind, fields)

    def _on_delivered(self, frames: Sequence[Frame]) -> None:
        for f in frames:
            self.delivered_frames += 1
            p = f.payload
            if len(p) >= LOAD_HEADER_LEN and p[:8] == LOAD_MAGIC:
                self._on_load(f.source_key, p)

    # ================================================================ timers and stats

    async def _timer_loop(self) -> None:
        r = self.router
        while True:
            deadline = r.next_deadline()
            self._timer_deadline = deadline
            with trio.move_on_at(deadline):
                await self._timer_lot.park()
            self._timer_deadline = float("-inf")  # inputs during handle_timer need no wakeup
            now = trio.current_time()
            if now >= r.next_deadline():
                r.handle_timer(now)
                self._dispatch()

    async def _stats_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.stats_interval_s)
            self._emit_stats()

    def _fold_peer(self, peer: PeerConn) -> None:
        self.frame_stats.fold(peer)

    def _emit_stats(self) -> None:
        """Write frame_stats for the interval just ended, and the aggregated frame_dropped counts."""
        self.frame_stats.emit(self.events, self.peers.values(), trio.current_time())
        for key, n in list(self.router.counters.items()):
            if key[0] == "frame_dropped":
                delta = n - self._router_drops_seen[key]
                if delta:
                    self._router_drops_seen[key] = n
                    self.events.count_drop(key[1], key[2], delta)
        self.events.flush_drops()

    # ================================================================ state, pings, traffic

    def _on_ping_results(self, results: Sequence[PingResult]) -> None:
        for res in results:
            self.pings[(res.mode, "received" if res.received else "lost")] += 1
            if res.received and res.rtt_s is not None:
                self.metrics.observe_ping(res.mode, res.rtt_s)
            box = self.ping_waiters.get(res.target)
            if box is not None:
                box.append(res)
        self.ping_lot.unpark_all()

    def _on_load(self, source: bytes, p: bytes) -> None:
        _, kind, flags, flow, n = _LOAD.unpack_from(p)
        if kind == 0:  # data: count it, ack every LOAD_ACK_EVERY frames or when asked
            k = (source, flow)
            count = self._load_rx.pop(k, 0) + 1
            self._load_rx[k] = count  # re-inserted last: the dict is an LRU
            if len(self._load_rx) > _LOAD_SINK_FLOWS:
                del self._load_rx[next(iter(self._load_rx))]
            if flags & 1 or count % LOAD_ACK_EVERY == 0:
                self.router.send_traffic(source, load_payload(1, 0, flow, count), trio.current_time())
        elif kind == 1:
            st = self.load_flows.get(flow)
            if st is not None and n > st.acked:
                st.acked = n
                st.lot.unpark_all()
