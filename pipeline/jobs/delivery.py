"""Delivery and stretch, from pings.jsonl.

Each ping is placed in its run's timeline: the episode it was sent in, the
time since the last disruptive action (or since the run start), its sent time
relative to the run start. Stretch follows the in-process observer: PROTOCOL.md
§8 hops are links + 1, so stretch = (hops - 1) / shortest_links, on delivered
pings with a known shortest path. The class mix of a ping is the sorted set of
link classes on its shortest path (``contract.class_mix``: joined by '+').
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline.errors import JobInputError
from pipeline.jobs.episodes import EPISODE_ACTIONS

__all__ = ["SINCE_BUCKETS_S", "enrich_pings", "delivery_summary", "delivery_timeline", "delivery_by_episode"]

#: Upper bounds (s) of the "time since the last disruption" buckets; the last bucket is open.
SINCE_BUCKETS_S: tuple[float, ...] = (1.0, 5.0, 30.0, 120.0)


def _bucket(col_name: str, bounds: Sequence[float]) -> F.Column:
    col = F.col(col_name)
    expr = None
    lower = 0.0
    for upper in bounds:
        label = f"{lower:g}-{upper:g}s"
        expr = F.when(col < upper, label) if expr is None else expr.when(col < upper, label)
        lower = upper
    return expr.otherwise(f">={lower:g}s")


def enrich_pings(pings: DataFrame, actions: DataFrame, bounds: DataFrame,
                 radio_marks: DataFrame | None = None) -> DataFrame:
    """pings (PINGS_SCHEMA), actions (ACTIONS_SCHEMA), bounds (episodes.run_bounds) and, for runs whose nodes
    move, the instants radio link changes open episodes (``radio_marks``: run_id, t; ``episodes.radio_openings``)
    -> PINGS_ENRICHED_SCHEMA.

    ``episode`` counts the episode-opening actions and radio instants at or before the send time (0 = run start),
    as the episodes table numbers them; a ping sent at such an instant belongs to the new episode.
    ``since_disruption_s`` counts from the last action (the faults), never from a radio change.
    """
    for df, cols in ((pings, ("run_id", "sent_mono_s", "hops", "shortest_links", "link_classes")),
                     (actions, ("run_id", "mono_s", "action"))):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise JobInputError("enrich_pings", f"input lacks columns {missing}")
    marks = actions.where(F.col("action").isin(*EPISODE_ACTIONS)).select(
        "run_id", F.col("mono_s").alias("t"), F.lit(0).alias("kind"), F.col("mono_s").alias("mark"),
        F.lit(None).cast("long").alias("pid"),
    )
    if radio_marks is not None:  # an episode each, but no disruption: no mark for since_disruption_s
        marks = marks.unionByName(radio_marks.select(
            "run_id", F.col("t").cast("double").alias("t"), F.lit(0).alias("kind"),
            F.lit(None).cast("double").alias("mark"), F.lit(None).cast("long").alias("pid")))
    with_id = pings.withColumn("pid", F.monotonically_increasing_id())
    points = with_id.select("run_id", F.col("sent_mono_s").alias("t"), F.lit(1).alias("kind"),
                            F.lit(None).cast("double").alias("mark"), "pid")
    asof = Window.partitionBy("run_id").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, 0)
    placed = (
        marks.unionByName(points)
        .select("pid", F.last("mark", ignorenulls=True).over(asof).alias("last_mark"),
                F.sum(1 - F.col("kind")).over(asof).alias("episode"), "kind")
        .where("kind = 1")
        .drop("kind")
    )
    p = with_id.join(placed, "pid").join(bounds.select("run_id", "start_s"), "run_id", "left")
    since_ref = F.coalesce(F.col("last_mark"), F.col("start_s"))
    links = F.col("hops") - 1
    return p.select(
        "run_id", "sender", "target", "mode", "sent_mono_s",
        (F.col("sent_mono_s") - F.col("start_s")).alias("sent_rel_s"),
        F.col("episode").cast("long").alias("episode"),
        "received", "rtt_ms", "hops", "shortest_links",
        F.when(F.col("received"), links).alias("path_links"),
        F.when(F.col("received") & (F.col("shortest_links") > 0), links / F.col("shortest_links")).alias("stretch"),
        F.array_join(F.array_sort(F.array_distinct("link_classes")), "+").alias("class_mix"),
        (F.col("sent_mono_s") - since_ref).alias("since_disruption_s"),
    ).withColumn("since_bucket", _bucket("since_disruption_s", SINCE_BUCKETS_S))


def _stats(df: DataFrame, keys: Sequence[str]) -> DataFrame:
    return df.groupBy(*keys).agg(
        F.count("*").alias("sent"),
        F.sum(F.col("received").cast("long")).alias("received"),
        (F.sum(F.col("received").cast("long")) / F.count("*")).alias("delivery_ratio"),
        F.mean("stretch").alias("stretch_mean"),
        F.percentile("stretch", 0.5).alias("stretch_median"),
        F.percentile("stretch", 0.95).alias("stretch_p95"),
        F.max("stretch").alias("stretch_max"),
        F.percentile("rtt_ms", 0.5).alias("rtt_median_ms"),
    )


def delivery_summary(enriched: DataFrame) -> DataFrame:
    """enriched pings -> DELIVERY_SCHEMA: by run, mode, class mix, hop distance and time since disruption.

    Percentiles are exact (linear interpolation, as numpy and the observer)."""
    keys = ["run_id", "mode", "class_mix", "shortest_links", "since_bucket"]
    return _stats(enriched, keys).orderBy(*keys)


def delivery_by_episode(enriched: DataFrame) -> DataFrame:
    """enriched pings -> (run_id, episode, sent, received, delivery_ratio, stretch stats, rtt_median_ms)."""
    return _stats(enriched, ["run_id", "episode"]).orderBy("run_id", "episode")


def delivery_timeline(enriched: DataFrame, bin_s: float = 5.0) -> DataFrame:
    """enriched pings -> DELIVERY_TIMELINE_SCHEMA: delivery per run, mode and ``bin_s`` bin of sent_rel_s."""
    if bin_s <= 0:
        raise JobInputError("delivery_timeline", f"bin_s must be > 0, got {bin_s}")
    binned = enriched.withColumn("t_bin_s", F.floor(F.col("sent_rel_s") / bin_s) * bin_s)
    return binned.groupBy("run_id", "mode", "t_bin_s").agg(
        F.count("*").alias("sent"),
        F.sum(F.col("received").cast("long")).alias("received"),
        (F.sum(F.col("received").cast("long")) / F.count("*")).alias("delivery_ratio"),
    ).select("run_id", "mode", F.col("t_bin_s").cast("double").alias("t_bin_s"), "sent", "received",
             "delivery_ratio").orderBy("run_id", "mode", "t_bin_s")
