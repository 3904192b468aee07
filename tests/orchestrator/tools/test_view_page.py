"""The replay page in headless Chromium, checked from what is drawn where (bounding boxes in CSS pixels, never
pixels of a screenshot): it opens at the run's start, or just before the first fault with ``--at first-fault``;
dragging on the timeline scrubs; fault labels, 20 of them a second apart (``snekbed chaos flap``), never overlap
each other nor the rows above them; the graph spans the stage, with the details panel closed and open; a failing
step's flight-recorder dumps sit on the timeline at that step and open in the panel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.planted import PLANTED_YAML as PLANTED
from tests.orchestrator.tools.view_helpers import (REPO, body, box, boxes, chromium, overlapping, screenshot, served,
                                                   snekbed, wait_page)

pytestmark = [pytest.mark.slow]

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
RING8 = REPO / "compose" / "topologies" / "ring-8.yaml"


@pytest.fixture(scope="module")
def flap(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """``snekbed chaos flap`` on mesh-12, recorded (virtual clock): 20 link faults 1 s apart in a 58 s run."""
    run = tmp_path_factory.mktemp("flap") / "run"
    snekbed("chaos", "flap", "--topology", str(MESH12), "--record", str(run), "--json")
    check = json.loads(snekbed("view", str(run), "--check").stdout)
    assert len(check["faults"]) == 20, check["faults"]
    return run, check


def _open(page: Any, url: str) -> None:
    page.get(url)
    wait_page(page, "the page", lambda d: body(d, "ready") == "1")
    wait_page(page, "a frame", lambda d: body(d, "frames") is not None)


def _t_at(page: Any, fraction: float, check: dict[str, Any]) -> float:
    return check["t_start"] + fraction * (check["t_end"] - check["t_start"])


def test_replay_opens_at_the_start_and_dragging_on_the_timeline_scrubs(flap: tuple[Path, dict[str, Any]]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    run, check = flap
    with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, _), chromium() as page:
        _open(page, url)
        assert float(body(page, "t")) == check["t_start"]  # t = 0: the run's first instant, not its teardown
        assert page.find_element("id", "clock").text == "t = 0.00 s"
        assert float(page.find_element("id", "slider").get_attribute("value")) == check["t_start"]
        assert int(body(page, "live")) == check["series"][0]["live"] and body(page, "tree") == "false"
        strip = page.find_element("id", "timeline")
        width = strip.rect["width"]
        # press at 25 % of the strip, drag to 50 % (still pressed), then to 75 %, release: the replay follows
        drag = ActionChains(page).move_to_element_with_offset(strip, int(-width * 0.25), 0).click_and_hold()
        drag.perform()
        for fraction in (0.25, 0.5, 0.75):
            if fraction > 0.25:
                ActionChains(page).move_by_offset(int(width * 0.25), 0).perform()
            want = _t_at(page, fraction, check)
            wait_page(page, f"t near {want:.2f}", lambda d, w=want: abs(float(body(d, "t")) - w) < 0.6)
            cursor = box(page, "#cursor")
            assert abs(cursor["x"] - (strip.rect["x"] + fraction * width)) < 3, (fraction, cursor)
        ActionChains(page).release().perform()
        assert page.find_element("id", "clock").text == f"t = {float(body(page, 't')) - check['t_start']:.2f} s"


def test_at_first_fault_opens_just_before_it_and_fault_next_shows_its_effect(flap: tuple[Path, dict]) -> None:
    run, check = flap
    first = check["faults"][0]
    a, b = first["target"].split("--")
    cut = (f"return [...document.querySelectorAll('#links line.cut')].map(e => e.querySelector('title')"
           ".textContent.split(' (')[0])")  # fmt: skip
    with served(["view", str(run), "--listen", "127.0.0.1:0", "--at", "first-fault"]) as (url, _), \
            chromium() as page:
        _open(page, url)
        t = float(body(page, "t"))
        assert t == pytest.approx(first["t"] - 0.001, abs=1e-6)
        assert page.execute_script(cut) == []  # just before: the link is still there
        # delivery: the pings sent in the 10 s before the instant, delivered / sent (pings.jsonl)
        pings = [json.loads(x) for x in (run / "pings.jsonl").read_text().splitlines()]
        window = [p["received"] for p in pings if t - 10 < p["sent_mono_s"] <= t]
        assert window and body(page, "delivery") == f"{sum(window)}/{len(window)}"
        assert page.find_element("id", "b-deliv").text == f"delivery 10 s: {sum(window)}/{len(window)}"
        page.find_element("id", "next").click()
        wait_page(page, "just after the fault", lambda d: float(body(d, "t")) > first["t"])
        assert float(body(page, "t")) == pytest.approx(first["t"] + 0.001, abs=1e-6)
        assert page.execute_script(cut) in ([f"{a} — {b}"], [f"{b} — {a}"])


@pytest.mark.parametrize("width", [1400, 900])
def test_fault_labels_never_overlap_each_other_nor_the_rows_above(flap: tuple[Path, dict], width: int) -> None:
    run, check = flap
    t0, t1 = check["t_start"], check["t_end"]
    with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, _), chromium(width, 900) as page:
        _open(page, url)
        strip = box(page, "#timeline")
        labels = boxes(page, "#timeline .fault-label")
        ticks = boxes(page, "#timeline .fault-tick")
        assert len(labels) == len(ticks) == 20 and body(page, "hiddenLabels") == "0"
        assert not overlapping(labels), overlapping(labels)
        rows = (boxes(page, "#components-line") + boxes(page, "#timeline .band") + boxes(page, "#timeline .ping")
                + boxes(page, "#timeline .caption"))
        assert len(rows) > 20
        assert not overlapping(labels, rows), overlapping(labels, rows)[:5]
        line = box(page, "#components-line")
        for lb in labels:  # inside the strip, below the components line
            assert strip["x"] - 0.5 <= lb["x"] and lb["x"] + lb["w"] <= strip["x"] + strip["w"] + 0.5, lb
            assert lb["y"] >= line["y"] + line["h"] and lb["y"] + lb["h"] <= strip["y"] + strip["h"] + 0.5, lb
        # each tick where its fault is, each label starting (or, at the right edge, ending) at its tick
        for f, tick in zip(check["faults"], sorted(ticks, key=lambda x: x["x"])):
            assert abs(tick["x"] - (strip["x"] + (f["t"] - t0) / (t1 - t0) * strip["w"])) < 1.5, (f, tick)
            label = next(lb for lb in labels if lb["text"] == f["label"] and (abs(lb["x"] - tick["x"] - 3) < 1.5
                                                                             or abs(lb["x"] + lb["w"] - tick["x"] + 3) < 1.5))
            labels.remove(label)
        assert int(body(page, "timelineLanes")) >= 3  # 20 labels a second apart cannot share one row
        screenshot(page, f"view-flap-fault-labels-{width}.png")


def _nodes_box(page: Any) -> dict[str, Any]:
    return box(page, "#nodes")


def test_the_graph_spans_the_stage_with_the_panel_closed_and_open(flap: tuple[Path, dict]) -> None:
    run, _ = flap
    with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, _), chromium(1400, 1000) as page:
        _open(page, url)
        inner = page.execute_script("return window.innerWidth")
        stage, nodes = box(page, "#stage"), _nodes_box(page)
        assert stage["w"] == inner  # no panel: the stage is the page's width
        assert nodes["w"] >= 0.85 * stage["w"] and nodes["h"] >= 0.8 * stage["h"], (nodes, stage)
        page.execute_script("document.querySelector(`#nodes .node[data-name='n05']`)"
                            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        wait_page(page, "the panel", lambda d: "Routing table" in d.find_element("id", "details").text)
        stage, nodes, aside = box(page, "#stage"), _nodes_box(page), box(page, "aside")
        assert stage["w"] + aside["w"] == pytest.approx(inner, abs=1)
        assert nodes["x"] >= stage["x"] and nodes["x"] + nodes["w"] <= stage["x"] + stage["w"], (nodes, stage)
        assert nodes["w"] >= 0.85 * stage["w"], (nodes, stage)
        screenshot(page, "view-flap-panel-open.png")
        page.find_element("id", "close").click()
        wait_page(page, "the panel closed", lambda d: box(d, "#stage")["w"] == inner)
        assert _nodes_box(page)["w"] >= 0.85 * inner


def test_a_failing_steps_flight_recorder_is_on_the_timeline_at_that_step(tmp_path: Path) -> None:
    scenario, run = tmp_path / "planted.yaml", tmp_path / "run"
    scenario.write_text(PLANTED)
    doc = json.loads(snekbed("chaos", str(scenario), "--topology", str(RING8), "--record", str(run), "--json",
                             ok=(1,)).stdout)
    failed = doc["steps"][1]
    assert failed["verdict"] == "fail" and len(failed["recorder"]) == 16
    check = json.loads(snekbed("view", str(run), "--check").stdout)
    (dump,) = check["dumps"]
    t0, t1 = check["t_start"], check["t_end"]
    with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, _), chromium() as page:
        _open(page, url)
        strip, mark = box(page, "#timeline"), box(page, '#timeline .recorder-mark[data-step="1"]')
        x = lambda t: strip["x"] + (t - t0) / (t1 - t0) * strip["w"]  # noqa: E731
        assert abs(mark["x"] - x(dump["step_t"])) < 1.5 and abs(mark["x"] + mark["w"] - x(dump["t"])) < 1.5, mark
        span = box(page, "#timeline .recorder-span")
        assert abs(span["x"] - x(dump["t_from"])) < 1.5 and span["y"] == mark["y"]
        labels = boxes(page, "#timeline .fault-label") + boxes(page, "#timeline .recorder-label")
        assert [lb["text"] for lb in labels] == ["adversary n03", dump["label"]] and not overlapping(labels)
        page.find_element("css selector", "#timeline .recorder-label").click()
        wait_page(page, "the dump", lambda d: "Flight recorder: step 1 (adversary)" in d.find_element("id", "details").text)
        wait_page(page, "the replay at the read-out", lambda d: abs(float(body(d, "t")) - (dump["t"] - 0.001)) < 1e-6)
        text = page.find_element("id", "details").text
        assert "Dropped by n03" in text and "recorder/1-n03.pcapng" in text
        rows = page.execute_script("return [...document.querySelectorAll('#dump-table tr')].map(r => r.cells.length)")
        assert rows == [6] * 9  # the header and the 8 nodes, each with every column
        dropped = page.execute_script("return [...document.querySelectorAll('#dump-table tr')].slice(1)"
                                      ".map(r => r.cells[0].textContent + ' ' + r.cells[5].textContent)")
        assert dropped == [f"n0{i} 0" if i != 3 else f"n03 {dump['dropped']} adversary" for i in range(1, 9)]
        screenshot(page, "view-flight-recorder-dump.png")


def test_a_script_error_and_a_lost_request_show_on_the_page(flap: tuple[Path, dict]) -> None:
    """An exception in the page's script shows in its error line, not only in the console; a node's details asked
    for while the server is gone end in the panel naming the request, after the page asked again."""
    run, _ = flap
    with chromium() as page:
        with served(["view", str(run), "--listen", "127.0.0.1:0"]) as (url, proc):
            _open(page, url)
            page.execute_script("const s = document.createElement('script'); "  # a script of the page's own origin
                                "s.textContent = `throw new Error('planted failure')`; document.body.append(s)")
            wait_page(page, "the script error", lambda d: "planted failure" in d.find_element("id", "error").text)
            assert page.find_element("id", "error").text == "page error: Uncaught Error: planted failure"
            proc.terminate()
            proc.wait(timeout=20)
        page.execute_script("document.querySelector(`#nodes .node[data-name='n05']`)"
                            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        text = wait_page(page, "the failed request", lambda d: d.find_element("id", "details").text)
        assert text.startswith("Error: /api/node/n05?t=") and "Failed to fetch" in text, text
