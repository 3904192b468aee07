"""``snekbed links apply|show|clear|check``: shape, inspect and measure the links of a running Docker run.

``links`` acts on a running Docker run (default: the most recent one, ``--run-id``
to pick): ``apply``/``clear`` shape it from the host (:mod:`orchestrator.backends.shaping_runs`),
``show`` prints the record next to the live state, ``check`` measures every link and
judges it against its class (:mod:`orchestrator.tools.links_check`). This module parses, calls
and prints only.

Exit codes (:mod:`contract.exit_codes`): 0 done; 1 ``show`` found a link end out of sync, ``check`` a link out of
its class's tolerances, or shaping failed part-way; 2 refused before any link end was touched: no such run, no
Docker engine, no running link ends, a backend this host cannot do, a run file that cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from contract.exit_codes import FAILED

from orchestrator.backends.engine import EngineUnreachable, docker_client
from orchestrator.backends.shaping import ShapingError, ShapingRefused
from orchestrator.backends.shaping_runs import apply_run, clear_run, show_run
from orchestrator.cli.options import BadInput
from orchestrator.model.runs import RunError, open_run, runs_root
from orchestrator.tools.links_check import CheckOptions, check_run, tolerances

__all__ = ["links"]

_NEEDS_TOPOLOGY = "needs a running topology: see `snekbed up`"

_run_id_option = click.option("--run-id", default=None, help="The run to act on [default: the most recent run].")
_runs_dir_option = click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                                help="Where run directories live [default: $SNEKBED_RUNS_DIR or ./runs].")


def _target(runs_dir: Path | None, run_id: str | None, sub: str) -> tuple[str, Any]:
    """The run's id (default: the latest) and a client of the engine it runs on; exit 2 when there is no such run
    or the engine does not answer."""
    try:
        rid = open_run(runs_root(runs_dir), run_id).run_id
    except RunError as exc:
        raise BadInput(f"{exc}; `snekbed links {sub}` {_NEEDS_TOPOLOGY}") from None
    try:
        return rid, docker_client()
    except EngineUnreachable as exc:
        raise BadInput(str(exc)) from None


def _refused_or_failed(exc: ShapingError) -> click.ClickException:
    """Exit 2 for a request refused before any link end was touched, 1 for shaping that failed part-way."""
    return BadInput(str(exc)) if isinstance(exc, ShapingRefused) else click.ClickException(str(exc))


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _probe_line(caps: dict[str, Any], backend: str) -> str:
    names = ("netem", "tbf", "htb", "ifb", "iptables_statistic")
    found = " ".join(f"{k}={'yes' if caps.get(k) else 'no'}" for k in names)
    return f"probe: {found} -> backend {backend}"


@click.group()
def links() -> None:
    """Shape, inspect and measure the links of a running topology (Docker runs).

    Shaping runs on the host inside each container's network namespace (nsenter);
    interfaces are found by address, so `apply` after a network reconnect re-shapes
    the renamed interface. What was applied is kept in runs/<id>/shaping.json.
    """


@links.command()
@_run_id_option
@_runs_dir_option
@click.option("--backend", "backend_name", type=click.Choice(["kernel-netem", "kernel-partial", "userspace"]),
              default=None, help="[default: the one the run's nodes were started for, else the probe's choice]")
@click.option("--force", is_flag=True, help="Apply a backend other than the one the nodes were started for.")
@click.option("--json", "as_json", is_flag=True, help="Print the shaping record as JSON.")
def apply(run_id: str | None, runs_dir: Path | None, backend_name: str | None, force: bool, as_json: bool) -> None:
    """Shape both ends of every link of the run with its class (idempotent; also re-applies after a reconnect)."""
    rid, client = _target(runs_dir, run_id, "apply")
    try:
        record = apply_run(rid, backend=backend_name, force=force, client=client,  # type: ignore[arg-type]
                           runs_dir=runs_dir)
    except ShapingError as exc:
        raise _refused_or_failed(exc) from None
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    from rich.table import Table

    console = _console()
    console.print(_probe_line(record.capabilities, record.backend))
    if record.fallback:
        console.print(record.fallback)
    table = Table(title=f"run {rid}: links shaped ({record.backend})")
    for column in ("link", "class", "node", "dev", "rate", "loss", "delay/jitter", "commands"):
        table.add_column(column)
    for e in record.endpoints:
        commands = f"{len(e.commands) - len(e.skipped)} run, {len(e.skipped)} in place, {len(e.removed)} stale removed"
        table.add_row(e.link, e.link_class, e.node, e.dev, _short(e.where["rate"]), _short(e.where["loss"]),
                      _short(e.where["delay"]), commands)
    console.print(table)
    console.print("rate: egress qdisc of each end; loss: DROP on each end's INPUT from the peer; "
                  "node: the nodes' transports (from their peer URIs)")


def _short(where: str) -> str:
    """'kernel: tbf on eth0 egress' -> 'tbf'; 'kernel: iptables statistic ...' -> 'iptables INPUT'."""
    if where.startswith("kernel: "):
        first = where.removeprefix("kernel: ").split()[0]
        return "iptables INPUT" if first == "iptables" else first
    return "node" if where.startswith("node") else where


@links.command()
@_run_id_option
@_runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print {record, live} as JSON.")
def show(run_id: str | None, runs_dir: Path | None, as_json: bool) -> None:
    """Show what `apply` recorded per link end and whether it is still live (exit 1 when not in sync)."""
    rid, client = _target(runs_dir, run_id, "show")
    try:
        record, states = show_run(rid, client=client, runs_dir=runs_dir)
    except ShapingError as exc:
        raise _refused_or_failed(exc) from None
    if as_json:
        click.echo(json.dumps({"record": record.model_dump() if record else None,
                               "live": [s.model_dump() for s in states]}, indent=2))
    else:
        from rich.table import Table

        console = _console()
        if record is None:
            console.print(f"run {rid}: no shaping record (run `snekbed links apply`); live state only")
        else:
            console.print(_probe_line(record.capabilities, record.backend))
            if record.fallback:
                console.print(record.fallback)
        applied = {(e.link, e.node): e for e in (record.endpoints if record else [])}
        table = Table(title=f"run {rid}: link shaping")
        for column in ("link", "class", "node", "backend", "dev (applied -> now)", "root qdisc", "loss rules", "state"):
            table.add_column(column)
        for st in states:
            e = applied.get((st.link, st.node))
            table.add_row(st.link, st.link_class, st.node, e.backend if e else f"({st.backend})",
                          f"{e.dev if e else '-'} -> {st.dev or 'gone'}", st.root_qdisc or "none",
                          str(len(st.loss_rules)), "in sync" if st.in_sync else "; ".join(st.problems))
        console.print(table)
    if not all(s.in_sync for s in states):
        raise SystemExit(FAILED)


@links.command()
@_run_id_option
@_runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print {link@node: [commands run]} as JSON.")
def clear(run_id: str | None, runs_dir: Path | None, as_json: bool) -> None:
    """Remove all kernel shaping from the run's links (root qdiscs and snekbed loss rules)."""
    rid, client = _target(runs_dir, run_id, "clear")
    try:
        done = clear_run(rid, client=client, runs_dir=runs_dir)
    except ShapingError as exc:
        raise _refused_or_failed(exc) from None
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    for where, commands in done.items():
        click.echo(f"{where}: " + ("; ".join(" ".join(c) for c in commands) if commands else "nothing to clear"))
    click.echo("note: the nodes' own part (delay/jitter in their peer URIs) stays until they are restarted")


