"""``snekbed analyze`` on a two-worker Spark standalone cluster (``snekbed spark up --workers 2``: a master and two
workers, each its own JVM with one core and 1 GB for executors, on 127.0.0.1) writes what local mode writes, table
for table, for a recorded chaos run (``demo-quick`` on ring-8, in process). The analysis must have run tasks on an
executor of each worker, so the check cannot pass on a local master by accident; ``snekbed spark down`` must leave
none of the cluster's processes running, and neither may an interrupted ``up``.
"""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline.standalone import ClusterRefused, group_members, start
from tests.conftest import REPO, java_available, need, need_module
from tests.pipeline.test_analyze import read_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RING = REPO / "compose" / "topologies" / "ring-8.yaml"


def _snekbed(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    need(java_available(), "Java is needed for the Spark cluster test (install a JRE 17+)")
    need_module("pyspark", "pyspark is needed for the Spark cluster test")
    state = tmp_path_factory.mktemp("spark-standalone")
    up = _snekbed("spark", "up", "--workers", "2", "--cores", "1", "--memory", "1g", "--port", "0",
                  "--webui-port", "0", "--state-dir", str(state), "--json")  # fmt: skip
    doc = json.loads(up.stdout) if up.returncode == 0 else None
    try:
        assert doc is not None, f"snekbed spark up exited {up.returncode}: {up.stderr[-3000:]}"
        yield doc
    finally:
        down = _snekbed("spark", "down", "--state-dir", str(state))
        assert down.returncode == 0, down.stderr[-2000:]
        if doc is not None:  # every daemon's process group is gone, executors and their Python workers with it
            assert {name: group_members(pid) for name, pid in doc["pids"].items() if group_members(pid)} == {}
        assert not (state / "cluster.json").exists()


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo-quick (root kill, partition, heal, background pings) on ring-8, in process, recorded."""
    out = tmp_path_factory.mktemp("chaos-run") / "demo-quick-ring-8"
    proc = _snekbed("chaos", "demo-quick", "--topology", str(RING), "--backend", "inproc", "--record", str(out),
                    "--json")  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["verdict"] == "pass", proc.stdout[-2000:]
    return out


def _analyze(run: Path, out: Path, master: str) -> dict:
    proc = _snekbed("analyze", str(run), "--out", str(out), "--master", master, "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _key(value):
    """A sort key that does not split rows over float noise: floats rounded to 6 decimals."""
    if isinstance(value, float):
        return ("nan",) if value != value else round(value, 6)
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    return value


def _same(a, b) -> bool:
    """Equal, floats within 1e-9 (NaN equals NaN), maps regardless of order."""
    if isinstance(a, float) and isinstance(b, float):
        return (a != a and b != b) or math.isclose(a, b, rel_tol=0.0, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _rows(table: Path) -> list[dict]:
    return sorted(read_rows(table), key=lambda row: repr(_key(row)))


def test_two_workers_analyze_a_chaos_run_as_local_mode_does(cluster: dict, chaos_run: Path, tmp_path: Path) -> None:
    local = _analyze(chaos_run, tmp_path / "local", "local[2]")
    remote = _analyze(chaos_run, tmp_path / "cluster", cluster["master_url"])
    print(f"\nwall: local[2] {local['wall_s']} s, two workers {remote['wall_s']} s")

    # it ran on the cluster, with one executor on each worker, and each of them ran tasks
    status = httpx.get(cluster["json_url"], timeout=10).json()
    apps = status["completedapps"]
    assert [a["name"] for a in apps] == ["snekbed-analyze"] and apps[0]["cores"] == 2, apps
    app = apps[0]["id"]
    ran = {}
    for i, port in enumerate(cluster["worker_webui_ports"], start=1):
        executors = httpx.get(f"http://127.0.0.1:{port}/json/", timeout=10).json()["finishedexecutors"]
        assert [e["appid"] for e in executors] == [app], executors
        logs = list((Path(cluster["state_dir"]) / f"worker-{i}" / app).glob("*/stderr"))
        ran[f"worker-{i}"] = sum(log.read_text(errors="replace").count("Running task") for log in logs)
    assert all(n > 0 for n in ran.values()), ran
    print(f"tasks per worker: {ran}")

    assert remote["events"] == local["events"] > 0 and remote["quarantined"] == local["quarantined"] == 0
    assert remote["reconciliation_ok"] and set(remote["tables"]) == set(local["tables"])
    for name in sorted(local["tables"]):
        mine, theirs = _rows(tmp_path / "cluster" / "tables" / name), _rows(tmp_path / "local" / "tables" / name)
        assert len(mine) == len(theirs), f"table {name}: {len(mine)} rows on two workers, {len(theirs)} locally"
        for row, other in zip(mine, theirs):
            assert _same(row, other), f"table {name}: {row} on two workers, {other} locally"
    assert len(read_rows(tmp_path / "cluster" / "tables" / "convergence")) >= 4  # start, kill, partition, heal
    assert (tmp_path / "cluster" / "report.md").read_text() == (tmp_path / "local" / "report.md").read_text()


def test_up_refuses_a_port_in_use_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _snekbed("spark", "up", "--port", str(port), "--state-dir", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"master port {port} on 127.0.0.1 is not free" in proc.stderr
    assert not (tmp_path / "cluster.json").exists()
    down = _snekbed("spark", "down", "--state-dir", str(tmp_path))
    assert down.returncode == 0 and "nothing running" in down.stderr


def test_an_interrupted_up_stops_what_it_started(tmp_path: Path) -> None:
    need(java_available(), "Java is needed for the Spark cluster test (install a JRE 17+)")
    state = tmp_path / "cluster.json"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "spark", "up", "--workers", "2", "--port", "0",
                             "--webui-port", "0", "--state-dir", str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        pids: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while "worker-2" not in pids:  # the state file names each daemon as `up` starts it
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "up did not start two workers within 60 s"
            try:
                pids = json.loads(state.read_text())["pids"]
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if state.exists():  # whatever the outcome, the test leaves nothing running
            _snekbed("spark", "down", "--state-dir", str(tmp_path))
    assert proc.returncode == 130, err[-2000:]
    assert {name: group_members(pid) for name, pid in pids.items() if group_members(pid)} == {}
    assert not state.exists()


def test_up_refuses_a_state_directory_others_may_write(tmp_path: Path) -> None:
    """Spark sources conf/spark-env.sh from the state directory: one that others may write is refused, exit 2,
    before anything starts."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(ClusterRefused, match="writable by no one else"):
        start(shared, workers=1)
    assert not (shared / "cluster.json").exists()
