"""Confirmed faults on Docker: ring-8 through every kind of fault, each confirmed on the nodes and their links; a
backend planted (test-only, $SNEKBED_CHAOS_PLANT) to report a partition it never made comes out invalid, exit 3.
Real engine, real node image, run as the CLI. Nothing labelled with the run may be left afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.chaos.backend import PLANT_ENV
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
RING8 = REPO / "compose" / "topologies" / "ring-8.yaml"

EVERY_FAULT = """\
name: confirm-ring-8
settle_s: 2
traffic: null
steps:
  - {action: wait, until: converged, within_s: 180}
  - {action: partition, groups: [[n01, n02, n03, n04], [rest]]}
  - {action: heal}
  - {action: pause, target: n06, for_s: 10}
  - {action: kill, target: n03}
  - {action: restart, target: n03}
  - {action: link_change, link: [n07, n08], shaping: {delay_ms: 40}}
  - {action: adversary, target: n05, drop: {all: 100}, peer: n04, check: false}
  - {action: adversary, target: n02, drop: {all: 100}, check: false}
"""

CUT = """\
name: confirm-cut
settle_s: 2
traffic: null
steps:
  - {action: wait, until: converged, within_s: 180}
  - {action: partition, groups: [[n01, n02, n03, n04], [rest]]}
"""


def _chaos(scenario: Path, runs: Path, image: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", str(scenario), "--topology", str(RING8),
                           "--backend", "docker", "--image", image, "--runs-dir", str(runs), "--seed", "1", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=1500,
                          env={**os.environ, **(env or {})})  # fmt: skip


def _doc(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(done.stdout) if done.stdout.strip() else {}


def test_every_fault_is_confirmed_on_docker(client: object, image: str, tmp_path: Path) -> None:
    sc = tmp_path / "every.yaml"
    sc.write_text(EVERY_FAULT)
    done = _chaos(sc, tmp_path / "runs", image)
    out = _doc(done)
    try:
        assert out, done.stderr[-3000:]
        steps = out["steps"]
        for s in steps[1:]:
            c = s["confirmed"]
            print(s["index"], s["action"], s["verdict"], c)
            assert c["ok"] is True, s
        how = {s["action"]: s["confirmed"]["how"] for s in steps[1:]}
        assert "frame(s) of all from n04 it received" in steps[-2]["confirmed"]["how"]  # its flight recorder
        assert "dropped at both ends" in how["partition"] and "inside the sides still peered" in how["partition"]
        assert "a ping from" in how["pause"] and "went unanswered" in how["pause"]
        assert "the links check on the link: rtt pass" in how["link_change"]
        assert "dropped" in how["adversary"]
        assert 4.0 <= steps[1]["confirmed"]["latency_s"] <= 15.0  # noticed through the 5 s peer timeout
        assert out["invalid_steps"] == [] and done.returncode in (0, 1), done.stderr[-3000:]
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left


def test_a_partition_docker_silently_skips_is_invalid_with_exit_3(client: object, image: str, tmp_path: Path) -> None:
    sc = tmp_path / "cut.yaml"
    sc.write_text(CUT)
    done = _chaos(sc, tmp_path / "runs", image, env={PLANT_ENV: "ignore_partition"})
    out = _doc(done)
    try:
        assert done.returncode == 3, done.stdout[-4000:] + done.stderr[-3000:]
        step = out["steps"][1]
        assert out["verdict"] == "invalid" and out["invalid_steps"] == [1]
        assert step["verdict"] == "invalid" and step["confirmed"]["ok"] is False
        assert "cut link(s) still peered" in step["invalid"], step["invalid"]
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left
