"""``snekbed image build|prometheus|show``: the node image, the reference node image and the Prometheus image,
built without a registry (orchestrator/backends/image.py, image_reference.py; docs/image.md).

Exit codes (:mod:`contract.exit_codes`): 0 done; 1 a build failed; 2 refused: no Docker engine (before any build),
or a reference at ``--pinecone-src`` that cannot be built here (no Go, no copy of the reference).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from orchestrator.backends.engine import EngineUnreachable, docker_client
from orchestrator.backends.image import (
    PROMETHEUS_REPOSITORY,
    ImageInfo,
    build_node_image,
    build_prometheus_image,
    list_images,
)
from orchestrator.backends.image_base import BASE_IMAGE
from orchestrator.backends.image_common import ImageError, default_cache_dir
from orchestrator.backends.image_reference import ReferenceImageError, build_reference_image
from orchestrator.cli.options import BadInput

__all__ = ["image"]

#: Build steps worth a line of their own (the rest only updates the status line).
_STEP_PREFIXES = ("Step ", "debootstrap ", "docker import", "downloading ", "building ", "pulling ")


def _client() -> Any:
    try:
        return docker_client()
    except EngineUnreachable as exc:
        raise BadInput(str(exc)) from None


@click.group()
def image() -> None:
    """Build and inspect the snek node images (works without a registry)."""


@image.command()
@click.option("--force", is_flag=True, help="Rebuild even if the image is up to date (no layer cache).")
@click.option("--base", "base_image", metavar="IMAGE", help=f"Base image with python3.11 [default: {BASE_IMAGE}, "
              "or an offline Debian base when the registry is unreachable].")
@click.option("--refresh-wheels", is_flag=True, help="Re-download the dependency wheels from PyPI.")
@click.option("--pinecone-src", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="The Pinecone reference to build the reference node image from (a checkout or a GOPATH tree) "
                   "[default: $SNEKBED_PINECONE_SRC, else ../shared/reference; without one, only a warning].")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def build(force: bool, base_image: str | None, refresh_wheels: bool, pinecone_src: Path | None,
          as_json: bool) -> None:  # fmt: skip
    """Build snekbed-node:<hash> and the reference node's snekbed-reference:<hash> (and :latest) if any input
    changed. The reference image is skipped with a warning when the reference cannot be built here (an error when
    --pinecone-src names it)."""
    console = Console(stderr=True)
    client = _client()
    with console.status("preparing the node image") as status:
        def progress(line: str) -> None:
            status.update(f"[dim]{line[:console.width - 4]}")
            if line.startswith(_STEP_PREFIXES):
                console.print(line, style="dim", highlight=False, markup=False, no_wrap=True, overflow="ellipsis")

        try:
            info = build_node_image(client, base=base_image, force=force, refresh_wheels=refresh_wheels,
                                    progress=progress)
            status.update("preparing the reference node image")
            reference: ImageInfo | str = build_reference_image(client, base=base_image, pinecone_src=pinecone_src,
                                                               force=force, progress=progress)  # fmt: skip
        except ReferenceImageError as exc:
            if pinecone_src is not None:  # asked for, and it cannot be built here
                raise BadInput(str(exc)) from None
            reference = str(exc)
        except ImageError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({**asdict(info), "reference": asdict(reference) if isinstance(reference, ImageInfo)
                               else {"available": False, "why": reference}}, indent=2))  # fmt: skip
        return
    for built in (info, reference):
        if isinstance(built, str):
            console.print(f"[yellow]warning[/]: no reference image: {built}", highlight=False, soft_wrap=True)
            continue
        state = "[green]rebuilt[/]" if built.rebuilt else "[cyan]up to date[/]"
        console.print(f"[bold]{built.tag}[/] (also {built.tag.split(':')[0]}:latest) {state}  "
                      f"{built.id[:19]}  {built.size_bytes / 1e6:.0f} MB", highlight=False, soft_wrap=True)
    console.print(f"base: {info.base} ({info.base_reason})", highlight=False, soft_wrap=True)


@image.command("prometheus")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def prometheus_image(as_json: bool) -> None:
    """Build snekbed-prometheus:<hash> (and :latest) from Debian's package, without a registry."""
    console = Console(stderr=True)
    with console.status("preparing the Prometheus image") as status:
        try:
            tag = build_prometheus_image(_client(), progress=lambda line: status.update(f"[dim]{line[:70]}"))
        except ImageError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"tag": tag, "latest": f"{PROMETHEUS_REPOSITORY}:latest"}))
    else:
        console.print(f"[bold]{tag}[/] (also {PROMETHEUS_REPOSITORY}:latest)", highlight=False)


@image.command()
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON on stdout.")
def show(as_json: bool) -> None:
    """List the snekbed node and base images on this engine."""
    rows = list_images(_client())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("kind", "id", "created", "size")
    table.add_column("tags", overflow="fold")
    table.add_column("base", overflow="fold")
    for r in rows:
        table.add_row(str(r["kind"]), str(r["id"])[7:19], str(r["created"])[:16].replace("T", " "),
                      f"{int(r['size_bytes']) / 1e6:.0f} MB", "\n".join(r["tags"]), str(r["base"]))
    Console().print(table)
    Console(stderr=True).print(f"[dim]wheel cache: {default_cache_dir() / 'wheels'}", highlight=False)
