"""``snekbed sim``: run a topology in the in-process backend and measure it.

Phases: start every node and link at t=0; run until tree and snake have
converged (or ``max_time_s`` of protocol time passes); send SNEK pings between
sampled pairs; optionally kill the root and measure re-convergence and pings
again. The result is the JSON document of the CLI contract.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import networkx as nx
import trio
import trio.testing

from contract.links import LinkClass, LinkShape, link_type_number, resolve_class
from netem.userspace import shaper_factory
from node.config import HostPort
from node.core.state import MAX_PORTS
from node.core.variants import VariantSpec
from node.httpserve import serve_app
from node.metrics import serve as serve_metrics

from orchestrator.backends.inproc import InprocNetwork, SimNode
from orchestrator.backends.inproc_mobility import MobilityLog, RadioLinks
from orchestrator.tools.capture.inproc import InprocPcap
from orchestrator.tools.inproc_metrics import InprocMetrics
from orchestrator.model.hosting import require_in_process
from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.mobility_spec import World, build_world
from orchestrator.model.observe import HOP_CONVENTION, ConvergenceTracker, NodeView, router_views, stretch_summary
from orchestrator.backends.inproc_record import RunRecorder
from orchestrator.model.record import new_run_id, versions
from orchestrator.model.topology import Topology
from orchestrator.sessions.progress import Snapshot, Watch
from orchestrator.tools.view.app import LiveHub, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import InprocLive

__all__ = ["OrderedPairs", "SimConfig", "config_from_topology", "link_options", "refused_sentence", "run_sim",
           "run_sim_sync"]

OBSERVE_EVERY_S = 0.1
PING_WAIT_S = 6.0  # the reference's 5 s ping timeout, plus slack


@dataclass
class SimConfig:
    nodes: list[str]
    links: list[tuple[str, str, str]]
    name: str = "topology"
    clock: str = "virtual"
    seed: int = 0
    pairs: int = 100
    #: the mode of the sampled pings ("snek" or "tree"): a run pings in one mode, so that a run in each mode
    #: keeps the same schedule (one outstanding ping per target and router)
    ping_mode: str = "snek"
    kill_root: bool = False
    link_delay_ms: float = 1.0
    #: each node boots a random time in [0, boot_spread_s) before the links come up (InprocNetwork): 0 puts every
    #: router's timers in lockstep, which big graphs do not survive (docs/performance.md, "A 10 000-node graph")
    #: (the commands pass DEFAULT_BOOT_SPREAD_S; the library's own default stays the lockstep it always had)
    boot_spread_s: float = 0.0
    max_time_s: float = 600.0
    wire_bytes: bool = False
    record: Path | None = None
    run_id: str | None = None
    key_seeds: dict[str, bytes] = field(default_factory=dict)
    topology_doc: dict[str, Any] | None = None
    node_specs: tuple[Any, ...] = ()  # the topology's NodeSpecs: one with ``adversary:`` starts adversarial
    shapers: dict[str, Any] | None = None
    link_options: list[dict[str, Any]] | None = None  # per link: connect() keyword options (link_type, shaper, sized)
    variant: VariantSpec = field(default_factory=VariantSpec)  # every node's variant and knobs ...
    variants: dict[str, VariantSpec] = field(default_factory=dict)  # ... unless named here
    metrics: HostPort | None = None  # serve every node's metrics here (InprocMetrics), real clock only
    hold_s: float = 0.0  # after the run, keep the network (and the metrics endpoint) up this long
    on_serving: Callable[[str], None] | None = None  # told the metrics URL once it is bound
    view: HostPort | None = None  # serve the live `snekbed view` page here (real clock only)
    on_view: Callable[[str], None] | None = None  # told the page's URL once it is bound
    #: told the topology links a router could not make, as soon as the network is built (before it converges)
    on_refused: Callable[[list[dict[str, Any]]], None] | None = None
    pcap: Path | None = None  # write every frame on every link here (orchestrator/tools/capture/inproc.py)
    #: the topology's moving nodes and radios (docs/mobility.md), and each radio's link class; None: nothing moves
    world: World | None = None
    radio_classes: dict[str, LinkClass] = field(default_factory=dict)


class OrderedPairs(Sequence):
    """``[(a, b) for c in comps for a in c for b in c if a != b]`` without building it: ``random.sample`` draws
    the same pairs from it as from that list (it only asks for the length and items by index), and a
    10 000-node component would make that list 10^8 tuples (about 7 GB)."""

    def __init__(self, comps: list[list[str]]) -> None:
        self._comps = [c for c in comps if len(c) > 1]
        self._starts: list[int] = []
        n = 0
        for c in self._comps:
            self._starts.append(n)
            n += len(c) * (len(c) - 1)
        self._len = n

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        k = bisect_right(self._starts, i) - 1
        c = self._comps[k]
        a, j = divmod(i - self._starts[k], len(c) - 1)
        return c[a], c[j if j < a else j + 1]


def _recorder(cfg: SimConfig, net: InprocNetwork) -> RunRecorder:
    """The recorder of an in-process run: its meta.json and topology.json from ``cfg``."""
    run_id = cfg.run_id or new_run_id()
    wall_offset_s = next(iter(net.nodes.values())).router.wall_offset_ms / 1000.0 if net.nodes else 0.0
    topo = cfg.topology_doc or {
        "name": cfg.name,
        "nodes": [{"name": n} for n in cfg.nodes],
        "links": [{"a": a, "b": b, "class": c} for a, b, c in cfg.links],
    }
    meta = {
        "run_id": run_id,
        "backend": "inproc",
        "variant": str(cfg.variant),
        "topology": cfg.name,
        "seed": cfg.seed,
        "clock": cfg.clock,
        "link_delay_ms": cfg.link_delay_ms,
        "boot_spread_s": cfg.boot_spread_s,
        "nodes": {name: sn.key.hex() for name, sn in net.nodes.items()},
        "links": [{"a": a, "b": b, "class": c, "shaping_backend": "userspace"} for a, b, c in cfg.links],
        "versions": versions(),
        "started_wall_ts": wall_offset_s,
    }
    others = {n: str(sn.spec) for n, sn in sorted(net.nodes.items()) if sn.spec != cfg.variant}
    if others:
        meta["variants"] = others
    if cfg.world is not None:
        meta["mobility"] = cfg.world.meta()
    return RunRecorder(Path(cfg.record), run_id, wall_offset_s, meta, topo)


class _Sim:
    def __init__(self, cfg: SimConfig, progress: Callable[[str, float], None] | None) -> None:
        self.cfg = cfg
        self._on_progress = progress
        self.phase = "starting"
        self._gives_up_at: float | None = None  # the current convergence wait's bound (protocol time)
        recording = cfg.record is not None
        links = cfg.links
        if cfg.link_options is not None:
            links = [(*link, opts) for link, opts in zip(cfg.links, cfg.link_options)]
        self.net = InprocNetwork(
            cfg.nodes,
            links,
            seed=cfg.seed,
            link_delay_ms=cfg.link_delay_ms,
            key_seeds=cfg.key_seeds,
            wire_bytes=cfg.wire_bytes,
            detail_events=recording,
            shapers=cfg.shapers,
            variant=cfg.variant,
            variants=cfg.variants,
            boot_spread_s=cfg.boot_spread_s,
            node_specs=cfg.node_specs,
        )
        self.tracker = ConvergenceTracker()
        self.rng = random.Random(f"pairs-{cfg.seed}")
        self.recorder = _recorder(cfg, self.net) if recording else None
        self.net.on_event = self._on_event
        if self.recorder is not None:
            self.net.on_frame = self.recorder.on_frame
        self.metrics: InprocMetrics | None = None
        if cfg.metrics is not None:
            self.metrics = InprocMetrics(self.net)
            self.metrics.attach()
        self.metrics_url: str | None = None
        self.view_url: str | None = None
        self.live: InprocLive | None = None
        self.pcap: InprocPcap | None = None
        if cfg.pcap is not None:
            self.pcap = InprocPcap(self.net, cfg.pcap)
            self.pcap.attach()
        self.done = False
        self._graph: tuple[int, nx.Graph] | None = None
        self._changed = True  # a root or descending changed since the last check
        self._next_expiry = math.inf  # when the first descending entry the last views() counted expires
        self.names_by_key = {n.key: name for name, n in self.net.nodes.items()}
        self._disrupted = self.net.now  # the run's last disruption: its start, or the root kill
        self.radio: RadioLinks | None = None
        if cfg.world is not None:
            log = (MobilityLog(self.recorder.root, self.recorder.run_id, self.recorder.wall_offset_s)
                   if self.recorder is not None else None)
            self.radio = RadioLinks(self.net, cfg.world, cfg.radio_classes, log)

    # -------------------------------------------------------------- observation

    def _on_event(self, node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        if kind == "root_changed":
            self.tracker.root_changed(node.name, bytes.fromhex(fields["root"]), now)
            self._changed = True
        elif kind == "descending_changed":
            self.tracker.descending_changed(node.name, now)
            self._changed = True
        if self.recorder is not None:
            self.recorder.on_event(node, kind, fields, now)

    def live_graph(self) -> nx.Graph:
        if self._graph is not None and self._graph[0] == self.net.topology_version:
            return self._graph[1]
        g = nx.Graph()
        g.add_nodes_from(n for n, sn in self.net.nodes.items() if sn.alive)
        for ea, _ in self.net.links.values():
            g.add_edge(ea.node, ea.peer)
        self._graph = (self.net.topology_version, g)
        self._changed = True
        return g

    def views(self) -> dict[str, NodeView]:
        """What each live node says now (observe.router_views: an expired descending entry counts as none)."""
        views, self._next_expiry = router_views(((n, sn.router) for n, sn in self.net.nodes.items() if sn.alive),
                                                self.net.now)  # fmt: skip
        return views

    def progress(self, phase: str, t: float) -> None:
        self.phase = phase
        if self._on_progress is not None:
            self._on_progress(phase, t)

    def snapshot(self) -> Snapshot:
        """The run now, for the progress line (read from its thread: attribute reads only)."""
        net, tracker = self.net, self.tracker
        return Snapshot(self.phase, net.now, net.frames_delivered, net.queued_events, tracker.tree_s,
                        tracker.snake_s, self._gives_up_at)

    def _tick(self, now: float) -> None:
        graph = self.live_graph()
        if not self._changed and now < self._next_expiry:
            # nothing that convergence depends on moved, and no descending entry expired: same verdict as last time
            self.net.call_at(now + OBSERVE_EVERY_S, self._tick)
            return
        self._changed = False
        verdict = self.tracker.observe(graph, self.views())
        if verdict.snake:
            self.done = True
        else:
            self.net.call_at(now + OBSERVE_EVERY_S, self._tick)
        self.progress(self.phase, now - self.tracker.t0)

    async def converge(self, t0: float, phase: str = "converging") -> tuple[float | None, float | None]:
        """Run until converged, timed from ``t0`` (which may be past: the end of a movement watched until now)."""
        self.tracker.reset(t0)
        self.phase = phase
        self._gives_up_at = t0 + self.cfg.max_time_s
        self.done = False
        self._changed = True
        self.net.call_at(max(t0, self.net.now), self._tick)
        try:
            await self.net.run_until(t0 + self.cfg.max_time_s, stop=lambda: self.done)
        finally:
            self._gives_up_at = None
        return self.tracker.tree_s, self.tracker.snake_s

    # -------------------------------------------------------------- pings

    async def ping_pairs(self, phase: str) -> dict[str, Any]:
        g = self.live_graph()
        comps = [sorted(c) for c in nx.connected_components(g) if len(c) > 1]
        candidates = OrderedPairs(comps)
        n = min(self.cfg.pairs, len(candidates))
        pairs = self.rng.sample(candidates, n) if n else []
        now = self.net.now
        sent: list[tuple[str, str, int]] = []
        for a, b in pairs:
            router = self.net.nodes[a].router
            if router.ping.start(self.net.nodes[b].key, now, mode=self.cfg.ping_mode):
                sent.append((a, b, nx.shortest_path_length(g, a, b)))
            self.net.flush(self.net.nodes[a])
        await self.net.run_until(now + PING_WAIT_S)
        delivered = 0
        samples = []
        results = {}
        for name, sn in self.net.nodes.items():
            for res in sn.ping_results:
                results[(name, self.names_by_key.get(res.target))] = res
            sn.ping_results.clear()
        for a, b, shortest in sent:
            res = results.get((a, b))
            ok = res is not None and res.received
            delivered += ok
            if self.metrics is not None:
                self.metrics.counts.ping(a, self.cfg.ping_mode, ok)
            if ok:
                samples.append((res.links, shortest))
            if self.recorder is not None:
                self.recorder.ping(a, b, self.net.nodes[a].key, self.net.nodes[b].key, self.cfg.ping_mode, now, res,
                                   shortest, g)
        self.progress(phase, self.net.now)
        return {"sent": len(sent), "delivered": delivered, "samples": samples}

    # -------------------------------------------------------------- the run

    async def run(self) -> dict[str, Any]:
        """The run; when it fails or is cancelled, the recorder still closes its files and writes meta.json."""
        try:
            return await self._run_serving()
        finally:
            if self.pcap is not None:
                self.pcap.close()
            if self.radio is not None and self.radio.log is not None:
                self.radio.log.close()

    async def _run_serving(self) -> dict[str, Any]:
        try:
            if self.cfg.metrics is None and self.cfg.view is None:
                return await self._run()
            async with trio.open_nursery() as nursery:
                stop = trio.Event()
                if self.metrics is not None and self.cfg.metrics is not None:
                    bound = await nursery.start(serve_metrics, self.metrics, self.cfg.metrics, stop.wait)
                    self.metrics_url = f"http://{bound}/metrics"
                    if self.cfg.on_serving is not None:
                        self.cfg.on_serving(self.metrics_url)
                if self.cfg.view is not None:
                    graph = GraphInfo(self.cfg.name, list(self.cfg.nodes),
                                      {n: sn.key.hex() for n, sn in self.net.nodes.items()}, list(self.cfg.links))
                    self.live = InprocLive(self.net, graph, self.recorder.run_id if self.recorder else "sim")
                    if self.radio is not None and self.cfg.topology_doc is not None:  # draw nodes where they are
                        self.radio.log = self.live.tee(self.cfg.topology_doc, self.radio.log)
                    hub = LiveHub(self.live)
                    nursery.start_soon(hub.run)
                    bound = await nursery.start(serve_app, build_live_app(hub), self.cfg.view, stop.wait)
                    self.view_url = f"http://{bound}/"
                    if self.cfg.on_view is not None:
                        self.cfg.on_view(self.view_url)
                try:
                    out = await self._run()
                    if self.metrics_url is not None:
                        out["metrics"] = self.metrics_url
                    if self.view_url is not None:
                        out["view"] = self.view_url
                    if self.cfg.hold_s > 0:
                        self.progress(f"holding for {self.cfg.hold_s:g} s", self.net.now)
                        await self.net.run_until(self.net.now + self.cfg.hold_s)
                    return out
                finally:
                    stop.set()
                    nursery.cancel_scope.cancel()
        except BaseException as exc:
            if self.recorder is not None:
                self.recorder.abort(self.net, exc)
            raise

    async def _run(self) -> dict[str, Any]:
        cfg = self.cfg
        wall0 = time.perf_counter()
        if self.recorder is not None:
            self.recorder.start(self.net)
        self.net.start()
        if self.net.links_refused and cfg.on_refused is not None:
            cfg.on_refused(list(self.net.links_refused))
        if self.radio is not None:
            self.radio.start()
        tree_s, snake_s = await self.converge(self.net.now)
        if self.recorder is not None:
            self.recorder.action("converged", None, {"tree_converged_s": tree_s, "snake_converged_s": snake_s}, self.net.now)
        pings = await self.ping_pairs("pinging")
        out: dict[str, Any] = {
            "topology": cfg.name,
            "nodes": len(cfg.nodes),
            "links": len(self.net.links),
            "links_refused_count": len(self.net.links_refused),
            "links_refused": self.net.links_refused,
            "seed": cfg.seed,
            "variant": str(cfg.variant),
            "variants": dict(Counter(str(sn.spec) for sn in self.net.nodes.values())),
            "handshake_failures": sum(sum(c.values()) for c in self.net.handshake_failures.values()),
            "clock": cfg.clock,
            "link_delay_ms": cfg.link_delay_ms,
            "boot_spread_s": cfg.boot_spread_s,
            "tree_converged_s": _r(tree_s),
            "snake_converged_s": _r(snake_s),
            "pings": {"sent": pings["sent"], "delivered": pings["delivered"]},
            "ping_mode": cfg.ping_mode,
            "stretch": stretch_summary(pings["samples"]),
            "hops_counted": HOP_CONVENTION,
        }
        if cfg.kill_root:
            live = [(sn.key, name) for name, sn in self.net.nodes.items() if sn.alive]
            victim = max(live)[1]
            t_kill = self._disrupted = self.net.now
            if self.recorder is not None:
                self.recorder.action("kill_root", victim, {"key": self.net.nodes[victim].key.hex()}, t_kill)
            self.net.kill(victim)
            if self.live is not None:
                self.live.fault("kill_root", victim)
            tree2, snake2 = await self.converge(t_kill, "re-converging after the root kill")
            if self.recorder is not None:
                self.recorder.action(
                    "converged", None, {"tree_converged_s": tree2, "snake_converged_s": snake2}, self.net.now
                )
            pings2 = await self.ping_pairs("pinging after root kill")
            out["root_kill"] = {
                "killed": self.net.nodes[victim].key.hex(),
                "killed_name": victim,
                "tree_reconverged_s": _r(tree2),
                "snake_reconverged_s": _r(snake2),
                "pings": {"sent": pings2["sent"], "delivered": pings2["delivered"]},
                "stretch": stretch_summary(pings2["samples"]),
            }
        if self.radio is not None:
            out["mobility"] = await self._after_movement(self.radio)
        out["protocol_time_s"] = round(self.net.now, 3)
        out["wall_s"] = round(time.perf_counter() - wall0, 3)
        out["frames_delivered"] = self.net.frames_delivered
        if self.recorder is not None:
            self.recorder.finish(self.net, out)
            out["record"] = str(self.recorder.root)
        return out

    async def _after_movement(self, radio: RadioLinks) -> dict[str, Any]:
        """Let the nodes move to the end of the movement, then time the convergence on the radio graph where they
        stopped, from when they stopped (or the root kill, if it came later), and ping in it: the ``mobility`` key
        of the document."""
        if self.net.now < radio.end_s:
            self.progress("moving", self.net.now)
            await self.net.run_until(radio.end_s)
        tree_s, snake_s = await self.converge(max(radio.end_s, self._disrupted), "converging after the movement")
        if self.recorder is not None:
            self.recorder.action("converged", None, {"tree_converged_s": tree_s, "snake_converged_s": snake_s,
                                                     "after": "movement"}, self.net.now)
        pings = await self.ping_pairs("pinging after the movement")
        graph = self.live_graph()
        return {
            **radio.report(),
            "components": nx.number_connected_components(graph),
            "tree_converged_s": _r(tree_s),
            "snake_converged_s": _r(snake_s),
            "pings": {"sent": pings["sent"], "delivered": pings["delivered"]},
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


async def run_sim(cfg: SimConfig, progress: Callable[[str, float], None] | None = None,
                  watch: Watch | None = None) -> dict[str, Any]:  # fmt: skip
    """The run; ``progress(phase, protocol_time)`` at each phase, ``watch(read)`` around the whole run."""
    sim = _Sim(cfg, progress)
    with watch(sim.snapshot) if watch is not None else nullcontext():
        return await sim.run()


def run_sim_sync(cfg: SimConfig, progress: Callable[[str, float], None] | None = None,
                 watch: Watch | None = None) -> dict[str, Any]:  # fmt: skip
    """Run with the configured clock: ``virtual`` = MockClock(autojump_threshold=0), ``real`` = trio's."""
    if cfg.clock not in ("virtual", "real"):
        raise ValueError(f"clock must be 'virtual' or 'real', not {cfg.clock!r}")
    clock = trio.testing.MockClock(autojump_threshold=0) if cfg.clock == "virtual" else None
    return trio.run(run_sim, cfg, progress, watch, clock=clock)


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
    """The in-process run of ``topo``; ``variant`` (in ``kw``) is the run's, topology nodes may override it.
    Raises HostingError when a node's spec is the Pinecone reference's (it runs only on a real-time backend)."""
    seed = kw.get("seed", 0)
    key_seeds = {n.name: n.seed_bytes(seed) for n in topo.nodes if n.key_seed}
    variant = kw.pop("variant", None) or VariantSpec()
    require_in_process(topo.variants(variant))
    variants = {n.name: n.variant_spec(variant) for n in topo.nodes if n.variant is not None or n.knobs}
    if len(variants) == len(topo.nodes) and len(set(variants.values())) == 1:
        variant, variants = next(iter(variants.values())), {}  # every node names the same: that is the run's
    world = build_world(topo, seed, read_traces(topo))
    return SimConfig(
        world=world,
        radio_classes={r.name: resolve_class(r.link_class, topo.classes or None) for r in world.radios} if world else {},
        variant=variant,
        variants=variants,
        nodes=topo.node_names,
        links=[(l.a, l.b, l.link_class) for l in topo.links],
        link_options=[link_options(topo, i) for i in range(len(topo.links))],
        name=topo.name,
        key_seeds=key_seeds,
        topology_doc=topo.to_record(),
        node_specs=tuple(topo.nodes),
        **kw,
    )


def refused_sentence(refused: list[dict]) -> str:
    """``N topology links were not made: a-b (ports_full at a), ...`` (the first ten, then a count)."""
    shown = ", ".join(f"{r['a']}-{r['b']} ({r['reason']} at {'/'.join(r['nodes']) or '?'})" for r in refused[:10])
    more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
    return (f"{len(refused)} topology link{'s' if len(refused) > 1 else ''} not made (a router has {MAX_PORTS} ports; "
            f"the reference refuses the extra peerings too): {shown}{more}; all in --json links_refused")
