"""Error paths of the trio shell: multicast sockets that cannot be bound are closed; unknown event kinds are counted."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pytest
import trio

from node.config import NodeConfig
from node.core.crypto import Identity, derive_seed
from node.runtime import Node
from node.transports.multicast import open_group_v4, open_group_v6

pytestmark = pytest.mark.multicast


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def taken_port() -> Iterator[tuple[int, socket.socket]]:
    """A UDP port held without SO_REUSEADDR, so binding the multicast group to it fails (EADDRINUSE)."""
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind(("0.0.0.0", 0))
    yield blocker.getsockname()[1], blocker
    blocker.close()


async def test_a_multicast_socket_that_cannot_bind_is_closed(taken_port: tuple[int, socket.socket]) -> None:
    port, _ = taken_port
    ifindex = socket.if_nametoindex("lo")
    before = _open_fds()
    with pytest.raises(OSError) as err:
        await open_group_v4(ifindex, None, port)
    assert err.value.errno == 98  # EADDRINUSE: the failure is the bind, after the socket was set up
    assert _open_fds() == before  # nothing leaked


async def test_the_ipv6_group_socket_is_closed_on_failure_too() -> None:
    blocker = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    blocker.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        blocker.bind(("::", 0))
    except OSError:
        blocker.close()
        blocker = None  # no IPv6 on this host: the socket setup fails instead, which must close it as well
        port = 9
    else:
        port = blocker.getsockname()[1]
    before = _open_fds()
    try:
        with pytest.raises(OSError):
            await open_group_v6(socket.if_nametoindex("lo"), port)
        assert _open_fds() == before
    finally:
        if blocker is not None:
            blocker.close()


async def test_a_bound_group_socket_is_returned_open() -> None:
    s = await open_group_v4(socket.if_nametoindex("lo"), None, 0)
    try:
        assert s.getsockname()[0] == "224.0.0.114"
    finally:
        s.close()


async def test_unknown_event_kinds_are_counted_and_warned_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    node = Node(NodeConfig(identity=Identity(derive_seed("shell-errors", 1)), listen=None, admin=None, metrics=None))
    with caplog.at_level(logging.WARNING, logger="snekbed.node"):
        node._on_events([("made_up", {"a": 1}), ("made_up", {"a": 2}), ("also_new", {}), ("root_changed", {})])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "'made_up'" in warnings[0] and "'also_new'" in warnings[1]
    assert node.counters.events_unknown == {"made_up": 2, "also_new": 1}
    reg = node.metrics.registry
    assert reg.get_sample_value("snek_unknown_events_total", {"event": "made_up"}) == 2
    assert reg.get_sample_value("snek_unknown_events_total", {"event": "also_new"}) == 1
    assert reg.get_sample_value("snek_unknown_events_total", {"event": "root_changed"}) is None
    assert reg.get_sample_value("snek_root_changes_total") == 1
