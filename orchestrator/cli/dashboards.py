"""``snekbed dashboards build [--check]``: the Grafana dashboards as code (orchestrator/tools/dashboards.py ->
dashboards/*.json; docs/monitoring.md)."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.tools.dashboards import DASHBOARDS, DEFAULT_DIR, build_all, stale

__all__ = ["dashboards"]


@click.group()
def dashboards() -> None:
    """Grafana dashboards as code (orchestrator/tools/dashboards.py -> dashboards/*.json)."""


@dashboards.command("build")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DIR, show_default=True)
@click.option("--check", is_flag=True, help="write nothing; exit 1 when the JSON in --out is not what would be written")
def build_cmd(out: Path, check: bool) -> None:
    """Generate the dashboards' JSON (or, with --check, verify the committed JSON is current)."""
    if check:
        why = stale(out)
        for line in why:
            click.echo(f"stale: {line}", err=True)
        if why:
            click.echo("run `snekbed dashboards build` and commit dashboards/", err=True)
            raise SystemExit(1)
        click.echo(f"{len(DASHBOARDS)} dashboards in {out} are current")
        return
    for path in build_all(out):
        click.echo(str(path))
