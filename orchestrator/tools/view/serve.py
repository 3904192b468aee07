"""Serving the view: a recorded run replayed, or a running Docker run followed live, on ``HOST:PORT`` until
Ctrl-C; where a replay opens (``--at``); and the summary ``snekbed view --check`` prints (what the page would
show at the run's end).

Ctrl-C (SIGINT) is the way to stop the page, so it is not an error: the serving loop receives the signal itself
(``trio.open_signal_receiver``), cancels the server and the live poller, and :func:`replay` / :func:`follow_live`
return normally. A SIGINT that lands outside that loop (while a run directory is still loading) raises a plain
``KeyboardInterrupt``, never one wrapped in an exception group.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import docker.errors
import trio

from node.config import HostPort
from node.httpserve import serve_app

from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.docker_session import DockerSession
from orchestrator.backends.engine import EngineUnreachable, docker_client
from orchestrator.model.runs import RunDir, RunError
from orchestrator.model.topology import TopologyError
from orchestrator.tools.view.app import POLL_S, LiveHub, build_app, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import DockerLive
from orchestrator.tools.view.timeline import Timeline, TimelineError

__all__ = ["DEFAULT_LISTEN", "serve_replay", "serve_live", "docker_live", "replay", "follow_live", "check_summary",
           "open_time", "AT_CHOICES"]

DEFAULT_LISTEN = "127.0.0.1:8765"
Announce = Callable[[str], None]  # told the page's URL once it is served
FAULT_LEAD_S = 0.001  # --at first-fault opens this long before the fault: its tick under the cursor, its effect next


AT_CHOICES = ("start", "first-fault")  # or seconds from the run's start


async def _serve(app: object, where: HostPort, announce: Announce, hub: LiveHub | None = None) -> None:
    """Serve until SIGINT, then stop everything and return."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            if hub is not None:
                await nursery.start(hub.run)
            bound = await nursery.start(serve_app, app, where, trio.sleep_forever)
            announce(f"http://{bound}/")
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


def _run(main: Callable[..., Awaitable[None]], *args: object) -> None:
    """``trio.run``, with a KeyboardInterrupt or OSError that a nursery wrapped in an exception group unwrapped."""
    try:
        trio.run(main, *args)
    except BaseExceptionGroup as group:
        for kind in (KeyboardInterrupt, OSError):
            match, rest = group.split(kind)
            if match is not None and rest is None:
                first = match.exceptions[0]
                while isinstance(first, BaseExceptionGroup):
                    first = first.exceptions[0]
                raise first from None
        raise


def open_time(timeline: Timeline, at: str) -> float:
    """Where the replay opens: ``start`` (the run's first instant), ``first-fault`` (just before the first fault),
    or seconds from the run's start. Raises TimelineError naming ``--at`` for anything else."""
    span = timeline.t_end - timeline.t_start
    if at == "start":
        return timeline.t_start
    if at == "first-fault":
        if not timeline.faults:
            raise TimelineError(f"--at first-fault: run {timeline.run_id} has no fault (its actions.jsonl has no "
                                "kill, pause, partition, link change, join or adversary)")
        return max(timeline.t_start, timeline.faults[0].t - FAULT_LEAD_S)
    try:
        seconds = float(at)
    except ValueError:
        raise TimelineError(f"--at {at!r}: expected start, first-fault or seconds from the run's start") from None
    if not 0.0 <= seconds <= span:
        raise TimelineError(f"--at {at}: the run lasts {span:.3f} s (give 0 to {span:.3f})")
    return timeline.t_start + seconds


async def serve_replay(timeline: Timeline, where: HostPort, announce: Announce, at: float | None = None) -> None:
    await _serve(build_app(timeline, open_at=at), where, announce)


async def serve_live(live: DockerLive, where: HostPort, announce: Announce, interval_s: float = POLL_S) -> None:
    hub = LiveHub(live, interval_s)
    await _serve(build_live_app(hub), where, announce, hub)


def docker_live(run: RunDir) -> DockerLive:
    """The live source of a Docker run directory. Raises RunError; EngineUnreachable when the engine is away."""
    meta = run.meta()
    if meta.get("backend") != "docker":
        raise RunError(f"run {run.run_id} used the {meta.get('backend') or 'unknown'!r} backend: --live follows Docker "
                       "runs (an in-process run is live with `snekbed sim --clock real --view HOST:PORT`; "
                       f"replay this one with `snekbed view {run.path}`)")
    try:  # the admin endpoints from docker.json, as every live command reads them
        session = DockerSession.open(run, DockerBackend(docker_client()))
    except TopologyError as exc:
        raise RunError(str(exc)) from None
    if not session.endpoints:
        raise RunError(f"{run.path / 'docker.json'}: field 'control.nodes': no node addresses (did `up` finish?)")
    graph = GraphInfo.from_topology_doc(run.read_json("topology.json", {}) or {}, session.keys)
    return DockerLive(run, session.backend, session.endpoints, graph)


def replay(timeline: Timeline, where: HostPort, announce: Announce, at: float | None = None) -> None:
    """Serve the replay page of ``timeline``, opening at ``at`` (default: its start), until Ctrl-C.

    Raises OSError (the address)."""
    _run(serve_replay, timeline, where, announce, at)


def follow_live(run: RunDir, where: HostPort, announce: Announce, interval_s: float = POLL_S) -> None:
    """Serve the live page of the Docker run ``run``, polling its nodes every ``interval_s``, until Ctrl-C.

    Raises RunError (not a Docker run, no addresses), EngineUnreachable, OSError (the address).
    """
    try:
        source = docker_live(run)
        try:
            _run(serve_live, source, where, announce, interval_s)
        finally:
            source.close()
    except docker.errors.DockerException as exc:
        raise EngineUnreachable(f"cannot reach the Docker engine: {exc}") from exc


def check_summary(timeline: Timeline) -> dict[str, Any]:
    """What the replay page would show at the run's end: ``snekbed view --check``'s JSON object."""
    end = timeline.at(timeline.t_end - 1e-6)
    return {"run_id": timeline.run_id, "nodes": len(timeline.graph.nodes), "t_start": timeline.t_start,
            "t_end": timeline.t_end, "faults": [f.to_dict() for f in timeline.faults], "series": timeline.series(),
            "dumps": [{k: v for k, v in d.to_dict().items() if k != "nodes"} for d in timeline.dumps],
            "roots_at_end": end["roots"], "skipped": timeline.skipped_count}
