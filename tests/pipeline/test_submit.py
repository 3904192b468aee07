"""The cluster path: pyspark's own `spark-submit` running pipeline/submit.py with the code zip.

The zip is built with pipeline/package.py; spark-submit runs from a temporary
directory outside the repository, without PYTHONPATH, so the driver can only
find the ``pipeline`` package through ``--py-files`` (submit.py reports where
it loaded it from, and the test checks that it is the zip). The result must
equal what `snekbed analyze` gives on the same runs: every table, row for row,
and the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, need_module
from tests.pipeline.test_analyze import (
    PLOTS,
    STAGES,
    normalized_rows,
    read_rows,
    shared_cli_analysis,
    shared_sim_runs,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JIT = "-XX:-DontCompileHugeMethods"


def spark_submit() -> Path:
    pyspark = need_module("pyspark", "pyspark is needed for spark-submit (pip install -e .[spark])")
    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    assert path.is_file(), f"pyspark ships no spark-submit at {path}"
    return path


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out, proc = shared_cli_analysis(tmp_path_factory)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def code_zip(tmp_path_factory) -> Path:
    from pipeline.package import build_zip

    return build_zip(tmp_path_factory.mktemp("dist") / "snekbed-pipeline.zip")


@pytest.fixture(scope="module")
def submitted(tmp_path_factory, code_zip):
    """spark-submit --master local[2] --py-files ZIP pipeline/submit.py RUN0 RUN1 --out OUT, outside the repo."""
    runs = shared_sim_runs(tmp_path_factory)
    work = tmp_path_factory.mktemp("submit-cwd")
    out = tmp_path_factory.mktemp("submit") / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = sys.executable  # the venv's Python, for the driver (and any Python worker)
    cmd = [str(spark_submit()), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--driver-java-options", JIT, "--conf", f"spark.executor.extraJavaOptions={JIT}",
           "--py-files", str(code_zip), str(REPO / "pipeline" / "submit.py"), *map(str, runs), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return out, proc, runs


def test_the_zip_holds_the_whole_package(code_zip):
    names = set(zipfile.ZipFile(code_zip).namelist())
    expected = {str(p.relative_to(REPO)) for package in ("contract", "pipeline") for p in (REPO / package).rglob("*.py")}
    assert names == expected
    assert {"pipeline/__init__.py", "pipeline/analysis.py", "pipeline/jobs/__init__.py",
            "pipeline/jobs/convergence.py"} <= names


def test_the_driver_runs_the_code_from_the_zip(submitted, code_zip):
    _, proc, _ = submitted
    # spark-submit sends the Python driver's stderr to its stdout
    origin = [line for line in proc.stdout.splitlines() if line.startswith("code: pipeline from ")]
    assert origin == [f"code: pipeline from {code_zip}"], proc.stdout[:2000]
    assert "SparkUI" not in proc.stderr  # --conf spark.ui.enabled=false is honoured


def test_submit_prints_the_result_json_last(submitted, cli_run):
    out, proc, runs = submitted
    _, cli_doc = cli_run
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["out"] == str(out)
    assert sorted(doc["runs"]) == sorted(cli_doc["runs"])
    assert (doc["events"], doc["quarantined"], doc["reconciliation_ok"]) == (cli_doc["events"], 0, True)
    assert set(doc["stage_s"]) == set(STAGES)
    assert set(doc["tables"]) == set(cli_doc["tables"])
    for stage in ("ingest:", "reconcile:", "analyze:", "report:"):
        assert stage in proc.stdout


def test_submit_writes_the_same_tables_as_analyze(submitted, cli_run):
    out, _, _ = submitted
    cli_out, cli_doc = cli_run
    for name in cli_doc["tables"]:
        mine, theirs = normalized_rows(out / "tables" / name), normalized_rows(cli_out / "tables" / name)
        assert mine == theirs, f"table {name}: {len(mine)} rows via spark-submit, {len(theirs)} via snekbed analyze"
    conv = read_rows(out / "tables" / "convergence")
    assert len(conv) == 2 * len(cli_doc["runs"]) and all(r["tree_converged_s"] is not None for r in conv)


def test_submit_writes_the_same_report_as_analyze(submitted, cli_run):
    out, _, _ = submitted
    cli_out, _ = cli_run
    for name in ("report.md", "report.html", *PLOTS):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "report.md").read_text() == (cli_out / "report.md").read_text()
    # Spark may sum a float column in another order on another run: the last digit of a double can differ
    assert _rounded(json.loads((out / "plots.json").read_text())) == _rounded(json.loads((cli_out / "plots.json")
                                                                                       .read_text()))  # fmt: skip


def _rounded(obj):
    """``obj`` with every float rounded to 9 significant digits (the report prints far fewer)."""
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj
