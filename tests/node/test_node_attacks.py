"""Adversary strategies on a node started by hand: ``--adversary STRATEGY:...`` and ``POST /adversary``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from nodeproc import Cluster, wait_until

from node.cli import node as node_command
from node.config import ConfigError, parse_adversary, parse_attack


def test_the_flag_takes_a_strategy_or_drop_rates() -> None:
    assert parse_attack("greyhole:forward=0.3") == ("greyhole", {"forward": "0.3"})
    assert parse_attack("forge:rate_per_s=2,kinds=bootstrap+coords") == (
        "forge", {"rate_per_s": "2", "kinds": "bootstrap+coords"})
    assert parse_attack("none") == ("none", {})
    assert parse_attack("bootstrap=100") is None and parse_attack("drop:traffic=50") is None
    assert parse_adversary("drop:traffic=50") == ({"traffic": 50.0}, None)
    assert parse_adversary("traffic=50") == ({"traffic": 50.0}, None)


@pytest.mark.parametrize(("spec", "words"), [
    ("greyhole:forward=2", "forward: a fraction"), ("sybil", "victim"), ("sulk", "strategy: one of"),
    ("root_takeover:mode=sulk", "mode: one of"), ("forge:kinds=magic", "kinds"), ("replay:speed=1", "speed"),
])
def test_bad_strategies_are_refused_with_exit_2(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_attack(spec)
    result = CliRunner().invoke(node_command, ["--adversary", spec, "--admin", "off", "--metrics", "off"])
    assert result.exit_code == 2 and words in result.output and "--adversary" in result.output


@pytest.mark.slow
def test_admin_api_sets_and_lifts_a_strategy(tmp_path: Path) -> None:
    with Cluster(tmp_path, tag="attackapi") as c:
        a = c.start("a")
        b = c.start("b", "--peer", a.uri("remote"), "--adversary", "greyhole:forward=1")
        wait_until(lambda: len(b.state()["peers"]) == 1, 20, what="b peered")
        r = b.post("/adversary", {"strategy": "forge", "rate_per_s": 5, "kinds": ["bootstrap"]})
        assert r.status_code == 200 and r.json()["strategy"] == "forge", r.text

        def rejected() -> bool:
            return any(ln.startswith("snek_bootstraps_rejected_total") and 'reason="bad_signature"' in ln
                       and not ln.endswith(" 0.0") for ln in a.metrics_text().splitlines())

        wait_until(rejected, 20, what="a rejected and counted b's forged bootstraps")
        lifted = b.post("/adversary", {"strategy": "none"}).json()  # honest again: and what the forger did
        assert lifted["strategy"] == "none" and lifted["replaced"]["strategy"] == "forge", lifted
        assert lifted["replaced"]["made"] >= 0 and lifted["replaced"]["swallowed"] == 0, lifted
        for body, words in (({"strategy": "greyhole", "forward": 3}, "forward"),
                            ({"strategy": "sybil", "params": {"victim": "zz"}}, "victim"),
                            ({"strategy": "greyhole", "drop": {"all": 1}}, "drop"),
                            ({"peer": None}, "give 'drop'")):  # fmt: skip
            r = b.post("/adversary", body)
            assert r.status_code == 422 and words in r.json()["error"], r.text
