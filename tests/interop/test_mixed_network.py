"""Reference nodes and snekbed nodes in one network, as real processes on 127.0.0.1 (no mocks).

A line of six, alternating: r1 - s1 - r2 - s2 - r3 - s3 (r: node/pinecone on the reference's router, s:
``snekbed node``), each dialling the one before it. A line has one path between any two nodes, so hop counts
and what crosses a node are known. The tests run in file order on one network:

1. it converges: every node names the highest key as root and its next lower key as descending neighbour;
2. pings both ways through the admin APIs, SNEK and tree, with the hop counts of PROTOCOL.md section 8;
3. the reference node's /metrics parses and has the series docs/interop.md says it fills, with the names,
   types and labels of snekbed's;
4. a dropped peering is redialled by the reference node that dialled it;
5. adversary drop rates take effect (traffic through r2 stops, its counter moves) and can be lifted;
6. the root (a snekbed node) is killed: each half converges on its own highest key (reference nodes);
7. after SIGTERM, every line of the reference nodes' event logs validates against the run-dataset contract.

Waits are bounded by the protocol's timers (constants below), never bare sleeps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.dataset import validate_event
from tests.interop.refproc import RefProc
from tests.node.nodeproc import NodeProc, holds, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TAG = "interop"
NAMES = ("r1", "s1", "r2", "s2", "r3", "s3")

# PROTOCOL.md: bootstraps every 5 s (§6.7), a routing entry lives 10 s without one; the tree settles within a 1 s
# hold per reparenting (§5.6). A line of six needs a few bootstrap rounds for its snake; twelve rounds leave room
# for six processes on two busy cores.
BOOTSTRAP_S = 5.0
CONVERGE_S = 12 * BOOTSTRAP_S
# the reference's connection manager redials at its next worker round (every 5 s; a dial times out after 5 s)
WORKER_S = 5.0
REDIAL_S = 2 * WORKER_S + BOOTSTRAP_S
PING_TIMEOUT_S = 3.0


class Line:
    def __init__(self, binary: Path, workdir: Path) -> None:
        self.nodes: list[RefProc | NodeProc] = []
        for i, name in enumerate(NAMES):
            dial = ["--peer", self.nodes[i - 1].uri()] if i else []
            if name.startswith("r"):
                n: RefProc | NodeProc = RefProc(binary, name, workdir, tag=TAG, extra=["--stats-interval-s", "2", *dial])
            else:
                n = NodeProc(name, workdir, tag=TAG, extra=dial)
            self.nodes.append(n)
            n.start(timeout_s=60)

    def __getitem__(self, name: str) -> RefProc | NodeProc:
        return self.nodes[NAMES.index(name)]

    @property
    def refs(self) -> list[RefProc]:
        return [n for n in self.nodes if isinstance(n, RefProc)]

    @property
    def ours(self) -> list[NodeProc]:
        return [n for n in self.nodes if isinstance(n, NodeProc)]

    def hops(self, a: str, b: str) -> int:
        """PROTOCOL.md §8: links on the path + 1."""
        return abs(NAMES.index(a) - NAMES.index(b)) + 1

    def wrong(self, *components: tuple[str, ...]) -> list[str]:
        """What keeps the network (or each of these components) from having converged; empty when it has."""
        out = []
        for comp in components or (NAMES,):
            order = sorted((self[name] for name in comp), key=lambda n: n.key)
            for i, n in enumerate(order):
                st = n.state()
                if st["root"]["key"] != order[-1].key.hex():
                    out.append(f"{n.name}: root {st['root']['key'][:8]}")
                want = order[i - 1].key.hex() if i else None
                if st["descending"] != want:
                    out.append(f"{n.name}: descending {(st['descending'] or 'none')[:8]}, want {(want or 'none')[:8]}")
        return out

    def close(self) -> None:
        for n in self.nodes:
            n.close()


@pytest.fixture(scope="module")
def line(reference_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Line]:
    net = Line(reference_binary, tmp_path_factory.mktemp("mixed"))
    try:
        yield net
    finally:
        net.close()


def test_converges(line: Line) -> None:
    wait_until(lambda: not line.wrong(), CONVERGE_S, interval_s=0.5, what="a converged line")
    root = max(line.nodes, key=lambda n: n.key)
    for n in line.nodes:
        st = n.state()
        assert st["root"]["key"] == root.key.hex()
        assert (st["parent"] is None) == (n is root)
        assert len(st["coords"]) == abs(NAMES.index(n.name) - NAMES.index(root.name))


@pytest.mark.parametrize("mode", ["snek", "tree"])
def test_pings_both_ways(line: Line, mode: str) -> None:
    root = max(line.nodes, key=lambda n: n.key)
    lost = []
    for a in line.nodes:
        for b in line.nodes:
            if (a.name[0] == b.name[0]) or a is b:
                continue  # every pair of a reference node and a snekbed node, each way
            r = a.ping(b.key, mode=mode, count=2, timeout_s=PING_TIMEOUT_S)
            if r["received"] != 2:
                lost.append(f"{a.name}->{b.name}: {r}")
                continue
            assert r["hops"] == [line.hops(a.name, b.name)] * 2, (a.name, b.name, r)
            if isinstance(a, RefProc) and mode == "tree" and b is not root:
                # the reference tree-routes once it holds the target's coordinates (a root has none to hold)
                assert r["routed"] == ["tree", "tree"], (a.name, b.name, r)
    assert not lost, lost


def _documented_series() -> dict[str, tuple[str, bool]]:
    """The series docs/interop.md says the reference node fills: name -> (type, only once one happens)."""
    text = (REPO / "docs" / "interop.md").read_text()
    section = text.split("<!-- reference-node-metrics -->")[1]
    rows = re.findall(r"^\| `([a-z_]+)` \| (gauge|counter|histogram) \|([^|]*)\|", section, re.M)
    return {name: (typ, "as they happen" in labels) for name, typ, labels in rows}


def _families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """family name (as exposed, counters with _total) -> (type, label names of its samples)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        labels = frozenset(k for s in fam.samples for k in s.labels if k not in ("le", "quantile"))
        out[name] = (fam.type, labels)
    return out


