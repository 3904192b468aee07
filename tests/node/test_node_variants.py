"""Variants between real node processes on 127.0.0.1: a ``snek`` and a ``legacy`` node refuse each other at the
handshake (logged, evented, counted), ``snek`` nodes with different knobs peer and route, and every place a
node reports its variant says the same thing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nodeproc import Cluster, key_for, wait_until

pytestmark = pytest.mark.slow


def _handshake_failures(text: str, reason: str) -> float:
    needle = f'snek_handshake_failures_total{{reason="{reason}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(needle))


def test_snek_and_legacy_refuse_each_other_at_the_handshake(tmp_path: Path) -> None:
    with Cluster(tmp_path) as c:
        legacy = c.start("old", "--variant", "legacy")
        snek = c.start("new", "--peer", legacy.uri())
        for node, mine, theirs in ((snek, "snek", "legacy"), (legacy, "legacy", "snek")):
            wait_until(lambda n=node: _handshake_failures(n.metrics_text(), "bad_capabilities") >= 1, 20,
                       what=f"{mine} counts the refused handshake")  # fmt: skip
            assert node.state()["peers"] == []
            # (a failure before node_started is counted and logged only; the redial's is evented)
            failed = wait_until(lambda n=node: [e for e in n.events() if e["event"] == "handshake_failed"], 20,
                                what=f"{mine} writes handshake_failed")  # fmt: skip
            assert failed[0]["reason"] == "bad_capabilities", failed
            log = node.log_tail(200)
            said = re.search(r"the peer runs variant ([\w-]+(?: or [\w-]+)*)", log)
            assert said and theirs in said.group(1).split(" or "), log  # every variant with the peer's capabilities
        assert snek.state()["variant"] == "snek" and legacy.state()["variant"] == "legacy"
        assert legacy.state()["knobs"]["entry_expiry"] == 3600.0  # the variant's own default


def test_snek_nodes_with_different_knobs_peer_and_route(tmp_path: Path) -> None:
    with Cluster(tmp_path) as c:
        a = c.start("a", "--variant", "snek,root_filter=1", "--knob", "bootstrap_interval=2")
        b = c.start("b", "--peer", a.uri())
        d = c.start("d", "--variant", "snek", "--knob", "wakeup_broadcasts=0", "--peer", b.uri())
        nodes = [a, b, d]
        wait_until(lambda: all(len(n.state()["peers"]) == (2 if n is b else 1) for n in nodes), 20, what="peers up")
        for src in nodes:
            for dst in nodes:
                if src is not dst:
                    res = wait_until(lambda s=src, t=dst: s.ping(key_for(t.name), "snek", timeout_s=2.0)["received"],
                                     30, interval_s=0.5, what=f"{src.name} -> {dst.name}")  # fmt: skip
                    assert res
        st = a.state()
        assert st["variant"] == "snek" and st["variant_spec"] == "snek,bootstrap_interval=2,root_filter=1"
        assert st["knobs"]["root_filter"] is True and st["knobs"]["bootstrap_interval"] == 2.0
        (started,) = [e for e in a.events() if e["event"] == "node_started"]
        assert started["variant"] == "snek,bootstrap_interval=2,root_filter=1"
        info = [ln for ln in a.metrics_text().splitlines() if ln.startswith("snek_node_info{")]
        assert info and 'variant="snek"' in info[0] and 'variant_spec="snek,bootstrap_interval=2,root_filter=1"' in info[0]
        assert d.state()["variant_spec"] == "snek,wakeup_broadcasts=0"
        for n in nodes:
            assert _handshake_failures(n.metrics_text(), "bad_capabilities") == 0
