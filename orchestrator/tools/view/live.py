"""Live sources: what a running network looks like now, for the live page.

* :class:`DockerLive` polls a Docker run: container states from the engine (running, paused,
  exited), every running node's ``GET /state`` through its admin API, and the faults the
  orchestrator appends to the run's ``actions.jsonl`` (``snekbed chaos``, ``kill-root``...).
* :class:`InprocLive` reads an in-process network's routers directly (``snekbed sim --clock
  real --view``); the run reports its faults with :meth:`InprocLive.fault`.

Both answer :meth:`frame` (``orchestrator.tools.view.frames.frame_doc`` plus the faults and the pings so far),
:meth:`pings_since` and :meth:`node_detail` (the node's ``/state``, its routing table and counters). Times are
``time.monotonic()`` for Docker (the clock of the run's actions, events and pings) and the network's
own clock in process.

Pings, as replay draws them (a dot at the time the ping was sent, delivered or lost): on Docker, the lines the
orchestrator appends to the run's ``pings.jsonl`` (``snekbed ping``, ``kill-root``, ``chaos``, ``demo``: each
written once its outcome is known, with the time it was sent); in process, every router's ``ping_result``
event as it happens (sent at the event's time less the round trip when delivered; a lost ping at the time its
timeout expired, since the event does not say when it was sent). A frame carries the count so far and the last
:data:`RECENT_PINGS`; a page that missed more asks :meth:`pings_since`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from contract.links import LINK_TYPE_NAMES

from orchestrator.backends.docker_observe import AdminClient, AdminError
from orchestrator.backends.inproc import InprocNetwork, SimNode
from orchestrator.tools.monitoring import NODE_METRICS_PORT
from orchestrator.model.runs import RunDir
from orchestrator.tools.view.faults import ActionsTail, FaultLog
from orchestrator.tools.view.frames import GraphInfo, NodeState, frame_doc, link_id
from orchestrator.tools.view.motion import MOBILITY_FILE, Motion, MotionTee

if TYPE_CHECKING:  # the Docker SDK loads with the backend: `snekbed sim --view` needs no docker extra
    from orchestrator.backends.docker import DockerBackend

__all__ = ["LiveSource", "DockerLive", "InprocLive", "PingLog", "CONTAINER_STATUS", "RECENT_PINGS"]

RECENT_PINGS = 200  # pings a live frame repeats (the page asks /api/pings?since=N for more)

# the engine's container State -> the page's node status
CONTAINER_STATUS = {"running": "up", "paused": "paused", "exited": "dead", "dead": "dead", "created": "absent",
                    "restarting": "dead", "removing": "dead"}


class LiveSource(Protocol):
    graph: GraphInfo
    run_id: str
    mode: str

    async def frame(self) -> dict[str, Any]:
        """The network now: a frame document with ``faults`` (every fault so far, oldest first) and
        :meth:`PingLog.doc`'s keys."""

    def pings_since(self, n: int) -> list[list[Any]]:
        """Pings number ``n`` on, as ``[number, t, delivered]``."""

    async def node_detail(self, name: str) -> dict[str, Any]:
        """One node now. Raises KeyError for an unknown name."""


class PingLog:
    """Ping outcomes in the order they came, numbered from 0: ``(t sent, delivered)``."""

    def __init__(self) -> None:
        self.pings: list[tuple[float, bool]] = []
        self.delivered = 0

    def add(self, t: float, delivered: bool) -> None:
        self.pings.append((round(t, 4), delivered))
        self.delivered += delivered

    def since(self, n: int) -> list[list[Any]]:
        return [[i, t, ok] for i, (t, ok) in enumerate(self.pings[max(0, n):], start=max(0, n))]

    def doc(self) -> dict[str, Any]:
        """A live frame's ping keys: ``pings_n`` (so far), ``pings_ok`` (delivered so far), ``pings_recent``."""
        return {"pings_n": len(self.pings), "pings_ok": self.delivered,
                "pings_recent": self.since(len(self.pings) - RECENT_PINGS)}


def _peered(graph: GraphInfo, states: Mapping[str, Mapping[str, Any] | None]) -> set[frozenset[str]]:
    out: set[frozenset[str]] = set()
    for name, doc in states.items():
        for p in (doc or {}).get("peers") or []:
            other = graph.names_by_key.get(p.get("key", ""))
            if other is not None:
                out.add(link_id(name, other))
    return out


