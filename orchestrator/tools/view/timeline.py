"""Replay: rebuild every node's state at any instant of a recorded run from its files.

A run directory (docs/run-dataset.md) is enough: ``node_started`` resets a node (its own root,
no parent, no descending neighbour), ``root_changed`` / ``parent_changed`` /
``descending_changed`` / ``coords_changed`` move it, ``node_stopping`` and the orchestrator's
``kill`` / ``kill_root`` actions end it, ``pause`` / ``resume`` freeze and thaw it, and the
topology actions (``link_down`` / ``link_up``, ``partition`` / ``heal``, ``join``) cut, restore
and add links and nodes. Times are the run's ``mono_s`` (one clock for events and actions).

:meth:`Timeline.at` answers with the same frame document the live view pushes
(``orchestrator.tools.view.frames``); :meth:`Timeline.series` is the verdict over the whole run,
computed incrementally (only the changed node is re-checked, the whole graph only when the
live topology changes), so a 250-node run with 50 000 event lines loads in about a second.

A chaos run whose step failed also has flight-recorder dumps (``recorder/``): :attr:`Timeline.dumps`
(``orchestrator.tools.view.recorder``) places them on the run's clock, and the summary lists them.

A broken ``meta.json`` or ``topology.json`` raises :class:`TimelineError` naming the file and
field; a bad event line is skipped, counted and reported with its file, line and reason
(``contract.dataset.validate_event``, the pipeline's own check), never silently dropped.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from contract.dataset import validate_event

from orchestrator.tools.view.faults import NODE_DOWN, Fault, FaultLog, pair
from orchestrator.tools.view.frames import GraphInfo, NodeState, frame_doc, link_id
from orchestrator.tools.view.motion import Motion, read_motion
from orchestrator.tools.view.recorder import Dump, read_dumps

__all__ = ["Timeline", "TimelineError", "Fault", "ROUTE_WINDOW_S"]  # Fault: re-exported from .faults

ROUTE_WINDOW_S = 10.0  # snek's entry expiry: a bootstrap accepted this recently still backs a routing entry
MAX_REPORTED = 20  # skipped lines listed by name; the rest are counted


class TimelineError(Exception):
    """A run directory cannot be replayed; the message names the file, line and field."""


@dataclass
class _Field:
    """One node field's history: values[i] holds from times[i] on."""

    times: list[float] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def set(self, t: float, value: Any) -> None:
        if self.values and self.values[-1] == value:
            return
        if self.times and self.times[-1] == t:
            self.values[-1] = value
            return
        self.times.append(t)
        self.values.append(value)

    def at(self, t: float, default: Any = None) -> Any:
        i = bisect.bisect_right(self.times, t)
        return self.values[i - 1] if i else default


FIELDS = ("status", "root", "parent", "descending", "coords")


