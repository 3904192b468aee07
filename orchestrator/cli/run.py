"""``snekbed up|status|ping|kill-root|down|compose``: runs of a topology as containers (or in-process).

The command line only: what the commands do is :mod:`orchestrator.sessions.lifecycle` (and
:mod:`orchestrator.tools.compose`). Without ``--run-id`` every command acts on the most recent run (``runs/LATEST``).
``up`` loads and validates the topology before anything touches Docker, so a bad
file fails with its file, line and field and nothing is created. When ``up`` fails or
is interrupted (Ctrl-C) after that, it removes every container and network it created
(by the run's label) before exiting, and meta.json records ``outcome`` and ``rollback``.
A run that comes up but does not converge in time stays up for inspection (exit 1).

Exit codes (the rule of :mod:`contract.exit_codes`): 0 done; 1 not converged in time, pings lost, leftovers after
``down``, or an engine error once something was made; 2 refused before anything was made (a bad file or flag, a
run that does not exist, a request this engine cannot serve: ``up`` then leaves no run directory and ``runs/LATEST``
as it was); 130 interrupted (rolled back).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from contract.exit_codes import FAILED, INTERRUPTED
from node.core.variants import VariantError, VariantSpec

from orchestrator.backends.docker_net import DockerBackendError
from orchestrator.backends.image_common import ImageError
from orchestrator.cli.options import BadInput
from orchestrator.cli.render import sim_table
from orchestrator.model.hosting import docker_radio_refusal, in_process_refusal, mobility_refusal
from orchestrator.model.runs import RunDir, RunError, check_new_run, create_run, new_run_id, open_run, runs_root
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology
from orchestrator.sessions.lifecycle import (
    DEFAULT_HOST_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    Refused,
    UpCallbacks,
    UpError,
    open_session,
    prepare_docker,
    rolled_back,
    status_report,
    take_down,
    up_docker,
    up_inproc,
)
from orchestrator.sessions.sim import refused_sentence
from orchestrator.tools.compose import COMPOSE_POOL, ComposeError, write_compose

__all__ = ["up", "status", "ping", "kill_root", "down", "compose"]

runs_dir_option = click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                               help="Where run directories live [default: $SNEKBED_RUNS_DIR or ./runs].")
run_id_option = click.option("--run-id", default=None, help="The run to act on [default: the most recent run].")
#: what reopening a live run can raise (a run of another backend, a bad topology.json, an engine away)
_SESSION_ERRORS = (RunError, TopologyError, DockerBackendError)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _load(path: Path) -> Topology:
    """The validated topology; TopologyError is exit 2 with its message (file, line and field)."""
    try:
        return load_topology(path, on_warning=lambda msg: click.echo(f"warning: {msg}", err=True))
    except TopologyError as exc:
        raise BadInput(str(exc)) from None


def _open(runs_dir: Path | None, run_id: str | None) -> RunDir:
    try:
        return open_run(runs_root(runs_dir), run_id)
    except RunError as exc:
        raise BadInput(str(exc)) from None


def _session(run: RunDir) -> Any:
    """The live run reopened; what stops that (another backend, a bad run file, no engine) is exit 2."""
    try:
        return open_session(run)
    except _SESSION_ERRORS as exc:
        raise BadInput(str(exc)) from None


def _short(key: str | None) -> str:
    return key[:12] if key else "-"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _node_table(report: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("node", "container", "key", "root", "parent", "coords", "descending", "peers", "table"):
        table.add_column(col)
    for row in report["nodes"]:
        root = row["root_name"] or _short(row["root"])
        table.add_row(row["name"], row["container"], _short(row["key"]), root,
                      row["parent_name"] or _short(row["parent"]),
                      json.dumps(row["coords"]) if row["coords"] is not None else "-",
                      row["descending_name"] or _short(row["descending"]),
                      "-" if row["peers"] is None else str(row["peers"]),
                      "-" if row["routing_table_size"] is None else str(row["routing_table_size"]))
    verdict = "[green]converged[/]" if report["snake"] else (
        "[yellow]tree converged, snake not yet[/]" if report["tree"] else "[red]not converged[/]")
    table.caption = f"{report['running']} running; {verdict}" + (
        f"; unreachable: {', '.join(report['unreachable'])}" if report["unreachable"] else "")
    return table


# ---------------------------------------------------------------- up


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--backend", "backend_name", type=click.Choice(["docker", "inproc", "swarm"]), default="docker",
              show_default=True, help="docker: containers on this engine; swarm: services of the swarm this engine "
              "manages (userspace shaping; docs/orchestrator.md, \"Swarm\"); inproc: one process.")
@click.option("--run-id", default=None, help="Id of the new run (names its directory, containers and networks) "
              "[default: 8 random hex digits].")
@runs_dir_option
@click.option("--seed", type=int, default=0, show_default=True, help="Run seed: node keys are derived from it and the name.")
@click.option("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Give up waiting for convergence this long after the last container started.")
@click.option("--shaping", type=click.Choice(["auto", "kernel", "userspace"]), default="auto", show_default=True,
              help="auto: probe the host (tc/iptables where possible, the rest in the node); userspace: all in the node.")
@click.option("--address-pool", default=None, help="IPv4 pool for the run's networks [default: 10.213.0.0/16].")
@click.option("--image", default=None, help="Node image to run [default: build or reuse snekbed-node:<hash>].")
@click.option("--workers", type=int, default=8, show_default=True, help="Containers created concurrently.")
@click.option("--variant", "variant_text", default=None, metavar="NAME[,KNOB=VALUE...]",
              help="Protocol variant of every node that does not name its own (docs/variants.md) [default: snek].")
@click.option("--knob", "knobs", multiple=True, metavar="KEY=VALUE", help="A variant knob for those nodes; repeatable.")
@click.option("--monitoring", is_flag=True,
              help="Docker: also run Prometheus for the run (on its control network, UI on 127.0.0.1; its URL is "
                   "printed) scraping every node; `snekbed down` removes it with the run. docs/monitoring.md")
@click.option("--prometheus-image", default=None, metavar="IMAGE",
              help="Prometheus image for --monitoring [default: build or reuse snekbed-prometheus, no registry needed].")
@click.option("--host-timeout-s", type=float, default=DEFAULT_HOST_TIMEOUT_S, show_default=True,
              help="Docker, topologies with host nodes (host: true): how long to wait for each to be started with "
                   "the printed `snekbed node` command and answer on its admin API.")
@click.option("--pinecone-src", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Docker, nodes whose spec is pinecone: the Pinecone reference to build the reference node from "
                   "(a checkout or a GOPATH tree) [default: $SNEKBED_PINECONE_SRC, else ../shared/reference].")
@click.option("--reference-image", default=None, metavar="IMAGE",
              help="Docker/swarm, nodes whose spec is pinecone: run this reference node image instead of building one "
                   "(a multi-host swarm: the tag `snekbed cluster up` printed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def up(topology: Path, backend_name: str, run_id: str | None, runs_dir: Path | None, seed: int, timeout_s: float,
       shaping: str, address_pool: str | None, image: str | None, workers: int, variant_text: str | None,
       knobs: tuple[str, ...], monitoring: bool, prometheus_image: str | None, host_timeout_s: float,
       pinecone_src: Path | None, reference_image: str | None, as_json: bool) -> None:  # fmt: skip
    """Bring TOPOLOGY up and wait until it has converged (or --timeout-s passes)."""
    topo = _load(topology)  # before anything else: a bad file creates nothing
    if variant_text is not None or knobs:
        try:
            topo = topo.with_variant(VariantSpec.parse(variant_text or "snek").with_knobs(knobs))
        except VariantError as exc:
            raise click.BadParameter(str(exc), param_hint="--variant/--knob") from None
    _refuse_flags(topo, backend_name, monitoring, shaping)
    root = runs_root(runs_dir)
    run_id = run_id or new_run_id()
    try:
        check_new_run(root, run_id)
    except RunError as exc:
        raise BadInput(str(exc)) from None
    if backend_name == "inproc":
        if any(n.host for n in topo.nodes):
            click.echo("warning: --backend inproc runs host nodes (host: true) in process like the others", err=True)
        run = create_run(root, run_id, topology=topo.to_record())
        _print_inproc(up_inproc(topo, run, seed=seed, timeout_s=timeout_s), run, as_json)
        return
    made: list[RunDir] = []  # the run, once the engine has accepted the request
    try:
        done = _up_with_progress(topo, root, run_id, made, as_json=as_json, swarm=backend_name == "swarm",
                                 shaping=shaping, pool=address_pool, image=image, workers=workers,
                                 monitoring=monitoring, prometheus_image=prometheus_image, pinecone_src=pinecone_src,
                                 reference_image=reference_image, seed=seed, timeout_s=timeout_s, host_timeout_s=host_timeout_s)
    except KeyboardInterrupt:
        said = rolled_back(made[0]) if made else "nothing was made (no run directory)"
        _console(stderr=True).print(f"[red]interrupted[/]: {said}")
        sys.exit(INTERRUPTED)
    except (Refused, RunError) as exc:  # before anything was made: no run directory, runs/LATEST as it was
        raise BadInput(str(exc)) from None
    except (UpError, ImageError, DockerBackendError) as exc:
        raise click.ClickException(str(exc)) from None
    _print_up(done, topo, made[0], timeout_s, as_json)
    if not done.out["converged"]:
        sys.exit(FAILED)


def _refuse_flags(topo: Topology, backend_name: str, monitoring: bool, shaping: str) -> None:
    """What ``up`` refuses on sight, before any run directory exists (usage errors: exit 2)."""
    refused = in_process_refusal(topo.variants(), backend_name)
    if refused is not None:  # nodes of the Pinecone reference, in process
        raise click.UsageError(refused)
    moving = mobility_refusal(topo.radios, f"--backend {backend_name}") if backend_name == "swarm" else None
    if moving is None and backend_name == "docker" and topo.radios:
        moving = docker_radio_refusal(topo)
    if moving is not None:
        raise click.UsageError(moving)
    if backend_name == "inproc" and monitoring:
        raise click.UsageError("--monitoring runs Prometheus next to Docker nodes; watch an in-process run with "
                               "`snekbed sim --clock real --metrics HOST:PORT`")
    if backend_name == "swarm" and monitoring:
        raise click.UsageError("--monitoring runs Prometheus on the run's control network next to one engine; it is "
                               "not supported with --backend swarm (each node's metrics port is published in host "
                               "mode: `snekbed status --json` does not list it, `docker service inspect` does)")
    if backend_name == "swarm" and shaping == "kernel":
        raise click.UsageError("--shaping kernel: the swarm backend shapes in the nodes' userspace transport only "
                               "(the kernel backend cannot reach tasks on other hosts)")


def _up_with_progress(topo: Topology, root: Path, run_id: str, made: list[RunDir], *, as_json: bool, seed: int,
                      timeout_s: float, host_timeout_s: float, **prepare: Any) -> Any:
    """:func:`prepare_docker`, then the run's directory (appended to ``made``), then :func:`up_docker`; their
    progress as bars on stderr (gone afterwards with --json)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(stderr=True), transient=as_json) as bar:
        tasks: dict[str, Any] = {}

        def task(name: str, total: int | None) -> Any:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            return tasks[name]

        callbacks = UpCallbacks(
            image_line=lambda line: bar.update(task("node image", None), description=f"node image: [dim]{line[:50]}"),
            image_built=lambda tag: bar.update(task("node image", None), total=1, completed=1,
                                               description=f"node image {tag}"),
            phase=lambda phase, done, total: bar.update(task(phase, total), completed=done, total=total),
            converging=lambda elapsed, ok, total: bar.update(task("converged nodes", total), completed=ok, total=total,
                                                             description=f"converged nodes ({elapsed:.1f} s)"),
            # host nodes: the commands to run, on stderr, never wrapped
            announce=lambda text: bar.console.print(text, markup=False, highlight=False, soft_wrap=True),
        )
        prep = prepare_docker(topo, callbacks=callbacks, **prepare)
        made.append(create_run(root, run_id, topology=topo.to_record()))
        return up_docker(topo, made[0], prep, seed=seed, timeout_s=timeout_s, host_timeout_s=host_timeout_s,
                         callbacks=callbacks)


