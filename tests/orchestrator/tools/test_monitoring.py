"""The orchestrator's view as metrics (RunMetrics), its exporter, and the scrape configuration, without Docker."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import trio
import trio.testing
import yaml
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import parse_scenario_yaml
from orchestrator.model.generators import ring
from orchestrator.tools.monitoring import FAULT_KINDS, RunMetrics, prometheus_config, serve_metrics
from tests.ci import REPO


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_run_metrics_start_with_known_counters_at_zero_and_no_made_up_values() -> None:
    m = RunMetrics("r1")
    got = _samples(m.render().decode())
    assert got[("snekbed_faults_total", (("kind", "kill_root"), ("run", "r1")))] == 0
    assert {k for (n, labels) in got if n == "snekbed_faults_total" for k, v in labels if k == "kind"} == {"kind"}
    kinds = {dict(labels)["kind"] for (n, labels) in got if n == "snekbed_faults_total"}
    assert kinds == set(FAULT_KINDS)
    names = {n for n, _ in got}
    # nothing observed yet: no live-node count, no convergence, no last fault, no episode
    assert not names & {"snekbed_live_nodes", "snekbed_components", "snekbed_converged",
                        "snekbed_last_fault_timestamp_seconds", "snekbed_since_last_fault_seconds",
                        "snekbed_reconvergence_seconds"}  # fmt: skip
    before = time.time()
    m.fault("kill_root")
    m.observe(11, 1, True, False)
    m.episode(1.5, None)
    m.ping("snek", True, 3)
    got = _samples(m.render().decode())
    assert got[("snekbed_faults_total", (("kind", "kill_root"), ("run", "r1")))] == 1
    assert got[("snekbed_live_nodes", (("run", "r1"),))] == 11
    assert got[("snekbed_converged", (("kind", "snake"), ("run", "r1")))] == 0
    assert got[("snekbed_converged", (("kind", "tree"), ("run", "r1")))] == 1
    assert got[("snekbed_reconvergence_seconds", (("kind", "tree"), ("run", "r1")))] == 1.5
    assert ("snekbed_reconvergence_seconds", (("kind", "snake"), ("run", "r1"))) not in got
    assert got[("snekbed_pings_total", (("mode", "snek"), ("result", "received"), ("run", "r1")))] == 3
    assert before <= got[("snekbed_last_fault_timestamp_seconds", (("run", "r1"),))] <= time.time()
    assert 0 <= got[("snekbed_since_last_fault_seconds", (("run", "r1"),))] < 5


def test_the_exporter_serves_the_run_metrics_over_http() -> None:
    m = RunMetrics("r2")
    m.observe(3, 2, False, False)
    server = serve_metrics(m, "127.0.0.1", 0)
    try:
        body = httpx.get(server.url, timeout=5, trust_env=False).text
        assert 'snekbed_components{run="r2"} 2.0' in body
    finally:
        server.close()


def test_flush_waits_until_a_scrape_carried_the_last_update() -> None:
    """The exporter goes with the orchestrator: close() first waits for a scrape that carries the last update."""
    m = RunMetrics("r3")
    server = serve_metrics(m, "127.0.0.1", 0)
    try:
        assert m.flush(5) is False  # never scraped: no Prometheus to wait for
        httpx.get(server.url, timeout=5, trust_env=False)
        assert m.flush(0) is True  # that scrape carried every update made so far
        m.observe(3, 1, True, True)  # an update no scrape has carried yet
        assert m.flush(0.2) is False
        scraped: list[str] = []
        thread = threading.Thread(target=lambda: scraped.append(httpx.get(server.url, timeout=5, trust_env=False).text))
        thread.start()
        assert m.flush(10) is True  # returns once that scrape has been served, whatever the wait
        thread.join()
        assert 'snekbed_converged{kind="snake",run="r3"} 1.0' in scraped[0]
        # a `name[]` query is served, and is not a whole scrape
        m.observe(3, 1, True, False)
        part = httpx.get(server.url, params={"name[]": "snekbed_live_nodes"}, timeout=5, trust_env=False).text
        assert "snekbed_live_nodes" in part and "snekbed_converged" not in part
        assert m.flush(0.2) is False
    finally:
        server.close()


def test_the_chaos_runner_keeps_the_run_metrics_current() -> None:
    sc = parse_scenario_yaml("""\
name: watched
settle_s: 2
traffic: {rate_per_s: 2, pairs: 4}
steps:
  - {action: wait, until: converged, within_s: 60}
  - {action: kill, target: root}
  - {action: partition, by: halves, after_s: 5}
  - {action: heal, after_s: 10}
""", file="watched.yaml")
    metrics = RunMetrics("watched")
    seen: list[tuple[float, float]] = []  # (components, live) whenever the partition is in force

    async def main() -> dict:
        async with trio.open_nursery() as nursery:
            async def sample() -> None:
                while True:
                    got = _samples(metrics.render().decode())
                    comps = got.get(("snekbed_components", (("run", "watched"),)))
                    if comps is not None:
                        seen.append((comps, got[("snekbed_live_nodes", (("run", "watched"),))]))
                    await trio.sleep(0.5)

            nursery.start_soon(sample)
            out = await run_scenario(InprocChaos(ring(10), seed=1), sc, seed=1, metrics=metrics)
            nursery.cancel_scope.cancel()
        return out

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert out["verdict"] == "pass", out
    got = _samples(metrics.render().decode())
    run = ("run", "watched")
    for kind in ("kill_root", "partition", "heal"):
        assert got[("snekbed_faults_total", (("kind", kind), run))] == 1, kind
    assert got[("snekbed_faults_total", (("kind", "pause"), run))] == 0
    assert got[("snekbed_live_nodes", (run,))] == 9 and got[("snekbed_components", (run,))] == 1
    assert got[("snekbed_converged", (("kind", "snake"), run))] == 1
    assert got[("snekbed_reconvergence_seconds", (("kind", "snake"), run))] >= 0
    assert (2, 9) in seen and (1, 10) in seen  # the partition showed as two components; all ten before the kill
    pings = sum(v for (n, labels), v in got.items() if n == "snekbed_pings_total")
    assert pings > 10


def test_scrape_config_finds_one_runs_nodes_and_its_orchestrator() -> None:
    doc = yaml.safe_load(prometheus_config(run_id="abc", orchestrators=[("abc", "10.0.0.1:4321")]))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    filters = jobs["snek-nodes"]["docker_sd_configs"][0]["filters"]
    assert {"name": "label", "values": ["snekbed.run=abc"]} in filters
    assert jobs["snekbed-orchestrator"]["static_configs"] == [{"targets": ["10.0.0.1:4321"], "labels": {"run": "abc"}}]
    # the exporter's own run label is kept (no exported_run beside the target's); containers found every scrape
    assert jobs["snekbed-orchestrator"]["honor_labels"] is True
    assert jobs["snek-nodes"]["docker_sd_configs"][0]["refresh_interval"] == doc["global"]["scrape_interval"] == "2s"


def test_chaos_refuses_monitoring_without_docker_and_metrics_on_virtual_time() -> None:
    def chaos(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", "demo", "--topology",
                               str(REPO / "compose" / "topologies" / "line-5.yaml"), *args],
                              capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip

    done = chaos("--monitoring")
    assert done.returncode == 2 and "--monitoring" in done.stderr and "--backend docker" in done.stderr
    done = chaos("--metrics", "127.0.0.1:0")
    assert done.returncode == 2 and "--clock real" in done.stderr
    done = chaos("--metrics", "nope", "--clock", "real")
    assert done.returncode == 2 and "--metrics" in done.stderr
