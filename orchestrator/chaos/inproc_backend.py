"""The chaos backend on the in-process network (orchestrator.backends.inproc).

Protocol time is the backend's clock: with ``MockClock(autojump_threshold=0)`` a
scenario of minutes runs in seconds and a seed gives the same history every time.

How faults map here (docs/chaos.md compares them with Docker):

* ``kill``: the node stops; its peers see their streams close at once (EOF), as
  when a container is killed.
* ``restart``: a new router with the same key, peered again over every link of
  the node that is not cut (partition, link_down) and whose other end is up.
* ``pause``: the node stops processing; frames sent to it are held (a TCP
  stream buffers them) and delivered in order on resume. Its peers hear nothing
  from it, so each drops the peering after the 5 s peer timeout (PROTOCOL.md
  §3.5); the paused node learns of that on resume and its links are dialled
  again, as the TCP node's dialers would.
* ``partition`` / ``link_down``: the links are removed (both ends see the stream close); ``heal`` / ``link_up``
  make them again. A Docker partition instead disconnects networks, and TCP may take up to the peer timeout to notice.
* ``link_change``: the link's shaper is replaced mid-run.
* a peering a router ends for bad input (a forged or malformed frame) is dialled again with the node's backoff
  (orchestrator.chaos.inproc_links), as the TCP node's dialer does.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx
import trio

from contract.links import LinkShape, link_type_number, resolve_class
from netem.userspace import shaper_factory
from node.core.crypto import Identity, derive_seed
from node.core.recorder import DEFAULT_WINDOW_S
from node.core.router import Timers
from node.core.variants import VariantSpec

from orchestrator.backends.docker_observe import reconvergence_bound_s
from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S, InprocNetwork, SimNode
from orchestrator.model.observe import ConvergenceTracker, NodeView, router_views
from orchestrator.backends.inproc_record import RunRecorder
from orchestrator.model.record import new_run_id, versions
from orchestrator.sessions.sim import link_options
from orchestrator.model.topology import Topology
from orchestrator.chaos import inproc_observe as measured
from orchestrator.chaos.backend import ChaosBackend, Converged, FlightDump, TrafficSample, planted_defect
from orchestrator.chaos.checker import NodeState, PingOutcome
from orchestrator.chaos.flight import from_network
from orchestrator.chaos.inproc_attacks import InprocAttacks
from orchestrator.chaos.inproc_links import InprocLinks

__all__ = ["InprocChaos", "PEER_TIMEOUT_S"]

PEER_TIMEOUT_S = 5.0  # PROTOCOL.md §3.5: a peer silent this long is dropped
OBSERVE_EVERY_S = 0.1
PING_RETRY_S = 0.1  # how often a checker's ping waiting for its sender's ping to the same target tries again


class InprocChaos(InprocAttacks, InprocLinks, ChaosBackend):
    """The chaos backend (every protocol of orchestrator.chaos.backend) over one InprocNetwork. Build it, then
    ``await start()`` inside trio."""

    name = "inproc"
    measures_faults = True
    reference_nodes: frozenset[str] = frozenset()  # the Go reference runs on real-time backends only

    def __init__(
        self,
        topology: Topology | None,
        *,
        seed: int = 0, link_delay_ms: float = 1.0,
        detail_events: bool = False,
        timers: Timers | None = None,
        record: Path | None = None,
        run_id: str | None = None,
        declared: tuple[list[str], list[tuple[str, str, str]]] = ([], []),
        scenario_name: str | None = None,
        planted_bug: str | None = None,
        variant: VariantSpec | None = None,
        ab: dict[str, Any] | None = None,
        boot_spread_s: float = DEFAULT_BOOT_SPREAD_S,
        recorder_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        """``record``: write a run directory there (run-dataset contract). ``declared``: the nodes and links
        the scenario's join steps add (Scenario.declared), so the run's topology.json names them.
        ``variant``: every node's protocol variant and knobs unless its topology entry says otherwise.
        ``ab``: the A/B experiment this run is an arm of (written to meta.json as ``ab``).
        ``boot_spread_s``: each router boots a random time (from the seed) up to this long before the links
        come up (InprocNetwork); 0 boots them all in one instant, their timers in lockstep.
        ``recorder_s``: the seconds each node's flight recorder keeps (0: none; orchestrator.chaos.flight)."""
        self.topology = topology
        self.seed = seed
        #: TEST ONLY, never on by default: a deliberate defect the tests must catch (backend.planted_defect: the
        #: argument, else $SNEKBED_CHAOS_PLANT). "restart_keeps_state": a restarted node keeps its old router;
        #: "ignore_partition", "pause_noop", "link_change_noop": the fault is reported done and not done (its
        #: confirmation must find it out); "stall[=NODE]": NODE (default: the highest key) never accepts a bootstrap.
        self.planted_bug, self.planted_on = planted_defect(planted_bug)
        detail_events = detail_events or record is not None
        nodes = topology.node_names if topology is not None else []
        key_seeds = {n.name: n.seed_bytes(seed) for n in topology.nodes if n.key_seed} if topology is not None else {}
        self.variant = variant or VariantSpec()
        variants = {n.name: n.variant_spec(self.variant) for n in topology.nodes} if topology is not None else {}
        self.ab = ab
        self.net = InprocNetwork(nodes, [], seed=seed, link_delay_ms=link_delay_ms, key_seeds=key_seeds,
                                 detail_events=detail_events, timers=timers, variant=self.variant, variants=variants,
                                 boot_spread_s=boot_spread_s, recorder_s=recorder_s,
                                 node_specs=topology.nodes if topology is not None else ())  # fmt: skip
        self.timers = timers
        self._watch_broken()  # a peering a router ends for bad input is dialled again (inproc_links)
        # every link the run wants: spec index -> (a, b, class, connect options); lid when made
        self.specs: list[tuple[str, str, str, dict[str, Any]]] = []
        self.made: dict[int, int] = {}  # spec -> live link id
        self.cut: set[int] = set()  # specs cut by partition
        self.down: set[int] = set()  # specs taken down by link_down
        if topology is not None:
            for i, link in enumerate(topology.links):
                self.specs.append((link.a, link.b, link.link_class, link_options(topology, i)))
        self.paused: dict[str, list[tuple[int, float]]] = {}  # name -> ports dropped by peers while paused
        self._pause_gen: dict[str, object] = {}
        self.removed: set[str] = set()
        self.tracker = ConvergenceTracker()
        self.on_event = None  # optional extra observer (the recorder)
        self.net.on_event = self._on_event
        # pings: (source, target key, mode, sent_at) -> result; background traffic
        self._sent: list[tuple[str, str, str, float, tuple[bytes, bytes]]] = []  # (a, b, mode, sent_at, their keys)
        self._results: dict[tuple[str, bytes, str, float], Any] = {}
        self._traffic: dict[str, Any] | None = None
        self._traffic_gen = 0
        self.refused: list[dict[str, Any]] = []
        self.traffic_skipped = 0
        self._graph: tuple[Any, nx.Graph] | None = None
        self._next_expiry = math.inf  # when the first descending entry _views counted expires
        self._changes = 0  # root or descending changes seen (the observer re-decides only after one)
        self._background: set[tuple[str, str, str, float]] = set()
        self._ping_paths: dict[tuple[str, str, str, float], tuple[int | None, list[str]]] = {}
        self.recorder: RunRecorder | None = None if record is None else self._make_recorder(
            Path(record), run_id, declared, scenario_name)

    def _make_recorder(self, root: Path, run_id: str | None, declared: tuple[list[str], list[tuple[str, str, str]]],
                       scenario_name: str | None) -> RunRecorder:  # fmt: skip
        nodes = list(self.net.nodes) + [n for n in declared[0] if n not in self.net.nodes]
        links = [(a, b, c) for a, b, c, _ in self.specs] + list(declared[1])
        name = self.topology.name if self.topology is not None else (scenario_name or "sequence")
        doc = self.topology.to_record() if self.topology is not None else {"name": name, "nodes": [], "links": []}
        doc["nodes"] = doc["nodes"] + [{"name": n} for n in nodes if n not in {d["name"] for d in doc["nodes"]}]
        doc["links"] = doc["links"] + [{"a": a, "b": b, "class": c} for a, b, c in declared[1]]
        meta = {
            "run_id": run_id or new_run_id(), "backend": "inproc", "variant": str(self.variant), "topology": name,
            "seed": self.seed, "clock": "virtual", "link_delay_ms": self.net.link_delay_s * 1000,
            "boot_spread_s": self.net.boot_spread_s,
            "nodes": {n: self._identity(n).public_key.hex() for n in nodes},
            "links": [{"a": a, "b": b, "class": c, "shaping_backend": "userspace"} for a, b, c in links],
            "versions": versions(), "started_wall_ts": 1_700_000_000.0, "scenario": scenario_name,
        }  # fmt: skip
        others = {n: str(s) for n, s in sorted(self.net.variants.items()) if s != self.variant}
        if others:
            meta["variants"] = others
        if self.ab is not None:
            meta["ab"] = dict(self.ab)
        return RunRecorder(root, meta["run_id"], 1_700_000_000.0, meta, doc)

    def _identity(self, name: str, new: bool = False) -> Identity:
        if name in self.ground_seeds:  # a ground key (inproc_attacks.use_key)
            return Identity(self.ground_seeds[name])
        node = self.net.nodes.get(name)
        if node is not None:  # ``new``: a key of its own, from the seed, the name and the key it had
            return Identity(derive_seed(self.seed, name, node.key)) if new else node.router.identity
        return Identity(derive_seed(self.seed, name))

    def record_action(self, action: str, target: str | None, detail: dict | None, at: float) -> None:
        if self.recorder is not None:
            self.recorder.action(action, target, detail, at)

    # ------------------------------------------------------------------ lifecycle

    def now(self) -> float:
        return self.net.now

    async def start(self, nursery: trio.Nursery | None = None) -> None:
        if self.recorder is not None:
            self.recorder.start(self.net)
            self.net.on_frame = self.recorder.on_frame
            self.on_event = self.recorder.on_event
        if self.planted_bug == "stall":  # TEST ONLY: one node never accepts a bootstrap
            stalled = self.planted_on or max(self.net.nodes, key=lambda n: self.net.nodes[n].key)
            self.net.nodes[stalled].router.set_adversary({"bootstrap": 100.0})
        self.net.start()  # every router's first outputs; the links come from the specs, below
        for i in range(len(self.specs)):
            self._make(i)
        await self.net.run_until(self.net.now)

    async def stop(self) -> None:
        self._traffic = None
        rec = self.recorder
        if rec is None or rec._closed:
            return
        self._drain_results()
        for a, b, mode, t, keys in self._sent:
            res = self._outcome(a, keys[1], mode, t)
            shortest, classes = self._ping_paths.get((a, b, mode, t), (None, []))
            rec.ping(a, b, *keys, mode, t, res, shortest, None, link_classes=classes)
        rec.meta["nodes"] = {n: sn.key.hex() for n, sn in self.net.nodes.items()} | {
            n: k for n, k in rec.meta["nodes"].items() if n not in self.net.nodes}
        rec.finish(self.net, {"chaos": {"traffic_skipped": self.traffic_skipped}})

    async def abort(self, exc: BaseException) -> None:
        if self.recorder is not None:
            self.recorder.abort(self.net, exc)

    async def sleep(self, seconds: float) -> None:
        await self.net.run_until(self.net.now + max(0.0, seconds))
        self._drain_results()

    def known_nodes(self) -> list[str]:
        return sorted(self.net.nodes)

    def view_status(self, name: str, node: SimNode) -> str:
        """The live view's status of a node (orchestrator.tools.view.frames): paused, up or dead."""
        return "paused" if name in self.paused else "up" if node.alive else "dead"

    def _live(self, name: str) -> bool:
        n = self.net.nodes.get(name)
        return n is not None and n.alive and name not in self.paused

    def live_graph(self) -> nx.Graph:
        stamp = (self.net.topology_version, frozenset(self.paused))
        if self._graph is not None and self._graph[0] == stamp:
            return self._graph[1]
        g = nx.Graph()
        g.add_nodes_from(n for n in self.net.nodes if self._live(n))
        for a, b in self.net.edges():
            if self._live(a) and self._live(b):
                g.add_edge(a, b)
        self._graph = (stamp, g)
        return g

    # ------------------------------------------------------------------ observation

    def _on_event(self, node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        if kind == "root_changed":
            self.tracker.root_changed(node.name, bytes.fromhex(fields["root"]), now)
            self._changes += 1
        elif kind == "descending_changed":
            self.tracker.descending_changed(node.name, now)
            self._changes += 1
        if self.on_event is not None:
            self.on_event(node, kind, fields, now)

    def _views(self) -> dict[str, NodeView]:
        views, self._next_expiry = router_views(
            ((n, sn.router) for n, sn in self.net.nodes.items() if self._live(n)), self.net.now)
        return views

    async def states(self) -> dict[str, NodeState]:
        net = self.net
        return {n: NodeState(v.key, v.root, v.descending, 0, net.peer_keys(n)) for n, v in self._views().items()}

    # what a fault's confirmation reads (orchestrator.chaos.confirm; inproc_observe): passive, on the network

    async def peer_keys(self, names: Iterable[str]) -> dict[str, frozenset[bytes] | None]:
        return measured.peer_keys(self.net, names)

    async def frames_sent(self, names: Iterable[str]) -> dict[str, int | None]:
        return measured.frames_sent(self.net, names)

    async def probe(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[bool]:
        return measured.probe(self.net, pairs)

    async def adversary_counts(self, names: Iterable[str], kinds: Iterable[str], peer: str | None = None,
                               since: float | None = None) -> dict[str, tuple[int, int] | str]:  # fmt: skip
        return measured.adversary_counts(self.net, names, kinds, peer, since)

    async def measure_link(self, a: str, b: str, link_class: str | None,
                           shaping: Mapping[str, float] | None) -> dict[str, Any]:  # fmt: skip
        specs = self._specs_between(a, b)
        lc = resolve_class(link_class or (self.specs[specs[0]][2] if specs else "pipe"))
        shape = LinkShape(**{**lc.shape.model_dump(), **dict(shaping or {})}) if shaping else lc.shape
        return measured.measure_link(self.net, a, b, shape, self.seed)

    def beside(self, poll: Callable[[], Awaitable[bool]], every_s: float, until: float) -> None:
        measured.beside(self.net, poll, every_s, until)

    async def flight_records(self, names: Iterable[str]) -> dict[str, FlightDump | str]:
        return from_network(self.net, names)

    async def parents(self) -> dict[str, str | None]:
        return {name: self.net.parent_of(name) for name in self.net.nodes if self._live(name)}

    async def wait_converged(self, since: float, within_s: float, give_up: Callable[[], bool] | None = None) -> Converged:
        tr = self.tracker
        tr.reset(since)
        deadline = since + within_s
        seen = None
        next_expiry = -math.inf
        while True:
            stamp = (self._changes, self.net.topology_version, frozenset(self.paused))
            # re-decide after a change, or when a descending entry may have expired since the last look
            if stamp != seen or self.net.now >= next_expiry:
                seen = stamp
                v = tr.observe(self.live_graph(), self._views())
                if v.snake:
                    break
                next_expiry = self._next_expiry
            if self.net.now >= deadline or (give_up is not None and give_up()):
                break
            await self.net.run_until(min(self.net.now + OBSERVE_EVERY_S, deadline))
        self._drain_results()
        return Converged(tr.tree_s, tr.snake_s, self.net.now - since)

    def reconvergence_bound_s(self, margin_s: float) -> float:
        interval, expiry = self.variant.slowest(self.net.nodes[n].spec for n in self.live_graph())
        timers = dataclasses.replace(self.timers or Timers(), bootstrap_interval_s=interval)
        # links a router ended and that are being redialled come back within their backoff: counted from then
        return round(reconvergence_bound_s(self.live_graph(), timers, margin_s=margin_s, expiry_s=expiry)
                     + self.pending_redial_s(), 1)

    # ------------------------------------------------------------------ pings

    def _start_ping(self, a: str, b: str, mode: str, now: float, timeout_s: float, background: bool = False) -> bool:
        sa, sb = self.net.nodes.get(a), self.net.nodes.get(b)
        if sa is None or sb is None or not self._live(a):
            return False
        if not self.net.start_ping(a, b, mode, timeout_s):
            return False
        self._sent.append((a, b, mode, now, (sa.key, sb.key)))  # a removed node added again has a new key
        if background:
            self._background.add((a, b, mode, now))
        if self.recorder is not None:  # the shortest path as it is now, for pings.jsonl
            g = self.live_graph()
            try:
                path = nx.shortest_path(g, a, b)
                self._ping_paths[(a, b, mode, now)] = (len(path) - 1, [self.recorder.class_of(u, v)
                                                                       for u, v in zip(path, path[1:])])
            except (nx.NetworkXNoPath, nx.NodeNotFound):
                self._ping_paths[(a, b, mode, now)] = (None, [])
        return True

    def _drain_results(self) -> None:
        for name, sn in self.net.nodes.items():
            res = sn.ping_results
            if res:
                for r in res:
                    self._results[(name, r.target, r.mode, r.sent_at)] = r
                res.clear()

    def _outcome(self, a: str, b: str | bytes, mode: str, sent_at: float) -> Any:
        """The result of ``a``'s ping of ``b`` (a node, or the key it had then) sent at ``sent_at``."""
        return self._results.get((a, b if isinstance(b, bytes) else self.net.nodes[b].key, mode, sent_at))

    async def ping(self, pairs: list[tuple[str, str]], modes: tuple[str, ...], timeout_s: float) -> list[PingOutcome]:
        """Ping each pair in each mode, the pairs at once. A sender has one ping to a target in flight at a time
        (§8): a pair whose sender still waits for a background ping to the same target starts as soon as that one
        ends, which it does within its own timeout, so a ping is never counted lost for not having been sent. (It
        used to be tried again a whole timeout later, three times: a background ping every 6 s to the same target
        with a long path's 1.1-1.4 s round trip could be in flight at each try, and the pair was judged lost.)"""
        out: list[PingOutcome] = []
        for mode in modes:
            todo = list(pairs)
            started: list[tuple[str, str, float]] = []
            give_up = self.net.now + timeout_s + 0.5  # every ping in flight now has ended by then
            while True:
                now = self.net.now
                sent = [(a, b, now) for a, b in todo if self._start_ping(a, b, mode, now, timeout_s)]
                started += sent
                done = {(a, b) for a, b, _ in sent}
                todo = [p for p in todo if p not in done]
                if not todo or now >= give_up:
                    break
                await self.sleep(PING_RETRY_S)
            if started:
                await self.sleep(max(t for *_, t in started) + timeout_s + 0.5 - self.net.now)
            for a, b, t in started:
                res = self._outcome(a, b, mode, t)
                out.append(PingOutcome(a, b, mode, res is not None and res.received))
            out += [PingOutcome(a, b, mode, False) for a, b in todo]  # the sender is dead, or never free
        return out

    def traffic(self, enabled: bool, rate_per_s: float, pairs: list[tuple[str, str]], modes: tuple[str, ...],
                timeout_s: float) -> None:  # fmt: skip
        self._traffic_gen += 1
        if not enabled or rate_per_s <= 0 or not pairs:
            self._traffic = None
            return
        order = deque((a, b) for a, b in pairs)
        self._traffic = {"order": order, "modes": tuple(modes), "turn": {p: 0 for p in pairs},
                         "gap": 1.0 / rate_per_s, "timeout": timeout_s, "gen": self._traffic_gen}  # fmt: skip
        self.net.call_at(self.net.now, self._traffic_tick)

    def _traffic_tick(self, now: float) -> None:
        """Send the next background ping: pairs take turns, and each pair alternates its modes. A node has one
        outstanding ping per target (§8; the pong does not say its mode), so a pair whose source still waits on
        its target is passed over until the answer or the timeout; its next ping is then in the mode whose turn
        it is. (Skipping by mode instead would leave out exactly the pings after a loss, in one mode.)"""
        t = self._traffic
        if t is None or t["gen"] != self._traffic_gen:
            return
        order: deque[tuple[str, str]] = t["order"]
        for _ in range(len(order)):
            a, b = order[0]
            order.rotate(-1)
            src, dst = self.net.nodes.get(a), self.net.nodes.get(b)
            if src is None or dst is None or not self._live(a) or not dst.alive or dst.key in src.router.ping.pending:
                continue  # a dead source or target measures nothing (a paused target does: it is still peered)
            turn = t["turn"][(a, b)]
            if self._start_ping(a, b, t["modes"][turn % len(t["modes"])], now, t["timeout"], background=True):
                t["turn"][(a, b)] = turn + 1
                break
        else:
            self.traffic_skipped += 1  # every source was down or waiting: nothing sent this tick
        self.net.call_at(now + t["gap"], self._traffic_tick)

    def traffic_samples(self) -> list[TrafficSample]:
        self._drain_results()
        out = []
        for a, b, mode, t, keys in self._sent:
            if (a, b, mode, t) not in self._background:
                continue  # the checker's own pings
            res = self._outcome(a, keys[1], mode, t)
            ok = res is not None and res.received
            out.append(TrafficSample(t, a, b, mode, ok, res.rtt_s if ok else None))
        return out

    # ------------------------------------------------------------------ links

    async def link_down(self, a: str, b: str) -> bool:
        specs = self._specs_between(a, b)
        for i in specs:
            self.down.add(i)
            self._unmake(i, "link_down")
        await self.sleep(0)
        return bool(specs)

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        specs = self._specs_between(a, b)
        if not specs:
            if a not in self.net.nodes or b not in self.net.nodes:
                return False
            cls = link_class or "pipe"
            self.specs.append((a, b, cls, self._class_options(cls, None)))
            specs = [len(self.specs) - 1]
        for i in specs:
            self.down.discard(i)
            self._make(i)
        await self.sleep(0)
        return True

    def _class_options(self, cls: str, shaping: dict[str, float] | None) -> dict[str, Any]:
        """connect() options for a link of class ``cls`` with its shape's fields overridden by ``shaping``."""
        lc = resolve_class(cls)
        shape = LinkShape(**{**lc.shape.model_dump(), **shaping}) if shaping else lc.shape
        opts: dict[str, Any] = {"link_type": link_type_number(lc)}
        if shape != LinkShape():
            opts["shaper"] = shaper_factory(shape, loss_mode="retransmit")
            opts["sized"] = shape.rate_mbit is not None
        return opts

    async def link_change(self, a: str, b: str, link_class: str | None, shaping: dict[str, float] | None) -> None:
        specs = self._specs_between(a, b)
        if not specs:
            raise ValueError(f"no link between {a} and {b}")
        for i in specs:
            x, y, cls, _ = self.specs[i]
            new_cls = link_class or cls
            opts = self._class_options(new_cls, shaping)
            self.specs[i] = (x, y, new_cls, opts)
            lid = self.made.get(i)
            if lid is not None and self.planted_bug != "link_change_noop":
                self.net.reshape(lid, new_cls, opts.get("shaper"), bool(opts.get("sized")))
        await self.sleep(0)

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        side = {n: gi for gi, g in enumerate(groups) for n in g}
        out = []
        for i, (a, b, _, _) in enumerate(self.specs):
            if a in side and b in side and side[a] != side[b] and i not in self.cut and i not in self.down:
                out.append((a, b))
                if self.planted_bug != "ignore_partition":
                    self._unmake(i, "partition")
                self.cut.add(i)
        await self.sleep(0)
        return out

    async def heal(self) -> list[tuple[str, str]]:
        cut, self.cut = self.cut, set()
        out = [(self.specs[i][0], self.specs[i][1]) for i in sorted(cut)]
        for i in sorted(cut):
            self._make(i)
        await self.sleep(0)
        return out

    # ------------------------------------------------------------------ nodes

    async def kill(self, name: str) -> None:
        if name in self.paused:
            self.paused.pop(name)
        node = self.net.nodes[name]
        if not node.alive:
            return
        for i in self._specs_of(name):
            self.made.pop(i, None)
        self.net.kill(name)
        await self.sleep(0)

    async def restart(self, name: str) -> None:
        old = self.net.nodes[name]
        if old.alive:
            await self.kill(name)
        if self.planted_bug == "restart_keeps_state":
            self.net.revive(name)  # the planted defect: the old router, with everything it knew, comes back
            self.removed.discard(name)
        else:
            self._revive(name, old.router.identity)
        for i in self._specs_of(name):
            self._make(i)
        await self.sleep(0)

    def _revive(self, name: str, ident: Identity, spec: VariantSpec | None = None) -> None:
        """``name`` starts afresh with ``ident``, running ``spec`` (default: what it ran before, or the run's)."""
        now = self.net.now
        sn = self.net.add_node(name, ident, spec)
        r = sn.router
        self.removed.discard(name)
        self.tracker.root_changed(name, r.root.key, now)
        self.tracker.descending_changed(name, now)
        if self.recorder is not None:
            self.recorder.event(name, r.key, "node_started", now, listen=[], variant=str(sn.spec),
                                version=versions()["snekbed"])  # fmt: skip
        self.net.flush(sn)

    async def remove_node(self, name: str) -> bool:
        node = self.net.nodes.get(name)
        if node is None or not node.alive:
            return False
        await self.kill(name)
        self.removed.add(name)
        return True

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: VariantSpec | None = None) -> None:  # fmt: skip
        if name in self.net.nodes and self.net.nodes[name].alive:
            return
        if name in self.removed:  # a new node (the reference's AddNode): a key of its own, and no old link made again
            self.down.update(i for i in self._specs_of(name) if not set(self.specs[i][:2]) & set(peers))
        self._revive(name, self._identity(name, new=name in self.removed), variant)
        for p in peers:
            if p in self.net.nodes and not self._specs_between(name, p):
                self.specs.append((name, p, link_class, self._class_options(link_class, None)))
        for i in self._specs_of(name):
            self._make(i)
        await self.sleep(0)

    async def pause(self, name: str) -> None:
        node = self.net.nodes[name]
        if not node.alive or name in self.paused:
            return
        self.paused[name] = []
        if self.planted_bug == "pause_noop":
            return  # TEST ONLY: reported paused, and it runs on
        self.net.hold(name)
        gen = object()
        self._pause_gen[name] = gen
        self.net.call_at(self.net.now + PEER_TIMEOUT_S, lambda now: self._peers_time_out(name, gen))
        await self.sleep(0)

    def _peers_time_out(self, name: str, gen: object) -> None:
        """The paused node's peers drop it (their read deadline fires); the paused node does not know yet."""
        if name not in self.paused or self._pause_gen.get(name) is not gen:
            return
        for port, lid in self.net.drop_peerings(name, "read_timeout"):
            self.paused[name].append((port, self.net.now))
            for i, made in list(self.made.items()):
                if made == lid:
                    del self.made[i]

    async def resume(self, name: str) -> None:
        dropped = self.paused.pop(name, None)
        if dropped is None:
            return
        self.net.release(name, [port for port, _ in dropped])  # held frames arrive now, in order
        for i in self._specs_of(name):
            self._make(i)  # the dialers reconnect
        await self.sleep(0)

    async def adversary(self, name: str, drop: dict[str, float], peer: str | None) -> None:
        node = self.net.nodes[name]
        peer_key = self.net.nodes[peer].key if peer is not None else None
        node.router.set_adversary(drop, peer_key)
        await self.sleep(0)