def _print_up(done: Any, topo: Topology, run: RunDir, timeout_s: float, as_json: bool) -> None:
    out, conv, result = done.out, done.convergence, done.result
    if out["links_refused"]:
        click.echo(f"warning: {refused_sentence(out['links_refused'])}", err=True)
    if out["shaping_unapplied"]:  # said while the run came up too (announce): again where the run is summed up
        click.echo(f"warning: {len(out['shaping_unapplied'])} link end(s) of reference nodes not shaped as their "
                   "class asks (--json shaping_unapplied; docs/interop.md, \"Shaping\")", err=True)
    if as_json:
        click.echo(json.dumps(out))
        return
    con = _console()
    con.print(_node_table(done.session.status(), f"snekbed up: {topo.name} (run {run.run_id})"))
    state = "[green]converged[/]" if conv.converged else f"[red]not converged after {timeout_s:g} s[/]"
    since = "the nodes stopped moving" if "mobility" in out else "the last container started"
    con.print(f"{state}: tree {_fmt(conv.tree_s)} s, snake {_fmt(conv.snake_s)} s after {since}; networks "
              f"{result.network_s:.1f} s, containers {result.container_s:.1f} s; shaping {result.shaping_backend}; "
              f"run dir {run.path}")
    if out["prometheus"]:
        con.print(f"Prometheus: {out['prometheus']} (scrapes every node of the run; removed by snekbed down)")
    if (m := out.get("mobility")) is not None:
        con.print(f"moved {m['moved_s']:g} s: radio links {m['link_ups']} up, {m['link_downs']} down, "
                  f"{len(m['radio_links_at_end'])} up where the nodes stopped (convergence timed from then); "
                  f"changes in effect after p50 {m['effect_ms']['p50']} ms, p99 {m['effect_ms']['p99']} ms")


