"""The trio shell's timers (PROTOCOL.md §3.2, §3.5) on memory streams and a virtual clock: no wall clock, no sockets.

Each test runs under pytest-trio's ``autojump_clock`` (``MockClock(autojump_threshold=0)``):
whenever every task is blocked, the clock jumps to the next deadline, so a 10 s
timeout takes no real time and its virtual time can be asserted exactly. The
virtual clock starts at 0.0.

Covered: the handshake deadline (10 s), the keepalive after 3 s without writes,
the 5 s per-frame read deadline, the 3 s write deadline, the dial backoff, and
peer teardown (reason, router, queues, counters).
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from node.config import LinkSpec, NodeConfig, PeerSpec, Timeouts
from node.core import wire
from node.core.crypto import Identity, derive_seed
from node.peer import KEEPALIVE_BYTES, HandshakeFailed, PeerConn, handshake
from node.runtime import Node

US = Identity(derive_seed("shell-timers", 1))
THEM = Identity(derive_seed("shell-timers", 2))
T = Timeouts()  # the protocol's: handshake 10 s, keepalive 3 s, read 5 s, write 3 s, backoff 0.5 s .. 30 s


def _node(**kw: object) -> Node:
    return Node(NodeConfig(identity=US, listen=None, admin=None, metrics=None), **kw)  # type: ignore[arg-type]


class Recorder:
    """What a PeerConn hands its node: frames (type, raw) and drops (type, reason, count)."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.drops: list[tuple[int, str, int]] = []

    def on_frames(self, peer: PeerConn, frames: list[tuple[int, bytes]]) -> None:
        self.frames += frames

    def on_drop(self, ftype: int, reason: str, n: int) -> None:
        self.drops.append((ftype, reason, n))


def _peer(stream: trio.abc.Stream, rec: Recorder) -> PeerConn:
    return PeerConn(port=1, key=THEM.public_key, link=LinkSpec(), stream=stream, remote="mem", timeouts=T,
                    on_frames=rec.on_frames, on_drop=rec.on_drop)  # fmt: skip


async def _run_until_done(peer: PeerConn) -> tuple[str, float]:
    reason = await peer.run()
    return reason, trio.current_time()


# ---------------------------------------------------------------- handshake (§3.2)


async def test_silent_peer_fails_the_handshake_at_10_s_and_not_before(autojump_clock: trio.testing.MockClock) -> None:
    node = _node()
    ours, theirs = trio.testing.memory_stream_pair()
    reason = await node.peering.accept(ours, "mem://silent", LinkSpec())
    assert reason == "handshake_timeout"
    assert trio.current_time() == 10.0
    assert node.counters.handshake_failures == {"timeout": 1}
    assert node.peers == {}
    sent = await theirs.receive_some()  # ours went out at once, without waiting for theirs
    assert len(sent) == wire.HANDSHAKE_LEN and wire.decode_handshake(sent) == US.public_key


async def test_a_handshake_one_byte_short_still_times_out_at_10_s(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()

    async def almost() -> None:
        await trio.sleep(9.5)
        await theirs.send_all(wire.encode_handshake(THEM)[:-1])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(almost)
        with pytest.raises(HandshakeFailed) as err:
            await handshake(ours, US, T.handshake_s)
    assert err.value.reason == "timeout" and "103 of 104" in str(err.value)
    assert trio.current_time() == 10.0


async def test_a_handshake_in_time_makes_a_peer(autojump_clock: trio.testing.MockClock) -> None:
    node = _node()
    node.set_started()
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.peering.accept, ours, "mem://b", LinkSpec())
        await trio.sleep(9.9)
        await theirs.send_all(wire.encode_handshake(THEM))
        await trio.testing.wait_all_tasks_blocked()
        assert [(p.port, p.key) for p in node.peers.values()] == [(1, THEM.public_key)]
        assert node.counters.handshake_failures == {}
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------- keepalive, read and write deadlines (§3.5)


async def test_keepalive_after_3_s_without_writes(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = _peer(ours, Recorder())
    keepalives: list[float] = []

    async def their_side() -> None:
        for _ in range(5):  # a keepalive every 2 s keeps our read deadline from firing
            await theirs.send_all(KEEPALIVE_BYTES)
            await trio.sleep(2)

    async def listen() -> None:
        while True:
            data = await theirs.receive_some()
            assert data == KEEPALIVE_BYTES, data  # one frame per write, nothing else
            keepalives.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.run)
        nursery.start_soon(their_side)
        nursery.start_soon(listen)
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert keepalives == [3.0, 6.0, 9.0]
    assert peer.tx_frames[0] == 3 and peer.rx_frames[0] == 5


