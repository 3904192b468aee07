"""The pipeline on a real Spark standalone cluster: a master and a worker started with pyspark's bundled
``spark-class`` on 127.0.0.1, then ``snekbed analyze --master spark://127.0.0.1:PORT`` on a recorded chaos run
(the demo scenario, in process). Every table must equal local mode's, row for row, and the report too.

The master and worker are this test's own processes (their own process group), removed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, java_available, need, need_module
from tests.pipeline.test_analyze import normalized_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> Path:
    pyspark = need_module("pyspark", "pyspark is needed for the Spark cluster test")
    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    assert path.is_file(), f"pyspark ships no spark-class at {path}"
    return path


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp / "worker"), SPARK_LOG_DIR=str(tmp / "logs"),
               PYSPARK_PYTHON=sys.executable)  # fmt: skip
    return env


def _start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A standalone master and one worker (2 cores, 2 GB) on 127.0.0.1; yields the master URL and the URL of
    its JSON status page."""
    need(java_available(), "Java is needed for the Spark cluster test (install a JRE 17+)")
    tmp = tmp_path_factory.mktemp("spark-cluster")
    env = _env(tmp)
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(_spark_class())
    master = _start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], tmp / "master.log", env)  # fmt: skip
    worker = None
    try:
        worker = _start([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                         "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir",
                         str(tmp / "worker")], tmp / "worker.log", env)  # fmt: skip
        deadline = time.monotonic() + 120
        while True:  # the master's JSON status page lists the worker once it has registered
            for proc, name in ((master, "master"), (worker, "worker")):
                if proc.poll() is not None:
                    raise AssertionError(f"the Spark {name} exited: {(tmp / f'{name}.log').read_text()[-3000:]}")
            try:
                status = httpx.get(f"http://127.0.0.1:{ui}/json/", timeout=5).json()
                if any(w.get("state") == "ALIVE" for w in status.get("workers", [])):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError("no worker registered with the master within 120 s: "
                                     + (tmp / "worker.log").read_text()[-3000:])  # fmt: skip
            time.sleep(1)
        yield url, f"http://127.0.0.1:{ui}/json/"
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scenario (root kill, partition, heal, background pings) on mesh-12, in process, recorded."""
    out = tmp_path_factory.mktemp("chaos-run") / "demo-mesh-12"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", "demo", "--topology", str(MESH),
                           "--record", str(out), "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["verdict"] == "pass", proc.stdout[-3000:]
    return out


def _analyze(run: Path, out: Path, master: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "analyze", str(run), "--out", str(out),
                           "--master", master, "--json"], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_analyze_on_a_standalone_cluster_writes_what_local_mode_writes(cluster: tuple[str, str], chaos_run: Path,
                                                                       tmp_path: Path) -> None:
    url, status = cluster
    env = _env(tmp_path)
    local = _analyze(chaos_run, tmp_path / "local", "local[2]", env)
    remote = _analyze(chaos_run, tmp_path / "cluster", url, env)
    # the analysis really ran on the cluster: the master lists it as a finished application
    apps = httpx.get(status, timeout=10).json()["completedapps"]
    assert [a["name"] for a in apps] == ["snekbed-analyze"], apps
    assert remote["events"] == local["events"] > 0 and remote["quarantined"] == local["quarantined"] == 0
    assert remote["reconciliation_ok"] and set(remote["tables"]) == set(local["tables"])
    for name in local["tables"]:
        mine, theirs = normalized_rows(tmp_path / "cluster" / "tables" / name), \
            normalized_rows(tmp_path / "local" / "tables" / name)
        assert mine == theirs, f"table {name}: {len(mine)} rows on the cluster, {len(theirs)} in local mode"
    conv = normalized_rows(tmp_path / "cluster" / "tables" / "convergence")
    assert len(conv) >= 4  # start, kill, partition, heal
    assert (tmp_path / "cluster" / "report.md").read_text() == (tmp_path / "local" / "report.md").read_text()