def _print_inproc(out: dict[str, Any], run: RunDir, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(out))
    else:
        sim_table(out)
        _console().print(f"run dir {run.path}")
    if out["snake_converged_s"] is None:
        sys.exit(FAILED)


# ---------------------------------------------------------------- status, ping, kill-root


@click.command()
@run_id_option
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(run_id: str | None, runs_dir: Path | None, as_json: bool) -> None:
    """Show every node of a run: container, root, parent, coordinates, descending; and whether it converged."""
    run = _open(runs_dir, run_id)
    try:
        report = status_report(run)
    except _SESSION_ERRORS as exc:
        raise BadInput(str(exc)) from None
    if report["backend"] == "inproc":  # what it recorded
        click.echo(json.dumps(report, indent=None if as_json else 2))
        return
    if as_json:
        click.echo(json.dumps(report))
    else:
        _console().print(_node_table(report, f"snekbed status: {report['topology']} (run {run.run_id})"))


@click.command()
@click.argument("sender")
@click.argument("target")
@run_id_option
@runs_dir_option
@click.option("--mode", type=click.Choice(["snek", "tree"]), default="snek", show_default=True)
@click.option("--count", type=int, default=3, show_default=True)
@click.option("--timeout-s", type=float, default=5.0, show_default=True, help="Per ping.")
@click.option("--json", "as_json", is_flag=True)
def ping(sender: str, target: str, run_id: str | None, runs_dir: Path | None, mode: str, count: int,
         timeout_s: float, as_json: bool) -> None:
    """Ping TARGET from SENDER (node names) through SENDER's admin API; recorded in pings.jsonl."""
    session = _session(_open(runs_dir, run_id))
    try:
        lines = session.ping([(sender, target)], [mode], count=count, timeout_s=timeout_s)
    except RunError as exc:  # a node the run does not have: nothing was sent
        raise BadInput(str(exc)) from None
    received = [x for x in lines if x["received"]]
    if as_json:
        click.echo(json.dumps({"sent": len(lines), "received": len(received), "pings": lines}))
    else:
        for x in lines:
            click.echo(f"{sender} -> {target} ({mode}): " + (f"rtt {x['rtt_ms']:.2f} ms, hops {x['hops']} "
                       f"(shortest path {x['shortest_links']} links)" if x["received"] else
                       "lost" + (f" ({x['error']})" if x.get("error") else "")))
        click.echo(f"{len(received)}/{len(lines)} received")
    if len(received) < len(lines):
        sys.exit(FAILED)


