"""TCP for peerings (PROTOCOL.md §3.1): listen, connect, socket options, addresses.

Both directions hand the node a ``trio.SocketStream`` (TCP_NODELAY is set by
trio); redialling with backoff is :mod:`node.peering`'s. Like the reference, TCP keepalives are enabled with a 3 s idle time, so a
vanished host is noticed by the kernel as well as by the 5 s read deadline.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable

import trio

__all__ = ["connect", "format_address", "local_address", "remote_address", "serve"]

log = logging.getLogger("snekbed.node.tcp")

_KEEPALIVE_IDLE_S = 3


def _tune(stream: trio.SocketStream) -> None:
    sock = stream.socket
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, _KEEPALIVE_IDLE_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, _KEEPALIVE_IDLE_S)
    except OSError:  # not fatal: the read deadline still catches dead peers
        pass


async def connect(host: str, port: int, timeout_s: float) -> trio.SocketStream:
    """Open a TCP stream to host:port within ``timeout_s``.

    Raises OSError (refused, unreachable, name not found) or trio.TooSlowError.
    """
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, port)
    _tune(stream)
    return stream


async def serve(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on host:port (port 0: any free port) and run ``handler`` per connection.

    Reports the listeners through ``task_status`` (their bound addresses give the
    real port). The handler must not raise: an exception would end the server.
    Raises OSError when the address cannot be bound.
    """
    listeners = await trio.open_tcp_listeners(port, host=host or None)

    async def tuned(stream: trio.SocketStream) -> None:
        _tune(stream)
        await handler(stream)

    task_status.started(listeners)
    await trio.serve_listeners(tuned, listeners)


def format_address(addr: tuple) -> str:
    """``host:port`` for an IPv4 sockaddr, ``[host]:port`` for IPv6."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def remote_address(stream: trio.SocketStream) -> tuple[str, int]:
    """(ip, port) of the other end; ("?", 0) when the socket is already gone."""
    try:
        addr = stream.socket.getpeername()
    except OSError:
        return "?", 0
    host = addr[0]
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            host = str(ip.ipv4_mapped)
    except ValueError:
        pass
    return host, addr[1]


def local_address(listener: trio.SocketListener) -> str:
    return format_address(listener.socket.getsockname())
