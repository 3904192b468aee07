"""``snekbed view`` as a command, without a browser: Ctrl-C (the way the page says to stop it) ends a real process
with one line and exit 0; ``--at`` picks where a replay opens, and an ``--at`` the run does not have is bad input
(exit 2, naming the option)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from contract.exit_codes import BAD_INPUT, OK
from orchestrator.model.topology_loaders import load_topology
from orchestrator.sessions.sim import config_from_topology, run_sim_sync
from orchestrator.tools.view.serve import FAULT_LEAD_S
from orchestrator.tools.view.timeline import Timeline

REPO = Path(__file__).resolve().parents[3]
LINE5 = REPO / "compose" / "topologies" / "line-5.yaml"

#: exec the rest of argv with SIGINT's disposition reset, as a terminal starts a command (a suite run in the
#: background of a non-interactive shell inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored);
#: the same as tests/orchestrator/backends/test_docker_backend.py
_WITH_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """line-5 in process (virtual clock) with a root kill, recorded: one fault."""
    run = tmp_path_factory.mktemp("viewcli") / "run"
    run_sim_sync(config_from_topology(load_topology(LINE5), seed=1, pairs=4, kill_root=True, record=run))
    return run


def _view(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "view", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def _url(proc: subprocess.Popen[str], seen: list[str]) -> str:
    """The page URL the command prints on stderr once it serves (other lines, warnings, are kept in ``seen``)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            assert proc.poll() is None, "".join(seen)
            continue
        seen.append(line)
        if line.startswith("snekbed view: http://"):
            return line.split()[2]
    raise AssertionError(f"no page URL within 60 s: {''.join(seen)}")


def test_ctrl_c_stops_the_page_with_one_line_and_exit_0(recorded: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WITH_SIGINT, "-m", "orchestrator.cli", "view", str(recorded),
                             "--listen", "127.0.0.1:0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    seen: list[str] = []
    try:
        url = _url(proc, seen)
        assert "(Ctrl-C to stop)" in seen[-1]
        # serving: the page answers (an open live stream or a page request must not keep it from stopping)
        assert httpx.get(url + "api/graph", timeout=10, trust_env=False).json()["mode"] == "replay"
        sig = [ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ln.startswith("SigIgn")]
        assert not int(sig[0].split()[1], 16) & (1 << (signal.SIGINT - 1)), sig  # SIGINT reaches it
        t_sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        stop_s = time.monotonic() - t_sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == OK, err
    assert out == ""
    lines = [ln for ln in err.splitlines() if "RuntimeWarning" not in ln and "COMPILED" not in ln]
    assert lines == ["snekbed view: stopped (Ctrl-C)"], err
    assert "Traceback" not in err
    print(f"stopped {stop_s:.2f} s after SIGINT")


def test_at_picks_where_the_replay_opens(recorded: Path) -> None:
    tl = Timeline.from_run(recorded)
    (kill,) = tl.faults
    for at, want in (("start", tl.t_start), ("first-fault", kill.t - FAULT_LEAD_S), ("2.5", tl.t_start + 2.5)):
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "view", str(recorded), "--listen",
                                 "127.0.0.1:0", "--at", at], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        try:
            graph = httpx.get(_url(proc, []) + "api/graph", timeout=10, trust_env=False).json()
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        assert graph["open_at"] == pytest.approx(want, abs=1e-9), at
        assert graph["t_start"] == tl.t_start


@pytest.mark.parametrize(("at", "says"), [
    ("soon", "--at 'soon': expected start, first-fault or seconds from the run's start"),
    ("-1", "--at -1: the run lasts"),
    ("1e6", "--at 1e6: the run lasts"),
])  # fmt: skip
def test_an_at_the_run_does_not_have_is_bad_input(recorded: Path, at: str, says: str) -> None:
    done = _view(str(recorded), "--at", at, "--check")
    assert done.returncode == BAD_INPUT and says in done.stderr, done.stderr


def test_first_fault_of_a_run_without_faults_is_bad_input(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_sim_sync(config_from_topology(load_topology(LINE5), seed=1, pairs=2, record=run))
    done = _view(str(run), "--at", "first-fault", "--check")
    assert done.returncode == BAD_INPUT and "--at first-fault: run " in done.stderr and "has no fault" in done.stderr
    live = _view("--live", "--at", "first-fault")
    assert live.returncode == BAD_INPUT and "--at is for replay" in live.stderr
