"""``snekbed bluetooth probe``: can this machine carry Bluetooth L2CAP peerings, and on which adapters?

Prints one line per adapter (name, address, powered, rfkill), or, when Bluetooth cannot be used, every
missing piece (a Python built with Bluetooth sockets, the kernel's Bluetooth sockets, an adapter) — the
same message ``snekbed node`` gives when a Bluetooth option is refused. ``--json`` prints one object.

Exit codes: 0 when Bluetooth is usable, 1 when something is missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from node.transports import bluetooth as bt

__all__ = ["bluetooth", "probe"]


@click.group("bluetooth", context_settings={"help_option_names": ["-h", "--help"]})
def bluetooth() -> None:
    """Bluetooth L2CAP transport for host nodes (docs/node.md, "Bluetooth")."""


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


@bluetooth.command("probe")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: usable, missing, adapters.")
@click.option("--sys-class", type=click.Path(file_okay=False, path_type=Path), default=bt.SYS_CLASS_BLUETOOTH,
              show_default=True, help="Where the kernel lists adapters.")  # fmt: skip
def probe(as_json: bool, sys_class: Path) -> None:
    """List Bluetooth adapters, or say exactly what this machine lacks for Bluetooth."""
    gaps = bt.missing(sys_class)
    found = bt.adapters(sys_class)
    if as_json:
        click.echo(json.dumps({"usable": not gaps, "missing": gaps, "adapters": [a.as_dict() for a in found]}))
    else:
        for a in found:
            click.echo(f"{a.name}  address {a.address or 'unknown'}  powered {_yes_no(a.powered)}  "
                       f"rfkill-blocked {_yes_no(a.rfkill_blocked)}")  # fmt: skip
        if gaps:
            click.echo("Bluetooth is not available on this machine:")
            for gap in gaps:
                click.echo(f"  missing: {gap}")
        else:
            click.echo(f"Bluetooth is available: {len(found)} adapter(s)")
    sys.exit(1 if gaps else 0)
