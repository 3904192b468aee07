"""``snekbed view``: serve the page for a recorded run (replay) or a running Docker run (live)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import trio
from docker.errors import DockerException

from node.config import HostPort
from node.httpserve import serve_app

from orchestrator.backends.docker_session import DockerSession
from orchestrator.cli.options import address_option
from orchestrator.model.runs import RunDir, RunError, open_run, runs_root
from orchestrator.model.topology import TopologyError
from orchestrator.tools.view.app import POLL_S, LiveHub, build_app, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import DockerLive
from orchestrator.tools.view.timeline import Timeline, TimelineError

__all__ = ["view", "DEFAULT_LISTEN", "serve_live", "serve_replay"]

DEFAULT_LISTEN = "127.0.0.1:8765"


async def _serve(app: object, where: HostPort, announce: Any, hub: LiveHub | None = None) -> None:
    async with trio.open_nursery() as nursery:
        if hub is not None:
            await nursery.start(hub.run)
        bound = await nursery.start(serve_app, app, where, trio.sleep_forever)
        announce(f"http://{bound}/")


async def serve_replay(timeline: Timeline, where: HostPort, announce: Any) -> None:
    await _serve(build_app(timeline), where, announce)


async def serve_live(live: DockerLive, where: HostPort, announce: Any, interval_s: float = POLL_S) -> None:
    hub = LiveHub(live, interval_s)
    await _serve(build_live_app(hub), where, announce, hub)


def docker_live(run: RunDir) -> DockerLive:
    """The live source of a Docker run directory. Raises RunError."""
    meta = run.meta()
    if meta.get("backend") != "docker":
        raise RunError(f"run {run.run_id} used the {meta.get('backend') or 'unknown'!r} backend: --live follows Docker "
                       "runs (an in-process run is live with `snekbed sim --clock real --view HOST:PORT`; "
                       f"replay this one with `snekbed view {run.path}`)")
    try:
        session = DockerSession.open(run)  # the admin endpoints from docker.json, as every live command reads them
    except TopologyError as exc:
        raise RunError(str(exc)) from None
    if not session.endpoints:
        raise RunError(f"{run.path / 'docker.json'}: field 'control.nodes': no node addresses (did `up` finish?)")
    graph = GraphInfo.from_topology_doc(run.read_json("topology.json", {}) or {}, session.keys)
    return DockerLive(run, session.backend, session.endpoints, graph)


@click.command()
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--live", is_flag=True, help="Follow a running Docker run (the --run-id one, or the most recent).")
@click.option("--run-id", default=None, help="The run under --runs-dir [default: the most recent run].")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where runs are [default: $SNEKBED_RUNS_DIR or ./runs].")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to serve the page (port 0: any free port).")
@click.option("--interval-s", type=float, default=POLL_S, show_default=True, help="--live: poll the nodes this often.")
@click.option("--check", is_flag=True, help="Replay: load the run, print what the page would show at its end, exit.")
def view(run_dir: Path | None, live: bool, run_id: str | None, runs_dir: Path | None, listen: str,
         interval_s: float, check: bool) -> None:  # fmt: skip
    """Show a run in the browser: the graph, the tree, the snake, the root, the faults; live or replayed.

    RUN_DIR replays a recorded run directory (`snekbed sim --record`, `snekbed chaos`, `runs/<id>/`);
    without it, the --run-id (or most recent) run under --runs-dir is replayed, or followed with --live.
    """
    where = address_option(listen, "--listen")
    assert where is not None
    if not 0.05 <= interval_s <= 1.0:
        raise click.BadParameter(f"{interval_s}: between 0.05 and 1 s (the page updates at least once a second)",
                                 param_hint="--interval-s")
    if live and run_dir is not None:
        raise click.UsageError("--live follows a run by --run-id; RUN_DIR is for replay")

    def announce(url: str) -> None:
        click.echo(f"snekbed view: {url} (Ctrl-C to stop)", err=True)

    try:
        if run_dir is not None:
            path = run_dir
        else:
            run = open_run(runs_root(runs_dir), run_id)
            path = run.path
            if live:
                source = docker_live(run)
                try:
                    trio.run(serve_live, source, where, announce, interval_s)
                finally:
                    source.close()
                return
        timeline = Timeline.from_run(path)
    except (RunError, TimelineError) as exc:
        raise click.ClickException(str(exc)) from None
    except DockerException as exc:
        raise click.ClickException(f"cannot reach the Docker engine: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"--listen {listen}: {exc}") from None
    except KeyboardInterrupt:
        return
    if timeline.skipped_count:
        click.echo(f"warning: {timeline.skipped_count} bad lines skipped; first: {timeline.skipped[0]}", err=True)
    if check:
        end = timeline.at(timeline.t_end - 1e-6)
        click.echo(json.dumps({"run_id": timeline.run_id, "nodes": len(timeline.graph.nodes),
                               "t_start": timeline.t_start, "t_end": timeline.t_end,
                               "faults": [f.to_dict() for f in timeline.faults], "series": timeline.series(),
                               "roots_at_end": end["roots"], "skipped": timeline.skipped_count}))
        return
    try:
        trio.run(serve_replay, timeline, where, announce)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise click.ClickException(f"--listen {listen}: {exc}") from None
