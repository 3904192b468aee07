"""The node: one sans-IO Router, its connected peers, and what drains the router's outputs.

Everything that touches protocol state runs synchronously between two awaits
(trio is single-threaded), so the router needs no lock: a peer's reader hands
its raw frames to :meth:`Node._on_frames`, which feeds the router
(``Router.bytes_received``: transit Traffic takes the core's fast path) and then
drains the router's outputs in one call (``Router.drain``, in :meth:`Node._dispatch`):

* ``sends``: frames (encoded once here) or already-encoded transit bytes, queued on
  the peer's protocol queue or its traffic fair queue; the peer's writer sends
  protocol frames first, in batches;
* ``disconnects``: the router already forgot the peer; its stream is closed;
* ``delivered``: application traffic (the load sink of the benchmark,
  :mod:`node.load`; anything else is counted and discarded: a node has no
  application of its own);
* ``events``: written to the event log (schema v1), counted for metrics; a kind
  the schema does not know is counted (``snek_unknown_events_total``) and logged
  once at warning level;
* ``ping_results``: handed to whoever waits in :meth:`Node.ping` (:mod:`node.pings`).

One timer task sleeps until ``router.next_deadline()``; any input that moves
that deadline earlier wakes it.

Connections reach the node through :mod:`node.peering` (:meth:`Node.attach` /
:meth:`Node.detach`); starting and stopping the whole node is
:mod:`node.lifecycle`'s. The admin API and the metrics collector see the node
through :class:`node.view.AdminView` / :class:`~node.view.NodeView`, which it
satisfies.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import trio

from contract.links import LINK_TYPE_NAMES, LinkShape, resolve_class
from node.config import LinkSpec, NodeConfig
from node.core import wire
from node.core.attacks import make_strategy
from node.core.crypto import derive_seed
from node.core.errors import MalformedFrame
from node.core.ping import PingResult
from node.core.recorder import FlightRecorder
from node.core.router import Encoded, Router
from node.core.state import MAX_PORTS, Send
from node.core.types import Frame, FrameType, LinkType
from node.events import EventLog, FrameStats
from node.load import LOAD_HEADER_LEN, LOAD_MAGIC, LoadEndpoint
from node.metrics import NodeMetrics
from node.peer import NTYPES, PeerClosed, PeerConn
from node.peering import Connect, Peering
from node.pings import Pinger
from node.transports import bluetooth as bt
from node.transports import tcp
from node.view import ShellCounters

__all__ = ["Node", "snekbed_version"]

log = logging.getLogger("snekbed.node")

_TRAFFIC = int(FrameType.TRAFFIC)  # a plain int: compared once per frame the node sends


def snekbed_version() -> str:
    try:
        return version("snekbed")
    except PackageNotFoundError:
        return "0+unknown"


class Node:
    """A node's protocol state and peers. Construct inside ``trio.run`` (the router reads the trio clock).

    ``connect`` opens outgoing streams (TCP by default); ``rng`` jitters the redial backoff; ``bluetooth`` carries
    ``bluetooth://`` peerings (L2CAP; an AF_UNIX stand-in in tests).
    """

    def __init__(
        self, cfg: NodeConfig, *, connect: Connect = tcp.connect, rng: random.Random | None = None,
        bluetooth: bt.SeqpacketFamily | None = bt.L2CAP,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.identity = cfg.identity
        self.key = cfg.identity.public_key
        self.name = cfg.name
        self.version = snekbed_version()
        now = trio.current_time()
        self.router = Router(
            cfg.identity,
            now,
            wall_offset_ms=int(time.time() * 1000 - now * 1000),
            detail_events=cfg.detail_events,
            **cfg.variant.router_options(),
        )
        for rates, peer in cfg.adversary:
            self.router.set_adversary(rates, peer)
        if cfg.attack is not None:
            self.router.set_attack(make_strategy(*cfg.attack, timers=self.router.t), now)
        self.peers: dict[int, PeerConn] = {}
        #: the shape POST /peers/shape last gave the peerings with a key: a later peering with it (a link cut and
        #: made again) is shaped so too, not as its URI says
        self.link_shapes: dict[bytes, LinkShape] = {}
        self.events = EventLog(cfg.events, run_id=cfg.run_id, node_key=self.key, node_name=cfg.name)
        self.started_at = now
        self.stopping = False
        # Set once node_started is logged: no peer is added before it, so a node's event log
        # always begins with node_started (the pipeline reads node_started as a state reset).
        self._started = trio.Event()
        self._timer_lot = trio.lowlevel.ParkingLot()
        self._timer_deadline = float("inf")
        self.counters = ShellCounters()  # the shell's own (the router keeps its own in router.counters)
        self.frame_stats = FrameStats(now, NTYPES)
        #: the flight recorder (node.core.recorder), None when --recorder-s is 0
        self.recorder = FlightRecorder(cfg.recorder_s, cfg.recorder_max_entries) if cfg.recorder_s > 0 else None
        self._router_drops_seen: Counter[tuple] = Counter()
        self.peering = Peering(self, connect, rng=rng, bluetooth=bluetooth)
        self.pinger = Pinger(self.router, self.flush)
        self.load = LoadEndpoint(self.router.send_traffic, self.flush)
        self.metrics = NodeMetrics(self)

    # ================================================================ the read-only view (node.view)

    def state(self) -> dict[str, Any]:
        """The ``GET /state`` document: the router's, with link type numbers as class names."""
        s = self.router.state(trio.current_time())
        s["internal_errors"] = self.counters.internal_errors
        s["variant_spec"] = str(self.cfg.variant)
        for p in s["peers"]:
            lt = p.pop("link_type")
            p["class"] = LINK_TYPE_NAMES.get(lt, str(lt))
            conn = self.peers.get(p["port"])
            if conn is not None:
                p["link_class"] = conn.link.link_class
                p["remote"] = conn.remote
                p["shape"] = conn.shaper.shape.model_dump(exclude_defaults=True) if conn.shaper is not None else {}
        return s

    def routes(self) -> list[dict[str, Any]]:
        return self.router.routes(trio.current_time())

    def router_counters(self) -> Mapping[tuple[Any, ...], int]:
        return self.router.counters

    def lines_suppressed(self) -> Mapping[str, int]:
        return self.events.suppressed

    def connected_keys(self) -> set[bytes]:
        return {p.key for p in self.peers.values()}

    # ================================================================ admin entry points

    async def ping(self, key: bytes, mode: str, count: int, timeout_s: float) -> dict[str, Any]:
        """Send ``count`` pings to ``key`` one after another (§8); see :meth:`node.pings.Pinger.ping`."""
        return await self.pinger.ping(key, mode, count, timeout_s)

    async def run_load(self, dest: bytes, payload_bytes: int, count: int, inflight: int, timeout_s: float) -> dict[str, Any]:
        """Closed-loop benchmark traffic to ``dest``; see :meth:`node.load.LoadEndpoint.run`. Raises ValueError."""
        return await self.load.run(dest, payload_bytes, count, inflight, timeout_s)

    async def add_peer(self, uri: str, timeout_s: float = 10.0, *, redial: bool = True) -> dict[str, Any]:
        """Dial ``uri`` (redialled with backoff until dropped; with ``redial`` false, only until it first comes
        up); wait up to ``timeout_s`` for it to come up.

        Raises ConfigError for a bad URI.
        """
        return await self.peering.add_peer(uri, timeout_s, redial=redial)

    def drop_peer(self, port: int, reason: str = "admin_removed") -> PeerConn | None:
        """Close the peering on ``port`` and stop redialling its URI, if it was dialled. None if no such peer."""
        peer = self.peers.pop(port, None)
        self.peering.stop_redialling(port)
        if peer is None:
            return None
        peer.close(reason)
        self.counters.count_disconnect(reason)
        self.router.remove_peer(port, trio.current_time(), reason)
        self._dispatch()
        return peer

    def redial_now(self) -> int:
        """``POST /peers/redial``: every dialer waiting out its backoff dials at once (a link came back)."""
        return self.peering.redial_now()

    def set_adversary(self, rates: Mapping[str, float], peer: bytes | None) -> dict[str, Any]:
        """``POST /adversary``: drop received frames by kind (node.core.adversary). Raises ValueError."""
        self.router.set_adversary(rates, peer)
        adv = self.router.adversary
        return {"dropped": adv.dropped if adv is not None else 0, "active": bool(adv and adv.active)}

    def set_attack(self, strategy: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /adversary`` with a ``strategy`` (node.core.attacks; ``none``: honest again): its description, and
        under ``replaced`` the one of the strategy it replaced (what it did: ``swallowed``, ``made``), when there
        was one. Raises ValueError."""
        strategy_made = make_strategy(strategy, params, timers=self.router.t)
        old = self.router.attack
        self.router.set_attack(strategy_made, trio.current_time())
        self._dispatch()
        attack = self.router.attack
        out = attack.describe() if attack is not None else {"strategy": "none"}
        return out | ({"replaced": old.describe()} if old is not None else {})

    def set_link_shape(self, peer: bytes | None, link_class: str | None, shaping: Mapping[str, float | None], *,
                       port: int | None = None) -> dict[int, dict[str, Any]]:
        """``POST /peers/shape``: shape the peerings with ``peer`` as ``link_class`` (default: their class) with
        ``shaping`` overriding its fields, a None clearing one (no delay, no rate limit, ...); later peerings with
        ``peer`` get the same shape. With ``port``: the peering on that port alone (and only if its key is
        ``peer``, when given), not remembered for later peerings (a radio link among several peerings of a pair).
        Returns each changed port's shape (its non-default fields), {} when none matched. Raises ValueError
        (unknown class or field)."""
        unknown = sorted(set(shaping) - set(LinkShape.model_fields))
        if unknown:
            raise ValueError(f"shaping: unknown field {unknown[0]!r} (known: {', '.join(LinkShape.model_fields)})")
        out: dict[int, dict[str, Any]] = {}
        for p, conn in sorted(self.peers.items()):
            if (port is not None and p != port) or (peer is not None and conn.key != peer):
                continue
            fields = {**resolve_class(link_class or conn.link.link_class).shape.model_dump(), **shaping}
            shape = LinkShape(**{k: v for k, v in fields.items() if v is not None})
            conn.set_shape(shape)
            if port is None:
                self.link_shapes[conn.key] = shape
            out[p] = shape.model_dump(exclude_defaults=True)
        return out

    # ================================================================ peers (node.peering.PeerHost)

    async def wait_started(self) -> None:
        await self._started.wait()

    @property
    def started(self) -> bool:
        return self._started.is_set()

    def set_started(self) -> None:
        """``node_started`` is logged: connections that authenticated may now become peers."""
        self._started.set()

    def attach(self, key: bytes, link: LinkSpec, stream: trio.abc.Stream, remote: str, leftover: bytes) -> PeerConn | None:
        """Give an authenticated stream a port and a PeerConn (§3.6); None when all ports (1..MAX_PORTS) are in use."""
        cfg = self.cfg
        port = self.router.add_peer(key, link.link_type, trio.current_time())
        if port is None:
            self.counters.count_disconnect("ports_full")
            log.warning("refusing %s (%s): all %d ports are in use", remote, key.hex()[:16], MAX_PORTS)
            return None
        if key in self.link_shapes:  # reshaped mid-run (POST /peers/shape): the shape outlives the connection
            shape = self.link_shapes[key]
            link = dataclasses.replace(link, shape=None if shape.is_noop else shape)
        peer = PeerConn(
            port=port, key=key, link=link, stream=stream, remote=remote, timeouts=cfg.timeouts,
            on_frames=self._on_frames, on_drop=self._on_drop, leftover=leftover,
            max_frame_bytes=cfg.max_frame_bytes, flow_depth=cfg.flow_queue_frames,
            protocol_limit=cfg.protocol_queue_frames,
            shaper_seed=self._shaper_seed(key, port),
        )  # fmt: skip
        self.peers[port] = peer
        self._dispatch()
        return peer

    def detach(self, peer: PeerConn) -> None:
        """``peer.run()`` returned: if the peer ended itself (error, timeout, EOF), tell the router (§3.7)."""
        port = peer.port
        if self.peers.get(port) is peer:
            del self.peers[port]
            peer.close(peer.reason or "internal_error")
            self.counters.count_disconnect(peer.reason)
            self.router.remove_peer(port, trio.current_time(), peer.reason)
            self._dispatch()
        self._fold_peer(peer)

    def stop_peers(self, reason: str) -> None:
        """The node is stopping: no more dials, every peer closed with ``reason``, the router told."""
        self.stopping = True
        self.peering.cancel_dialers()
        now = trio.current_time()
        for port in sorted(self.peers):
            peer = self.peers.pop(port)
            peer.close(reason)
            self.counters.count_disconnect(reason)
            self.router.remove_peer(port, now, reason)
            self._fold_peer(peer)
        self._dispatch()

    def _shaper_seed(self, key: bytes, port: int) -> int:
        """Reproducible per-link shaping seed from --shaping-seed (random without it)."""
        base = self.cfg.shaping_seed if self.cfg.shaping_seed is not None else random.getrandbits(64)
        return int.from_bytes(derive_seed("shaping", base, self.key, key, port)[:8], "big")

    # ================================================================ the hot path

    def _on_frames(self, peer: PeerConn, frames: list[tuple[int, bytes]]) -> None:
        """Hand complete frames from ``peer`` to the router, then drain it. Raises PeerClosed for a malformed frame.

        The router parses them (transit Traffic takes its fast path: :mod:`node.core.forward`).
        """
        now = trio.current_time()
        rec = self.recorder
        if rec is not None:
            rec.received(peer.port, frames, now)
        try:
            self.router.bytes_received(peer.port, frames, now)
        except MalformedFrame as exc:
            self._on_drop(exc.frame_type, exc.reason, 1)
            if rec is not None:
                rec.dropped(peer.port, None, exc.reason, now)
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
            if out.dropped and self.recorder is not None:
                now = trio.current_time()
                for port, frame, reason in out.dropped:
                    self.recorder.dropped(port, frame, reason, now)
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
        rec = self.recorder
        now = 0.0
        if rec is not None:  # the router sent them: the encoded ones in one call, the others once encoded, below;
            now = trio.current_time()  # what cannot leave is recorded dropped after that
            rec.sent(sends, now, objects=False)
        for port, f in sends:
            p = peers.get(port)
            if p is None or p.closed:
                self._on_drop(f.type, "peer_gone", 1)
                if rec is not None:
                    rec.dropped(port, f.data if type(f) is Encoded else f, "peer_gone", now)
                continue
            if type(f) is Encoded:  # transit fast path: already in wire form
                p.push_traffic(f.data, f.source_key, f.destination_key)
                continue
            try:
                data = encode(f)
            except ValueError:
                self._on_drop(f.type, "unencodable", 1)
                if rec is not None:
                    rec.dropped(port, f, "unencodable", now)
                continue
            if rec is not None:
                rec.wrote(port, data, now)
            if f.type == _TRAFFIC:
                p.push_traffic(data, f.source_key, f.destination_key)
            else:
                p.push_protocol(f.type, data)

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


    # ================================================================ router outputs other than frames

    def _on_drop(self, ftype: int | None, reason: str, n: int) -> None:
        """Count ``n`` dropped frames of wire type ``ftype`` (None: no frame type known, counted as unknown)."""
        self.counters.count_drop(ftype, reason, n)
        self.events.count_drop(ftype, reason, n)

    def _on_events(self, evs: Sequence[tuple[str, dict[str, Any]]]) -> None:
        emit = self.events.emit
        counts = self.counters.events
        rec = self.recorder
        now = trio.current_time()
        for kind, fields in evs:
            counts[kind] += 1
            if kind == "peer_up":
                fields = dict(fields)
                lt = fields.pop("link_type", LinkType.REMOTE)
                p = self.peers.get(fields.get("port", -1))
                fields["link_class"] = p.link.link_class if p is not None else LINK_TYPE_NAMES.get(lt, str(lt))
            elif kind == "peer_down":
                fields = {k: v for k, v in fields.items() if k in ("port", "peer", "reason")}
            if rec is not None:
                rec.event(kind, fields, now)
            try:
                emit(kind, **fields)
            except ValueError:  # an event kind the schema does not know: counted, reported once, never a crash
                self._unknown_event(kind, fields)

    def _unknown_event(self, kind: str, fields: dict[str, Any]) -> None:
        unknown = self.counters.events_unknown
        if not unknown[kind]:
            log.warning("event kind %r is not in the event schema: not written to the event log "
                        "(counted in snek_unknown_events_total; first fields: %s)", kind, sorted(fields))  # fmt: skip
        unknown[kind] += 1

    def _on_delivered(self, frames: Sequence[Frame]) -> None:
        for f in frames:
            self.counters.delivered_frames += 1
            p = f.payload
            if len(p) >= LOAD_HEADER_LEN and p.startswith(LOAD_MAGIC):
                self.load.on_payload(f.source_key, p)

    def _on_ping_results(self, results: Sequence[PingResult]) -> None:
        for res in results:
            self.counters.pings[(res.mode, "received" if res.received else "lost")] += 1
            if res.received and res.rtt_s is not None:
                self.metrics.observe_ping(res.mode, res.rtt_s)
        self.pinger.on_results(results)

    # ================================================================ timers and stats

    async def run_timers(self) -> None:
        """The router's timer and the periodic ``frame_stats``; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._stats_loop)

    async def _stats_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.stats_interval_s)
            self.emit_stats()

    def _fold_peer(self, peer: PeerConn) -> None:
        self.frame_stats.fold(peer)

    def emit_stats(self) -> None:
        """Write frame_stats for the interval just ended, and the aggregated frame_dropped counts."""
        self.frame_stats.emit(self.events, self.peers.values(), trio.current_time())
        for key, n in list(self.router.counters.items()):
            if key[0] == "frame_dropped":
                delta = n - self._router_drops_seen[key]
                if delta:
                    self._router_drops_seen[key] = n
                    self.events.count_drop(key[1], key[2], delta)
        self.events.flush_drops()
