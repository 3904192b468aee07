"""Every in-process node's metrics on one endpoint: ``snekbed sim --clock real --metrics HOST:PORT``.

The same ``snek_*`` families a TCP node exports (node/metrics.py builds both from a
:class:`~node.metrics.NodeSnapshot`), every series with a ``node`` label, plus the process
metrics once. What an in-process node has no counterpart for stays at its pre-set zero
(dial failures, handshake failures, queued frames: an in-memory link has no socket and no
queue) or is absent (the ping round-trip histogram). Frames and bytes are counted by frame hooks
on the in-memory links (bytes are the encoded frame's length), so enabling this costs an
encode per frame.

The endpoint is served by hypercorn inside the simulation's own trio loop: a scrape reads the
network between two events, never while one is processed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from contract.frames import FRAME_TYPE_NAMES, FRAME_TYPE_SLOTS
from node.core import wire
from node.core.types import Frame
from node.metrics import LINK_CLASSES, FamilySet, NodeSnapshot, add_router_counters
from node.runtime import snekbed_version

from orchestrator.backends.inproc import InprocNetwork, SimNode

__all__ = ["InprocCounts", "InprocMetrics"]

_NTYPES = len(FRAME_TYPE_NAMES) + 1  # the named types, then "unknown"


class InprocCounts:
    """What the in-memory links and routers do, per node: fed by the network's hooks."""

    def __init__(self) -> None:
        self.events: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.rx: defaultdict[str, list[int]] = defaultdict(lambda: [0] * _NTYPES)
        self.tx: defaultdict[str, list[int]] = defaultdict(lambda: [0] * _NTYPES)
        self.bytes: defaultdict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        self.pings: defaultdict[str, Counter[tuple[str, str]]] = defaultdict(Counter)

    def on_event(self, node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        self.events[node.name][kind] += 1

    def on_frame(self, node: SimNode, direction: str, frame: Frame, link_class: str, now: float) -> None:
        slot = FRAME_TYPE_SLOTS[frame.type]
        (self.rx if direction == "received" else self.tx)[node.name][slot] += 1
        self.bytes[node.name][(direction, link_class)] += len(wire.encode_frame(frame))

    def ping(self, node: str, mode: str, received: bool) -> None:
        self.pings[node][(mode, "received" if received else "lost")] += 1


class _Collector(Collector):
    def __init__(self, net: InprocNetwork, counts: InprocCounts, version: str) -> None:
        self.net, self.counts, self.version = net, counts, version

    def collect(self) -> Iterator[Metric]:
        net, counts = self.net, self.counts
        fams = FamilySet(("node",))
        for name, sn in sorted(net.nodes.items()):
            if not sn.alive:
                continue
            st = sn.router.state(net.now)
            snap = NodeSnapshot(
                key=st["public_key"], name=name, version=self.version, variant=sn.spec.name,
                variant_spec=str(sn.spec), root_key=st["root"]["key"], root_sequence=st["root"]["sequence"],
                is_root=st["parent"] is None, depth=len(st["coords"]), has_descending=st["descending"] is not None,
                table_size=st["routing_table_size"], events=counts.events[name], router=sn.router.counters,
                pings=counts.pings[name], delivered_frames=0,
            )  # fmt: skip
            snap.link_classes = LINK_CLASSES | {end.link_class for end in sn.ends.values()}  # a topology's own too
            for end in sn.ends.values():
                peer = net.nodes.get(end.peer)
                if end.up and peer is not None and peer.alive:
                    snap.peers[end.link_class] += 1
            snap.rx_frames = list(counts.rx[name])
            snap.tx_frames = list(counts.tx[name])
            snap.bytes = Counter(counts.bytes[name])
            add_router_counters(snap, sn.router.counters)
            fams.add(snap, (name,))
        yield from fams.collect()


class InprocMetrics:
    """The registry of one in-process network: every node's families and the process collector.

    :meth:`attach` chains the counting hooks in front of whatever the network already calls.
    """

    def __init__(self, net: InprocNetwork) -> None:
        self.net = net
        self.counts = InprocCounts()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(net, self.counts, snekbed_version()))
        ProcessCollector(registry=self.registry)

    def attach(self) -> None:
        net, counts = self.net, self.counts
        on_event: Callable[..., None] | None = net.on_event
        on_frame: Callable[..., None] | None = net.on_frame

        def event(node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
            counts.on_event(node, kind, fields, now)
            if on_event is not None:
                on_event(node, kind, fields, now)

        def frame(node: SimNode, direction: str, f: Frame, link_class: str, now: float) -> None:
            counts.on_frame(node, direction, f, link_class, now)
            if on_frame is not None:
                on_frame(node, direction, f, link_class, now)

        net.on_event = event
        net.on_frame = frame

    def render(self) -> bytes:
        return generate_latest(self.registry)
