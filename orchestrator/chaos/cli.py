"""``snekbed chaos SCENARIO [--topology FILE] [--backend inproc|docker|swarm] [--seed N] [--record DIR] [--json]``.

Exit codes: 0 when every step passed, 1 when one failed (the JSON names it), 2 for a
bad scenario or topology file (the message names the file, line and field).
``SCENARIO`` is a YAML scenario, a reference-simulator sequence (``.json``), or the
name of a shipped one (``snekbed chaos --list``).
"""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
import trio
import trio.testing

from node.config import HostPort
from node.core.variants import VariantError, VariantSpec
from node.httpserve import serve_app

from ..backends.inproc import DEFAULT_BOOT_SPREAD_S
from ..cli_options import address_option
from ..monitoring import RunMetrics, serve_metrics
from ..runs import create_run, new_run_id, runs_root
from ..topology import Topology, TopologyError
from ..topology_loaders import load_topology
from ..view.app import LiveHub, build_live_app
from ..view.frames import GraphInfo
from ..view.live import InprocLive
from .backend import DeferredRemoval
from .inproc_backend import InprocChaos
from .nemesis import random_scenario
from .runner import run_scenario
from .scenario import Scenario, ScenarioError, load_scenario

__all__ = ["chaos", "execute", "full_topology", "resolve_scenario", "shipped_scenarios", "HOST_REFUSED"]

#: Faults that need a node's container: refused for host nodes (docs/orchestrator.md, "Host nodes").
HOST_REFUSED = ("kill", "restart", "pause", "resume", "remove_node")


def shipped_scenarios() -> dict[str, Path]:
    """name -> path of every scenario shipped in orchestrator/chaos/scenarios/."""
    root = resources.files("orchestrator.chaos") / "scenarios"
    return {Path(str(p)).stem: Path(str(p)) for p in root.iterdir() if str(p).endswith((".yaml", ".json"))}


def resolve_scenario(spec: str) -> Path:
    p = Path(spec)
    if p.exists() or p.suffix:
        return p
    shipped = shipped_scenarios()
    if spec in shipped:
        return shipped[spec]
    raise ScenarioError(f"no such file, and not a shipped scenario (shipped: {', '.join(sorted(shipped))})", file=spec)


def _line(rec: dict[str, Any]) -> str:
    bad = [k for k, v in rec.get("invariants", {}).items() if not v["ok"]]
    conv = ""
    if rec.get("snake_converged_s") is not None:
        conv = f" tree {rec['tree_converged_s']:.2f} s snake {rec['snake_converged_s']:.2f} s"
    extra = f" live {rec['live_nodes']} components {rec['components']}" if "live_nodes" in rec else ""
    if rec.get("delivery", {}).get("sent"):
        extra += f" delivery {rec['delivery']['delivered']}/{rec['delivery']['sent']}"
    why = f" FAILED: {', '.join(bad) or rec.get('detail', '')}" if rec["verdict"] != "pass" else ""
    targets = ", ".join(map(str, rec["targets"]))[:60]
    return f"[{rec['at_s']:8.2f}] #{rec['index']:<2} {rec['action']:<12} {targets:<30}{conv}{extra} {rec['verdict']}{why}"


def full_topology(topology: Topology | None, scenario: Scenario) -> Topology:
    """The topology plus every node and link the scenario's join steps add (Docker creates them up front)."""
    nodes, links = scenario.declared()
    doc = topology.to_record() if topology is not None else {"name": scenario.name[:64] or "sequence", "nodes": [],
                                                              "links": []}  # fmt: skip
    have = {n["name"] for n in doc["nodes"]}
    joins = scenario.join_variants()
    doc["nodes"] = doc["nodes"] + [{"name": n, **({"variant": joins[n]} if n in joins else {})}
                                   for n in nodes if n not in have]  # fmt: skip
    pairs = {frozenset((ln["a"], ln["b"])) for ln in doc["links"]}
    for a, b, cls in links:
        if frozenset((a, b)) not in pairs:
            doc["links"].append({"a": a, "b": b, "class": cls})
            pairs.add(frozenset((a, b)))
    return Topology.from_data(doc)


