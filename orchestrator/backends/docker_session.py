"""A Docker run as the CLI sees it: start it, re-open it by id, observe it, ping, kill the root, tear it down.

Every step is recorded in the run directory (:mod:`orchestrator.model.runs`):
``meta.json`` (nodes and keys, links with the backend that shaped each,
versions, what the observer measured), ``docker.json`` (the address plan),
``actions.jsonl`` and ``pings.jsonl``. The nodes write ``events/<name>.jsonl``
themselves through a bind mount.
"""

from __future__ import annotations

import dataclasses
import platform
import random
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from netem.plan import ShapingBackend
from netem.probe import probe
from node.core.router import MAX_PORTS
from orchestrator.model.observe import check_convergence
from orchestrator.model.record import outcome_of
from orchestrator.model.runs import RunDir, RunError, versions
from orchestrator.model.topology import Topology

from orchestrator.backends.docker import DockerBackend, DownReport, UpResult, sigint_ignored
from orchestrator.backends.docker_net import AddressPlan, DockerBackendError
from orchestrator.backends.docker_plan import HostLaunch, NodeLaunch, unapplied_shaping
from orchestrator.backends.swarm import SwarmBackend
from orchestrator.backends.docker_observe import (
    POLL_S,
    AdminClient,
    AdminError,
    Convergence,
    reconvergence_bound_s,
    views_from_states,
    wait_converged,
)

__all__ = ["DockerSession", "links_not_made", "start_run", "roll_back", "choose_shaping", "wait_host_nodes",
           "host_node_text", "unapplied_text", "PING_TIMEOUT_S", "HOST_TIMEOUT_S"]

LIVE_BACKENDS = ("docker", "swarm")  # meta.json backends whose runs live on an engine
PING_TIMEOUT_S = 5.0  # §8: the reference's ping timeout
HOST_TIMEOUT_S = 600.0  # how long `up` waits for the user to start the host nodes
HOST_POLL_S = 0.5
Announce = Callable[[str], None]


def choose_shaping(mode: str) -> tuple[ShapingBackend, str]:
    """``auto`` probes the host (``netem.probe``); ``kernel`` requires a kernel backend; ``userspace`` forces it.

    Returns (backend, why). Raises DockerBackendError when ``kernel`` is asked for and unavailable.
    """
    if mode == "userspace":
        return "userspace", "asked for userspace shaping"
    caps = probe()
    if mode == "kernel" and caps.backend == "userspace":
        raise DockerBackendError("--shaping kernel: this host has no kernel shaping: " + "; ".join(caps.notes))
    return caps.backend, "; ".join(caps.notes) or f"probe chose {caps.backend}"


