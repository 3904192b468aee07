"""``snekbed ab --a snek --b pinecone --mixed --backend docker`` over 2 seeds, as a script outside the repo runs it:
snekbed's node against the Pinecone reference's (node/pinecone) under the same faults, and both together, on a
real engine; the Spark analysis writes its report and the steps whose verdicts differ are named. A small ring
and a short scenario (a root kill) keep the six runs to about two minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends.reference import reference_available
from orchestrator.model.topology import Topology
from tests.ci import REPO, need, need_module
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.spark, pytest.mark.slow]

KILL_ROOT = """\
name: kill-root-once
settle_s: 2
traffic: {rate_per_s: 4, pairs: 6, timeout_s: 2}
steps:
  - {action: wait, until: converged, within_s: 60}
  - {action: kill, target: root}
"""


def test_ab_snek_against_pinecone_with_a_mixed_arm(client: object, image: str, tmp_path: Path) -> None:
    need_module("pyspark", "snekbed ab analyses its runs with Spark")
    ok, why = reference_available()
    need(ok, f"the reference node cannot be built here: {why}")
    names = [f"n{i}" for i in range(1, 6)]
    links = [[a, b] for a, b in zip(names, names[1:] + names[:1], strict=True)]
    topo = tmp_path / "ring-5.yaml"
    topo.write_text(Topology.from_data({"name": "ring-5", "nodes": names, "links": links}).to_yaml())
    sc = tmp_path / "kill-root-once.yaml"
    sc.write_text(KILL_ROOT)
    out = tmp_path / "ab"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "ab", "--a", "snek", "--b", "pinecone", "--mixed",
             "--scenario", str(sc), "--topology", str(topo), "--seeds", "2", "--backend", "docker", "--image", image,
             "--out", str(out), "--master", "local[2]", "--json"],
            capture_output=True, text=True, cwd=REPO, timeout=1800,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({k: doc[k] for k in ("runs_failed", "step_divergence")}, indent=1))
        assert (doc["a"], doc["b"], doc["seeds"], doc["runs"], doc["arms"]) == ("snek", "pinecone", 2, 6,
                                                                               ["a", "b", "mixed"])  # fmt: skip
        assert (out / "analysis" / "report.html").is_file() and doc["metrics"], doc
        assert set(doc["mixed"]) == {"a", "b"}
        manifest = json.loads((out / "ab.json").read_text())
        assert manifest["step_divergence"] == doc["step_divergence"]
        for r in manifest["runs"]:
            run_dir = Path(r["run_dir"])
            meta = json.loads((run_dir / "meta.json").read_text())
            assert meta["ab"]["arm"] == r["arm"] and meta["backend"] == "docker", meta
            reference = {"a": set(), "b": set(names), "mixed": set(names[1::2])}[r["arm"]]
            for name in names:  # which implementation each node ran, from its own node_started
                started = [json.loads(x) for x in (run_dir / "events" / f"{name}.jsonl").read_text().splitlines()
                           if '"node_started"' in x]  # fmt: skip
                assert started, (r["arm"], name)
                assert started[0]["version"].startswith("pinecone-") == (name in reference), (r["arm"], name, started)
    finally:
        runs = out / "runs"
        ids = [json.loads((p / "meta.json").read_text())["run_id"] for p in runs.glob("*/") if (p / "meta.json").is_file()]
        left = "; ".join(filter(None, (left_behind(client, run_id) for run_id in ids)))
    assert not left, left
