"""``POST /peers/shape`` with ``"port"``: one peering of a pair reshaped, the pair's other peerings left alone (a radio
link among a fixed link and other radios, docs/mobility.md), nothing remembered for later peerings with the key; its
errors word for word. Real ``snekbed node`` processes on 127.0.0.1: b dials a twice (a ``remote`` and a ``lan``
peering, as a fixed link and a radio link of one pair)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodeproc import Cluster, wait_until

pytestmark = pytest.mark.slow


def test_one_peering_of_a_pair_is_shaped_by_its_port(tmp_path: Path) -> None:
    with Cluster(tmp_path, tag="shapeport") as cl:
        a = cl.start("a")
        b = cl.start("b", "--peer", a.uri("remote"), "--peer", a.uri("lan"))
        wait_until(lambda: len(a.state()["peers"]) == 2 and len(b.state()["peers"]) == 2, 20,
                   what="b peered with a twice")  # fmt: skip
        on_b = {p["link_class"]: p for p in b.state()["peers"]}
        assert set(on_b) == {"remote", "lan"} and all(p["key"] == a.key.hex() for p in on_b.values()), on_b
        assert on_b["lan"]["shape"] == on_b["remote"]["shape"] == {}, on_b  # /state shows each shaper: none
        lan, remote = on_b["lan"]["port"], on_b["remote"]["port"]

        # the lan peering alone, by its port (and its key): the whole shape named, a null clearing a field
        body = {"port": lan, "peer": a.key.hex(), "class": None,
                "shaping": {"delay_ms": 0.1, "loss_pct": 8, "rate_mbit": None}}  # fmt: skip
        r = b.post("/peers/shape", body)
        assert r.status_code == 200, r.text
        assert r.json() == {"ports": [lan], "shapes": {str(lan): {"delay_ms": 0.1, "loss_pct": 8.0}}}
        after = {p["port"]: p["shape"] for p in b.state()["peers"]}
        assert after == {lan: {"delay_ms": 0.1, "loss_pct": 8.0}, remote: on_b["remote"]["shape"]}, after
        # the port alone does too: a, the listener, has both peerings from b's address (different source ports)
        port_a, other_a = sorted(p["port"] for p in a.state()["peers"])
        r = a.post("/peers/shape", {"port": port_a, "shaping": {"loss_pct": 3}})
        assert r.status_code == 200 and r.json()["ports"] == [port_a], r.text
        shapes_a = {p["port"]: p["shape"] for p in a.state()["peers"]}
        assert shapes_a[port_a].get("loss_pct") == 3.0 and shapes_a[other_a].get("loss_pct") is None, shapes_a

        # errors: 400 not JSON, 422 a bad body (neither peer nor port, a bad port, a bad field), 404 no such peering
        raw = b._client.post(b.admin + "/peers/shape", content=b"{port", headers={"content-type": "application/json"})
        assert (raw.status_code, raw.json()) == (400, {"error": "request body is not valid JSON"})
        unknown = [p for p in range(1, 254) if p not in (lan, remote)][0]
        bad = [
            ({"shaping": {"loss_pct": 1}}, 422, "body: Value error, give 'peer' (a public key: every peering with it) "
                                                "or 'port' (one peering), or both"),
            ({"port": 0}, 422, "port: Input should be greater than or equal to 1"),
            ({"port": 254}, 422, "port: Input should be less than or equal to 253"),
            ({"port": "x"}, 422, "port: Input should be a valid integer, unable to parse string as an integer"),
            ({"port": lan, "shaping": {"warp_ms": 1}}, 422,
             "shaping: unknown field 'warp_ms' (known: delay_ms, jitter_ms, loss_pct, rate_mbit, duplicate_pct, "
             "corrupt_pct, reorder_pct, queue_limit_pkts)"),
            ({"port": lan, "class": "warp"}, 422,
             "unknown link class 'warp' (known: bluetooth, bonjour, custom, lan, multicast, pipe, remote)"),
            ({"port": unknown}, 404, f"port {unknown}: no peer on this port"),
            ({"port": lan, "peer": b.key.hex()}, 404, f"port {lan}: no peer {b.key.hex()[:16]}... on this port"),
        ]  # fmt: skip
        for body, status, error in bad:
            r = b.post("/peers/shape", body)
            assert (r.status_code, r.json()) == (status, {"error": error}), (body, r.text)
        assert {p["port"]: p["shape"] for p in b.state()["peers"]} == after  # nothing changed by them

        # not remembered: the lan peering closed and made again has its URI's shape, not the port's
        assert b.delete(f"/peers/{lan}").status_code == 200
        r = b.post("/peers", {"uri": a.uri("lan"), "timeout_s": 10})
        assert r.status_code == 201, r.text
        again = {p["port"]: p for p in b.state()["peers"]}[r.json()["port"]]
        assert again["link_class"] == "lan" and again["shape"] == {}, again
        # while the key form is: every peering with a now, and the next one too
        r = b.post("/peers/shape", {"peer": a.key.hex(), "class": "lan", "shaping": {"loss_pct": 2}})
        assert r.status_code == 200 and sorted(r.json()["ports"]) == sorted(p["port"] for p in b.state()["peers"])
        port = r.json()["ports"][0]
        assert b.delete(f"/peers/{port}").status_code == 200
        r = b.post("/peers", {"uri": a.uri("remote"), "timeout_s": 10})
        assert r.status_code == 201, r.text
        newest = {p["port"]: p for p in b.state()["peers"]}[r.json()["port"]]
        assert newest["shape"] == {"delay_ms": 0.1, "loss_pct": 2.0, "rate_mbit": 1000.0}, newest


def test_a_conditional_delete_closes_only_the_peering_it_names(tmp_path: Path) -> None:
    """``DELETE /peers/PORT?key=..&remote=..`` closes the port's peering only if it is the one named (a port is given
    to the next peering once one ends: a caller that kept an old port must not close another pair's link)."""
    with Cluster(tmp_path, tag="delkey") as cl:
        a = cl.start("a")
        b = cl.start("b", "--peer", a.uri("remote"), "--peer", a.uri("lan"))
        wait_until(lambda: len(b.state()["peers"]) == 2, 20, what="b peered with a twice")
        on_b = {p["link_class"]: p for p in b.state()["peers"]}
        lan, remote = on_b["lan"], on_b["remote"]
        assert lan["remote"] == a.uri("lan") and remote["remote"] == a.uri("remote"), on_b
        refused = [
            ({"remote": remote["remote"]}, 409),  # the other peering's URI
            ({"key": b.key.hex()}, 409),  # another key
            ({"key": a.key.hex(), "remote": remote["remote"]}, 409),  # both must match
            ({"peer": a.key.hex()}, 400),  # not a parameter
        ]
        for params, status in refused:
            r = b._client.delete(b.admin + f"/peers/{lan['port']}", params=params)
            assert r.status_code == status, (params, r.text)
            if status == 409:
                assert r.json() == {"error": f"port {lan['port']}: its peering is another one", "port": lan["port"],
                                    "key": a.key.hex(), "remote": lan["remote"]}, r.text  # fmt: skip
        assert r.json() == {"error": "unknown parameter 'peer' (known: key, remote)"}
        assert len(b.state()["peers"]) == 2  # none of them closed anything
        r = b._client.delete(b.admin + f"/peers/{lan['port']}", params={"key": a.key.hex().upper(),
                                                                        "remote": lan["remote"]})  # fmt: skip
        assert r.status_code == 200 and r.json() == {"port": lan["port"], "key": a.key.hex(), "status": "closed"}
        assert [p["port"] for p in b.state()["peers"]] == [remote["port"]]
        r = b._client.delete(b.admin + f"/peers/{lan['port']}", params={"key": a.key.hex()})
        assert (r.status_code, r.json()) == (404, {"error": f"port {lan['port']}: no peer on this port"})