@links.command()
@_run_id_option
@_runs_dir_option
@click.option("--link", "link_ids", multiple=True, help="Only this link (its index). Repeatable.")
@click.option("--metric", "metrics", multiple=True, type=click.Choice(["rtt", "loss", "rate"]),
              help="Only this metric. Repeatable. [default: all]")
@click.option("--rtt-samples", type=click.IntRange(1, 100_000), default=200, show_default=True)
@click.option("--loss-probes", type=click.IntRange(1, 1_000_000), default=5000, show_default=True,
              help="UDP probes per direction.")
@click.option("--transfer-s", type=click.FloatRange(0.1, 60), default=3.0, show_default=True,
              help="Size each TCP transfer to take about this long at the asked rate.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per link and line.")
def check(run_id: str | None, runs_dir: Path | None, link_ids: tuple[str, ...], metrics: tuple[str, ...],
          rtt_samples: int, loss_probes: int, transfer_s: float, as_json: bool) -> None:
    """Measure RTT, loss and throughput per link and compare with its class (exit 1 when any link fails).

    Tolerances (issue 4): RTT median within 10 %, throughput within 10 %, loss within
    1 percentage point. RTT goes through the nodes (admin /ping), loss and throughput
    through programs run inside the containers.
    """
    rid, client = _target(runs_dir, run_id, "check")
    options = CheckOptions(metrics=metrics or ("rtt", "loss", "rate"), rtt_samples=rtt_samples,
                           loss_probes=loss_probes, transfer_s=transfer_s)
    try:
        results = check_run(rid, client=client, runs_dir=runs_dir, options=options, links=link_ids or None)
    except ShapingError as exc:
        raise _refused_or_failed(exc) from None
    if as_json:
        for r in results:
            click.echo(json.dumps(r.to_json()))
    else:
        _print_checks(rid, results)
    if not results or not all(r.passed for r in results):
        raise SystemExit(FAILED)


