"""`snekbed sim --clock real --metrics HOST:PORT`: every in-process node on one endpoint, with a `node` label."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.ci import REPO

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
NAMES = {f"n{i:02d}" for i in range(1, 13)}


def _scrape(url: str) -> list:
    return [s for fam in text_string_to_metric_families(httpx.get(url, timeout=5, trust_env=False).text)
            for s in fam.samples]  # fmt: skip


def test_every_node_is_on_one_endpoint_with_a_node_label() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sim", str(MESH12), "--clock", "real",
                             "--metrics", "127.0.0.1:0", "--hold-s", "30", "--pairs", "20", "--json"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = ""
        deadline = time.monotonic() + 30
        while "metrics: http" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, "no metrics URL announced"
            line = proc.stderr.readline()
        url = line.split("metrics: ", 1)[1].strip()

        def converged() -> list | None:
            samples = _scrape(url)
            roots = [s for s in samples if s.name == "snek_is_root" and s.value == 1]
            keys = {s.labels["key"] for s in samples if s.name == "snek_root_info"}
            return samples if len(roots) == 1 and len(keys) == 1 else None

        samples = None
        while samples is None:
            assert time.monotonic() < deadline + 30, "never one root"
            samples = converged()
            time.sleep(0.5)
        by = Counter(s.name for s in samples)
        for name in ("snek_node_info", "snek_routing_table_entries", "snek_tree_depth", "snek_descending_present"):
            assert {s.labels["node"] for s in samples if s.name == name} == NAMES, name
            assert by[name] == 12, name
        assert by["process_cpu_seconds_total"] == 1  # the process, once, without a node label
        assert all("node" not in s.labels for s in samples if s.name.startswith("process_"))
        sent = sum(s.value for s in samples if s.name == "snek_sent_frames_total")
        sent_bytes = sum(s.value for s in samples if s.name == "snek_sent_bytes_total")
        assert sent > 50 and sent_bytes > sent * 10
        assert sum(s.value for s in samples if s.name == "snek_peers") == 2 * 17  # both ends of every link
        assert {s.labels["link_class"] for s in samples if s.name == "snek_peers" and s.value} >= {"lan", "remote"}
        documented = set(re.findall(r"`(snek_[a-z_]+)`", (REPO / "docs" / "metrics.md").read_text()))
        for name in {s.name for s in samples if s.name.startswith("snek_")}:
            assert name in documented or re.sub(r"_(bucket|count|sum)$", "", name) in documented, name
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_metrics_need_the_real_clock() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sim", str(MESH12), "--metrics", "127.0.0.1:0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--clock real" in done.stderr
