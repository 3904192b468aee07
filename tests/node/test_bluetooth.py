"""The Bluetooth L2CAP transport (node/transports/bluetooth.py), tested without Bluetooth.

No adapter is available here, so the transport's stream, framing, handshake and teardown run over
connected ``AF_UNIX`` ``SOCK_SEQPACKET`` sockets: the same message semantics as L2CAP (boundaries
kept, in order, reliable). Real sockets and real nodes throughout; the only thing replaced is the
address family. The start-up checks run against this machine, which lacks Bluetooth (all three of
a Python with Bluetooth sockets, the kernel's Bluetooth sockets and an adapter, as checked below).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from nodeproc import snekbed_argv

from node.cli import check_bluetooth
from node.config import (
    BluetoothListen,
    ConfigError,
    NodeConfig,
    PeerSpec,
    link_spec,
    parse_listen,
    parse_listen_bluetooth,
    parse_peer_uri,
)
from node.core.crypto import Identity, derive_seed
from node.fairqueue import BLUETOOTH_BUCKETS
from node.lifecycle import NodeProcess
from node.runtime import Node
from node.transports import bluetooth as bt

A = Identity(derive_seed("bluetooth-test", 1))
B = Identity(derive_seed("bluetooth-test", 2))
BT_LINK = link_spec({"class": "bluetooth"}, what="test", value="test")
ADDR_A = "AA:BB:CC:DD:EE:01"


def _pair(mtu: int = bt.DEFAULT_MTU) -> tuple[bt.SeqpacketStream, bt.SeqpacketStream]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return (bt.SeqpacketStream(trio.socket.from_stdlib_socket(a), mtu),
            bt.SeqpacketStream(trio.socket.from_stdlib_socket(b), mtu))  # fmt: skip


def _cfg(identity: Identity, **kw: object) -> NodeConfig:
    return NodeConfig(identity=identity, listen=None, admin=None, metrics=None, **kw)  # type: ignore[arg-type]


# ================================================================ the stream


async def test_send_all_cuts_messages_at_the_mtu_and_receive_some_reassembles_them() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours = bt.SeqpacketStream(trio.socket.from_stdlib_socket(a), mtu=100)
    theirs = trio.socket.from_stdlib_socket(b)
    data = bytes(range(256)) * 2  # 512 bytes: messages of 100, 100, 100, 100, 100, 12
    with trio.fail_after(5):
        await ours.send_all(data)
        sizes = [len(await theirs.recv(65_536)) for _ in range(6)]
        # the other way: one 300-byte message read in pieces of at most 128 bytes, nothing lost
        await theirs.send(data[:300])
        pieces = [await ours.receive_some(128) for _ in range(3)]
    assert sizes == [100, 100, 100, 100, 100, 12]
    assert [len(p) for p in pieces] == [128, 128, 44] and b"".join(pieces) == data[:300]
    await ours.aclose()
    theirs.close()


async def test_end_of_stream_closed_stream_and_a_truncated_message() -> None:
    x, y = _pair()
    with trio.fail_after(5):
        await _eof_and_truncation(x, y)


async def _eof_and_truncation(x: bt.SeqpacketStream, y: bt.SeqpacketStream) -> None:
    await x.send_all(b"")  # sends nothing: an empty message would read as end of stream
    await x.send_eof()
    assert await y.receive_some() == b""
    await y.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await y.receive_some()
    await x.aclose()

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    ours = bt.SeqpacketStream(trio.socket.from_stdlib_socket(a), bt.DEFAULT_MTU)
    b.send(b"x" * (bt.RECV_BYTES + 10))  # longer than any L2CAP message: must break, not lose bytes silently
    with pytest.raises(trio.BrokenResourceError, match="truncated"):
        await ours.receive_some()
    await ours.aclose()
    b.close()


def test_the_stream_needs_a_seqpacket_socket() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, pytest.raises(ValueError, match="SOCK_SEQPACKET"):
        bt.SeqpacketStream(trio.socket.from_stdlib_socket(s), 100)


# ================================================================ two nodes over a socket pair


async def test_two_nodes_handshake_announce_ping_and_tear_down_over_a_seqpacket_pair(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="snekbed.node")
    na, nb = Node(_cfg(A)), Node(_cfg(B))
    na.set_started()
    nb.set_started()
    sa, sb = _pair(mtu=64)  # smaller than a handshake (104 bytes) and an announcement: every frame is cut up
    reasons: dict[str, str] = {}

    async def run(node: Node, stream: bt.SeqpacketStream, name: str) -> None:
        reasons[name] = await node.peering.accept(stream, f"bluetooth://{name}", BT_LINK)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(na.run_timers)
        nursery.start_soon(nb.run_timers)
        nursery.start_soon(run, na, sa, "b")
        nursery.start_soon(run, nb, sb, "a")
        with trio.fail_after(10):
            while not (na.peers and nb.peers):
                await trio.sleep(0.01)
            [pa] = na.peers.values()
            [pb] = nb.peers.values()
            assert pa.key == B.public_key and pb.key == A.public_key
            assert pa.link.type_name == "bluetooth" and pa.traffic._n == BLUETOOTH_BUCKETS
            # tree announcements both ways: both agree on the root (the higher key) and have coordinates
            root = max(A.public_key, B.public_key).hex()
            child = nb if root == A.public_key.hex() else na
            while not (na.state()["root"]["key"] == nb.state()["root"]["key"] == root and child.state()["coords"]):
                await trio.sleep(0.05)
            assert [p["class"] for p in na.state()["peers"]] == ["bluetooth"]
            result = await na.ping(B.public_key, "snek", 3, 5.0)
        assert result["received"] == 3 and result["hops"] == [2, 2, 2]  # there and back over the one link
        assert pa.rx_frames[0] + pa.rx_frames[1] > 0  # keepalives / announcements came in over the pair
        na.drop_peer(pa.port)  # closing A's side drops the peer on B
        with trio.fail_after(5):
            while nb.peers:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert reasons == {"b": "admin_removed", "a": "eof"}
    assert nb.counters.disconnects == {"eof": 1}
    assert any(f"peer down: port {pb.port} key {A.public_key.hex()[:16]} reason eof" in r.getMessage()
               for r in caplog.records)  # fmt: skip


async def test_a_node_listens_and_another_dials_bluetooth_uris_over_the_stand_in(tmp_path: Path) -> None:
    """The node's own --listen-bluetooth listener and bluetooth:// dialer (redialling), on AF_UNIX."""
    fam = bt.unix_stand_in(tmp_path, mtu=96)
    listen = BluetoothListen(f"bluetooth://{ADDR_A}/4097", ADDR_A, 4097, BT_LINK)
    spec = parse_peer_uri(f"bluetooth://{ADDR_A.lower()}/0x1001?loss_pct=0")
    assert (spec.transport, spec.host, spec.port) == ("bluetooth", ADDR_A, 4097)
    pa = NodeProcess(_cfg(A, listen_bluetooth=listen), bluetooth=fam)
    pb = NodeProcess(_cfg(B, peers=[spec]), bluetooth=fam)
    async with trio.open_nursery() as nursery:
        info = await nursery.start(pa.run)
        assert info["listen_bluetooth"] == f"bluetooth://{ADDR_A}/4097"
        await nursery.start(pb.run)
        with trio.fail_after(10):
            while not (pa.node.peers and pb.node.peers):
                await trio.sleep(0.01)
            # listed is not yet routable: SNEK routes only via a peer whose tree announcement has arrived
            while (await pb.node.ping(A.public_key, "snek", 1, 1.0))["received"] < 1:
                pass
            result = await pb.node.ping(A.public_key, "snek", 2, 5.0)
        assert result["received"] == 2
        [peer_on_a] = pa.node.peers.values()
        assert peer_on_a.link.link_class == "bluetooth"
        [dialer] = pb.node.peering.dialers
        assert dialer.port is not None
        pa.request_stop("test")
        with trio.fail_after(5):
            while pb.node.peers:  # A stopped: B's peer ends and B goes back to redialling
                await trio.sleep(0.01)
        assert pb.node.counters.disconnects == {"eof": 1}
        pb.request_stop("test")


