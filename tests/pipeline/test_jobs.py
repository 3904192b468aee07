"""The analysis jobs, DataFrame in -> DataFrame out, on small hand-made inputs with known answers."""

from __future__ import annotations

import json

import pytest

from pipeline import schemas
from pipeline.errors import JobInputError
from pipeline.jobs import churn, compare, convergence, delivery, episodes, overhead
from pipeline.jobs.episodes import Action, plan_episodes
from tests.pipeline.conftest import assert_frames_equal

KA, KB, KC, KD = ("1" * 64, "2" * 64, "a" * 64, "f" * 64)  # key order: A < B < C < D
NODES = {"a": KA, "b": KB, "c": KC, "d": KD}
LINE = [("a", "b"), ("b", "c"), ("c", "d")]


# --------------------------------------------------------------------------- episodes (plain Python)


def test_plan_start_kill_partition_heal():
    acts = [
        Action(10.0, "kill_root", "d"),
        Action(20.0, "partition", None, {"links": ["a--b"]}),
        Action(30.0, "heal", None, None),
        Action(35.0, "converged", None),  # not an episode
    ]
    eps = plan_episodes(NODES, LINE, acts, t_start=0.5)
    assert [(e["episode"], e["action"], e["t0_s"], e["t1_s"]) for e in eps] == [
        (0, "start", 0.5, 10.0), (1, "kill_root", 10.0, 20.0), (2, "partition", 20.0, 30.0), (3, "heal", 30.0, None)]
    assert eps[0]["expected"] == {KA: (0, KD, None), KB: (0, KD, KA), KC: (0, KD, KB), KD: (0, KD, KC)}
    assert eps[1]["expected"] == {KA: (0, KC, None), KB: (0, KC, KA), KC: (0, KC, KB)}
    assert eps[2]["expected"] == {KA: (0, KA, None), KB: (1, KC, None), KC: (1, KC, KB)}
    assert eps[3]["expected"] == eps[1]["expected"]


def test_plan_groups_restart_and_link_actions():
    acts = [
        Action(1.0, "partition", None, {"groups": [["a", "b"], ["c", "d"]]}),
        Action(2.0, "link_up", "b--c"),
        Action(3.0, "kill", "a"),
        Action(4.0, "restart", "a"),
        Action(5.0, "link_change", "c--d", {"class": "lte"}),
    ]
    eps = plan_episodes(NODES, LINE, acts, t_start=0.0)
    assert {k: v[1] for k, v in eps[1]["expected"].items()} == {KA: KB, KB: KB, KC: KD, KD: KD}
    assert {k: v[1] for k, v in eps[2]["expected"].items()} == dict.fromkeys(NODES.values(), KD)
    assert KA not in eps[3]["expected"] and KA in eps[4]["expected"]
    assert eps[5]["expected"] == eps[4]["expected"]


@pytest.mark.parametrize("act, what", [
    (Action(1.0, "kill", "zz"), "unknown node"),
    (Action(1.0, "link_down", "a--d"), "unknown link"),
    (Action(1.0, "link_down", "a-d"), "is not a link"),
    (Action(1.0, "partition", None, {}), "needs 'links' or 'groups'"),
])
def test_plan_rejects_bad_actions(act, what):
    with pytest.raises(JobInputError, match=what):
        plan_episodes(NODES, LINE, [act], 0.0)


# --------------------------------------------------------------------------- convergence (Spark)


def ev(node: str, t: float, event: str, line: int, **fields) -> dict:
    row = dict.fromkeys(schemas.EVENTS_SCHEMA.fieldNames())
    row.update(run_id="r", v=1, event=event, node=NODES[node], node_name=node, mono_s=t, wall_ts=t,
               file=f"/{node}.jsonl", line_no=line)
    row.update(fields)
    return row


def frame(spark, rows, schema):
    return spark.createDataFrame([tuple(r.get(n) for n in schema.fieldNames()) for r in rows], schema)