@click.command("kill-root")
@run_id_option
@runs_dir_option
@click.option("--timeout-s", type=float, default=None, help="Wait this long [default: the bound from the protocol timers].")
@click.option("--pairs", type=int, default=4, show_default=True, help="Pairs to ping (snek and tree) once re-converged.")
@click.option("--json", "as_json", is_flag=True)
def kill_root(run_id: str | None, runs_dir: Path | None, timeout_s: float | None, pairs: int, as_json: bool) -> None:
    """Kill the root's container, wait for re-convergence within the timer-derived bound, ping again."""
    session = _session(_open(runs_dir, run_id))
    try:
        out = session.kill_root(timeout_s=timeout_s, pairs=pairs)
    except RunError as exc:  # no root to kill here (no node answers, the root is a host node): nothing was killed
        raise BadInput(str(exc)) from None
    except DockerBackendError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(out))
    else:
        state = "re-converged" if out["converged"] else f"NOT re-converged within {out['waited_s']:.1f} s"
        pings = ", ".join(f"{m} {c['received']}/{c['sent']}" for m, c in out["pings"].items()) or "none"
        click.echo(f"killed root {out['killed']} ({out['killed_key'][:16]}); {state}: tree {_fmt(out['tree_converged_s'])} s, "
                   f"snake {_fmt(out['snake_converged_s'])} s (bound {out['bound_s']:g} s); pings {pings}")
    lost = any(c["received"] < c["sent"] for c in out["pings"].values())
    if not out["converged"] or lost:
        sys.exit(FAILED)


