"""``snekbed sim TOPOLOGY [--clock virtual|real] [--seed N] [--pairs N] [--kill-root] [--json]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from contract.links import LinkShape, link_type_number
from netem.userspace import shaper_factory
from node.core.variants import VariantError, VariantSpec

from .backends.inproc import DEFAULT_BOOT_SPREAD_S
from .cli_options import address_option
from .sim import SimConfig, run_sim_sync
from .topology import Topology, TopologyError
from .topology_loaders import load_topology

__all__ = ["sim", "config_from_topology"]


def link_options(topo: Topology, index: int) -> dict:
    """How the in-process backend realises ``topo.links[index]``: its class's link type, and the
    class's shape (delay, jitter, loss, rate, queue) through netem's userspace shaper, the same
    code a node's transport uses. Links whose class has no shape keep the default random delay."""
    cls = topo.link_class_of(index)
    opts: dict = {"link_type": link_type_number(cls)}
    if cls.shape != LinkShape():
        # Peerings are reliable streams: a lost segment is retransmitted (late), not lost to the overlay.
        opts["shaper"] = shaper_factory(cls.shape, loss_mode="retransmit")
        opts["sized"] = cls.shape.rate_mbit is not None
    return opts


def config_from_topology(topo: Topology, **kw) -> SimConfig:
    """The in-process run of ``topo``; ``variant`` (in ``kw``) is the run's, topology nodes may override it."""
    seed = kw.get("seed", 0)
    key_seeds = {n.name: n.seed_bytes(seed) for n in topo.nodes if n.key_seed}
    variant = kw.pop("variant", None) or VariantSpec()
    variants = {n.name: n.variant_spec(variant) for n in topo.nodes if n.variant is not None or n.knobs}
    if len(variants) == len(topo.nodes) and len(set(variants.values())) == 1:
        variant, variants = next(iter(variants.values())), {}  # every node names the same: that is the run's
    return SimConfig(
        variant=variant,
        variants=variants,
        nodes=topo.node_names,
        links=[(l.a, l.b, l.link_class) for l in topo.links],
        link_options=[link_options(topo, i) for i in range(len(topo.links))],
        name=topo.name,
        key_seeds=key_seeds,
        topology_doc=topo.to_record(),
        **kw,
    )


def _table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"snekbed sim: {out['topology']} ({out['nodes']} nodes, {out['links']} links, seed {out['seed']}, "
                    f"variant {out['variant']})")
    t.add_column("measure")
    t.add_column("value", justify="right")

    def fmt(x):
        return "never" if x is None else f"{x:g}"

    t.add_row("tree converged (protocol s)", fmt(out["tree_converged_s"]))
    t.add_row("snake converged (protocol s)", fmt(out["snake_converged_s"]))
    t.add_row("pings delivered", f"{out['pings']['delivered']}/{out['pings']['sent']}")
    st = out["stretch"]
    t.add_row("stretch mean / median / p95", f"{fmt(st['mean'])} / {fmt(st['median'])} / {fmt(st['p95'])}")
    if "root_kill" in out:
        rk = out["root_kill"]
        t.add_row("root killed", f"{rk['killed_name']} ({rk['killed'][:16]}…)")
        t.add_row("tree re-converged (s after kill)", fmt(rk["tree_reconverged_s"]))
        t.add_row("snake re-converged (s after kill)", fmt(rk["snake_reconverged_s"]))
        t.add_row("pings after kill", f"{rk['pings']['delivered']}/{rk['pings']['sent']}")
    t.add_row("wall time (s)", fmt(out["wall_s"]))
    t.caption = "hops counted per link; " + out["hops_counted"].split(";")[0]
    Console().print(t)
    if refused := out.get("links_refused"):
        Console(stderr=True, highlight=False).print(refused_sentence(refused))


def refused_sentence(refused: list[dict]) -> str:
    """``N topology links were not made: a-b (ports_full at a), ...`` (the first ten, then a count)."""
    shown = ", ".join(f"{r['a']}-{r['b']} ({r['reason']} at {'/'.join(r['nodes']) or '?'})" for r in refused[:10])
    more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
    return (f"{len(refused)} topology link{'s' if len(refused) > 1 else ''} not made (a router has 253 ports; "
            f"the reference refuses the extra peerings too): {shown}{more}; all in --json links_refused")


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
                   "wakeup_broadcasts). Repeatable.")
@click.option("--metrics", "metrics_at", default=None, metavar="HOST:PORT",
              help="Serve every node's metrics on one endpoint, each series with a `node` label (docs/metrics.md); "
                   "needs --clock real.")
@click.option("--pcap", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every frame on every link to this pcapng file (one TCP connection per link; docs/capture.md).")
@click.option("--view", "view_at", default=None, metavar="HOST:PORT",
              help="Serve the live `snekbed view` page of this run (docs/view.md); needs --clock real.")
@click.option("--hold-s", type=float, default=0.0, show_default=True,
              help="After the run, keep the network, the --metrics endpoint and the --view page up this many seconds.")
def sim(topology: Path, clock: str, seed: int, pairs: int, ping_mode: str, kill_root: bool, as_json: bool,
        link_delay_ms: float, boot_spread_s: float, max_time_s: float, record: Path | None, run_id: str | None,
        wire_bytes: bool, variant_text: str, knobs: tuple[str, ...], metrics_at: str | None, pcap: Path | None, view_at: str | None,
        hold_s: float) -> None:
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
        raise click.ClickException(str(exc)) from exc
    cfg = config_from_topology(
        topo, clock=clock, seed=seed, pairs=pairs, ping_mode=ping_mode, kill_root=kill_root,
        link_delay_ms=link_delay_ms, boot_spread_s=boot_spread_s, max_time_s=max_time_s, record=record, run_id=run_id,
        wire_bytes=wire_bytes, variant=variant,
    )
    cfg.metrics, cfg.hold_s, cfg.pcap = metrics, hold_s, pcap
    cfg.on_serving = lambda url: click.echo(f"every node's metrics: {url}", err=True)
    cfg.view = view
    cfg.on_view = lambda url: click.echo(f"snekbed view (live): {url}", err=True)
    if as_json:
        out = run_sim_sync(cfg)
        click.echo(json.dumps(out))
        if out["links_refused"]:
            click.echo(f"warning: {refused_sentence(out['links_refused'])}", err=True)
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True,
                  console=None) as prog:
        task = prog.add_task("starting", total=None)

        def progress(phase: str, t: float) -> None:
            prog.update(task, description=f"{phase}: protocol time {t:.1f} s")

        out = run_sim_sync(cfg, progress)
    _table(out)
    if out["snake_converged_s"] is None:
        sys.exit(1)
