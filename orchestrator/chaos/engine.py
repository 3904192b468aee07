"""Running a chaos scenario: the library behind ``snekbed chaos``, ``snekbed ab`` and ``snekbed demo``.

:func:`execute` runs one scenario on one topology with the chosen backend and returns the ``--json``
document (docs/chaos.md); :func:`step_line` is the one-line progress form of a step's record.
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import trio
import trio.testing

from node.config import HostPort
from node.core.variants import VariantSpec
from node.httpserve import serve_app

from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S
from orchestrator.chaos.backend import DeferredRemoval
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import Scenario, ScenarioError
from orchestrator.model.runs import create_run, new_run_id, runs_root
from orchestrator.model.topology import Topology
from orchestrator.tools.monitoring import RunMetrics, serve_metrics
from orchestrator.tools.view.app import LiveHub, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import InprocLive

__all__ = ["ChaosSetupError", "HOST_REFUSED", "execute", "full_topology", "resolve_scenario", "shipped_scenarios",
           "step_line"]


class ChaosSetupError(ValueError):
    """The scenario cannot run on the chosen backend (the command line reports it as a usage error)."""


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


def step_line(rec: dict[str, Any]) -> str:
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

    from orchestrator.backends.docker import DockerBackend
    from orchestrator.backends.swarm import SwarmBackend, SwarmError
    from orchestrator.backends.image import build_node_image, build_prometheus_image
    from orchestrator.chaos.docker_backend import DockerChaos
    from orchestrator.chaos.swarm_backend import SwarmChaos

    full = full_topology(topology, sc).with_variant(variant)
    if not full.links:
        raise ChaosSetupError(f"scenario {sc.name}: nothing to run on Docker (no links)")
    hosts = {n.name for n in full.nodes if n.host}
    for i, step in enumerate(sc.steps):
        target = getattr(step, "target", None)
        if step.action in HOST_REFUSED and target in hosts:
            raise ChaosSetupError(f"scenario {sc.name}: steps[{i}] ({step.action} {target}): {target} is a host "
                                   "node (runs outside Docker): only pings, link and partition faults apply to it")
    swarm_backend = SwarmBackend(docker.from_env()) if swarm else None
    backend = swarm_backend or DockerBackend(docker.from_env())
    if swarm_backend is not None:
        try:
            swarm_backend.require_manager()
            swarm_backend.check_topology(full)
        except SwarmError as exc:
            raise ChaosSetupError(str(exc)) from None
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
        print(f"snekbed chaos: run metrics on {server.url}", file=sys.stderr)
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
        print(f"snekbed chaos: live view on http://{bound}/", file=sys.stderr)
        try:
            return await run_scenario(backend, scenario, seed=seed, on_action=live.fault, progress=progress,
                                      metrics=metrics)
        finally:
            nursery.cancel_scope.cancel()


async def run_scenario_async(backend: Any, scenario: Scenario, seed: int, progress: Any,
                             metrics: RunMetrics | None = None) -> dict[str, Any]:  # fmt: skip
    return await run_scenario(backend, scenario, seed=seed, progress=progress, metrics=metrics)
