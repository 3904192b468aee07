"""Node configuration, identity files, the event log and the command line: bad input gets a clear, typed error."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from contract.links import LinkShape
from node.cli import build_config
from node.cli import node as node_command
from node.config import (
    ConfigError,
    HostPort,
    NodeConfig,
    Timeouts,
    load_identity,
    parse_hostport,
    parse_inbound,
    parse_listen,
    parse_peer_uri,
)
from node.core.crypto import Identity
from node.events import EventLog
from contract.dataset import validate_event


def test_hostport() -> None:
    assert parse_hostport("127.0.0.1:0") == HostPort("127.0.0.1", 0)
    assert parse_hostport("[::1]:8080") == HostPort("::1", 8080)
    assert str(HostPort("::1", 80)) == "[::1]:80"
    for bad, why in [("7000", "HOST:PORT"), ("h:x", "not a number"), ("h:70000", "outside"), ("::1:80", "IPv6")]:
        with pytest.raises(ConfigError, match=why) as err:
            parse_hostport(bad, "--admin")
        assert err.value.what == "--admin" and bad in str(err.value)


def test_listen_takes_tcp_uris_like_peer() -> None:
    assert parse_listen("tcp://127.0.0.1:7000") == HostPort("127.0.0.1", 7000)
    assert parse_listen("127.0.0.1:7000") == HostPort("127.0.0.1", 7000)
    assert parse_listen("TCP://0.0.0.0:0") == HostPort("0.0.0.0", 0)
    assert parse_listen("tcp://[::1]:7000") == HostPort("::1", 7000)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("udp://127.0.0.1:7000", "scheme 'udp' is not supported"),
        ("tcp://127.0.0.1", "no port: expected tcp://HOST:PORT"),
        ("tcp://127.0.0.1:", "no port after ':'"),
        ("tcp://:7000", "no host before ':'"),
        ("tcp://h:7000?class=lan", "takes no query .* --listen-class"),
        ("tcp://h:7000/x", "takes no path"),
        ("tcp://::1:7000", "write IPv6 addresses as \\[ADDR\\]:PORT"),
        ("tcp://[nope]:7000", "'nope' in brackets is not an IPv6 address"),
        ("[::1:7000", "no closing ']'"),
        ("[::1]7000", "no :PORT after ']'"),
        ("h:seven", "port 'seven' is not a number"),
        ("tcp://h:70000", "port 70000 outside 0..65535"),
        ("7000", "no port: expected HOST:PORT"),
    ],
)
def test_bad_listen_addresses_name_the_real_problem(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_listen(value)
    assert err.value.what == "--listen" and err.value.value == value


def test_admin_addresses_say_a_scheme_is_not_taken() -> None:
    with pytest.raises(ConfigError, match="without a scheme \\(remove 'http://'\\)"):
        parse_hostport("http://127.0.0.1:8080", "--admin")


def test_cli_listen_accepts_a_tcp_uri() -> None:
    opts = dict(
        listen="tcp://127.0.0.1:7000", peer=(), inbound=(), listen_class="remote", multicast=(), key_file=None,
        key_seed="00" * 32, admin="off", metrics="off", events=None, run_id="adhoc", name=None, ready_file=None,
        max_frame_bytes=65_535, flow_queue_frames=64, userspace_shaping=False, shaping_seed=None, stats_interval_s=10.0,
        handshake_timeout_s=10.0, keepalive_interval_s=3.0, read_timeout_s=5.0, write_timeout_s=3.0, backoff_max_s=30.0,
        hop_limiting=False, broadcasts=True,
    )  # fmt: skip
    assert build_config(**opts).listen == HostPort("127.0.0.1", 7000)
    result = CliRunner().invoke(node_command, ["--listen", "tcp://127.0.0.1", "--admin", "off", "--metrics", "off"])
    assert result.exit_code == 2 and "--listen 'tcp://127.0.0.1': no port" in result.output


def test_peer_uri_classes_and_shaping() -> None:
    p = parse_peer_uri("tcp://10.0.0.2:7000")
    assert (p.host, p.port, p.link.link_class, p.link.type_name, p.link.shape) == ("10.0.0.2", 7000, "remote", "remote", None)
    assert parse_peer_uri("tcp://h:1?class=lan").link.type_name == "multicast"  # lan is link type 1
    assert parse_peer_uri("tcp://h:1?class=multicast").link.link_type == 1
    bt = parse_peer_uri("tcp://h:1?class=bluetooth&delay_ms=30&jitter_ms=5")
    assert bt.link.link_type == 4 and bt.link.shape == LinkShape(delay_ms=30, jitter_ms=5)  # only what was asked
    whole = parse_peer_uri("tcp://h:1?class=bluetooth&shape=1&loss_pct=0")
    assert whole.link.shape is not None and whole.link.shape.rate_mbit == 1.5 and whole.link.shape.loss_pct == 0
    assert parse_peer_uri("tcp://h:1?class=bluetooth", shape_all=True).link.shape.delay_ms == 30
    assert parse_peer_uri("tcp://[::1]:7000").host == "::1"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("udp://h:1", "scheme 'udp'"),
        ("tcp://h", "HOST:PORT"),
        ("tcp://h:0", "outside 1..65535"),
        ("tcp://h:1?class=wifi", "unknown link class 'wifi'"),
        ("tcp://h:1?colour=red", "unknown parameter 'colour'"),
        ("tcp://h:1?delay_ms=abc", "delay_ms='abc' is not a number"),
        ("tcp://h:1?delay_ms=5&jitter_ms=9", "jitter_ms"),
        ("tcp://h:1?loss_pct=150", "loss_pct"),
        ("tcp://h:1?queue_limit_pkts=5", "queue_limit_pkts needs rate_mbit"),
        ("tcp://h:1?class=remote&class=lan", "given twice"),
        ("tcp://h:1/path", "nothing after the port"),
    ],
)
def test_bad_peer_uris_name_the_problem(uri: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_peer_uri(uri)
    assert err.value.what == "--peer" and uri in str(err.value)


def test_inbound_rules() -> None:
    rule = parse_inbound("tcp://10.1.2.3?class=bluetooth&delay_ms=20")
    assert rule.address == "10.1.2.3" and rule.link.type_name == "bluetooth" and rule.link.shape.delay_ms == 20
    cfg = NodeConfig(identity=Identity(bytes(32)), inbound=[rule])
    assert cfg.inbound_link("10.1.2.3") is rule.link
    assert cfg.inbound_link("10.1.2.4").type_name == "remote"
    with pytest.raises(ConfigError, match="not an IP address"):
        parse_inbound("tcp://somehost?class=lan")


def test_inbound_rules_by_network() -> None:
    """A rule for NET/PREFIX matches every address in it (a swarm allocates the dialer's address)."""
    rule = parse_inbound("tcp://10.1.2.8/29?class=lan")
    assert rule.address == "10.1.2.8/29" and rule.link.link_class == "lan"
    cfg = NodeConfig(identity=Identity(bytes(32)), inbound=[rule])
    assert cfg.inbound_link("10.1.2.10") is rule.link and cfg.inbound_link("10.1.2.15") is rule.link
    assert cfg.inbound_link("10.1.2.16").type_name == "remote"
    with pytest.raises(ConfigError, match="not a network"):
        parse_inbound("tcp://10.1.2.9/29?class=lan")  # host bits set


def test_node_config_checks() -> None:
    ident = Identity(bytes(32))
    with pytest.raises(ConfigError, match="--max-frame-bytes"):
        NodeConfig(identity=ident, max_frame_bytes=100)
    with pytest.raises(ConfigError, match="--run-id"):
        NodeConfig(identity=ident, run_id="has space")
    with pytest.raises(ConfigError, match="--multicast"):
        NodeConfig(identity=ident, multicast=["a/b"])
    with pytest.raises(ConfigError, match="keepalive_s"):
        Timeouts(keepalive_s=5, read_s=5)
    with pytest.raises(ConfigError, match="handshake_s"):
        Timeouts(handshake_s=0)


def test_identity_sources(tmp_path: Path) -> None:
    seed = bytes(range(32))
    ident, source = load_identity(key_seed=seed.hex())
    assert source == "seed" and ident.public_key == Identity(seed).public_key
    path = tmp_path / "node.key"
    created, source = load_identity(key_file=path)
    assert source == "created" and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again, source = load_identity(key_file=path)
    assert source == "file" and again.public_key == created.public_key  # the same key on every start
    raw = tmp_path / "raw.key"
    raw.write_bytes(seed)
    assert load_identity(key_file=raw)[0].public_key == ident.public_key
    assert load_identity()[1] == "ephemeral"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key_seed": "abc"}, "64 hex digits, got 3"),
        ({"key_seed": "zz" * 32}, "not hexadecimal"),
        ({"key_seed": "00" * 32, "key_file": "x"}, "not both"),
    ],
)
def test_bad_identities(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_identity(**kwargs)
    assert "zz" * 32 not in str(err.value)  # a seed is a secret: never echoed


def test_bad_key_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    with pytest.raises(ConfigError, match=str(bad)):
        load_identity(key_file=bad)


def test_event_log_lines_follow_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    log = EventLog(str(path), run_id="r1", node_key=bytes(range(32)), node_name="n1")
    log.emit("node_started", listen=["127.0.0.1:7000"], variant="snek", version="0")
    log.emit("peer_up", port=1, peer=bytes(32).hex(), link_class="remote")
    for _ in range(500):  # a forged-bootstrap flood: rate-limited
        log.emit("bootstrap_rejected", origin=bytes(32).hex(), reason="bad_signature")
    log.count_drop(3, "queue_full", 40)
    log.count_drop(3, "queue_full", 2)
    log.count_drop(None, "bad_magic")
    log.flush_drops()
    log.emit("node_stopping", reason="sigterm")
    log.close()
    log.emit("node_stopping", reason="late")  # after close: ignored, no error
    lines = path.read_text().splitlines()
    assert all(validate_event(line, run_id="r1") is None for line in lines)
    events = [json.loads(line) for line in lines]
    assert events[-1]["event"] == "node_stopping" and events[-1]["reason"] == "sigterm"
    rejected = sum(e["event"] == "bootstrap_rejected" for e in events)
    assert rejected < 150 and log.suppressed["bootstrap_rejected"] == 500 - rejected
    drops = {(e["frame_type"], e["reason"]): e["count"] for e in events if e["event"] == "frame_dropped"}
    assert drops == {("traffic", "queue_full"): 42, ("unknown", "bad_magic"): 1}
    with pytest.raises(ValueError, match="not in the schema"):
        EventLog(None, run_id="r", node_key=bytes(32), node_name=None).emit("made_up")


def test_cli_rejects_bad_options_with_exit_code_2() -> None:
    runner = CliRunner()
    result = runner.invoke(node_command, ["--peer", "tcp://h:1?class=wifi", "--key-seed", "00" * 32])
    assert result.exit_code == 2
    assert "unknown link class 'wifi'" in result.output and "--peer" in result.output
    result = runner.invoke(node_command, ["--admin", "nonsense"])
    assert result.exit_code == 2 and "--admin 'nonsense'" in result.output
    result = runner.invoke(node_command, ["--help"])
    assert result.exit_code == 0 and "--multicast IFACE" in result.output
