"""``snekbed view``: serve the page for a recorded run (replay) or a running Docker run (live)
(orchestrator/tools/view/; docs/view.md).

Exit codes (:mod:`contract.exit_codes`): 0 after Ctrl-C, which is how a page is stopped (one line, no traceback),
or after ``--check``; 2 when there is nothing to show or nowhere to show it: a run directory that cannot be
replayed (the message names the file, line and field), no such run, an ``--at`` the run does not have, no Docker
engine for ``--live``, or a ``--listen`` address that cannot be bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from orchestrator.backends.docker_net import DockerBackendError
from orchestrator.cli.options import BadInput, address_option
from orchestrator.model.runs import RunError, open_run, runs_root
from orchestrator.tools.view.app import POLL_S
from orchestrator.tools.view.serve import DEFAULT_LISTEN, check_summary, follow_live, open_time, replay
from orchestrator.tools.view.timeline import Timeline, TimelineError

__all__ = ["view"]


def _announce(url: str) -> None:
    click.echo(f"snekbed view: {url} (Ctrl-C to stop)", err=True)


def _stopped() -> None:
    click.echo("snekbed view: stopped (Ctrl-C)", err=True)


@click.command()
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--live", is_flag=True, help="Follow a running Docker run (the --run-id one, or the most recent).")
@click.option("--run-id", default=None, help="The run under --runs-dir [default: the most recent run].")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where runs are [default: $SNEKBED_RUNS_DIR or ./runs].")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to serve the page (port 0: any free port).")
@click.option("--interval-s", type=float, default=POLL_S, show_default=True, help="--live: poll the nodes this often.")
@click.option("--at", "at", default="start", show_default=True, metavar="start|first-fault|SECONDS",
              help="Replay: open at the run's start, just before its first fault, or SECONDS after its start.")
@click.option("--check", is_flag=True, help="Replay: load the run, print what the page would show at its end, exit.")
def view(run_dir: Path | None, live: bool, run_id: str | None, runs_dir: Path | None, listen: str,
         interval_s: float, at: str, check: bool) -> None:  # fmt: skip
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
    if live and at != "start":
        raise click.UsageError("--at is for replay (a live page shows now)")
    try:
        if run_dir is not None:
            path = run_dir
        else:
            run = open_run(runs_root(runs_dir), run_id)
            path = run.path
            if live:
                follow_live(run, where, _announce, interval_s)
                _stopped()
                return
        timeline = Timeline.from_run(path)
        start = open_time(timeline, at)
    except (RunError, TimelineError, DockerBackendError) as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"--listen {listen}: {exc}") from None
    except KeyboardInterrupt:  # Ctrl-C while the run was loading
        _stopped()
        return
    if timeline.skipped_count:
        click.echo(f"warning: {timeline.skipped_count} bad lines skipped; first: {timeline.skipped[0]}", err=True)
    if check:
        click.echo(json.dumps(check_summary(timeline)))
        return
    try:
        replay(timeline, where, _announce, start)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise BadInput(f"--listen {listen}: {exc}") from None
    _stopped()
