"""Peering: turn byte streams into peers (PROTOCOL.md §3): accept, dial, redial with backoff, handshake.

Every connection, accepted or dialled, runs the same way (:meth:`Peering.run_stream`):

1. at most :data:`MAX_HANDSHAKING` connections may be in their handshake at once
   (connections that never authenticate must not eat every file descriptor);
2. :func:`node.peer.handshake` within the handshake timeout (10 s), failures
   counted by reason;
3. wait until the node has logged ``node_started``, then :meth:`PeerHost.attach`
   (the node allocates the port, tells the router, builds the
   :class:`~node.peer.PeerConn`);
4. run the peer until it ends, then :meth:`PeerHost.detach` (the router forgets
   it); the stream is always closed, and a bug costs the peer, not the node.

A :class:`Dialer` dials a configured or admin-added URI and redials it whenever
the peering ends, with exponential backoff (``backoff_min_s`` doubling to
``backoff_max_s``, x0.8..1.2 jitter, reset after a peering that lasted 10 s).

Peering sees the node only through :class:`PeerHost` and opens streams with the
``connect`` function it is given (:func:`node.transports.tcp.connect` in a node;
a memory-stream factory in the tests); ``bluetooth://`` URIs are dialled with the
:class:`~node.transports.bluetooth.SeqpacketFamily` it is given (L2CAP in a node,
an AF_UNIX stand-in in the tests).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from node.config import ConfigError, LinkSpec, NodeConfig, PeerSpec, parse_peer_uri
from node.core.crypto import Identity
from node.events import EventLog
from node.peer import HandshakeFailed, PeerConn, handshake
from node.transports.bluetooth import SeqpacketFamily
from node.view import ShellCounters

__all__ = ["MAX_HANDSHAKING", "STABLE_S", "Connect", "Dialer", "PeerHost", "Peering"]

log = logging.getLogger("snekbed.node")

MAX_HANDSHAKING = 256  # connections allowed to be in their handshake at once
STABLE_S = 10.0  # a peering that lasted this long resets the backoff

#: Open a stream to (host, port) within timeout_s; raises OSError or trio.TooSlowError.
Connect = Callable[[str, int, float], Awaitable[trio.abc.Stream]]


async def _no_bluetooth(host: str, port: int, timeout_s: float) -> trio.abc.Stream:
    raise OSError(f"cannot dial bluetooth://{host}/{port}: this node has no Bluetooth transport")


class PeerHost(Protocol):
    """What peering needs from the node (:class:`node.runtime.Node`)."""

    @property
    def identity(self) -> Identity: ...
    @property
    def cfg(self) -> NodeConfig: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def counters(self) -> ShellCounters: ...
    @property
    def peers(self) -> Mapping[int, PeerConn]: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def started(self) -> bool:
        """``node_started`` is logged."""
        ...

    async def wait_started(self) -> None:
        """Return once ``node_started`` is logged (no peer is added before it)."""
        ...

    def attach(self, key: bytes, link: LinkSpec, stream: trio.abc.Stream, remote: str, leftover: bytes) -> PeerConn | None:
        """Give an authenticated stream a port and a PeerConn; None when every port is in use."""
        ...

    def detach(self, peer: PeerConn) -> None:
        """``peer.run()`` returned: forget the peer (if the node has not already) and keep its counts."""
        ...


@dataclass(eq=False)
class Dialer:
    """A configured or admin-added peer URI that is dialled, and redialled with backoff."""

    spec: PeerSpec
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    port: int | None = None  # the peer's port while connected
    attempts: int = 0
    last_error: str | None = None
    changed: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    kick: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)  # redial now (admin)
    kicked: bool = False
    attempt: trio.CancelScope | None = None  # the connect in flight, which a redial now starts over
    #: dial once (a radio link, POST /peers ``"redial": false``): dialled until this instant (trio's clock) or
    #: until it first comes up, and never again once that peering ends; None: redialled until dropped
    once_until: float | None = None
    came_up: bool = False  # a peering of it was attached (the handshake done), even if it has ended since


class Peering:
    """Accepts and dials connections for ``host``. Start with ``await nursery.start(peering.run, specs)``."""

    def __init__(
        self, host: PeerHost, connect: Connect, *, rng: random.Random | None = None,
        bluetooth: SeqpacketFamily | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self._connect = connect
        #: the sockets of ``bluetooth://`` peers (L2CAP in a node, an AF_UNIX stand-in in tests); None: refused
        self.bluetooth = bluetooth
        self._rng = rng or random.Random()
        self.dialers: list[Dialer] = []
        self.handshaking = 0
        self._nursery: trio.Nursery | None = None

    async def run(self, specs: list[PeerSpec], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Dial every spec, and host the dialers added later, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for spec in specs:
                self.start_dialer(spec)
            task_status.started()
            await trio.sleep_forever()

    # ------------------------------------------------------------ dialling

    def start_dialer(self, spec: PeerSpec, nursery: trio.Nursery | None = None, *,
                     once_until: float | None = None) -> Dialer:  # fmt: skip
        """Dial ``spec`` now and redial with backoff whenever the peering ends (with ``once_until``: only until
        that instant or until it first comes up)."""
        target = nursery or self._nursery
        if target is None:
            raise RuntimeError("Peering.run has not started: no nursery for the dialer")
        d = Dialer(spec, once_until=once_until)
        self.dialers.append(d)
        target.start_soon(self.dial_loop, d)
        return d

    async def dial_loop(self, d: Dialer) -> None:
        """Dial ``d.spec`` until the node stops or ``d.scope`` is cancelled; redial after failures and
        disconnects with exponential backoff (``backoff_min_s`` doubling to ``backoff_max_s``, +/-20 %
        jitter; reset after a peering that lasted 10 s). A dial-once dialer ends when its first peering ends,
        or at ``once_until`` if none came up; its retries before then are at ``backoff_min_s`` (a radio link
        being made). Never raises (except Cancelled)."""
        host = self.host
        t = host.cfg.timeouts
        spec = d.spec
        backoff = t.backoff_min_s
        try:
            with d.scope:
                while not host.stopping:
                    if d.once_until is not None and d.attempts and trio.current_time() >= d.once_until:
                        return  # dial once: not up in time (add_peer gives it up too)
                    d.attempts += 1
                    stream = None
                    with trio.CancelScope() as d.attempt:  # cancelled by redial_now: dialled over at once
                        try:
                            stream = await self._connector(spec)(spec.host, spec.port, t.dial_s)
                        except (OSError, trio.TooSlowError) as exc:
                            host.counters.dial_failures += 1
                            d.last_error = f"dial failed: {type(exc).__name__}: {exc}"
                            log.debug("dial %s: %s", spec.uri, d.last_error)
                    d.attempt = None
                    if stream is not None:
                        started = trio.current_time()
                        d.last_error = await self.run_stream(stream, d.spec.link, d.spec.uri, d)
                        if trio.current_time() - started >= STABLE_S:
                            backoff = t.backoff_min_s
                    if d.once_until is not None:
                        if d.came_up or trio.current_time() >= d.once_until:
                            return  # dial once: that peering ended (or it never came up in time)
                        backoff = t.backoff_min_s
                    d.changed.unpark_all()
                    if not d.kicked:  # a redial asked while this attempt ran goes at once
                        wait = backoff * self._rng.uniform(0.8, 1.2)
                        if d.once_until is not None:
                            wait = min(wait, max(0.0, d.once_until - trio.current_time()))
                        with trio.move_on_after(wait):
                            await d.kick.park()
                    if d.kicked:  # POST /peers/redial: the path is back, dial now and start the backoff over
                        d.kicked = False
                        backoff = t.backoff_min_s
                    else:
                        backoff = min(backoff * 2, t.backoff_max_s)
        finally:
            if d in self.dialers:
                self.dialers.remove(d)
            d.changed.unpark_all()

    def _connector(self, spec: PeerSpec) -> Connect:
        """How to dial ``spec``: TCP, or the Bluetooth family for ``bluetooth://`` URIs."""
        if spec.transport != "bluetooth":
            return self._connect
        if self.bluetooth is None:
            return _no_bluetooth
        return self.bluetooth.connect

    def check_transport(self, spec: PeerSpec, what: str) -> None:
        """Raise ConfigError when ``spec`` needs Bluetooth and this node cannot use it (says what is missing)."""
        if spec.transport != "bluetooth":
            return
        why = "this node has no Bluetooth transport" if self.bluetooth is None else self.bluetooth.unavailable()
        if why is not None:
            raise ConfigError(what, spec.uri, why)

    def redial_now(self) -> int:
        """Every dialer not peered dials at once: one waiting out its backoff is woken, one whose connect is in
        flight starts it over (an attempt begun while the path was down can hang until its dial timeout: a SYN
        lost where the link was cut). Returns how many."""
        n = 0
        for d in self.dialers:
            if d.port is None:
                d.kicked = True
                d.kick.unpark_all()
                if d.attempt is not None:
                    d.attempt.cancel()
                n += 1
        return n

    async def dial_once(self, host: str, port: int, link: LinkSpec) -> str:
        """One connection attempt, run until it ends (multicast discovery). Returns the close reason."""
        try:
            stream = await self._connect(host, port, self.host.cfg.timeouts.dial_s)
        except (OSError, trio.TooSlowError) as exc:
            self.host.counters.dial_failures += 1
            return f"dial_failed: {exc}"
        return await self.run_stream(stream, link, f"tcp://{host}:{port}", None)

    async def add_peer(self, uri: str, timeout_s: float = 10.0, *, redial: bool = True) -> dict[str, Any]:
        """Dial ``uri`` (redialled with backoff until dropped); wait up to ``timeout_s`` for it to come up.
        With ``redial`` false it is dialled only until it first comes up within ``timeout_s`` and never again
        once that peering ends (``"status": "failed"`` when it did not come up).

        Raises ConfigError for a bad URI, and for a Bluetooth URI where Bluetooth is not available.
        """
        spec = parse_peer_uri(uri, what="uri")
        self.check_transport(spec, "uri")
        d = self.start_dialer(spec, once_until=None if redial else trio.current_time() + timeout_s)
        with trio.move_on_after(timeout_s):
            while d.port is None and d in self.dialers:
                await d.changed.park()
        peers = self.host.peers
        if d.port is not None and d.port in peers:
            p = peers[d.port]
            return {"uri": uri, "status": "connected", "port": p.port, "key": p.key.hex(), "class": p.link.type_name}
        if not redial:
            d.scope.cancel()  # not up in time: given up, so nothing dials it later
            return {"uri": uri, "status": "failed", "attempts": d.attempts, "last_error": d.last_error}
        return {"uri": uri, "status": "dialing", "attempts": d.attempts, "last_error": d.last_error}

    def stop_redialling(self, port: int) -> None:
        """Cancel the dialers whose peering is on ``port``."""
        for d in list(self.dialers):
            if d.port == port:
                d.scope.cancel()

    def cancel_dialers(self) -> None:
        for d in list(self.dialers):
            d.scope.cancel()

    # ------------------------------------------------------------ one connection

    async def accept(self, stream: trio.abc.Stream, remote: str, link: LinkSpec) -> str:
        """Run an accepted stream until the peering ends; return why it ended. Never raises."""
        return await self.run_stream(stream, link, remote, None)

    async def run_stream(self, stream: trio.abc.Stream, link: LinkSpec, remote: str, d: Dialer | None) -> str:
        """:meth:`_connection`, with bugs logged instead of taking the node down; the stream is always closed."""
        try:
            return await self._connection(stream, link, remote, d)
        except Exception:  # a bug reached by a peer's input must cost that peer, not the node
            self.host.counters.internal_errors += 1
            log.exception("internal error on the connection with %s", remote)
            return "internal_error"
        finally:
            with trio.move_on_after(1) as cs:
                cs.shield = True
                try:
                    await stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass

    async def _connection(self, stream: trio.abc.Stream, link: LinkSpec, remote: str, d: Dialer | None) -> str:
        host = self.host
        if self.handshaking >= MAX_HANDSHAKING:  # connections that never authenticate must not eat every fd
            host.counters.handshake_failures["overload"] += 1
            return "handshake_overload"
        self.handshaking += 1
        try:
            key, leftover = await handshake(
                stream, host.identity, host.cfg.timeouts.handshake_s, host.cfg.variant.capabilities
            )
        except HandshakeFailed as exc:
            host.counters.handshake_failures[exc.reason] += 1
            log.info("handshake with %s failed: %s", remote, exc)
            failed = exc.reason
        else:
            failed = None
        finally:
            self.handshaking -= 1
        if failed is not None:
            if host.started:  # the event log begins with node_started: earlier failures are counted and logged only
                host.events.emit("handshake_failed", reason=failed, remote=remote)
            return f"handshake_{failed}"
        await host.wait_started()  # a peer that authenticates while the listeners start waits for node_started
        if host.stopping:
            return "node_stopping"
        peer = host.attach(key, link, stream, remote, leftover)
        if peer is None:
            return "ports_full"
        port = peer.port
        if d is not None:
            d.port, d.came_up = port, True
            d.changed.unpark_all()
        log.info("peer up: port %d key %s class %s via %s", port, key.hex()[:16], link.link_class, remote)
        try:
            await peer.run()
        finally:
            host.detach(peer)
            if d is not None and d.port == port:
                d.port = None
            log.info("peer down: port %d key %s reason %s", port, key.hex()[:16], peer.reason)
        return peer.reason
