"""One meaning of "in CI" (tests/ci.py), and no test that can turn a missing component or a bad reading into a skip."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci import in_ci

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("value", ["1", "true", "yes", "TRUE", "Yes", " true "])
def test_these_values_of_ci_mean_ci(value: str) -> None:
    assert in_ci(value)


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off"])
def test_these_do_not(value: str | None) -> None:
    assert not in_ci(value)


# What may not appear in a test file: reading CI by hand (only tests/ci.py does), importorskip (need_module
# fails under CI instead), xfail (a reading a loaded host can spoil is measured again or judged with a tolerance).
FORBIDDEN = {
    "reads CI by hand": re.compile(r"""environ(\.get\(|\[)\s*["']CI["']"""),
    "importorskip": re.compile(r"\bimportorskip\("),
    "xfail": re.compile(r"\bxfail\b"),
}


def test_no_test_file_decides_ci_or_skipping_on_its_own() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("ci.py", "test_ci.py"):
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(TESTS)}:{lineno}: {what}" for what, rx in FORBIDDEN.items() if rx.search(line)]
    assert len(list(TESTS.rglob("test_*.py"))) > 30  # the walk saw the suite
    assert found == [], "\n".join(found)


def test_xdist_keeps_a_group_on_one_worker() -> None:
    """The suite runs on two workers (README); tests sharing host state must not be split between them."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-v", "tests/node/test_shell_errors.py"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if "PASSED" in ln or "FAILED" in ln]
    assert done.returncode == 0 and len(lines) >= 4, done.stdout[-2000:]
    assert all(ln.rstrip().endswith("@multicast") for ln in lines), lines
    assert len({ln.split("]")[0] for ln in lines}) == 1, lines  # one worker ran them all


@pytest.mark.slow
def test_the_suite_collects_without_the_shared_reference_material(tmp_path: Path) -> None:
    """A checkout without ../shared (SNEKBED_SHARED pointing nowhere) still collects every test module: a test that
    needs the reference's vectors or topologies asks for them when it runs, and skips (fails in CI) naming them."""
    env = dict(os.environ)
    env["SNEKBED_SHARED"] = str(tmp_path / "no-shared-here")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(TESTS)], cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^\d+ tests collected", done.stdout, re.M) and "error" not in done.stdout.splitlines()[-1]
