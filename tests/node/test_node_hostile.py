"""Hostile peers against a running node: each bad input is handled as PROTOCOL.md says.

Three real nodes in a line, a - b - c; a raw-socket client (its own identity,
the real handshake codec) connects to b and misbehaves. After every case: b is
still up, the counter for that case moved, and a can still ping c through b.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import pytest
from nodeproc import Cluster, NodeProc, wait_until
from prometheus_client.parser import text_string_to_metric_families

from node.core import wire
from node.core.crypto import Identity
from node.core.types import (
    INITIAL_WATERMARK,
    Announcement,
    Frame,
    FrameType,
    SigHop,
    SignedRootPayload,
)

pytestmark = pytest.mark.slow

HANDSHAKE_TIMEOUT_S = 3.0
MAX_FRAME_BYTES = 4096


def metric(node: NodeProc, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(node.metrics_text()):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Hostile:
    """A raw TCP client with its own identity."""

    def __init__(self, node: NodeProc, identity: Identity | None = None) -> None:
        host, port = node.listen.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.identity = identity or Identity(os.urandom(32))
        self.key = self.identity.public_key

    def handshake(self, data: bytes | None = None) -> bytes:
        """Send a handshake (ours unless ``data``) and read the node's 104 bytes."""
        self.sock.sendall(data if data is not None else wire.encode_handshake(self.identity))
        got = b""
        while len(got) < wire.HANDSHAKE_LEN:
            chunk = self.sock.recv(wire.HANDSHAKE_LEN - len(got))
            if not chunk:
                break
            got += chunk
        return got

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed_within(self, timeout_s: float) -> float | None:
        """Seconds until the node closes the connection (reading and discarding), or None."""
        t0 = time.monotonic()
        self.sock.settimeout(0.2)
        while time.monotonic() - t0 < timeout_s:
            try:
                if not self.sock.recv(65536):
                    return time.monotonic() - t0
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return time.monotonic() - t0
        return None

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def line(tmp_path_factory: pytest.TempPathFactory):
    c = Cluster(Path(tmp_path_factory.mktemp("hostile")))
    try:
        a = c.start("a")
        c.start("b", "--peer", a.uri(), "--handshake-timeout-s", str(HANDSHAKE_TIMEOUT_S),
                "--max-frame-bytes", str(MAX_FRAME_BYTES))  # fmt: skip
        c.start("c", "--peer", c["b"].uri())
        wait_until(lambda: len(c["b"].state()["peers"]) == 2, 15, what="a-b-c peerings")
        wait_until(lambda: c["a"].ping(c["c"].key, "snek", timeout_s=2)["received"] == 1, 20, what="a reaches c")
        yield c
    finally:
        c.close()


def still_routing(c: Cluster) -> None:
    b = c["b"]
    assert b.alive(), b.log_tail()
    assert b.get("/healthz")["ok"] is True
    assert c["a"].ping(c["c"].key, "snek", count=2, timeout_s=3)["received"] == 2
    assert c["a"].ping(c["c"].key, "tree", count=1, timeout_s=3)["received"] == 1


def connected(b: NodeProc, key: bytes) -> bool:
    return any(p["key"] == key.hex() for p in b.state()["peers"])


@pytest.mark.parametrize(
    ("case", "reason"),
    [("version", "bad_version"), ("capabilities", "bad_capabilities"), ("signature", "bad_signature")],
)
def test_bad_handshake_is_closed_silently(line: Cluster, case: str, reason: str) -> None:
    b = line["b"]
    before = metric(b, "snek_handshake_failures_total", reason=reason)
    h = Hostile(b)
    hs = bytearray(wire.encode_handshake(h.identity))
    if case == "version":
        hs[0] = 0x02
    elif case == "capabilities":
        hs[4:8] = (0x3F).to_bytes(4, "big")  # a superset is not good enough: exact match (§3.2)
    else:
        hs[40] ^= 0xFF
    h.handshake(bytes(hs))
    assert h.closed_within(5) is not None
    h.close()
    wait_until(lambda: metric(b, "snek_handshake_failures_total", reason=reason) == before + 1, 5, what=reason)
    assert not connected(b, h.key)
    still_routing(line)