def story() -> list[dict]:
    """Line a-b-c-d. Tree converges at 2.0 (a last), breaks at 2.5 (b) and is back at 3.0;
    snake converges at 4.0 and breaks at 6.0 for good. After d is killed at 10: tree at 11.0,
    snake never (c drops its descending), and a is isolated at 20 by a partition."""
    rows = []
    for i, n in enumerate("abcd"):
        rows.append(ev(n, 0.0, "node_started", 1, listen=[], variant="snek", version="1"))
    rows += [
        ev("b", 1.0, "root_changed", 2, root=KD, root_seq=1), ev("c", 1.0, "root_changed", 2, root=KD, root_seq=1),
        ev("a", 2.0, "root_changed", 2, root=KD, root_seq=1),
        ev("b", 2.5, "root_changed", 3, root=KC, root_seq=1), ev("b", 3.0, "root_changed", 4, root=KD, root_seq=2),
        ev("b", 3.5, "descending_changed", 5, descending=KA), ev("c", 3.7, "descending_changed", 3, descending=KB),
        ev("d", 4.0, "descending_changed", 2, descending=KC),
        ev("d", 6.0, "descending_changed", 3, descending=None),
        ev("a", 11.0, "root_changed", 3, root=KC, root_seq=1), ev("b", 10.5, "root_changed", 6, root=KC, root_seq=1),
        ev("c", 10.2, "root_changed", 4, root=KC, root_seq=1),
        ev("c", 10.2, "peer_up", 5, port=1, peer=KD, link_class="lan"),
        ev("c", 10.3, "descending_changed", 6, descending=None),  # cleared (§6.7), never learned again
    ]
    return rows


@pytest.mark.spark
def test_convergence_first_and_settled(spark):
    events = frame(spark, story(), schemas.EVENTS_SCHEMA)
    runs = spark.createDataFrame([("r", NODES)], "run_id string, nodes map<string,string>")
    links = spark.createDataFrame([("r", a, b) for a, b in LINE], "run_id string, a string, b string")
    acts = spark.createDataFrame(
        [("r", 10.0, "kill_root", "d", None, 1), ("r", 20.0, "partition", None, json.dumps({"links": ["a--b"]}), 2)],
        "run_id string, mono_s double, action string, target string, detail string, line_no long")
    bounds = episodes.run_bounds(events)
    eps = episodes.episodes(runs, links, acts, bounds)
    got = convergence.convergence(events, eps, bounds)
    expected = spark.createDataFrame([
        ("r", 0, "start", None, 0.0, 0.0, 4, 1, 3.0, 4.0, 3.0, None),
        ("r", 1, "kill_root", "d", 10.0, 10.0, 3, 1, 1.0, None, 1.0, None),
        ("r", 2, "partition", None, 20.0, 20.0, 3, 2, None, None, None, None),
    ], schemas.CONVERGENCE_SCHEMA)
    assert_frames_equal(got, expected)


@pytest.mark.spark
def test_convergence_peer_loss_resets_state(spark):
    rows = story()[:4] + [
        ev("a", 0.1, "peer_up", 2, port=1, peer=KB, link_class="lan"),
        ev("a", 1.0, "root_changed", 3, root=KD, root_seq=1),
        ev("a", 1.0, "descending_changed", 4, descending=KC),
        ev("a", 5.0, "peer_down", 5, port=1, peer=KB, reason="eof"),  # alone now: root a, no descending
    ]
    states = convergence.node_states(frame(spark, rows, schemas.EVENTS_SCHEMA)).where(f"node = '{KA}'")
    assert [(r.mono_s, r.root_state, r.desc_state) for r in states.orderBy("mono_s").collect()] == [
        (0.0, KA, None), (0.1, KA, None), (1.0, KD, KC), (5.0, KA, None)]


