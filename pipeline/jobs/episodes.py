"""Episodes: the run start and every disruptive action, with the converged state each must reach.

An episode runs from ``t0`` (the earliest ``node_started``, or the action's
``mono_s``) to ``t1`` (the next episode's ``t0``; null for the last one). The
live topology of an episode is the run's topology after every action up to and
including the episode's own (``plan_episodes``, plain Python, documented in
docs/run-dataset.md). For each live node the expected converged state is the
highest key of its connected component (root) and the next lower key of the
component (descending; null for the lowest).

The action tables are small (a few rows per run), so ``episodes`` collects
them to the driver and plans there (``episode_rows``, which an analysis that
already holds those rows on the driver calls directly); the per-event work
happens in ``pipeline.jobs.convergence``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import networkx as nx
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import schemas
from pipeline.errors import JobInputError

__all__ = ["EPISODE_ACTIONS", "Action", "plan_episodes", "run_bounds", "episode_rows", "episodes"]

#: Actions that open an episode: the contract's disruptive actions, plus ``restart`` (a node
#: coming back with a fresh state has to converge too). Defined in pipeline.schemas (the A/B tables
#: have a column per kind).
EPISODE_ACTIONS = schemas.EPISODE_ACTIONS


@dataclass(frozen=True)
class Action:
    """One row of actions.jsonl, as the planner needs it."""

    mono_s: float
    action: str
    target: str | None
    detail: Mapping | None = None
    order: int = 0  # tie-break for actions at the same instant (file line)


def _link(spec: object, where: str) -> frozenset[str]:
    if isinstance(spec, str) and "--" in spec:
        a, b = spec.split("--", 1)
    elif isinstance(spec, (list, tuple)) and len(spec) == 2:
        a, b = spec
    else:
        raise JobInputError("episodes", f"{where}: {spec!r} is not a link ('a--b' or [a, b])")
    return frozenset((str(a), str(b)))


def _links_of(action: Action, links: set[frozenset[str]]) -> set[frozenset[str]]:
    detail = action.detail or {}
    where = f"action {action.action} at {action.mono_s}"
    if "links" in detail:
        return {_link(spec, where) for spec in detail["links"]}
    if "groups" in detail:
        group_of = {name: i for i, group in enumerate(detail["groups"]) for name in group}
        return {lk for lk in links if len({group_of.get(n, -1) for n in lk}) == 2 and
                all(n in group_of for n in lk)}
    raise JobInputError("episodes", f"{where}: detail needs 'links' or 'groups'")


def plan_episodes(
    nodes: Mapping[str, str],
    links: Iterable[tuple[str, str]],
    actions: Sequence[Action],
    t_start: float,
) -> list[dict]:
    """Episodes of one run: dicts with episode, t0_s, t1_s, action, target, and ``expected``:
    {node key: (component, expected_root, expected_descending)} over the live nodes.

    ``nodes``: name -> key hex. Raises JobInputError for an action naming an unknown node or link.
    """
    all_links = {frozenset(lk) for lk in links}
    opening = sorted((a for a in actions if a.action in EPISODE_ACTIONS), key=lambda a: (a.mono_s, a.order))
    # nodes and links that join later are absent until their join
    joining_nodes = {a.target for a in opening if a.action == "join" and a.target in nodes}
    joining_links = {_link(a.target, f"action join at {a.mono_s}") for a in opening
                     if a.action == "join" and a.target not in nodes}  # fmt: skip
    live_nodes, cut = set(nodes) - joining_nodes, set(joining_links)
    out = [{"t0_s": t_start, "action": "start", "target": None}]
    first_state = (frozenset(live_nodes), frozenset(cut))
    for act in opening:
        where = f"action {act.action} at {act.mono_s}"
        if act.action == "join":
            if act.target in nodes:
                live_nodes.add(act.target)
            else:
                link = _link(act.target, where)
                if link not in all_links:
                    raise JobInputError("episodes", f"{where}: unknown link {act.target!r}")
                cut.discard(link)
        elif act.action in ("kill", "kill_root", "restart", "pause", "resume"):
            if act.target not in nodes:
                raise JobInputError("episodes", f"{where}: unknown node {act.target!r}")
            (live_nodes.add if act.action in ("restart", "resume") else live_nodes.discard)(act.target)
        elif act.action in ("link_down", "link_up"):
            link = _link(act.target, where)
            if link not in all_links:
                raise JobInputError("episodes", f"{where}: unknown link {act.target!r}")
            (cut.add if act.action == "link_down" else cut.discard)(link)
        elif act.action == "partition":
            cut |= _links_of(act, all_links)
        elif act.action == "heal":
            cut = cut - _links_of(act, all_links) if act.detail and "links" in act.detail else set()
        out.append({"t0_s": act.mono_s, "action": act.action, "target": act.target,
                    "_state": (frozenset(live_nodes), frozenset(cut))})
    out[0]["_state"] = first_state
    for i, ep in enumerate(out):
        ep["episode"] = i
        ep["t1_s"] = out[i + 1]["t0_s"] if i + 1 < len(out) else None
        live, cut_now = ep.pop("_state")
        g = nx.Graph()
        g.add_nodes_from(live)
        g.add_edges_from(tuple(lk) for lk in all_links - cut_now if lk <= live)
        expected = {}
        for c, comp in enumerate(sorted(nx.connected_components(g), key=lambda c: min(nodes[n] for n in c))):
            keys = sorted(nodes[n] for n in comp)
            for i_key, key in enumerate(keys):
                expected[key] = (c, keys[-1], keys[i_key - 1] if i_key > 0 else None)
        ep["expected"] = expected
    return out


def run_bounds(events: DataFrame) -> DataFrame:
    """events -> (run_id, start_s = earliest node_started, end_s = latest event) per run."""
    return events.groupBy("run_id").agg(
        F.min(F.when(F.col("event") == "node_started", F.col("mono_s"))).alias("start_s"),
        F.max("mono_s").alias("end_s"),
    )


def episode_rows(bounds: Iterable[Mapping], links: Iterable[Mapping], actions: Iterable[Mapping],
                 runs: Iterable[Mapping]) -> list[tuple]:
    """The episodes (EPISODES_SCHEMA rows, as tuples) from the rows of their inputs, as mappings (a Spark Row's
    ``asDict()``, or Arrow's ``to_pylist()``): bounds (run_id, start_s), links (run_id, a, b), actions (run_id,
    mono_s, action, target, detail, line_no: the episode actions only, or all of them) and runs (run_id, nodes:
    a mapping, or Arrow's list of (key, value) pairs).

    A run without node_started events gets no episodes. Raises JobInputError (see plan_episodes).
    """
    starts = {r["run_id"]: r["start_s"] for r in bounds}
    link_rows: dict[str, list[tuple[str, str]]] = {}
    for r in links:
        link_rows.setdefault(r["run_id"], []).append((r["a"], r["b"]))
    acts: dict[str, list[Action]] = {}
    for r in actions:
        if r["action"] not in EPISODE_ACTIONS:
            continue
        detail = json.loads(r["detail"]) if r["detail"] else None
        acts.setdefault(r["run_id"], []).append(Action(r["mono_s"], r["action"], r["target"], detail, r["line_no"] or 0))
    rows = []
    for run in sorted(runs, key=lambda r: r["run_id"]):
        start = starts.get(run["run_id"])
        if start is None:
            continue
        for ep in plan_episodes(dict(run["nodes"]), link_rows.get(run["run_id"], []), acts.get(run["run_id"], []),
                                start):
            for key, (comp, root, desc) in sorted(ep["expected"].items()):
                rows.append((run["run_id"], ep["episode"], ep["t0_s"], ep["t1_s"], ep["action"], ep["target"],
                             key, comp, root, desc))
    return rows


def episodes(runs: DataFrame, links: DataFrame, actions: DataFrame, bounds: DataFrame) -> DataFrame:
    """runs (RUNS_SCHEMA), links (LINKS_SCHEMA), actions (ACTIONS_SCHEMA), bounds (``run_bounds``)
    -> EPISODES_SCHEMA: one row per episode and live node (``episode_rows`` of their collected rows).

    A run without node_started events gets no episodes. Raises JobInputError (see plan_episodes).
    """
    spark: SparkSession = runs.sparkSession
    wanted = actions.where(F.col("action").isin(*EPISODE_ACTIONS))
    # four small independent queries: side by side (each is mostly the driver's planning and scheduling), as
    # parallel.collect_all does for the report (jobs import only schemas and errors of the pipeline)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="snekbed-episodes") as pool:
        collected = pool.map(lambda df: [r.asDict() for r in df.collect()], [
            bounds, links.select("run_id", "a", "b"),
            wanted.select("run_id", "mono_s", "action", "target", "detail", "line_no"), runs.select("run_id", "nodes")])
    return spark.createDataFrame(episode_rows(*collected), schemas.EPISODES_SCHEMA)
