"""Write an in-process run's directory in the run-dataset contract (docs/run-dataset.md).

``meta.json``, ``topology.json``, ``events/<node>.jsonl``, ``actions.jsonl`` and ``pings.jsonl``: the
in-process backend (:mod:`orchestrator.backends.inproc`) writes them through :class:`RunRecorder`, which
reads the network's nodes and links; every event line carries the common fields of ``contract.dataset``.
What is not tied to the in-process network (outcomes, run ids, versions) is :mod:`orchestrator.model.record`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import networkx as nx

from contract.dataset import SCHEMA_VERSION
from contract.frames import frame_type_name
from node.core import wire

from orchestrator.model.record import STATS_INTERVAL_S, drop_type_name, outcome_of, versions

if TYPE_CHECKING:
    from node.core.ping import PingResult

    from orchestrator.backends.inproc import InprocNetwork, SimNode

__all__ = ["RunRecorder"]


class RunRecorder:
    def __init__(self, root: Path, run_id: str, wall_offset_s: float, meta: dict[str, Any], topology: dict[str, Any]) -> None:
        self.root = root
        self.run_id = run_id
        self.wall_offset_s = wall_offset_s
        self.meta = meta
        self.topology = topology
        root.mkdir(parents=True, exist_ok=True)
        (root / "events").mkdir(exist_ok=True)
        self._files: dict[str, IO[str]] = {}
        self._actions = open(root / "actions.jsonl", "w", encoding="utf-8")
        self._pings = open(root / "pings.jsonl", "w", encoding="utf-8")
        # node -> (direction, frame type, class) -> [frames, bytes]
        self._stats: dict[str, dict[tuple[str, str, str], list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        self._stats_since = 0.0
        self._net: InprocNetwork | None = None
        self._closed = False

    # ------------------------------------------------------------------ lines

    def _line(self, f: IO[str], obj: dict[str, Any]) -> None:
        f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def event(self, name: str, key: bytes, kind: str, now: float, **fields: Any) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.root / "events" / f"{name}.jsonl", "w", encoding="utf-8")
        obj = {
            "v": SCHEMA_VERSION,
            "event": kind,
            "run_id": self.run_id,
            "node": key.hex(),
            "node_name": name,
            "mono_s": round(now, 6),
            "wall_ts": round(self.wall_offset_s + now, 6),
        }
        obj.update(fields)
        self._line(f, obj)

    def start(self, net: InprocNetwork) -> None:
        self._net = net
        (self.root / "topology.json").write_text(json.dumps(self.topology, indent=2))
        for name, sn in net.nodes.items():
            self.event(name, sn.key, "node_started", net.now, listen=[], variant=str(sn.spec),
                       version=versions()["snekbed"])
        self.action("up", None, {"nodes": len(net.nodes)}, net.now)
        net.call_at(net.now + STATS_INTERVAL_S, self._stats_tick)

    def on_event(self, node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        if kind in ("peer_up", "peer_down"):
            fields = dict(fields)
            lt = fields.pop("link_type", None)
            if kind == "peer_up":
                end = node.ends.get(fields["port"])
                fields["link_class"] = end.link_class if end is not None else str(lt)
        self.event(node.name, node.key, kind, now, **fields)

    def on_frame(self, node: SimNode, direction: str, frame: Any, link_class: str, now: float) -> None:
        cell = self._stats[node.name][(direction, frame_type_name(frame.type), link_class)]
        cell[0] += 1
        cell[1] += len(wire.encode_frame(frame))

    def _flush_stats(self, now: float) -> None:
        net = self._net
        interval = now - self._stats_since
        if interval <= 0 or net is None:
            return
        for name, cells in self._stats.items():
            key = net.nodes[name].key
            for (direction, ftype, cls), (frames, nbytes) in sorted(cells.items()):
                if frames:
                    self.event(
                        name, key, "frame_stats", now, interval_s=round(interval, 6), direction=direction,
                        frame_type=ftype, link_class=cls, frames=frames, bytes=nbytes,
                    )
        self._stats.clear()
        self._stats_since = now

    def _stats_tick(self, now: float) -> None:
        self._flush_stats(now)
        if self._net is not None:
            self._net.call_at(now + STATS_INTERVAL_S, self._stats_tick)

    def action(self, action: str, target: str | None, detail: dict[str, Any] | None, now: float) -> None:
        self._line(
            self._actions,
            {
                "run_id": self.run_id,
                "mono_s": round(now, 6),
                "wall_ts": round(self.wall_offset_s + now, 6),
                "action": action,
                "target": target,
                "detail": detail,
            },
        )

    def ping(
        self, a: str, b: str, akey: bytes, bkey: bytes, mode: str, sent: float,
        res: PingResult | None, shortest: int | None, graph: nx.Graph | None,
        link_classes: list[str] | None = None,
    ) -> None:
        """One pings.jsonl line. ``link_classes`` (along a shortest path, as it was when the ping was sent)
        may be given instead of ``graph``, for pings recorded after the topology moved on."""
        classes: list[str] = list(link_classes or [])
        if shortest and link_classes is None and graph is not None:
            path = nx.shortest_path(graph, a, b)
            for u, v in zip(path, path[1:]):
                classes.append(self._class_of(u, v))
        received = res is not None and res.received
        self._line(
            self._pings,
            {
                "run_id": self.run_id,
                "sender": a,
                "sender_key": akey.hex(),
                "target": b,
                "target_key": bkey.hex(),
                "mode": mode,
                "sent_mono_s": round(sent, 6),
                "sent_wall_ts": round(self.wall_offset_s + sent, 6),
                "received": received,
                "rtt_ms": round(res.rtt_s * 1000, 4) if received and res.rtt_s is not None else None,
                "hops": res.hops if received else None,
                "shortest_links": shortest,
                "link_classes": classes,
            },
        )

    def class_of(self, u: str, v: str) -> str:
        """The class of a live link u - v (``unknown`` when there is none)."""
        return self._class_of(u, v)

    def _class_of(self, u: str, v: str) -> str:
        net = self._net
        if net is not None:
            for end in net.nodes[u].ends.values():
                if end.peer == v:
                    return end.link_class
        return "unknown"

    def finish(self, net: InprocNetwork, observer: dict[str, Any]) -> None:
        """The run ended as planned: last stats and drop counters, ``down``, then :meth:`close` ("ok")."""
        try:
            self._finish_events(net)
            self.meta["observer"] = observer
        finally:
            self.close("ok")

    def abort(self, net: InprocNetwork | None, exc: BaseException) -> None:
        """The run failed or was interrupted: record what can be (stats so far, a ``down`` action saying
        why), then :meth:`close` with the outcome. Never raises over ``exc``: the caller re-raises it."""
        outcome = outcome_of(exc)
        try:
            if net is not None and not self._closed:
                self._flush_stats(net.now)
                self.action("down", None, {"outcome": outcome}, net.now)
        except Exception:  # noqa: S110 - the files are closed below whatever happened; exc is what matters
            pass
        finally:
            self.close(outcome, error=f"{exc.__class__.__name__}: {exc}".rstrip(": "))

    def close(self, outcome: str, *, error: str | None = None) -> None:
        """Write meta.json (with ``outcome``: ok, failed or interrupted, and ``error``) and close every
        file. Idempotent: the first call decides the outcome."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._net is not None:  # topology links the network could not make, and why (ports_full)
                self.meta["links_refused"] = list(self._net.links_refused)
            self.meta["outcome"] = outcome
            if error is not None:
                self.meta["error"] = error
            (self.root / "meta.json").write_text(json.dumps(self.meta, indent=2))
        finally:
            for f in (*self._files.values(), self._actions, self._pings):
                f.close()

    def _finish_events(self, net: InprocNetwork) -> None:
        self._flush_stats(net.now)
        for name, sn in net.nodes.items():
            drops: dict[tuple[str, str], int] = defaultdict(int)
            for key, n in sn.router.counters.items():
                if key[0] == "frame_dropped":
                    drops[(drop_type_name(key[1]), key[2])] += n
            for (ftype, reason), n in sorted(drops.items()):
                self.event(name, sn.key, "frame_dropped", net.now, frame_type=ftype, reason=reason, count=n)
            if sn.alive:
                self.event(name, sn.key, "node_stopping", net.now, reason="run_finished")
        self.action("down", None, None, net.now)
