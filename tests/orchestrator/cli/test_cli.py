"""The lazy command group: every command is listed, and a missing optional module never breaks --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import cli
from tests.conftest import REPO, TOPOLOGIES, java_available, need


def test_help_lists_every_contract_command() -> None:
    res = CliRunner().invoke(cli.main, ["--help"])
    assert res.exit_code == 0, res.output
    for name in ("sim", "node", "up", "status", "ping", "kill-root", "down", "compose", "netem", "links", "image", "analyze"):
        assert name in res.output


def test_unavailable_command_is_listed_and_explains_itself(monkeypatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "ghost", "no_such_module_for_snekbed:cmd")
    runner = CliRunner()
    res = runner.invoke(cli.main, ["--help"])
    assert res.exit_code == 0 and "ghost" in res.output
    res = runner.invoke(cli.main, ["ghost", "--anything"])
    assert res.exit_code == 2  # this install cannot serve it: refused (contract.exit_codes)
    assert "needs the 'no_such_module_for_snekbed' module" in res.output


@pytest.mark.spark
@pytest.mark.slow
def test_demo_in_process_records_analyzes_and_says_where_the_report_is(tmp_path):
    """The README's main job, on the in-process backend and a small topology: the run is recorded,
    analyzed with Spark, and the last lines name the report, which exists and covers the root kill."""
    need(java_available(), "Java is needed for the demo's Spark analysis")
    need(TOPOLOGIES.is_dir(), f"pinecone topologies not found at {TOPOLOGIES}")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo", "--backend", "inproc", "--topology",
                           str(TOPOLOGIES / "sim.txt"), "--runs-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "in-process backend (asked for inproc)" in done.stderr
    lines = done.stdout.strip().splitlines()
    run_dir = Path(next(x for x in lines if x.startswith("run directory: ")).split(": ", 1)[1])
    report = Path(next(x for x in lines if x.startswith("report: ")).split(": ", 1)[1])
    assert run_dir.parent == tmp_path and report == run_dir / "analysis" / "report.html"
    assert report.is_file() and report.with_suffix(".md").is_file()
    md = report.with_suffix(".md").read_text()
    assert run_dir.name in md and "kill_root" in md
    # the demo ends with where its time went, the analysis's share included (Spark started during the run)
    tail = done.stdout[done.stdout.index("where the time went"):]
    for phase in ("first convergence", "faults and recoveries", "analysis: jobs and report", "Spark's JVM took"):
        assert phase in tail, tail
