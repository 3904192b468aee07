"""``snekbed ab`` end to end, as a script outside the repo runs it: both arms over six seeds in process, recorded,
analysed with Spark, and the JSON contract (per metric ``a``, ``b``, ``diff``, ``ci_low``, ``ci_high``,
``significant``). Arm b bootstraps every 8 s instead of 5 s: it must send less control traffic on every seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci import REPO, need_module

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_ab_runs_both_arms_and_reports_paired_differences(tmp_path: Path) -> None:
    need_module("pyspark", "snekbed ab analyses its runs with Spark")
    out = tmp_path / "ab"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "ab", "--a", "snek", "--b", "snek,bootstrap_interval=8",
         "--scenario", "demo", "--topology", str(REPO / "compose" / "topologies" / "line-5.yaml"), "--seeds", "6",
         "--alpha", "0.1", "--out", str(out), "--master", "local[2]", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert (doc["a"], doc["b"], doc["seeds"], doc["runs"], doc["backend"]) == (
        "snek", "snek,bootstrap_interval=8", 6, 12, "inproc")
    for name, m in doc["metrics"].items():
        assert {"a", "b", "diff", "ci_low", "ci_high", "significant"} <= set(m), name
        assert set(m["a"]) == {"median", "p25", "p75"}, name
    ctl = doc["metrics"]["control_bytes_per_node_s"]
    assert ctl["n_pairs"] == 6 and ctl["diff"] < 0 and ctl["ci_high"] < 0, ctl
    assert ctl["significant"] is True and ctl["better"] == "b", ctl
    assert doc["metrics"]["start_tree_s"]["n_pairs"] == 6
    chk = doc["checker"]  # the chaos checker's live view, the same statistics
    assert chk["n_pairs"] >= 1 and {"a", "b", "diff", "ci_low", "ci_high", "significant"} <= set(chk), chk
    # every run is a normal run directory that says which arm it was
    manifest = json.loads((out / "ab.json").read_text())
    assert [(r["seed"], r["arm"]) for r in manifest["runs"]] == [(s, arm) for s in range(6) for arm in "ab"]
    for r in manifest["runs"]:
        meta = json.loads((Path(r["run_dir"]) / "meta.json").read_text())
        assert meta["ab"] == {"experiment": doc["experiment"], "arm": r["arm"], "seed": r["seed"], "a": "snek",
                              "b": "snek,bootstrap_interval=8"}  # fmt: skip
        assert meta["variant"] == r["spec"] and meta["seed"] == r["seed"]
    # the analysis (its tables, report and ab.json) states its intervals at the level asked for, as --json does
    analysed = json.loads((out / "analysis" / "ab.json").read_text())[doc["experiment"]]
    assert analysed["confidence"] == 0.9 and analysed["metrics"] == doc["metrics"] and doc["alpha"] == 0.1
    assert "A/B" in (out / "analysis" / "report.md").read_text()


def test_ab_names_a_bad_spec() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "ab", "--a", "snek", "--b", "snek,colour=red",
                           "--scenario", "demo"], capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "unknown knob 'colour'" in done.stderr, done.stderr


SLOW_START = """\
name: slow-start
description: the network must converge within 12 s of its start; then the root is killed
settle_s: 1
traffic: {rate_per_s: 2, pairs: 4, timeout_s: 2}
steps:
  - {action: wait, until: converged, within_s: 12}
  - {action: kill, target: root}
  - {action: wait, s: 1}
"""


def test_an_arm_that_never_converges_in_some_seeds_is_counted_not_dropped(tmp_path: Path) -> None:
    """Arm b bootstraps every 30 s: in some seeds its snake is not ordered 12 s after the start (the first step
    fails, and the root kill opens the next episode), in others it is. Those seeds' start convergence is censored
    in arm b, and counted: every seed is a pair of start_snake_s. With ``--mixed`` a third arm runs both specs
    together, and the steps whose verdicts differ between the arms are named."""
    need_module("pyspark", "snekbed ab analyses its runs with Spark")
    scenario = tmp_path / "slow-start.yaml"
    scenario.write_text(SLOW_START)
    out = tmp_path / "ab"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "ab", "--a", "snek", "--b", "snek,bootstrap_interval=30",
         "--scenario", str(scenario), "--topology", str(REPO / "compose" / "topologies" / "line-5.yaml"),
         "--seeds", "6", "--out", str(out), "--master", "local[2]", "--mixed", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((out / "ab.json").read_text())
    assert manifest["arms"] == doc["arms"] == ["a", "b", "mixed"] and doc["runs"] == 18
    assert set(doc["mixed"]) == {"a", "b"} and "start_snake_s" in doc["mixed"]["a"], doc["mixed"]
    late = sorted(r["seed"] for r in manifest["runs"] if r["arm"] == "b" and r["steps"][0]["verdict"] == "fail")
    assert late and len(late) < 6, "the plant: arm b misses the start bound in some seeds, not all"
    assert all(r["steps"][0]["verdict"] == "pass" for r in manifest["runs"] if r["arm"] == "a")
    assert {f"b-s{s}" for s in late} <= set(doc["runs_failed"])
    first = {d["seed"]: d["verdicts"] for d in doc["step_divergence"] if d["index"] == 0}
    assert set(late) <= set(first) and all(first[s]["a"] == "pass" and first[s]["b"] == "fail" for s in late), first
    mixed_first = {r["seed"]: r["steps"][0]["verdict"] for r in manifest["runs"] if r["arm"] == "mixed"}
    assert set(first) == set(late) | {s for s, v in mixed_first.items() if v != "pass"}, (first, mixed_first)
    m = doc["metrics"]["start_snake_s"]
    assert m["n_pairs"] == 6 and m["n_dropped"] == 0, m  # before: 6 - len(late) pairs
    assert m["censored"] == {"a": [], "b": late} and m["n_censored"] == len(late), m
    for seed, a, b in m["pairs"]:
        if seed in late:  # b counts as the time it was watched (about 12 s), more than a took
            assert 12.0 <= b < 20.0 and a < b, (seed, a, b)
    assert m["diff"] > 0
    # six pairs: said before the runs, and kept in the JSON
    assert any("only when every seed moves the same way" in w for w in doc["warnings"]), doc["warnings"]
    assert doc["alpha"] == 0.05 and manifest["warnings"] == doc["warnings"][: len(manifest["warnings"])]
    assert "warning: 6 seeds give 6 pairs" in done.stderr
    md = (out / "analysis" / "report.md").read_text()
    row = [line for line in md.splitlines() if line.startswith("| start_snake_s |")][0]  # a vs b comes first
    assert f"| 6 | {len(late)} (b: {', '.join(map(str, late))}) | 0 |" in row, row
