"""Prometheus metrics of one node, served (node.httplite) inside the node's nursery.

Each node has its own ``CollectorRegistry`` (so several nodes can share a
process in tests). Protocol state is read from the router on each scrape by a
custom collector; the only client-side metric objects are the ping round-trip
histogram and the process collector. Naming follows Prometheus practice: prefix
``snek_``, base units, ``_total`` counters, bounded labels (frame type, reason,
link class); keys appear only as labels of ``_info`` gauges. A labelled counter
is exported at 0 for each of its known label values from the first scrape (peer
disconnects and dropped frames: the reasons of :mod:`node.view`), so ``rate()``
and ``increase()`` count its first increment.

Every series, with its labels, unit and the question it answers, is in docs/metrics.md. The
collector builds a :class:`NodeSnapshot` per scrape and :class:`FamilySet` turns snapshots into
families, so an in-process network (orchestrator/tools/inproc_metrics.py) exports the same families with a
``node`` label.

The collector sees the node only through :class:`node.view.NodeView`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from contract.frames import FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE, frame_type_name
from contract.links import default_classes
from node.config import HostPort
from node.core.errors import HANDSHAKE_REASONS
from node.events import shaper_counts
from node.httplite import App, Request, Response, Route
from node.httplite import serve as serve_http
from node.view import DISCONNECT_REASONS, DROPS, NodeView

__all__ = ["LINK_CLASSES", "PING_BUCKETS_S", "FamilySet", "NodeCollector", "NodeMetrics", "NodeSnapshot",
           "add_router_counters", "build_app", "serve", "snapshot_of"]

PING_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
#: the link classes a node's links can have (node.config resolves a peering's class in the default table)
LINK_CLASSES: frozenset[str] = frozenset(default_classes())
_BOOTSTRAP_REJECT_REASONS = ("malformed", "bad_signature", "root_mismatch", "replay", "rate")
_TYPE_LABELS = (*FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE)


@dataclass(slots=True)
class NodeSnapshot:
    """Everything one node's ``snek_*`` families are made of, read at one scrape.

    A TCP node fills it from its :class:`~node.view.NodeView` (:func:`snapshot_of`); the in-process
    backend fills it from its simulated nodes, so both export the same families.
    """

    key: str
    name: str
    version: str
    variant: str
    variant_spec: str
    root_key: str
    root_sequence: int
    is_root: bool
    depth: int
    has_descending: bool
    table_size: int
    peers: Counter[str] = field(default_factory=Counter)  # link class -> up peerings
    link_classes: frozenset[str] = LINK_CLASSES  # the classes its links can have: their series start at 0
    events: Mapping[str, int] = field(default_factory=dict)  # router event kind -> count
    router: Mapping[tuple[Any, ...], int] = field(default_factory=dict)  # the router's own counters
    rx_frames: list[int] = field(default_factory=lambda: [0] * len(_TYPE_LABELS))  # by frame type slot
    tx_frames: list[int] = field(default_factory=lambda: [0] * len(_TYPE_LABELS))
    bytes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (received | sent, link class)
    shaped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (delayed | queue | loss, link class)
    drops: Counter[tuple[str, str]] = field(default_factory=Counter)  # (frame type name, reason), shell and router
    handshake_failures: Mapping[str, int] = field(default_factory=dict)
    disconnects: Counter[str] = field(default_factory=Counter)
    dial_failures: int = 0
    delivered_frames: int = 0
    queued: tuple[int, int] = (0, 0)  # protocol, traffic
    pings: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (mode, received | lost)
    lines_suppressed: Mapping[str, int] = field(default_factory=dict)
    events_unknown: Mapping[str, int] = field(default_factory=dict)
    internal_errors: int = 0


def snapshot_of(n: NodeView) -> NodeSnapshot:
    """A TCP node's snapshot: its router's state and counters, its peers' and the shell's counters."""
    c = n.counters
    rc = n.router_counters()
    st = n.state()
    root = st["root"]
    snap = NodeSnapshot(
        key=n.key.hex(), name=n.name or "", version=n.version, variant=str(st.get("variant", "")),
        variant_spec=str(st.get("variant_spec", st.get("variant", ""))), root_key=root["key"],
        root_sequence=root["sequence"], is_root=st["parent"] is None, depth=len(st["coords"]),
        has_descending=bool(st["descending"]), table_size=st["routing_table_size"], events=c.events, router=rc,
        handshake_failures=c.handshake_failures, dial_failures=c.dial_failures,
        delivered_frames=c.delivered_frames, pings=c.pings, lines_suppressed=n.lines_suppressed(),
        events_unknown=c.events_unknown, internal_errors=c.internal_errors,
    )  # fmt: skip
    snap.rx_frames = list(n.frame_stats.closed_frames[0])
    snap.tx_frames = list(n.frame_stats.closed_frames[1])
    snap.bytes = Counter(n.frame_stats.closed_bytes)
    snap.shaped = Counter(n.frame_stats.closed_shaper)
    queued_p = queued_t = 0
    for p in n.peers.values():
        cls = p.link.link_class
        snap.peers[cls] += 1
        for t in range(len(snap.rx_frames)):
            snap.rx_frames[t] += p.rx_frames[t]
            snap.tx_frames[t] += p.tx_frames[t]
        snap.bytes[("received", cls)] += sum(p.rx_bytes)
        snap.bytes[("sent", cls)] += sum(p.tx_bytes)
        for what, v in shaper_counts(p).items():
            snap.shaped[(what, cls)] += v
        queued_p += len(p.protocol)
        queued_t += len(p.traffic)
    snap.queued = (queued_p, queued_t)
    snap.drops = Counter(c.drops)
    snap.disconnects = Counter(c.disconnects)
    add_router_counters(snap, rc)
    return snap


def add_router_counters(snap: NodeSnapshot, rc: Mapping[tuple[Any, ...], int]) -> None:
    """Fold the router's drop and disconnect counters into ``snap``'s."""
    for key, v in rc.items():
        if key[0] == "frame_dropped":
            snap.drops[(frame_type_name(key[1]), key[2])] += v
        elif key[0] == "disconnect":
            snap.disconnects[key[1]] += v


class FamilySet:
    """The ``snek_*`` families of one or more nodes; ``extra`` label names (e.g. ``node``) go first."""

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.extra = extra
        self._fams: dict[str, Metric] = {}

    def _fam(self, kind: type[Metric], name: str, doc: str, labels: tuple[str, ...] = ()) -> Metric:
        fam = self._fams.get(name)
        if fam is None:
            fam = self._fams[name] = kind(name, doc, labels=[*self.extra, *labels])
        return fam

    def add(self, s: NodeSnapshot, extra: tuple[str, ...] = ()) -> None:
        """Add one node's samples (``extra``: its values of the extra labels)."""

        def gauge(name: str, doc: str, value: float, labels: tuple[str, ...] = (), values: tuple[str, ...] = ()) -> None:
            self._fam(GaugeMetricFamily, name, doc, labels).add_metric([*extra, *values], value)

        def counter(name: str, doc: str, value: float, labels: tuple[str, ...] = (), values: tuple[str, ...] = ()) -> None:
            self._fam(CounterMetricFamily, name, doc, labels).add_metric([*extra, *values], value)

        def info(name: str, doc: str, labels: dict[str, str]) -> None:
            self._fam(InfoMetricFamily, name, doc).add_metric([*extra], labels)  # family labels: the extra ones

        info("snek_node", "This node's identity and protocol variant.", {
            "key": s.key, "name": s.name, "version": s.version, "variant": s.variant, "variant_spec": s.variant_spec})
        for cls in sorted(s.link_classes | set(s.peers)):
            gauge("snek_peers", "Connected peers by link class.", s.peers.get(cls, 0), ("link_class",), (cls,))
        gauge("snek_is_root", "1 when this node is the root of its spanning tree.", 1 if s.is_root else 0)
        info("snek_root", "The current root's key (its sequence is snek_root_sequence).", {"key": s.root_key})
        gauge("snek_root_sequence", "Sequence number of the current root announcement.", s.root_sequence)
        gauge("snek_tree_depth", "Hops from the root (length of our coordinates).", s.depth)
        gauge("snek_descending_present", "1 when this node has a descending SNEK neighbour.",
              1 if s.has_descending else 0)
        gauge("snek_routing_table_entries", "Entries in the SNEK routing table.", s.table_size)
        counter("snek_root_changes", "Root changes seen.", s.events.get("root_changed", 0))
        counter("snek_parent_changes", "Parent changes.", s.events.get("parent_changed", 0))
        rc = s.router
        counter("snek_bootstraps_sent", "Bootstraps sent.", rc.get(("bootstrap_sent",), 0))
        counter("snek_bootstraps_accepted", "Bootstraps accepted (at any hop).", rc.get(("bootstrap_accepted",), 0))
        reasons = Counter({k[1]: v for k, v in rc.items() if k[0] == "bootstrap_rejected"})
        for reason in sorted(set(_BOOTSTRAP_REJECT_REASONS) | set(reasons)):
            counter("snek_bootstraps_rejected", "Bootstraps rejected, by reason.", reasons.get(reason, 0),
                    ("reason",), (reason,))
        for t, label in enumerate(_TYPE_LABELS):
            counter("snek_received_frames", "Frames received from peers, by type.", s.rx_frames[t], ("type",), (label,))
        for t, label in enumerate(_TYPE_LABELS):
            counter("snek_sent_frames", "Frames written to peers, by type.", s.tx_frames[t], ("type",), (label,))
        for direction in ("received", "sent"):
            for cls in sorted(s.link_classes | {c for d, c in s.bytes if d == direction}):
                counter(f"snek_{direction}_bytes", f"Frame bytes {direction}, by link class.",
                        s.bytes.get((direction, cls), 0), ("link_class",), (cls,))
        classes = sorted(s.link_classes | {cls for _, cls in s.shaped})
        for cls in classes:
            counter("snek_shaper_delayed_frames", "Frames the userspace link shaper delivered late (delay, jitter, "
                    "rate), by link class.", s.shaped.get(("delayed", cls), 0), ("link_class",), (cls,))
        for cls in classes:
            for reason in ("queue", "loss"):
                counter("snek_shaper_dropped_frames", "Frames the userspace link shaper dropped, by link class and "
                        "reason (queue: its queue was full; loss: the shape's loss).", s.shaped.get((reason, cls), 0),
                        ("link_class", "reason"), (cls, reason))
        for t, reason in sorted(DROPS | set(s.drops)):
            counter("snek_dropped_frames", "Frames dropped, by type and reason.", s.drops.get((t, reason), 0),
                    ("type", "reason"), (t, reason))
        for reason in sorted(set(HANDSHAKE_REASONS) | {"timeout", "eof", "io_error", "overload"}
                             | set(s.handshake_failures)):  # fmt: skip
            counter("snek_handshake_failures", "Failed handshakes, by reason.", s.handshake_failures.get(reason, 0),
                    ("reason",), (reason,))
        for reason in sorted(DISCONNECT_REASONS | set(s.disconnects)):
            counter("snek_peer_disconnects", "Peerings ended, by reason.", s.disconnects.get(reason, 0), ("reason",),
                    (reason,))
        counter("snek_dial_failures", "Outgoing connection attempts that failed.", s.dial_failures)
        counter("snek_delivered_frames", "Traffic frames delivered to this node's application.", s.delivered_frames)
        for queue, v in zip(("protocol", "traffic"), s.queued, strict=True):
            gauge("snek_queued_frames", "Frames waiting in peer queues.", v, ("queue",), (queue,))
        for mode in ("snek", "tree"):
            for result in ("received", "lost"):
                counter("snek_pings", "Pings finished, by mode and result.", s.pings.get((mode, result), 0),
                        ("mode", "result"), (mode, result))
        counter("snek_suppressed_event_lines", "Event lines held back by rate limits.",
                s.lines_suppressed.get("bootstrap_rejected", 0), ("event",), ("bootstrap_rejected",))
        for kind, v in sorted(s.events_unknown.items()):
            counter("snek_unknown_events", "Router events of a kind the event schema does not know (not logged).",
                    v, ("event",), (kind,))
        counter("snek_internal_errors", "Bugs caught at a peer boundary (should stay 0).", s.internal_errors)

    def collect(self) -> Iterator[Metric]:
        yield from self._fams.values()


