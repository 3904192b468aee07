"""pipeline.attack: the intervals and the per-fraction summary of a damage curve (the Spark part runs end to end
in tests/orchestrator/attack/test_attack_cli.py)."""

from __future__ import annotations

import pytest

from pipeline import schemas
from pipeline.attack import interval, summarize, window_control


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


@pytest.mark.spark
def test_window_control_counts_the_share_of_each_interval_inside_the_window_for_honest_nodes(spark) -> None:
    """Two honest nodes and an adversary report every 10 s; the window is [15, 35]: the emissions at 20 and 40
    count half (5 of their 10 s inside), the one at 30 whole, the one at 10 not at all; traffic and received
    frames never count, nor does the adversary. Per node: 0.5 * 100 + 300 + 0.5 * 500 = 600 control bytes sent
    over 20 s of window; so 30 B per node-second over both."""
    def stats(node: str, t: float, frame_type: str, direction: str, nbytes: int) -> dict:
        row = dict.fromkeys(schemas.EVENTS_SCHEMA.fieldNames())
        row.update(run_id="r", v=1, event="frame_stats", node=node * 4, node_name=node, mono_s=t, wall_ts=t,
                   interval_s=10.0, direction=direction, frame_type=frame_type, link_class="lan", frames=1,
                   bytes=nbytes)  # fmt: skip
        return row

    rows = []
    for node in ("a", "b", "x"):
        for t, nbytes in ((10.0, 10_000), (20.0, 100), (30.0, 300), (40.0, 500)):
            rows += [stats(node, t, "bootstrap", "sent", nbytes), stats(node, t, "traffic", "sent", 7_000),
                     stats(node, t, "bootstrap", "received", 9_000)]  # fmt: skip
    events = spark.createDataFrame([tuple(r.get(n) for n in schemas.EVENTS_SCHEMA.fieldNames()) for r in rows],
                                   schemas.EVENTS_SCHEMA)  # fmt: skip
    window = spark.createDataFrame([("r", 15.0, 35.0)], "run_id string, t_on double, t_off double")
    adv = spark.createDataFrame([("r", "x")], "run_id string, node string")
    got = window_control(events, window, adv).collect()
    assert [(r["run_id"], round(r["control_bytes_per_node_s"], 6)) for r in got] == [("r", 30.0)]