def test_silent_peer_times_out_in_handshake(line: Cluster) -> None:
    b = line["b"]
    before = metric(b, "snek_handshake_failures_total", reason="timeout")
    h = Hostile(b)
    h.send(wire.encode_handshake(h.identity)[:50])  # half a handshake, then nothing
    took = h.closed_within(HANDSHAKE_TIMEOUT_S + 5)
    h.close()
    assert took is not None and HANDSHAKE_TIMEOUT_S - 0.5 <= took <= HANDSHAKE_TIMEOUT_S + 2.5, took
    assert metric(b, "snek_handshake_failures_total", reason="timeout") == before + 1
    still_routing(line)


def test_connection_flood_is_capped(line: Cluster) -> None:
    b = line["b"]
    before = metric(b, "snek_handshake_failures_total", reason="overload")
    host, port = b.listen.rsplit(":", 1)
    socks = []
    try:
        for _ in range(300):  # more than the 256 allowed to sit in their handshake
            socks.append(socket.create_connection((host, int(port)), timeout=5))
        wait_until(lambda: metric(b, "snek_handshake_failures_total", reason="overload") >= before + 40, 10, what="overload")
        still_routing(line)  # established peers are not affected
    finally:
        for s in socks:
            s.close()


def _traffic(h: Hostile, dest: bytes, payload: bytes = b"x" * 32) -> bytes:
    return wire.encode_frame(Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dest, source_key=h.key, payload=payload))


def _oversize_coords(h: Hostile, c: Cluster) -> bytes:
    f = _traffic(h, c["c"].key)
    return f[:12] + b"\xff\xf0" + f[14:]  # destination coordinates claim 65 520 bytes


def _forged_announcement(h: Hostile, c: Cluster) -> bytes:
    return wire.encode_frame(wire.announcement_frame(Announcement(h.key, 1, (SigHop(1, h.key, bytes(64)),))))


def _stolen_announcement(h: Hostile, c: Cluster) -> bytes:
    other = Identity(os.urandom(32))  # validly signed, but the last hop is not the sender (§5.3 2.4)
    return wire.encode_frame(wire.announcement_frame(wire.sign_announcement_for_port(Announcement(other.public_key, 1, ()), other, 1)))


_HDR = b"pine\x00\x03\x00\x00"
BAD_STREAMS = {
    # name: (bytes sent after a good handshake, the disconnect reason)
    "garbage": (lambda h, c: os.urandom(64).replace(b"p", b"q"), "bad_magic"),
    "short_length": (lambda h, c: _HDR + struct.pack(">H", 5), "short_length"),
    "oversize_length": (lambda h, c: _HDR + struct.pack(">H", 60000) + bytes(MAX_FRAME_BYTES + 100), "oversize"),
    "truncated_body": (lambda h, c: _HDR + struct.pack(">H", 60) + bytes(50), "truncated"),
    "oversize_coords": (_oversize_coords, "bad_coords"),
    "forged_announcement": (_forged_announcement, "bad_signature"),
    "stolen_announcement": (_stolen_announcement, "announcement_last_hop_not_peer"),
}


@pytest.mark.parametrize("case", sorted(BAD_STREAMS))
def test_bad_frames_drop_the_peer(line: Cluster, case: str) -> None:
    b = line["b"]
    make, reason = BAD_STREAMS[case]
    before = metric(b, "snek_peer_disconnects_total", reason=reason)
    h = Hostile(b)
    assert len(h.handshake()) == wire.HANDSHAKE_LEN
    wait_until(lambda: connected(b, h.key), 5, what="hostile peer registered")
    h.send(bytes(make(h, line)))
    assert h.closed_within(5) is not None, f"{case}: the node kept the connection"
    h.close()
    wait_until(lambda: metric(b, "snek_peer_disconnects_total", reason=reason) >= before + 1, 5, what=f"{reason} counted")
    assert not connected(b, h.key)
    still_routing(line)


def test_incomplete_frame_hits_the_read_deadline(line: Cluster) -> None:
    b = line["b"]
    before = metric(b, "snek_peer_disconnects_total", reason="read_timeout")
    h = Hostile(b)
    h.handshake()
    h.send(b"pine\x00\x03\x00\x00" + struct.pack(">H", 200) + bytes(20))  # 30 of 200 bytes, then silence
    took = h.closed_within(12)
    h.close()
    assert took is not None and 4.0 <= took <= 9.0, took  # 5 s per-frame read deadline (§3.5)
    assert metric(b, "snek_peer_disconnects_total", reason="read_timeout") == before + 1
    still_routing(line)