def _counters(metrics_text: str) -> dict[str, float]:
    """The node's ``snek_*_total`` counters from its /metrics text, as ``name{label="value",...}``."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name.startswith("snek_") and s.name.endswith("_total"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class DockerLive:
    """A running Docker run (``snekbed up`` / ``snekbed chaos --backend docker``), polled."""

    mode = "docker"

    def __init__(self, run: RunDir, backend: DockerBackend, endpoints: Mapping[str, str], graph: GraphInfo) -> None:
        self.run = run
        self.run_id = run.run_id
        self.backend = backend
        self.graph = graph
        self.admin = AdminClient(endpoints, timeout_s=2.0)
        self.log = FaultLog({link_id(a, b) for a, b, _ in graph.links})
        self.tail = ActionsTail(run.path / "actions.jsonl")
        self.pings_tail = ActionsTail(run.path / "pings.jsonl")
        self.pings = PingLog()
        self._http = httpx.Client(timeout=2.0, trust_env=False)
        # nodes that move: the positions and radio links the orchestrator appends to the run's mobility.jsonl
        topo = run.read_json("topology.json", {}) or {}
        self.motion = Motion(topo, (run.read_json("meta.json", {}) or {}).get("mobility")) if topo.get("radios") else None
        self.motion_tail = ActionsTail(run.path / MOBILITY_FILE)

    def close(self) -> None:
        self.admin.close()
        self._http.close()

    def _poll(self) -> dict[str, Any]:
        for action in self.tail.read():
            try:
                self.log.feed(action)
            except (KeyError, TypeError, ValueError):
                continue  # a malformed line does not stop the live view; replay reports it with its line number
        for ping in self.pings_tail.read():
            try:
                self.pings.add(float(ping["sent_mono_s"]), bool(ping["received"]))
            except (KeyError, TypeError, ValueError):
                continue
        if self.motion is not None:
            for rec in self.motion_tail.read():
                try:
                    self.motion.feed(rec)
                except (KeyError, TypeError, ValueError):
                    continue
        t = time.monotonic()
        containers = self.backend.containers(self.run_id)
        status = {n: CONTAINER_STATUS.get(str((containers.get(n) or {}).get("State")), "absent")
                  for n in self.graph.nodes}
        running = [n for n, s in status.items() if s == "up"]
        docs = self.admin.states(running)
        states = {n: NodeState(status[n]) for n in self.graph.nodes}
        for n, doc in docs.items():
            if doc is not None:
                states[n] = NodeState.from_state(doc, "up")
        frame = frame_doc(t, self.graph, states, cut=self.log.cut, peered=_peered(self.graph, docs),
                          extra_links=self.motion.edges_at(t) if self.motion is not None else ())
        frame["unreachable"] = sorted(n for n in running if docs.get(n) is None)
        frame["faults"] = [f.to_dict() for f in self.log.faults]
        frame.update(self.pings.doc())
        if self.motion is not None:
            frame["motion"] = self.motion.frame(t)
        return frame

    async def frame(self) -> dict[str, Any]:
        # abandoned on cancel (Ctrl-C): the page stops now, not after the admin APIs' 2 s timeouts
        return await trio.to_thread.run_sync(self._poll, abandon_on_cancel=True)

    def pings_since(self, n: int) -> list[list[Any]]:
        return self.pings.since(n)

    def _detail(self, name: str) -> dict[str, Any]:
        if name not in self.graph.keys:
            raise KeyError(name)
        out: dict[str, Any] = {"name": name, "key": self.graph.keys[name]}
        try:
            doc = self.admin.state(name)
        except AdminError as exc:
            return {**out, "status": "unreachable", "error": str(exc)}
        out.update(status="up", state=doc, root=self.graph.label((doc.get("root") or {}).get("key")),
                   parent=self.graph.label(doc.get("parent")), descending=self.graph.label(doc.get("descending")),
                   peers=[{**p, "name": self.graph.label(p.get("key"))} for p in doc.get("peers") or []])
        endpoint = self.admin.endpoints[name]
        host = endpoint.rsplit(":", 1)[0]
        try:
            routes = self._http.get(f"http://{endpoint}/routes").json()
            out["routes"] = {"source": "GET /routes", "entries": [{**r, "origin": self.graph.label(r.get("key"))}
                                                                   for r in routes]}
        except (httpx.HTTPError, ValueError) as exc:
            out["routes"] = {"source": f"GET /routes failed: {exc}", "entries": []}
        try:
            out["counters"] = _counters(self._http.get(f"http://{host}:{NODE_METRICS_PORT}/metrics").text)
        except httpx.HTTPError as exc:
            out["counters"] = {"error": str(exc)}
        return out

    async def node_detail(self, name: str) -> dict[str, Any]:
        return await trio.to_thread.run_sync(self._detail, name)


class InprocLive:
    """An in-process network, read directly (it runs in this trio loop)."""

    mode = "inproc"

    def __init__(self, net: InprocNetwork, graph: GraphInfo, run_id: str, *,
                 status_of: Callable[[str, SimNode], str] | None = None) -> None:
        self.net = net
        self.graph = graph
        self.run_id = run_id
        self.log = FaultLog({link_id(a, b) for a, b, _ in graph.links})
        # a backend that pauses or adds nodes later says so; by default a node is up or dead
        self.status_of = status_of or (lambda _name, sn: "up" if sn.alive else "dead")
        self.pings = PingLog()
        # nodes that move: a Motion the run feeds through a MotionTee (orchestrator.tools.view.motion) is drawn
        self.motion: Motion | None = None
        inner = net.on_event  # the run's own observer keeps every event it had

        def tee(node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
            if kind == "ping_result":
                ok, rtt_ms = bool(fields.get("received")), fields.get("rtt_ms")
                self.pings.add(now - rtt_ms / 1000.0 if ok and rtt_ms is not None else now, ok)
            if inner is not None:
                inner(node, kind, fields, now)

        net.on_event = tee

    def tee(self, topology: Mapping[str, Any], inner: Any = None) -> MotionTee:
        """Draw the nodes that move: a log for the run's radio links that feeds this page and passes on to ``inner``
        (``RadioLinks(net, world, classes, live.tee(topology_doc, log))``), called before the page's app is built."""
        self.motion = Motion(topology)
        return MotionTee(self.motion, inner)

    def fault(self, action: str, target: str | None = None, detail: Mapping[str, Any] | None = None,
              now: float | None = None) -> None:
        """The run did something (an actions.jsonl record, without the file); the chaos runner's ``on_action``."""
        self.log.feed({"mono_s": self.net.now if now is None else now, "action": action, "target": target, "detail": dict(detail or {})})

    def _states(self) -> tuple[dict[str, NodeState], dict[str, dict[str, Any] | None]]:
        now = self.net.now
        for name in self.graph.nodes:  # a node that joined since: its key is known now
            sn = self.net.nodes.get(name)
            if sn is not None and not self.graph.keys.get(name):
                self.graph.keys[name] = sn.key.hex()
                self.graph.names_by_key[sn.key.hex()] = name
        states: dict[str, NodeState] = {}
        docs: dict[str, dict[str, Any] | None] = {}
        for name in self.graph.nodes:
            sn = self.net.nodes.get(name)
            status = "absent" if sn is None else self.status_of(name, sn)
            if sn is None or status in ("dead", "absent"):
                states[name] = NodeState(status)
                continue
            doc = sn.router.state(now)
            docs[name] = doc
            states[name] = NodeState.from_state(doc, status)
        return states, docs

    async def frame(self) -> dict[str, Any]:
        states, docs = self._states()
        frame = frame_doc(self.net.now, self.graph, states, cut=self.log.cut, peered=_peered(self.graph, docs),
                          extra_links=self.motion.edges_at(self.net.now) if self.motion is not None else ())
        frame["faults"] = [f.to_dict() for f in self.log.faults]
        frame.update(self.pings.doc())
        if self.motion is not None:
            frame["motion"] = self.motion.frame(self.net.now)
        return frame

    def pings_since(self, n: int) -> list[list[Any]]:
        return self.pings.since(n)

    def _peer(self, name: str, p: Mapping[str, Any]) -> dict[str, Any]:
        """A peer as a Docker node's ``/state`` has it: its link type by name (``class``), its topology class."""
        other = self.graph.label(p["key"])
        out = {k: v for k, v in p.items() if k != "link_type"}
        out.update(name=other, **{"class": LINK_TYPE_NAMES.get(p.get("link_type"), str(p.get("link_type")))})
        classes = [c for a, b, c in self.graph.links if {a, b} == {name, other}]
        if classes:
            out["link_class"] = classes[0]
        return out

    async def node_detail(self, name: str) -> dict[str, Any]:
        if name not in self.graph.keys:
            raise KeyError(name)
        sn = self.net.nodes.get(name)
        out: dict[str, Any] = {"name": name, "key": self.graph.keys[name]}
        if sn is None or not sn.alive:
            return {**out, "status": "dead"}
        doc = sn.router.state(self.net.now)
        counters = {" ".join(map(str, k)): v for k, v in sn.router.counters.items()}
        return {**out, "status": "up", "state": doc, "root": self.graph.label(doc["root"]["key"]),
                "parent": self.graph.label(doc["parent"]), "descending": self.graph.label(doc["descending"]),
                "peers": [self._peer(name, p) for p in doc["peers"]],
                "routes": {"source": "the router's table", "entries": [
                    {**r, "origin": self.graph.label(r["key"])} for r in sn.router.routes(self.net.now)]},
                "counters": dict(sorted(counters.items()))}
