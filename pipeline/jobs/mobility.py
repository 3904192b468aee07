"""Runs whose nodes move: radio links coming and going over time, and delivery among connected pairs against that
churn and against the nodes' speed (docs/pipeline.md, "Mobility"; docs/mobility.md).

Inputs: the runs' ``mobility.jsonl`` rows (schemas.MOBILITY_SCHEMA, read on the driver by pipeline.mobility_reads),
their pings (PINGS_SCHEMA) and the run bounds (episodes.run_bounds: a run's clock starts at its first
``node_started``). A ping counts as **connected** when its pair was joined by a path in the live graph (fixed and
radio links) when it was recorded: pings.jsonl ``shortest_links`` is not null; a ping between nodes in different
components is **disconnected** (it is expected to be lost, and is counted apart). Only runs with a ``mobility.jsonl``
appear.

Per run, ``mobility_runs`` also gives the stretch of the delivered connected pings (``delivery.enrich_pings``'s, the
in-process observer's: path links over shortest-path links) and, given the runs' events, the control frames and
bytes sent per node-second of reported time (``overhead.control_per_run`` over ``overhead.overhead_by_node``: each
node's own ``frame_stats`` coverage, no guess about when it started or stopped), so delivery, stretch and overhead
stand beside the mean speed; and, given the convergence table, its radio episodes (``radio_convergence``: every
instant with a radio link change opens one, pipeline.jobs.episodes): how many, the share whose tree and snake
converged before the next episode began (a radio episode cut short by the next change is censored: not converged),
and the median convergence time of those that did.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline import schemas
from pipeline.errors import JobInputError
from pipeline.jobs.delivery import enrich_pings
from pipeline.jobs.episodes import RADIO_ACTION
from pipeline.jobs.overhead import control_per_run, overhead_by_node

__all__ = ["mobility_runs", "mobility_timeline", "radio_convergence"]


def _ping_counts(pings: DataFrame, keys: list[str]) -> DataFrame:
    connected = F.col("shortest_links").isNotNull()
    received = F.col("received")
    sent_c = F.sum(connected.cast("long"))
    got_c = F.sum((connected & received).cast("long"))
    return pings.groupBy(*keys).agg(
        sent_c.alias("connected_sent"), got_c.alias("connected_received"),
        F.sum((~connected).cast("long")).alias("disconnected_sent"),
        F.sum((~connected & received).cast("long")).alias("disconnected_received"),
    )


def _ratio(received: str, sent: str) -> F.Column:
    return F.when(F.col(sent) > 0, F.col(received) / F.col(sent)).cast("double")


def _check(mobility: DataFrame, pings: DataFrame) -> None:
    missing = [c for c in ("run_id", "mono_s", "kind", "node", "x_m", "y_m", "cause", "line_no")
               if c not in mobility.columns]
    missing += [c for c in ("run_id", "sent_mono_s", "received", "shortest_links") if c not in pings.columns]
    if missing:
        raise JobInputError("mobility", f"input lacks columns {missing}")


def mobility_timeline(mobility: DataFrame, pings: DataFrame, bounds: DataFrame, bin_s: float = 5.0) -> DataFrame:
    """mobility rows, pings, bounds -> MOBILITY_TIMELINE_SCHEMA: per ``bin_s`` bin since the run start, the radio
    link ups (after the start) and downs, the radio links up at the bin's end, and the pings sent in the bin, by
    whether their pair was connected."""
    if bin_s <= 0:
        raise JobInputError("mobility_timeline", f"bin_s must be > 0, got {bin_s}")
    _check(mobility, pings)
    start = bounds.select("run_id", "start_s")
    links = mobility.where(F.col("kind").isin("link_up", "link_down")).join(start, "run_id")
    links = links.withColumn("t_bin_s", (F.floor((F.col("mono_s") - F.col("start_s")) / bin_s) * bin_s).cast("double"))
    up = F.col("kind") == "link_up"
    per_bin = links.groupBy("run_id", "t_bin_s").agg(
        F.sum((up & (F.col("cause") != "start")).cast("long")).alias("link_ups"),
        F.sum((~up).cast("long")).alias("link_downs"),
        F.sum(F.when(up, 1).otherwise(-1)).cast("long").alias("_net"),
    )
    moving = mobility.select("run_id").distinct()
    sent = pings.join(moving, "run_id").join(start, "run_id").withColumn(
        "t_bin_s", (F.floor((F.col("sent_mono_s") - F.col("start_s")) / bin_s) * bin_s).cast("double"))
    both = per_bin.join(_ping_counts(sent, ["run_id", "t_bin_s"]), ["run_id", "t_bin_s"], "full")
    counts = ["link_ups", "link_downs", "_net", "connected_sent", "connected_received", "disconnected_sent",
              "disconnected_received"]
    both = both.fillna(0, subset=counts)
    upto = Window.partitionBy("run_id").orderBy("t_bin_s").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return both.select(
        "run_id", "t_bin_s", "link_ups", "link_downs", F.sum("_net").over(upto).cast("long").alias("radio_links"),
        "connected_sent", "connected_received", _ratio("connected_received", "connected_sent").alias(
            "connected_delivery"), "disconnected_sent", "disconnected_received",
    ).orderBy("run_id", "t_bin_s")


def _stretch(pings: DataFrame) -> DataFrame:
    """(run_id, stretch_mean, stretch_median) of the delivered pings with a known shortest path: the stretch of
    ``delivery.enrich_pings`` (no actions or bounds: only the stretch is read), its mean and exact median."""
    spark = pings.sparkSession
    no_actions = spark.createDataFrame([], schemas.ACTIONS_SCHEMA)
    no_bounds = spark.createDataFrame([], "run_id string, start_s double, end_s double")
    return enrich_pings(pings, no_actions, no_bounds).groupBy("run_id").agg(
        F.mean("stretch").alias("stretch_mean"), F.percentile("stretch", 0.5).alias("stretch_median"))


def _control(events: DataFrame | None, moving: DataFrame) -> DataFrame:
    """(run_id, control_frames_per_node_s, control_bytes_per_node_s) of the moving runs (``overhead``'s)."""
    if events is None:
        return moving.select("run_id", F.lit(None).cast("double").alias("control_frames_per_node_s"),
                             F.lit(None).cast("double").alias("control_bytes_per_node_s"))
    return control_per_run(overhead_by_node(events.join(moving, "run_id")))


_RADIO_COLS = ("radio_episodes", "radio_tree_converged_share", "radio_snake_converged_share", "radio_tree_median_s",
               "radio_snake_median_s")


def radio_convergence(convergence: DataFrame) -> DataFrame:
    """convergence (CONVERGENCE_SCHEMA) -> (run_id, radio_episodes, radio_tree_converged_share,
    radio_snake_converged_share, radio_tree_median_s, radio_snake_median_s) of the runs with radio episodes: their
    number, the share whose tree / snake converged within the episode (``*_converged_s`` not null), and the exact
    median of those convergence times."""
    missing = [c for c in ("run_id", "action", "tree_converged_s", "snake_converged_s") if c not in convergence.columns]
    if missing:
        raise JobInputError("radio_convergence", f"input lacks columns {missing}")
    share = [F.avg(F.col(f"{kind}_converged_s").isNotNull().cast("double")).alias(f"radio_{kind}_converged_share")
             for kind in ("tree", "snake")]
    medians = [F.percentile(f"{kind}_converged_s", 0.5).alias(f"radio_{kind}_median_s") for kind in ("tree", "snake")]
    return convergence.where(F.col("action") == RADIO_ACTION).groupBy("run_id").agg(
        F.count("*").alias("radio_episodes"), *share, *medians)


def _radio(convergence: DataFrame | None, moving: DataFrame) -> DataFrame:
    """``radio_convergence`` of the moving runs (0 episodes for one without any), or its columns null when the
    convergence table is not given."""
    if convergence is None:
        return moving.select("run_id", F.lit(None).cast("long").alias("radio_episodes"),
                             *[F.lit(None).cast("double").alias(c) for c in _RADIO_COLS[1:]])
    radio = moving.join(radio_convergence(convergence.join(moving, "run_id")), "run_id", "left")
    return radio.fillna(0, subset=["radio_episodes"])


def mobility_runs(mobility: DataFrame, pings: DataFrame, bad: DataFrame, events: DataFrame | None = None,
                  convergence: DataFrame | None = None) -> DataFrame:
    """mobility rows, pings, bad lines (run_id, bad_lines), events, convergence -> MOBILITY_RUNS_SCHEMA: per run, the
    nodes that moved, the time from its first to its last position line (``moved_s``), their mean speed (each node's
    path between its position lines, summed, over nodes and ``moved_s``), radio link changes (per second of
    ``moved_s``), delivery among connected pairs, the stretch of the delivered ones, control frames and bytes sent
    per node-second (null without ``events``, or for a run without ``frame_stats``) and its radio episodes
    (``radio_convergence``; null without ``convergence``)."""
    _check(mobility, pings)
    moving = mobility.select("run_id").distinct()
    pings = pings.join(moving, "run_id")
    pos = mobility.where(F.col("kind") == "position")
    per_node = Window.partitionBy("run_id", "node").orderBy("mono_s", "line_no")
    step = F.sqrt((F.col("x_m") - F.lag("x_m").over(per_node)) ** 2 + (F.col("y_m") - F.lag("y_m").over(per_node)) ** 2)
    moved = pos.withColumn("_step", step).groupBy("run_id").agg(
        F.countDistinct("node").alias("nodes"), (F.max("mono_s") - F.min("mono_s")).alias("moved_s"),
        F.sum(F.coalesce("_step", F.lit(0.0))).alias("_path_m"))
    changes = mobility.groupBy("run_id").agg(
        F.sum(((F.col("kind") == "link_up") & (F.col("cause") != "start")).cast("long")).alias("link_ups"),
        F.sum((F.col("kind") == "link_down").cast("long")).alias("link_downs"))
    runs = changes.join(moved, "run_id", "left").join(bad, "run_id", "left")
    runs = runs.join(_ping_counts(pings, ["run_id"]), "run_id", "left").join(_stretch(pings), "run_id", "left")
    runs = runs.join(_control(events, moving), "run_id", "left").join(_radio(convergence, moving), "run_id", "left")
    runs = runs.fillna(0, subset=["nodes", "connected_sent", "connected_received", "disconnected_sent",
                                  "disconnected_received", "bad_lines"])
    per_s = F.when(F.col("moved_s") > 0, F.col("_path_m") / F.col("nodes") / F.col("moved_s"))
    return runs.select(
        "run_id", F.col("nodes").cast("long"), F.col("moved_s").cast("double"), per_s.cast("double").alias(
            "mean_speed_mps"), "link_ups", "link_downs",
        F.when(F.col("moved_s") > 0, (F.col("link_ups") + F.col("link_downs")) / F.col("moved_s")).cast(
            "double").alias("changes_per_s"),
        "connected_sent", "connected_received", _ratio("connected_received", "connected_sent").alias(
            "connected_delivery"), "disconnected_sent", "disconnected_received", F.col("bad_lines").cast("long"),
        "stretch_mean", "stretch_median", "control_frames_per_node_s", "control_bytes_per_node_s", *_RADIO_COLS,
    ).orderBy("run_id")
