"""LAN multicast discovery (PROTOCOL.md Appendix A) on the loopback interface.

Two real nodes find each other; and the node talks the reference's beacon format
both ways: a reference-style 34-byte beacon sent by the test makes the node dial
a listener the test runs, and the node's own beacons parse as key + port.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import pytest
from nodeproc import Cluster, holds, wait_until

from node.core import wire
from node.core.crypto import Identity
from node.transports.multicast import GROUP_V4, PORT, beacon, iface_ipv4, parse_beacon
from tests.conftest import need

pytestmark = [pytest.mark.slow, pytest.mark.multicast]

IFACE = "lo"


def _mc_socket(timeout_s: float = 0.5) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((GROUP_V4, PORT))
    mreqn = socket.inet_aton(GROUP_V4) + socket.inet_aton("127.0.0.1") + struct.pack("@i", socket.if_nametoindex(IFACE))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    s.settimeout(timeout_s)
    return s


def _loopback_multicast_works() -> bool:
    """Can a datagram sent to the group on lo be received back? (Some sandboxes forbid it.)"""
    try:
        rx = _mc_socket(timeout_s=1.0)
    except OSError:
        return False
    try:
        token = os.urandom(16)  # shorter than a beacon: any listening node ignores it
        rx.sendto(token, (GROUP_V4, PORT))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                if rx.recvfrom(512)[0] == token:
                    return True
            except TimeoutError:
                return False
        return False
    finally:
        rx.close()


@pytest.fixture(autouse=True, scope="module")
def _multicast_on_loopback() -> None:
    need(_loopback_multicast_works(), "IPv4 multicast on the loopback interface does not work here")


@pytest.fixture
def cluster(tmp_path: Path):
    with Cluster(tmp_path, tag="multicast") as c:
        yield c


def test_beacon_codec() -> None:
    key = bytes(range(32))
    b = beacon(key, 60123)
    assert len(b) == 34 and b[32:] == struct.pack(">H", 60123)
    assert parse_beacon(b) == (key, 60123)
    assert parse_beacon(b + b"extra") == (key, 60123)  # extra bytes are ignored
    assert parse_beacon(b[:33]) is None
    with pytest.raises(ValueError, match="32-byte key"):
        beacon(key[:31], 1)
    assert iface_ipv4("lo") == "127.0.0.1"
    assert iface_ipv4("no-such-if0") is None


def test_two_nodes_discover_each_other(cluster: Cluster) -> None:
    a = cluster.start("a", "--multicast", IFACE, "--listen", "off")
    b = cluster.start("b", "--multicast", IFACE, "--listen", "off")
    wait_until(lambda: a.state()["peers"] and b.state()["peers"], 15, what="discovery")
    for n, other in ((a, b), (b, a)):
        peers = n.state()["peers"]
        assert {p["key"] for p in peers} == {other.key.hex()}
        assert {p["class"] for p in peers} == {"multicast"}
    # listed is not yet routable: SNEK routes only via a peer whose tree announcement has arrived
    wait_until(lambda: a.ping(b.key, "snek", timeout_s=2)["received"] == 1, 10, what="a ping once b announced")
    assert a.ping(b.key, "snek", count=2)["received"] == 2
    up = [e for e in a.events() if e["event"] == "peer_up"]
    assert up and up[0]["link_class"] == "multicast"
    assert a.events()[0]["listen"] == [a.info["multicast_listen"]]
    holds(  # beacons keep coming (every 2 s): known keys are not dialled again
        lambda: len(a.state()["peers"]) == len(b.state()["peers"]) <= 2, 5, what="one peering per discovered key"
    )


def test_node_beacons_in_the_reference_format(cluster: Cluster) -> None:
    sock = _mc_socket()
    try:
        n = cluster.start("n", "--multicast", IFACE, "--listen", "off")
        port = int(n.info["multicast_listen"].rsplit(":", 1)[1])
        deadline = time.monotonic() + 10
        seen = None
        while time.monotonic() < deadline and seen is None:
            try:
                data, addr = sock.recvfrom(512)
            except TimeoutError:
                continue
            if len(data) == 34 and data[:32] == n.key:
                seen = (data, addr)
        assert seen is not None, "no beacon from the node within 10 s (period 2 s)"
        data, addr = seen
        assert parse_beacon(data) == (n.key, port)
        assert addr[0] == "127.0.0.1"
    finally:
        sock.close()


def test_reference_beacon_makes_the_node_dial(cluster: Cluster) -> None:
    n = cluster.start("n", "--multicast", IFACE, "--listen", "off")
    me = Identity(os.urandom(32))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    tcp_port = listener.getsockname()[1]
    sock = _mc_socket()
    conn = None
    try:
        sock.sendto(b"\x01" * 10, (GROUP_V4, PORT))  # short datagrams are ignored
        sock.sendto(beacon(n.key, tcp_port), (GROUP_V4, PORT))  # its own key is ignored
        time.sleep(1.0)
        with pytest.raises(TimeoutError):
            listener.accept()
        deadline = time.monotonic() + 10
        while conn is None and time.monotonic() < deadline:
            sock.sendto(beacon(me.public_key, tcp_port), (GROUP_V4, PORT))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
        assert conn is not None, "the node did not dial the advertised port"
        conn.settimeout(5)
        conn.sendall(wire.encode_handshake(me))
        got = b""
        while len(got) < wire.HANDSHAKE_LEN:
            got += conn.recv(wire.HANDSHAKE_LEN - len(got))
        assert wire.decode_handshake(got) == n.key
        wait_until(lambda: any(p["key"] == me.public_key.hex() and p["class"] == "multicast" for p in n.state()["peers"]),
                   5, what="the beaconing peer registered as multicast")  # fmt: skip
    finally:
        if conn is not None:
            conn.close()
        listener.close()
        sock.close()
