"""The admin API contract and run-time peering: add/drop peers, redial with backoff, userspace shaping."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from nodeproc import Cluster, holds, metric, wait_until
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path):
    with Cluster(tmp_path, tag="admin") as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_admin_contract_and_errors(cluster: Cluster) -> None:
    n = cluster.start("n")
    health = n.get("/healthz")
    assert health["ok"] is True and health["public_key"] == n.key.hex() and health["peers"] == 0
    state = n.state()
    assert set(state) >= {"public_key", "root", "parent", "coords", "descending", "peers", "routing_table_size"}
    assert state["root"] == {"key": n.key.hex(), "sequence": 1} and state["parent"] is None and state["peers"] == []
    bad = [
        ("/ping", {"key": "abc"}, 422, "key"),
        ("/ping", {"key": "00" * 32, "mode": "flood"}, 422, "mode"),
        ("/ping", {"key": "00" * 32, "count": 0}, 422, "count"),
        ("/ping", {"key": "00" * 32, "bogus": 1}, 422, "bogus"),
        ("/peers", {"uri": "tcp://h:1?class=wifi"}, 400, "unknown link class 'wifi'"),
        ("/traffic", {"key": "00" * 32, "payload_bytes": 5}, 422, "payload_bytes"),
    ]
    for path, body, status, words in bad:
        r = n.post(path, body)
        assert r.status_code == status, (path, body, r.text)
        assert words in r.json()["error"], r.json()
    r = n._client.post(n.admin + "/ping", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]
    assert n._client.delete(n.admin + "/peers/0").status_code == 400
    assert n._client.delete(n.admin + "/peers/77").status_code == 404
    # a ping to an unknown key times out cleanly: sent 1, received 0
    assert n.ping(b"\x01" * 32, "snek", count=1, timeout_s=0.5) == {"sent": 1, "received": 0, "rtt_ms": [], "hops": []}


def test_add_and_drop_peers_at_run_time(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    r = b.post("/peers", {"uri": a.uri("lan"), "timeout_s": 10})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "connected" and body["key"] == a.key.hex() and body["class"] == "multicast"
    assert [p["class"] for p in b.state()["peers"]] == ["multicast"]
    wait_until(lambda: b.ping(a.key, "snek", timeout_s=2)["received"] == 1, 10, what="ping over the new peering")
    r = b._client.delete(f"{b.admin}/peers/{body['port']}")
    assert r.status_code == 200 and r.json()["key"] == a.key.hex()
    wait_until(lambda: a.state()["peers"] == [], 5, what="a sees the peering go")
    holds(lambda: b.state()["peers"] == [] and a.state()["peers"] == [], 2.0, what="no redial of a dropped peering")
    down = [e for e in b.events() if e["event"] == "peer_down"]
    assert down and down[-1]["reason"] == "admin_removed"
    r = b.post("/peers", {"uri": "tcp://127.0.0.1:1", "timeout_s": 0.5})  # nothing listens there
    assert r.status_code == 202 and r.json()["status"] == "dialing" and "dial failed" in r.json()["last_error"]


def test_configured_peer_is_redialled_after_a_restart(cluster: Cluster) -> None:
    port = _free_port()
    a = cluster.start("a", "--listen", f"127.0.0.1:{port}")
    b = cluster.start("b", "--peer", f"tcp://127.0.0.1:{port}", "--backoff-max-s", "2")
    wait_until(lambda: len(b.state()["peers"]) == 1, 10, what="first peering")
    assert a.terminate() == 0
    wait_until(lambda: b.state()["peers"] == [], 5, what="b notices")
    # b keeps redialling the closed port meanwhile, its backoff capped at 2 s (0.5, 1, 2, 2, 2 s): after five
    # failures an uncapped backoff would wait 8-16 s for the next dial, the capped one at most 2.4 s
    wait_until(lambda: metric(b.metrics_text(), "snek_dial_failures_total") >= 5, 20, what="five failed redials")
    a.start()
    t0 = time.monotonic()
    wait_until(lambda: len(b.state()["peers"]) == 1, 15, what="redial after the restart")
    assert time.monotonic() - t0 < 8.0  # one capped backoff (2 s +20 %) plus a's start, connect and handshake
    wait_until(lambda: b.ping(a.key, "snek", timeout_s=2)["received"] == 1, 10, what="a ping over the new peering")


def test_userspace_shaping_delays_both_directions(cluster: Cluster) -> None:
    a = cluster.start("a", "--inbound", "tcp://127.0.0.1?class=bluetooth&delay_ms=40")
    b = cluster.start("b", "--peer", a.uri("bluetooth", delay_ms=40))
    wait_until(lambda: len(a.state()["peers"]) == 1 and len(b.state()["peers"]) == 1, 10, what="peering")
    assert [p["class"] for p in a.state()["peers"]] == ["bluetooth"]
    wait_until(lambda: b.ping(a.key, "snek", timeout_s=3)["received"] == 1, 10, what="ping")
    res = b.ping(a.key, "snek", count=5, timeout_s=3)
    assert res["received"] == 5
    assert min(res["rtt_ms"]) >= 80.0, res  # 40 ms each way, added by each side's writer
    assert sorted(res["rtt_ms"])[2] < 400.0, res  # the median: a delay applied twice, not one stalled ping


def test_userspace_shaper_counters_reach_the_metrics(cluster: Cluster) -> None:
    # only b's side is lossy: a's one tree announcement (re-sent every 30 min) must reach b, or b has no route to a
    # (§6.3 steps 4-5 consider only peers that announced) and its traffic never reaches the shaper
    a = cluster.start("sa", "--inbound", "tcp://127.0.0.1?class=remote&delay_ms=20&loss_pct=0")
    b = cluster.start("sb", "--peer", a.uri("remote", delay_ms=20, loss_pct=30))
    wait_until(lambda: len(b.state()["peers"]) == 1, 10, what="peering")

    def shaper_samples(node) -> dict:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(node.metrics_text())
                for s in fam.samples if s.name.startswith("snek_shaper_")}  # fmt: skip

    delayed = ("snek_shaper_delayed_frames_total", (("link_class", "remote"),))
    lost = ("snek_shaper_dropped_frames_total", (("link_class", "remote"), ("reason", "loss")))

    seen: list[object] = []

    def enough() -> dict | None:
        # 100 traffic frames straight to the peer: each one b writes is delayed 20 ms, about 30 of them are lost
        load = b.post("/traffic", {"key": a.key.hex(), "count": 100, "payload_bytes": 100, "inflight": 8,
                                   "timeout_s": 5})
        got = shaper_samples(b)
        seen[:] = [load, len(b.state()["peers"]), {k[0] + str(dict(k[1])): v for k, v in got.items()}]
        return got if got.get(delayed, 0) > 10 and got.get(lost, 0) >= 1 else None

    try:
        got = wait_until(enough, 60, what="shaper counters")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last /traffic answer, peers, shaper samples: {seen}") from None
    assert got[("snek_shaper_dropped_frames_total", (("link_class", "bluetooth"), ("reason", "queue")))] == 0
    assert got[("snek_shaper_dropped_frames_total", (("link_class", "remote"), ("reason", "queue")))] == 0


def test_routes_lists_the_routing_table_entries_a_bootstrap_installed(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b", "--peer", a.uri("lan"))
    wait_until(lambda: len(b.state()["peers"]) == 1 and len(a.state()["peers"]) == 1, 10, what="a and b peer")

    def installed() -> tuple[list[dict], list[dict]] | None:
        ra, rb = a.get("/routes"), b.get("/routes")
        return (ra, rb) if ra or rb else None

    ra, rb = wait_until(installed, 15, what="a bootstrap installs a route")  # bootstraps go out every 5 s
    keys = {a.key.hex(), b.key.hex()}
    ports = {p["port"] for n in (a, b) for p in n.state()["peers"]}
    for doc in (ra, rb):
        assert [r["key"] for r in doc] == sorted(r["key"] for r in doc)  # lowest key first
        for r in doc:
            assert set(r) == {"key", "source", "destination", "expires_in_s"}, r
            assert r["key"] in keys and 0 < r["expires_in_s"] <= 3600, r
            # a peer's port, 0 (LOCAL_PORT: this node) or -1 (NONE_PORT: the bootstrap ended here)
            assert r["source"] in ports | {0} and r["destination"] in ports | {0, -1}, (r, ports)
