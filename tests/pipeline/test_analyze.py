"""`snekbed analyze` as users run it: a real subprocess on real run directories.

Two runs of the in-process backend (`snekbed sim sim.txt --kill-root --record`,
seeds 0 and 1) are analyzed once with `--master local[2] --out OUT --json`;
the tests then check the exit status, the one JSON object on stdout, the
progress on stderr and the files under OUT. Bad input (not a run directory,
a run missing a file) must fail with one error line naming the path and what is
missing; a malformed event line must be quarantined, named by file and line,
and not fail the analysis.

The helpers at the top (``shared_sim_runs``, ``shared_cli_analysis``) are also
used by test_submit.py: their results are kept under the session's base
temporary directory, so the runs are recorded and analyzed once per session.
(Not ``test_cli.py``: tests/orchestrator has one, and test modules are imported
by basename.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TOPOLOGIES, java_available, need

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SIM_TOPOLOGY = "sim.txt"
SIM_SEEDS = (0, 1)
STAGES = ("ingest", "reconcile", "analyze", "report")
#: What AnalysisResult.to_json promises, plus the wall time the CLI adds.
JSON_KEYS = {"out", "runs", "events", "quarantined", "reconciliation_ok", "tables", "report", "stage_s", "wall_s"}
PLOTS = ("convergence_cdf.png", "stretch_hist.png", "delivery_over_time.png", "overhead_by_class.png")
ANALYZE_TIMEOUT_S = 600


# --------------------------------------------------------------------------- helpers (shared with test_submit.py)


def analyze_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "analyze", *map(str, args)]


def run_analyze(*args: str | Path) -> subprocess.CompletedProcess:
    """`snekbed analyze ARGS` from the repository root, output captured as text."""
    return subprocess.run(analyze_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=ANALYZE_TIMEOUT_S)


def _shared_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.getbasetemp() / "cli-shared"
    root.mkdir(exist_ok=True)
    return root


def shared_sim_runs(tmp_path_factory) -> list[Path]:
    """The two recorded sim runs (seeds 0 and 1), made once per test session."""
    need(java_available(), "Java is needed for the Spark tests (install a JRE 17+)")
    need(TOPOLOGIES.is_dir(), f"pinecone topologies not found at {TOPOLOGIES}")
    root = _shared_root(tmp_path_factory)
    runs = []
    for seed in SIM_SEEDS:
        out = root / f"sim-seed{seed}"
        done = root / f"sim-seed{seed}.done"
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "orchestrator.cli", "sim", str(TOPOLOGIES / SIM_TOPOLOGY), "--kill-root",
                   "--record", str(out), "--seed", str(seed), "--pairs", "40"]
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert (out / "meta.json").is_file(), proc.stderr[-2000:]
            done.touch()
        runs.append(out)
    return runs


def shared_cli_analysis(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`snekbed analyze RUN0 RUN1 --master local[2] --out OUT --json`, run once per session."""
    runs = shared_sim_runs(tmp_path_factory)
    root = _shared_root(tmp_path_factory)
    out, saved = root / "cli-out", root / "cli-proc.json"
    if not saved.exists():
        proc = run_analyze(*runs, "--master", "local[2]", "--out", out, "--json")
        saved.write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}))
    doc = json.loads(saved.read_text())
    return out, subprocess.CompletedProcess(analyze_cmd(), doc["returncode"], doc["stdout"], doc["stderr"])


def run_id(run: Path) -> str:
    return json.loads((run / "meta.json").read_text())["run_id"]


def line_count(path: Path) -> int:
    with open(path, "rb") as fh:
        return len(fh.read().splitlines())


def read_rows(table: Path) -> list[dict]:
    """All rows of a Parquet table directory written by the pipeline (partition columns included); a map column's
    value is a dict (a map has no order: Spark's writer keeps its hash order, the driver's the one it was given)."""
    import pyarrow.dataset as ds

    if not any(table.rglob("*.parquet")):
        return []
    return ds.dataset(str(table), format="parquet", partitioning="hive").to_table().to_pylist(maps_as_pydicts="strict")


def _norm(value, digits: int = 9):
    if isinstance(value, float):
        return "nan" if value != value else round(value, digits)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v, digits)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v, digits) for v in value)
    return value


def normalized_rows(table: Path) -> list[tuple]:
    """The table's rows as a sorted list of hashable tuples (columns by name, floats to 9 decimals)."""
    return sorted((_norm(row) for row in read_rows(table)), key=repr)


