"""``snekbed sim TOPOLOGY [--clock virtual|real] [--seed N] [--pairs N] [--kill-root] [--json]``.

Exit codes (:mod:`contract.exit_codes`): 0 converged; 1 the snake did not converge, or, for a topology whose nodes
move (docs/mobility.md), did not converge again once they stopped (the table or the JSON is printed all the same); 2 a bad topology file (its file, line and field), a bad option, or a node the in-process
backend cannot host.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import click

from contract.exit_codes import FAILED
from node.core.variants import VariantError, VariantSpec

from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S
from orchestrator.cli.options import BadInput, address_option
from orchestrator.cli.render import sim_table
from orchestrator.model.hosting import HostingError
from orchestrator.sessions.progress import ProgressLine
from orchestrator.sessions.sim import config_from_topology, refused_sentence, run_sim_sync
from orchestrator.model.topology import TopologyError
from orchestrator.model.topology_loaders import load_topology

__all__ = ["sim"]


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--clock", type=click.Choice(["virtual", "real"]), default="virtual", show_default=True,
              help="virtual: trio MockClock, protocol time runs as fast as the CPU allows; real: wall-clock time.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds node keys, link delays and ping pairs.")
@click.option("--pairs", type=int, default=100, show_default=True, help="SNEK pings to sample after convergence.")
@click.option("--ping-mode", type=click.Choice(["snek", "tree"]), default="snek", show_default=True,
              help="Route the sampled pings by SNEK or by tree coordinates (JSON: ping_mode).")
@click.option("--kill-root", is_flag=True, help="After convergence, kill the root and measure re-convergence.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--link-delay-ms", type=float, default=1.0, show_default=True,
              help="Mean per-frame delay of each in-memory link (uniform in [0.5, 1.5] x mean).")
@click.option("--boot-spread", "boot_spread_s", type=click.FloatRange(min=0), default=DEFAULT_BOOT_SPREAD_S,
              show_default=True,
              help="Boot each node a random time (from the seed) up to this many seconds before the links come up, "
                   "so the routers' periodic timers are not in lockstep; 0 boots all in the same instant (every "
                   "bootstrap of the network then leaves at once, and graphs of a few thousand nodes stop "
                   "converging).")
@click.option("--max-time", "max_time_s", type=float, default=600.0, show_default=True,
              help="Give up on convergence after this much protocol time (s).")
@click.option("--record", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write a run directory (docs/run-dataset.md) for `snekbed analyze`.")
@click.option("--run-id", default=None, help="Run id for the recording (default: random).")
@click.option("--wire-bytes", is_flag=True, help="Encode and decode every frame on the in-memory links.")
@click.option("--variant", "variant_text", default="snek", show_default=True, metavar="NAME[,KNOB=VALUE...]",
              help="Every node's protocol variant (snek, snek-s0, legacy; docs/variants.md), unless the topology "
                   "gives a node its own.")
@click.option("--knob", "knobs", multiple=True, metavar="KEY=VALUE",
              help="A variant knob for every node (root_filter, bootstrap_interval, entry_expiry, hop_limiting, "
                   "wakeup_broadcasts, bootstrap_min_gap). Repeatable.")
@click.option("--metrics", "metrics_at", default=None, metavar="HOST:PORT",
              help="Serve every node's metrics on one endpoint, each series with a `node` label (docs/metrics.md); "
                   "needs --clock real.")
@click.option("--pcap", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every frame on every link to this pcapng file (one TCP connection per link; docs/capture.md).")
@click.option("--view", "view_at", default=None, metavar="HOST:PORT",
              help="Serve the live `snekbed view` page of this run (docs/view.md); needs --clock real.")
@click.option("--hold-s", type=float, default=0.0, show_default=True,
              help="After the run, keep the network, the --metrics endpoint and the --view page up this many seconds.")
@click.option("--quiet", is_flag=True, help="No progress line on stderr.")
@click.option("--progress-every", "progress_every_s", type=click.FloatRange(min=0.05), default=None,
              help="Seconds between two progress lines on stderr [default: 5; a terminal's display: 0.5].")
def sim(topology: Path, clock: str, seed: int, pairs: int, ping_mode: str, kill_root: bool, as_json: bool,
        link_delay_ms: float, boot_spread_s: float, max_time_s: float, record: Path | None, run_id: str | None,
        wire_bytes: bool, variant_text: str, knobs: tuple[str, ...], metrics_at: str | None, pcap: Path | None, view_at: str | None,
        hold_s: float, quiet: bool, progress_every_s: float | None) -> None:
    """Run TOPOLOGY in one process (the inproc backend) and report convergence, delivery and stretch."""
    if metrics_at is not None and clock != "real":
        raise click.UsageError("--metrics needs --clock real: virtual time runs faster than any scrape")
    if view_at is not None and clock != "real":
        raise click.UsageError("--view needs --clock real: virtual time runs faster than a page can follow "
                               "(record the run and replay it: snekbed view RUN_DIR)")
    metrics = address_option(metrics_at, "--metrics")
    view = address_option(view_at, "--view")
    if hold_s < 0:
        raise click.BadParameter("must be >= 0", param_hint="--hold-s")
    try:
        variant = VariantSpec.parse(variant_text).with_knobs(knobs)
    except VariantError as exc:
        raise click.BadParameter(str(exc), param_hint="--variant/--knob") from None
    try:
        topo = load_topology(topology, on_warning=lambda msg: click.echo(f"warning: {msg}", err=True))
    except TopologyError as exc:
        raise BadInput(str(exc)) from None
    try:
        cfg = config_from_topology(
            topo, clock=clock, seed=seed, pairs=pairs, ping_mode=ping_mode, kill_root=kill_root,
            link_delay_ms=link_delay_ms, boot_spread_s=boot_spread_s, max_time_s=max_time_s, record=record,
            run_id=run_id, wire_bytes=wire_bytes, variant=variant,
        )
    except HostingError as exc:  # a node of the Pinecone reference: `snekbed sim` runs in process
        raise click.UsageError(str(exc)) from None
    cfg.metrics, cfg.hold_s, cfg.pcap = metrics, hold_s, pcap
    cfg.on_serving = lambda url: click.echo(f"every node's metrics: {url}", err=True)
    cfg.view = view
    # said when the network is built, not after a run that may take minutes (the table and --json repeat the list)
    cfg.on_refused = lambda refused: click.echo(f"warning: {refused_sentence(refused)}", err=True)
    cfg.on_view = lambda url: click.echo(f"snekbed view (live): {url}", err=True)
    watch = None if quiet else partial(ProgressLine, every_s=progress_every_s)
    if as_json:
        out = run_sim_sync(cfg, watch=watch)
        click.echo(json.dumps(out))
        if not _converged(out):
            sys.exit(FAILED)
        return
    out = run_sim_sync(cfg, watch=watch)
    sim_table(out)
    if not _converged(out):
        sys.exit(FAILED)


def _converged(out: dict) -> bool:
    """The snake converged, and again once the nodes stopped moving (a topology with radios)."""
    return out["snake_converged_s"] is not None and out.get("mobility", {}).get("snake_converged_s", 0) is not None
