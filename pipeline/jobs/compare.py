"""Comparison: one row of headline metrics per run, and the same metrics side by side per group of runs.

``run_summary`` joins the per-run results with the run's meta fields;
``compare`` groups runs by any of those meta fields (backend, variant,
topology, class_mix, clock, n_nodes, ...) and reports, per group, the number
of runs and the mean of every metric (plus the worst convergence).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.errors import JobInputError

__all__ = ["META_FIELDS", "METRICS", "GROUPINGS", "run_summary", "compare"]

#: Columns of ``run_summary`` that describe a run (what ``compare`` may group by).
META_FIELDS = ("run_id", "backend", "variant", "topology", "class_mix", "clock", "n_nodes", "seed")

#: The groupings the analysis writes (compare_<field> tables) and the report shows.
GROUPINGS = ("variant", "backend", "topology", "class_mix")

#: Numeric columns of ``run_summary``, in report order.
METRICS = (
    "start_tree_s", "start_snake_s", "disruption_tree_max_s", "disruption_snake_max_s", "episodes_unconverged",
    "pings_sent", "delivery_ratio", "stretch_median", "control_bytes_per_node_s", "control_frames_per_node_s",
    "root_changes_per_node", "parent_changes_per_node",
)


def run_summary(
    runs: DataFrame,
    convergence: DataFrame,
    enriched_pings: DataFrame,
    control: DataFrame,
    churn_nodes: DataFrame,
) -> DataFrame:
    """runs (RUNS_SCHEMA), convergence (CONVERGENCE_SCHEMA), enriched pings, control
    (overhead.control_per_run), churn_nodes (churn.churn_by_node) -> RUN_SUMMARY_SCHEMA."""
    conv = convergence.groupBy("run_id").agg(
        F.max(F.when(F.col("episode") == 0, F.col("tree_converged_s"))).alias("start_tree_s"),
        F.max(F.when(F.col("episode") == 0, F.col("snake_converged_s"))).alias("start_snake_s"),
        F.max(F.when(F.col("episode") > 0, F.col("tree_converged_s"))).alias("disruption_tree_max_s"),
        F.max(F.when(F.col("episode") > 0, F.col("snake_converged_s"))).alias("disruption_snake_max_s"),
        F.sum(F.col("snake_converged_s").isNull().cast("long")).alias("episodes_unconverged"),
    )
    pings = enriched_pings.groupBy("run_id").agg(
        F.count("*").alias("pings_sent"),
        (F.sum(F.col("received").cast("long")) / F.count("*")).alias("delivery_ratio"),
        F.percentile("stretch", 0.5).alias("stretch_median"),
    )
    churn = churn_nodes.groupBy("run_id").agg(
        F.sum("root_changes").alias("roots"), F.sum("parent_changes").alias("parents"))
    meta = runs.select("run_id", "backend", "variant", "topology", "class_mix", "clock", "n_nodes", "seed")
    joined = (meta.join(conv, "run_id", "left").join(pings, "run_id", "left").join(control, "run_id", "left")
              .join(churn, "run_id", "left"))
    return joined.select(
        *META_FIELDS,
        *[c for c in METRICS if c not in ("root_changes_per_node", "parent_changes_per_node")],
        (F.coalesce(F.col("roots"), F.lit(0)) / F.col("n_nodes")).alias("root_changes_per_node"),
        (F.coalesce(F.col("parents"), F.lit(0)) / F.col("n_nodes")).alias("parent_changes_per_node"),
    ).orderBy("run_id")


def compare(summary: DataFrame, by: Sequence[str]) -> DataFrame:
    """run_summary -> one row per group of ``by`` (meta fields): runs, then ``<metric>_mean`` for every
    metric and ``<metric>_max`` for the convergence ones. Raises JobInputError for an unknown field."""
    unknown = [b for b in by if b not in META_FIELDS]
    if not by or unknown:
        raise JobInputError("compare", f"group by one or more of {', '.join(META_FIELDS)}; got {list(by)}")
    aggs = [F.count("*").alias("runs")]
    for m in METRICS:
        aggs.append(F.mean(m).alias(f"{m}_mean"))
        if m.endswith("_s"):
            aggs.append(F.max(m).alias(f"{m}_max"))
    return summary.groupBy(*by).agg(*aggs).orderBy(*by)
