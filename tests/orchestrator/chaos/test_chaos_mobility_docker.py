"""Nodes that move on Docker (docs/mobility.md, "On Docker"): five containers replay an ns-2 trace on the wall clock,
their radio peerings made and closed through the admin APIs as the radio graph says, with the checker running;
the LAN radio's loss over distance reshapes its peerings (``POST /peers/shape`` of that peering's port on both
ends); the same trace in process gives the same sequence of link changes. Once they stand still, faults meet their
radio links as in process (orchestrator.chaos.radio_faults): a killed node loses them and gets them back when it
restarts (dialled once: never redialled into its next life), a partition and a link_down cut them until healed,
a node paused past the peer timeout has them made again when it resumes. Real engine, real node image, run as the
CLI. Nothing labelled with the run may be left afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.scenario import parse_scenario_yaml
from orchestrator.model.topology_loaders import load_topology
from tests.orchestrator.docker_helpers import left_behind
from tests.orchestrator.trace_walk import trace_links, write_trace_walk

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]

SCENARIO = """\
name: trace-walk
settle_s: 2
traffic: {rate_per_s: 4, pairs: 10}
steps:
  - {action: wait, s: 26}
  - {action: check}
  - {action: kill, target: b}
  - {action: restart, target: b}
  - {action: partition, groups: [[a, c], [b, d, e]]}
  - {action: heal}
  - {action: pause, target: e, for_s: 7}
  - {action: link_down, link: [a, b]}
  - {action: link_up, link: [a, b]}
  - {action: check}
"""


def test_a_trace_replays_on_docker_as_in_process(client: object, image: str, tmp_path: Path) -> None:
    topo = write_trace_walk(tmp_path)
    sc = tmp_path / "walk.yaml"
    sc.write_text(SCENARIO)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", str(sc), "--topology", str(topo),
                           "--backend", "docker", "--image", image, "--runs-dir", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
        assert out["verdict"] == "pass" and out["backend"] == "docker", out
        m = out["mobility"]
        assert (m["model"], m["link_ups"], m["link_downs"], m["moved_s"]) == ("trace", 7, 8, 24.0)
        effect = m["effect_ms"]
        assert m["failed_changes"] == 0, m["failures"]
        # and the faults: kill b (a--b's two cut) and restart it (made again), partition a, c | b, d, e (a--b's two
        # and c--e cut) and heal (made again), e resumed (c--e closed and made again), link_down a--b (two cut) and
        # link_up: 7 + 8 + (2 + 2) + (3 + 3) + (1 + 1) + (2 + 2); the 4 links in range at the start apart
        assert effect["changes"] == 7 + 8 + 4 + 6 + 2 + 4, effect
        assert m["start_ms"]["links"] == 4 and 0 < m["start_ms"]["p50"] <= m["start_ms"]["max"], m["start_ms"]
        assert m["skipped_changes"] == 0 and m["held"] == 0, m
        faults = [s for s in out["steps"] if s["action"] not in ("wait", "check")]
        assert [s["action"] for s in faults] == ["kill", "restart", "partition", "heal", "pause", "link_down",
                                                 "link_up"]  # fmt: skip
        for s in faults:  # each judged, and confirmed on the nodes (a cut radio link unpeered at both ends, one
            assert s["confirmed"]["ok"] is True and s["verdict"] == "pass", s  # back peered again and carrying a ping)
        assert [s["verdict"] for s in out["steps"] if s["action"] == "check"] == ["pass"] * 2, out["steps"]
        assert faults[2]["confirmed"]["how"].startswith("partition: 2 cut link(s)"), faults[2]  # a--b, c--e
        assert 0 < effect["p50"] <= effect["p99"], effect  # measured (the 30-node figures: docs/mobility.md)
        for kind, parts in effect["stages"].items():  # each change's delay in parts, each part within the whole
            assert all(parts[f"{p}_{q}"] is not None and 0 <= parts[f"{p}_{q}"] <= effect[f"{kind}_p{q}"] + 0.2
                       for p in ("wait", "call", "back") for q in (50, 99)), (kind, effect)
        end = m["peered_at_end"]  # what the nodes list, read from their admin APIs, is what the radio graph says
        assert end["made"] == end["peered"] == m["radio_links"] == 3 and not end["missing"] and not end["extra"]
        # loss over distance: 58 reshapes of LAN peerings (as in process: 46 as the distance's whole percent
        # changes, 7 after ups not at 0 %; then 5 after the faults' ups of a--b and c--e: b's restart, the heal,
        # e's resume, the link_up), each done on both ends; at the end a--b are 8 m apart (10 % * (8 - 5) /
        # (25 - 5) = 1.5, 2 %) and c--e 20.6 m (7.8, 8 %): the loss both ends' shapers apply, as their /state lists
        # them (the LAN class loses nothing of its own)
        reshapes = m["reshapes"]
        assert (reshapes["asked"], reshapes["done"], reshapes["failed"], reshapes["skipped"]) == (58, 58, 0, 0), reshapes
        assert 0 < reshapes["p50_ms"] <= reshapes["p99_ms"], reshapes
        assert end["loss_pct"] == {"a--b lan": {"a": 2.0, "b": 2.0}, "c--e lan": {"c": 8.0, "e": 8.0}}, end
        assert "unapplied" not in m
        assert out["watch"]["readings"] >= 4 and out["watch"]["verdict"] == "pass"
        assert out["traffic"]["delivered"] > 0
        run = Path(out["run_dir"])
        docker_links = trace_links(run, run.name)
        meta = json.loads((run / "meta.json").read_text())
        assert meta["mobility"]["radios"]["bluetooth"]["range_m"] == 10.0
        assert meta["mobility"]["radio_links_at_end"] == [["a", "b", "bluetooth"], ["a", "b", "lan"], ["c", "e", "lan"]]
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left + "\n" + done.stderr[-3000:]
    topology = load_topology(topo)
    inproc = tmp_path / "inproc"
    execute(parse_scenario_yaml(SCENARIO, topology=topology), topology, ChaosOptions(record=inproc))
    assert trace_links(inproc, json.loads((inproc / "meta.json").read_text())["run_id"]) == docker_links
