"""Watching real nodes from outside: their admin APIs, convergence, pings, the re-convergence bound.

Each node's ``GET /state`` gives ``public_key``, ``root.key`` and ``descending``;
:func:`orchestrator.model.observe.check_convergence` decides convergence from those
views, per connected component of the live graph (one root = the highest key,
an ordered snake). :func:`wait_converged` polls every node concurrently (a
thread pool over one keep-alive ``httpx.Client``) every ``poll_s`` and times
convergence with :class:`orchestrator.model.observe.ConvergenceTracker`: a root or
descending change is stamped with the poll that first saw it, so times carry up
to one poll interval of error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import networkx as nx

from node.core.router import Timers
from node.core.snek import EXPIRY_S
from orchestrator.model.observe import ConvergenceTracker, NodeView

__all__ = [
    "AdminClient",
    "AdminError",
    "Convergence",
    "views_from_states",
    "wait_converged",
    "reconvergence_bound_s",
    "POLL_S",
    "ROOT_KILL_MARGIN_S",
]

POLL_S = 0.5
#: Slack on top of the timer-derived bound: process scheduling on a loaded 2-core host, poll granularity.
ROOT_KILL_MARGIN_S = 10.0
#: PROTOCOL.md §3.5: a peer silent for this long is dropped (a killed container is seen sooner: its TCP closes).
PEER_TIMEOUT_S = 5.0
#: The per-hop cost of tearing down and rebuilding the tree: one reparent hold plus a link's delay and
#: processing; generous for the slowest default class (bluetooth, 30 +/- 5 ms one way).
HOP_SLACK_S = 0.25
#: pings in flight at once (threads and connections of their own: each can wait out its whole timeout)
PING_WORKERS = 64


class AdminError(Exception):
    """A node's admin API did not answer, or answered with an error; the message names the node."""