def _fmt(value: Any, unit: str = "") -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v, unit)}" for k, v in value.items())
    return "-" if value is None else f"{value:g}{unit}" if isinstance(value, (int, float)) else str(value)


def _print_checks(run_id: str, results: list[Any]) -> None:
    from rich.table import Table

    console = _console()
    if results:
        first = results[0]
        console.print(_probe_line(first.probe, first.backend))
        if first.fallback:
            console.print(first.fallback)
        console.print("tolerances: " + ", ".join(f"{k}={v:g}" for k, v in tolerances().items()))
    common = set.intersection(*(set(r.notes) for r in results)) if results else set()
    for note in results[0].notes if results else []:
        if note in common:
            console.print(f"note: {note}", markup=False)
    for r in results:
        verdict = "PASS" if r.passed else "FAIL"
        table = Table(title=f"run {run_id} link {r.link} ({r.link_class}, {r.backend}): {verdict}")
        for column in ("metric", "asked", "got", "tolerance", "verdict"):
            table.add_column(column)
        rows = {"rtt": ("RTT median", r.asked["rtt_ms"], r.got.get("rtt_ms"), " ms"),
                "loss": ("loss", r.asked["loss_pct"], r.got.get("loss_pct"), " %"),
                "rate": ("link rate", r.asked["rate_mbit"], r.got.get("rate_mbit"), " Mbit/s")}
        for metric, c in r.checks.items():
            label, asked, got, unit = rows[metric]
            verdict = "skipped" if "skipped" in c else ("pass" if c["pass"] else "FAIL")
            table.add_row(label, _fmt(asked, unit), _fmt(got, unit) if "error" not in c else c["error"],
                          c.get("tolerance", "-"), verdict)
        if "rtt_p95_ms" in r.got:
            table.add_row("RTT p95 (not judged)", _fmt(r.asked["rtt_p95_ms"], " ms"), _fmt(r.got["rtt_p95_ms"], " ms"),
                          "-",
                          f"{r.got['rtt_samples']}/{r.got['rtt_sent']} samples")
        if "goodput_mbit" in r.got:
            table.add_row("TCP goodput (not judged)", "-", _fmt(r.got["goodput_mbit"], " Mbit/s"), "-",
                          f"{r.got['transfer_bytes']} B each way")
        console.print(table)
        by_node: dict[str, list[str]] = {}
        for key, where in r.shaping.items():
            part, _, node = key.partition("@")
            if where != "-":
                by_node.setdefault(node or "both ends", []).append(f"{part}: {where}")
        for node, parts in by_node.items():
            console.print(f"  {node}: " + "; ".join(parts), markup=False)
        for note in r.notes:
            if note not in common:
                console.print(f"  note: {note}", markup=False)