def stderr_error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory) -> list[Path]:
    return shared_sim_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def cli_analysis(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    out, proc = shared_cli_analysis(tmp_path_factory)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, json.loads(proc.stdout)


# --------------------------------------------------------------------------- a good analysis


def test_stdout_is_exactly_one_json_object(cli_analysis):
    _, proc, doc = cli_analysis
    assert proc.stdout.strip().count("\n") == 0, proc.stdout[:2000]
    assert isinstance(doc, dict)
    assert JSON_KEYS <= set(doc), sorted(JSON_KEYS - set(doc))


def test_json_counts_match_the_runs(sim_runs, cli_analysis):
    out, _, doc = cli_analysis
    assert doc["out"] == str(out)
    assert sorted(doc["runs"]) == sorted(run_id(r) for r in sim_runs)
    # the recorder writes the contract exactly: every event line is parsed, nothing is quarantined
    assert doc["events"] == sum(line_count(f) for r in sim_runs for f in (r / "events").glob("*.jsonl"))
    assert doc["events"] > 1000
    assert doc["quarantined"] == 0
    assert doc["reconciliation_ok"] is True


def test_json_stage_timings(cli_analysis):
    _, _, doc = cli_analysis
    assert set(doc["stage_s"]) == set(STAGES)
    assert all(isinstance(v, (int, float)) and v >= 0 for v in doc["stage_s"].values())
    assert doc["wall_s"] >= sum(doc["stage_s"].values())


def test_report_and_plots_are_written(cli_analysis):
    out, _, doc = cli_analysis
    expected = {out / name for name in ("report.md", "report.html", "plots.json", *PLOTS)}
    assert {Path(p) for p in doc["report"]} == expected
    for path in expected:
        assert path.is_file() and path.stat().st_size > 0, path
    for png in PLOTS:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for rid in doc["runs"]:
        assert rid in md and rid in html
    for section in ("## Reconciliation", "## Convergence", "## Delivery per episode", "## Run summary"):
        assert section in md
    assert all(f'src="{png}"' in html for png in PLOTS) and all(f"]({png})" in md for png in PLOTS)


def test_tables_are_parquet_under_out(sim_runs, cli_analysis):
    out, _, doc = cli_analysis
    tables = out / "tables"
    assert {"events", "actions", "pings", "quarantine", "reconciliation", "convergence", "delivery",
            "run_summary"} <= set(doc["tables"])
    for name, path in doc["tables"].items():
        assert Path(path) == tables / name and Path(path).is_dir(), name
        if name != "quarantine":  # empty here: nothing was quarantined
            assert any(Path(path).rglob("*.parquet")), name
    assert sorted(p.name for p in tables.iterdir() if p.is_dir()) == sorted(doc["tables"])
    events = read_rows(tables / "events")
    assert len(events) == doc["events"]
    assert {e["run_id"] for e in events} == set(doc["runs"])
    conv = read_rows(tables / "convergence")
    assert {(r["run_id"], r["episode"], r["action"]) for r in conv} == {
        (rid, ep, action) for rid in doc["runs"] for ep, action in ((0, "start"), (1, "kill_root"))}
    recon = read_rows(tables / "reconciliation")
    files = {str(f.resolve()) for r in sim_runs
             for f in [*(r / "events").glob("*.jsonl"), r / "actions.jsonl", r / "pings.jsonl"]}
    assert {r["file"] for r in recon} == files and all(r["ok"] for r in recon)


def test_runs_without_ab_meta_have_no_ab_output(cli_analysis):
    out, proc, doc = cli_analysis
    assert "ab" not in doc and not {"ab_runs", "ab"} & set(doc["tables"])
    assert not (out / "ab.json").exists() and not list(out.glob("ab_*.png"))
    assert "A/B" not in (out / "report.md").read_text() and "A/B" not in proc.stderr


def test_progress_goes_to_stderr(cli_analysis):
    _, proc, _ = cli_analysis
    for stage in ("discover:", "ingest:", "reconcile:", "analyze:", "report:"):
        assert stage in proc.stderr, stage
        assert stage not in proc.stdout, stage


# --------------------------------------------------------------------------- bad input


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path):
    missing = tmp_path / "no-such-run"
    proc = run_analyze(missing, "--out", tmp_path / "out", "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert str(missing) in proc.stderr and "does not exist" in proc.stderr


def test_a_directory_that_is_not_a_run_fails_with_one_line(tmp_path):
    need(java_available(), "Java is needed for the Spark tests (install a JRE 17+)")
    not_a_run = tmp_path / "just-notes"
    not_a_run.mkdir()
    (not_a_run / "notes.txt").write_text("not a run\n")
    proc = run_analyze(not_a_run, "--master", "local[2]", "--out", tmp_path / "out", "--json")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    errors = stderr_error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr[-2000:]
    assert str(not_a_run) in errors[0] and "meta.json" in errors[0] and "not a run directory" in errors[0]


def test_a_run_missing_a_file_fails_naming_it(sim_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sim_runs[0], run)
    (run / "pings.jsonl").unlink()
    proc = run_analyze(run, "--master", "local[2]", "--out", tmp_path / "out", "--json")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    errors = stderr_error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr[-2000:]
    assert str(run / "pings.jsonl") in errors[0] and "missing" in errors[0]


def test_a_malformed_line_is_quarantined_not_fatal(sim_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sim_runs[0], run)
    victim = sorted((run / "events").glob("*.jsonl"))[0]
    good_lines = line_count(victim)
    with open(victim, "ab") as fh:
        fh.write(b'{"not json\n')
    out = tmp_path / "out"
    proc = run_analyze(run, "--master", "local[2]", "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["quarantined"] == 1
    assert doc["reconciliation_ok"] is True
    assert doc["events"] == sum(line_count(f) for f in (run / "events").glob("*.jsonl")) - 1

    [bad] = read_rows(out / "tables" / "quarantine")
    assert bad["source"] == "events" and bad["run_id"] == run_id(run)
    assert bad["file"] == str(victim.resolve()) and bad["line_no"] == good_lines + 1
    assert bad["line"] == '{"not json' and bad["reason"]
    recon = {r["file"]: r for r in read_rows(out / "tables" / "reconciliation")}
    assert (recon[str(victim.resolve())]["lines"], recon[str(victim.resolve())]["parsed"],
            recon[str(victim.resolve())]["quarantined"]) == (good_lines + 1, good_lines, 1)

    md = (out / "report.md").read_text()
    examples = md.split("## Quarantine examples", 1)[1].split("## ", 1)[0]
    assert f"| {victim.resolve()} | {good_lines + 1} | {bad['reason']} |" in examples