async def test_a_write_resets_the_keepalive_timer(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = _peer(ours, Recorder())
    data = b"\x01" * 20  # opaque protocol bytes (the writer does not parse what it sends)
    got: list[tuple[float, bytes]] = []

    async def their_side() -> None:
        while True:
            await theirs.send_all(KEEPALIVE_BYTES)
            await trio.sleep(2)

    async def listen() -> None:
        while True:
            chunk = await theirs.receive_some()
            got.append((trio.current_time(), bytes(chunk)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.run)
        nursery.start_soon(their_side)
        nursery.start_soon(listen)
        await trio.sleep(2)
        peer.push_protocol(1, data)
        await trio.sleep(7)
        nursery.cancel_scope.cancel()
    # the write at 2 s moved the next keepalive from 3 s to 5 s
    assert got == [(2.0, data), (5.0, KEEPALIVE_BYTES), (8.0, KEEPALIVE_BYTES)]


async def test_half_a_frame_is_dropped_at_the_5_s_read_deadline(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    rec = Recorder()
    peer = _peer(ours, rec)

    async def their_side() -> None:
        await trio.sleep(1)
        await theirs.send_all(KEEPALIVE_BYTES[:5])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(their_side)
        reason, at = await _run_until_done(peer)
    assert (reason, at) == ("read_timeout", 5.0)
    assert rec.frames == []


async def test_each_complete_frame_rearms_the_read_deadline(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    rec = Recorder()
    peer = _peer(ours, rec)

    async def their_side() -> None:
        for _ in range(3):  # complete frames at 4, 8 and 12 s
            await trio.sleep(4)
            await theirs.send_all(KEEPALIVE_BYTES)
        await theirs.send_all(KEEPALIVE_BYTES[:3])  # then half a frame: the deadline stays 12 + 5

    async with trio.open_nursery() as nursery:
        nursery.start_soon(their_side)
        reason, at = await _run_until_done(peer)
    assert (reason, at) == ("read_timeout", 17.0)
    assert [t for t, _ in rec.frames] == [0, 0, 0]


async def test_a_peer_that_never_reads_is_dropped_at_the_3_s_write_deadline(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()  # a write blocks until the other side reads
    peer = _peer(ours, Recorder())

    async def their_side() -> None:  # keeps sending (our read deadline never fires) and never reads
        while True:
            await theirs.send_all(KEEPALIVE_BYTES)
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(their_side)
        await trio.sleep(1)
        peer_task_start = trio.current_time()
        peer.push_protocol(1, KEEPALIVE_BYTES)
        reason, at = await _run_until_done(peer)
        nursery.cancel_scope.cancel()
    assert peer_task_start == 1.0
    assert (reason, at) == ("write_timeout", 4.0)


# ---------------------------------------------------------------- dial backoff


async def test_redials_back_off_exponentially_with_jitter(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []

    async def refuse(host: str, port: int, timeout_s: float) -> trio.abc.Stream:
        attempts.append(trio.current_time())
        raise OSError(111, "Connection refused")

    node = _node(connect=refuse, rng=random.Random(7))
    spec = PeerSpec("tcp://peer:7000", "peer", 7000, LinkSpec())
    async with trio.open_nursery() as nursery:
        await nursery.start(node.peering.run, [spec])
        [d] = node.peering.dialers
        while len(attempts) < 10:
            await d.changed.park()
        nursery.cancel_scope.cancel()
    jitter = random.Random(7)
    expected, t, backoff = [0.0], 0.0, T.backoff_min_s
    for _ in range(9):  # 0.5, 1, 2, 4, 8, 16, then capped at 30 s; each x0.8..1.2
        t += backoff * jitter.uniform(0.8, 1.2)
        expected.append(t)
        backoff = min(backoff * 2, T.backoff_max_s)
    assert attempts == pytest.approx(expected, abs=1e-9)
    assert node.counters.dial_failures == 10 and d.attempts == 10
    assert d.last_error == "dial failed: ConnectionRefusedError: [Errno 111] Connection refused"
    assert node.peering.dialers == []  # a cancelled dialer removes itself


async def test_a_peering_that_lasted_10_s_resets_the_backoff(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []

    async def connect(host: str, port: int, timeout_s: float) -> trio.abc.Stream:
        attempts.append(trio.current_time())
        if len(attempts) != 4:
            raise OSError(111, "Connection refused")
        ours, theirs = trio.testing.memory_stream_pair()

        async def peer_for_12_s() -> None:  # handshakes, keeps the link alive, hangs up at 12 s
            await theirs.send_all(wire.encode_handshake(THEM))
            for _ in range(6):
                await trio.sleep(2)
                await theirs.send_all(KEEPALIVE_BYTES)
            await theirs.aclose()

        nursery.start_soon(peer_for_12_s)
        return ours

    node = _node(connect=connect, rng=random.Random(3))
    node.set_started()
    spec = PeerSpec("tcp://peer:7000", "peer", 7000, LinkSpec())
    async with trio.open_nursery() as nursery:
        await nursery.start(node.peering.run, [spec])
        [d] = node.peering.dialers
        while len(attempts) < 6:
            await d.changed.park()
        nursery.cancel_scope.cancel()
    jitter = random.Random(3)
    j = [jitter.uniform(0.8, 1.2) for _ in range(5)]
    t3 = 0.5 * j[0] + 1.0 * j[1] + 2.0 * j[2]  # three refusals: 0.5, 1, 2 s
    t4 = t3 + 12.0 + 0.5 * j[3]  # the 12 s peering reset the backoff to 0.5 s (not 4 s)
    assert attempts == pytest.approx([0.0, 0.5 * j[0], 0.5 * j[0] + 1.0 * j[1], t3, t4, t4 + 1.0 * j[4]], abs=1e-9)
    assert node.counters.disconnects == {"eof": 1}


async def test_a_redial_starts_a_connect_in_flight_over(autojump_clock: trio.testing.MockClock) -> None:
    """POST /peers/redial while a connect hangs (its SYN lost where the link was cut: it would wait out the 5 s dial
    timeout and then the backoff) dials again at once; one asked during a failing attempt skips the backoff."""
    attempts: list[float] = []

    async def blackhole_then_refuse(host: str, port: int, timeout_s: float) -> trio.abc.Stream:
        attempts.append(trio.current_time())
        if len(attempts) == 1:
            with trio.fail_after(timeout_s):
                await trio.sleep_forever()
        raise OSError(111, "Connection refused")

    node = _node(connect=blackhole_then_refuse, rng=random.Random(5))
    spec = PeerSpec("tcp://peer:7000", "peer", 7000, LinkSpec())
    async with trio.open_nursery() as nursery:
        await nursery.start(node.peering.run, [spec])
        [d] = node.peering.dialers
        await trio.sleep(2.0)  # the first connect hangs
        assert attempts == [0.0] and d.attempt is not None
        assert node.peering.redial_now() == 1
        while len(attempts) < 2:
            await d.changed.park()
        nursery.cancel_scope.cancel()
    assert attempts == [0.0, 2.0]  # not 5 s (the dial timeout) and a backoff later
    assert node.counters.dial_failures == 1  # the refusal; the cancelled attempt is no failure


async def test_a_dial_once_peer_is_retried_until_up_and_never_redialled_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """POST /peers with ``"redial": false`` (a radio link): a refusal and a failed handshake are retried at the
    minimum backoff until the peering comes up; once it ends the dialer is gone (a radio link to a node that died
    is not dialled into its next life). One that does not come up within its timeout is given up: ``failed``,
    nothing dials it later."""
    attempts: list[float] = []

    async def refuse_twice(host: str, port: int, timeout_s: float) -> trio.abc.Stream:
        attempts.append(trio.current_time())
        if len(attempts) == 1:
            raise OSError(111, "Connection refused")
        ours, theirs = trio.testing.memory_stream_pair()
        if len(attempts) == 2:  # connected, then a handshake that is not one: not up, so dialled again
            await theirs.send_all(b"\x00" * len(wire.encode_handshake(THEM)))
            return ours

        async def peer_for_4_s() -> None:
            await theirs.send_all(wire.encode_handshake(THEM))
            await trio.sleep(2)
            await theirs.send_all(KEEPALIVE_BYTES)
            await trio.sleep(2)
            await theirs.aclose()

        nursery.start_soon(peer_for_4_s)
        return ours

    node = _node(connect=refuse_twice, rng=random.Random(11))
    node.set_started()
    async with trio.open_nursery() as nursery:
        await nursery.start(node.peering.run, [])
        got = await node.add_peer("tcp://peer:7000", 5.0, redial=False)
        assert got["status"] == "connected" and got["key"] == THEM.public_key.hex()
        up_at = trio.current_time()
        assert node.peering.dialers and node.peering.dialers[0].once_until == 5.0
        await trio.sleep(60)  # the peer hangs up at up_at + 4 s: 56 s in which a redialling dialer would dial
        assert node.peering.dialers == [] and node.peers == {}
        assert len(attempts) == 3 and attempts[2] == up_at  # two failures retried at 0.5 s x0.8..1.2 each
        assert attempts[1] - attempts[0] <= 0.6 and attempts[2] - attempts[1] <= 0.6
        assert node.counters.disconnects == {"eof": 1} and sum(node.counters.handshake_failures.values()) == 1

        attempts.clear()
        failing = _node(connect=lambda *a: _refused(attempts), rng=random.Random(2))
        await nursery.start(failing.peering.run, [])
        t0 = trio.current_time()
        got = await failing.add_peer("tcp://peer:7000", 2.0, redial=False)
        assert got["status"] == "failed" and trio.current_time() == pytest.approx(t0 + 2.0)
        assert "Connection refused" in got["last_error"] and got["attempts"] == len(attempts) >= 4
        await trio.sleep(30)
        assert failing.peering.dialers == [] and all(t <= t0 + 2.0 for t in attempts)
        nursery.cancel_scope.cancel()


async def _refused(attempts: list[float]) -> trio.abc.Stream:
    attempts.append(trio.current_time())
    raise OSError(111, "Connection refused")


# ---------------------------------------------------------------- peer teardown (§3.7)


async def _connected(node: Node, nursery: trio.Nursery) -> tuple[PeerConn, trio.abc.Stream]:
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.send_all(wire.encode_handshake(THEM))
    nursery.start_soon(node.peering.accept, ours, "mem://b", LinkSpec())
    await trio.testing.wait_all_tasks_blocked()
    [peer] = node.peers.values()
    return peer, theirs


async def test_dropping_a_peer_records_the_reason_tells_the_router_and_drops_its_queues(
    autojump_clock: trio.testing.MockClock,
) -> None:
    node = _node()
    node.set_started()
    async with trio.open_nursery() as nursery:
        peer, theirs = await _connected(node, nursery)
        assert [p["key"] for p in node.state()["peers"]] == [THEM.public_key.hex()]
        for i in range(20):  # queued and never written: the writer does not run before the drop
            peer.push_traffic(b"T" * 50 + bytes([i]), US.public_key, THEM.public_key)
        assert len(peer.traffic) == 20
        assert node.drop_peer(peer.port) is peer
        await trio.testing.wait_all_tasks_blocked()
        received = b""
        while chunk := await theirs.receive_some():
            received += chunk
    assert (peer.closed, peer.reason) == (True, "admin_removed")
    assert len(peer.traffic) == 0 and len(peer.protocol) == 0
    assert b"T" * 50 not in received  # the queued traffic never reached the wire
    assert node.peers == {} and node.state()["peers"] == []
    assert node.counters.disconnects == {"admin_removed": 1}
    assert node.counters.events["peer_up"] == 1 and node.counters.events["peer_down"] == 1
    assert trio.current_time() == 0.0


async def test_a_peer_that_hangs_up_is_torn_down_with_reason_eof(autojump_clock: trio.testing.MockClock) -> None:
    node = _node()
    node.set_started()
    async with trio.open_nursery() as nursery:
        peer, theirs = await _connected(node, nursery)
        await trio.sleep(1)
        await theirs.aclose()
        await trio.testing.wait_all_tasks_blocked()
    assert (peer.closed, peer.reason) == (True, "eof")
    assert node.peers == {} and node.state()["peers"] == []
    assert node.counters.disconnects == {"eof": 1}
    assert node.counters.events["peer_down"] == 1
    assert trio.current_time() == 1.0
