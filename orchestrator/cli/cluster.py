"""``snekbed cluster up|down|show``: a multi-host swarm on this machine, Docker engines in containers
(orchestrator/backends/cluster.py; docs/multi-host.md).

Exit codes (:mod:`contract.exit_codes`): 0 done; 1 the cluster could not be made (what was made is removed);
2 refused: no Docker engine, bad ``--hosts``, no cluster to show.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from orchestrator.backends.cluster import Cluster, ClusterError, cluster_down, cluster_up, find_cluster, outer_client
from orchestrator.backends.image import build_node_image
from orchestrator.backends.image_common import ImageError
from orchestrator.backends.image_reference import ReferenceImageError, build_reference_image
from orchestrator.cli.options import BadInput

__all__ = ["cluster"]

def _say(text: str) -> None:
    if not text.startswith("I: "):  # debootstrap's per-package lines, while the host image's base is made
        click.echo(f"snekbed cluster: {text}", err=True)


def _how_to_use(cl: Cluster, node_image: str | None, reference_image: str | None) -> str:
    image = f" --image {node_image}" if node_image else ""
    if reference_image:  # a topology with reference nodes runs the image every host has, by that tag
        image += f" [--reference-image {reference_image}]"
    return (f"export DOCKER_HOST={cl.manager.url}   # the swarm backend talks to the cluster's manager\n"
            f"snekbed chaos demo --topology compose/topologies/mesh-12.yaml --backend swarm{image}\n"
            f"snekbed cluster down   # removes hosts, network and volumes labelled snekbed.cluster={cl.id}")


@click.group()
def cluster() -> None:
    """A multi-host Docker swarm on this machine (inner Docker engines in containers) for --backend swarm."""


@cluster.command()
@click.option("--hosts", type=int, default=3, show_default=True, help="Worker hosts (h1..hN) that run nodes; a "
              "drained manager (m) runs the control plane.")
@click.option("--share", "share", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A directory mounted at the same path on every host (a run's events directory must be under one) "
                   "[default: the current directory].")
@click.option("--image", "images", multiple=True, metavar="IMAGE",
              help="Images to put on every host [default: the node image and, where the reference node can be built "
                   "here, the reference node image, each built or reused].")
@click.option("--json", "as_json", is_flag=True, help="Print hosts, manager address and timings as JSON on stdout.")
def up(hosts: int, share: tuple[Path, ...], images: tuple[str, ...], as_json: bool) -> None:
    """Start the hosts, form the swarm, load the images; print how to point --backend swarm at it."""
    if not 1 <= hosts <= 9:
        raise BadInput(f"--hosts {hosts}: give 1 to 9")
    try:
        outer = outer_client()
        outer.ping()
    except Exception as exc:  # the SDK's and requests' errors: no engine to run the hosts on
        raise BadInput(str(exc)) from None
    node_image = reference_image = None
    if not images:
        try:
            node_image = build_node_image(outer, progress=lambda _s: None).tag
        except ImageError as exc:
            raise click.ClickException(f"the node image: {exc}") from None
        try:  # by its content tag: a swarm task names the image the run built, and no host can pull one
            reference_image = build_reference_image(outer, progress=lambda _s: None).tag
        except ReferenceImageError as exc:
            _say(f"no reference node image on the hosts (topologies with pinecone nodes will not run): {exc}")
        images = (node_image,) + ((reference_image,) if reference_image else ())
    else:
        node_image = next((i for i in images if i.startswith("snekbed-node")), None)
        reference_image = next((i for i in images if i.startswith("snekbed-reference")), None)
    try:
        cl = cluster_up(hosts, share=share or (Path.cwd(),), images=images, progress=_say)
    except (ClusterError, ImageError) as exc:
        raise click.ClickException(f"cluster up failed (everything it made is removed): {exc}") from None
    if as_json:
        click.echo(json.dumps({**cl.to_json(), "node_image": node_image, "reference_image": reference_image},
                              indent=2))
    else:
        for h in cl.hosts:
            click.echo(f"{h.name:3} {h.role:8} {h.address:16} {h.container}")
        t = cl.timings
        click.echo(f"engines {t.get('engines_s', 0):.1f} s, swarm {t.get('swarm_s', 0):.1f} s, images "
                   f"{t.get('images_s', 0):.1f} s, total {t.get('total_s', 0):.1f} s")
        click.echo(_how_to_use(cl, node_image, reference_image))


@cluster.command()
@click.option("--cluster", "cluster_id", default=None, help="The cluster's id [default: every snekbed cluster].")
@click.option("--json", "as_json", is_flag=True)
def down(cluster_id: str | None, as_json: bool) -> None:
    """Remove the inner hosts, their network and volumes, by label (snekbed.cluster)."""
    report = cluster_down(cluster_id)
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(f"removed {report['hosts_removed']} host(s); left: {report['containers_left']} container(s), "
                   f"{report['networks_left']} network(s), {report['volumes_left']} volume(s)")
    if any(v for k, v in report.items() if k.endswith("_left")):
        sys.exit(1)


@cluster.command()
@click.option("--cluster", "cluster_id", default=None)
@click.option("--json", "as_json", is_flag=True)
def show(cluster_id: str | None, as_json: bool) -> None:
    """The cluster's hosts and how to use it."""
    try:
        cl = find_cluster(cluster_id)
    except ClusterError as exc:
        raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(cl.to_json(), indent=2))
        return
    for h in cl.hosts:
        click.echo(f"{h.name:3} {h.role:8} {h.address:16} {h.container}")
    click.echo(_how_to_use(cl, None, None))
