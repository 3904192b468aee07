"""Control overhead: frames and bytes per node per second, by frame type and link class.

From ``frame_stats`` events. Each emission of a node (all its lines at one
``mono_s``) covers ``interval_s`` seconds, so a node's observed time is the sum
of ``interval_s`` over its distinct emissions: rates are exact over the time the
node reported, with no guess about when it started or stopped. Control frames
are keepalive, tree_announcement, bootstrap and wakeup_broadcast; traffic is
reported beside them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from contract.frames import CONTROL_FRAME_TYPE_NAMES
from pipeline.errors import JobInputError

__all__ = ["node_coverage", "overhead_by_node", "overhead_by_class", "control_per_run"]


def _stats(events: DataFrame) -> DataFrame:
    missing = [c for c in ("run_id", "event", "node", "mono_s", "interval_s", "direction", "frame_type",
                           "link_class", "frames", "bytes") if c not in events.columns]
    if missing:
        raise JobInputError("overhead", f"input lacks columns {missing}")
    return events.where(F.col("event") == "frame_stats")


def node_coverage(events: DataFrame) -> DataFrame:
    """events -> (run_id, node, covered_s): seconds covered by the node's frame_stats emissions."""
    emissions = _stats(events).groupBy("run_id", "node", "mono_s").agg(F.max("interval_s").alias("interval_s"))
    return emissions.groupBy("run_id", "node").agg(F.sum("interval_s").alias("covered_s"))


def overhead_by_node(events: DataFrame) -> DataFrame:
    """events (EVENTS_SCHEMA) -> OVERHEAD_NODE_SCHEMA."""
    stats = _stats(events)
    totals = stats.groupBy("run_id", "node", "direction", "frame_type", "link_class").agg(
        F.first("node_name", ignorenulls=True).alias("node_name"),
        F.sum("frames").alias("frames"), F.sum("bytes").alias("bytes"),
    )
    return totals.join(node_coverage(events), ["run_id", "node"]).select(
        "run_id", "node", "node_name", "direction", "frame_type", "link_class", "frames", "bytes", "covered_s",
        (F.col("frames") / F.col("covered_s")).alias("frames_per_s"),
        (F.col("bytes") / F.col("covered_s")).alias("bytes_per_s"),
    ).orderBy("run_id", "node", "direction", "frame_type", "link_class")


def overhead_by_class(by_node: DataFrame) -> DataFrame:
    """overhead_by_node -> OVERHEAD_CLASS_SCHEMA.

    The denominator of a link class is the covered time of every node that reported any frame
    on that class (so a node that sent no bootstrap on a class still counts as a node-second)."""
    cover = by_node.select("run_id", "node", "link_class", "covered_s").dropDuplicates(["run_id", "node", "link_class"])
    node_s = cover.groupBy("run_id", "link_class").agg(F.count("*").alias("nodes"), F.sum("covered_s").alias("node_s"))
    sums = by_node.groupBy("run_id", "link_class", "frame_type", "direction").agg(
        F.sum("frames").alias("frames"), F.sum("bytes").alias("bytes"))
    return sums.join(node_s, ["run_id", "link_class"]).select(
        "run_id", "link_class", "frame_type", "direction", "nodes", "frames", "bytes",
        (F.col("frames") / F.col("node_s")).alias("frames_per_node_s"),
        (F.col("bytes") / F.col("node_s")).alias("bytes_per_node_s"),
    ).orderBy("run_id", "link_class", "frame_type", "direction")


def control_per_run(by_node: DataFrame) -> DataFrame:
    """overhead_by_node -> (run_id, control_frames_per_node_s, control_bytes_per_node_s): control
    frames sent, per node-second of covered time."""
    sent = by_node.where((F.col("direction") == "sent") & F.col("frame_type").isin(*CONTROL_FRAME_TYPE_NAMES))
    node_s = by_node.select("run_id", "node", "covered_s").dropDuplicates(["run_id", "node"]) \
        .groupBy("run_id").agg(F.sum("covered_s").alias("node_s"))
    totals = sent.groupBy("run_id").agg(F.sum("frames").alias("frames"), F.sum("bytes").alias("bytes"))
    return node_s.join(totals, "run_id", "left").select(
        "run_id",
        (F.coalesce(F.col("frames"), F.lit(0)) / F.col("node_s")).alias("control_frames_per_node_s"),
        (F.coalesce(F.col("bytes"), F.lit(0)) / F.col("node_s")).alias("control_bytes_per_node_s"),
    )