@dataclass
class DockerSession:
    """An existing Docker run: its directory, topology and backend."""

    run: RunDir
    topology: Topology
    backend: DockerBackend
    keys: dict[str, str]  # node name -> public key hex
    endpoints: dict[str, str]  # node name -> admin HOST:PORT
    hosts: frozenset[str] = frozenset()  # host nodes: run by the user outside Docker, observed by admin API only
    #: radio links made when the nodes stopped moving (meta.json ``mobility.radio_links_at_end``: ``up`` of a
    #: topology with radios), as (a, b, link class); part of the live graph with the topology's fixed links
    radio_edges: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def open(cls, run: RunDir, backend: DockerBackend | None = None) -> DockerSession:
        """Re-open a Docker run from its directory. Raises RunError when it is not a Docker run."""
        meta = run.meta()
        if meta.get("backend") not in LIVE_BACKENDS:
            raise RunError(f"run {run.run_id} used the {meta.get('backend', 'unknown')!r} backend: only Docker and "
                           "swarm runs are live (status shows what an in-process run recorded)")
        if backend is None:
            backend = SwarmBackend() if meta.get("backend") == "swarm" else DockerBackend()
        elif backend.name != meta.get("backend"):
            raise RunError(f"run {run.run_id} is a {meta.get('backend')} run, not a {backend.name} run")
        plan = run.read_json("docker.json", {}) or {}
        topo = Topology.from_data(run.read_json("topology.json"), file=str(run.path / "topology.json"))
        endpoints = backend.admin_endpoints(run.run_id, plan)
        hosts = plan.get("hosts") or {}
        endpoints.update({name: str(h["admin"]) for name, h in hosts.items()})
        moved = meta.get("mobility") or {}
        radio_class = {name: str(r.get("class")) for name, r in (moved.get("radios") or {}).items()}
        radio = tuple((str(a), str(b), radio_class.get(str(r), "unknown"))
                      for a, b, r in moved.get("radio_links_at_end") or ())
        return cls(run, topo, backend, dict(meta.get("nodes") or {}), endpoints, frozenset(hosts), radio)

    def refresh_endpoints(self) -> dict[str, str]:
        """Ask the backend again where each node's admin API is (a swarm task that restarted has a new port)."""
        plan = self.run.read_json("docker.json", {}) or {}
        fresh = self.backend.admin_endpoints(self.run_id, plan)
        for name in list(self.endpoints):
            if name not in self.hosts and name not in fresh:
                del self.endpoints[name]
        self.endpoints.update(fresh)
        return self.endpoints

    # ------------------------------------------------------------ views

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def running(self) -> set[str]:
        """Nodes whose container runs, plus every host node (its process is the user's: it counts as
        running, and an unanswered admin API shows as unreachable)."""
        return self.backend.running(self.run_id) | set(self.hosts)

    def live_graph(self, running: Iterable[str] | None = None) -> nx.Graph:
        """The topology's graph (and :attr:`radio_edges`) restricted to nodes whose container runs."""
        alive = set(self.running() if running is None else running)
        graph = self.topology.simple_graph()
        graph.add_edges_from((a, b) for a, b, _ in self.radio_edges)
        return graph.subgraph(alive).copy()

    def check_alive(self, expected: Iterable[str]) -> None:
        """Raise DockerBackendError naming every expected node whose container is not running, with its log tail."""
        containers = self.backend.containers(self.run_id)
        dead = sorted(n for n in expected
                      if n not in self.hosts and (containers.get(n) or {}).get("State") != "running")
        if not dead:
            return
        lines = []
        for name in dead[:3]:
            c = containers.get(name)
            if c is None:
                lines.append(f"{name}: no container")
                continue
            tail = self.backend.logs_tail(c["Id"], 6)
            lines.append(f"{name}: {c.get('Status', c.get('State'))}\n    " + "\n    ".join(tail))
        more = f" (and {len(dead) - 3} more)" if len(dead) > 3 else ""
        raise DockerBackendError(f"run {self.run_id}: node containers stopped unexpectedly: {', '.join(dead)}{more}\n"
                                 + "\n".join(lines))

    def link_classes(self) -> dict[frozenset[str], str]:
        """Each linked pair's link class; a pair joined by radio links alone has their classes, sorted and joined
        by ``+`` when several radios join it (a ping crosses either)."""
        radio: dict[frozenset[str], set[str]] = {}
        for a, b, cls in self.radio_edges:
            radio.setdefault(frozenset((a, b)), set()).add(cls)
        fixed = {frozenset((link.a, link.b)): link.link_class for link in self.topology.links}
        return {pair: "+".join(sorted(classes)) for pair, classes in radio.items()} | fixed

    def admin(self) -> AdminClient:
        return AdminClient(self.endpoints)

    def name_of(self, key_hex: str) -> str | None:
        for name, key in self.keys.items():
            if key == key_hex:
                return name
        return None

    # ------------------------------------------------------------ observe

    def converge(self, *, t0: float, timeout_s: float, what: str = "up", exclude: Iterable[str] = (),
                 progress: Callable[[float, int, int], None] | None = None) -> Convergence:
        """Wait for convergence of the live graph and record a ``converged`` action (also when it timed out)."""
        gone = set(exclude)
        expected = set(self.topology.node_names) - gone

        def graph() -> nx.Graph:
            self.check_alive(expected)
            return self.live_graph(expected)

        poll_s = max(POLL_S, len(expected) / 250)  # keep the observer's own load small on big runs
        with self.admin() as admin:
            conv = wait_converged(admin, graph, t0=t0, timeout_s=timeout_s, poll_s=poll_s, progress=progress)
        self.run.action("converged", None, {"after": what, **conv.summary()})
        return conv

    def status(self) -> dict[str, Any]:
        """One poll of every node: container state, tree/snake fields and the convergence verdict."""
        containers = self.backend.containers(self.run_id)
        running = {n for n, c in containers.items() if c.get("State") == "running"} | set(self.hosts)
        with self.admin() as admin:
            states = admin.states(sorted(running))
            errors = dict(admin.errors)
        views = views_from_states(states)
        graph = self.live_graph(running)
        unreachable = sorted(running - set(views))
        verdict = check_convergence(graph.subgraph(views), views)
        rows = []
        for name in self.topology.node_names:
            doc = states.get(name) or {}
            root = (doc.get("root") or {}).get("key")
            rows.append({
                "name": name,
                "container": "host" if name in self.hosts else (containers.get(name) or {}).get("State", "absent"),
                "key": self.keys.get(name), "admin": self.endpoints.get(name), "root": root,
                "root_name": self.name_of(root) if root else None, "parent": doc.get("parent"),
                "parent_name": self.name_of(doc["parent"]) if doc.get("parent") else None,
                "coords": doc.get("coords"), "descending": doc.get("descending"),
                "descending_name": self.name_of(doc["descending"]) if doc.get("descending") else None,
                "peers": len(doc.get("peers") or []) if doc else None,
                "routing_table_size": doc.get("routing_table_size"), "error": errors.get(name),
            })
        return {"run_id": self.run_id, "backend": self.backend.name, "topology": self.topology.name, "nodes": rows,
                "running": len(running), "tree": verdict.tree and not unreachable,
                "snake": verdict.snake and not unreachable, "wrong_root": verdict.wrong_root,
                "wrong_descending": verdict.wrong_descending, "unreachable": unreachable}

    # ------------------------------------------------------------ act

    def ping(self, pairs: list[tuple[str, str]], modes: Iterable[str] = ("snek",), *, count: int = 1,
             timeout_s: float = PING_TIMEOUT_S) -> list[dict[str, Any]]:
        """Ping each (sender, target) in each mode through the sender's admin API; record every ping.

        Returns the pings.jsonl lines written. Raises RunError for an unknown node name.
        """
        for a, b in pairs:
            for n in (a, b):
                if n not in self.keys:
                    raise RunError(f"run {self.run_id}: no node {n!r} (nodes: {', '.join(self.topology.node_names)})")
        jobs = [(a, b, mode) for a, b in pairs for mode in modes]
        graph = self.live_graph()
        classes = self.link_classes()
        lines: list[dict[str, Any]] = []
        with self.admin() as admin:
            results = admin.ping_many([(a, self.keys[b], mode) for a, b, mode in jobs], count=count,
                                      timeout_s=timeout_s)
        for (a, b, mode), (sent, res) in zip(jobs, results):
            got = res if isinstance(res, dict) else {"sent": count, "received": 0, "rtt_ms": [], "hops": []}
            outcomes = [(True, r, h) for r, h in zip(got.get("rtt_ms", []), got.get("hops", []))]
            outcomes += [(False, None, None)] * max(0, int(got.get("sent", count)) - len(outcomes))
            for received, rtt, hops in outcomes:
                line = self.run.ping(sender=a, sender_key=self.keys[a], target=b, target_key=self.keys[b], mode=mode,
                                     sent_mono_s=sent, received=received, rtt_ms=rtt, hops=hops, graph=graph,
                                     link_class=classes)
                if isinstance(res, AdminError):
                    line["error"] = str(res)
                lines.append(line)
        self.run.action("ping", None, {"pings": len(lines), "received": sum(1 for x in lines if x["received"]),
                                       "modes": list(modes)})
        return lines

    def sample_pairs(self, n: int, *, seed: int = 0, include_far: bool = True) -> list[tuple[str, str]]:
        """``n`` (sender, target) pairs within live components; the first is a farthest pair when asked."""
        graph = self.live_graph()
        rng = random.Random(f"pairs-{self.run_id}-{seed}")
        pairs: list[tuple[str, str]] = []
        comps = [sorted(c) for c in nx.connected_components(graph) if len(c) > 1]
        if include_far and comps:
            big = graph.subgraph(max(comps, key=len))
            lengths = dict(nx.all_pairs_shortest_path_length(big))
            far = max(((a, b) for a in lengths for b in lengths[a] if a < b), key=lambda p: (lengths[p[0]][p[1]], p))
            pairs.append(far)
        candidates = [(a, b) for c in comps for a in c for b in c if a != b and (a, b) not in pairs]
        pairs += rng.sample(candidates, min(max(0, n - len(pairs)), len(candidates)))
        return pairs[:n] if n else []

    def current_root(self) -> str:
        """The node most live nodes report as root. Raises RunError when nobody answers or it is not a node."""
        running = self.running()
        with self.admin() as admin:
            views = views_from_states(admin.states(sorted(running)))
        if not views:
            raise RunError(f"run {self.run_id}: no node answered GET /state (running: {len(running)})")
        key = Counter(v.root for v in views.values()).most_common(1)[0][0].hex()
        name = self.name_of(key)
        if name is None or name not in running:
            raise RunError(f"run {self.run_id}: the reported root {key[:16]} is not a running node of the run")
        return name

    def wait_hosts(self, expected: Mapping[str, HostLaunch], *, timeout_s: float = HOST_TIMEOUT_S) -> float:
        """Wait until every host node's admin API answers with its planned key; see :func:`wait_host_nodes`."""
        with self.admin() as admin:
            return wait_host_nodes(admin, expected, timeout_s=timeout_s, run_id=self.run_id)

    def kill_root(self, *, timeout_s: float | None = None, pairs: int = 4, modes: Iterable[str] = ("snek", "tree"),
                  progress: Callable[[float, int, int], None] | None = None) -> dict[str, Any]:
        """Kill the current root's container, wait for re-convergence (bound from the timers), ping again."""
        victim = self.current_root()
        if victim in self.hosts:
            raise RunError(f"run {self.run_id}: the root is {victim}, a host node: kill-root kills containers only "
                           "(stop its `snekbed node` process yourself to take it out)")
        running = self.running()
        after = self.live_graph(running - {victim})
        bound = reconvergence_bound_s(after)
        t_kill = time.monotonic()
        self.backend.kill(self.run_id, victim)
        self.run.action("kill_root", victim, {"key": self.keys[victim], "bound_s": bound}, mono_s=t_kill)
        gone = set(self.topology.node_names) - running | {victim}
        conv = self.converge(t0=t_kill, timeout_s=timeout_s or bound, what="kill_root", exclude=gone,
                             progress=progress)
        lines = self.ping(self.sample_pairs(pairs), modes) if conv.converged and pairs else []
        out = {"killed": victim, "killed_key": self.keys[victim], "bound_s": bound, **conv.summary(),
               "pings": _ping_summary(lines)}
        history = self.run.meta().get("observer", {}).get("kill_root", [])
        self.run.update_meta(observer={"kill_root": [*history, out]})
        return out


