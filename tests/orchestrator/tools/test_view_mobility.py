"""``snekbed view`` of nodes that move, in headless Chromium: a small recorded in-process run of walkers (random
waypoint, radios) replayed at two instants; the nodes are drawn at their recorded positions (metres scaled to the
stage, one scale for both axes), each radio's range around its carriers, and the radio links of the moment."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ci import need_module
from tests.orchestrator.tools.test_view_motion import WALKERS
from tests.orchestrator.tools.view_helpers import body, boxes, chromium, screenshot, served, snekbed, wait_page

pytestmark = [pytest.mark.slow]



@pytest.fixture(scope="module")
def walk_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five fast walkers, a static post and a server on a fixed link only; 10 s of movement, recorded (~2 s)."""
    tmp = tmp_path_factory.mktemp("viewwalk")
    topo = tmp / "walkers.yaml"
    nodes = [f"  - {{name: n{i:02d}, mobility: {{model: random_waypoint, area_m: [100, 100], speed_mps: [5, 10]}}}}"
             for i in range(5)]
    topo.write_text(WALKERS + "\n".join(nodes) + "\n  - {name: post, position: [50, 50]}\n  - server\n"
                    "links:\n  - [post, server, remote]\n")
    run = tmp / "run"
    snekbed("sim", str(topo), "--record", str(run), "--seed", "1", "--pairs", "5", "--json", timeout_s=120)
    assert (run / "mobility.jsonl").stat().st_size > 0
    return run


def _seek(driver: Any, t: float) -> None:
    driver.execute_script(
        "const s = document.getElementById('slider'); s.value = arguments[0]; s.dispatchEvent(new Event('input'));", t)


def _centres(driver: Any) -> dict[str, tuple[float, float]]:
    """Each node's centre in the graph's SVG coordinates (the stage's CSS pixels; a header that wraps onto another
    line moves the whole drawing on the screen, not the nodes in it)."""
    return {n: (x, y) for n, x, y in driver.execute_script(
        "return [...document.querySelectorAll('#nodes .node')].map(g => { const m = g.transform.baseVal.consolidate()"
        ".matrix; return [g.dataset.name, m.e, m.f]; })")}


def _drawn_links(driver: Any) -> list[list[str]]:
    return sorted([b["data"]["a"], b["data"]["b"], b["data"]["radio"]] for b in boxes(driver, "#rlinks .rlink"))


def _at(driver: Any, url: str, t: float) -> tuple[dict[str, Any], dict[str, tuple[float, float]], bytes]:
    """Move the replay to ``t``; the frame the API gives for it, the nodes' centres on the page, a screenshot."""
    _seek(driver, t)  # the slider's step rounds t a little: the page's frame says which instant it shows
    shown = wait_page(driver, f"the frame at {t}", lambda d: abs(float(body(d, "t") or -1) - t) < 0.01 and body(d, "t"))
    frame = httpx.get(f"{url}api/frame?t={shown}", timeout=10, trust_env=False).json()
    return frame, _centres(driver), driver.get_screenshot_as_png()


def test_replay_draws_nodes_that_move_with_their_ranges_and_radio_links(walk_run: Path) -> None:
    with served(["view", str(walk_run), "--listen", "127.0.0.1:0"]) as (url, _), chromium() as page:
        graph = httpx.get(url + "api/graph", timeout=10, trust_env=False).json()
        mob = graph["mobility"]
        assert mob["bounds"] == [0.0, 0.0, 100.0, 100.0] and [r["name"] for r in mob["radios"]] == ["bluetooth", "lan"]
        page.get(url)
        wait_page(page, "the graph", lambda d: body(d, "ready") == "1")
        assert body(page, "mobility") == "1"
        f1, c1, png1 = _at(page, url, 1.0)
        screenshot(page, "view-mobility-walkers-t1.png")
        # every carrier of every radio has its range drawn around it, its radius range_m at the page's scale
        ranges = boxes(page, "#ranges .range")
        assert len(ranges) == sum(len(r["carriers"]) for r in mob["radios"]) == 12
        assert _drawn_links(page) == sorted(x[:3] for x in f1["motion"]["radio_links"])
        f2, c2, png2 = _at(page, url, 8.0)
        screenshot(page, "view-mobility-walkers-t8.png")
        assert _drawn_links(page) == sorted(x[:3] for x in f2["motion"]["radio_links"])
        assert _drawn_links(page) != sorted(x[:3] for x in f1["motion"]["radio_links"])  # links came and went
        # the walkers moved on the page as far as they moved in metres, at one scale for both axes
        p1, p2 = f1["motion"]["positions"], f2["motion"]["positions"]
        walkers = [n for n in p1 if n.startswith("n")]
        scales = []
        for n in walkers:
            metres = math.dist(p1[n], p2[n])
            pixels = math.dist(c1[n], c2[n])
            assert metres > 10 and pixels > 20, (n, metres, pixels)
            scales.append(pixels / metres)
        assert max(scales) / min(scales) < 1.02, scales
        radius = page.execute_script("return +document.querySelector('#ranges .range[data-radio=lan]').getAttribute('r')")
        assert radius == pytest.approx(60 * scales[0], rel=0.02)
        # the static post and the server (no position: the column at the right) stay where they were
        for n in ("post", "server"):
            assert math.dist(c1[n], c2[n]) < 0.5, (n, c1[n], c2[n])
        assert c1["server"][0] > max(c1[n][0] for n in (*walkers, "post"))
        assert png1 != png2
        diff = _changed_pixels(png1, png2)
        assert diff > 2000, diff  # the moved nodes, ranges and links: many pixels changed, not a cursor's few


def _changed_pixels(a: bytes, b: bytes) -> int:
    """How many pixels differ between two screenshots of one size (Pillow reads the PNGs)."""
    image = need_module("PIL.Image", "Pillow (with matplotlib, the pipeline extra) reads the screenshots")
    one, two = image.open(io.BytesIO(a)).convert("RGB"), image.open(io.BytesIO(b)).convert("RGB")
    assert one.size == two.size
    chops = need_module("PIL.ImageChops", "Pillow compares the screenshots")
    return sum(chops.difference(one, two).convert("L").histogram()[1:])  # pixels with any difference
