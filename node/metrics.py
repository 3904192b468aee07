"""Prometheus metrics of one node, served by hypercorn inside the node's nursery.

Each node has its own ``CollectorRegistry`` (so several nodes can share a
process in tests). Protocol state is read from the router on each scrape by a
custom collector; the only client-side metric objects are the ping round-trip
histogram and the process collector. Naming follows Prometheus practice: prefix
``snek_``, base units, ``_total`` counters, bounded labels (frame type, reason,
link class); keys appear only as labels of ``_info`` gauges.

======================================  =========  ==========================================
metric                                  type       labels
======================================  =========  ==========================================
snek_node_info                          info       key, name, version, variant, variant_spec
snek_peers                              gauge      link_class
snek_is_root                            gauge
snek_root_info                          info       key, sequence
snek_root_sequence                      gauge
snek_tree_depth                         gauge
snek_descending_info                    info       key ("" when none)
snek_routing_table_entries              gauge
snek_root_changes_total                 counter
snek_parent_changes_total               counter
snek_bootstraps_sent_total              counter
snek_bootstraps_accepted_total          counter
snek_bootstraps_rejected_total          counter    reason
snek_received_frames_total              counter    type
snek_sent_frames_total                  counter    type
snek_dropped_frames_total               counter    type, reason
snek_received_bytes_total               counter    link_class
snek_sent_bytes_total                   counter    link_class
snek_handshake_failures_total           counter    reason
snek_peer_disconnects_total             counter    reason
snek_dial_failures_total                counter
snek_delivered_frames_total             counter
snek_queued_frames                      gauge      queue (protocol, traffic)
snek_pings_total                        counter    mode, result
snek_ping_rtt_seconds                   histogram  mode
snek_suppressed_event_lines_total       counter    event
snek_unknown_events_total               counter    event (kinds the event schema does not know;
                                                   not written to the log, warned once per kind)
snek_internal_errors_total              counter
process_*                               (prometheus-client ProcessCollector)
======================================  =========  ==========================================

The collector sees the node only through :class:`node.view.NodeView`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

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
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contract.frames import FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE, frame_type_name
from contract.links import default_classes
from node.config import HostPort
from node.core.errors import HANDSHAKE_REASONS
from node.events import shaper_counts
from node.httpserve import serve_app
from node.view import NodeView

__all__ = ["PING_BUCKETS_S", "NodeCollector", "NodeMetrics", "build_app", "serve"]

PING_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_LINK_CLASSES = tuple(default_classes())
_BOOTSTRAP_REJECT_REASONS = ("malformed", "bad_signature", "root_mismatch", "replay")
_TYPE_LABELS = (*FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE)


class NodeCollector(Collector):
    """Reads the node's router and shell counters on every scrape."""

    def __init__(self, node: NodeView) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        n = self.node
        c = n.counters
        rc = n.router_counters()
        st = n.state()

        yield _info("snek_node", "This node's identity and protocol variant.", {
            "key": n.key.hex(), "name": n.name or "", "version": n.version,
            "variant": str(st.get("variant", "")), "variant_spec": str(st.get("variant_spec", st.get("variant", ""))),
        })  # fmt: skip

        peers = GaugeMetricFamily("snek_peers", "Connected peers by link class.", labels=["link_class"])
        by_class = Counter(p.link.link_class for p in n.peers.values())
        for cls in sorted(set(_LINK_CLASSES) | set(by_class)):
            peers.add_metric([cls], by_class.get(cls, 0))
        yield peers

        root = st["root"]
        yield _gauge("snek_is_root", "1 when this node is the root of its spanning tree.", 1 if st["parent"] is None else 0)
        yield _info("snek_root", "The current root's key (its sequence is snek_root_sequence).", {"key": root["key"]})
        yield _gauge("snek_root_sequence", "Sequence number of the current root announcement.", root["sequence"])
        yield _gauge("snek_tree_depth", "Hops from the root (length of our coordinates).", len(st["coords"]))
        desc = st["descending"]
        yield _gauge("snek_descending_present", "1 when this node has a descending SNEK neighbour.", 1 if desc else 0)
        yield _gauge("snek_routing_table_entries", "Entries in the SNEK routing table.", st["routing_table_size"])

        ev = c.events
        yield _counter("snek_root_changes", "Root changes seen.", ev.get("root_changed", 0))
        yield _counter("snek_parent_changes", "Parent changes.", ev.get("parent_changed", 0))
        yield _counter("snek_bootstraps_sent", "Bootstraps sent.", rc.get(("bootstrap_sent",), 0))
        yield _counter("snek_bootstraps_accepted", "Bootstraps accepted (at any hop).", rc.get(("bootstrap_accepted",), 0))
        rej = CounterMetricFamily("snek_bootstraps_rejected", "Bootstraps rejected, by reason.", labels=["reason"])
        reasons = Counter({k[1]: v for k, v in rc.items() if k[0] == "bootstrap_rejected"})
        for reason in sorted(set(_BOOTSTRAP_REJECT_REASONS) | set(reasons)):
            rej.add_metric([reason], reasons.get(reason, 0))
        yield rej

        rx, tx = list(n.frame_stats.closed_frames[0]), list(n.frame_stats.closed_frames[1])
        bytes_by = Counter(n.frame_stats.closed_bytes)
        queued_p = queued_t = 0
        for p in n.peers.values():
            for t in range(len(rx)):
                rx[t] += p.rx_frames[t]
                tx[t] += p.tx_frames[t]
            bytes_by[("received", p.link.link_class)] += sum(p.rx_bytes)
            bytes_by[("sent", p.link.link_class)] += sum(p.tx_bytes)
            queued_p += len(p.protocol)
            queued_t += len(p.traffic)
        for name, doc, values in (
            ("snek_received_frames", "Frames received from peers, by type.", rx),
            ("snek_sent_frames", "Frames written to peers, by type.", tx),
        ):
            m = CounterMetricFamily(name, doc, labels=["type"])
            for t, label in enumerate(_TYPE_LABELS):
                m.add_metric([label], values[t])
            yield m
        for direction in ("received", "sent"):
            m = CounterMetricFamily(f"snek_{direction}_bytes", f"Frame bytes {direction}, by link class.", labels=["link_class"])
            for cls in sorted(set(_LINK_CLASSES) | {c for d, c in bytes_by if d == direction}):
                m.add_metric([cls], bytes_by.get((direction, cls), 0))
            yield m

        shaped = Counter(n.frame_stats.closed_shaper)
        for p in n.peers.values():
            for what, v in shaper_counts(p).items():
                shaped[(what, p.link.link_class)] += v
        classes = sorted(set(_LINK_CLASSES) | {cls for _, cls in shaped})
        m = CounterMetricFamily("snek_shaper_delayed_frames", "Frames the userspace link shaper delivered late "
                                "(delay, jitter, rate), by link class.", labels=["link_class"])
        for cls in classes:
            m.add_metric([cls], shaped.get(("delayed", cls), 0))
        yield m
        m = CounterMetricFamily("snek_shaper_dropped_frames", "Frames the userspace link shaper dropped, by link "
                                "class and reason (queue: its queue was full; loss: the shape's loss).",
                                labels=["link_class", "reason"])
        for cls in classes:
            for reason in ("queue", "loss"):
                m.add_metric([cls, reason], shaped.get((reason, cls), 0))
        yield m

        drops = Counter(c.drops)
        for key, v in rc.items():
            if key[0] == "frame_dropped":
                t = key[1]
                drops[(frame_type_name(t), key[2])] += v
        m = CounterMetricFamily("snek_dropped_frames", "Frames dropped, by type and reason.", labels=["type", "reason"])
        for (t, reason), v in sorted(drops.items()):
            m.add_metric([t, reason], v)
        yield m

        m = CounterMetricFamily("snek_handshake_failures", "Failed handshakes, by reason.", labels=["reason"])
        hf = c.handshake_failures
        for reason in sorted(set(HANDSHAKE_REASONS) | {"timeout", "eof", "io_error", "overload"} | set(hf)):
            m.add_metric([reason], hf.get(reason, 0))
        yield m

        disc = Counter(c.disconnects)
        for key, v in rc.items():
            if key[0] == "disconnect":
                disc[key[1]] += v
        m = CounterMetricFamily("snek_peer_disconnects", "Peerings ended, by reason.", labels=["reason"])
        for reason, v in sorted(disc.items()):
            m.add_metric([reason], v)
        yield m

        yield _counter("snek_dial_failures", "Outgoing connection attempts that failed.", c.dial_failures)
        yield _counter("snek_delivered_frames", "Traffic frames delivered to this node's application.", c.delivered_frames)
        q = GaugeMetricFamily("snek_queued_frames", "Frames waiting in peer queues.", labels=["queue"])
        q.add_metric(["protocol"], queued_p)
        q.add_metric(["traffic"], queued_t)
        yield q
        m = CounterMetricFamily("snek_pings", "Pings finished, by mode and result.", labels=["mode", "result"])
        for mode in ("snek", "tree"):
            for result in ("received", "lost"):
                m.add_metric([mode, result], c.pings.get((mode, result), 0))
        yield m
        m = CounterMetricFamily("snek_suppressed_event_lines", "Event lines held back by rate limits.", labels=["event"])
        m.add_metric(["bootstrap_rejected"], n.lines_suppressed().get("bootstrap_rejected", 0))
        yield m
        m = CounterMetricFamily(
            "snek_unknown_events", "Router events of a kind the event schema does not know (not logged).", labels=["event"]
        )
        for kind, v in sorted(c.events_unknown.items()):
            m.add_metric([kind], v)
        yield m
        yield _counter("snek_internal_errors", "Bugs caught at a peer boundary (should stay 0).", c.internal_errors)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _info(name: str, doc: str, labels: dict[str, str]) -> InfoMetricFamily:
    m = InfoMetricFamily(name, doc, labels=list(labels))
    m.add_metric(list(labels), labels)
    return m


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


def build_app(metrics: NodeMetrics) -> Starlette:
    """The ``GET /metrics`` ASGI app."""

    async def scrape(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])


async def serve(
    metrics: NodeMetrics,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /metrics`` on ``where`` until ``shutdown_trigger`` returns. Raises OSError."""
    await serve_app(build_app(metrics), where, shutdown_trigger, task_status=task_status)
