"""Convergence: how long each episode took to reach one root per component and an ordered snake.

Derived from the node events only (never from what the orchestrator printed),
exactly, with window functions:

1. every ``node_started`` / ``root_changed`` / ``descending_changed`` event
   updates its node's state; a window per node carries the latest root and
   descending forward (``node_started`` resets them to the node itself / null);
   events at the same instant collapse to the state after the last of them;
2. set beside the episodes, each live node's state at ``t0`` and each change
   in ``(t0, t1)`` is marked good or bad against the expected state (tree: the
   root; snake: root and descending). Each change is placed in its episode as
   of its instant (one window per node over its changes and its episodes'
   starts), not by joining every episode with every change: a run whose nodes
   move has an episode per radio tick, and the rows stay linear in both;
3. per episode, the number of bad nodes is followed instant by instant (a
   running sum of +1/-1 transitions); every instant is the ``mono_s`` of the
   last change that led into it. As the in-process observer measures:
   ``snake_converged_s`` is the first instant the snake is converged (``t0`` if
   it starts so); ``tree_converged_s`` is when the tree became converged for the
   last time before that instant (the tree the converged snake stands on), or,
   if the snake never converges, ``tree_settled_s``. ``*_settled_s``: the last
   entry into the converged state, provided it lasts until the episode ends
   (null otherwise). Converged and settled differ when the state breaks again
   later in the episode (the report shows both).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.errors import JobInputError

__all__ = ["node_states", "convergence"]

_STATE_EVENTS = ("node_started", "root_changed", "descending_changed", "peer_up", "peer_down")


def _need(df: DataFrame, cols: tuple[str, ...], job: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise JobInputError(job, f"input lacks columns {missing}")


def node_states(events: DataFrame) -> DataFrame:
    """events -> (run_id, node, mono_s, root_state, desc_state, started): each node's state after
    the last state-changing event at each instant (``started`` false before its first node_started).

    A ``peer_down`` that leaves a node without up peers resets its state as ``node_started`` does
    (PROTOCOL.md §3.7 step 2), whether or not the node logged the descending entry it dropped.
    """
    _need(events, ("run_id", "node", "event", "mono_s", "root", "descending", "file", "line_no"), "node_states")
    order = ["mono_s", "file", "line_no"]
    running = Window.partitionBy("run_id", "node").orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
    event = F.col("event")
    ev = events.where(event.isin(*_STATE_EVENTS)).select(
        "run_id", "node", "mono_s", "file", "line_no", "event", "root", "descending",
        F.when(event == "peer_up", 1).when(event == "peer_down", -1).otherwise(0).alias("peer_delta"),
        (event == "node_started").cast("int").alias("is_start"),
    )
    # up peers since the node's latest start
    ev = ev.withColumn("epoch", F.sum("is_start").over(running))
    in_epoch = Window.partitionBy("run_id", "node", "epoch").orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
    ev = ev.withColumn("peers", F.sum("peer_delta").over(in_epoch))
    reset = (event == "node_started") | ((event == "peer_down") & (F.col("peers") <= 0))
    ev = ev.select(
        "run_id", "node", "mono_s", "file", "line_no", "is_start",
        F.when(reset, F.struct(F.col("node").alias("v")))
        .when(event == "root_changed", F.struct(F.col("root").alias("v"))).alias("root_upd"),
        F.when(reset, F.struct(F.lit(None).cast("string").alias("v")))
        .when(event == "descending_changed", F.struct(F.col("descending").alias("v"))).alias("desc_upd"),
    )
    states = ev.select(
        "run_id", "node", "mono_s", "file", "line_no",
        F.last("root_upd", ignorenulls=True).over(running)["v"].alias("root_state"),
        F.last("desc_upd", ignorenulls=True).over(running)["v"].alias("desc_state"),
        F.max("is_start").over(running).alias("started"),
    )
    last_at_instant = Window.partitionBy("run_id", "node", "mono_s").orderBy(F.desc("file"), F.desc("line_no"))
    return (
        states.withColumn("_rank", F.row_number().over(last_at_instant))
        .where("_rank = 1")
        .select("run_id", "node", "mono_s", "root_state", "desc_state", (F.col("started") == 1).alias("started"))
    )


def _good(kind: str) -> Column:
    tree = F.col("started") & (F.col("root_state") == F.col("expected_root"))
    if kind == "tree":
        return F.coalesce(tree, F.lit(False))
    return F.coalesce(tree & F.col("desc_state").eqNullSafe(F.col("expected_descending")), F.lit(False))


def _timeline(node_rows: DataFrame, kind: str) -> tuple[DataFrame, DataFrame]:
    """Per episode: ``initial`` (run_id, episode, bad0, t0_s) and ``steps`` (run_id, episode, mono_s,
    bad_before, bad_after): the number of live nodes not in the expected state, instant by instant."""
    ep_keys = ["run_id", "episode"]
    per_node = Window.partitionBy("run_id", "episode", "node").orderBy("is_init_order", "mono_s")
    marked = node_rows.withColumn("bad", 1 - _good(kind).cast("int"))
    marked = marked.withColumn("prev_bad", F.lag("bad").over(per_node))
    initial = marked.where("is_init").groupBy(*ep_keys).agg(F.sum("bad").alias("bad0"), F.first("t0_s").alias("t0_s"))
    deltas = (
        marked.where(~F.col("is_init") & (F.col("bad") != F.col("prev_bad")))
        .groupBy(*ep_keys, "mono_s")
        .agg(F.sum(F.col("bad") - F.col("prev_bad")).alias("delta"))
    )
    timeline = Window.partitionBy(*ep_keys).orderBy("mono_s").rowsBetween(Window.unboundedPreceding, 0)
    steps = deltas.join(initial.select(*ep_keys, "bad0"), ep_keys).select(
        *ep_keys, "mono_s", (F.col("bad0") + F.sum("delta").over(timeline)).alias("bad_after"), "delta"
    ).select(*ep_keys, "mono_s", "bad_after", (F.col("bad_after") - F.col("delta")).alias("bad_before"))
    return initial, steps


def _instants(initial: DataFrame, steps: DataFrame, prefix: str, until: DataFrame | None = None) -> DataFrame:
    """(run_id, episode, <prefix>_first, <prefix>_settled[, <prefix>_at]) instants.

    first: the first instant with nobody bad; settled: the last entry into that state, if it lasts to
    the end of the episode; at (only with ``until`` = (run_id, episode, until_s)): the last entry at or
    before ``until_s``, or ``settled`` where ``until_s`` is null.
    """
    ep_keys = ["run_id", "episode"]
    entry = (F.col("bad_before") > 0) & (F.col("bad_after") == 0)
    aggs = [
        F.max_by("bad_after", "mono_s").alias("bad_end"),
        F.max(F.when(entry, F.col("mono_s"))).alias("last_entry"),
        F.min(F.when(F.col("bad_after") == 0, F.col("mono_s"))).alias("first_good"),
    ]
    if until is not None:
        steps = steps.join(until, ep_keys, "left")
        aggs.append(F.max(F.when(entry & (F.col("mono_s") <= F.col("until_s")), F.col("mono_s"))).alias("entry_until"))
    agg = steps.groupBy(*ep_keys).agg(*aggs)
    out = initial.join(agg, ep_keys, "left")
    ended_good = F.coalesce(F.col("bad_end"), F.col("bad0")) == 0
    settled = F.when(ended_good, F.coalesce(F.col("last_entry"), F.col("t0_s")))
    cols = [
        *ep_keys,
        F.when(F.col("bad0") == 0, F.col("t0_s")).otherwise(F.col("first_good")).alias(f"{prefix}_first"),
        settled.alias(f"{prefix}_settled"),
    ]
    if until is not None:
        out = out.join(until, ep_keys, "left")
        at_until = F.coalesce(F.col("entry_until"), F.when(F.col("bad0") == 0, F.col("t0_s")))
        cols.append(F.when(F.col("until_s").isNull(), settled).otherwise(at_until).alias(f"{prefix}_at"))
    return out.select(*cols)


def _episode_states(episodes: DataFrame, states: DataFrame) -> DataFrame:
    """Per episode and live node: its state at ``t0`` (``is_init``: the latest at or before ``t0``, blank and not
    started if none) and each state change in ``(t0, t1)``, with the episode's expected state.

    As of: the node's episode starts (markers) and its state changes in one window per node, in time order, a change
    at an episode's ``t0`` before the marker (it is the state at ``t0``, in no episode's window): a marker takes the
    latest change before it, a change the latest marker before it (of the higher episode at one instant), and is in
    that episode's window when before its ``t1`` (the node may have left the episodes since)."""
    keys = ["run_id", "node"]
    expect = ["episode", "t0_s", "t1_s", "expected_root", "expected_descending"]
    markers = episodes.select(*keys, *expect, F.col("t0_s").alias("mono_s"), F.lit(1).alias("_marker"),
                              F.struct(*expect).alias("_ep"))
    changes = states.select(*keys, "mono_s", F.lit(0).alias("_marker"),
                            F.struct("root_state", "desc_state", "started").alias("_state"))
    order = Window.partitionBy(*keys).orderBy("mono_s", "_marker", "episode").rowsBetween(Window.unboundedPreceding, 0)
    both = markers.unionByName(changes, allowMissingColumns=True).select(
        *keys, "mono_s", "_marker", F.last("_state", ignorenulls=True).over(order).alias("_state"),
        F.last("_ep", ignorenulls=True).over(order).alias("_ep"))
    ep = [F.col("_ep")[c].alias(c) for c in expect]
    at_t0 = both.where(F.col("_marker") == 1).select(
        "run_id", *ep, "node", F.col("_ep.t0_s").alias("mono_s"), F.col("_state.root_state").alias("root_state"),
        F.col("_state.desc_state").alias("desc_state"),
        F.coalesce(F.col("_state.started"), F.lit(False)).alias("started"), F.lit(True).alias("is_init"))
    in_window = both.where(
        (F.col("_marker") == 0) & (F.col("mono_s") > F.col("_ep.t0_s"))
        & (F.col("_ep.t1_s").isNull() | (F.col("mono_s") < F.col("_ep.t1_s")))
    ).select("run_id", *ep, "node", "mono_s", F.col("_state.root_state").alias("root_state"),
             F.col("_state.desc_state").alias("desc_state"), F.col("_state.started").alias("started"),
             F.lit(False).alias("is_init"))
    return at_t0.unionByName(in_window)


