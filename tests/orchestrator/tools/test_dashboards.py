"""Dashboards as code: the committed JSON is exactly what orchestrator/tools/dashboards.py generates, every dashboard
round-trips through the SDK's own dashboard model, and every query names only documented metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from orchestrator.tools.dashboards import DASHBOARDS, DEFAULT_DIR, build_all, metric_names, render, stale, substitute, targets

REPO = Path(__file__).resolve().parents[3]


def test_committed_json_is_what_the_builder_generates_byte_for_byte(tmp_path: Path) -> None:
    assert stale() == [], "run `snekbed dashboards build` and commit dashboards/"
    built = build_all(tmp_path)
    assert sorted(p.name for p in built) == sorted(p.name for p in DEFAULT_DIR.glob("*.json"))
    for path in built:
        assert path.read_bytes() == (DEFAULT_DIR / path.name).read_bytes(), path.name


def test_check_fails_on_a_stale_or_stray_file(tmp_path: Path) -> None:
    build_all(tmp_path)
    cmd = [sys.executable, "-m", "orchestrator.cli", "dashboards", "build", "--out", str(tmp_path), "--check"]
    assert subprocess.run(cmd, capture_output=True, text=True, cwd=REPO).returncode == 0
    target = tmp_path / "snekbed-chaos.json"
    target.write_text(target.read_text().replace("Live nodes", "Live nodez"))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1 and "snekbed-chaos.json: differs" in done.stderr
    build_all(tmp_path)
    (tmp_path / "hand-made.json").write_text("{}")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1 and "hand-made.json: not generated" in done.stderr


def test_every_dashboard_validates_against_the_sdk_model() -> None:
    for name in DASHBOARDS:
        doc = json.loads(render(name))
        model = Dashboard.from_json(doc)  # the SDK's typed model: unknown shapes fail here
        again = json.loads(json.dumps(model, cls=JSONEncoder))
        assert again == doc, name
        assert doc["uid"] == f"snekbed-{name}" and doc["title"].startswith("snekbed")
        assert [v["name"] for v in doc["templating"]["list"]][:1] == ["run"]
        assert doc["annotations"]["list"][0]["name"] == "Faults"
        for panel in doc["panels"]:
            if panel.get("type") == "row":
                continue
            assert panel["datasource"]["uid"] == "snekbed-prometheus", panel["title"]
            assert panel.get("description"), f"{name}: panel {panel['title']!r} says nothing about what it answers"
            assert panel["targets"], panel["title"]


def test_every_metric_a_panel_reads_is_documented() -> None:
    documented = set(re.findall(r"`((?:snek|snekbed)_[a-z_]+)`", (REPO / "docs" / "metrics.md").read_text()))
    used = set()
    for path in DEFAULT_DIR.glob("*.json"):
        for t in targets(json.loads(path.read_text())):
            for name in metric_names(t.expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name) if name.endswith(("_bucket",)) else name
                assert base in documented, (path.name, t.panel, name)
                used.add(base)
    assert {"snekbed_components", "snekbed_faults_total", "snek_root_info", "snek_sent_bytes_total"} <= used


def test_substitute_and_metric_names() -> None:
    expr = 'sum by (le) (rate(snek_ping_rtt_seconds_bucket{run="$run",node="${node}"}[$__rate_interval])) or on() vector(0)'
    out = substitute(expr, {"run": "r1", "node": "n01"}, 2)
    assert out == 'sum by (le) (rate(snek_ping_rtt_seconds_bucket{run="r1",node="n01"}[8s])) or on() vector(0)'
    assert metric_names(expr) == {"snek_ping_rtt_seconds_bucket"}
    assert metric_names('count(count by (key) (snek_root_info{run="x"}))') == {"snek_root_info"}
    assert metric_names("snekbed_live_nodes{run=\"a\"} / snekbed_components") == {"snekbed_live_nodes",
                                                                                   "snekbed_components"}


def test_promtool_accepts_every_generated_scrape_config() -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool comes with the prometheus package (scripts/setup.sh installs it)"
    for path in sorted((REPO / "compose" / "prometheus").glob("*.yml")):
        done = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, (path, done.stdout + done.stderr)


def test_docs_list_every_panel_with_its_question() -> None:
    text = (REPO / "docs" / "monitoring.md").read_text()
    for path in DEFAULT_DIR.glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            if panel.get("type") != "row":
                assert f"| {panel['title']} | {panel['type']} | {panel['description']} |" in text, (path.name,
                                                                                                   panel["title"])
