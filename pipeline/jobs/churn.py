"""Churn: root and parent changes over time, per run and per node.

A root change is a ``root_changed`` event whose root key differs from the
node's previous root (a sequence bump of the same root is not a change, as in
the in-process observer); every ``parent_changed`` event is a parent change.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline.errors import JobInputError

__all__ = ["changes", "churn_timeline", "churn_by_node"]


def changes(events: DataFrame) -> DataFrame:
    """events -> (run_id, node, node_name, mono_s, kind) with kind 'root' or 'parent'."""
    missing = [c for c in ("run_id", "node", "event", "mono_s", "root", "file", "line_no") if c not in events.columns]
    if missing:
        raise JobInputError("churn", f"input lacks columns {missing}")
    roots = events.where(F.col("event") == "root_changed")
    per_node = Window.partitionBy("run_id", "node").orderBy("mono_s", "file", "line_no")
    roots = roots.withColumn("_prev", F.lag("root").over(per_node)).where(
        F.col("_prev").isNull() | (F.col("_prev") != F.col("root")))
    parents = events.where(F.col("event") == "parent_changed")
    cols = ["run_id", "node", "node_name", "mono_s"]
    return roots.select(*cols, F.lit("root").alias("kind")).unionByName(
        parents.select(*cols, F.lit("parent").alias("kind")))


def churn_timeline(events: DataFrame, bounds: DataFrame, bin_s: float = 1.0) -> DataFrame:
    """events, bounds (episodes.run_bounds) -> CHURN_SCHEMA: changes per ``bin_s`` bin since the run start."""
    if bin_s <= 0:
        raise JobInputError("churn_timeline", f"bin_s must be > 0, got {bin_s}")
    ch = changes(events).join(bounds.select("run_id", "start_s"), "run_id")
    binned = ch.withColumn("t_bin_s", (F.floor((F.col("mono_s") - F.col("start_s")) / bin_s) * bin_s).cast("double"))
    return binned.groupBy("run_id", "t_bin_s").agg(
        F.sum((F.col("kind") == "root").cast("long")).alias("root_changes"),
        F.sum((F.col("kind") == "parent").cast("long")).alias("parent_changes"),
        F.countDistinct("node").alias("nodes_changing"),
    ).orderBy("run_id", "t_bin_s")


def churn_by_node(events: DataFrame) -> DataFrame:
    """events -> (run_id, node, node_name, root_changes, parent_changes)."""
    return changes(events).groupBy("run_id", "node").agg(
        F.first("node_name", ignorenulls=True).alias("node_name"),
        F.sum((F.col("kind") == "root").cast("long")).alias("root_changes"),
        F.sum((F.col("kind") == "parent").cast("long")).alias("parent_changes"),
    ).orderBy("run_id", "node")