class NodeCollector(Collector):
    """Reads the node's router and shell counters on every scrape."""

    def __init__(self, node: NodeView) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        fams = FamilySet()
        fams.add(snapshot_of(self.node))
        yield from fams.collect()


class NodeMetrics:
    """The node's registry: the collector above, the ping histogram and process metrics."""

    def __init__(self, node: NodeView, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(node))
        ProcessCollector(registry=self.registry)
        self.ping_rtt = Histogram(
            "snek_ping_rtt_seconds", "Ping round-trip time (§8).", ["mode"], buckets=PING_BUCKETS_S, registry=self.registry
        )
        for mode in ("snek", "tree"):
            self.ping_rtt.labels(mode=mode)

    def observe_ping(self, mode: str, rtt_s: float) -> None:
        self.ping_rtt.labels(mode=mode).observe(rtt_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Renders(Protocol):
    """Anything that renders a Prometheus exposition (a node's NodeMetrics, an in-process network's)."""

    def render(self) -> bytes: ...


def build_app(metrics: Renders) -> App:
    """The ``GET /metrics`` app."""

    async def scrape(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return App([Route("/metrics", scrape, methods=["GET"])])


async def serve(
    metrics: Renders,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /metrics`` on ``where`` until ``shutdown_trigger`` returns. Raises OSError."""
    await serve_http(build_app(metrics), where, shutdown_trigger, task_status=task_status)
