"""Serving the view: a recorded run replayed, or a running Docker run followed live, on ``HOST:PORT`` until
interrupted; and the summary ``snekbed view --check`` prints (what the page would show at the run's end)."""

from __future__ import annotations

from collections.abc import Callable
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
from orchestrator.tools.view.timeline import Timeline

__all__ = ["DEFAULT_LISTEN", "serve_replay", "serve_live", "docker_live", "replay", "follow_live", "check_summary"]

DEFAULT_LISTEN = "127.0.0.1:8765"
Announce = Callable[[str], None]  # told the page's URL once it is served


async def _serve(app: object, where: HostPort, announce: Announce, hub: LiveHub | None = None) -> None:
    async with trio.open_nursery() as nursery:
        if hub is not None:
            await nursery.start(hub.run)
        bound = await nursery.start(serve_app, app, where, trio.sleep_forever)
        announce(f"http://{bound}/")


async def serve_replay(timeline: Timeline, where: HostPort, announce: Announce) -> None:
    await _serve(build_app(timeline), where, announce)


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


def replay(timeline: Timeline, where: HostPort, announce: Announce) -> None:
    """Serve the replay page of ``timeline`` until interrupted. Raises OSError (the address), KeyboardInterrupt."""
    trio.run(serve_replay, timeline, where, announce)


def follow_live(run: RunDir, where: HostPort, announce: Announce, interval_s: float = POLL_S) -> None:
    """Serve the live page of the Docker run ``run``, polling its nodes every ``interval_s``, until interrupted.

    Raises RunError (not a Docker run, no addresses), EngineUnreachable, OSError (the address), KeyboardInterrupt.
    """
    try:
        source = docker_live(run)
        try:
            trio.run(serve_live, source, where, announce, interval_s)
        finally:
            source.close()
    except docker.errors.DockerException as exc:
        raise EngineUnreachable(f"cannot reach the Docker engine: {exc}") from exc


def check_summary(timeline: Timeline) -> dict[str, Any]:
    """What the replay page would show at the run's end: ``snekbed view --check``'s JSON object."""
    end = timeline.at(timeline.t_end - 1e-6)
    return {"run_id": timeline.run_id, "nodes": len(timeline.graph.nodes), "t_start": timeline.t_start,
            "t_end": timeline.t_end, "faults": [f.to_dict() for f in timeline.faults], "series": timeline.series(),
            "roots_at_end": end["roots"], "skipped": timeline.skipped_count}
