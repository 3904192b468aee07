"""Shared by the ``snekbed view`` tests: a headless Chromium (Debian's, driven by Selenium), the view served by a
real ``snekbed`` process, and waits on what the page shows (its ``body`` data attributes, set by page.html)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.ci import need, need_module

REPO = Path(__file__).resolve().parents[3]
ARTEFACTS = REPO / "tests" / "artefacts"  # screenshots kept by the tests (gitignored)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium (Debian's chromium + chromium-driver, installed by scripts/setup.sh)."""
    need(Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), "chromium and chromium-driver (Debian packages)")
    webdriver = need_module("selenium.webdriver", "selenium drives the browser tests")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def served(args: list[str], *, timeout_s: float = 120.0, marker: str = "http://") -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``snekbed ARGS`` (which prints its page URL on stderr) from this checkout; yield (url, process)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url, seen = None, []
        deadline = time.monotonic() + timeout_s
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                if proc.poll() is not None:
                    break
                continue
            seen.append(line)
            if "view" in line and marker in line:
                url = line[line.index(marker):].split()[0]
        assert url is not None, f"no page URL from snekbed {' '.join(args)}: {''.join(seen)[-3000:]}"
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def body(driver: Any, key: str) -> str | None:
    return driver.execute_script(f"return document.body.dataset[{key!r}] ?? null")


def wait_page(driver: Any, what: str, pred: Callable[[Any], Any], timeout_s: float = 30.0, poll_s: float = 0.1) -> Any:
    """Poll ``pred(driver)`` until truthy; fail naming ``what`` and the page's state."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred(driver)
        if value:
            return value
        if time.monotonic() > deadline:
            state = driver.execute_script(
                "const d = document.getElementById('details'); return {...document.body.dataset, "
                "panelOpen: document.body.classList.contains('panel'), error: document.getElementById('error')"
                ".textContent, details: d ? d.innerText.slice(0, 400) : null}")
            raise AssertionError(f"page did not show {what} within {timeout_s} s: {state}")
        time.sleep(poll_s)


def screenshot(driver: Any, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, path
    return path


def highest(keys: dict[str, str], exclude: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """The node whose key is highest (the root the protocol elects), skipping ``exclude``."""
    return max((k, n) for n, k in keys.items() if n not in exclude)[1]


def snekbed(*args: str, ok: tuple[int, ...] = (0,), timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``snekbed ARGS`` from this checkout; its exit code must be one of ``ok``."""
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode in ok, f"snekbed {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


# ------------------------------------------------------------------ geometry: what is drawn where, in CSS pixels

_BOXES = """return [...document.querySelectorAll(arguments[0])].map(e => { const r = e.getBoundingClientRect();
  return {x: r.left, y: r.top, w: r.width, h: r.height, text: e.textContent, data: {...e.dataset}}; })"""


def boxes(driver: Any, selector: str) -> list[dict[str, Any]]:
    """The bounding box (``x, y, w, h``), text and data attributes of every element ``selector`` matches."""
    return driver.execute_script(_BOXES, selector)


def box(driver: Any, selector: str) -> dict[str, Any]:
    (found,) = boxes(driver, selector)
    return found


def overlap(a: dict[str, Any], b: dict[str, Any], tolerance: float = 0.5) -> bool:
    """Whether two boxes share more than ``tolerance`` pixels along both axes."""
    dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
    dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
    return dx > tolerance and dy > tolerance


def overlapping(some: list[dict[str, Any]], others: list[dict[str, Any]] | None = None) -> list[tuple[str, str]]:
    """The pairs that overlap: within ``some``, or between ``some`` and ``others``."""
    if others is None:
        return [(a["text"], b["text"]) for i, a in enumerate(some) for b in some[i + 1:] if overlap(a, b)]
    return [(a["text"], b["text"]) for a in some for b in others if overlap(a, b)]