@pytest.mark.spark
def test_convergence_rejects_missing_columns(spark):
    with pytest.raises(JobInputError, match="lacks columns"):
        convergence.convergence(spark.createDataFrame([(1,)], "x int"), spark.createDataFrame([(1,)], "x int"),
                                spark.createDataFrame([(1,)], "x int"))


# --------------------------------------------------------------------------- delivery, overhead, churn, compare


def ping(t: float, received: bool, hops, shortest, classes) -> tuple:
    return ("r", "a", KA, "c", KC, "snek", t, t, received, 2.0 if received else None, hops, shortest, classes,
            "/p.jsonl", 1)


@pytest.mark.spark
def test_enrich_and_summarise_pings(spark):
    pings = spark.createDataFrame([
        ping(1.0, True, 3, 2, ["lan", "wifi"]), ping(1.0, True, 5, 2, ["wifi", "lan"]),
        ping(12.0, False, None, 2, ["lan"]), ping(13.0, True, 2, 1, ["lan"]),
    ], schemas.PINGS_SCHEMA)
    acts = spark.createDataFrame([("r", 10.0, 1.0, "kill_root", "d", None, "/a", 1),
                                  ("r", 12.0, 1.0, "converged", None, None, "/a", 2)], schemas.ACTIONS_SCHEMA)
    bounds = spark.createDataFrame([("r", 0.5, 20.0)], "run_id string, start_s double, end_s double")
    enriched = delivery.enrich_pings(pings, acts, bounds)
    got = enriched.select("sent_rel_s", "episode", "path_links", "stretch", "class_mix", "since_disruption_s",
                          "since_bucket")
    expected = spark.createDataFrame([
        (0.5, 0, 2, 1.0, "lan+wifi", 0.5, "0-1s"), (0.5, 0, 4, 2.0, "lan+wifi", 0.5, "0-1s"),
        (11.5, 1, None, None, "lan", 2.0, "1-5s"), (12.5, 1, 1, 1.0, "lan", 3.0, "1-5s"),
    ], "sent_rel_s double, episode long, path_links long, stretch double, class_mix string, "
       "since_disruption_s double, since_bucket string")
    assert_frames_equal(got, expected)
    by_ep = delivery.delivery_by_episode(enriched).select("episode", "sent", "received", "delivery_ratio",
                                                          "stretch_mean", "stretch_median")
    assert_frames_equal(by_ep, spark.createDataFrame([(0, 2, 2, 1.0, 1.5, 1.5), (1, 2, 1, 0.5, 1.0, 1.0)],
                                                     "episode long, sent long, received long, delivery_ratio double, "
                                                     "stretch_mean double, stretch_median double"))
    # a moving run: a radio change at 11 s opens an episode of its own (as the episodes table numbers them), and
    # is no disruption: since_disruption_s still counts from the kill
    marks = spark.createDataFrame([("r", 11.0)], "run_id string, t double")
    moving = delivery.enrich_pings(pings, acts, bounds, marks).select("episode", "since_disruption_s")
    assert_frames_equal(moving, spark.createDataFrame([(0, 0.5), (0, 0.5), (2, 2.0), (2, 3.0)],
                                                      "episode long, since_disruption_s double"))
    timeline = delivery.delivery_timeline(enriched, 10.0).select("t_bin_s", "sent", "received")
    assert_frames_equal(timeline, spark.createDataFrame([(0.0, 2, 2), (10.0, 2, 1)],
                                                        "t_bin_s double, sent long, received long"))
    with pytest.raises(JobInputError):
        delivery.delivery_timeline(enriched, 0)


def stats(node, t, direction, ftype, cls, frames, nbytes, interval=10.0):
    return ev(node, float(t), "frame_stats", int(t), interval_s=interval, direction=direction, frame_type=ftype,
              link_class=cls, frames=frames, bytes=nbytes)


