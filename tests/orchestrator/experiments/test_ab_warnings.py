"""``snekbed ab`` says what its seeds cannot conclude before it runs anything (fast: no run, no Spark session).

The runs are replaced by a stand-in that marks where they would start and stops the command there, so the test
reads the order of what the command said: the warning comes first. The warning goes on with the experiment (the
stand-in is reached), and the manifest the runs would write carries it (``warnings``). Then the chaos checker's
cross-check, which counts a fault step that never re-converged at the bound it was watched for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import ab as ab_cli
from orchestrator.experiments.ab import AbPlan
from tests.ci import REPO

TOPOLOGY = REPO / "compose" / "topologies" / "line-5.yaml"
STARTED = "<the runs start here>"


class _Stop(Exception):
    pass


def _invoke(monkeypatch, tmp_path: Path, *extra: str) -> tuple[str, list[AbPlan]]:
    plans: list[AbPlan] = []

    def runs_start(plan: AbPlan, progress=None):
        plans.append(plan)
        print(STARTED, file=sys.stderr)
        raise _Stop

    monkeypatch.setattr(ab_cli, "run_arms", runs_start)
    args = ["--a", "snek", "--b", "snek,bootstrap_interval=8", "--scenario", "demo-quick", "--topology", str(TOPOLOGY),
            "--out", str(tmp_path / "ab"), *extra]  # fmt: skip
    res = CliRunner().invoke(ab_cli.ab, args)
    assert isinstance(res.exception, _Stop), (res.output, res.stderr, res.exception)
    return res.stderr, plans


def test_five_seeds_are_warned_about_before_any_run(monkeypatch, tmp_path):
    err, [plan] = _invoke(monkeypatch, tmp_path, "--seeds", "5")
    assert STARTED in err
    warning = err[: err.index(STARTED)]
    assert "warning: 5 seed(s) give 5 pair(s)" in warning, err
    assert "cannot reach p <= 0.05" in warning and "2/2^5 = 0.0625" in warning and "--seeds 6" in warning, err
    assert plan.alpha == 0.05 and len(plan.warnings) == 1 and "cannot reach p <= 0.05" in plan.warnings[0]


def test_the_level_is_an_option(monkeypatch, tmp_path):
    err, [plan] = _invoke(monkeypatch, tmp_path, "--seeds", "7", "--alpha", "0.01")
    assert "cannot reach p <= 0.01" in err[: err.index(STARTED)] and "--seeds 8" in err, err
    assert plan.alpha == 0.01


@pytest.mark.parametrize("seeds", ["8", "20"])
def test_enough_seeds_say_nothing(monkeypatch, tmp_path, seeds):
    err, [plan] = _invoke(monkeypatch, tmp_path, "--seeds", seeds)
    assert "warning" not in err and plan.warnings == (), err


def _run(seed: int, arm: str, reconv: list[float | None], bound: float = 40.0) -> dict:
    steps = [{"index": 0, "action": "wait", "snake_converged_s": 1.0, "bound_s": None}]
    steps += [{"index": i + 1, "action": "kill", "snake_converged_s": t, "bound_s": bound}
              for i, t in enumerate(reconv)]
    return {"seed": seed, "arm": arm, "steps": steps}


def test_the_checker_counts_a_step_that_never_reconverged_at_its_bound():
    runs = []
    for s in range(6):
        runs += [_run(s, "a", [2.0, 3.0]), _run(s, "b", [None if s % 2 else 4.0, 5.0])]
    chk = ab_cli.checker_comparison({"seeds": list(range(6)), "runs": runs})
    assert chk["n_pairs"] == 6 and chk["censored"] == {"a": [], "b": [1, 3, 5]} and chk["n_dropped"] == 0
    assert chk["pairs"][1] == [1, 2.5, 22.5]  # (40 + 5) / 2: the step that never re-converged counts as its bound
    assert chk["significant"] and chk["better"] == "a"
    # a step with no value and no bound cannot be placed: its seed is left out, named
    runs[-1]["steps"][1]["bound_s"] = None
    assert ab_cli.checker_comparison({"seeds": list(range(6)), "runs": runs})["dropped"] == [5]


def test_the_manifest_keeps_the_bound_a_step_was_watched_for():
    from orchestrator.experiments.ab import _step_summary

    rec = {"index": 1, "action": "kill", "snake_converged_s": None, "invariants": {
        "reconverged_within_bound": {"ok": False, "detail": "tree 1.0 s, snake never, bound 59.0-61.5 s"}}}
    assert _step_summary(rec)["bound_s"] == 59.0
    assert _step_summary({**rec, "bound_s": 33.5})["bound_s"] == 33.5
    assert _step_summary({"index": 0, "action": "wait"})["bound_s"] is None
    # stuck: watched past the bound up to the checker's horizon, which it is censored at
    stuck = {**rec, "reconvergence": {"pace": "stuck", "took_s": None, "bound_s": 40.0, "horizon_s": 120.0}}
    assert (_step_summary(stuck)["bound_s"], _step_summary(stuck)["watched_s"]) == (40.0, 120.0)
    assert _step_summary(rec)["watched_s"] == 59.0
