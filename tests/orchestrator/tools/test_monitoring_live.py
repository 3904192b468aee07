"""Monitoring proven on live data: a real Prometheus (the offline-built image, in the run) scrapes the demo scenario
(``snekbed chaos demo-quick``, what ``snekbed demo`` runs: a root kill, a partition into halves and the heal) on
mesh-12 on Docker, with the orchestrator's own exporter. Then every query of every generated dashboard (each
panel's targets, each annotation, each template variable), its variables filled in, is evaluated through
Prometheus's HTTP API over the run's time range: each returns data, every metric it names exists, and a panel
is non-zero wherever the run had the events it shows (the series it reads changed during the run, as Prometheus
holds them; the faults and the peer disconnects also as the run's own files record them). The values must mean
what the panels say, the killed root must be in Prometheus from before the kill, and every fault, the first
root kill included, counted. A compose file's monitoring profile is brought up and down too."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.chaos.engine import shipped_scenarios
from orchestrator.tools.dashboards import DEFAULT_DIR, metric_names, substitute, targets
from orchestrator.tools.monitoring import FAULT_KINDS
from orchestrator.backends.image import build_prometheus_image
from tests.ci import need
from tests.dashboard_queries import selectors
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.prometheus, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
STEP_S = 2  # query resolution: the run's scrape interval
SCENARIO = "demo-quick"  # the shipped scenario `snekbed demo` runs (on mesh-12 when Docker is there)
#: its root kill comes 1 s after convergence, less than one scrape interval: the run here waits this long instead, so
#: that every node has been scraped converged before the kill (the roots panel is read 2 s before it)
KILL_AFTER_S = 3 * STEP_S


def _api(url: str, path: str, **params: Any) -> Any:
    resp = httpx.get(f"{url}/api/v1/{path}", params=params, timeout=30, trust_env=False)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", (path, params, body)
    return body["data"]


def _range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    return _api(url, "query_range", query=expr, start=start, end=end, step=STEP_S)["result"]


def _values(series: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for s in series for t, v in s["values"] if not math.isnan(float(v))]


def _at(url: str, expr: str, t: float) -> list[float]:
    return [float(r["value"][1]) for r in _api(url, "query", query=expr, time=t)["result"]]


@pytest.fixture(scope="module")
def monitored_run(client: object, image: str, tmp_path_factory: pytest.TempPathFactory):
    """The demo scenario's run, kept (--keep) so its Prometheus can be queried; removed by label afterwards."""
    prom_image = build_prometheus_image(client)  # type: ignore[arg-type]
    tmp = tmp_path_factory.mktemp("monitored")
    shipped = shipped_scenarios()[SCENARIO].read_text()
    kill = "  - {action: kill, target: root, after_s: 1}\n"
    assert kill in shipped, shipped
    scenario = tmp / f"{SCENARIO}.yaml"
    scenario.write_text(shipped.replace(kill, kill.replace("after_s: 1", f"after_s: {KILL_AFTER_S}")))
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", str(scenario), "--topology", str(MESH12),
                           "--backend", "docker", "--image", image, "--runs-dir", str(tmp / "runs"),
                           "--monitoring", "--prometheus-image", prom_image, "--keep", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=1200)  # fmt: skip
    print(f"snekbed chaos {SCENARIO} --monitoring: {time.monotonic() - t0:.1f} s")
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    run_id = Path(out["run_dir"]).name if out.get("run_dir") else None
    try:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
        assert out["scenario"] == SCENARIO and "Prometheus for run" in done.stderr, done.stderr[-2000:]
        run_dir = Path(out["run_dir"])
        meta = json.loads((run_dir / "meta.json").read_text())
        actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
        yield {"out": out, "run_id": run_id, "url": meta["monitoring"]["prometheus"], "actions": actions,
               "run_dir": run_dir, "end": time.time()}
    finally:
        if run_id is not None:
            gone = subprocess.run([sys.executable, "-m", "orchestrator.cli", "down", "--run-id", run_id,
                                   "--runs-dir", str(tmp / "runs")], capture_output=True, text=True, cwd=REPO,
                                  timeout=300)  # fmt: skip
        left = left_behind(client, run_id) if run_id is not None else ""
    assert not left, left + "\n" + gone.stderr[-2000:]


def _last(url: str, sel: str, t: float) -> list[float]:
    """The last value Prometheus scraped of ``sel`` in the minute before ``t`` (a series gone stale included)."""
    return _at(url, f"last_over_time({sel}[1m])", t)


