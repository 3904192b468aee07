"""Episodes: the run start, every disruptive action and every radio link change, with the converged state each must
reach.

An episode runs from ``t0`` (the earliest ``node_started``, or the action's
``mono_s``) to ``t1`` (the next episode's ``t0``; null for the last one). The
live topology of an episode is the run's topology after every action up to and
including the episode's own (``plan_episodes``, plain Python, documented in
docs/run-dataset.md). For each live node the expected converged state is the
highest key of its connected component (root) and the next lower key of the
component (descending; null for the lowest).

A run whose nodes move (docs/mobility.md) has radio links too, from its mobility.jsonl: those up at the start are in
the first episode's graph, and every later instant (a mobility tick) with a link change the network made opens an
episode of action ``radio`` (all the tick's changes in one; target null). Its converged state is the one the
network must reach before the next tick: one it does not reach by then is censored (never converged within it).

The action tables are small (a few rows per run), so ``episodes`` collects
them to the driver and plans there (``episode_rows``, which an analysis that
already holds those rows on the driver calls directly); the per-event work
happens in ``pipeline.jobs.convergence``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import networkx as nx
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import schemas
from pipeline.errors import JobInputError

__all__ = ["EPISODE_ACTIONS", "RADIO_ACTION", "Action", "RadioChange", "plan_episodes", "run_bounds", "episode_rows",
           "episodes", "radio_openings"]

#: Actions that open an episode: the contract's disruptive actions, plus ``restart`` (a node
#: coming back with a fresh state has to converge too). Defined in pipeline.schemas (the A/B tables
#: have a column per kind).
EPISODE_ACTIONS = schemas.EPISODE_ACTIONS

#: The action of an episode a radio link change opened (not an action: no column of its own in the A/B tables).
RADIO_ACTION = "radio"

#: The mobility.jsonl kinds that change a radio link.
RADIO_KINDS = ("link_up", "link_down")


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


@dataclass(frozen=True)
class RadioChange:
    """One ``link_up`` / ``link_down`` line of mobility.jsonl, as the planner needs it."""

    mono_s: float
    up: bool
    a: str
    b: str
    radio: str | None = None
    made: bool = True  # whether the network made (cut) a peering for it: a link it did not make is not a link
    start: bool = False  # cause 'start': up from the run start (the first episode's graph)


def _apply(act: Action, nodes: Mapping[str, str], all_links: set[frozenset[str]], live_nodes: set[str],
           cut: set[frozenset[str]]) -> set[frozenset[str]]:
    """Apply one action to the live nodes (in place) and the cut links; returns the cut links."""
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
    return cut


def _radio_ticks(radio: Sequence[RadioChange], nodes: Mapping[str, str] | None,
                 t_start: float) -> tuple[list[RadioChange], list[tuple[float, list[RadioChange]]]]:  # fmt: skip
    """(the changes of the first episode's graph: cause 'start' and any at or before ``t_start``; the later ones by
    instant, in time order). Raises JobInputError for a change naming a node not in ``nodes`` (None: not checked)."""
    first: list[RadioChange] = []
    ticks: dict[float, list[RadioChange]] = {}
    for ch in radio:
        if nodes is not None and (ch.a not in nodes or ch.b not in nodes):
            raise JobInputError("episodes", f"radio link {ch.a}--{ch.b} at {ch.mono_s}: unknown node")
        if ch.start or ch.mono_s <= t_start:
            first.append(ch)
        else:
            ticks.setdefault(ch.mono_s, []).append(ch)
    return first, sorted(ticks.items())


def _opens(t: float, changes: Sequence[RadioChange], acted: Collection[float]) -> bool:
    """Whether the radio changes of instant ``t`` open an episode: one of them is a link the network made (or
    cut), and no action opens one at the same instant (that episode's graph has the change)."""
    return t not in acted and any(ch.made for ch in changes)


def _radio_apply(changes: Iterable[RadioChange], up: dict[frozenset[str], set[str | None]]) -> None:
    """Radio links up, per pair: the radios joining it (a link the network did not make is not a link)."""
    for ch in changes:
        pair = frozenset((ch.a, ch.b))
        if ch.up and ch.made:
            up.setdefault(pair, set()).add(ch.radio)
        elif not ch.up and pair in up:
            up[pair].discard(ch.radio)
            if not up[pair]:
                del up[pair]


def _expected(nodes: Mapping[str, str], live: frozenset[str], edges: Iterable[frozenset[str]]) -> dict:
    """{node key: (component, expected_root, expected_descending)} of the live nodes joined by ``edges``."""
    g = nx.Graph()
    g.add_nodes_from(live)
    g.add_edges_from(tuple(lk) for lk in edges if lk <= live)
    expected = {}
    for c, comp in enumerate(sorted(nx.connected_components(g), key=lambda c: min(nodes[n] for n in c))):
        keys = sorted(nodes[n] for n in comp)
        for i_key, key in enumerate(keys):
            expected[key] = (c, keys[-1], keys[i_key - 1] if i_key > 0 else None)
    return expected


def plan_episodes(
    nodes: Mapping[str, str],
    links: Iterable[tuple[str, str]],
    actions: Sequence[Action],
    t_start: float,
    radio: Sequence[RadioChange] | None = None,
) -> list[dict]:
    """Episodes of one run: dicts with episode, t0_s, t1_s, action, target, and ``expected``:
    {node key: (component, expected_root, expected_descending)} over the live nodes.

    ``nodes``: name -> key hex. ``radio`` (a run whose nodes move): its radio link changes; every instant with a
    change the network made opens one episode, action ``radio`` (target None), unless an action opens one at the
    same instant (that episode's graph has the change). Raises JobInputError for an action or a radio link naming
    an unknown node or link.
    """
    all_links = {frozenset(lk) for lk in links}
    opening = sorted((a for a in actions if a.action in EPISODE_ACTIONS), key=lambda a: (a.mono_s, a.order))
    # nodes and links that join later are absent until their join
    joining_nodes = {a.target for a in opening if a.action == "join" and a.target in nodes}
    joining_links = {_link(a.target, f"action join at {a.mono_s}") for a in opening
                     if a.action == "join" and a.target not in nodes}  # fmt: skip
    live_nodes, cut = set(nodes) - joining_nodes, set(joining_links)
    first, ticks = _radio_ticks(radio or (), nodes, t_start)
    radio_up: dict[frozenset[str], set[str | None]] = {}
    _radio_apply(first, radio_up)
    out = [{"t0_s": t_start, "action": "start", "target": None,
            "_state": (frozenset(live_nodes), frozenset(cut), frozenset(radio_up))}]
    acted = {a.mono_s for a in opening}
    # at one instant the radio changes come first: an action's episode has the links its own instant made
    timeline = sorted([(t, 0, i, None) for i, (t, _) in enumerate(ticks)] +
                      [(a.mono_s, 1, a.order, a) for a in opening], key=lambda e: e[:3])  # fmt: skip
    for t, _, i, act in timeline:
        if act is None:
            _radio_apply(ticks[i][1], radio_up)
            if not _opens(t, ticks[i][1], acted):
                continue
        else:
            cut = _apply(act, nodes, all_links, live_nodes, cut)
        out.append({"t0_s": t, "action": RADIO_ACTION if act is None else act.action,
                    "target": None if act is None else act.target,
                    "_state": (frozenset(live_nodes), frozenset(cut), frozenset(radio_up))})
    for i, ep in enumerate(out):
        ep["episode"] = i
        ep["t1_s"] = out[i + 1]["t0_s"] if i + 1 < len(out) else None
        live, cut_now, radio_now = ep.pop("_state")
        ep["expected"] = _expected(nodes, live, (all_links - cut_now) | radio_now)
    return out


def run_bounds(events: DataFrame) -> DataFrame:
    """events -> (run_id, start_s = earliest node_started, end_s = latest event) per run."""
    return events.groupBy("run_id").agg(
        F.min(F.when(F.col("event") == "node_started", F.col("mono_s"))).alias("start_s"),
        F.max("mono_s").alias("end_s"),
    )


def _radio_changes(rows: Iterable[Mapping] | None) -> dict[str, list[RadioChange]]:
    """mobility.jsonl rows (run_id, mono_s, kind, a, b, radio, made, cause, line_no) -> each run's radio link
    changes, in time and line order (the other kinds left out)."""
    out: dict[str, list[tuple]] = {}
    for r in rows or ():
        if r["kind"] in RADIO_KINDS:
            change = RadioChange(r["mono_s"], r["kind"] == "link_up", r["a"], r["b"], r["radio"],
                                 r["made"] is not False, r["cause"] == "start")
            out.setdefault(r["run_id"], []).append((r["mono_s"], r["line_no"] or 0, change))
    return {run: [ch for *_, ch in sorted(changes, key=lambda c: c[:2])] for run, changes in out.items()}


def episode_rows(bounds: Iterable[Mapping], links: Iterable[Mapping], actions: Iterable[Mapping],
                 runs: Iterable[Mapping], radio: Iterable[Mapping] | None = None) -> list[tuple]:
    """The episodes (EPISODES_SCHEMA rows, as tuples) from the rows of their inputs, as mappings (a Spark Row's
    ``asDict()``, or Arrow's ``to_pylist()``): bounds (run_id, start_s), links (run_id, a, b), actions (run_id,
    mono_s, action, target, detail, line_no: the episode actions only, or all of them), runs (run_id, nodes:
    a mapping, or Arrow's list of (key, value) pairs) and, for runs whose nodes move, ``radio``: their
    mobility.jsonl rows (MOBILITY_SCHEMA's run_id, mono_s, kind, a, b, radio, made, cause, line_no; None: no run
    has radio links).

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
    radio_changes = _radio_changes(radio)
    rows = []
    for run in sorted(runs, key=lambda r: r["run_id"]):
        rid, start = run["run_id"], starts.get(run["run_id"])
        if start is None:
            continue
        for ep in plan_episodes(dict(run["nodes"]), link_rows.get(rid, []), acts.get(rid, []), start,
                                radio_changes.get(rid)):
            for key, (comp, root, desc) in sorted(ep["expected"].items()):
                rows.append((rid, ep["episode"], ep["t0_s"], ep["t1_s"], ep["action"], ep["target"],
                             key, comp, root, desc))
    return rows


def radio_openings(bounds: Iterable[Mapping], actions: Iterable[Mapping],
                   radio: Iterable[Mapping] | None) -> list[tuple[str, float]]:
    """(run_id, instant) of every episode a radio link change opens, by :func:`plan_episodes`' rule, from the rows
    ``episode_rows`` takes (bounds: run_id, start_s; actions: run_id, mono_s, action; radio: mobility.jsonl rows),
    so that what is placed in episodes elsewhere (the pings) numbers them as the episodes table does."""
    starts = {r["run_id"]: r["start_s"] for r in bounds}
    acted: dict[str, set[float]] = {}
    for r in actions:
        if r["action"] in EPISODE_ACTIONS:
            acted.setdefault(r["run_id"], set()).add(r["mono_s"])
    out = []
    for rid, changes in sorted(_radio_changes(radio).items()):
        if starts.get(rid) is None:
            continue
        _, ticks = _radio_ticks(changes, None, starts[rid])
        out += [(rid, t) for t, chs in ticks if _opens(t, chs, acted.get(rid, set()))]
    return out


def episodes(runs: DataFrame, links: DataFrame, actions: DataFrame, bounds: DataFrame,
             radio: Iterable[Mapping] | None = None) -> DataFrame:
    """runs (RUNS_SCHEMA), links (LINKS_SCHEMA), actions (ACTIONS_SCHEMA), bounds (``run_bounds``) and the moving
    runs' mobility.jsonl rows on the driver (``radio``, see ``episode_rows``; None: none)
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
    return spark.createDataFrame(episode_rows(*collected, radio), schemas.EPISODES_SCHEMA)