async def test_a_node_without_a_bluetooth_transport_refuses_bluetooth_peers_it_is_asked_for() -> None:
    node = Node(_cfg(A))  # the real L2CAP family: unavailable on this machine
    with pytest.raises(ConfigError, match=r"^uri 'bluetooth://AA:BB:CC:DD:EE:01/4097': Bluetooth is not available"):
        await node.add_peer(f"bluetooth://{ADDR_A}/4097", timeout_s=1)
    assert node.peering.dialers == []


# ================================================================ URIs


@pytest.mark.parametrize(("uri", "reason"), [
    ("bluetooth://AA:BB:CC:DD:EE/4097", "is not a Bluetooth address: expected six hex pairs"),
    ("bluetooth://AA:BB:CC:DD:EE:GG/4097", "is not a Bluetooth address"),
    ("bluetooth://00:00:00:00:00:00/4097", "00:00:00:00:00:00 means any local adapter"),
    ("bluetooth://AA:BB:CC:DD:EE:FF", "no PSM"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/", "no PSM"),
    ("bluetooth:///4097", "no adapter address"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/abc", "PSM 'abc' is not a number"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/4096", "PSM 4096 (0x1000) is not valid: a PSM is odd"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/0x0101", "PSM 257 (0x0101) is not valid"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/70001", "PSM 70001 outside 1..65535"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/4097/x", "nothing after the PSM"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/4097?class=wifi", "unknown link class 'wifi'"),
    ("bluetooth://AA:BB:CC:DD:EE:FF/4097?colour=red", "unknown parameter 'colour'"),
    ("udp://AA:BB:CC:DD:EE:FF/4097", "scheme 'udp' is not supported (use tcp://HOST:PORT or bluetooth://"),
])  # fmt: skip
def test_bad_bluetooth_uris_are_refused_naming_the_problem(uri: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_peer_uri(uri)
    assert err.value.what == "--peer" and err.value.value == uri
    assert reason in err.value.reason


def test_bluetooth_uris_default_to_class_bluetooth_and_take_the_tcp_parameters() -> None:
    spec = parse_peer_uri("bluetooth://aa:bb:cc:dd:ee:ff/129?shape=1&delay_ms=40")
    assert (spec.host, spec.port, spec.transport) == ("AA:BB:CC:DD:EE:FF", 129, "bluetooth")
    assert spec.link.link_class == "bluetooth" and spec.link.type_name == "bluetooth"
    assert spec.link.shape is not None and spec.link.shape.delay_ms == 40
    assert parse_peer_uri("bluetooth://AA:BB:CC:DD:EE:FF/4097?class=remote").link.type_name == "remote"
    assert parse_peer_uri("tcp://127.0.0.1:7000").transport == "tcp"
    lb = parse_listen_bluetooth("bluetooth://00:00:00:00:00:00/4097")
    assert (lb.address, lb.psm, lb.link.link_class) == (bt.BDADDR_ANY, 4097, "bluetooth")
    with pytest.raises(ConfigError, match="--listen-bluetooth 'tcp://1.2.3.4:5': expected bluetooth://ADDR/PSM"):
        parse_listen_bluetooth("tcp://1.2.3.4:5")
    with pytest.raises(ConfigError, match="use --listen-bluetooth"):
        parse_listen("bluetooth://00:00:00:00:00:00/4097")


# ================================================================ start-up checks on this machine (no Bluetooth)


def _this_machine(executable: str = sys.executable) -> list[str]:
    """What this machine lacks, established here independently of the code under test."""
    python = f"this Python ({executable}, {sys.version.split()[0]}) was built without Bluetooth sockets " \
             "(socket.AF_BLUETOOTH / socket.BTPROTO_L2CAP are missing; Debian's python3 has them)"
    kernel = "the kernel has no Bluetooth sockets (is the bluetooth module loaded? modprobe bluetooth): " \
             "socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP) failed with EAFNOSUPPORT " \
             "(Address family not supported by protocol)"
    adapter = "no Bluetooth adapter (/sys/class/bluetooth does not exist)"
    return [python, kernel, adapter]


@pytest.fixture
def no_bluetooth() -> list[str]:
    """What this machine lacks (for the Python running the tests); skips where Bluetooth is partly there."""
    if hasattr(socket, "AF_BLUETOOTH") or Path("/sys/class/bluetooth").exists():
        pytest.skip("this machine has some Bluetooth support; these tests pin down a machine without any")
    try:
        socket.socket(31, socket.SOCK_SEQPACKET, 0).close()  # Linux's AF_BLUETOOTH, BTPROTO_L2CAP
    except OSError:
        pass
    else:
        pytest.skip("the kernel has Bluetooth sockets here")
    return _this_machine()


def test_missing_names_all_three_on_this_machine(no_bluetooth: list[str]) -> None:
    assert bt.missing() == no_bluetooth
    assert bt.unavailable() == "Bluetooth is not available on this machine: " + "; ".join(no_bluetooth)


def test_adapter_listing_reads_a_sysfs_tree(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert bt.missing(empty)[-1] == f"no Bluetooth adapter ({empty} is empty)"
    tree = tmp_path / "class"
    (tree / "hci0" / "rfkill3").mkdir(parents=True)
    (tree / "hci0:11").mkdir()  # a connection, not an adapter
    (tree / "hci0" / "address").write_text("aa:bb:cc:dd:ee:ff\n")
    (tree / "hci0" / "rfkill3" / "soft").write_text("1\n")
    (tree / "hci0" / "rfkill3" / "hard").write_text("0\n")
    assert bt.adapters(tree) == [bt.Adapter("hci0", "AA:BB:CC:DD:EE:FF", None, True)]
    assert not any("adapter" in gap for gap in bt.missing(tree))


def test_probe_says_what_is_missing(no_bluetooth: list[str]) -> None:
    argv = [*snekbed_argv(), "bluetooth", "probe"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    gaps = _this_machine(_child_python(out.stdout))
    assert out.stdout.splitlines() == ["Bluetooth is not available on this machine:",
                                       *(f"  missing: {gap}" for gap in gaps)]  # fmt: skip
    js = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    assert js.returncode == 1
    assert json.loads(js.stdout) == {"usable": False, "missing": gaps, "adapters": []}


def _child_python(text: str) -> str:
    """The interpreter a ``snekbed`` child process named (its venv's python3 rather than the tests' python)."""
    m = re.search(r"this Python \((/[^,]+), ", text)
    assert m is not None, text
    assert Path(m.group(1)).resolve() == Path(sys.executable).resolve()
    return m.group(1)


@pytest.mark.parametrize("option", [
    ["--peer", "bluetooth://AA:BB:CC:DD:EE:FF/4097"],
    ["--listen-bluetooth", "bluetooth://00:00:00:00:00:00/4097"],
])  # fmt: skip
def test_a_node_with_a_bluetooth_option_exits_at_start_saying_what_is_missing(
    no_bluetooth: list[str], option: list[str]
) -> None:
    argv = [*snekbed_argv(), "node", *option, "--listen", "127.0.0.1:0", "--admin", "off", "--metrics", "off"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    gaps = _this_machine(_child_python(out.stderr))
    expected = f"Error: {option[0]} {option[1]!r}: Bluetooth is not available on this machine: " + "; ".join(gaps)
    assert expected in out.stderr.splitlines(), out.stderr


def test_check_bluetooth_passes_when_bluetooth_is_there_and_ignores_tcp_only_nodes() -> None:
    bt_cfg = _cfg(A, peers=[parse_peer_uri("bluetooth://AA:BB:CC:DD:EE:FF/4097")])
    check_bluetooth(bt_cfg, unavailable=lambda: None)
    check_bluetooth(_cfg(A, peers=[parse_peer_uri("tcp://127.0.0.1:7000")]), unavailable=lambda: "nope")
    with pytest.raises(ConfigError, match="^--peer 'bluetooth://AA:BB:CC:DD:EE:FF/4097': nope$"):
        check_bluetooth(bt_cfg, unavailable=lambda: "nope")
    assert isinstance(bt_cfg.peers[0], PeerSpec)