def _ping_summary(lines: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        cell = out.setdefault(line["mode"], {"sent": 0, "received": 0})
        cell["sent"] += 1
        cell["received"] += bool(line["received"])
    return out


def unapplied_text(run_id: str, unapplied: list[dict[str, Any]]) -> str:
    """What a run says of the shaping its reference nodes cannot apply (one line per link end, then where it is)."""
    lines = [f"run {run_id}: {len(unapplied)} link end(s) of reference nodes are not shaped as their class asks "
             "(the reference node has no userspace shaper; docs/interop.md, \"Shaping\"):"]
    lines += [f"  link {u['link']} {u['node']} -> {u['peer']} ({u['class']}): "
              + ", ".join(f"{k} {v:g}" for k, v in u["unapplied"].items()) + " not applied" for u in unapplied]
    return "\n".join([*lines, "  (meta.json shaping_unapplied)"])


def host_node_text(run_id: str, hosts: Mapping[str, HostLaunch], timeout_s: float) -> str:
    """What the user is told to run for the host nodes of a run (one command line each, shell-quoted)."""
    lines = [f"run {run_id}: {len(hosts)} host node(s) run outside Docker: start each on this machine within "
             f"{timeout_s:g} s (waiting for its admin API to answer with its key):"]
    for name, h in hosts.items():
        lines += [f"# host node {name} (key {h.key[:16]}, admin {h.admin}):", h.command]
    return "\n".join(lines)


def wait_host_nodes(admin: AdminClient, expected: Mapping[str, HostLaunch], *, timeout_s: float,
                    run_id: str = "") -> float:
    """Poll each host node's ``GET /state`` until it answers with the planned ``public_key``.

    Returns the seconds waited. Raises DockerBackendError when ``timeout_s`` passes (naming
    the nodes that never answered and what they last said) or when a node answers with
    another key (a process started with the wrong command, or someone else's node).
    """
    t0 = time.monotonic()
    waiting = dict(expected)
    last: dict[str, str] = {}
    while waiting:
        for name, launch in list(waiting.items()):
            try:
                key = admin.state(name).get("public_key")
            except AdminError as exc:
                last[name] = str(exc)
                continue
            if key != launch.key:
                raise DockerBackendError(f"run {run_id}: host node {name} at {launch.admin} answers with key "
                                         f"{str(key)[:16]}, not its planned key {launch.key[:16]}: was it started "
                                         f"with the printed command?\n{launch.command}")
            del waiting[name]
        if not waiting:
            break
        if time.monotonic() - t0 >= timeout_s:
            said = "; ".join(f"{n}: {last.get(n, 'no answer')}" for n in sorted(waiting))
            raise DockerBackendError(f"run {run_id}: host node(s) {', '.join(sorted(waiting))} did not answer on "
                                     f"their admin API within {timeout_s:g} s ({said}); start each with the "
                                     "printed `snekbed node` command")
        time.sleep(HOST_POLL_S)
    return time.monotonic() - t0


def _announce_stderr(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def start_run(topology: Topology, run: RunDir, *, backend: DockerBackend, image: str, seed: int | str = 0,
              shaping: tuple[ShapingBackend, str] = ("userspace", "default"), timeout_s: float = 120.0,
              progress: Callable[[str, int, int], None] | None = None,
              converge_progress: Callable[[float, int, int], None] | None = None,
              announce: Announce | None = None, host_timeout_s: float = HOST_TIMEOUT_S,
              reference_image: str | None = None,
              on_networks: Callable[[AddressPlan], None] | None = None,
              held: Collection[str] = ()) -> tuple[DockerSession, UpResult, Convergence]:
    """Bring ``topology`` up as run ``run`` and wait (up to ``timeout_s`` after the last start) for convergence.
    Nodes whose spec is ``pinecone`` run ``reference_image``; meta.json's ``shaping_unapplied`` lists the part of
    a link's shape their ends cannot apply (docker_plan.unapplied_shaping), and ``announce`` says it.

    With host nodes, once the containers run their commands go to ``announce`` (stderr by
    default) and the run waits up to ``host_timeout_s`` for each to answer with its key;
    convergence is timed from then.

    ``held`` (the nodes a chaos scenario joins later): on Docker their containers are created, not started, and the
    convergence is the other nodes'; a swarm starts every node (DockerChaos stops the held ones once up).

    meta.json and docker.json are written as soon as the plan is fixed, before any
    container exists. On any exception (DockerBackendError, Ctrl-C, a cancelled
    caller) everything created so far is removed by its label (:func:`roll_back`),
    meta.json says so (``outcome``, ``rollback``) and the exception propagates.
    """
    try:
        return _start_run(topology, run, backend=backend, images=(image, reference_image), seed=seed,
                          shaping=shaping, timeout_s=timeout_s, progress=progress, converge_progress=converge_progress,
                          announce=announce or _announce_stderr, host_timeout_s=host_timeout_s,
                          on_networks=on_networks, held=held)
    except BaseException as exc:
        roll_back(run, backend, exc)
        raise


def roll_back(run: RunDir, backend: DockerBackend, exc: BaseException) -> DownReport:
    """Remove every container, network and volume labelled with the run (shaping lives in the
    containers' namespaces and goes with them), with SIGINT ignored meanwhile so a second Ctrl-C
    cannot leave the rollback half done; record the outcome in meta.json. Never raises."""
    with sigint_ignored():
        try:
            report = backend.down(run.run_id)
        except Exception as down_exc:  # the engine went away: say so, the labels still allow `snekbed down`
            report = DownReport(errors=[f"rollback failed: {down_exc.__class__.__name__}: {down_exc}"])
    try:
        run.update_meta(outcome=outcome_of(exc), error=f"{exc.__class__.__name__}: {exc}".rstrip(": "),
                        rollback=dataclasses.asdict(report))
        run.action("down", None, {"rollback": outcome_of(exc), **dataclasses.asdict(report)})
    except OSError:
        pass  # the run directory itself is unwritable: the engine side is what matters here
    return report


def _start_run(topology: Topology, run: RunDir, *, backend: DockerBackend, images: tuple[str, str | None],
               seed: int | str, shaping: tuple[ShapingBackend, str], timeout_s: float,
               progress: Callable[[str, int, int], None] | None,
               converge_progress: Callable[[float, int, int], None] | None,
               announce: Announce, host_timeout_s: float,
               on_networks: Callable[[AddressPlan], None] | None = None, held: Collection[str] = (),
               ) -> tuple[DockerSession, UpResult, Convergence]:
    shaping_backend, why = shaping
    image, reference_image = images
    unapplied = unapplied_shaping(topology, "userspace" if isinstance(backend, SwarmBackend) else shaping_backend)

    variants = {name: str(v) for name, v in topology.variants().items()}
    run_variant = Counter(variants.values()).most_common(1)[0][0] if variants else "snek"

    def on_plan(plan: AddressPlan, launches: dict[str, NodeLaunch], hosts: dict[str, HostLaunch]) -> None:
        run.write_json("docker.json", {**plan.to_dict(), "hosts": {n: h.to_dict() for n, h in hosts.items()}})
        keys = {name: la.key for name, la in launches.items()} | {name: h.key for name, h in hosts.items()}
        others = {n: v for n, v in sorted(variants.items()) if v != run_variant}
        run.write_json("meta.json", {
            "run_id": run.run_id, "backend": backend.name, "variant": run_variant, "topology": topology.name,
            **({"variants": others} if others else {}),
            "seed": seed if isinstance(seed, int) else None, "clock": "real", "link_delay_ms": None,
            "nodes": {name: keys[name] for name in topology.node_names},
            **({"host_nodes": sorted(hosts)} if hosts else {}),
            "links": [{"a": ln.a, "b": ln.b, "class": ln.link_class, "index": ln.index, "subnet": ln.net.subnet,
                       "shaping_backend": shaping_backend} for ln in plan.links],
            "versions": {**versions(), "docker_engine": _engine_version(backend), "image": image,
                         **({"reference_image": reference_image} if reference_image else {}), "host": platform.node()},
            **({"shaping_unapplied": unapplied} if unapplied else {}),
            "started_wall_ts": round(time.time(), 6),
            "shaping": {"backend": shaping_backend, "why": why},
            "address_block": plan.block, "observer": {},
        })

    more: dict[str, Any] = {"on_networks": on_networks} if on_networks is not None else {}  # not on a swarm
    held = () if isinstance(backend, SwarmBackend) else tuple(held)  # a swarm starts every service
    if held:
        more["held"] = held
    result = backend.up(topology, run_id=run.run_id, events_dir=run.events_dir, image=image, seed=seed,
                        shaping_backend=shaping_backend, progress=progress, on_plan=on_plan,
                        reference_image=reference_image, **more)
    if unapplied:
        announce(unapplied_text(run.run_id, unapplied))
    meta = run.meta()
    for link in meta.get("links", []):
        link["shaping_backend"] = result.link_backends.get(link["index"], shaping_backend)
    run.update_meta(links=meta.get("links", []))
    run.action("up", None, {"nodes": len(result.containers), "links": len(result.plan.links), "image": image,
                            "shaping_backend": shaping_backend, "networks_s": round(result.network_s, 3),
                            "containers_s": round(result.container_s, 3)}, mono_s=result.t_last_start)
    session = DockerSession.open(run, backend)
    if isinstance(backend, SwarmBackend):  # where the swarm put each node (addresses are the swarm's to choose)
        placed = backend.placements(run.run_id)
        host = {name: p["host"] for name, p in placed.items()}
        crossing = [ln.index for ln in result.plan.links if host.get(ln.a) != host.get(ln.b)]
        run.update_meta(swarm={"placements": placed, "planned": dict(backend.planned), "crossing_links": crossing,
                               "images": dict(backend.images_placed),
                               "shaping": "userspace",
                               "why": "the kernel backend cannot reach tasks on other hosts"})
    t0 = result.t_last_start
    if result.hosts:
        announce(host_node_text(run.run_id, result.hosts, host_timeout_s))
        waited = session.wait_hosts(result.hosts, timeout_s=host_timeout_s)
        t0 = time.monotonic()
        run.update_meta(host_nodes_waited_s=round(waited, 3))  # convergence is timed from the last host's answer
    conv = session.converge(t0=t0, timeout_s=timeout_s, what="up", exclude=held, progress=converge_progress)
    refused = links_not_made(topology, session.keys, conv.states)
    run.update_meta(observer={"up": {**conv.summary(), "networks_s": round(result.network_s, 3),
                                     "containers_s": round(result.container_s, 3)}}, outcome="ok",
                    links_refused=refused)  # fmt: skip
    return session, result, conv


def links_not_made(topology: Topology, keys: Mapping[str, str],
                   states: Mapping[str, Mapping[str, Any] | None]) -> list[dict[str, Any]]:
    """Topology links that are not peerings, as the nodes' ``GET /state`` shows them.

    A node refuses a peering when all its 253 ports are taken (PROTOCOL.md §3.3; the
    reference does the same); which links lose depends on the order the connections
    came up, so Docker's list is observed, not predicted. ``reason`` is ``ports_full``
    (``nodes`` names the full ends) or ``not_connected``; links with an end that did not
    answer are left out (nothing is known of them).
    """
    peers: dict[str, Counter[str]] = {}
    for name, doc in states.items():
        if doc is not None:
            peers[name] = Counter(p["key"] for p in doc.get("peers") or [])
    wanted: Counter[tuple[str, str]] = Counter()
    out: list[dict[str, Any]] = []
    for link in topology.links:
        a, b = link.a, link.b
        if a not in peers or b not in peers:
            continue
        wanted[(a, b)] += 1
        if peers[a][keys[b]] >= wanted[(a, b)]:
            continue
        full = [n for n in (a, b) if sum(peers[n].values()) >= MAX_PORTS]
        out.append({"a": a, "b": b, "class": link.link_class, "reason": "ports_full" if full else "not_connected",
                    "nodes": full})  # fmt: skip
    return out


def _engine_version(backend: DockerBackend) -> str:
    try:
        return str(backend.client.version().get("Version", "unknown"))
    except Exception:  # a version string is nice to have, never worth failing a run
        return "unknown"
