"""``snekbed up --backend docker`` of a topology whose nodes move (docs/mobility.md, "On Docker"): five containers
replay an ns-2 trace on the wall clock, their radio peerings made and closed through the admin APIs, then stand
where they stopped and the network is judged on that graph; the same sequence of link changes as ``up --backend
inproc`` of the same topology; ``status`` and ``ping`` of the run afterwards judge the graph where the nodes stopped
(its radio links included); ``down`` leaves nothing labelled with the run. Real engine, real node image, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.docker_helpers import left_behind
from tests.orchestrator.trace_walk import trace_links, write_trace_walk

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)  # fmt: skip


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_up_on_docker_moves_the_nodes_and_judges_where_they_stopped(client: object, image: str,
                                                                     tmp_path: Path) -> None:
    topo = write_trace_walk(tmp_path)
    runs = str(tmp_path / "runs")
    done = _cli("up", str(topo), "--backend", "docker", "--image", image, "--runs-dir", runs, "--json")
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        out = _json(done)
        m = out["mobility"]
        assert (m["model"], m["link_ups"], m["link_downs"], m["moved_s"]) == ("trace", 7, 8, 24.0), m
        assert m["failed_changes"] == 0 and m["skipped_changes"] == 0, m
        assert m["effect_ms"]["changes"] == 15 and 0 < m["effect_ms"]["p50"] <= m["effect_ms"]["p99"], m["effect_ms"]
        assert m["start_ms"]["links"] == 4, m["start_ms"]
        # where they stopped (t = 24 s): a--b 8 m apart (Bluetooth and LAN), c--e 20.6 m (LAN), d alone
        assert m["radio_links_at_end"] == [["a", "b", "bluetooth"], ["a", "b", "lan"], ["c", "e", "lan"]], m
        assert m["before"]["converged"] is True  # five nodes alone, before any radio link
        assert out["converged"] is True and out["snake_converged_s"] is not None, out
        run = Path(out["run_dir"])
        meta = json.loads((run / "meta.json").read_text())
        assert meta["mobility"]["radio_links_at_end"] == m["radio_links_at_end"]
        assert meta["observer"]["movement"]["converged"] is True
        docker_links = trace_links(run, run.name)
        status = _json(_cli("status", "--run-id", run.name, "--runs-dir", runs, "--json"))
        assert status["tree"] and status["snake"] and not status["unreachable"], status
        roots = {row["name"]: row["root_name"] for row in status["nodes"]}
        assert roots["a"] == roots["b"] and roots["c"] == roots["e"] and roots["d"] == "d", roots
        for sender, target, classes in (("a", "b", ["bluetooth+lan"]), ("e", "c", ["lan"])):  # over the radio links
            pinged = _cli("ping", sender, target, "--run-id", run.name, "--runs-dir", runs, "--count", "5", "--json")
            lines = json.loads(pinged.stdout)["pings"]  # Bluetooth loses 2 % a way, the LAN 2 % at a--b, 8 % at c--e
            assert sum(x["received"] for x in lines) >= 1, pinged.stdout + pinged.stderr
            assert {(x["shortest_links"], tuple(x["link_classes"])) for x in lines} == {(1, tuple(classes))}, lines
            assert {x["hops"] for x in lines if x["received"]} == {2}, lines  # §8: a neighbour answers with 2
        lost = _cli("ping", "a", "d", "--run-id", run.name, "--runs-dir", runs, "--count", "1", "--timeout-s", "1")
        assert lost.returncode != 0 and "0/1 received" in lost.stdout, lost.stdout + lost.stderr
        down = _cli("down", "--run-id", run.name, "--runs-dir", runs)
        assert down.returncode == 0, down.stdout + down.stderr
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left + "\n" + done.stderr[-3000:]
    inproc = _json(_cli("up", str(topo), "--backend", "inproc", "--runs-dir", str(tmp_path / "inproc"), "--json"))
    assert trace_links(tmp_path / "inproc" / inproc["run_id"], inproc["run_id"]) == docker_links