# ---------------------------------------------------------------- down, compose


@click.command()
@run_id_option
@runs_dir_option
@click.option("--all", "all_runs", is_flag=True, help="Remove every container and network labelled snekbed.run.")
@click.option("--json", "as_json", is_flag=True)
def down(run_id: str | None, runs_dir: Path | None, all_runs: bool, as_json: bool) -> None:
    """Remove a run's containers, then its networks (by label; also after a crash or Ctrl-C)."""
    if all_runs and run_id:
        raise click.UsageError("give --run-id or --all, not both")
    try:
        target, report = take_down(runs_dir, run_id, all_runs=all_runs)
    except (RunError, Refused) as exc:
        raise BadInput(str(exc)) from None
    except DockerBackendError as exc:
        raise click.ClickException(str(exc)) from None
    out = {"run_id": target, **dataclasses.asdict(report)}
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"{'all runs' if target is None else 'run ' + target}: removed {report.containers_removed} "
                   f"containers, {report.networks_removed} networks, {report.volumes_removed} volumes"
                   + (f"; LEFT {report.containers_left} containers, {report.networks_left} networks" if
                      report.containers_left or report.networks_left else ""))
        for line in report.errors:
            click.echo(f"  {line}", err=True)
    if report.containers_left or report.networks_left:
        sys.exit(FAILED)


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The compose file to write (e.g. compose/line-5.yml).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--subnet-pool", default=None, help="IPv4 pool the file's fixed subnets come from [default: 10.212.0.0/16].")
@click.option("--image", default="snekbed-node:latest", show_default=True)
def compose(topology: Path, output: Path, seed: int, subnet_pool: str | None, image: str) -> None:
    """Write a compose file (docker compose v2 and docker-compose 1.29) for TOPOLOGY."""
    topo = _load(topology)
    if (moving := mobility_refusal(topo.radios, "a compose file")) is not None:
        raise BadInput(moving)
    try:
        write_compose(topo, output, seed=seed, pool=subnet_pool or COMPOSE_POOL, image=image,
                      source=str(topology))
    except ComposeError as exc:  # nothing written
        raise BadInput(str(exc)) from None
    click.echo(f"wrote {output}: {len(topo.nodes)} nodes, {len(topo.links)} links")
