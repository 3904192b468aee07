"""The in-process backend: N sans-IO routers in one trio process.

Links are in-memory, reliable and ordered, like the reference simulator's pipes. Frames, timer expiries and
observer ticks sit in one time-ordered heap; a single trio task pops them and feeds each router the event's own
timestamp as ``now``. trio's clock is kept in step (``trio.sleep_until``), so with a ``MockClock(autojump_threshold=0)``
protocol time runs as fast as the CPU allows, and with trio's normal clock it runs in real time. Ties are broken by
insertion order and every random draw comes from one seeded RNG, so a virtual-clock run is a pure function of
(topology, seed, options).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import trio
import trio.testing

from contract.frames import FRAME_TYPE_SLOTS, UNKNOWN_FRAME_SLOT
from node.core import wire
from node.core.attacks import make_strategy
from node.core.broadcast_records import KeyIndex
from node.core.crypto import Identity, derive_seed
from node.core.ping import PingResult
from node.core.recorder import DEFAULT_MAX_ENTRIES, RECEIVED, FlightRecorder
from node.core.router import MAX_PORTS, Encoded, Router, Timers
from node.core.types import Frame, LinkType
from node.core.variants import VariantSpec
from orchestrator.model.adversary_spec import NodeAdversary, adversaries_of
from orchestrator.model.topology import NodeSpec

__all__ = ["DEFAULT_BOOT_SPREAD_S", "InprocNetwork", "SimNode", "LinkEnd", "LINK_TYPES"]

LINK_TYPES = {t.name.lower(): int(t) for t in LinkType}
LINK_TYPES["lan"] = int(LinkType.MULTICAST)

# Event kinds in the heap
_FRAME, _TIMER, _CALL = 0, 1, 2

# A link-shaping hook: (now, frame size in bytes) -> arrival time, or None when lost.
Shaper = Callable[[float, int], "float | None"]


#: The boot spread the in-process runs use unless told otherwise (``snekbed sim``, ``chaos`` and ``up --backend
#: inproc``): each router boots a random time in [0, 1) s before the links come up, so the routers' 1 s SNEK
#: maintenance ticks, and with them their bootstraps, are not in lockstep (docs/performance.md, "A 10 000-node graph").
DEFAULT_BOOT_SPREAD_S = 1.0


@dataclass(slots=True)
class LinkEnd:
    """One direction of a link: frames written by ``node`` on ``port`` arrive at ``peer`` on ``peer_port``."""

    link_id: int
    node: str
    port: int
    peer: str
    peer_port: int
    link_class: str
    shaper: Shaper
    last_arrival: float = 0.0
    up: bool = True
    sized: bool = False  # the shaper needs real frame sizes (it has a rate)
    #: what made ``shaper`` (None: the network's default random delay): a twin of it can be measured (:meth:`InprocNetwork.twin_shaper`)
    factory: Callable[[random.Random], Shaper] | None = None


@dataclass(slots=True)
class SimNode:
    name: str
    router: Router
    spec: VariantSpec = field(default_factory=VariantSpec)  # the protocol variant and knobs it runs
    alive: bool = True
    timer_at: float = math.inf
    ends: dict[int, LinkEnd] = field(default_factory=dict)  # local port -> outgoing end
    ping_results: list[PingResult] = field(default_factory=list)  # finished pings, for whoever started them
    frames_out: int = 0  # frames its router has written onto its links (what a confirmation of silence reads)
    #: frames it has received from its links, by type slot (contract.frames; what an adversary's confirmation reads)
    frames_in: list[int] = field(default_factory=lambda: [0] * (UNKNOWN_FRAME_SLOT + 1))
    recorder: FlightRecorder | None = None  # its flight recorder (node.core.recorder), when the network keeps them

    @property
    def key(self) -> bytes:
        return self.router.key



def _idle_until(deadline: float) -> bool:
    """On trio's MockClock: no other task runnable or due before ``deadline`` and this one not cancelled, so
    sleeping until then would only jump the clock (``InprocNetwork.run_until``)."""
    stats = trio.lowlevel.current_statistics()
    return (stats.tasks_runnable == 0 and deadline < trio.current_time() + stats.seconds_to_next_deadline
            and trio.current_effective_deadline() != -math.inf)

class InprocNetwork:
    """Build with nodes and links, then ``await run_until(t)``; observe through callbacks.

    ``on_event(node, kind, fields, now)`` sees every router event; ``on_frame(node, direction, frame, link_class,
    now)`` sees every frame sent or received (only set it when you need it: it is on the hot path).
    """

    def __init__(
        self,
        nodes: Iterable[str],
        links: Iterable[tuple[str, str, str] | tuple[str, str, str, dict[str, Any]]],
        *,
        seed: int = 0,
        link_delay_ms: float = 1.0,
        key_seeds: dict[str, bytes] | None = None,
        shapers: dict[str, Callable[[random.Random], Shaper]] | None = None,
        wire_bytes: bool = False,
        detail_events: bool = False,
        timers: Timers | None = None,
        start: float = 0.0,
        variant: VariantSpec | None = None,
        variants: dict[str, VariantSpec] | None = None,
        boot_spread_s: float = 0.0,
        recorder_s: float = 0.0,
        recorder_max_entries: int = DEFAULT_MAX_ENTRIES,
        node_specs: Iterable[NodeSpec] = (),
    ) -> None:
        """``variant`` is every node's protocol variant and knobs (default: plain ``snek``), ``variants``
        overrides it per node name. Nodes whose variants cannot peer (different handshake capabilities,
        §7.4) are never linked: :meth:`connect` refuses them as a real handshake would.

        ``boot_spread_s``: each node boots a random time in ``[0, boot_spread_s)`` before ``start`` (drawn
        from the seed), so the routers' periodic timers (the 1 s SNEK maintenance that sends bootstraps,
        the 60 s broadcast) are not in lockstep. With 0 every router boots at ``start`` and every node's
        bootstraps leave in the same instant; on large graphs those synchronised rounds race each other's
        route refreshes and keep dropping bootstraps (docs/performance.md, "A 10 000-node graph").

        ``recorder_s`` > 0: every node keeps a flight recorder of that many seconds and at most
        ``recorder_max_entries`` entries (node.core.recorder), as a TCP node does; it records what its router was
        given and did, and changes nothing of the run.

        ``node_specs``: the topology's nodes; one with an ``adversary:`` (orchestrator.model.adversary_spec) is
        adversarial from its start: its router is made with it, as ``snekbed node --adversary`` makes it, a
        restart's too (a container restarts with its command line)."""
        self.seed = seed
        self.adversaries: dict[str, NodeAdversary] = adversaries_of(node_specs)
        self.recorder_s, self.recorder_max_entries = recorder_s, recorder_max_entries
        self.variant = variant or VariantSpec()
        self.variants = dict(variants or {})
        #: handshakes refused per node and reason (a TCP node counts these in snek_handshake_failures_total)
        self.handshake_failures: dict[str, dict[str, int]] = {}
        self.keys = KeyIndex()  # the routers' broadcast records: flat arrays on it (docs/performance.md)
        self.rng = random.Random(seed)
        self.link_delay_s = link_delay_ms / 1000.0
        self.wire_bytes = wire_bytes
        self.detail_events = detail_events
        self.timers = timers
        self.shapers = shapers or {}
        self.on_event: Callable[[SimNode, str, dict[str, Any], float], None] | None = None
        self.on_frame: Callable[[SimNode, str, Frame, str, float], None] | None = None
        #: ``on_wire(end, frame_bytes, now)``: every frame as the sender wrote it onto the link (for pcapng)
        self.on_wire: Callable[[LinkEnd, bytes, float], None] | None = None
        #: ``on_broken(link_id, node, reason)``: a router ended that (now down) peering for bad input; redial is the owner's
        self.on_broken: Callable[[int, str, str], None] | None = None
        #: (time, tie, kind, a, b): a frame (_FRAME, link end, frame), a timer (_TIMER, node, None), a call (_CALL, fn)
        self._heap: list[tuple[float, int, int, Any, Any]] = []
        self._tie = itertools.count()
        self.now = start
        self.nodes: dict[str, SimNode] = {}
        self.links: dict[int, tuple[LinkEnd, LinkEnd]] = {}
        self._link_ids = itertools.count(1)
        self.frames_delivered = 0
        self._clock_offset: float | None = None
        self.topology_version = 0  # bumped whenever a link or node comes or goes
        self.held: set[str] = set()  # nodes frozen by :meth:`hold` until :meth:`release`
        key_seeds = key_seeds or {}
        if boot_spread_s < 0:
            raise ValueError(f"boot_spread_s must be >= 0, not {boot_spread_s}")
        self.boot_spread_s = boot_spread_s
        boot_rng = random.Random(f"boot-{seed}")  # its own stream: the links' delays do not move with it
        for name in nodes:
            ident = Identity(key_seeds.get(name) or derive_seed(seed, name))
            booted = start - boot_rng.random() * boot_spread_s if boot_spread_s else start
            self.nodes[name] = self.make_node(name, ident, booted)
        self._pending_links = list(links)
        #: Topology links :meth:`start` could not make, with why (``ports_full``: a router has 253 ports).
        self.links_refused: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ building

    def spec_of(self, name: str) -> VariantSpec:
        return self.variants.get(name, self.variant)

    def make_node(self, name: str, ident: Identity, now: float, spec: VariantSpec | None = None) -> SimNode:
        """A node running ``spec`` (default: the network's variant for ``name``), not yet in :attr:`nodes`."""
        spec = spec or self.spec_of(name)
        self.variants[name] = spec
        r = Router(ident, now, detail_events=self.detail_events, broadcast_keys=self.keys,
                   **spec.router_options(self.timers))
        if (adv := self.adversaries.get(name)) is not None:  # node.runtime's order: the drop rates, the strategy
            if adv.drop is not None:
                r.set_adversary(*adv.drop)
            if adv.attack is not None:
                r.set_attack(make_strategy(*adv.attack, timers=r.t), now)
        rec = FlightRecorder(self.recorder_s, self.recorder_max_entries) if self.recorder_s > 0 else None
        return SimNode(name, r, spec, recorder=rec)

    def start(self) -> None:
        """Bring every node up and connect every link at the current time."""
        for node in self.nodes.values():
            self._flush(node)
        for link in self._pending_links:
            a, b, cls = link[:3]
            opts = link[3] if len(link) > 3 else {}
            if self.connect(a, b, cls, **opts) is None:
                self.links_refused.append(self._refusal(a, b, cls))
        self._pending_links = []

    def _refusal(self, a: str, b: str, link_class: str) -> dict[str, Any]:
        """Why a topology link was not made: which end had no free port (§3.6: 253 per router), or a dead node."""
        na, nb = self.nodes[a], self.nodes[b]
        if not (na.alive and nb.alive):
            return {"a": a, "b": b, "class": link_class, "reason": "node_down",
                    "nodes": [n.name for n in (na, nb) if not n.alive]}
        why = na.spec.peering_refusal(nb.spec)
        if why is not None:
            return {"a": a, "b": b, "class": link_class, "reason": "bad_capabilities", "nodes": [a, b], "detail": why}
        full = [n.name for n in (na, nb) if len(n.router.peers) >= MAX_PORTS]
        return {"a": a, "b": b, "class": link_class, "reason": "ports_full", "nodes": full}

    def _default_shaper(self, end_rng: random.Random) -> Shaper:
        mean = self.link_delay_s

        def shape(now: float, nbytes: int) -> float:  # uniform in [0.5, 1.5] x the mean
            return now + mean * (0.5 + end_rng.random())

        return shape

    def _shaper_for(self, link_class: str, factory: Callable[[random.Random], Shaper] | None) -> Shaper:
        end_rng = random.Random(self.rng.getrandbits(64))
        factory = factory or self.shapers.get(link_class)
        return factory(end_rng) if factory is not None else self._default_shaper(end_rng)

    def twin_shaper(self, end: LinkEnd, rng: random.Random) -> Shaper:
        """A fresh shaper made as ``end``'s was (its factory, or the default delay) on ``rng``: measuring it tells
        what shape the link has without touching the link's own shaper, its RNG or its queue."""
        return end.factory(rng) if end.factory is not None else self._default_shaper(rng)

    def connect(
        self,
        a: str,
        b: str,
        link_class: str = "pipe",
        *,
        link_type: int | None = None,
        shaper: Callable[[random.Random], Shaper] | None = None,
        sized: bool = False,
    ) -> int | None:
        """Peer ``a`` and ``b`` now. Returns the link id, or None when either is out of ports or dead.

        ``shaper`` (a factory taking the end's RNG, e.g. ``netem.userspace.shaper_factory(shape)``)
        replaces the default random delay; ``sized`` feeds it real encoded frame sizes (links with a rate).
        """
        na, nb = self.nodes[a], self.nodes[b]
        if not (na.alive and nb.alive):
            return None
        if na.spec.peering_refusal(nb.spec) is not None:
            for n in (na, nb):
                counts = self.handshake_failures.setdefault(n.name, {})
                counts["bad_capabilities"] = counts.get("bad_capabilities", 0) + 1
                if self.on_event is not None:
                    other = nb if n is na else na
                    self.on_event(n, "handshake_failed", {"reason": "bad_capabilities", "remote": other.name}, self.now)
            return None
        lt = link_type if link_type is not None else LINK_TYPES.get(link_class, int(LinkType.REMOTE))
        pa = na.router.add_peer(nb.key, lt, self.now)
        if pa is None:
            return None
        pb = nb.router.add_peer(na.key, lt, self.now)
        if pb is None:
            na.router.remove_peer(pa, self.now, "ports_full")
            self._flush(na)
            return None
        lid = next(self._link_ids)
        made = shaper or self.shapers.get(link_class)
        ea = LinkEnd(lid, a, pa, b, pb, link_class, self._shaper_for(link_class, shaper), self.now, sized=sized,
                     factory=made)  # fmt: skip
        eb = LinkEnd(lid, b, pb, a, pa, link_class, self._shaper_for(link_class, shaper), self.now, sized=sized,
                     factory=made)  # fmt: skip
        na.ends[pa], nb.ends[pb] = ea, eb
        self.links[lid] = (ea, eb)
        self.topology_version += 1
        self._flush(na)
        self._flush(nb)
        return lid

    def disconnect(self, link_id: int, reason: str = "link_down", *, frozen: str | None = None) -> int | None:
        """Take the link down; each live end's router is told ``reason``, except the ``frozen`` node's (a held node
        learns of it on :meth:`release`). Returns the frozen node's port on the link, if it had one."""
        ends = self.links.pop(link_id, None)
        if ends is None:
            return None
        self.topology_version += 1
        frozen_port = None
        for end in ends:
            end.up = False
            node = self.nodes[end.node]
            node.ends.pop(end.port, None)
            if end.node == frozen:
                frozen_port = end.port
            elif node.alive:
                node.router.remove_peer(end.port, self.now, reason)
                self._flush(node)
        return frozen_port

    def kill(self, name: str) -> None:
        """The node stops dead: its peers see the streams close (EOF)."""
        node = self.nodes[name]
        node.alive = False
        self.topology_version += 1
        for end in list(node.ends.values()):
            self.disconnect(end.link_id, "eof")
        node.timer_at = math.inf

    def links_between(self, a: str, b: str) -> list[int]:
        return [lid for lid, (ea, _) in self.links.items() if {ea.node, ea.peer} == {a, b}]

    def edges(self) -> Iterator[tuple[str, str]]:
        """The two ends' node names of every link that is up, in the order the links were made."""
        for ea, _ in self.links.values():
            yield ea.node, ea.peer

    def parent_of(self, name: str) -> str | None:
        """The name of the node ``name``'s router names as parent (None for a root, or a parent port now gone)."""
        node = self.nodes[name]
        port = node.router.parent
        end = node.ends.get(port) if port is not None else None
        return end.peer if end is not None else None

    # ------------------------------------------------------------------ measured (what a fault's confirmation reads)

    def answers(self, name: str) -> bool:
        """Whether ``name``'s router runs (alive and not held): a frozen or dead node answers nothing."""
        node = self.nodes.get(name)
        return node is not None and node.alive and name not in self.held

    def peer_keys(self, name: str) -> frozenset[bytes]:
        """The keys ``name``'s router lists as up peers (its control plane, not the links' bookkeeping)."""
        return frozenset(p.key for p in self.nodes[name].router.peers.values() if p.up)

    def carries(self, a: str, b: str) -> bool:
        """Whether a frame ``a`` writes now onto a link to ``b`` arrives: an up link end from ``a`` to ``b``, whose
        receiving router runs and whose sender's router names ``b`` on that port."""
        src = self.nodes.get(a)
        if src is None or not self.answers(b):
            return False
        peers = src.router.peers
        return any(e.up and e.peer == b and e.port in peers and peers[e.port].up for e in src.ends.values())

    def ends_between(self, a: str, b: str) -> list[LinkEnd]:
        """The up link ends from ``a`` to ``b``."""
        node = self.nodes.get(a)
        return [e for e in node.ends.values() if e.up and e.peer == b] if node is not None else []

    # ------------------------------------------------------------------ faults (what the chaos backend drives)

    def flush(self, node: SimNode) -> None:
        """Move ``node``'s router outputs out now (after a call into its router from outside the event loop)."""
        self._flush(node)

    def add_node(self, name: str, ident: Identity, spec: VariantSpec | None = None) -> SimNode:
        """``name`` starts afresh now with ``ident`` and ``spec``, unlinked; its first outputs wait for :meth:`flush`."""
        node = self.make_node(name, ident, self.now, spec)
        self.nodes[name] = node
        self.topology_version += 1
        return node

    def revive(self, name: str) -> None:
        """The dead ``name`` comes back with its old router and all it knew (a defect the chaos tests plant)."""
        self.nodes[name].alive = True
        self.topology_version += 1

    def start_ping(self, a: str, b: str, mode: str, timeout_s: float) -> bool:
        """``a`` pings ``b`` now in ``mode`` (``tree`` aims at ``b``'s coordinates as they are now); False when
        ``a`` already waits on ``b`` (one outstanding ping per target, §8). The result lands in ``a``'s
        ``ping_results``."""
        src, dst = self.nodes[a], self.nodes[b]
        coords = dst.router.coords if mode == "tree" else None
        if not src.router.ping.start(dst.key, self.now, mode=mode, coords=coords, timeout_s=timeout_s):
            return False
        self._flush(src)
        return True

    def reshape(self, link_id: int, link_class: str, shaper: Callable[[random.Random], Shaper] | None = None,
                sized: bool = False) -> None:  # fmt: skip
        """Replace both ends' shapers of a live link (``shaper`` as for :meth:`connect`; None: the default
        random delay) and its class, mid-run. Frames already on the link keep their arrival times."""
        rng = random.Random(self.rng.getrandbits(64))
        for end in self.links[link_id]:
            end_rng = random.Random(rng.getrandbits(64))
            end.shaper = shaper(end_rng) if shaper is not None else self._default_shaper(end_rng)
            end.factory = shaper
            end.sized = sized
            end.link_class = link_class

    def hold(self, name: str) -> None:
        """Freeze ``name`` (a paused process): its timer is disarmed, and every frame on its way to it waits
        (at time +inf, in order) until :meth:`release`; frames sent to it later queue behind them, as a TCP
        stream buffers them. Its peers notice nothing until they time it out (:meth:`drop_peerings`)."""
        self.nodes[name].timer_at = math.inf  # the pending timer entry goes stale; release re-arms it
        self.held.add(name)
        heap = self._heap
        changed = False
        for k, (t, tie, kind, end, data) in enumerate(heap):
            if kind == _FRAME and end.peer == name and t != math.inf:
                heap[k] = (math.inf, tie, kind, end, data)
                changed = True
        if changed:
            heapq.heapify(heap)
        for node in self.nodes.values():
            for end in node.ends.values():
                if end.peer == name:
                    end.last_arrival = math.inf  # later frames queue behind the held ones

    def drop_peerings(self, name: str, reason: str = "read_timeout") -> list[tuple[int, int]]:
        """Every peer of the held node ``name`` drops it (their read deadline fired): its links go, the peers'
        routers are told ``reason``; ``name``'s own router is told nothing (it is frozen). Returns ``(port of
        name, link id)`` of each link dropped, for :meth:`release` to tell ``name`` later."""
        dropped: list[tuple[int, int]] = []
        for end in list(self.nodes[name].ends.values()):
            port = self.disconnect(end.link_id, reason, frozen=name)
            if port is not None:
                dropped.append((port, end.link_id))
        return dropped

    def release(self, name: str, dropped_ports: Iterable[int] = ()) -> None:
        """Thaw the held node ``name``: the frames held for it arrive now, in the order they were sent; it
        learns that its peers dropped the peerings on ``dropped_ports`` (EOF) and its timer is re-armed."""
        now = self.now
        self.held.discard(name)
        heap = self._heap
        held = sorted((tie, end, data) for t, tie, kind, end, data in heap
                      if kind == _FRAME and t == math.inf and end.peer == name)  # fmt: skip
        if held:
            heap[:] = [e for e in heap if not (e[2] == _FRAME and e[0] == math.inf and e[3].peer == name)]
            heapq.heapify(heap)
            for tie, end, data in held:
                heapq.heappush(heap, (now, tie, _FRAME, end, data))
        for node in self.nodes.values():
            for end in node.ends.values():
                if end.peer == name and end.last_arrival == math.inf:
                    end.last_arrival = now
        node = self.nodes[name]
        for port in dropped_ports:
            node.router.remove_peer(port, now, "eof")
        node.timer_at = math.inf
        self._flush(node)

    # ------------------------------------------------------------------ running

    def call_at(self, t: float, fn: Callable[[float], None]) -> None:
        """Run ``fn(now)`` at protocol time ``t`` (observer ticks, chaos steps)."""
        heapq.heappush(self._heap, (t, next(self._tie), _CALL, fn, None))

    @property
    def queued_events(self) -> int:
        """Events waiting: frames in flight, the nodes' next timers and observer calls (the progress line)."""
        return len(self._heap)

    def next_event_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    async def run_until(self, t_end: float, *, stop: Callable[[], bool] | None = None, quantum_s: float = 0.0005) -> None:
        """Process every event up to ``t_end`` (or until ``stop()`` is true after an event).

        Events less than ``quantum_s`` apart run without yielding. On trio's MockClock a gap is crossed without a
        scheduling round when no other task is runnable or due before the next event: sleeping would only have
        jumped the clock there. The clock is set to the network's time before another task runs and a cancel
        still lands at the next gap: the same runs (trace hashes), in about half the time (docs/performance.md)."""
        heap = self._heap
        if self._clock_offset is None:
            # protocol time 0 = trio time at the first run (MockClock starts at 0; the real clock does not)
            self._clock_offset = trio.current_time() - self.now
        offset = self._clock_offset
        synced = trio.current_time() - offset
        clock = trio.lowlevel.current_clock()
        mock = clock if isinstance(clock, trio.testing.MockClock) else None
        while heap and heap[0][0] <= t_end:
            t, _, kind, item, frame = heapq.heappop(heap)
            if t > synced + quantum_s:
                if mock is None or not _idle_until(t + offset):
                    if mock is not None and synced + offset > trio.current_time():
                        mock.jump(synced + offset - trio.current_time())  # the clock at the network's time first
                    await trio.sleep_until(t + offset)
                synced = t  # crossed: asleep, or on the MockClock with nothing due before t, without a round
            self.now = t
            if kind == _FRAME:
                end = item
                if not end.up:
                    continue
                node = self.nodes[end.peer]
                if not node.alive:
                    continue
                if self.on_frame is not None:
                    self.on_frame(node, "received", wire.decode_frame(frame) if self.wire_bytes else frame,
                                  end.link_class, t)  # fmt: skip
                if node.recorder is not None:
                    if self.wire_bytes:
                        node.recorder.received(end.peer_port, [(frame[5], frame)], t)
                    else:
                        node.recorder.frame(RECEIVED, end.peer_port, frame, t)
                if self.wire_bytes:  # the bytes take the TCP node's path, transit fast path included
                    node.frames_in[FRAME_TYPE_SLOTS[frame[5]]] += 1
                    node.router.bytes_received(end.peer_port, [(frame[5], frame)], t)
                else:
                    node.frames_in[FRAME_TYPE_SLOTS[frame.type]] += 1
                    node.router.frame_received(end.peer_port, frame, t)
                self.frames_delivered += 1
                self._flush(node)
            elif kind == _TIMER:
                node = item
                if not node.alive or node.timer_at != t:
                    continue  # stale
                node.timer_at = math.inf
                node.router.handle_timer(t)
                self._flush(node)
            else:
                item(t)
                # only observer/chaos callbacks change what ``stop`` looks at: test it after them alone
                if stop is not None and stop():
                    break
        if mock is not None and synced + offset > trio.current_time():
            mock.jump(synced + offset - trio.current_time())  # the tasks that run next see the network's time
        if t_end > self.now and t_end != math.inf and not (stop is not None and stop()):
            await trio.sleep_until(max(t_end + offset, trio.current_time()))
            self.now = t_end

    def _flush(self, node: SimNode) -> None:
        """Move a router's outputs (one :meth:`Router.drain`) onto links, observers and its timer."""
        out = node.router.drain()
        now = self.now
        # looked up once per drain, not once per frame (the simulator's hottest Python loop)
        ends, wire_bytes, on_frame, on_wire = node.ends, self.wire_bytes, self.on_frame, self.on_wire
        heap, tie, push = self._heap, self._tie, heapq.heappush
        rec = node.recorder
        if rec is not None:
            rec.outputs(out, now, lambda port: (e := ends.get(port)) is None or not e.up)
        last: Any = None  # a flood sends one frame object on every port: encoded once per drain
        last_data: Any = None
        for port, item in out.sends:
            end = ends.get(port)
            if end is None or not end.up:
                continue
            data: Any = item
            size = 0
            if wire_bytes:
                if item is not last:
                    last, last_data = item, item.data if type(item) is Encoded else wire.encode_frame(item)
                data = last_data
                size = len(data)
            elif end.sized:
                if item is not last:  # no Encoded without wire bytes: bytes_received is unused
                    last, last_data = item, wire.encode_frame(item)
                size = len(last_data)
            if on_frame is not None:
                on_frame(node, "sent", wire.decode_frame(data) if type(item) is Encoded else item, end.link_class, now)
            if on_wire is not None:
                raw = data if type(data) is bytes else item.data if type(item) is Encoded else wire.encode_frame(item)
                on_wire(end, raw, now)
            arrival = end.shaper(now, size or 64)
            if arrival is None:
                continue  # lost on the link
            # A peering is a reliable ordered stream: never overtake the previous frame.
            if arrival < end.last_arrival:
                arrival = end.last_arrival
            end.last_arrival = arrival
            push(heap, (arrival, next(tie), _FRAME, end, data))
        node.frames_out += len(out.sends)
        if out.events and self.on_event is not None:
            for kind, fields in out.events:
                self.on_event(node, kind, fields, now)
        if out.ping_results:
            node.ping_results.extend(out.ping_results)
        for port, reason in out.disconnects:  # after the events: the disconnect's own events come later
            end = node.ends.get(port)
            if end is not None:
                self.disconnect(end.link_id, reason)
                if self.on_broken is not None:
                    self.on_broken(end.link_id, node.name, reason)
        # a router that was frozen (a paused node) may owe timers from the past: they run now, time never goes back
        d = out.next_deadline if out.next_deadline > now else now
        if d < node.timer_at:
            node.timer_at = d
            heapq.heappush(self._heap, (d, next(self._tie), _TIMER, node, None))