class Timeline:
    """Everything the replay page asks of one run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta = self._json("meta.json")
        topo = self._json("topology.json")
        self.run_id = str(self.meta.get("run_id") or path.name)
        keys = self.meta.get("nodes")
        if not isinstance(keys, dict):
            raise TimelineError(f"{path / 'meta.json'}: field 'nodes': must map node names to keys")
        try:
            self.graph = GraphInfo.from_topology_doc(topo, keys)
        except (KeyError, TypeError) as exc:
            raise TimelineError(f"{path / 'topology.json'}: field {exc}: every node needs a name and every link "
                                "a and b") from None
        self.skipped: list[str] = []
        self.skipped_count = 0
        self._fields: dict[str, dict[str, _Field]] = {n: {f: _Field() for f in FIELDS} for n in self.graph.nodes}
        self._peer_log: dict[str, list[tuple[float, str, int, str | None, str | None]]] = defaultdict(list)
        self._routes: dict[str, list[tuple[float, str, int]]] = defaultdict(list)
        self._counters: dict[str, list[tuple[float, str, int]]] = defaultdict(list)
        self.faults: list[Fault] = []
        self.pings: list[dict[str, Any]] = []
        self._topo_times: list[float] = []
        self._topo_states: list[tuple[frozenset[frozenset[str]], frozenset[frozenset[str]]]] = []
        self._load()
        # nodes that move (mobility.jsonl): positions and radio links over time; None for a run without
        self.motion: Motion | None = read_motion(path, topo, self.meta, self.run_id, self._skip)
        span = self.motion.span() if self.motion is not None else None
        if span is not None:
            self.t_end = max(self.t_end, span[1])
        self.dumps: list[Dump] = read_dumps(path, self._skip)
        self._series = self._compute_series()

    @classmethod
    def from_run(cls, path: str | Path) -> Timeline:
        """Read a run directory. Raises TimelineError."""
        p = Path(path)
        if not p.is_dir():
            raise TimelineError(f"{p}: not a run directory")
        return cls(p)

    # ------------------------------------------------------------ reading

    def _json(self, name: str) -> dict[str, Any]:
        file = self.path / name
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TimelineError(f"{file}: missing (a run directory has meta.json, topology.json, events/, "
                                "actions.jsonl, pings.jsonl)") from None
        except (OSError, ValueError) as exc:
            raise TimelineError(f"{file}: cannot read: {exc}") from None
        if not isinstance(doc, dict):
            raise TimelineError(f"{file}: must hold a JSON object")
        return doc

    def _skip(self, file: Path, line_no: int, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_REPORTED:
            self.skipped.append(f"{file}:{line_no}: {why}")

    def _lines(self, file: Path) -> Iterable[tuple[int, str]]:
        try:
            with open(file, encoding="utf-8", errors="replace") as handle:
                for i, line in enumerate(handle, 1):
                    if line.strip():
                        yield i, line
        except FileNotFoundError:
            return

    def _load(self) -> None:
        changes: list[tuple[float, int, str, str, Any]] = []  # (t, order, node, field, value)
        order = 0
        names = self.graph.names_by_key
        events_dir = self.path / "events"
        for file in sorted(events_dir.glob("*.jsonl")) if events_dir.is_dir() else []:
            for line_no, line in self._lines(file):
                bad = validate_event(line, self.run_id)
                if bad is not None:
                    self._skip(file, line_no, f"{bad[0]}: {bad[1]}")
                    continue
                ev = json.loads(line)
                name = ev.get("node_name") if ev.get("node_name") in self._fields else names.get(ev["node"])
                if name is None:
                    self._skip(file, line_no, f"field 'node': {ev['node'][:16]}... is not a node of this run")
                    continue
                t = float(ev["mono_s"])
                kind = ev["event"]
                order += 1
                if kind == "node_started":
                    for f, v in (("status", "up"), ("root", (ev["node"], None)), ("parent", None),
                                 ("descending", None), ("coords", ())):
                        changes.append((t, order, name, f, v))
                    self._peer_log[name].append((t, "reset", 0, None, None))
                elif kind == "node_stopping":
                    changes.append((t, order, name, "status", "dead"))
                elif kind == "root_changed":
                    changes.append((t, order, name, "root", (ev["root"], ev["root_seq"])))
                elif kind == "parent_changed":
                    changes.append((t, order, name, "parent", ev["parent"]))
                elif kind == "descending_changed":
                    changes.append((t, order, name, "descending", ev["descending"]))
                elif kind == "coords_changed":
                    changes.append((t, order, name, "coords", tuple(ev["coords"])))
                elif kind == "peer_up":
                    self._peer_log[name].append((t, "up", ev["port"], ev["peer"], ev["link_class"]))
                elif kind == "peer_down":
                    self._peer_log[name].append((t, "down", ev["port"], None, ev["reason"]))
                elif kind == "bootstrap_accepted":
                    self._routes[name].append((t, ev["origin"], ev["from_port"]))
                elif kind == "frame_stats":
                    self._counters[name].append((t, f"{ev['direction']}_frames:{ev['frame_type']}", ev["frames"]))
                    self._counters[name].append((t, f"{ev['direction']}_bytes", ev["bytes"]))
                elif kind in ("bootstrap_sent", "bootstrap_rejected"):
                    self._counters[name].append((t, kind, 1))
                elif kind == "frame_dropped":
                    self._counters[name].append((t, f"dropped:{ev['reason']}", ev["count"]))
                elif kind == "ping_result":
                    self._counters[name].append((t, f"pings_{'received' if ev['received'] else 'lost'}", 1))
        self._load_actions(changes, order)
        changes.sort(key=lambda c: (c[0], c[1]))
        for t, _, name, f, value in changes:
            self._fields[name][f].set(t, value)
        for log in (*self._peer_log.values(), *self._routes.values(), *self._counters.values()):
            log.sort(key=lambda x: x[0])
        for file, key in ((self.path / "pings.jsonl", "sent_mono_s"),):
            for line_no, line in self._lines(file):
                try:
                    p = json.loads(line)
                    self.pings.append({"t": float(p[key]), "sender": p["sender"], "target": p["target"],
                                       "received": bool(p["received"]), "rtt_ms": p.get("rtt_ms")})
                except (ValueError, KeyError, TypeError) as exc:
                    self._skip(file, line_no, f"not a ping record ({exc})")
        self.pings.sort(key=lambda p: p["t"])
        times = [v for fs in self._fields.values() for v in fs["status"].times]
        times += [f.t for f in self.faults] + [p["t"] for p in self.pings]
        self.t_start = min(times, default=0.0)
        ends = [fs[f].times[-1] for fs in self._fields.values() for f in FIELDS if fs[f].times]
        self.t_end = max([self.t_start, *ends, *(f.t for f in self.faults), *(p["t"] for p in self.pings)])

    def _load_actions(self, changes: list[tuple[float, int, str, str, Any]], order: int) -> None:
        """Node status changes from actions go into ``changes``; faults and topology snapshots are kept."""
        file = self.path / "actions.jsonl"
        records: list[tuple[float, int, dict[str, Any]]] = []
        for line_no, line in self._lines(file):
            try:
                a = json.loads(line)
                records.append((float(a["mono_s"]), line_no, a))
            except (ValueError, KeyError, TypeError) as exc:
                self._skip(file, line_no, f"not an action record ({exc})")
        records.sort(key=lambda r: (r[0], r[1]))
        all_links = {link_id(a, b) for a, b, _ in self.graph.links}
        joined = {p for _, _, a in records if a.get("action") == "join" and (p := pair(a.get("target"))) is not None}
        log = FaultLog(all_links, absent=set(joined))
        self._topo_times.append(float("-inf"))
        self._topo_states.append((frozenset(log.cut), frozenset(log.absent)))
        for t, line_no, a in records:
            before = (frozenset(log.cut), frozenset(log.absent))
            try:
                log.feed(a)
            except (ValueError, KeyError, TypeError) as exc:
                self._skip(file, line_no, f"field 'detail': {exc}")
                continue
            target = a.get("target")
            order += 1
            if a["action"] in NODE_DOWN and target in self._fields:
                changes.append((t, order, target, "status", "dead"))
            elif a["action"] == "pause" and target in self._fields:
                changes.append((t, order, target, "status", "paused"))
            elif a["action"] == "resume" and target in self._fields:
                changes.append((t, order, target, "status", "up"))
            after = (frozenset(log.cut), frozenset(log.absent))
            if after != before:
                self._topo_times.append(t)
                self._topo_states.append(after)
        self.faults = log.faults

    # ------------------------------------------------------------ questions

    def topology_at(self, t: float) -> tuple[frozenset[frozenset[str]], frozenset[frozenset[str]]]:
        """(cut links, links not yet joined) at ``t``."""
        return self._topo_states[bisect.bisect_right(self._topo_times, t) - 1]

    def state_at(self, name: str, t: float) -> NodeState:
        fs = self._fields[name]
        root = fs["root"].at(t) or (None, None)
        return NodeState(fs["status"].at(t, "absent"), root[0], root[1], fs["parent"].at(t), fs["descending"].at(t),
                         fs["coords"].at(t, ()))

    def at(self, t: float) -> dict[str, Any]:
        """The frame at ``t`` (orchestrator.tools.view.frames.frame_doc)."""
        cut, absent = self.topology_at(t)
        states = {n: self.state_at(n, t) for n in self.graph.nodes}
        if self.motion is None:
            return frame_doc(t, self.graph, states, cut=cut, absent_links=absent)
        frame = frame_doc(t, self.graph, states, cut=cut, absent_links=absent, extra_links=self.motion.edges_at(t))
        frame["motion"] = self.motion.frame(t)
        return frame

    def roots_at(self, t: float) -> list[str]:
        return self.at(t)["roots"]

    def change_times(self) -> list[float]:
        """Every instant at which some node's status, root, parent or descending neighbour, or the topology, changed."""
        times = {t for fs in self._fields.values() for f in ("status", "root", "parent", "descending")
                 for t in fs[f].times}
        times.update(t for t in self._topo_times if t != float("-inf"))
        if self.motion is not None:
            times.update(self.motion.changes)
        return sorted(times)

    def series(self) -> list[dict[str, Any]]:
        """The verdict over the run: a point whenever tree, snake, components or live nodes changed."""
        return self._series

    def _series_changes(self) -> list[tuple[float, int, str, str, Any]]:
        """Every change the verdict depends on, in time order: node fields first, then the live topology's."""
        changes: list[tuple[float, int, str, str, Any]] = []
        for n, fs in self._fields.items():
            for f in ("status", "root", "descending"):
                changes.extend((t, 0, n, f, v) for t, v in zip(fs[f].times, fs[f].values))
        changes.extend((t, 1, "", "topology", i) for i, t in enumerate(self._topo_times) if i)
        if self.motion is not None:  # a radio link up or down changes the live graph as a topology change does
            changes.extend((t, 1, "", "radio", None) for t in self.motion.changes)
        changes.sort(key=lambda c: (c[0], c[1]))
        return changes

    def _compute_series(self) -> list[dict[str, Any]]:
        keys = {n: self.graph.keys.get(n) or "" for n in self.graph.nodes}
        changes = self._series_changes()
        status = {n: "absent" for n in keys}
        root: dict[str, str | None] = {n: None for n in keys}
        desc: dict[str, str | None] = {n: None for n in keys}
        topo_index = 0
        radio_t = float("-inf")
        want_root: dict[str, str] = {}
        want_desc: dict[str, str | None] = {}
        comps = 0
        wrong_root: set[str] = set()
        wrong_desc: set[str] = set()
        out: list[dict[str, Any]] = []

        def regraph() -> None:
            nonlocal comps
            cut, absent = self._topo_states[topo_index]
            g = nx.Graph()
            up = [n for n in keys if status[n] == "up"]
            g.add_nodes_from(up)
            g.add_edges_from((a, b) for a, b, _ in self.graph.links if status[a] == "up" and status[b] == "up"
                             and link_id(a, b) not in cut and link_id(a, b) not in absent)
            if self.motion is not None:
                g.add_edges_from((a, b) for a, b in self.motion.edges_at(radio_t) if a in g and b in g)
            want_root.clear()
            want_desc.clear()
            comps = 0
            for comp in nx.connected_components(g):
                comps += 1
                members = sorted(comp, key=lambda n: keys[n])
                for i, n in enumerate(members):
                    want_root[n] = keys[members[-1]]
                    want_desc[n] = keys[members[i - 1]] if i else None
            wrong_root.clear()
            wrong_desc.clear()
            for n in up:
                recheck(n)

        def recheck(n: str) -> None:
            if n not in want_root:
                wrong_root.discard(n)
                wrong_desc.discard(n)
                return
            (wrong_root.discard if root[n] == want_root[n] else wrong_root.add)(n)
            (wrong_desc.discard if desc[n] == want_desc[n] else wrong_desc.add)(n)

        i = 0
        while i < len(changes):
            t = changes[i][0]
            dirty = False
            while i < len(changes) and changes[i][0] == t:
                _, _, n, f, v = changes[i]
                i += 1
                if f == "topology":
                    topo_index = v
                    dirty = True
                elif f == "radio":
                    radio_t = t
                    dirty = True
                elif f == "status":
                    dirty = dirty or (status[n] == "up") != (v == "up")
                    status[n] = v
                elif f == "root":
                    root[n] = v[0] if v else None
                    if not dirty:
                        recheck(n)
                else:
                    desc[n] = v
                    if not dirty:
                        recheck(n)
            if dirty:
                regraph()
            live = len(want_root)
            tree = live > 0 and not wrong_root
            point = {"t": round(t, 4), "tree": tree, "snake": tree and not wrong_desc, "components": comps,
                     "live": live}
            if not out or any(out[-1][k] != point[k] for k in ("tree", "snake", "components", "live")):
                out.append(point)
        return out

    def node_detail(self, name: str, t: float) -> dict[str, Any]:
        """One node at ``t``: state, peers, the routes its accepted bootstraps back, counters so far."""
        if name not in self._fields:
            raise KeyError(name)
        s = self.state_at(name, t)
        peers: dict[int, tuple[str, str | None]] = {}
        for when, what, port, peer, cls in self._peer_log.get(name, []):
            if when > t:
                break
            if what == "reset":
                peers.clear()
            elif what == "up" and peer is not None:
                peers[port] = (peer, cls)
            else:
                peers.pop(port, None)
        routes: dict[str, tuple[float, int]] = {}
        for when, origin, port in self._routes.get(name, []):
            if when > t:
                break
            if when > t - ROUTE_WINDOW_S:
                routes[origin] = (when, port)
        counters: Counter[str] = Counter()
        for when, key, value in self._counters.get(name, []):
            if when > t:
                break
            counters[key] += value
        g = self.graph
        return {
            "name": name, "key": g.keys.get(name), "t": round(t, 4), "status": s.status, "root": g.label(s.root),
            "root_key": s.root, "root_seq": s.root_seq, "parent": g.label(s.parent), "descending": g.label(s.descending),
            "coords": list(s.coords),
            "peers": [{"port": p, "name": g.label(k), "key": k, "class": c} for p, (k, c) in sorted(peers.items())],
            "routes": {"source": f"bootstraps accepted in the last {ROUTE_WINDOW_S:g} s (replayed from events)",
                       "entries": [{"origin": g.label(o), "from_port": port, "age_s": round(t - when, 3)}
                                   for o, (when, port) in sorted(routes.items(), key=lambda x: x[1][0], reverse=True)]},
            "counters": dict(sorted(counters.items())),
        }

    def summary(self) -> dict[str, Any]:
        """What the replay page loads once: the window, the faults, flight-recorder dumps, the verdict series,
        pings, change times."""
        return {
            "t_start": self.t_start, "t_end": self.t_end,
            "faults": [f.to_dict() for f in self.faults],
            "dumps": [d.to_dict() for d in self.dumps],
            "series": self._series,
            "pings": [[round(p["t"], 4), p["received"]] for p in self.pings],
            "changes": [round(t, 4) for t in self.change_times()],
            "skipped": {"count": self.skipped_count, "first": self.skipped},
            "variant": self.meta.get("variant"), "backend": self.meta.get("backend"), "clock": self.meta.get("clock"),
        }
