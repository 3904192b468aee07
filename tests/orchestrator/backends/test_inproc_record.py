"""RunRecorder (orchestrator/backends/inproc_record.py) always closes its files and writes meta.json with an ``outcome``.

Real in-process runs on the virtual clock: one that finishes, one a caller cancels half-way
(trio's cancellation, as Ctrl-C reaches a trio program), one a caller's progress callback breaks.
"""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path

import pytest
import trio
import trio.testing

from orchestrator.model.generators import line
from orchestrator.model.record import outcome_of
from orchestrator.sessions.sim import run_sim, run_sim_sync
from orchestrator.sessions.sim import config_from_topology
from contract.dataset import validate_event


def _cfg(tmp_path: Path, **kw):
    return config_from_topology(line(8), seed=2, pairs=10, kill_root=True, record=tmp_path / "run", **kw)


def _check_closed_run(run: Path) -> dict:
    """Every line of every file is complete JSON (flushed and closed), the events are valid; meta.json."""
    files = [run / "actions.jsonl", run / "pings.jsonl", *sorted((run / "events").glob("*.jsonl"))]
    assert len(files) > 2
    for path in files:
        text = path.read_text()
        assert text == "" or text.endswith("\n"), path
        for raw in text.splitlines():
            json.loads(raw)
            if path.parent.name == "events":
                assert validate_event(raw) is None, (path, raw)
    return json.loads((run / "meta.json").read_text())


def test_a_finished_run_says_ok(tmp_path: Path) -> None:
    out = run_sim_sync(_cfg(tmp_path))
    meta = _check_closed_run(tmp_path / "run")
    assert meta["outcome"] == "ok" and "error" not in meta
    assert meta["observer"]["root_kill"] == out["root_kill"]


def test_a_cancelled_run_closes_its_files_and_says_interrupted(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    seen: list[str] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            def progress(phase: str, _t: float) -> None:
                seen.append(phase)
                if phase == "pinging":  # half-way: converged, pinging, root not yet killed
                    scope.cancel()

            await run_sim(cfg, progress)
        assert scope.cancelled_caught

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # an unclosed file would warn when collected
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        gc.collect()
    meta = _check_closed_run(tmp_path / "run")
    assert "pinging" in seen
    assert meta["outcome"] == "interrupted" and meta["error"].startswith("Cancelled"), meta
    actions = [json.loads(x) for x in (tmp_path / "run" / "actions.jsonl").read_text().splitlines()]
    assert [a["action"] for a in actions][-1] == "down" and actions[-1]["detail"] == {"outcome": "interrupted"}
    # the cancel lands at the next checkpoint: the root is killed, its re-convergence never recorded
    assert [a["action"] for a in actions] == ["up", "converged", "kill_root", "down"]
    assert "observer" not in meta  # nothing was observed to the end


def test_a_failing_run_closes_its_files_and_says_failed(tmp_path: Path) -> None:
    def progress(phase: str, _t: float) -> None:
        if phase == "pinging after root kill":
            raise RuntimeError("the caller's progress display broke")

    with pytest.raises(RuntimeError, match="progress display broke"):
        run_sim_sync(_cfg(tmp_path), progress)
    meta = _check_closed_run(tmp_path / "run")
    assert meta["outcome"] == "failed", meta
    assert meta["error"] == "RuntimeError: the caller's progress display broke"
    actions = [a["action"] for a in map(json.loads, (tmp_path / "run" / "actions.jsonl").read_text().splitlines())]
    assert actions[-2:] == ["converged", "down"] and "kill_root" in actions


@pytest.mark.parametrize(("exc", "outcome"), [(KeyboardInterrupt(), "interrupted"), (SystemExit(130), "interrupted"),
                                              (trio.Cancelled._create(), "interrupted"),
                                              (RuntimeError("x"), "failed"), (OSError(28, "full"), "failed")])
def test_outcome_of(exc: BaseException, outcome: str) -> None:
    assert outcome_of(exc) == outcome
