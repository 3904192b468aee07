"""LAN multicast discovery (PROTOCOL.md Appendix A), interoperable with the reference's beacon.

Every 2 s, on each configured interface, the node sends a 34-byte UDP datagram
(its 32-byte public key, then its multicast TCP listen port as a u16 BE) to
``224.0.0.114:60606`` and ``[ff02::114]:60606``. On receipt it ignores short
datagrams, its own key and keys it is already connected to, and otherwise dials
the sender's address at the advertised port (5 s dial timeout, one dial at a
time per address). Both dialled and accepted connections get link type
Multicast: discovery has its own TCP listener on an ephemeral port, as the
reference does.

Interfaces that do not exist or refuse multicast are logged and skipped; they
never stop the node. IPv6 is best effort (an interface without IPv6 is normal).
A socket that cannot be set up or bound is closed on every failure path.

Discovery sees the node only through what it is given: the node's key, a
``connected_keys`` function, and ``accept`` / ``dial`` coroutines that run a
peering until it ends (:meth:`node.peering.Peering.accept` and
:meth:`~node.peering.Peering.dial_once` in a node).
"""

from __future__ import annotations

import fcntl
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Collection

import trio

from node.config import LinkSpec
from node.core.types import KEY_LEN, LinkType
from node.transports import tcp

__all__ = [
    "BEACON_INTERVAL_S", "GROUP_V4", "GROUP_V6", "PORT", "MulticastDiscovery", "beacon", "iface_ipv4", "open_group_v4",
    "open_group_v6", "parse_beacon",
]  # fmt: skip

log = logging.getLogger("snekbed.node.multicast")

GROUP_V4 = "224.0.0.114"
GROUP_V6 = "ff02::114"
PORT = 60606
BEACON_INTERVAL_S = 2.0
_U16_PORT = struct.Struct(">H")  # the beacon's TCP port, u16 BE
BEACON_LEN = KEY_LEN + _U16_PORT.size  # 34
MULTICAST_LINK = LinkSpec("multicast", int(LinkType.MULTICAST), None)
_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
_SIOCGIFADDR = 0x8915  # ioctl: an interface's address


def beacon(key: bytes, port: int) -> bytes:
    """The 34-byte datagram: key then TCP port (u16 BE). Raises ValueError for a bad key or port."""
    if len(key) != KEY_LEN or not 0 < port <= 0xFFFF:
        raise ValueError(f"beacon needs a {KEY_LEN}-byte key and a port 1..65535, got {len(key)} bytes and {port}")
    return key + _U16_PORT.pack(port)


def parse_beacon(data: bytes) -> tuple[bytes, int] | None:
    """(key, port) from a datagram, or None when it is shorter than 34 bytes (extra bytes are ignored)."""
    if len(data) < BEACON_LEN:
        return None
    return bytes(data[:KEY_LEN]), _U16_PORT.unpack_from(data, KEY_LEN)[0]