def test_metrics(line: Line) -> None:
    documented = _documented_series()
    assert len(documented) >= 20, documented
    ours = _families(line["s1"].metrics_text())
    for r in line.refs:
        text = r.metrics_text()
        fams = _families(text)
        for name, (typ, sometimes) in documented.items():
            if sometimes and (name not in fams or name not in ours):
                continue  # a series whose label values are known only when they happen (docs/metrics.md)
            assert name in fams, f"{r.name}: {name} missing"
            assert fams[name][0] == typ, (name, fams[name])
            if name.startswith("snek_"):
                assert fams[name] == ours[name], f"{name}: {fams[name]} on the reference, {ours[name]} on snekbed"
        assert not {n for n in fams if n.startswith("snek_")} - set(documented), "an undocumented series"
        values = {(s.name, tuple(sorted(s.labels.items()))): s.value
                  for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip
        assert values[("snek_received_frames_total", (("type", "tree_announcement"),))] > 0
        assert values[("snek_sent_frames_total", (("type", "tree_announcement"),))] > 0
        assert values[("snek_pings_total", (("mode", "snek"), ("result", "received")))] > 0
        assert values[("snek_peers", (("link_class", "remote"),))] == len(r.state()["peers"])
        assert r.get("/healthz")["peers"] == len(r.state()["peers"])
        assert values[("snek_bootstraps_accepted_total", ())] > 0  # r1 and r3 accept s1's, s3's; r2 forwards
    root = max(line.nodes, key=lambda n: n.key)
    for r in line.refs:
        if r is not root:
            assert "snek_bootstraps_sent_total 0.0" not in r.metrics_text(), f"{r.name} sent no bootstrap"


def test_dropped_peer_is_redialled(line: Line) -> None:
    """s1 drops the peering r2 dialled: r2 sees it end and redials at its connection manager's next round."""
    r2, s1 = line["r2"], line["s1"]
    port = next(p["port"] for p in s1.state()["peers"] if p["key"] == r2.key.hex())
    assert httpx.delete(f"{s1.admin}/peers/{port}").status_code == 200
    gone = lambda: [e for e in r2.events() if e["event"] == "peer_down" and e["peer"] == s1.key.hex()]  # noqa: E731
    wait_until(gone, BOOTSTRAP_S, what="r2's peer_down")
    down = gone()
    assert down[-1]["reason"] in ("eof", "connection_reset"), down[-1]
    wait_until(lambda: any(p["key"] == s1.key.hex() for p in r2.get("/peers")), REDIAL_S, what="r2 redialled s1")
    ups = [e for e in r2.events() if e["event"] == "peer_up" and e["peer"] == s1.key.hex()]
    assert len(ups) == 2 and ups[-1]["mono_s"] > down[-1]["mono_s"]
    # dropped by r2 itself, the peering it dialled is not redialled (a worker round passes), until it is added again
    port = next(p["port"] for p in r2.get("/peers") if p["key"] == s1.key.hex())
    assert r2.delete(f"/peers/{port}").json() == {"port": port, "key": s1.key.hex(), "status": "closed"}
    holds(lambda: all(p["key"] != s1.key.hex() for p in r2.get("/peers")), WORKER_S + 1, what="s1 stays dropped")
    added = r2.post("/peers", {"uri": s1.uri(), "timeout_s": 10})
    assert added.status_code == 201 and added.json()["key"] == s1.key.hex(), added.text
    # no userspace shaper, so the one shape it takes for a peering is none (every field null: docs/interop.md)
    none = dict.fromkeys(("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "duplicate_pct", "corrupt_pct",
                          "reorder_pct", "queue_limit_pkts"))  # fmt: skip
    shaped = r2.post("/peers/shape", {"peer": s1.key.hex(), "class": "lan", "shaping": none})
    assert shaped.status_code == 200 and shaped.json() == {"ports": [added.json()["port"]],
                                                           "shapes": {str(added.json()["port"]): {}}}, shaped.text
    wait_until(lambda: not line.wrong(), CONVERGE_S, interval_s=0.5, what="the line converged again")


def test_adversary_drops_traffic(line: Line) -> None:
    """r2 drops every traffic frame it would forward: s1's pings to s2 (through r2) stop, r2 counts them; then
    half of what comes from s1 only, the reference simulator's first-a-of-every-b rule."""
    r2, s1, s2 = line["r2"], line["s1"], line["s2"]
    assert s1.ping(s2.key, count=1, timeout_s=PING_TIMEOUT_S)["received"] == 1
    res = r2.post("/adversary", {"drop": {"traffic": 100}}).json()
    assert res["active"] is True
    assert s1.ping(s2.key, count=1, timeout_s=PING_TIMEOUT_S)["received"] == 0
    assert s1.ping(s2.key, mode="tree", count=1, timeout_s=PING_TIMEOUT_S)["received"] == 0
    text = r2.metrics_text()
    dropped = [s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "snek_dropped_frames_total" and s.labels == {"type": "traffic", "reason": "adversary"}]
    assert dropped and dropped[0] >= 2
    # other frame types still pass: the tree and the snake stay as they were
    assert not line.wrong()
    res = r2.post("/adversary", {"drop": {"traffic": 0}}).json()
    assert res["active"] is False and res["dropped"] >= 2
    assert s1.ping(s2.key, count=2, timeout_s=PING_TIMEOUT_S)["received"] == 2
    # 50 % for what comes from s1 only: one of every two of s1's pings goes (the pongs come from s2: untouched)
    before = r2.post("/adversary", {"drop": {"traffic": 50}, "peer": s1.key.hex()}).json()["dropped"]
    assert s1.ping(s2.key, count=4, timeout_s=PING_TIMEOUT_S)["received"] == 2
    after = r2.post("/adversary", {"drop": {"traffic": 0}, "peer": s1.key.hex()}).json()
    assert after["dropped"] - before == 2 and after["active"] is False
    # a strategy other than drop is snekbed node's: the reference refuses it, saying so (docs/attacks.md)
    refused = r2.post("/adversary", {"strategy": "greyhole", "forward": 0.3})
    assert refused.status_code == 422 and "only the drop strategy" in refused.json()["error"], refused.text


def test_root_killed(line: Line) -> None:
    """The root (s2, a snekbed node) is killed: the line falls into r1 - s1 - r2 and r3 - s3, and each part
    converges on its highest key, here reference nodes (r1, r3) with snekbed nodes following them."""
    root = max(line.nodes, key=lambda n: n.key)
    assert root.name == "s2", "the keys of this tag make s2 the root; the parts below assume it"
    root.kill9()
    parts = (("r1", "s1", "r2"), ("r3", "s3"))
    wait_until(lambda: not line.wrong(*parts), CONVERGE_S, interval_s=0.5, what="both parts converged")
    for part in parts:
        top = max((line[n] for n in part), key=lambda n: n.key)
        assert isinstance(top, RefProc)
        for name in part:
            assert line[name].state()["root"]["key"] == top.key.hex()
    assert line["s1"].ping(line["r1"].key, count=1, timeout_s=PING_TIMEOUT_S)["hops"] == [2]
    assert line["r3"].ping(line["s3"].key, mode="tree", count=1, timeout_s=PING_TIMEOUT_S)["received"] == 1
    roots = [e["root"] for e in line["r2"].events() if e["event"] == "root_changed"]
    assert roots[-1] == line["r1"].key.hex()


def test_event_logs_follow_the_contract(line: Line) -> None:
    for r in line.refs:
        assert r.terminate() == 0
    kinds: dict[str, set[str]] = {}
    for r in line.refs:
        lines = r.events_path.read_text().splitlines()
        assert lines
        for i, text in enumerate(lines):
            assert validate_event(text, run_id="nodetest") is None, (r.name, i, text, validate_event(text))
        kinds[r.name] = {e["event"] for e in r.events()}
        assert r.events()[0]["event"] == "node_started" and r.events()[-1]["event"] == "node_stopping"
    every = set.union(*kinds.values())
    for kind in ("node_started", "peer_up", "peer_down", "root_changed", "parent_changed", "coords_changed",
                 "descending_changed", "bootstrap_sent", "bootstrap_accepted", "ping_result", "frame_stats",
                 "frame_dropped", "node_stopping"):  # fmt: skip
        assert kind in every, f"no {kind} in any reference node's log"
