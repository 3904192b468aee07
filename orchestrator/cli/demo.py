"""``snekbed demo [--backend auto|docker|inproc] [--runs-dir DIR] [--no-analyze] [--topology FILE] [--scenario S]``:
the main job on a fresh machine (orchestrator.experiments.demo runs it; this parses the options and reports).

Exit codes (:mod:`contract.exit_codes`): 0 when the run passed (and was analyzed), 1 when it failed a chaos check
or failed part-way, 2 when it was refused before anything ran (a bad --topology or --scenario file, --backend docker
without a reachable engine, no Java or Spark for the analysis).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from orchestrator.cli.options import BadInput
from orchestrator.experiments.demo import DemoError, DemoOptions, DemoRefused, Echo, run_demo

__all__ = ["demo"]


@click.command()
@click.option("--backend", type=click.Choice(["auto", "docker", "inproc"]), default="auto", show_default=True)
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where run directories go (default: $SNEKBED_RUNS_DIR, else ./runs).")
@click.option("--analyze/--no-analyze", "do_analyze", default=True, show_default=True,
              help="Analyze the recorded run with Spark and print where the report is.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master for the analysis.")
@click.option("--topology", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Run this topology instead (default: mesh-12 on Docker, graph-250 in process).")
@click.option("--scenario", "scenario_name", default="demo-quick", show_default=True,
              help="A shipped chaos scenario (snekbed chaos --list) or a scenario file; demo-quick is the demo "
                   "scenario with shorter pauses between its faults.")
def demo(backend: str, runs_dir: Path | None, do_analyze: bool, master: str, topology: Path | None,
         scenario_name: str) -> None:  # fmt: skip
    """Run the main experiment: a topology converges, loses its root, splits and heals, with pings flowing all
    along; the run is recorded, checked by the chaos checker and analyzed with Spark."""
    options = DemoOptions(backend=backend, runs_dir=runs_dir, analyze=do_analyze, master=master, topology=topology,
                          scenario=scenario_name)  # fmt: skip
    try:
        run_demo(options, Echo(out=click.echo, err=partial(click.echo, err=True)))
    except DemoRefused as exc:
        raise BadInput(str(exc)) from None
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