@pytest.mark.spark
def test_overhead_rates(spark):
    rows = [
        stats("a", 10, "sent", "keepalive", "lan", 4, 40), stats("a", 10, "sent", "bootstrap", "lan", 2, 300),
        stats("a", 20, "sent", "keepalive", "lan", 6, 60),
        stats("b", 10, "sent", "keepalive", "lan", 2, 20), stats("b", 10, "sent", "keepalive", "wifi", 3, 30),
        stats("b", 15, "received", "traffic", "wifi", 1, 100, interval=5.0),
    ]
    events = frame(spark, rows, schemas.EVENTS_SCHEMA)
    assert_frames_equal(overhead.node_coverage(events), spark.createDataFrame(
        [("r", KA, 20.0), ("r", KB, 15.0)], "run_id string, node string, covered_s double"))
    by_node = overhead.overhead_by_node(events)
    by_class = overhead.overhead_by_class(by_node).where("direction = 'sent'").select(
        "link_class", "frame_type", "nodes", "frames", "frames_per_node_s")
    assert_frames_equal(by_class, spark.createDataFrame([
        ("lan", "bootstrap", 2, 2, 2 / 35), ("lan", "keepalive", 2, 12, 12 / 35), ("wifi", "keepalive", 1, 3, 3 / 15),
    ], "link_class string, frame_type string, nodes long, frames long, frames_per_node_s double"))
    control = overhead.control_per_run(by_node)
    assert_frames_equal(control, spark.createDataFrame([("r", 17 / 35, 450 / 35)], "run_id string, "
                                                       "control_frames_per_node_s double, control_bytes_per_node_s double"))


@pytest.mark.spark
def test_churn_counts_root_key_changes_only(spark):
    rows = [
        ev("a", 0.0, "node_started", 1), ev("a", 1.2, "root_changed", 2, root=KC, root_seq=1),
        ev("a", 1.4, "root_changed", 3, root=KC, root_seq=2),  # same root, new sequence: not a change
        ev("a", 2.1, "root_changed", 4, root=KD, root_seq=1), ev("a", 2.1, "parent_changed", 5, parent=KB),
        ev("b", 0.0, "node_started", 1), ev("b", 1.9, "parent_changed", 2, parent=KC),
    ]
    events = frame(spark, rows, schemas.EVENTS_SCHEMA)
    bounds = episodes.run_bounds(events)
    assert_frames_equal(churn.churn_timeline(events, bounds, 1.0), spark.createDataFrame(
        [("r", 1.0, 1, 1, 2), ("r", 2.0, 1, 1, 1)], schemas.CHURN_SCHEMA))
    assert_frames_equal(churn.churn_by_node(events), spark.createDataFrame(
        [("r", KA, "a", 2, 1), ("r", KB, "b", 0, 1)], schemas.CHURN_NODE_SCHEMA))


@pytest.mark.spark
def test_compare_groups_by_meta_fields(spark):
    cols = schemas.RUN_SUMMARY_SCHEMA.fieldNames()
    base = dict.fromkeys(cols)
    rows = []
    for run, variant, start in (("r1", "snek", 2.0), ("r2", "snek", 4.0), ("r3", "legacy", 10.0)):
        rows.append(tuple({**base, "run_id": run, "variant": variant, "backend": "inproc", "start_tree_s": start,
                           "delivery_ratio": 1.0}[c] for c in cols))
    summary = spark.createDataFrame(rows, schemas.RUN_SUMMARY_SCHEMA)
    got = compare.compare(summary, ["variant"]).select("variant", "runs", "start_tree_s_mean", "start_tree_s_max",
                                                       "delivery_ratio_mean")
    assert_frames_equal(got, spark.createDataFrame([("legacy", 1, 10.0, 10.0, 1.0), ("snek", 2, 3.0, 4.0, 1.0)],
                                                   "variant string, runs long, start_tree_s_mean double, "
                                                   "start_tree_s_max double, delivery_ratio_mean double"))
    with pytest.raises(JobInputError, match="group by"):
        compare.compare(summary, ["colour"])
