"""A recorded chaos run through `snekbed analyze`: every fault is an episode with its re-convergence and its
delivery, and the delivery plot marks each fault."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, java_available, need
from tests.pipeline.test_analyze import read_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_analyze_turns_each_fault_into_an_episode_with_its_dip(tmp_path: Path) -> None:
    need(java_available(), "Java is needed for Spark")
    run = tmp_path / "run"
    chaos = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", "demo", "--topology",
                            str(REPO / "compose" / "topologies" / "mesh-12.yaml"), "--record", str(run), "--json"],
                           capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-2000:]
    out = tmp_path / "analysis"
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "analyze", str(run), "--out", str(out),
                           "--master", "local[2]", "--json"], capture_output=True, text=True, cwd=REPO,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["quarantined"] == 0
    conv = sorted(read_rows(out / "tables" / "convergence"), key=lambda r: r["episode"])
    assert [r["action"] for r in conv] == ["start", "kill_root", "partition", "heal"]
    assert all(r["tree_converged_s"] is not None and r["snake_converged_s"] is not None for r in conv), conv
    assert [r["components"] for r in conv] == [1, 1, 2, 1]
    delivery = {r["episode"]: r for r in read_rows(out / "tables" / "delivery_by_episode")}
    assert set(delivery) == {0, 1, 2, 3} and all(d["sent"] > 10 for d in delivery.values())
    # the partition cuts pairs apart: its episode delivers least; after the heal it is back up
    assert delivery[2]["delivery_ratio"] < min(delivery[1]["delivery_ratio"], delivery[3]["delivery_ratio"])
    marks = json.loads((out / "plots.json").read_text())["delivery_over_time.png"]["disruptions"]
    assert [m[1] for m in marks] == ["kill_root", "partition", "heal"]
    assert (out / "delivery_over_time.png").stat().st_size > 10_000
