"""``snekbed netem probe|classes``: the host's shaping capabilities and the link class table.

``netem`` needs no topology. Shaping a running topology is ``snekbed links``
(:mod:`orchestrator.cli.links`).
"""

from __future__ import annotations

import json

import click

from contract.links import default_classes
from netem.probe import probe as run_probe

__all__ = ["netem"]


@click.group()
def netem() -> None:
    """Link shaping: host capabilities and the link class table."""


@netem.command()
@click.option("--json", "as_json", is_flag=True, help="Print the capabilities as one JSON object.")
def probe(as_json: bool) -> None:
    """Test which kernel shaping features work here and pick a backend.

    Runs real tc/ip/iptables/ethtool commands inside a throwaway network namespace
    (deleted afterwards). With --json, prints {netem, tbf, htb, ifb,
    iptables_statistic, backend} on stdout and any notes on stderr.
    """
    caps = run_probe()
    if as_json:
        click.echo(json.dumps(caps.summary()))
        for note in caps.notes:
            click.echo(f"note: {note}", err=True)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="snekbed netem probe")
    table.add_column("capability")
    table.add_column("available")
    for name in ("netem", "tbf", "htb", "ifb", "iptables_statistic", "ethtool"):
        value = getattr(caps, name)
        table.add_row(name, "[green]yes[/]" if value else "[red]no[/]")
    table.add_row("backend", f"[bold]{caps.backend}[/]")
    console = Console()
    console.print(table)
    for note in caps.notes:
        console.print(f"note: {note}", markup=False, highlight=False)


@netem.command("classes")
@click.option("--json", "as_json", is_flag=True, help="Print the default table as JSON.")
def classes_cmd(as_json: bool) -> None:
    """Show the default link classes (contract/classes.yaml)."""
    table_data = default_classes()
    if as_json:
        click.echo(json.dumps({name: cls.model_dump(exclude_none=True) for name, cls in table_data.items()}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="link classes")
    for column in ("class", "link type", "rate_mbit", "delay_ms", "jitter_ms", "loss_pct", "queue_pkts"):
        table.add_column(column, no_wrap=True)
    table.add_column("source", ratio=1)
    for name, cls in table_data.items():
        s = cls.shape
        table.add_row(name, f"{cls.link_type} ({cls.link_type_number})", "-" if s.rate_mbit is None else f"{s.rate_mbit:g}",
                      f"{s.delay_ms:g}", f"{s.jitter_ms:g}", f"{s.loss_pct:g}",
                      "-" if s.effective_queue_pkts is None else str(s.effective_queue_pkts), cls.source)  # fmt: skip
    Console().print(table)