def convergence(events: DataFrame, episodes: DataFrame, bounds: DataFrame) -> DataFrame:
    """events (EVENTS_SCHEMA), episodes (EPISODES_SCHEMA), bounds (episodes.run_bounds) -> CONVERGENCE_SCHEMA.

    Raises JobInputError when a DataFrame lacks a needed column.
    """
    _need(episodes, ("run_id", "episode", "t0_s", "t1_s", "node", "component", "expected_root",
                     "expected_descending"), "convergence")
    rows = _episode_states(episodes, node_states(events))
    rows = rows.withColumn("is_init_order", F.when(F.col("is_init"), 0).otherwise(1))
    # Materialize ``rows`` once: the snake and the tree timelines (and the tree's join with the snake's
    # instants) all derive from it. Planned as one query, pyspark 4.3.0 returned null convergence times for
    # nearly every episode as soon as its joins were sort-merge joins (inputs over the 10 MB
    # broadcast threshold: a 40-run A/B analysis; or any input with spark.sql.autoBroadcastJoinThreshold=-1),
    # and the right values with broadcast joins. Materialized, both plans agree
    # (tests/pipeline/test_real_runs.py::test_convergence_is_the_same_when_spark_plans_no_broadcast_join).
    rows = rows.localCheckpoint(eager=True)
    snake = _instants(*_timeline(rows, "snake"), "snake").localCheckpoint(eager=True)
    until = snake.select("run_id", "episode", F.col("snake_first").alias("until_s"))
    tree = _instants(*_timeline(rows, "tree"), "tree", until)
    summary = episodes.groupBy("run_id", "episode").agg(
        F.first("action").alias("action"), F.first("target").alias("target"), F.first("t0_s").alias("t0_s"),
        F.count("*").alias("live_nodes"), F.countDistinct("component").alias("components"),
    )
    return (
        summary.join(tree, ["run_id", "episode"], "left").join(snake, ["run_id", "episode"], "left")
        .join(bounds.select("run_id", "start_s"), "run_id", "left")
        .select(
            "run_id", "episode", "action", "target", "t0_s",
            (F.col("t0_s") - F.col("start_s")).alias("t0_rel_s"),
            "live_nodes", "components",
            (F.col("tree_at") - F.col("t0_s")).alias("tree_converged_s"),
            (F.col("snake_first") - F.col("t0_s")).alias("snake_converged_s"),
            (F.col("tree_settled") - F.col("t0_s")).alias("tree_settled_s"),
            (F.col("snake_settled") - F.col("t0_s")).alias("snake_settled_s"),
        )
        .orderBy("run_id", "episode")
    )
