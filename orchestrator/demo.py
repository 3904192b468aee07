"""``snekbed demo``: the main job on a fresh machine.

With a reachable Docker engine and the Docker backend installed, run the shipped
``demo`` chaos scenario (kill the root, partition into halves, heal, with pings
flowing all along) on the 12-node mixed mesh as containers, and tear down.
Otherwise run it on the reference graph-250 topology in the in-process backend.
Either way it says which one ran and why, records the run
directory (docs/run-dataset.md) under ``runs/<id>/``, analyzes it with Spark
(``snekbed analyze``, local mode) and prints where the report is.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import click

from pipeline.cli import analyze

from .chaos.cli import _line, execute, resolve_scenario
from .chaos.scenario import ScenarioError, load_scenario
from .runs import new_run_id, runs_root
from .topology import TopologyError
from .topology_loaders import load_topology

REPO = Path(__file__).resolve().parents[1]
SHARED_GRAPH = REPO.parent / "shared" / "topologies" / "pinecone" / "graph-250.txt"
MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"


def _docker_reason() -> str | None:
    """None when the Docker backend can run here, else why not."""
    if importlib.util.find_spec("orchestrator.backends.docker") is None:
        return "the Docker backend is not part of this build yet"
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # the SDK raises several unrelated types when no engine answers
        return f"no Docker engine reachable ({exc.__class__.__name__})"
    return None


def _analysis_reason() -> str | None:
    """None when `snekbed analyze` can run here, else why not."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[pipeline]')"
    if shutil.which("java") is None:
        return "no `java` on PATH (Spark needs a JRE; scripts/setup.sh installs one)"
    return None


def analyze_run(run_dir: Path, master: str) -> Path:
    """`snekbed analyze RUN_DIR --out RUN_DIR/analysis`; returns the report's path. Raises ClickException."""
    why = _analysis_reason()
    if why:
        raise click.ClickException(f"the run is recorded in {run_dir}, but it cannot be analyzed: {why}")
    out = run_dir / "analysis"
    click.echo(f"demo: analyzing {run_dir} with Spark ({master})", err=True)
    analyze.main([str(run_dir), "--out", str(out), "--master", master, "--driver-memory", "2g"],
                 standalone_mode=False)
    return out / "report.html"


@click.command()
@click.option("--backend", type=click.Choice(["auto", "docker", "inproc"]), default="auto", show_default=True)
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where run directories go (default: $SNEKBED_RUNS_DIR, else ./runs).")
@click.option("--analyze/--no-analyze", "do_analyze", default=True, show_default=True,
              help="Analyze the recorded run with Spark and print where the report is.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master for the analysis.")
@click.option("--topology", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Run this topology instead (default: mesh-12 on Docker, graph-250 in process).")
@click.option("--scenario", "scenario_name", default="demo", show_default=True,
              help="A shipped chaos scenario (snekbed chaos --list) or a scenario file.")
def demo(backend: str, runs_dir: Path | None, do_analyze: bool, master: str, topology: Path | None,
         scenario_name: str) -> None:
    """Run the main experiment: a topology converges, loses its root, splits and heals, with pings flowing all
    along; the run is recorded, checked by the chaos checker and analyzed with Spark."""
    why = _docker_reason() if backend != "inproc" else "asked for inproc"
    if backend == "docker" and why:
        raise click.ClickException(f"--backend docker: {why}")
    run_id = new_run_id()
    root = runs_root(runs_dir)
    run_dir = root / run_id
    try:
        sc = load_scenario(resolve_scenario(scenario_name))
        if why is None:
            click.echo(f"demo: Docker backend, {(topology or MESH).name}, scenario {sc.name}", err=True)
            topo = load_topology(topology or MESH)
        else:
            click.echo(f"demo: in-process backend ({why}), scenario {sc.name}", err=True)
            topo = load_topology(topology or (SHARED_GRAPH if SHARED_GRAPH.exists() else MESH))
    except (ScenarioError, TopologyError) as exc:
        raise click.ClickException(str(exc)) from None
    t0 = time.monotonic()
    out = execute(sc, topo, backend="docker" if why is None else "inproc", record=run_dir,
                  progress=lambda rec: click.echo(_line(rec)))  # fmt: skip
    t = out["traffic"]
    click.echo(f"chaos verdict: {out['verdict']} (background pings delivered {t['delivered']}/{t['sent']}; "
               f"{time.monotonic() - t0:.0f} s)")
    click.echo(f"run directory: {run_dir}")
    if do_analyze:
        report = analyze_run(run_dir, master)
        click.echo(f"report: {report}")
        click.echo(f"        {report.with_suffix('.md')}  (tables: {report.parent / 'tables'})")
    if out["verdict"] != "pass":
        raise click.ClickException(f"the chaos checker failed steps {out['failed_steps']} (see above)")
