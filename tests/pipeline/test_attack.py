"""pipeline.attack: the intervals and the per-fraction summary of a damage curve (the Spark part runs end to end
in tests/orchestrator/attack/test_attack_cli.py)."""

from __future__ import annotations

import pytest

from pipeline.attack import interval, summarize


def test_interval_is_student_t_at_95() -> None:
    got = interval([1.0, 2.0, 3.0])
    assert got["mean"] == 2.0 and got["n"] == 3
    assert got["ci_low"] == pytest.approx(2.0 - 4.303 * 1.0 / 3 ** 0.5, rel=1e-4)
    assert interval([5.0]) == {"mean": 5.0, "ci_low": 5.0, "ci_high": 5.0, "n": 1}
    assert interval([None, float("nan")])["mean"] is None


def test_summarize_per_variant_and_fraction() -> None:
    runs = [{"variant": v, "fraction": f, "seed": s, "run_dir": f"{v}/{f}/{s}"}
            for v in ("snek", "snek-s0") for f in (0.0, 0.1) for s in (0, 1)]  # fmt: skip
    ids = {r["run_dir"]: r["run_dir"] for r in runs}
    per = {r["run_dir"]: {"delivery_honest": 1.0 - r["fraction"] * (2 if r["variant"] == "snek" else 1),
                          "tree_reconverged_s": None if r["seed"] else 1.0} for r in runs}  # fmt: skip
    doc = summarize(runs, per, ids, targeted=True)
    assert list(doc) == ["snek", "snek-s0"]
    snek = doc["snek"]
    assert [p["fraction"] for p in snek] == [0.0, 0.1]
    assert snek[1]["metrics"]["delivery_honest"]["mean"] == pytest.approx(0.8)
    assert doc["snek-s0"][1]["metrics"]["delivery_honest"]["mean"] == pytest.approx(0.9)
    assert snek[0]["metrics"]["tree_reconverged_s"]["n_missing"] == 1
    assert "victim_reachability" in snek[0]["metrics"]
    assert "victim_reachability" not in summarize(runs, per, ids, targeted=False)["snek"][0]["metrics"]