def _docker_backend(topology: Topology | None, sc: Scenario, seed: int, record: Path | None, runs_dir: Path | None,
                    image: str | None, keep: bool, variant: VariantSpec, monitoring: bool = False,
                    prometheus_image: str | None = None, swarm: bool = False,
                    removal: DeferredRemoval | None = None) -> Any:  # fmt: skip
    import docker  # the Docker SDK: an optional extra, loaded only for --backend docker|swarm

    from ..backends.docker import DockerBackend
    from ..backends.swarm import SwarmBackend, SwarmError
    from ..image import build_node_image, build_prometheus_image
    from .docker_backend import DockerChaos
    from .swarm_backend import SwarmChaos

    full = full_topology(topology, sc).with_variant(variant)
    if not full.links:
        raise click.UsageError(f"scenario {sc.name}: nothing to run on Docker (no links)")
    hosts = {n.name for n in full.nodes if n.host}
    for i, step in enumerate(sc.steps):
        target = getattr(step, "target", None)
        if step.action in HOST_REFUSED and target in hosts:
            raise click.UsageError(f"scenario {sc.name}: steps[{i}] ({step.action} {target}): {target} is a host "
                                   "node (runs outside Docker): only pings, link and partition faults apply to it")
    swarm_backend = SwarmBackend(docker.from_env()) if swarm else None
    backend = swarm_backend or DockerBackend(docker.from_env())
    if swarm_backend is not None:
        try:
            swarm_backend.require_manager()
            swarm_backend.check_topology(full)
        except SwarmError as exc:
            raise click.UsageError(str(exc)) from None
    if image is None:
        image = build_node_image(backend.client).tag
    if monitoring and prometheus_image is None:
        prometheus_image = build_prometheus_image(backend.client)
    root, run_id = (record.parent, record.name) if record is not None else (runs_root(runs_dir), new_run_id())
    run = create_run(root, run_id, topology=full.to_record())
    declared_nodes, declared_links = sc.declared()
    initial = set(topology.node_names) if topology is not None else set()
    if swarm_backend is not None:
        return SwarmChaos(full, run, image=image, seed=seed, backend=swarm_backend, keep=keep,
                          start_stopped=[n for n in declared_nodes if n not in initial],
                          start_unlinked=[(a, b) for a, b, _ in declared_links
                                          if topology is None or not any({ln.a, ln.b} == {a, b}
                                                                         for ln in topology.links)])
    return DockerChaos(full, run, image=image, seed=seed, backend=backend, keep=keep,
                       prometheus_image=prometheus_image if monitoring else None,
                       metrics=RunMetrics(run.run_id) if monitoring else None, removal=removal,
                       start_stopped=[n for n in declared_nodes if n not in initial],
                       start_unlinked=[(a, b) for a, b, _ in declared_links
                                       if topology is None or not any({ln.a, ln.b} == {a, b} for ln in topology.links)])


@click.command("chaos")
@click.argument("scenario", required=False)
@click.option("--topology", "topology_path", type=click.Path(dir_okay=False, path_type=Path),
              help="topology file (optional for a sequence that builds its network)")
@click.option("--backend", type=click.Choice(["inproc", "docker", "swarm"]), default="inproc", show_default=True,
              help="swarm: services of the swarm this engine manages (docs/chaos.md, \"Swarm\")")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--random", "random_n", type=int, default=None, help="run a seeded random schedule of N faults")
@click.option("--clock", type=click.Choice(["virtual", "real"]), default="virtual", show_default=True,
              help="in-process backend only")
@click.option("--boot-spread", "boot_spread_s", type=click.FloatRange(min=0), default=DEFAULT_BOOT_SPREAD_S,
              show_default=True,
              help="in-process backend only: boot each node a random time (from the seed) up to this many seconds "
                   "before the links come up, so the routers' timers are not in lockstep; 0 boots all at once")
@click.option("--record", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write the run directory here (for `snekbed analyze`); Docker runs always record, under --runs-dir")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where Docker run directories go [default: $SNEKBED_RUNS_DIR or ./runs]")
@click.option("--image", default=None, help="node image for --backend docker [default: build or reuse snekbed-node]")
@click.option("--keep", is_flag=True, help="--backend docker: leave the containers up at the end (`snekbed down`)")
@click.option("--write-scenario", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="with --random: write the generated schedule as a scenario file that replays it")
@click.option("--variant", "variant_text", default="snek", show_default=True, metavar="NAME[,KNOB=VALUE...]",
              help="every node's protocol variant (snek, snek-s0, legacy; docs/variants.md) unless the topology or "
                   "a join step names another")
@click.option("--knob", "knobs", multiple=True, metavar="KEY=VALUE", help="a variant knob for every node; repeatable")
@click.option("--monitoring", is_flag=True,
              help="--backend docker: run Prometheus with the run (its URL is printed; `snekbed down` removes it, so "
                   "add --keep to look at it afterwards) scraping every node and this process's own view of the run")
