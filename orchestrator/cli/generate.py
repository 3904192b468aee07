"""``snekbed generate``: write a generated topology file (orchestrator/model/generators.py).

    snekbed generate preferential --nodes 10000 --mean-degree 6 --seed 1 -o big.yaml

The file is the native YAML topology format, so every command that takes a topology takes it (``sim``,
``chaos --topology``, ``up``, ``ab``). The same arguments give the same file on every machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from orchestrator.model import generators

__all__ = ["generate"]


@click.command()
@click.argument("kind", type=click.Choice(generators.GENERATORS))
@click.option("--nodes", "n", type=click.IntRange(min=2), required=True, help="How many nodes.")
@click.option("--mean-degree", type=click.FloatRange(min=0, min_open=True), default=6.0, show_default=True,
              help="Links per node on average (preferential: rounded down to an even number).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--link-class", default="lan", show_default=True, help="The class of every link (contract/classes.yaml).")
@click.option("--name", default=None, help="The topology's name (default: from the kind, size, degree and seed).")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (.yaml or .json); default: standard output as YAML.")
def generate(kind: str, n: int, mean_degree: float, seed: int, link_class: str, name: str | None,
             out: Path | None) -> None:
    """Generate a connected topology: KIND is geometric (random geometric graph: a radio-range model),
    preferential (internet-like, Barabasi-Albert hubs) or random (uniform random links)."""
    try:
        topo = generators.generate(kind, n, mean_degree, seed, link_class=link_class, name=name)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    text = json.dumps(topo.to_dict(), indent=1) if out is not None and out.suffix == ".json" else topo.to_yaml()
    if out is None:
        click.echo(text, nl=False)
        return
    out.write_text(text)
    click.echo(f"{out}: {kind}, {len(topo.node_names)} nodes, {len(topo.links)} links, mean degree "
               f"{generators.mean_degree_of(topo):.2f}", err=True)
