"""Building the reference node (orchestrator.backends.reference) and what one reference node does alone: its
options, keys, admin API errors, dialler and metrics. Real processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from node.core.crypto import Identity, derive_seed
from orchestrator.backends import reference
from orchestrator.backends.reference import (
    ReferenceUnavailable,
    build_reference_node,
    locate_reference,
    reference_available,
)
from tests.interop.refproc import RefProc
from tests.node.nodeproc import metric, wait_until

# the reference's connection manager: one worker round every 5 s, a failed dial waits 2^attempts s
WORKER_S = 5.0


def test_build_is_cached(reference_binary: Path) -> None:
    assert reference_binary.is_file() and os.access(reference_binary, os.X_OK)
    t0 = time.monotonic()
    again = build_reference_node(reference_binary.parent)
    assert again == reference_binary
    assert time.monotonic() - t0 < 30, "a build of unchanged sources must come from the cache"
    ok, why = reference_available()
    assert ok and "go version" in why


def test_locate_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ReferenceUnavailable, match="neither a checkout"):
        locate_reference(tmp_path)
    ok, why = reference_available(tmp_path)
    assert not ok and str(tmp_path) in why
    monkeypatch.setenv(reference.PINECONE_SRC_ENV, str(tmp_path))
    assert reference.default_pinecone_src() == tmp_path
    monkeypatch.delenv(reference.PINECONE_SRC_ENV)
    assert reference.default_pinecone_src() == reference.DEFAULT_REFERENCE
    # a bare checkout elsewhere: linked into a GOPATH of its own, dependencies from the default tree
    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "router.go").write_text("package router\n")
    if not reference.DEFAULT_REFERENCE.is_dir():
        pytest.skip(f"no reference tree at {reference.DEFAULT_REFERENCE} to take phony from")
    src = locate_reference(tmp_path)
    assert src.needs_link and src.pinecone == tmp_path.resolve()
    assert reference.DEFAULT_REFERENCE.resolve() in src.gopath


def _run(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("args", "names"), [
    (["--peer", "tcp://127.0.0.1:7000?class=wifi"], ["--peer", "unknown link class"]),
    (["--peer", "tcp://127.0.0.1:7000?delay_ms=5"], ["--peer", "no userspace shaper"]),
    (["--peer", "bluetooth://AA:BB:CC:DD:EE:FF/4097"], ["--peer", "Bluetooth"]),
    (["--variant", "legacy"], ["--variant", "only the variant snek"]),
    (["--knob", "entry_expiry=20"], ["--knob", "fixes entry_expiry at 10"]),
    (["--adversary", "traffic=150"], ["--adversary", "percentage"]),
    (["--adversary", "greyhole:forward=0.3"], ["--adversary", "only the drop strategy", "docs/attacks.md"]),
    (["--run-seed", "7"], ["--run-seed", "--name"]),
    (["--listen", "nowhere"], ["--listen", "HOST:PORT"]),
])  # fmt: skip
def test_bad_options_exit_2(reference_binary: Path, args: list[str], names: list[str]) -> None:
    proc = _run(reference_binary, "--admin", "off", "--listen", "off", *args)
    assert proc.returncode == 2, proc.stderr
    for text in names:
        assert text in proc.stderr


def test_unbindable_address_exits_1(reference_binary: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = f"127.0.0.1:{s.getsockname()[1]}"
        proc = _run(reference_binary, "--listen", "off", "--admin", taken)
    assert proc.returncode == 1
    assert "--admin" in proc.stderr


def test_keys_as_snekbed_derives_them(reference_binary: Path, tmp_path: Path) -> None:
    """--run-seed with --name gives the key NodeSpec.seed_bytes gives a snekbed node; --key-seed the seed's."""
    for args, seed in ((["--run-seed", "42", "--name", "n7"], derive_seed("42", "n7")),
                       (["--key-seed", "ab" * 32], bytes.fromhex("ab" * 32))):  # fmt: skip
        ready = tmp_path / "ready.json"
        ready.unlink(missing_ok=True)
        proc = subprocess.Popen([str(reference_binary), "--listen", "off", "--admin", "off", "--ready-file",
                                 str(ready), *args], stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_until(ready.exists, 20, what="the ready file")
            assert json.loads(ready.read_text())["public_key"] == Identity(seed).public_key.hex()
        finally:
            proc.terminate()
            assert proc.wait(15) == 0


def test_admin_api_alone(reference_binary: Path, tmp_path: Path) -> None:
    """One node: health, state, request validation, a dialler that fails and backs off, /peers/redial."""
    n = RefProc(reference_binary, "alone", tmp_path, extra=["--stats-interval-s", "1"]).start()
    try:
        h = n.get("/healthz")
        assert h["ok"] is True and h["public_key"] == n.key.hex() and h["peers"] == 0
        st = n.state()
        assert st["public_key"] == n.key.hex() and st["root"]["key"] == n.key.hex()
        assert st["parent"] is None and st["coords"] == [] and st["descending"] is None and st["peers"] == []
        assert st["variant"] == "snek" and st["variant_spec"] == "snek" and st["knobs"]["entry_expiry"] == 10
        assert n.get("/routes") == [] and n.get("/peers") == []
        assert n.post("/ping", {"key": "zz"}).status_code == 422
        assert n.post("/ping", {"key": n.key.hex(), "mode": "sideways"}).status_code == 422
        assert n.post("/ping", {"key": n.key.hex(), "color": 1}).status_code == 422
        assert httpx.post(n.admin + "/ping", content=b"{nope").status_code == 400
        assert n.post("/adversary", {"drop": {"trafic": 5}}).status_code == 422
        assert n.delete("/peers/9").status_code == 404
        assert n.delete("/peers/0").status_code == 400
        assert n.post("/peers", {"uri": "tcp://127.0.0.1:1?class=wifi"}).status_code == 400
        assert n.post("/peers/shape", {"peer": n.key.hex()}).status_code == 501  # no shaper: a shape is refused
        none = dict.fromkeys(("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "duplicate_pct", "corrupt_pct",
                              "reorder_pct", "queue_limit_pkts"))  # fmt: skip
        assert n.post("/peers/shape", {"peer": n.key.hex(), "shaping": {**none, "rate_mbit": 2}}).status_code == 501
        assert n.post("/peers/shape", {"peer": n.key.hex(), "shaping": {"warp_ms": None}}).status_code == 422
        assert n.post("/peers/shape", {"peer": n.key.hex(), "shaping": none}).status_code == 404  # not a peer
        # a ping to itself goes through the router and back
        assert n.ping(n.key)["received"] == 1
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        r = n.post("/peers", {"uri": f"tcp://127.0.0.1:{dead}", "timeout_s": 0.2})
        assert r.status_code == 202 and r.json()["status"] == "dialing"
        failures = lambda: metric(n.metrics_text(), "snek_dial_failures_total")  # noqa: E731
        wait_until(lambda: failures() >= 1, 5, what="the first failed dial")
        assert isinstance(n.post("/peers/redial", {}).json()["woken"], int)
        # woken at once, or at the worker's next round when the 2 s wait had passed already
        wait_until(lambda: failures() >= 2, 2 * WORKER_S, what="a redial")
    finally:
        code = n.terminate()
    assert code == 0
    kinds = [e["event"] for e in n.events()]
    assert kinds[0] == "node_started" and kinds[-1] == "node_stopping"
    with pytest.raises(httpx.HTTPError):
        n.get("/healthz")
    n.close()


def test_redial_starts_a_dial_in_flight_over(reference_binary: Path, tmp_path: Path) -> None:
    """A dial that hangs (its SYN dropped, as where a link was cut: here a listener whose accept queue is full) is
    started over by POST /peers/redial, which counts it, and ending it is no failed attempt. Before, it was left to
    its 5 s dial timeout and then the backoff: a healed link of reference nodes peered again up to 10 s late."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        filler = socket.create_connection(full.getsockname(), timeout=5)  # the one connection the queue holds
        n = RefProc(reference_binary, "inflight", tmp_path).start()
        try:
            r = n.post("/peers", {"uri": f"tcp://127.0.0.1:{full.getsockname()[1]}", "timeout_s": 0.2})
            assert r.status_code == 202 and r.json()["status"] == "dialing", r.text
            assert n.post("/peers/redial", {}).json()["woken"] == 1  # the dial in flight (it hangs up to 5 s)
            assert metric(n.metrics_text(), "snek_dial_failures_total") == 0
        finally:
            filler.close()
            assert n.terminate() == 0
            n.close()
