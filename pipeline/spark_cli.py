"""``snekbed spark up [--workers N] [--cores C] [--memory M] | status | down``: a Spark standalone cluster on this
machine to run ``snekbed analyze --master spark://127.0.0.1:PORT`` on (``pipeline.standalone``; docs/pipeline.md,
"A standalone cluster on this machine").

Exit codes (:mod:`contract.exit_codes`): 0 done; 1 the cluster failed to come up (what it started is stopped) or
could not be stopped, or ``status`` finds no cluster up; 2 refused before anything started (a port in use, a
cluster already up from the same state directory, bad options); 130 interrupted (what ``up`` started is stopped).
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import click

from contract.exit_codes import BAD_INPUT, FAILED
from pipeline.standalone import ClusterError, ClusterRefused, alive_workers, default_state_dir, read_state, start, stop

__all__ = ["spark"]

_MEMORY = re.compile(r"^(\d+)([mMgG])$")


def _refused(message: str) -> click.ClickException:
    refused = click.ClickException(message)
    refused.exit_code = BAD_INPUT
    return refused


def _memory_mb(text: str) -> int:
    m = _MEMORY.match(text)
    if not m:
        raise click.BadParameter(f"{text!r} is not a size like 1g or 1536m", param_hint="--memory")
    return int(m.group(1)) * (1024 if m.group(2) in "gG" else 1)


def _state_dir_option(f):
    return click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="where the cluster's pids, logs and worker directories go "
                             "[default: $SNEKBED_SPARK_DIR or /tmp/snekbed-spark-UID]")(f)


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


@click.group("spark")
def spark() -> None:
    """A Spark standalone cluster on 127.0.0.1 (master and workers, each its own JVM) for `snekbed analyze`."""


@spark.command("up")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="worker processes")
@click.option("--cores", type=click.IntRange(min=1), default=1, show_default=True, help="cores each worker offers")
@click.option("--memory", default="1g", show_default=True,
              help="memory each worker offers its executors (at least 1g: an executor asks for 1g)")
@click.option("--port", type=click.IntRange(0, 65535), default=7077, show_default=True,
              help="the master's port on 127.0.0.1 (0: any free one)")
@click.option("--webui-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="the master's web UI and /json status page (0: any free one)")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="seconds to wait for every worker to register")
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (master URL, pids, ports) on stdout")
def up(workers: int, cores: int, memory: str, port: int, webui_port: int, timeout_s: float, state_dir: Path | None,
       as_json: bool) -> None:
    """Start a master and WORKERS workers on 127.0.0.1; return once the master lists them all ALIVE."""
    if _memory_mb(memory) < 1024:
        raise click.BadParameter(f"{memory}: an executor asks for 1g (spark.executor.memory), so a worker needs "
                                 "at least that", param_hint="--memory")
    state_dir = state_dir or default_state_dir()
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated `up` stops what it started, as Ctrl-C does
    try:
        cluster = start(state_dir, workers=workers, cores=cores, memory=memory, port=port, webui_port=webui_port,
                        timeout_s=timeout_s, progress=lambda text: click.echo(text, err=True))
    except ClusterRefused as exc:
        raise _refused(str(exc)) from None
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted: everything `up` started is stopped", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps({**cluster.__dict__, "json_url": cluster.json_url}))
        return
    click.echo(f"Spark standalone master {cluster.master_url}: {workers} worker(s) ALIVE, {cores} core(s) and "
               f"{memory} each; status {cluster.webui_url}; state {cluster.state_dir}", err=True)
    click.echo(f"--master {cluster.master_url}")
    click.echo(f"  e.g. snekbed analyze RUN_DIR --master {cluster.master_url} --out analysis", err=True)
    where = "" if state_dir == default_state_dir() else f" --state-dir {state_dir}"
    click.echo(f"  stop it with: snekbed spark down{where}", err=True)


@spark.command("status")
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object on stdout")
def status(state_dir: Path | None, as_json: bool) -> None:
    """The master URL and the workers it lists ALIVE; exit 1 when no cluster is up."""
    state_dir = state_dir or default_state_dir()
    try:
        cluster = read_state(state_dir)
    except ClusterRefused as exc:
        raise _refused(str(exc)) from None
    alive = alive_workers(cluster.json_url) if cluster else []
    if as_json:
        click.echo(json.dumps({"master_url": cluster.master_url if cluster else None,
                               "alive_workers": [w.get("id") for w in alive]}))
    elif cluster is None:
        click.echo(f"no cluster recorded in {state_dir}", err=True)
    else:
        click.echo(f"--master {cluster.master_url}: {len(alive)} of {cluster.workers} worker(s) ALIVE "
                   f"({cluster.webui_url})")
    if cluster is None or not alive:
        sys.exit(FAILED)


@spark.command("down")
@_state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop the master, the workers and their executors (TERM, then KILL); nothing of the cluster is left."""
    state_dir = state_dir or default_state_dir()
    try:
        stopped = stop(state_dir)
    except ClusterRefused as exc:
        raise _refused(str(exc)) from None
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"stopped {', '.join(stopped)}" if stopped else f"nothing running from {state_dir}", err=True)
