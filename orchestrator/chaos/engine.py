"""Running a chaos scenario: the library behind ``snekbed chaos``, ``snekbed ab`` and ``snekbed demo``.

:func:`execute` runs one scenario on one topology as :class:`ChaosOptions` say and returns the ``--json``
document (docs/chaos.md). The backend is made once, by the factory registered under ``options.backend``
(:data:`BACKENDS`; :func:`register_backend`, :func:`make_backend`): a factory returns a :class:`PreparedRun`,
the backend (orchestrator.chaos.backend's protocols) with what the run needs of it besides (its trio clock,
run directory and id, metrics, live view, the keys it adds to the document), so ``execute`` knows no backend by
name. Problems are exceptions (:class:`ChaosSetupError`, ScenarioError, TopologyError) that the command line
turns into usage errors. :func:`step_line` is the one-line progress form of a step's record.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from contract.links import resolve_class
from node.config import HostPort
from node.core.variants import VariantSpec
from node.httpserve import serve_app

from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S, SimNode
from orchestrator.chaos.backend import ChaosBackend, DeferredRemoval
from orchestrator.chaos.ground_keys import with_planned_keys
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.inproc_mobile import MobileInprocChaos
from orchestrator.chaos.runner import Progress, run_scenario
from orchestrator.chaos.trace import TraceHash
from orchestrator.chaos.scenario import Kill, Pause, RemoveNode, Restart, Resume, Scenario, ScenarioError, load_scenario
from orchestrator.model.hosting import (REAL_TIME_BACKENDS, docker_radio_refusal, in_process_refusal, mobility_refusal,
                                        reference_nodes)
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import build_world
from orchestrator.model.runs import create_run, new_run_id, runs_root
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology
from orchestrator.sessions.progress import Snapshot, Watch
from orchestrator.tools.monitoring import RunMetrics, serve_metrics
from orchestrator.tools.view.app import LiveHub, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import InprocLive

if TYPE_CHECKING:
    from orchestrator.chaos.docker_backend import DockerChaos

__all__ = ["BACKENDS", "ChaosOptions", "ChaosSetupError", "HOST_REFUSED", "PreparedRun", "execute", "full_topology",
           "load_inputs", "make_backend", "register_backend", "require_hostable", "require_topology", "resolve_scenario",
           "shipped_scenarios", "step_line"]


class ChaosSetupError(ValueError):
    """The scenario cannot run on the chosen backend (the command line reports it as a usage error)."""


#: Faults that need a node's container: refused for host nodes (docs/orchestrator.md, "Host nodes").
HOST_REFUSED = (Kill, Restart, Pause, Resume, RemoveNode)


@dataclass(frozen=True)
class ChaosOptions:
    """How to run a scenario: every setting of ``snekbed chaos`` but the scenario and the topology.

    ``variant``: every node's protocol variant and knobs unless the topology or a join step names another.
    ``ab``: the A/B experiment this run is an arm of (``meta.json``'s ``ab``).
    ``clock`` and ``boot_spread_s``: in process only (InprocChaos). ``image``, ``keep``, ``runs_dir``,
    ``monitoring``, ``prometheus_image`` and ``pinecone_src`` (the reference the reference image is built from,
    for nodes whose spec is ``pinecone``): Docker (and swarm) only. ``removal`` (Docker): the run returns once
    its nodes have stopped, and the removal of its containers and networks goes on in that object's thread
    (``removal.wait()`` joins it); without it, the run returns removed.
    """

    backend: str = "inproc"
    seed: int = 0
    variant: VariantSpec = field(default_factory=VariantSpec)
    record: Path | None = None
    runs_dir: Path | None = None
    image: str | None = None
    keep: bool = False
    clock: str = "virtual"
    boot_spread_s: float = DEFAULT_BOOT_SPREAD_S
    ab: dict[str, Any] | None = None
    monitoring: bool = False
    prometheus_image: str | None = None
    metrics_at: HostPort | None = None
    view_at: HostPort | None = None
    removal: DeferredRemoval | None = None
    pinecone_src: Path | None = None
    #: the reference node image to run (None: build or reuse it from ``pinecone_src``)
    reference_image: str | None = None
    #: watches an in-process run while it works (the progress line: orchestrator.sessions.progress)
    watch: Watch | None = None


@dataclass
class PreparedRun:
    """A backend made for one run, and what the run needs of it besides the backend protocols."""

    backend: ChaosBackend
    run_id: str
    run_dir: str | None
    #: trio's clock for the run (a virtual one in process), None for the real clock
    clock: trio.abc.Clock | None = None
    #: the run's own metrics (snekbed_* series), when they are served or scraped
    metrics: RunMetrics | None = None
    #: keys this backend adds to the --json document
    report: dict[str, Any] = field(default_factory=dict)
    #: the source of the live view (``--view``), for a backend that has one
    live: Callable[[], InprocLive] | None = None
    #: the run's event trace, hashed as it happens (``trace_sha256``: orchestrator.chaos.trace), where it can be
    trace: TraceHash | None = None
    #: the run now, for a progress line, given the phase it is in (in process: its network's counters)
    snapshot: Callable[[str], Snapshot] | None = None


#: (scenario, topology, options) -> the prepared run: how one kind of backend is made
BackendFactory = Callable[[Scenario, "Topology | None", ChaosOptions], PreparedRun]
#: every backend by name, in the order ``--backend`` lists them
BACKENDS: dict[str, BackendFactory] = {}


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Register a factory under ``name`` (``--backend NAME``)."""

    def add(factory: BackendFactory) -> BackendFactory:
        BACKENDS[name] = factory
        return factory

    return add


def make_backend(sc: Scenario, topology: Topology | None, options: ChaosOptions) -> PreparedRun:
    """The backend ``options.backend`` names, made for ``sc`` on ``topology``."""
    factory = BACKENDS.get(options.backend)
    if factory is None:
        raise ChaosSetupError(f"unknown backend {options.backend!r} (known: {', '.join(BACKENDS)})")
    if topology is not None and options.backend not in ("inproc", "docker") and (
            moving := mobility_refusal(topology.radios, f"snekbed chaos --backend {options.backend}")) is not None:
        raise ChaosSetupError(f"scenario {sc.name}: {moving}")
    require_hostable(sc, topology, options)
    return factory(sc, topology, options)


def require_hostable(sc: Scenario, topology: Topology | None, options: ChaosOptions) -> None:
    """ChaosSetupError when ``options.backend`` cannot host a node of the run: the topology's, the ones the
    scenario's join steps add, each with its spec or ``options.variant`` (the Pinecone reference's nodes run only
    on a real-time backend: orchestrator.model.hosting)."""
    if options.backend in REAL_TIME_BACKENDS:
        return
    try:
        specs = full_topology(topology, sc).variants(options.variant)
    except TopologyError:  # no node at all: the backend says so when it is made
        specs = {}
    why = in_process_refusal(specs, options.backend)
    if why is not None:
        raise ChaosSetupError(f"scenario {sc.name}: {why}")


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


def require_topology(sc: Scenario, topology: Topology | None, file: str | None = None) -> None:
    """ScenarioError when ``sc`` has no topology to run on and does not build its network."""
    if topology is None and not sc.builds_network:
        raise ScenarioError(f"scenario {sc.name} needs --topology (it does not build its network)", file=file)


def load_inputs(scenario: str, topology_path: Path | None) -> tuple[Scenario, Topology | None]:
    """The scenario (a file or a shipped name) and the topology (optional for a sequence that builds its network);
    ScenarioError or TopologyError names the file, the line and the field."""
    topology = load_topology(topology_path) if topology_path is not None else None
    sc = load_scenario(resolve_scenario(scenario), topology)  # every node a step names looked up in it
    require_topology(sc, topology, scenario)
    return sc, topology


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


# ---------------------------------------------------------------------- the backends


@register_backend("inproc")
def _inproc(sc: Scenario, topology: Topology | None, o: ChaosOptions) -> PreparedRun:
    kw: dict[str, Any] = dict(seed=o.seed, record=o.record, declared=sc.declared(), scenario_name=sc.name,
                              variant=o.variant, ab=o.ab, boot_spread_s=o.boot_spread_s)  # fmt: skip
    report: dict[str, Any] = {"boot_spread_s": o.boot_spread_s}
    world = build_world(topology, o.seed, read_traces(topology)) if topology is not None else None
    if topology is not None and world is not None:  # nodes that move (docs/mobility.md)
        classes = {r.name: resolve_class(r.link_class, topology.classes or None) for r in world.radios}
        backend: InprocChaos = MobileInprocChaos(topology, world=world, radio_classes=classes, **kw)
        backend.report.update(report)
        report = backend.report  # the backend adds ``mobility`` when the run stops
    else:
        backend = InprocChaos(topology, **kw)
    run_id = o.record.name if o.record is not None else sc.name
    trace = _traced(backend)
    return PreparedRun(
        backend, run_id, str(o.record) if o.record is not None else None,
        clock=trio.testing.MockClock(autojump_threshold=0) if o.clock == "virtual" else None,
        metrics=RunMetrics(run_id) if o.metrics_at is not None else None,
        report=report,  # no wall-clock figure: the document is a function of inputs and seed
        live=lambda: _inproc_live(backend, sc, topology, run_id),
        trace=trace,
        snapshot=lambda phase: Snapshot(phase, backend.net.now, backend.net.frames_delivered,
                                        backend.net.queued_events, judged=False),
    )  # fmt: skip


def _traced(backend: InprocChaos) -> TraceHash:
    """A TraceHash fed every router event of the in-process network, before the backend's own observer."""
    trace = TraceHash()
    inner = backend.net.on_event

    def tee(node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        trace.event(node.name, kind, fields, now)
        if inner is not None:
            inner(node, kind, fields, now)

    backend.net.on_event = tee
    return trace


def _inproc_live(backend: InprocChaos, sc: Scenario, topology: Topology | None, run_id: str) -> InprocLive:
    """The live view's source over the in-process network, the scenario's joining nodes and links included."""
    extra_nodes, extra_links = sc.declared()
    nodes = (topology.node_names if topology is not None else []) + [n for n in extra_nodes
                                                                     if topology is None or n not in topology.node_names]
    links = [(x.a, x.b, x.link_class) for x in topology.links] if topology is not None else []
    graph = GraphInfo(sc.name, nodes, {n: sn.key.hex() for n, sn in backend.net.nodes.items()}, links + extra_links)
    live = InprocLive(backend.net, graph, run_id, status_of=backend.view_status)
    if isinstance(backend, MobileInprocChaos) and topology is not None:  # the page draws the nodes where they are
        backend.radio.log = live.tee(topology.to_record(), backend.radio.log)
    return live


@register_backend("docker")
def _docker(sc: Scenario, topology: Topology | None, o: ChaosOptions) -> PreparedRun:
    return _on_docker(sc, topology, o, swarm=False)


@register_backend("swarm")
def _swarm(sc: Scenario, topology: Topology | None, o: ChaosOptions) -> PreparedRun:
    return _on_docker(sc, topology, o, swarm=True)


def _on_docker(sc: Scenario, topology: Topology | None, o: ChaosOptions, swarm: bool) -> PreparedRun:
    if o.view_at is not None:
        raise ChaosSetupError("--view serves an in-process --clock real run; follow a Docker run with "
                              "`snekbed view --live`")  # fmt: skip
    t = time.monotonic()
    backend = _docker_backend(topology, sc, o, swarm)
    prepare_s = time.monotonic() - t  # the node image checked (built if its inputs changed)
    backend.report["prepare_s"] = round(prepare_s, 3)
    return PreparedRun(backend, backend.run.run_id, str(backend.run.path), metrics=backend.metrics,
                       report=backend.report)  # the backend adds to it as it runs (shaping_unapplied)


def _docker_backend(topology: Topology | None, sc: Scenario, o: ChaosOptions, swarm: bool) -> DockerChaos:
    import docker  # the Docker SDK: an optional extra, loaded only for --backend docker|swarm

    from orchestrator.backends.docker import DockerBackend
    from orchestrator.backends.swarm import SwarmBackend, SwarmError
    from orchestrator.backends.image import build_node_image, build_prometheus_image
    from orchestrator.backends.image_reference import ReferenceImageError, build_reference_image
    from orchestrator.chaos.docker_backend import DockerChaos
    from orchestrator.chaos.docker_mobile import MobileDockerChaos
    from orchestrator.chaos.swarm_backend import SwarmChaos

    full = full_topology(topology, sc).with_variant(o.variant)
    if not full.links and not full.radios:
        raise ChaosSetupError(f"scenario {sc.name}: nothing to run on Docker (no links)")
    world = _docker_world(sc, topology or full, full, o) if full.radios else None
    hosts = {n.name for n in full.nodes if n.host}
    for i, step in enumerate(sc.steps):
        on_hosts = sorted(set(step.named) & hosts) if isinstance(step, HOST_REFUSED) else []
        if on_hosts:
            raise ChaosSetupError(f"scenario {sc.name}: steps[{i}] ({step.action} {', '.join(on_hosts)}): "
                                  f"{', '.join(on_hosts)} is a host node (runs outside Docker): only pings, link and "
                                  "partition faults apply to it")
    swarm_backend = SwarmBackend(docker.from_env()) if swarm else None
    backend = swarm_backend or DockerBackend(docker.from_env())
    if swarm_backend is not None:
        try:
            swarm_backend.require_manager()
            swarm_backend.check_topology(full)
        except SwarmError as exc:
            raise ChaosSetupError(str(exc)) from None
    image = o.image if o.image is not None else build_node_image(backend.client).tag
    reference_image = o.reference_image
    if reference_image is None and reference_nodes(full.variants()):  # the reference's nodes: its image, built as
        try:  # the node image is
            reference_image = build_reference_image(backend.client, pinecone_src=o.pinecone_src).tag
        except ReferenceImageError as exc:
            raise ChaosSetupError(f"scenario {sc.name}: {exc}") from None
    prometheus_image = o.prometheus_image
    if o.monitoring and prometheus_image is None:
        prometheus_image = build_prometheus_image(backend.client)
    initial = set(topology.node_names) if topology is not None else set()
    full = with_planned_keys(full, sc.steps, initial, o.seed)  # joins' ground keys, made with the containers
    root, run_id = (o.record.parent, o.record.name) if o.record is not None else (runs_root(o.runs_dir), new_run_id())
    run = create_run(root, run_id, topology=full.to_record())
    declared_nodes, declared_links = sc.declared()
    start_stopped = [n for n in declared_nodes if n not in initial]
    start_unlinked = [(a, b) for a, b, _ in declared_links
                      if topology is None or not any({ln.a, ln.b} == {a, b} for ln in topology.links)]  # fmt: skip
    metrics = RunMetrics(run.run_id) if o.monitoring or o.metrics_at is not None else None
    if swarm_backend is not None:
        chaos: DockerChaos = SwarmChaos(full, run, image=image, seed=o.seed, backend=swarm_backend, keep=o.keep,
                                        start_stopped=start_stopped, start_unlinked=start_unlinked, ab=o.ab,
                                        reference_image=reference_image)  # fmt: skip
        chaos.metrics = metrics
        return chaos
    kw: dict[str, Any] = dict(image=image, seed=o.seed, backend=backend, keep=o.keep,
                              prometheus_image=prometheus_image if o.monitoring else None, metrics=metrics,
                              removal=o.removal, start_stopped=start_stopped, start_unlinked=start_unlinked, ab=o.ab,
                              reference_image=reference_image)  # fmt: skip
    if world is not None:  # nodes that move: their radio peerings made and closed as they do (docs/mobility.md)
        classes = {r.name: resolve_class(r.link_class, full.classes or None) for r in world.radios}
        return MobileDockerChaos(full, run, world=world, radio_classes=classes, **kw)
    return DockerChaos(full, run, **kw)


def _docker_world(sc: Scenario, topology: Topology, full: Topology, o: ChaosOptions) -> Any:
    """The movement of a Docker run of ``full`` (a topology with radios; its traces read where ``topology``'s file
    is), or ChaosSetupError for what Docker cannot move: host nodes and Pinecone reference nodes on a radio."""
    refused = docker_radio_refusal(full)
    if refused is not None:
        raise ChaosSetupError(f"scenario {sc.name}: {refused}")
    return build_world(full, o.seed, read_traces(topology))


# ---------------------------------------------------------------------- the run


def execute(sc: Scenario, topology: Topology | None, options: ChaosOptions | None = None,
            progress: Progress | None = None) -> dict[str, Any]:  # fmt: skip
    """Run ``sc`` on ``topology`` as ``options`` say (default: in process, seed 0); the ``--json`` document, with
    ``run_dir``. ``progress(step_record)`` is called after each step."""
    o = options or ChaosOptions()
    prepared = make_backend(sc, topology, o)
    phase = ["starting"]
    if o.watch is not None and prepared.snapshot is not None:
        progress = _phases(phase, progress)
        snapshot = prepared.snapshot
        watching: AbstractContextManager[Any] = o.watch(lambda: snapshot(phase[0]))
    else:
        watching = nullcontext()
    with watching:
        return _execute(prepared, sc, o, progress)


def _phases(phase: list[str], progress: Progress | None) -> Progress:
    """``progress``, also keeping in ``phase[0]`` which step the run is past (for the progress line)."""

    def each(rec: dict[str, Any]) -> None:
        phase[0] = f"past step #{rec['index']} {rec['action']}"
        if progress is not None:
            progress(rec)

    return each


def _execute(prepared: PreparedRun, sc: Scenario, o: ChaosOptions, progress: Progress | None) -> dict[str, Any]:
    server = None
    if o.metrics_at is not None:
        prepared.metrics = prepared.metrics or RunMetrics(prepared.run_id)
        server = serve_metrics(prepared.metrics, o.metrics_at.host, o.metrics_at.port)
        print(f"snekbed chaos: run metrics on {server.url}", file=sys.stderr)
    try:
        if o.view_at is not None:
            out = trio.run(_run_viewed, prepared, sc, o.seed, progress, o.view_at)  # a served view: the real clock
        else:
            on_action = prepared.trace.action if prepared.trace is not None else None
            run = partial(run_scenario, prepared.backend, sc, seed=o.seed, progress=progress, metrics=prepared.metrics,
                          on_action=on_action, run_dir=prepared.run_dir)  # fmt: skip
            out = trio.run(run, clock=prepared.clock)
    finally:
        if server is not None:
            server.close()
    # the event trace's hash (orchestrator.chaos.trace): a promise only in process on the virtual clock
    reproducible = prepared.trace is not None and prepared.clock is not None and o.view_at is None
    out["trace_sha256"] = prepared.trace.hexdigest() if reproducible and prepared.trace is not None else None
    out["trace_lines"] = prepared.trace.lines if reproducible and prepared.trace is not None else None
    out["run_dir"] = prepared.run_dir
    out["variant"] = str(o.variant)
    out.update(prepared.report)
    return out


async def _run_viewed(prepared: PreparedRun, scenario: Scenario, seed: int, progress: Progress | None,
                      view_at: HostPort) -> dict[str, Any]:  # fmt: skip
    """The scenario, with the live view of its network served alongside (real clock)."""
    if prepared.live is None:
        raise ChaosSetupError("--view: this backend has no live view here (`snekbed view --live` follows Docker runs)")
    live = prepared.live()
    hub = LiveHub(live)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.run)
        bound = await nursery.start(serve_app, build_live_app(hub), view_at, trio.sleep_forever)
        print(f"snekbed chaos: live view on http://{bound}/", file=sys.stderr)
        try:
            return await run_scenario(prepared.backend, scenario, seed=seed, on_action=live.fault, progress=progress,
                                      metrics=prepared.metrics, run_dir=prepared.run_dir)
        finally:
            nursery.cancel_scope.cancel()
