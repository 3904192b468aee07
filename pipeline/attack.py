"""Damage curves of an attack (``snekbed attack``): per run metrics from the analysis tables (Spark), then per
variant and adversary fraction their mean over seeds with a 95 % interval (driver).

The runs are analysed as any runs (pipeline.analysis: pings_enriched, actions, convergence, overhead_by_node);
the attack manifest (orchestrator.experiments.attack) names each run's adversaries, victim and attack window
(``measured``: the indexes of the window's wait, every adversary on, and of the first step that turns them off;
an older manifest's ``window`` from the first on step; the runner records each step as a ``step`` action). Per
run (:func:`attack_runs`, Spark):

* ``delivery_honest``: delivery ratio of the pings sent inside the attack window whose sender and target are
  both honest, the victim's left out (a targeted attack's mesh gives the victim's pairs every other turn:
  orchestrator.experiments.attack);
* ``victim_reachability``: the delivery ratio of the honest pings to or from the victim (targeted attacks; null
  otherwise or when none was sent);
* ``stretch``: median stretch of the delivered honest pings of the window, the victim's left out;
* ``tree_reconverged_s``, ``snake_reconverged_s``: convergence of the last episode opened at or after the window
  closed (the adversaries left: the network's recovery); 0 when no adversary acted (fraction 0: nothing to
  recover from); null (left out of the mean, counted in ``n_missing``) when it never converged;
* ``control_bytes_per_node_s``: control bytes the honest nodes sent per node-second of the attack window (their
  ``frame_stats`` emissions, each counted for the part of its interval inside the window: :func:`window_control`).
  Over the whole run it would mix in the start's convergence, which a longer run dilutes.

Per (variant, fraction) (:func:`summarize`): ``{mean, ci_low, ci_high, n}`` of each metric over the seeds, the
interval Student's t at 95 % (mean +- t * s / sqrt(n); a single seed: the interval is the mean itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pipeline.jobs.overhead import control_per_run, overhead_by_node

__all__ = ["METRICS", "attack_runs", "interval", "run_ids", "summarize", "window_control"]

#: every metric of a damage curve: name -> (what, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "delivery_honest": ("delivery ratio among honest pairs during the attack", True),
    "victim_reachability": ("delivery ratio of pings to or from the victim during the attack", True),
    "stretch": ("median stretch of delivered honest pings during the attack", False),
    "tree_reconverged_s": ("tree re-convergence after the adversaries left (s)", False),
    "snake_reconverged_s": ("snake re-convergence after the adversaries left (s)", False),
    "control_bytes_per_node_s": ("control bytes sent per honest node-second during the attack", False),
}

#: Student's t, two-sided 95 %, for 1..30 degrees of freedom (beyond: 1.96)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

_RUN_SCHEMA = StructType([StructField("run_id", StringType()), StructField("on_index", LongType()),
                          StructField("off_index", LongType()), StructField("victim", StringType()),
                          StructField("acted", LongType())])  # fmt: skip
_ADV_SCHEMA = StructType([StructField("run_id", StringType()), StructField("node", StringType())])


def run_ids(runs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """run_dir -> run_id (meta.json) of every manifest run."""
    return {r["run_dir"]: json.loads((Path(r["run_dir"]) / "meta.json").read_text())["run_id"] for r in runs}


def attack_runs(spark: SparkSession, tables: Mapping[str, str], runs: Sequence[Mapping[str, Any]],
                ids: Mapping[str, str]) -> list[dict[str, Any]]:  # fmt: skip
    """One row per manifest run: its ``run_id`` and every metric of :data:`METRICS` (module doc)."""
    info = spark.createDataFrame(
        [(ids[r["run_dir"]], *r.get("measured", r["window"])[:2], r.get("victim"), int(bool(r["adversaries"])))
         for r in runs], _RUN_SCHEMA)  # fmt: skip
    adv = spark.createDataFrame([(ids[r["run_dir"]], n) for r in runs for n in r["adversaries"]], _ADV_SCHEMA)
    read = lambda name: spark.read.parquet(tables[name])  # noqa: E731
    actions, pings = read("actions"), read("pings_enriched")
    steps = actions.where(F.col("action") == "step").select(
        "run_id", "mono_s", F.get_json_object(F.col("detail").cast("string"), "$.index").cast("long").alias("i"))
    on = steps.select("run_id", F.col("i").alias("on_index"), F.col("mono_s").alias("t_on"))
    off = steps.select("run_id", F.col("i").alias("off_index"), F.col("mono_s").alias("t_off"))
    window = info.join(on, ["run_id", "on_index"]).join(off, ["run_id", "off_index"])
    honest = _honest_pings(pings, adv).join(window, "run_id").where(
        (F.col("sent_mono_s") >= F.col("t_on")) & (F.col("sent_mono_s") < F.col("t_off")))
    received = F.col("received").cast("long")
    to_victim = (F.col("sender") == F.col("victim")) | (F.col("target") == F.col("victim"))
    others = F.coalesce(~to_victim, F.lit(True))  # no victim (null): every ping
    by_run = honest.groupBy("run_id").agg(
        F.when(F.sum(others.cast("long")) > 0,
               F.sum(F.when(others, received)) / F.sum(others.cast("long"))).alias("delivery_honest"),
        # null, not a division by zero (an error under ANSI mode), when no victim ping fell in the window
        F.when(F.sum(to_victim.cast("long")) > 0,
               F.sum(F.when(to_victim, received)) / F.sum(to_victim.cast("long"))).alias("victim_reachability"),
        F.percentile(F.when(F.col("received") & others, F.col("stretch")), 0.5).alias("stretch"),
    )
    conv = read("convergence").join(window.select("run_id", "t_off"), "run_id").where(
        F.col("t0_s") >= F.col("t_off") - 1e-6)
    last = conv.groupBy("run_id").agg(F.max(F.struct("episode", "tree_converged_s", "snake_converged_s")).alias("e"))
    last = last.select("run_id", F.col("e.tree_converged_s").alias("tree_reconverged_s"),
                       F.col("e.snake_converged_s").alias("snake_reconverged_s"))
    control = window_control(read("events"), window.select("run_id", "t_on", "t_off"), adv)
    rows = (info.join(by_run, "run_id", "left").join(last, "run_id", "left")
            .join(control, "run_id", "left")).collect()  # fmt: skip
    out = []
    for r in rows:
        d = r.asDict()
        if not d["acted"]:  # nothing acted: nothing to recover from
            d["tree_reconverged_s"] = d["tree_reconverged_s"] if d["tree_reconverged_s"] is not None else 0.0
            d["snake_reconverged_s"] = d["snake_reconverged_s"] if d["snake_reconverged_s"] is not None else 0.0
        out.append({"run_id": d["run_id"], **{m: d.get(m) for m in METRICS}})
    return out


def window_control(events: DataFrame, window: DataFrame, adv: DataFrame) -> DataFrame:
    """(run_id, control_bytes_per_node_s) over each run's window ``[t_on, t_off]`` (``window``: run_id, t_on,
    t_off), the honest nodes only. A ``frame_stats`` emission at ``mono_s`` covers ``(mono_s - interval_s,
    mono_s]``; it counts for the share of that interval inside the window, its frames and bytes as much (the
    rate over an interval is taken as even), and so does the node-time it covers."""
    stats = events.where(F.col("event") == "frame_stats").join(
        adv.withColumnRenamed("node", "node_name"), ["run_id", "node_name"], "left_anti").join(window, "run_id")
    overlap = F.least(F.col("mono_s"), F.col("t_off")) - F.greatest(F.col("mono_s") - F.col("interval_s"),
                                                                     F.col("t_on"))  # fmt: skip
    share = F.when(F.col("interval_s") > 0, F.greatest(overlap, F.lit(0.0)) / F.col("interval_s")).otherwise(0.0)
    # each emission cut to its share of the window; overhead's own jobs then count it as any emission
    inside = stats.withColumn("share", share).where(F.col("share") > 0).select(
        *[F.col(c) for c in events.columns if c not in ("interval_s", "frames", "bytes")],
        (F.col("interval_s") * F.col("share")).alias("interval_s"),
        (F.col("frames") * F.col("share")).alias("frames"), (F.col("bytes") * F.col("share")).alias("bytes"))
    return control_per_run(overhead_by_node(inside)).select("run_id", "control_bytes_per_node_s")


def _honest_pings(pings: DataFrame, adv: DataFrame) -> DataFrame:
    """The pings whose sender and target are both honest in their run."""
    a = adv.withColumnRenamed("node", "sender")
    b = adv.withColumnRenamed("node", "target")
    return pings.join(a, ["run_id", "sender"], "left_anti").join(b, ["run_id", "target"], "left_anti")


def interval(values: Sequence[float]) -> dict[str, float | int | None]:
    """``{mean, ci_low, ci_high, n}``: the mean and its 95 % Student's t interval (None without values)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "n": 1}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = (_T95[n - 2] if n - 1 <= len(_T95) else 1.96) * sd / math.sqrt(n)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def summarize(runs: Sequence[Mapping[str, Any]], metrics_by_run: Mapping[str, Mapping[str, Any]],
              ids: Mapping[str, str], targeted: bool) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """variant -> its damage curve: ``[{fraction, metrics: {name: {mean, ci_low, ci_high, n, n_missing}}}]`` in
    fraction order (``victim_reachability`` only for a targeted attack)."""
    names = [m for m in METRICS if targeted or m != "victim_reachability"]
    out: dict[str, list[dict[str, Any]]] = {}
    for variant in dict.fromkeys(r["variant"] for r in runs):
        curve = []
        for fraction in sorted({r["fraction"] for r in runs}):
            mine = [metrics_by_run.get(ids[r["run_dir"]], {}) for r in runs
                    if r["variant"] == variant and r["fraction"] == fraction]  # fmt: skip
            metrics = {}
            for m in names:
                got = interval([x.get(m) for x in mine])
                metrics[m] = {**got, "n_missing": len(mine) - int(got["n"] or 0)}
            curve.append({"fraction": fraction, "metrics": metrics})
        out[variant] = curve
    return out