def _fault(run: dict[str, Any], action: str) -> float:
    return next(a["wall_ts"] for a in run["actions"] if a["action"] == action)


def _killed(run: dict[str, Any]) -> set[str]:
    return {a["target"] for a in run["actions"] if a["action"] in ("kill", "kill_root")}


def _had_events(url: str, expr: str, start: float, end: float) -> bool:
    """Whether every series ``expr`` reads changed during the run, as Prometheus holds them: a counter (or a
    histogram's bucket) increased, a gauge was not 0 at some scrape."""
    span = f"[{max(STEP_S, round(end - start))}s]"
    for sel in selectors(expr):
        probe = (f"sum(increase({sel.promql()}{span}))" if sel.is_counter
                 else f"max(abs(max_over_time({sel.promql()}{span})))")  # fmt: skip
        if not any(v > 0 for v in _at(url, probe, end)):
            return False
    return True


def test_every_panel_of_every_dashboard_returns_data_from_the_live_run(monitored_run: dict[str, Any]) -> None:
    run, url = monitored_run, monitored_run["url"]
    start, end = run["actions"][0]["wall_ts"] - 5, run["end"]
    health = _api(url, "targets", state="active")["activeTargets"]
    jobs = {t["labels"]["job"] for t in health}
    assert {"snek-nodes", "snekbed-orchestrator"} <= jobs, jobs
    assert sum(t["labels"]["job"] == "snek-nodes" for t in health) == 11  # the killed root's container is gone
    # for the node dashboard: the live node that sent the most pings (its RTT panel has samples)
    sent = _api(url, "query", query=f'sum by (node) (snek_pings_total{{run="{run["run_id"]}"}})', time=end)["result"]
    node = max((float(r["value"][1]), r["metric"]["node"]) for r in sent if r["metric"]["node"] not in _killed(run))[1]
    variables = {"run": run["run_id"], "node": node}
    # a metric exists when it has samples in the run, or a node exposes it (HELP/TYPE) with none yet
    present = set(_api(url, "label/__name__/values", start=start, end=end)) | set(_api(url, "metadata"))
    checked, names, quiet = 0, set(), []
    for path in sorted(DEFAULT_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        for v in doc["templating"]["list"]:
            query = substitute(v["query"]["query"] if isinstance(v["query"], dict) else v["query"], variables)
            metric = query.removeprefix("label_values(").split(",")[0].split("{")[0]
            assert metric in present, (path.name, v["name"], metric)
            [sel] = selectors(query)  # label_values(SELECTOR, label): the values the variable offers
            label = query.rstrip(") ").rsplit(",", 1)[1].strip()
            offered = _api(url, f"label/{label}/values", start=start, end=end, **{"match[]": sel.promql()})
            assert offered and variables.get(v["name"], offered[0]) in offered, (path.name, v["name"], offered)
        for t in targets(doc):
            expr = substitute(t.expr, variables, STEP_S)
            assert "$" not in expr, (path.name, t.panel, expr)
            for name in metric_names(t.expr):
                names.add(name)
                assert name.removesuffix("_bucket") in present or name in present, (path.name, t.panel, name)
            got = _values(_range(url, expr, start, end))
            checked += 1
            if t.panel.startswith("annotation:"):  # the fault mark is checked below, where it must be
                continue
            assert got, f"{path.name}: panel {t.panel!r} returned no data: {expr}"
            if _had_events(url, expr, start, end):
                assert any(v != 0 for _, v in got), f"{path.name}: panel {t.panel!r} shows 0 all along although " \
                                                    f"the series it reads changed in the run: {expr}"
            else:
                quiet.append(f"{path.name}: {t.panel}: {expr}")
    print("panels whose series did not change in the run (0 is right for them):", *quiet, sep="\n  ")
    assert checked >= 40 and len(names) >= 20, (checked, sorted(names))
    # what the run had is what the dashboards show, by the run's own files too: every fault, and every disconnect
    _faults_are_counted(run, url)
    _disconnects_are_shown(run, url, start, end)


def _faults_are_counted(run: dict[str, Any], url: str) -> None:
    """``snekbed_faults_total`` counts every fault of actions.jsonl by kind, the first root kill included (its
    series stood at 0 before it, so ``increase()`` sees it), and the "Faults by kind" panel shows each."""
    rid, end = run["run_id"], run["end"]
    faults = Counter(a["action"] for a in run["actions"] if a["action"] in FAULT_KINDS)
    assert faults == {"kill_root": 1, "partition": 1, "heal": 1}, faults  # the demo's three faults
    counted = {r["metric"]["kind"]: float(r["value"][1]) for r in
               _api(url, "query", query=f'last_over_time(snekbed_faults_total{{run="{rid}"}}[1m]) > 0', time=end)["result"]}
    assert counted == {k: float(n) for k, n in faults.items()}, counted
    first = min(a["wall_ts"] for a in run["actions"] if a["action"] in FAULT_KINDS)
    assert _at(url, f'sum(snekbed_faults_total{{run="{rid}"}})', first - 1) == [0.0]  # scraped, at 0, before
    assert sum(_last(url, f'snekbed_faults_total{{run="{rid}"}}', end)) == sum(faults.values())
    doc = json.loads((DEFAULT_DIR / "snekbed-chaos.json").read_text())
    [panel] = [t for t in targets(doc) if t.panel == "Faults by kind"]
    series = _range(url, substitute(panel.expr, {"run": rid}, STEP_S), first - 30, end)
    shown = {s["metric"].get("kind"): max(float(v) for _, v in s["values"]) for s in series}
    assert all(shown.get(kind, 0) > 0 for kind in faults), shown


def _disconnects_are_shown(run: dict[str, Any], url: str, start: float, end: float) -> None:
    """The live nodes' ``snek_peer_disconnects_total`` holds exactly the peerings their event logs say ended
    (``peer_down``, by reason), and the "Peer disconnects by reason" panel shows each reason."""
    rid, killed = run["run_id"], _killed(run)
    live = f'run="{rid}",node!~"{"|".join(sorted(killed))}"'
    now = time.time()
    counted = {r["metric"]["reason"]: float(r["value"][1]) for r in _api(
        url, "query", query=f"sum by (reason) (snek_peer_disconnects_total{{{live}}}) > 0", time=now)["result"]}
    logged: Counter[str] = Counter()
    for log in sorted((run["run_dir"] / "events").glob("*.jsonl")):
        if log.stem in killed:
            continue
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "peer_down" and event["wall_ts"] < now - STEP_S:
                logged[event["reason"]] += 1
    assert logged and counted == {k: float(n) for k, n in logged.items()}, (counted, logged)
    print("peer disconnects by reason, logged by the live nodes and counted in Prometheus:", dict(logged))
    doc = json.loads((DEFAULT_DIR / "snekbed-overview.json").read_text())
    [panel] = [t for t in targets(doc) if t.panel == "Peer disconnects by reason"]
    series = _range(url, substitute(panel.expr, {"run": rid}, STEP_S), start, end)
    shown = {s["metric"].get("reason"): max(float(v) for _, v in s["values"]) for s in series}
    assert all(shown.get(reason, 0) > 0 for reason in logged), (shown, logged)


def test_the_panels_mean_what_they_say(monitored_run: dict[str, Any]) -> None:
    run, url, rid = monitored_run, monitored_run["url"], monitored_run["run_id"]
    kill, part, heal, end = _fault(run, "kill_root"), _fault(run, "partition"), _fault(run, "heal"), run["end"]
    roots = f'count(count by (key) (snek_root_info{{run="{rid}"}}))'
    assert _at(url, roots, kill - STEP_S) == [1.0]  # converged, and every node scraped so, before the kill: one root
    assert _at(url, roots, end - 1) == [1.0]  # and again after the heal
    changes = _values(_range(url, f'sum(increase(snek_root_changes_total{{run="{rid}"}}[1m]))', kill, part))
    assert max(v for _, v in changes) > 0, changes
    comps = f'snekbed_components{{run="{rid}"}}'
    assert _at(url, comps, heal - 2) == [2.0]  # during the partition
    # the orchestrator's last word, which it has Prometheus scrape before its exporter goes (its series are stale
    # from the next scrape on): the run ended healed and converged, the root still dead
    assert _last(url, comps, end) == [1.0]
    assert _last(url, f'snekbed_live_nodes{{run="{rid}"}}', end) == [11.0]
    assert _last(url, f'snekbed_converged{{run="{rid}",kind="snake"}}', end) == [1.0]
    assert _last(url, f'snekbed_converged{{run="{rid}",kind="tree"}}', end) == [1.0]
    # Prometheus ran before the first node started: the killed root was scraped (as the root) before the kill,
    # one second after convergence, and the orchestrator's series keep their own run label
    [root] = [a["target"] for a in run["actions"] if a["action"] == "kill_root"]
    was_root = _values(_range(url, f'snek_is_root{{run="{rid}",node="{root}"}}', kill - 60, kill))
    assert was_root and was_root[-1][1] == 1.0 and was_root[0][0] < kill - STEP_S, was_root
    assert _values(_range(url, f'snek_node_info{{run="{rid}",node="{root}"}}', kill - 60, kill))
    assert not _api(url, "series", **{"match[]": '{exported_run!=""}'}), "a target label collided with a series'"
    assert _last(url, f'snekbed_reconvergence_seconds{{run="{rid}",kind="snake"}}', end)[0] > 0
    # the fault annotation marks each fault at the scrape after it, within two scrape intervals and a step
    doc = json.loads((DEFAULT_DIR / "snekbed-chaos.json").read_text())
    ann = next(t for t in targets(doc) if t.panel.startswith("annotation:"))
    series = _range(url, substitute(ann.expr, {"run": rid}, STEP_S), kill - 30, end)
    first = {s["metric"]["kind"]: min(float(t) for t, _ in s["values"]) for s in series}
    assert set(first) == {"kill_root", "partition", "heal"}, first
    for kind, at in (("kill_root", kill), ("partition", part), ("heal", heal)):
        assert at - STEP_S <= first[kind] <= at + 3 * STEP_S + 1, (kind, at, first[kind])


# ---------------------------------------------------------------- compose's monitoring profile


def test_compose_monitoring_profile_scrapes_every_node_and_goes_down(client: object, image: str) -> None:
    compose = shutil.which("docker-compose")
    need(compose is not None, "docker-compose (v1) is not installed")
    build_prometheus_image(client)  # type: ignore[arg-type]  # tags snekbed-prometheus:latest, which the file names
    project = f"snekmon{uuid.uuid4().hex[:8]}"
    base = [compose, "-f", str(REPO / "compose" / "mesh-12.yml"), "-p", project, "--profile", "monitoring"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "SNEKBED_PROMETHEUS_PORT": "0"}
    try:
        done = subprocess.run([*base, "up", "-d"], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        port = subprocess.run([*base, "port", "prometheus", "9090"], capture_output=True, text=True, env=env)
        url = f"http://{port.stdout.strip()}"
        deadline, up = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            try:
                active = _api(url, "targets", state="active")["activeTargets"]
            except (httpx.HTTPError, ValueError):
                active = []
            up = sorted(t["labels"]["node"] for t in active if t["labels"].get("job") == "snek-nodes"
                        and t["health"] == "up")  # fmt: skip
            if len(up) == 12:
                break
            time.sleep(2)
        assert up == [f"n{i:02d}" for i in range(1, 13)], up
        got = _api(url, "query", query='count(snek_node_info{run="compose-mesh-12"})')["result"]
        assert got and got[0]["value"][1] == "12"
    finally:
        done = subprocess.run([*base, "down", "-v", "-t", "5"], capture_output=True, text=True, timeout=300, env=env)
        left = client.api.containers(all=True, filters={"label": f"com.docker.compose.project={project}"})  # type: ignore[attr-defined]
        nets = client.api.networks(filters={"label": f"com.docker.compose.project={project}"})  # type: ignore[attr-defined]
        assert done.returncode == 0 and not left and not nets, (done.stderr, left, nets)


def test_up_with_monitoring_starts_prometheus_for_the_run_and_down_removes_it(client: object, image: str,
                                                                               tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "up", str(REPO / "compose" / "topologies" /
                           "line-5.yaml"), "--image", image, "--runs-dir", str(runs), "--monitoring", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        url = out["prometheus"]
        assert url.startswith("http://127.0.0.1:")
        deadline, up = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            active = _api(url, "targets", state="active")["activeTargets"]
            up = sorted(t["labels"]["node"] for t in active if t["labels"]["job"] == "snek-nodes" and t["health"] == "up")
            if len(up) == 5:
                break
            time.sleep(1)
        assert up == ["n01", "n02", "n03", "n04", "n05"]
        assert all(t["labels"]["run"] == out["run_id"] for t in active if t["labels"]["job"] == "snek-nodes")
    finally:
        if out.get("run_id"):
            gone = subprocess.run([sys.executable, "-m", "orchestrator.cli", "down", "--run-id", out["run_id"],
                                   "--runs-dir", str(runs)], capture_output=True, text=True, cwd=REPO, timeout=300)
        left = left_behind(client, out["run_id"]) if out.get("run_id") else ""
    assert not left, left + "\n" + gone.stderr[-2000:]