def iface_ipv4(iface: str) -> str | None:
    """The interface's IPv4 address (SIOCGIFADDR), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def _socket_v4(ifindex: int, source: str | None) -> trio.socket.SocketType:
    s = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        mreqn = socket.inet_aton(GROUP_V4) + socket.inet_aton(source or "0.0.0.0") + struct.pack("@i", ifindex)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
        s.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)  # only our own memberships
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)  # beacons leave with the iface's address
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    except OSError:
        s.close()
        raise
    return s


def _socket_v6(ifindex: int) -> trio.socket.SocketType:
    s = trio.socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        mreq = socket.inet_pton(socket.AF_INET6, GROUP_V6) + struct.pack("@I", ifindex)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 1)
    except OSError:
        s.close()
        raise
    return s


async def open_group_v4(ifindex: int, source: str | None, port: int) -> trio.socket.SocketType:
    """A UDP socket in the IPv4 group on interface ``ifindex``, bound to the group's ``port``.

    Raises OSError; the socket is closed whenever this does not return it.
    """
    s = _socket_v4(ifindex, source)
    try:
        await s.bind((GROUP_V4, port))
    except BaseException:
        s.close()
        raise
    return s


async def open_group_v6(ifindex: int, port: int) -> trio.socket.SocketType:
    """A UDP socket in the IPv6 link-local group on interface ``ifindex``, bound to ``port``.

    Raises OSError; the socket is closed whenever this does not return it.
    """
    s = _socket_v6(ifindex)
    try:
        await s.bind((GROUP_V6, port, 0, ifindex))
    except BaseException:
        s.close()
        raise
    return s


Accept = Callable[[trio.SocketStream, str, LinkSpec], Awaitable[str]]  # (stream, remote, link) -> close reason
Dial = Callable[[str, int, LinkSpec], Awaitable[str]]  # (host, port, link) -> close reason


class MulticastDiscovery:
    """Beacon and listen on ``ifaces``; dial what is heard. Run with ``await nursery.start(d.run)``."""

    def __init__(
        self,
        key: bytes,
        ifaces: list[str],
        *,
        connected_keys: Callable[[], Collection[bytes]],
        accept: Accept,
        dial: Dial,
        port: int = PORT,
        interval_s: float = BEACON_INTERVAL_S,
    ) -> None:
        self.key = key
        self._connected_keys, self._accept_peer, self._dial_peer = connected_keys, accept, dial
        self.ifaces = list(ifaces)
        self.port = port
        self.interval_s = interval_s
        self.listen_port = 0
        self._dialing: set[str] = set()
        self.heard = 0  # beacons from other nodes
        self.dials = 0

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the multicast TCP listener and one task per interface; report the listener address.

        Raises OSError when the TCP listener cannot be bound.
        """
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(tcp.serve, self._accept, "", 0)
            self.listen_port = listeners[0].socket.getsockname()[1]
            self._nursery = nursery
            for iface in self.ifaces:
                nursery.start_soon(self._run_iface, iface)
            task_status.started(tcp.local_address(listeners[0]))

    async def _accept(self, stream: trio.SocketStream) -> None:
        host, port = tcp.remote_address(stream)
        await self._accept_peer(stream, f"tcp://{host}:{port}", MULTICAST_LINK)

    async def _run_iface(self, iface: str) -> None:
        try:
            ifindex = socket.if_nametoindex(iface)
        except OSError:
            log.error("multicast: no interface named %r; discovery disabled there", iface)
            return
        socks: list[tuple[trio.socket.SocketType, tuple]] = []
        try:
            try:
                socks.append((await open_group_v4(ifindex, iface_ipv4(iface), self.port), (GROUP_V4, self.port)))
            except OSError as exc:
                log.warning("multicast: IPv4 on %s unavailable: %s", iface, exc)
            try:
                socks.append((await open_group_v6(ifindex, self.port), (GROUP_V6, self.port, 0, ifindex)))
            except OSError as exc:
                log.info("multicast: IPv6 on %s unavailable: %s", iface, exc)
            if not socks:
                log.error("multicast: no usable socket on %s; discovery disabled there", iface)
                return
            async with trio.open_nursery() as nursery:
                for s, group in socks:
                    nursery.start_soon(self._beacon_loop, s, group, iface)
                    nursery.start_soon(self._listen_loop, s, iface)
        finally:
            for s, _ in socks:
                s.close()

    async def _beacon_loop(self, s: trio.socket.SocketType, group: tuple, iface: str) -> None:
        payload = beacon(self.key, self.listen_port)
        while True:
            try:
                await s.sendto(payload, group)
            except OSError as exc:
                log.debug("multicast: beacon on %s failed: %s", iface, exc)
            await trio.sleep(self.interval_s)

    async def _listen_loop(self, s: trio.socket.SocketType, iface: str) -> None:
        while True:
            try:
                data, addr = await s.recvfrom(512)
            except OSError as exc:
                log.debug("multicast: receive on %s failed: %s", iface, exc)
                await trio.sleep(self.interval_s)
                continue
            parsed = parse_beacon(data)
            if parsed is None:
                continue
            key, port = parsed
            if key == self.key or key in self._connected_keys() or port == 0:
                continue
            self.heard += 1
            host = addr[0]
            if s.family == socket.AF_INET6 and host.startswith("fe80") and "%" not in host:
                host = f"{host}%{iface}"
            if host in self._dialing:
                continue
            self._dialing.add(host)
            self._nursery.start_soon(self._dial, host, port)

    async def _dial(self, host: str, port: int) -> None:
        self.dials += 1
        try:
            reason = await self._dial_peer(host, port, MULTICAST_LINK)
            log.info("multicast peering with %s:%d ended: %s", host, port, reason)
        finally:
            self._dialing.discard(host)
