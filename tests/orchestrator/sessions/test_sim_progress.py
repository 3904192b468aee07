"""The progress line of long in-process runs (orchestrator.sessions.progress): on stderr while the run works, never in
the ``--json`` document on stdout, off with ``--quiet``; the run's result is the same with or without it."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from orchestrator.sessions.progress import ProgressLine, Snapshot, format_line
from tests.ci import REPO
from tests.conftest import TOPOLOGIES

PERIODIC = "protocol time"  # every periodic line says it; the last line starts "done after"


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "orchestrator.cli", "sim", str(TOPOLOGIES / "graph-250.txt"), "--seed", "0",
           "--kill-root", "--json", "--pairs", "20", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=True)


def test_the_progress_line_is_on_stderr_never_in_the_json_and_quiet_turns_it_off() -> None:
    every = 0.2
    loud = _sim("--progress-every", str(every))
    out = json.loads(loud.stdout)  # the whole of stdout is the one document
    lines = loud.stderr.splitlines()
    periodic = [ln for ln in lines if PERIODIC in ln and not ln.startswith("done after")]
    # a line every 0.2 s of a run that works for over a second (248 nodes, a root kill: 2 s here, more when loaded);
    # the last says how it ended (a run too short for a periodic line writes none)
    if out["wall_s"] >= 1.0:
        assert periodic, loud.stderr
    if periodic:
        assert lines[-1].startswith("done after"), loud.stderr
        assert f"protocol time {out['protocol_time_s']:.1f} s" in lines[-1]
    for ln in periodic:
        assert "frames" in ln and "queued" in ln and "RSS" in ln and "GiB" in ln, ln

    quiet = _sim("--quiet")
    assert PERIODIC not in quiet.stderr and "done after" not in quiet.stderr
    q = json.loads(quiet.stdout)
    for key in ("tree_converged_s", "snake_converged_s", "pings", "root_kill", "frames_delivered", "protocol_time_s"):
        assert q[key] == out[key], key  # watching the run does not change it


def test_a_line_says_pace_rate_memory_convergence_and_when_the_wait_gives_up() -> None:
    prev = Snapshot("converging", 10.0, 1_000, 50, None, None, 610.0)
    now = Snapshot("converging", 30.0, 41_000, 2_000_000, 4.0, None, 610.0)
    line = format_line(now, prev, 2.0, 125.0, 3 * 2**30)
    assert "protocol time 30.0 s (10.00 s/s)" in line
    assert "frames 41.00 k (20.00 k/s)" in line
    assert "queued 2.00 M" in line and "RSS 3.00 GiB" in line
    assert "tree converged at 4.0 s, snake not yet" in line
    assert "gives up within ~58 s at this pace" in line  # (610 - 30) / 10 protocol seconds per wall second
    first = format_line(now, None, 0.0, 0.0, 0)
    assert "s/s" not in first and "gives up" not in first  # no pace before a second reading
    done = format_line(Snapshot("pinging", 40.0, 9, 0, 4.0, 8.0, None), None, 0, 1, 0)
    assert "converged (tree 4.0 s, snake 8.0 s)" in done


def test_plain_lines_where_stderr_is_not_a_terminal() -> None:
    ticks = iter(range(1, 10**6))
    stream = io.StringIO()
    line = ProgressLine(lambda: Snapshot("converging", float(next(ticks)), 0, 0), stream=stream, every_s=3600)
    with line:
        line.tick()
        line.tick()
    text = stream.getvalue().splitlines()
    assert len(text) == 3 and text[-1].startswith("done after"), text
    assert "(1.00 s/s)" not in text[0] and "s/s)" in text[1]