@click.option("--prometheus-image", default=None, metavar="IMAGE",
              help="Prometheus image for --monitoring [default: build or reuse snekbed-prometheus, no registry needed]")
@click.option("--metrics", "metrics_at", default=None, metavar="HOST:PORT",
              help="serve this process's view of the run (snekbed_* series, docs/metrics.md) on HOST:PORT/metrics; "
                   "in-process runs need --clock real")
@click.option("--view", "view_at", default=None, metavar="HOST:PORT",
              help="serve the live `snekbed view` page of an in-process --clock real run (docs/view.md); a Docker "
                   "run is followed with `snekbed view --live`")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--list", "list_only", is_flag=True, help="list the shipped scenarios and exit")
def chaos(scenario: str | None, topology_path: Path | None, backend: str, seed: int, random_n: int | None,
          clock: str, record: Path | None, runs_dir: Path | None, image: str | None, keep: bool,
          write_scenario: Path | None, variant_text: str, knobs: tuple[str, ...], monitoring: bool,
          prometheus_image: str | None, metrics_at: str | None, view_at: str | None, as_json: bool,
          list_only: bool, boot_spread_s: float) -> None:  # fmt: skip
    """Run a chaos scenario (faults, traffic, checks) and give a verdict."""
    if monitoring and backend != "docker":  # swarm too: Prometheus sits on one engine's control network
        raise click.UsageError("--monitoring runs Prometheus next to Docker nodes: it needs --backend docker "
                               "(watch an in-process run with --clock real --metrics HOST:PORT)")
    if metrics_at is not None and backend == "inproc" and clock != "real":
        raise click.UsageError("--metrics on an in-process run needs --clock real (virtual time outruns any scrape)")
    if view_at is not None and (backend != "inproc" or clock != "real"):
        raise click.UsageError("--view serves an in-process --clock real run; follow a Docker run with "
                               "`snekbed view --live` (virtual-clock runs: record, then `snekbed view RUN_DIR`)")
    view_addr = address_option(view_at, "--view")
    metrics_addr = address_option(metrics_at, "--metrics")
    try:
        variant = VariantSpec.parse(variant_text).with_knobs(knobs)
    except VariantError as exc:
        raise click.BadParameter(str(exc), param_hint="--variant/--knob") from None
    if list_only:
        for name, path in sorted(shipped_scenarios().items()):
            sc = load_scenario(path)
            click.echo(f"{name:<24} {sc.description.strip().splitlines()[0] if sc.description else ''}")
        return
    try:
        topology = load_topology(topology_path) if topology_path is not None else None
        if random_n is not None:
            if topology is None:
                raise click.UsageError("--random needs --topology")
            sc = random_scenario(topology, random_n, seed)
            if write_scenario is not None:
                write_scenario.write_text(sc.to_yaml())
        elif scenario is None:
            raise click.UsageError("give a SCENARIO (a file or a shipped name: --list) or --random N")
        else:
            sc = load_scenario(resolve_scenario(scenario))
        if topology is None and not sc.builds_network:
            raise ScenarioError(f"scenario {sc.name} needs --topology (it does not build its network)", file=scenario)
    except (ScenarioError, TopologyError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)

    def progress(rec: dict[str, Any]) -> None:
        if not as_json:
            click.echo(_line(rec))

    out = execute(sc, topology, backend=backend, seed=seed, record=record, runs_dir=runs_dir, image=image, keep=keep,
                  clock=clock, progress=progress, variant=variant, monitoring=monitoring,
                  prometheus_image=prometheus_image, metrics_at=metrics_addr, view_at=view_addr,
                  boot_spread_s=boot_spread_s)  # fmt: skip
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        t = out["traffic"]
        click.echo(f"verdict: {out['verdict']}  (background pings delivered {t['delivered']}/{t['sent']})"
                   + (f"; run directory {out['run_dir']}" if out["run_dir"] else ""))
    sys.exit(0 if out["verdict"] == "pass" else 1)


