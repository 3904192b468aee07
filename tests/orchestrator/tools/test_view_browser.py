"""``snekbed view`` in a real browser (headless Chromium): the replay of a recorded graph-250 simulation with a root
kill, driven by the slider, and the live page of an in-process ``--clock real`` run that kills its root."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.ci import SHARED, need
from tests.orchestrator.tools.view_helpers import (REPO, body, box, boxes, chromium, highest, screenshot, served,
                                                   wait_page)

pytestmark = [pytest.mark.slow]

GRAPH_250 = SHARED / "topologies" / "pinecone" / "graph-250.txt"
MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"


@pytest.fixture(scope="module")
def graph250_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(GRAPH_250.exists(), f"the reference topologies ({GRAPH_250})")
    run = tmp_path_factory.mktemp("view250") / "run"
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sim", str(GRAPH_250), "--kill-root",
                           "--record", str(run), "--pairs", "50", "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def _seek(driver: object, t: float) -> None:
    driver.execute_script(  # type: ignore[attr-defined]
        "const s = document.getElementById('slider'); s.value = arguments[0]; s.dispatchEvent(new Event('input'));", t)


def test_replay_of_graph_250_shows_the_old_root_before_the_kill_and_the_new_root_after(graph250_run: Path) -> None:
    run = graph250_run
    keys = json.loads((run / "meta.json").read_text())["nodes"]
    actions = [json.loads(x) for x in (run / "actions.jsonl").read_text().splitlines()]
    kill = next(a for a in actions if a["action"] == "kill_root")
    reconverged = [a for a in actions if a["action"] == "converged"][1]
    old, new = highest(keys), highest(keys, {kill["target"]})
    assert kill["target"] == old
    with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, _), chromium() as page:
        page.get(url)
        wait_page(page, "the graph", lambda d: body(d, "ready") == "1")
        assert page.execute_script("return document.querySelectorAll('#nodes .node').length") == len(keys) == 248
        assert page.execute_script("return document.querySelectorAll('#links line').length") > 400
        assert page.execute_script("return document.querySelectorAll('#timeline .fault-tick').length") == 1
        _seek(page, kill["mono_s"] - 1.0)
        wait_page(page, f"root {old} before the kill", lambda d: body(d, "roots") == old)
        ring = page.execute_script("return [...document.querySelectorAll('.root-ring')].map(e => e.dataset.root)")
        assert ring == [old]
        assert body(page, "snake") == "true" and body(page, "live") == "248"
        screenshot(page, "view-graph-250-before-root-kill.png")
        # scrub fast through the whole run: the page coalesces the requests and ends on the last position
        for i in range(60):
            _seek(page, kill["mono_s"] * i / 60)
        after = reconverged["mono_s"] + 0.5
        _seek(page, after)
        wait_page(page, f"root {new} after the kill", lambda d: body(d, "roots") == new)
        assert abs(float(body(page, "t")) - after) < 0.05
        assert body(page, "live") == "247"
        statuses = json.loads(body(page, "statuses"))
        assert statuses[old] == "dead" and sum(s == "up" for s in statuses.values()) == 247
        assert page.execute_script("return [...document.querySelectorAll('.root-ring')].map(e => e.dataset.root)") == [new]
        # click the new root: its details (peers, routing table, counters) as of that moment
        page.execute_script("document.querySelector(`#nodes .node[data-name='${arguments[0]}']`)"
                            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", new)
        wait_page(page, "the node's details", lambda d: "Peers (" in d.find_element("id", "details").text)
        text = page.find_element("id", "details").text
        assert new in text and "Routing table" in text and "Counters" in text
        # replayed from events: the out port is not in them, and says so; every row has the header's columns
        header, *rows = page.execute_script(_CELLS, "#routes-table")
        assert header == ["origin", "in", "out", "age"] and rows
        assert all(len(r) == 4 and PORT.match(r[1]) and r[2] == "unknown" for r in rows), rows[:5]
        assert page.execute_script(_CELLS, "#peers-table")[0] == ["port", "node", "link class"]
        screenshot(page, "view-graph-250-after-root-kill.png")


def test_live_page_of_an_in_process_real_clock_run_follows_the_root_kill() -> None:
    args = ["sim", str(MESH12), "--clock", "real", "--kill-root", "--pairs", "10", "--view", "127.0.0.1:0",
            "--hold-s", "20", "--seed", "4"]
    with served(args) as (url, proc), chromium() as page:
        graph = httpx.get(url + "api/graph", timeout=10, trust_env=False).json()
        keys = {n["name"]: n["key"] for n in graph["nodes"]}
        old = highest(keys)
        page.get(url)
        wait_page(page, "the live graph", lambda d: body(d, "ready") == "1")
        assert graph["mode"] == "live" and len(keys) == 12
        wait_page(page, f"root {old}", lambda d: body(d, "roots") == old and body(d, "live") == "12", timeout_s=60)
        frames = int(body(page, "frames"))
        # pushed once a second when idle; under the suite's load allow 10 s for 2 pushes (a page that stopped
        # updating still fails)
        wait_page(page, "2 more pushes", lambda d: int(body(d, "frames")) >= frames + 2, timeout_s=10)
        # the pings after the first convergence, drawn as replay draws them (a dot each, green when delivered)
        wait_page(page, "10 pings", lambda d: int(body(d, "pings") or 0) >= 10, timeout_s=60)
        wait_page(page, "the root kill", lambda d: body(d, "live") == "11", timeout_s=90)
        new = highest(keys, {old})
        wait_page(page, f"new root {new}", lambda d: body(d, "roots") == new, timeout_s=30)
        assert page.execute_script("return document.querySelectorAll('#timeline .fault-tick').length") == 1
        assert json.loads(body(page, "statuses"))[old] == "dead"
        # and the pings after the re-convergence, right of the kill's tick; the delivery badge counts them
        # (delivery: the pings sent in the last 10 s; polled while the new ones are in that window)
        wait_page(page, "20 pings, 10 of them in the delivery window",
                  lambda d: int(body(d, "pings")) >= 20 and int(body(d, "delivery").split("/")[1]) >= 10, timeout_s=60)
        assert page.find_element("id", "b-deliv").text.startswith("delivery 10 s: ")
        wait_page(page, "20 dots", lambda d: len(boxes(d, "#timeline .ping")) == int(body(d, "pings")))
        tick = box(page, "#timeline .fault-tick")
        dots = boxes(page, "#timeline .ping")
        before, after = [p for p in dots if p["x"] + p["w"] / 2 < tick["x"]], [p for p in dots if p["x"] > tick["x"]]
        assert len(before) >= 10 and len(after) >= 10, (len(before), len(after), tick)
        ok = boxes(page, "#timeline .ping.ok")
        assert len(ok) == int(body(page, "pingsOk")) >= 15  # lost ones are rare here; they would be red, below
        _routing_table_has_its_header_columns(page, new)
        screenshot(page, "view-live-inproc-mesh-12-after-root-kill.png")
        proc.terminate()


_CELLS = "return [...document.querySelectorAll(arguments[0] + ' tr')].map(r => [...r.cells].map(c => c.textContent))"
PORT = re.compile(r"^([1-9]\d* \([^ ()]+\)|0 \(this node\)|none \(ended here\))$")  # a port and its peer's name


def _routing_table_has_its_header_columns(page: object, name: str) -> None:
    """A live node's routing table: every row has the header's columns, each port named (never a bare -1)."""
    page.execute_script("document.querySelector(`#nodes .node[data-name='${arguments[0]}']`)"  # type: ignore[attr-defined]
                        ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", name)
    wait_page(page, f"{name}'s routing table", lambda d: d.execute_script(_CELLS, "#routes-table"))
    header, *rows = page.execute_script(_CELLS, "#routes-table")  # type: ignore[attr-defined]
    assert header == ["origin", "in", "out", "expires in"] and rows
    for row in rows:
        assert len(row) == len(header) and PORT.match(row[1]) and PORT.match(row[2]), row
        assert re.match(r"^\d+(\.\d+)? s$", row[3]) and row[0].startswith("n"), row
    peers_header, *peers = page.execute_script(_CELLS, "#peers-table")  # type: ignore[attr-defined]
    assert peers_header == ["port", "node", "link class", "link type"] and peers
    assert all(len(p) == 4 and "unknown" not in p for p in peers), peers


def test_chaos_serves_the_live_view_of_an_in_process_run_through_a_pause() -> None:
    """``snekbed chaos --clock real --view``: the frames show the paused root as paused, another root meanwhile,
    and both faults; then the run ends with a verdict."""
    args = ["chaos", "pause-root", "--topology", str(MESH12), "--clock", "real", "--view", "127.0.0.1:0", "--json"]
    seen: dict[str, set] = {"status": set(), "roots": set(), "faults": set()}
    with served(args) as (url, proc):
        keys = {n["name"]: n["key"] for n in httpx.get(url + "api/graph", timeout=10, trust_env=False).json()["nodes"]}
        top = highest(keys)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                f = httpx.get(url + "api/frame", timeout=5, trust_env=False).json()
            except httpx.HTTPError:
                if proc.poll() is not None:
                    break  # the run ended and took the page with it
                continue  # a slow answer under load: ask again
            seen["status"].add(f["nodes"][top]["status"])
            if f["nodes"][top]["status"] == "paused":
                seen["roots"].add(tuple(f["roots"]))
            seen["faults"].update(x["label"] for x in f["faults"])
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and json.loads(out)["verdict"] == "pass"
    assert {"up", "paused"} <= seen["status"], seen
    # while it was frozen, the others settled on another root
    assert any(len(r) == 1 and r[0] != top for r in seen["roots"]), seen
    assert {f"pause {top}", f"resume {top}"} <= seen["faults"], seen
