"""``snekbed view --live`` on a Docker run, in headless Chromium: mesh-12 with one container per node; the page shows
12 nodes and the root the protocol elects, and after ``snekbed kill-root`` the root mark moves to the new root within
a few seconds. Screenshots are kept in tests/artefacts/."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.orchestrator.docker_helpers import left_behind
from tests.orchestrator.tools.view_helpers import (REPO, body, box, boxes, chromium, highest, screenshot, served,
                                                   wait_page)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
MOVE_WITHIN_S = 10.0  # re-convergence of the tree after a root kill takes about 2-4 s on mesh-12


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_live_view_of_a_docker_run_moves_the_root_mark_after_kill_root(client: object, image: str,
                                                                       tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_id = f"view-{uuid.uuid4().hex[:6]}"
    try:
        up = _cli("up", str(MESH12), "--image", image, "--runs-dir", str(runs), "--run-id", run_id, "--seed", "2",
                  "--json")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        keys = json.loads((runs / run_id / "meta.json").read_text())["nodes"]
        old = highest(keys)
        with served(["view", "--live", "--run-id", run_id, "--runs-dir", str(runs), "--listen", "127.0.0.1:0"]) \
                as (url, _), chromium() as page:
            page.get(url)
            wait_page(page, "the live graph", lambda d: body(d, "ready") == "1")
            assert page.execute_script("return document.querySelectorAll('#nodes .node').length") == 12
            wait_page(page, f"12 nodes up under root {old}",
                      lambda d: body(d, "live") == "12" and body(d, "roots") == old and body(d, "tree") == "true",
                      timeout_s=60)
            ring = page.execute_script("return [...document.querySelectorAll('.root-ring')].map(e => e.dataset.root)")
            assert ring == [old]
            frames, t_frames = int(body(page, "frames")), time.monotonic()
            # pushed every POLL_S (0.5 s) when idle; under the suite's load a poll of 12 admin APIs can take
            # longer, so ask for 3 pushes within 10 s (a page that stopped updating still fails)
            wait_page(page, "3 more pushes", lambda d: int(body(d, "frames")) >= frames + 3, timeout_s=10)
            print(f"3 pushes in {time.monotonic() - t_frames:.1f} s")
            # pings before the kill (snekbed ping writes pings.jsonl): drawn green, delivery 3/3
            a, b = sorted(n for n in keys if n != old)[:2]
            _cli("ping", a, b, "--count", "3", "--run-id", run_id, "--runs-dir", str(runs), timeout=120)
            wait_page(page, "3 delivered pings", lambda d: body(d, "pings") == "3" and body(d, "pingsOk") == "3"
                      and body(d, "delivery") == "3/3", timeout_s=20)
            assert len(boxes(page, "#timeline .ping.ok")) == 3
            screenshot(page, "view-live-docker-mesh-12-before-root-kill.png")
            kill = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "kill-root", "--run-id", run_id,
                                     "--runs-dir", str(runs), "--json"], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                wait_page(page, f"{old} dead", lambda d: json.loads(body(d, "statuses") or "{}").get(old) == "dead",
                          timeout_s=60)
                actions = [json.loads(x) for x in (runs / run_id / "actions.jsonl").read_text().splitlines()]
                killed_at = next(a["mono_s"] for a in actions if a["action"] == "kill_root")
                new = highest(keys, {old})
                wait_page(page, f"the root mark on {new}", lambda d: body(d, "roots") == new, timeout_s=30)
                moved_after = time.monotonic() - killed_at
                assert moved_after < MOVE_WITHIN_S, moved_after
                ring = page.execute_script(
                    "return [...document.querySelectorAll('.root-ring')].map(e => e.dataset.root)")
                assert ring == [new]
                wait_page(page, "the kill on the timeline",
                          lambda d: d.execute_script("return document.querySelectorAll('#timeline .fault-tick').length")
                          == 1)
                # the details panel reads the node's own admin API: state, GET /routes, /metrics counters
                page.execute_script("document.querySelector(`#nodes .node[data-name='${arguments[0]}']`)"
                                    ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", new)
                wait_page(page, "the new root's details", lambda d: "Routing table (" in d.find_element("id", "details").text,
                          timeout_s=20)
                text = page.find_element("id", "details").text
                assert "GET /routes" in text and "snek_received_frames_total" in text
                screenshot(page, "view-live-docker-mesh-12-after-root-kill.png")
                out, err = kill.communicate(timeout=300)
                # exit 1 only for a ping lost right after re-convergence (a SNEK entry of the old root, until it
                # expires: docs/chaos.md); the kill itself and the convergence must have worked
                doc = json.loads(out)
                lost = any(c["received"] < c["sent"] for c in doc["pings"].values())
                assert doc["converged"] and kill.returncode == (1 if lost else 0), out[-2000:] + err[-2000:]
                _delivery_moves_after_the_kill(page, runs, run_id, a, old, 3 + sum(c["sent"] for c in doc["pings"].values()))
            finally:
                if kill.poll() is None:
                    kill.kill()
                    kill.wait()
    finally:
        _cli("down", "--run-id", run_id, "--runs-dir", str(runs), timeout=300)
        left = left_behind(client, run_id)
    assert not left, left


def _delivery_moves_after_the_kill(page: object, runs: Path, run_id: str, sender: str, dead: str, before: int) -> None:
    """After the kill, kill-root's own pings and two to the dead old root (lost): every ping of pings.jsonl is a
    dot, the lost ones red and right of the kill's tick, and the delivery badge counts the losses."""
    lost = _cli("ping", sender, dead, "--count", "2", "--timeout-s", "2", "--run-id", run_id, "--runs-dir",
                str(runs), timeout=120)
    assert lost.returncode == 1 and "0/2 received" in lost.stdout, lost.stdout + lost.stderr
    lines = [json.loads(x) for x in (runs / run_id / "pings.jsonl").read_text().splitlines()]
    assert len(lines) == before + 2
    wait_page(page, "every ping, two more lost in the delivery window",
              lambda d: int(body(d, "pings")) == len(lines) and int(body(d, "delivery").split("/")[0])
              <= int(body(d, "delivery").split("/")[1]) - 2, timeout_s=30)
    assert int(body(page, "pingsOk")) == sum(p["received"] for p in lines)
    tick = box(page, "#timeline .fault-tick")
    red = boxes(page, "#timeline .ping.lost")
    assert len(red) == len(lines) - sum(p["received"] for p in lines) >= 2
    assert sum(p["x"] > tick["x"] for p in red) >= 2  # the two to the dead root, after the kill
    green = boxes(page, "#timeline .ping.ok")
    assert sum(p["x"] + p["w"] < tick["x"] for p in green) == 3  # the three before it
    screenshot(page, "view-live-docker-mesh-12-delivery-after-root-kill.png")
