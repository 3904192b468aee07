"""The ``snekbed view`` web app (starlette, served by hypercorn on trio; nothing from a CDN).

Routes, both modes:

=========================  ======================================================================
``GET /``                  the page (``page.html``, shipped in the package)
``GET /api/graph``         nodes (name, key, x, y), links (a, b, class), ``mode``, ``run_id``, ``mobility``
``GET /api/frame?t=``      the frame at ``t`` (replay) or now (live): docs/view.md "Frames"
``GET /api/node/{name}``   one node: state, peers, routing table, counters (``?t=`` in replay)
``GET /api/summary``       replay: window, faults, verdict series, pings, change times
``GET /api/live``          live: server-sent events, one ``frame`` event per poll (>= 1 per second)
``GET /api/pings?since=N`` live: pings number N on (a frame repeats only the last few hundred)
=========================  ======================================================================

Live sources are polled by one :class:`LiveHub` task, however many pages are open; each page's
event stream waits for the hub's next frame.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.tools.view.frames import graph_doc
from orchestrator.tools.view.live import LiveSource
from orchestrator.tools.view.timeline import Timeline

__all__ = ["build_app", "build_live_app", "LiveHub", "page_html", "POLL_S"]

POLL_S = 0.5  # the live page gets a frame at least this often (the issue asks for >= 1 per second)


def page_html() -> str:
    return resources.files("orchestrator.tools.view").joinpath("page.html").read_text(encoding="utf-8")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _time(request: Request, default: float) -> float | JSONResponse:
    raw = request.query_params.get("t")
    if raw is None:
        return default
    try:
        t = float(raw)
    except ValueError:
        return _error(400, f"t={raw!r}: expected seconds (a number)")
    if not math.isfinite(t):
        return _error(400, f"t={raw!r}: expected a finite number")
    return t


def build_app(timeline: Timeline, *, open_at: float | None = None) -> Starlette:
    """Replay of a recorded run; the page opens at ``open_at`` (default: the run's start)."""
    start = timeline.t_start if open_at is None else min(max(open_at, timeline.t_start), timeline.t_end)
    extra: dict[str, Any] = {"t_start": timeline.t_start, "t_end": timeline.t_end, "open_at": start}
    if timeline.motion is not None:  # nodes that move: drawn at their positions (orchestrator.tools.view.motion)
        extra["mobility"] = timeline.motion.graph_doc()
    graph = graph_doc(timeline.graph, mode="replay", run_id=timeline.run_id, extra=extra)
    summary = timeline.summary()

    async def page(_: Request) -> Response:
        return HTMLResponse(page_html())

    async def api_graph(_: Request) -> Response:
        return JSONResponse(graph)

    async def api_summary(_: Request) -> Response:
        return JSONResponse(summary)

    async def api_frame(request: Request) -> Response:
        t = _time(request, timeline.t_end)
        if isinstance(t, JSONResponse):
            return t
        return JSONResponse(timeline.at(t))

    async def api_node(request: Request) -> Response:
        t = _time(request, timeline.t_end)
        if isinstance(t, JSONResponse):
            return t
        try:
            return JSONResponse(timeline.node_detail(request.path_params["name"], t))
        except KeyError:
            return _error(404, f"no node {request.path_params['name']!r} in run {timeline.run_id}")

    return Starlette(routes=[
        Route("/", page), Route("/api/graph", api_graph), Route("/api/summary", api_summary),
        Route("/api/frame", api_frame), Route("/api/node/{name}", api_node),
    ])


class LiveHub:
    """Polls a live source every ``interval_s`` and hands the latest frame to every open page."""

    def __init__(self, source: LiveSource, interval_s: float = POLL_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self.latest: dict[str, Any] | None = None
        self.error: str | None = None
        self.frames = 0
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll until cancelled; ``started`` once the first frame is in."""
        started = False
        while True:
            try:
                self.latest = await self.source.frame()
                self.error = None
            except Exception as exc:  # the engine or a node hiccups: say so on the page, keep polling
                self.error = f"{type(exc).__name__}: {exc}"
            self.frames += 1
            self._changed.set()
            self._changed = trio.Event()
            if not started:
                task_status.started()
                started = True
            await trio.sleep(self.interval_s)

    async def next_frame(self, seen: int) -> tuple[int, dict[str, Any]]:
        """The first frame after number ``seen`` (waits for it)."""
        while self.frames <= seen or self.latest is None:
            await self._changed.wait()
        return self.frames, {**self.latest, "error": self.error}


def build_live_app(hub: LiveHub) -> Starlette:
    """The live view of a running network."""
    source = hub.source
    extra: dict[str, Any] = {"backend": source.mode, "interval_s": hub.interval_s}
    motion = getattr(source, "motion", None)
    if motion is not None:
        extra["mobility"] = motion.graph_doc()
    graph = graph_doc(source.graph, mode="live", run_id=source.run_id, extra=extra)

    async def page(_: Request) -> Response:
        return HTMLResponse(page_html())

    async def api_graph(_: Request) -> Response:
        return JSONResponse(graph)

    async def api_frame(_: Request) -> Response:
        _, frame = await hub.next_frame(0)
        return JSONResponse(frame)

    async def api_pings(request: Request) -> Response:
        raw = request.query_params.get("since", "0")
        try:
            since = int(raw)
        except ValueError:
            return _error(400, f"since={raw!r}: expected a ping number (an integer)")
        return JSONResponse({"pings": source.pings_since(since)})

    async def api_node(request: Request) -> Response:
        try:
            return JSONResponse(await source.node_detail(request.path_params["name"]))
        except KeyError:
            return _error(404, f"no node {request.path_params['name']!r} in run {source.run_id}")

    async def stream() -> AsyncIterator[str]:
        seen = 0
        yield "retry: 1000\n\n"
        while True:
            seen, frame = await hub.next_frame(seen)
            yield f"event: frame\ndata: {json.dumps(frame, separators=(',', ':'))}\n\n"

    async def api_live(_: Request) -> Response:
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return Starlette(routes=[
        Route("/", page), Route("/api/graph", api_graph), Route("/api/frame", api_frame),
        Route("/api/node/{name}", api_node), Route("/api/live", api_live), Route("/api/pings", api_pings),
    ])