def test_forged_bootstraps_are_rejected_and_the_peer_stays(line: Cluster) -> None:
    b = line["b"]
    before = metric(b, "snek_bootstraps_rejected_total", reason="bad_signature")
    h = Hostile(b)
    h.handshake()
    wait_until(lambda: connected(b, h.key), 5, what="hostile peer registered")
    root = bytes.fromhex(b.state()["root"]["key"])
    victim = line["a"].key  # pretend to be a: without a's key the signature cannot verify
    for seq in range(1, 11):
        payload = wire.encode_signed_root_payload(SignedRootPayload(1_700_000_000_000 + seq, root, 1, os.urandom(64)))
        h.send(wire.encode_frame(Frame(FrameType.BOOTSTRAP, destination_key=victim, watermark=INITIAL_WATERMARK, payload=payload)))
    h.send(b"pine\x00\x09\x00\x00" + struct.pack(">H", 14) + b"abcd")  # an unknown frame type: dropped, peer stays
    wait_until(lambda: metric(b, "snek_bootstraps_rejected_total", reason="bad_signature") >= before + 10, 5, what="rejections")
    wait_until(lambda: metric(b, "snek_dropped_frames_total", type="unknown", reason="unknown_type") >= 1, 5, what="unknown type")
    assert h.closed_within(1) is None and connected(b, h.key)
    h.close()
    still_routing(line)


def test_traffic_flood_keeps_memory_bounded_and_others_routing(line: Cluster) -> None:
    b = line["b"]
    h = Hostile(b)
    h.handshake()
    wait_until(lambda: connected(b, h.key), 5, what="hostile peer registered")
    rx_before = metric(b, "snek_received_frames_total", type="traffic")
    rss_before = rss_bytes(b.pid)
    burst = b"".join(_traffic(h, os.urandom(32), b"f" * 1000) for _ in range(64))  # random destinations, 1 KB each
    h.sock.settimeout(0.5)
    sent = 0
    t0 = time.monotonic()
    pings = []
    while time.monotonic() - t0 < 8:
        try:
            h.sock.sendall(burst)
            sent += 64
        except TimeoutError:
            pass  # the node reads as fast as it chooses to: backpressure, not buffering
        if time.monotonic() - t0 > 2 and len(pings) < 3:
            pings.append(line["a"].ping(line["c"].key, "snek", count=1, timeout_s=3)["received"])
    forwarded = metric(b, "snek_received_frames_total", type="traffic") - rx_before
    assert forwarded > 1000, forwarded
    assert sum(pings) >= 2, pings  # a and c keep talking through b during the flood
    assert rss_bytes(b.pid) - rss_before < 64 * 1024 * 1024
    h.close()
    still_routing(line)


def test_peer_that_never_reads_is_dropped_on_the_write_deadline(line: Cluster) -> None:
    b = line["b"]
    before = metric(b, "snek_peer_disconnects_total", reason="write_timeout")
    root = bytes.fromhex(b.state()["root"]["key"])
    # a key between b's and the root's: not a better root, and a's SNEK route to it heads up through b (§6.3 step 3)
    me = next(i for i in iter(lambda: Identity(os.urandom(32)), None) if b.key < i.public_key < root)
    h = Hostile(b, me)
    h.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    h.handshake()
    wait_until(lambda: connected(b, h.key), 5, what="hostile peer registered")
    # an honest announcement (ourselves as a root, weaker than b's): b now routes our key to us (§6.3 step 4)
    h.send(wire.encode_frame(wire.announcement_frame(wire.sign_announcement_for_port(Announcement(me.public_key, 1, ()), me, 1))))
    # make b send a lot towards us: a's pings to our key end at us and we never read
    dead = time.monotonic() + 20
    while time.monotonic() < dead and metric(b, "snek_peer_disconnects_total", reason="write_timeout") == before:
        h.send(wire.encode_frame(Frame(FrameType.KEEPALIVE)))  # we do write: only our reading is broken
        line["a"].post("/traffic", {"key": h.key.hex(), "payload_bytes": 1200, "count": 2000, "inflight": 2000, "timeout_s": 1})
    diag = [x for x in b.metrics_text().splitlines() if "traffic" in x and not x.startswith("#")]
    assert metric(b, "snek_peer_disconnects_total", reason="write_timeout") == before + 1, (diag, b.state()["peers"])
    h.close()
    still_routing(line)
