"""``snekbed demo``: the main job on a fresh machine.

With a reachable Docker engine and the Docker backend installed, bring up the
12-node mixed mesh as containers, kill the root, re-converge and tear down.
Otherwise run the same experiment on the reference graph-250 topology in the
in-process backend. Either way it says which one ran and why.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

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


@click.command()
@click.option("--backend", type=click.Choice(["auto", "docker", "inproc"]), default="auto", show_default=True)
def demo(backend: str) -> None:
    """Run the main experiment: converge, ping, kill the root, re-converge."""
    why = _docker_reason() if backend != "inproc" else "asked for inproc"
    if backend == "docker" and why:
        raise click.ClickException(f"--backend docker: {why}")
    if why is None:
        from .run_cli import demo_docker

        demo_docker(MESH)
        return
    click.echo(f"demo: in-process backend ({why})", err=True)
    topo = SHARED_GRAPH if SHARED_GRAPH.exists() else MESH
    from .sim_cli import sim

    sim.main([str(topo), "--kill-root", "--pairs", "100"], standalone_mode=False)