class AdminClient:
    """Calls the admin API of many nodes: ``endpoints`` maps node name -> ``HOST:PORT``."""

    def __init__(self, endpoints: Mapping[str, str], *, timeout_s: float = 3.0, workers: int = 16,
                 ping_workers: int = PING_WORKERS) -> None:  # fmt: skip
        self.endpoints = dict(endpoints)
        self.timeout_s = timeout_s
        limits = httpx.Limits(max_connections=max(32, workers * 2), max_keepalive_connections=max(32, workers * 2))
        self._http = httpx.Client(timeout=timeout_s, limits=limits, trust_env=False)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snekbed-admin")
        # pings wait out their timeout (12 s for one from a paused node): their own connections and threads, so
        # a run's traffic never starves the calls that read and change the nodes (states, peers, shapes)
        self._ping_http = httpx.Client(timeout=timeout_s, trust_env=False, limits=httpx.Limits(
            max_connections=ping_workers, max_keepalive_connections=min(ping_workers, 32)))
        self._ping_pool = ThreadPoolExecutor(max_workers=ping_workers, thread_name_prefix="snekbed-ping")
        self.errors: dict[str, str] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ping_pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()
        self._ping_http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _url(self, node: str, path: str) -> str:
        try:
            return f"http://{self.endpoints[node]}{path}"
        except KeyError:
            raise AdminError(f"unknown node {node!r} (known: {', '.join(sorted(self.endpoints))})") from None

    def state(self, node: str) -> dict[str, Any]:
        """``GET /state`` of ``node``. Raises AdminError."""
        try:
            resp = self._http.get(self._url(node, "/state"))
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise AdminError(f"{node} ({self.endpoints.get(node)}): GET /state failed: {exc}") from exc

    def states(self, nodes: Iterable[str] | None = None) -> dict[str, dict[str, Any] | None]:
        """``GET /state`` of every node at once; None where it failed (the reason goes to ``errors``)."""
        names = list(self.endpoints if nodes is None else nodes)

        def one(name: str) -> dict[str, Any] | None:
            try:
                doc = self.state(name)
            except AdminError as exc:
                self.errors[name] = str(exc)
                return None
            self.errors.pop(name, None)
            return doc

        return dict(zip(names, self._pool.map(one, names)))

    def get_bytes(self, node: str, path: str) -> bytes:
        """``GET path`` on ``node``: the answer's bytes. Raises AdminError (no answer, or not 200)."""
        try:
            resp = self._http.get(self._url(node, path))
        except httpx.HTTPError as exc:
            raise AdminError(f"{node}: GET {path} failed: {exc}") from exc
        if resp.status_code != 200:
            raise AdminError(f"{node}: GET {path} answered {resp.status_code}: {resp.text.strip()[:300]}")
        return resp.content

    def post(self, node: str, path: str, body: Mapping[str, Any] | None = None, *,
             timeout_s: float | None = None) -> dict[str, Any]:  # fmt: skip
        """``POST path`` on ``node`` with a JSON body; the JSON answer (waited for ``timeout_s``, default the
        client's). Raises AdminError (no answer, or not 2xx)."""
        try:
            resp = self._http.post(self._url(node, path), json=dict(body or {}),
                                   timeout=self.timeout_s if timeout_s is None else timeout_s)
        except httpx.HTTPError as exc:
            raise AdminError(f"{node}: POST {path} failed: {exc}") from exc
        if resp.status_code // 100 != 2:
            raise AdminError(f"{node}: POST {path} answered {resp.status_code}: {resp.text.strip()[:300]}")
        return resp.json()

    def delete(self, node: str, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """``DELETE path`` on ``node``: the JSON answer, None for 404 (nothing there) and, with ``params`` (a
        conditional delete: ``?key=..&remote=..``), for 409 (what is there is not the one named). Raises AdminError."""
        try:
            resp = self._http.delete(self._url(node, path), params=dict(params or {}))
        except httpx.HTTPError as exc:
            raise AdminError(f"{node}: DELETE {path} failed: {exc}") from exc
        if resp.status_code == 404 or (params and resp.status_code == 409):
            return None
        if resp.status_code // 100 != 2:
            raise AdminError(f"{node}: DELETE {path} answered {resp.status_code}: {resp.text.strip()[:300]}")
        return resp.json()

    def ping(self, node: str, key_hex: str, *, mode: str = "snek", count: int = 1,
             timeout_s: float = 5.0) -> dict[str, Any]:
        """``POST /ping`` on ``node`` towards ``key_hex``; returns {sent, received, rtt_ms, hops}. Raises AdminError."""
        body = {"key": key_hex, "mode": mode, "count": count, "timeout_s": timeout_s}
        try:
            resp = self._ping_http.post(self._url(node, "/ping"), json=body, timeout=count * (timeout_s + 2) + 5)
        except httpx.HTTPError as exc:
            raise AdminError(f"{node}: POST /ping failed: {exc}") from exc
        if resp.status_code != 200:
            raise AdminError(f"{node}: POST /ping answered {resp.status_code}: {resp.text.strip()[:300]}")
        return resp.json()

    def ping_many(self, jobs: list[tuple[str, str, str]], *, count: int = 1,
                  timeout_s: float = 5.0) -> list[tuple[float, dict[str, Any] | AdminError]]:
        """Run ``(sender, key_hex, mode)`` pings concurrently; each result with its send time (monotonic)."""

        def one(job: tuple[str, str, str]) -> tuple[float, dict[str, Any] | AdminError]:
            sent = time.monotonic()
            try:
                return sent, self.ping(job[0], job[1], mode=job[2], count=count, timeout_s=timeout_s)
            except AdminError as exc:
                return sent, exc

        return list(self._ping_pool.map(one, jobs))


def views_from_states(states: Mapping[str, Mapping[str, Any] | None]) -> dict[str, NodeView]:
    """NodeView per node that answered; malformed documents count as not answering."""
    views: dict[str, NodeView] = {}
    for name, doc in states.items():
        if not doc:
            continue
        try:
            desc = doc.get("descending")
            if isinstance(desc, Mapping):
                desc = desc.get("key")
            views[name] = NodeView(bytes.fromhex(doc["public_key"]), bytes.fromhex(doc["root"]["key"]),
                                   bytes.fromhex(desc) if desc else None)
        except (KeyError, TypeError, ValueError):
            continue
    return views


@dataclass(slots=True)
class Convergence:
    """The outcome of :func:`wait_converged`; times are seconds after ``t0``."""

    converged: bool
    tree_s: float | None
    snake_s: float | None
    waited_s: float
    polls: int
    wrong_root: list[str] = field(default_factory=list)
    wrong_descending: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    states: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly, without the raw states."""
        return {"converged": self.converged, "tree_converged_s": _r(self.tree_s), "snake_converged_s": _r(self.snake_s),
                "waited_s": _r(self.waited_s), "polls": self.polls, "wrong_root": self.wrong_root,
                "wrong_descending": self.wrong_descending, "unreachable": self.unreachable}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def wait_converged(admin: AdminClient, live_graph: Callable[[], nx.Graph], *, t0: float, timeout_s: float,
                   poll_s: float = POLL_S, progress: Callable[[float, int, int], None] | None = None,
                   give_up: Callable[[], bool] | None = None) -> Convergence:
    """Poll until the live graph has converged (tree and snake) or ``timeout_s`` after ``t0`` passes, or until
    ``give_up()`` (asked once a poll) says there is no point in waiting longer.

    ``live_graph()`` is re-read on every poll (nodes whose container stopped drop
    out, or it may raise to abort). ``progress(elapsed_s, converged_nodes, live_nodes)``
    is called per poll. Unreachable nodes count as not converged.
    """
    tracker = ConvergenceTracker()
    tracker.reset(t0)
    polls = 0
    last_root: dict[str, bytes] = {}
    last_desc: dict[str, bytes | None] = {}
    while True:
        graph = live_graph()
        now_before = time.monotonic()
        states = admin.states(list(graph.nodes))
        now = time.monotonic()
        polls += 1
        views = views_from_states(states)
        for name, view in views.items():
            if last_root.get(name) != view.root:
                tracker.root_changed(name, view.root, now)
                last_root[name] = view.root
            if name not in last_desc or last_desc[name] != view.descending:
                tracker.descending_changed(name, now)
                last_desc[name] = view.descending
        unreachable = sorted(set(graph.nodes) - set(views))
        reachable = graph.subgraph(views)
        verdict = tracker.observe(reachable, views)
        if unreachable:  # a verdict over part of the graph proves nothing: time it again once all answer
            tracker.tree_at = tracker.snake_at = None
        converged = verdict.snake and not unreachable
        bad = set(verdict.wrong_root) | set(verdict.wrong_descending) | set(unreachable)
        if progress is not None:
            progress(now - t0, graph.number_of_nodes() - len(bad), graph.number_of_nodes())
        if converged or now - t0 >= timeout_s or (give_up is not None and give_up()):
            return Convergence(converged, tracker.tree_s, tracker.snake_s if converged else None, now - t0, polls,
                               sorted(verdict.wrong_root), sorted(verdict.wrong_descending), unreachable, states)
        time.sleep(max(0.0, poll_s - (time.monotonic() - now_before)))


def reconvergence_bound_s(graph: nx.Graph, timers: Timers | None = None, *, margin_s: float = ROOT_KILL_MARGIN_S,
                          expiry_s: float = EXPIRY_S) -> float:  # fmt: skip
    """How long re-convergence after killing the root may take, from the protocol timers.

    Derivation (PROTOCOL.md §3.7, §5.6, §6.2, §6.7, §9):

    * the root's neighbours notice at once (its TCP connections close); a silent
      death would take up to the peer timeout (5 s): counted once;
    * the tree is torn down and rebuilt hop by hop: at worst one reparent hold
      (1 s) plus a link's delay per hop of the largest component's diameter;
    * the snake is rebuilt by bootstraps: a stale descending entry is cleared at
      the next maintenance tick (1 s) because its root changed, and new entries
      need bootstraps, sent every 5-6 s: allow 3 bootstrap intervals (one may be
      lost on a lossy link, one may race the last tree change);
    * entries that still point through the dead node expire after ``expiry_s`` (10 s; the ``entry_expiry``
      knob; the bootstrap interval is ``timers``', the ``bootstrap_interval`` knob);
    * plus ``margin_s`` for scheduling on a loaded host and the poll interval.
    """
    t = timers or Timers()
    # exact, by eccentricity bounds (Takes and Kosters): a few BFS instead of one per node; on a copy, not a view
    diameter = max((nx.diameter(graph.subgraph(c).copy(), usebounds=True) for c in nx.connected_components(graph)
                    if len(c) > 1), default=0)  # fmt: skip
    tree = PEER_TIMEOUT_S + diameter * (t.reparent_hold_s + HOP_SLACK_S)
    snake = t.maintain_interval_s + 3 * (t.bootstrap_interval_s + t.maintain_interval_s) + expiry_s
    return round(tree + snake + margin_s, 1)