def execute(sc: Scenario, topology: Topology | None, *, backend: str = "inproc", seed: int = 0,
            record: Path | None = None, runs_dir: Path | None = None, image: str | None = None, keep: bool = False,
            clock: str = "virtual", progress: Any = None, variant: VariantSpec | None = None,
            ab: dict[str, Any] | None = None, monitoring: bool = False, prometheus_image: str | None = None,
            metrics_at: HostPort | None = None, view_at: HostPort | None = None,
            removal: DeferredRemoval | None = None,
            boot_spread_s: float = DEFAULT_BOOT_SPREAD_S) -> dict[str, Any]:  # fmt: skip
    """Run ``sc`` on ``topology`` with the chosen backend; the ``--json`` document, with ``run_dir``.

    ``removal`` (Docker): the run returns once its nodes have stopped, and the removal of its containers and
    networks goes on in that object's thread (``removal.wait()`` joins it); without it, the run returns removed.

    ``variant``: every node's protocol variant and knobs unless the topology or a join step names another.
    ``ab``: the A/B experiment this run is an arm of (``meta.json``'s ``ab``).
    ``boot_spread_s`` (in process): how far apart the routers boot (InprocChaos).
    """
    variant = variant or VariantSpec()
    t_prepare = time.monotonic()
    if backend in ("docker", "swarm"):
        chaos_backend = _docker_backend(topology, sc, seed, record, runs_dir, image, keep, variant, monitoring,
                                        prometheus_image, swarm=backend == "swarm", removal=removal)  # fmt: skip
        clock_obj = None
        run_dir: str | None = str(chaos_backend.run.path)
        run_id = chaos_backend.run.run_id
        metrics = chaos_backend.metrics
    else:
        chaos_backend = InprocChaos(topology, seed=seed, record=record, declared=sc.declared(), scenario_name=sc.name,
                                    variant=variant, ab=ab, boot_spread_s=boot_spread_s)  # fmt: skip
        clock_obj = trio.testing.MockClock(autojump_threshold=0) if clock == "virtual" else None
        run_dir = str(record) if record is not None else None
        run_id = record.name if record is not None else sc.name
        metrics = None
    prepare_s = time.monotonic() - t_prepare  # Docker: the node image checked (built if its inputs changed)
    server = None
    if metrics_at is not None:
        metrics = metrics or RunMetrics(run_id)
        if backend in ("docker", "swarm"):
            chaos_backend.metrics = metrics
        server = serve_metrics(metrics, metrics_at.host, metrics_at.port)
        click.echo(f"snekbed chaos: run metrics on {server.url}", err=True)
    try:
        if view_at is not None:
            assert isinstance(chaos_backend, InprocChaos)
            out = trio.run(_run_viewed, chaos_backend, sc, topology, seed, progress, metrics, view_at, run_id)
        else:
            out = trio.run(run_scenario_async, chaos_backend, sc, seed, progress, metrics, clock=clock_obj)
    finally:
        if server is not None:
            server.close()
    if backend in ("docker", "swarm") and ab is not None:
        chaos_backend.run.update_meta(ab=ab)
    out["run_dir"] = run_dir
    out["variant"] = str(variant)
    if backend == "inproc":
        out["boot_spread_s"] = boot_spread_s
    else:  # a wall-clock figure: an in-process run's JSON is a function of its inputs and seed alone
        out["prepare_s"] = round(prepare_s, 3)
    return out


async def _run_viewed(backend: InprocChaos, scenario: Scenario, topology: Topology | None, seed: int, progress: Any,
                      metrics: RunMetrics | None, view_at: HostPort, run_id: str) -> dict[str, Any]:  # fmt: skip
    """The scenario, with the live view of its in-process network served alongside (real clock)."""
    extra_nodes, extra_links = scenario.declared()
    nodes = (topology.node_names if topology is not None else []) + [n for n in extra_nodes
                                                                     if topology is None or n not in topology.node_names]
    links = [(x.a, x.b, x.link_class) for x in topology.links] if topology is not None else []
    graph = GraphInfo(scenario.name, nodes, {n: sn.key.hex() for n, sn in backend.net.nodes.items()},
                      links + extra_links)
    live = InprocLive(backend.net, graph, run_id, status_of=backend.view_status)
    hub = LiveHub(live)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        bound = await nursery.start(serve_app, build_live_app(hub), view_at, trio.sleep_forever)
        click.echo(f"snekbed chaos: live view on http://{bound}/", err=True)
        try:
            return await run_scenario(backend, scenario, seed=seed, on_action=live.fault, progress=progress,
                                      metrics=metrics)
        finally:
            nursery.cancel_scope.cancel()


async def run_scenario_async(backend: Any, scenario: Scenario, seed: int, progress: Any,
                             metrics: RunMetrics | None = None) -> dict[str, Any]:  # fmt: skip
    return await run_scenario(backend, scenario, seed=seed, progress=progress, metrics=metrics)
