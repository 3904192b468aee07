"""In-process chaos has the progress line too (orchestrator.sessions.progress): on stderr, never in ``--json``,
saying which step the run is past; ``--quiet`` turns it off and the document is the same."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.ci import REPO

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "orchestrator.cli", "chaos", "root-kill-x3", "--topology",
           str(MESH12), "--seed", "1", "--json", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=True)


def test_in_process_chaos_reports_progress_on_stderr_and_the_document_is_unchanged() -> None:
    loud = _chaos("--progress-every", "0.05")
    out = json.loads(loud.stdout)
    lines = [ln for ln in loud.stderr.splitlines() if "protocol time" in ln]
    periodic = [ln for ln in lines if not ln.startswith("done after")]
    assert periodic, loud.stderr  # the run works for a second or two (three root kills on 12 nodes): every 0.05 s
    assert lines[-1].startswith("done after"), loud.stderr
    assert any("past step #" in ln for ln in periodic) or all("starting" in ln for ln in periodic), loud.stderr
    for ln in periodic:
        assert "frames" in ln and "queued" in ln and "RSS" in ln, ln
        assert "converged" not in ln  # a chaos run's steps judge convergence; the line does not guess

    quiet = _chaos("--quiet")
    assert "protocol time" not in quiet.stderr
    q = json.loads(quiet.stdout)
    assert q["trace_sha256"] == out["trace_sha256"] and q["verdict"] == out["verdict"]
    assert [s["verdict"] for s in q["steps"]] == [s["verdict"] for s in out["steps"]]
