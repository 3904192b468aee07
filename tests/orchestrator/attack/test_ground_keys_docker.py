"""A ground key on Docker (docs/attacks.md, "How a strategy is configured"): ``snekbed chaos`` on ring-8 joins a node
with ``key: {above_all: true}``; its container was created with the key ground before the run, the join takes it,
and every node names it as root (the checker's invariants after the join, and each node's own event log until
the run goes down); it did not run before the ring had converged without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci import REPO
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RING8 = REPO / "compose" / "topologies" / "ring-8.yaml"

SCENARIO = """\
name: ground-root-docker
settle_s: 2
steps:
  - {action: wait, until: converged, within_s: 60}
  - {action: join, node: usurper, peers: [n01, n05], class: lan, key: {above_all: true}}
"""


def test_a_node_joined_with_a_key_above_all_becomes_every_nodes_root_on_docker(client: object, image: str,
                                                                               tmp_path: Path) -> None:
    sc = tmp_path / "ground.yaml"
    sc.write_text(SCENARIO)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", str(sc), "--topology", str(RING8),
                           "--backend", "docker", "--image", image, "--runs-dir", str(tmp_path / "runs"), "--seed",
                           "4", "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
        assert out["verdict"] == "pass" and [s["action"] for s in out["steps"]] == ["wait", "join"], out["steps"]
        joined = out["steps"][1]
        assert all(v["ok"] for v in joined["invariants"].values()), joined
        assert joined["invariants"]["root_is_highest_key"]["ok"] and joined["live_nodes"] == 9, joined
        run_dir = Path(out["run_dir"])
        actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
        (join,) = [a for a in actions if a["action"] == "join"]
        key = join["detail"]["key"]
        assert join["target"] == "usurper" and join["detail"]["key_rule"] == "above all", join
        keys = json.loads((run_dir / "meta.json").read_text())["nodes"]
        assert keys["usurper"] == key and all(k < key for n, k in keys.items() if n != "usurper"), keys
        # the usurper was not started before the ring converged without it (Docker created it, never started it)
        up_converged = next(a["wall_ts"] for a in actions if a["action"] == "converged")
        first = json.loads((run_dir / "events" / "usurper.jsonl").read_text().splitlines()[0])
        assert first["wall_ts"] > up_converged, (first, up_converged)
        (down,) = [a["wall_ts"] for a in actions if a["action"] == "down"]  # the nodes stop after it, one by one
        for n in (f"n0{i}" for i in range(1, 9)):  # each ring node's last root while the run ran: the usurper's key
            roots = [e["root"] for e in map(json.loads, (run_dir / "events" / f"{n}.jsonl").read_text().splitlines())
                     if e.get("event") == "root_changed" and e["wall_ts"] < down]  # fmt: skip
            assert roots and roots[-1] == key, (n, roots[-3:])
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left + "\n" + done.stderr[-3000:]
