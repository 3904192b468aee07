"""Write synthetic run directories in the run-dataset contract, with realistic event mixes.

    python benchmarks/gen_events.py OUT_DIR --events 1000000 [--nodes 50] [--seed 1] [--jobs 2]

Each run is a connected random topology of ``--nodes`` nodes with mixed link
classes. The story of every run: all nodes start at t=0; the spanning tree
forms (some nodes pass through an intermediate root first); the snake forms
(some nodes first learn a wrong descending key); the root is killed a third of
the way in (every node re-roots, every descending entry is cleared and
re-learned, a split network gets one root per component); later a link's
shaping is changed (a disruption that changes nothing). Throughout, nodes
bootstrap every ~5 s (``bootstrap_sent`` + ``bootstrap_accepted`` along the
path), report ``frame_stats`` every 10 s per (direction, frame type, link
class), and ping random pairs. About 85 % of the lines are bootstrap and
frame_stats events, as in real runs.

The generator knows the true convergence instants of its story and writes
them to ``meta.observer`` in the in-process observer's format
(``tree_converged_s``, ``snake_converged_s``, ``root_kill.tree_reconverged_s``,
...), so tests can check the pipeline against ground truth.
``bad_lines`` appends malformed lines (with known reasons) to one event file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import networkx as nx

CLASSES = ("lan", "multicast", "remote", "bluetooth")  # contract/classes.yaml
CLASS_BYTES = {"lan": 1.0, "multicast": 1.1, "remote": 1.2, "bluetooth": 0.6}
STATS_INTERVAL_S = 10.0
BOOTSTRAP_INTERVAL_S = 5.0
EVENTS_PER_NODE_S = 1.55  # measured from the generator's own mix; used to size runs

#: (line, reason) pairs appended by ``bad_lines``; reasons as in contract.dataset.Reason.
BAD_LINES = [
    ("this is not json", "not_json"),
    ("", "blank_line"),
    ("[1, 2, 3]", "not_object"),
    ('{"v": 1, "event": "peer_up"}', "missing_field"),
    ('{"v": 2, "event": "peer_up", "run_id": "R", "node": "K", "node_name": "x", "mono_s": 1.0, "wall_ts": 1.0}',
     "unknown_version"),
    ('{"v": 1, "event": "teleported", "run_id": "R", "node": "K", "node_name": "x", "mono_s": 1.0, "wall_ts": 1.0}',
     "unknown_event"),
    ('{"v": 1, "event": "peer_up", "run_id": "R", "node": "K", "node_name": "x", "mono_s": "soon", "wall_ts": 1.0}',
     "wrong_type"),
    ('{"v": 1, "event": "peer_up", "run_id": "R", "node": "K", "node_name": "x", "mono_s": 1.0, "wall_ts": 1.0, '
     '"port": 1, "peer": "not-a-key", "link_class": "lan"}', "bad_value"),
    ('{"v": 1, "event": "peer_down", "run_id": "R", "node": "K", "node_name": "x", "mono_s": 1.0, "wall_ts": 1.0, '
     '"port": 1, "peer": "K", "reason": null}', "null_field"),
    ('{"v": 1, "event": "node_stopping", "run_id": "OTHER", "node": "K", "node_name": "x", "mono_s": 1.0, '
     '"wall_ts": 1.0, "reason": "x"}', "run_id_mismatch"),
]


class _Run:
    """Builds one run's lines in memory, then writes the directory."""

    def __init__(self, run_id: str, n_nodes: int, duration_s: float, seed: int, variant: str) -> None:
        self.rng = rng = random.Random(seed)
        self.run_id, self.duration_s, self.variant = run_id, duration_s, variant
        self.wall0 = 1_700_000_000.0 + seed
        self.names = [f"n{i:03d}" for i in range(n_nodes)]
        self.key = {n: "%064x" % rng.getrandbits(256) for n in self.names}
        g = nx.random_labeled_tree(n_nodes, seed=seed) if n_nodes > 1 else nx.empty_graph(1)
        g = nx.relabel_nodes(g, dict(enumerate(self.names)))
        for _ in range(n_nodes // 2):  # extra edges: average degree ~3
            a, b = rng.sample(self.names, 2) if n_nodes > 1 else (self.names[0], self.names[0])
            if a != b:
                g.add_edge(a, b)
        self.classes = ["lan", "multicast"] if seed % 2 else list(CLASSES)
        for a, b in g.edges:
            g.edges[a, b]["cls"] = rng.choice(self.classes)
        self.g = g
        self.lines: dict[str, list[tuple[float, str]]] = {n: [] for n in self.names}
        self.desc: dict[str, str | None] = {}
        self.actions: list[dict] = []
        self.pings: list[dict] = []
        self.ping_samples: dict[str, list[tuple[int, int]]] = {"start": [], "kill": []}
        self.ping_counts: dict[str, list[int]] = {"start": [0, 0], "kill": [0, 0]}

    # ----------------------------------------------------------------- lines
    def ev(self, node: str, t: float, event: str, extra: str) -> None:
        self.lines[node].append(
            (t, f'{{"v":1,"event":"{event}","run_id":"{self.run_id}","node":"{self.key[node]}",'
                f'"node_name":"{node}","mono_s":{t:.6f},"wall_ts":{self.wall0 + t:.6f}{extra}}}')
        )

    def act(self, t: float, action: str, target: str | None, detail: dict | None) -> None:
        self.actions.append({"run_id": self.run_id, "mono_s": round(t, 6), "wall_ts": round(self.wall0 + t, 6),
                             "action": action, "target": target, "detail": detail})

    @staticmethod
    def q(x: str | None) -> str:
        return "null" if x is None else f'"{x}"'

    # ----------------------------------------------------------------- story
    def converge(self, live: nx.Graph, t0: float, after_kill: bool) -> tuple[float, float]:
        """Emit root/parent/descending changes that converge ``live``; return true (tree, snake) instants."""
        rng, tree_at, snake_at = self.rng, t0, t0
        for comp in nx.connected_components(live):
            members = sorted(comp, key=lambda n: self.key[n])
            top = members[-1]
            dist = nx.single_source_shortest_path_length(live.subgraph(comp), top)
            parent = {n: p for p, n in nx.bfs_edges(live.subgraph(comp), top)}
            for i, n in enumerate(members):
                if n != top:
                    t = t0 + (0.6 if after_kill else 0.05) + 0.02 * dist[n] + rng.uniform(0, 0.4)
                    higher = [m for m in members[i + 1:-1]]
                    if higher and rng.random() < 0.3:  # an intermediate root first
                        mid = rng.choice(higher)
                        self.ev(n, t - 0.03, "root_changed",
                                f',"root":"{self.key[mid]}","root_seq":1,"prev_root":{self.q(None)}')
                    self.ev(n, t, "root_changed", f',"root":"{self.key[top]}","root_seq":{2 if after_kill else 1},'
                                                  f'"prev_root":null')
                    self.ev(n, t, "parent_changed", f',"parent":"{self.key[parent[n]]}","prev_parent":null')
                    self.ev(n, t, "coords_changed", f',"coords":[{",".join(["1"] * dist[n])}]')
                    tree_at = max(tree_at, t)
                    root_t = t
                else:
                    root_t = t0
                    if after_kill:  # the new root notices it is root
                        root_t = t0 + 0.5
                        self.ev(n, root_t, "root_changed", f',"root":"{self.key[n]}","root_seq":3,"prev_root":null')
                        self.ev(n, root_t, "parent_changed", f',"parent":null,"prev_parent":null')
                        tree_at = max(tree_at, root_t)
                want = self.key[members[i - 1]] if i > 0 else None
                had = self.desc.get(n)
                if after_kill and had is not None:  # §6.7: a root change clears the descending entry
                    self.ev(n, root_t + 0.2, "descending_changed", f',"descending":null,"prev":"{had}"')
                    self.desc[n] = None
                    snake_at = max(snake_at, root_t + 0.2)
                if want is None:
                    continue
                t = root_t + rng.uniform(0.5, 6.0)
                if not after_kill and i > 1 and rng.random() < 0.3:  # a wrong (farther) lower key first
                    self.ev(n, t - 0.4, "descending_changed",
                            f',"descending":"{self.key[members[0]]}","prev":null')
                self.ev(n, t, "descending_changed", f',"descending":"{want}","prev":null')
                self.desc[n] = want
                snake_at = max(snake_at, t)
        return tree_at, max(tree_at, snake_at)

    def traffic(self, live_at: list[tuple[float, float, nx.Graph]]) -> None:
        """Bootstraps and frame_stats for every node while it is alive."""
        rng = self.rng
        for start, end, live in live_at:
            for n in live.nodes:
                nbrs = list(live.neighbors(n))
                t = start + rng.uniform(0, BOOTSTRAP_INTERVAL_S)
                while t < end:
                    seq = int((self.wall0 + t) * 1000)
                    self.ev(n, t, "bootstrap_sent", f',"seq":{seq},"port":{rng.randint(1, max(1, len(nbrs)))}')
                    hop, tt = n, t
                    for _ in range(rng.randint(1, 4)):
                        nxt = list(live.neighbors(hop))
                        if not nxt:
                            break
                        hop, tt = rng.choice(nxt), tt + 0.003
                        if rng.random() < 0.03:
                            self.ev(hop, tt, "bootstrap_rejected", f',"origin":"{self.key[n]}","reason":"replay"')
                            break
                        self.ev(hop, tt, "bootstrap_accepted",
                                f',"origin":"{self.key[n]}","from_port":1,"to_port":{rng.choice(["null", "2"])}')
                    t += BOOTSTRAP_INTERVAL_S + rng.uniform(0, 1.0)
                cls_of = {live.edges[n, m]["cls"] for m in nbrs}
                t = start + STATS_INTERVAL_S
                while t <= end:
                    for cls in sorted(cls_of):
                        for direction in ("sent", "received"):
                            for ftype, per_s, size in (("keepalive", 0.33, 10), ("tree_announcement", 0.05, 180),
                                                       ("bootstrap", 0.4, 150)):
                                if ftype == "tree_announcement" and rng.random() < 0.8:
                                    continue  # steady state: announcements are rare
                                frames = max(1, int(per_s * STATS_INTERVAL_S * rng.uniform(0.5, 1.5)))
                                nbytes = int(frames * size * CLASS_BYTES[cls])
                                self.ev(n, t, "frame_stats",
                                        f',"interval_s":{STATS_INTERVAL_S},"direction":"{direction}",'
                                        f'"frame_type":"{ftype}","link_class":"{cls}","frames":{frames},'
                                        f'"bytes":{nbytes}')
                    t += STATS_INTERVAL_S

    def ping_round(self, live: nx.Graph, t: float, phase: str, pairs: int) -> None:
        rng = self.rng
        comps = [sorted(c) for c in nx.connected_components(live) if len(c) > 1]
        cands = [(a, b) for c in comps for a in c for b in c if a != b]
        for a, b in rng.sample(cands, min(pairs, len(cands))):
            path = nx.shortest_path(live, a, b)
            shortest = len(path) - 1
            received = rng.random() < 0.97
            links = shortest + (rng.choice([0, 0, 0, 1, 2]) if shortest > 1 else 0)
            hops = links + 1 if received else None
            rtt = round(2 * links * rng.uniform(0.8, 1.6), 4) if received else None
            self.ping_counts[phase][0] += 1
            self.ping_counts[phase][1] += received
            if received:
                self.ping_samples[phase].append((links, shortest))
            self.ev(a, t, "ping_result", f',"target":"{self.key[b]}","mode":"snek","received":'
                                         f'{"true" if received else "false"},"rtt_ms":{self.q(rtt) if rtt is None else rtt},'
                                         f'"hops":{"null" if hops is None else hops}')
            self.pings.append({
                "run_id": self.run_id, "sender": a, "sender_key": self.key[a], "target": b,
                "target_key": self.key[b], "mode": "snek", "sent_mono_s": round(t, 6),
                "sent_wall_ts": round(self.wall0 + t, 6), "received": received, "rtt_ms": rtt, "hops": hops,
                "shortest_links": shortest, "link_classes": [live.edges[u, v]["cls"] for u, v in zip(path, path[1:])],
            })

    def build(self, pairs: int) -> dict:
        g, d = self.g, self.duration_s
        for i, n in enumerate(self.names):
            self.ev(n, 0.0, "node_started", f',"listen":[],"variant":"{self.variant}","version":"0.1.0"')
            for port, m in enumerate(sorted(g.neighbors(n)), start=1):
                self.ev(n, 0.0, "peer_up", f',"port":{port},"peer":"{self.key[m]}","link_class":"{g.edges[n, m]["cls"]}"')
        self.act(0.0, "up", None, {"nodes": len(self.names)})
        tree1, snake1 = self.converge(g, 0.0, after_kill=False)
        self.act(snake1 + 0.1, "converged", None, {"tree_converged_s": tree1, "snake_converged_s": snake1})
        self.ping_round(g, snake1 + 0.1, "start", pairs)
        t_kill = max(snake1 + 7.0, d / 3)
        victim = max(self.names, key=lambda n: self.key[n])
        self.act(t_kill, "kill_root", victim, {"key": self.key[victim]})
        self.ev(victim, t_kill, "node_stopping", ',"reason":"killed"')
        live = g.copy()
        live.remove_node(victim)
        for m in g.neighbors(victim):
            self.ev(m, t_kill + 4.0, "peer_down", f',"port":1,"peer":"{self.key[victim]}","reason":"keepalive timeout"')
        tree2, snake2 = self.converge(live, t_kill, after_kill=True)
        self.act(snake2 + 0.1, "converged", None, {"tree_converged_s": tree2 - t_kill, "snake_converged_s": snake2 - t_kill})
        self.ping_round(live, snake2 + 0.1, "kill", pairs)
        t_change = max(snake2 + 5.0, 2 * d / 3)
        if t_change >= d:
            raise ValueError(f"duration_s={d} is too short for this story (needs > {t_change:.1f})")
        a, b = next(iter(live.edges))
        self.act(t_change, "link_change", f"{a}--{b}", {"class": "remote"})
        self.traffic([(0.0, t_kill, g), (t_kill, d, live)])
        for n in live.nodes:
            self.ev(n, d, "node_stopping", ',"reason":"run_finished"')
        self.act(d, "down", None, None)

        def summary(phase: str) -> dict:
            ratios = [links / s for links, s in self.ping_samples[phase] if s > 0]
            return {"mean": round(statistics.fmean(ratios), 4) if ratios else None,
                    "median": round(statistics.median(ratios), 4) if ratios else None,
                    "samples": len(ratios)}

        return {
            "tree_converged_s": tree1, "snake_converged_s": snake1,
            "pings": {"sent": self.ping_counts["start"][0], "delivered": self.ping_counts["start"][1]},
            "stretch": summary("start"),
            "root_kill": {
                "killed": self.key[victim], "killed_name": victim,
                "tree_reconverged_s": tree2 - t_kill, "snake_reconverged_s": snake2 - t_kill,
                "pings": {"sent": self.ping_counts["kill"][0], "delivered": self.ping_counts["kill"][1]},
                "stretch": summary("kill"),
            },
            "link_change": {"at_s": t_change, "tree_converged_s": 0.0, "snake_converged_s": 0.0},
            "synthetic": True,
        }

    def write(self, root: Path, observer: dict, topology: str) -> int:
        (root / "events").mkdir(parents=True, exist_ok=True)
        total = 0
        for n, lines in self.lines.items():
            lines.sort(key=lambda x: x[0])
            (root / "events" / f"{n}.jsonl").write_text("".join(line + "\n" for _, line in lines))
            total += len(lines)
        dump = lambda rows: "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)  # noqa: E731
        (root / "actions.jsonl").write_text(dump(sorted(self.actions, key=lambda a: a["mono_s"])))
        (root / "pings.jsonl").write_text(dump(self.pings))
        links = [{"a": a, "b": b, "class": self.g.edges[a, b]["cls"]} for a, b in self.g.edges]
        (root / "topology.json").write_text(json.dumps(
            {"name": topology, "nodes": [{"name": n} for n in self.names], "links": links}, indent=1))
        meta = {
            "run_id": self.run_id, "backend": "inproc", "variant": self.variant, "topology": topology,
            "seed": self.rng.randint(0, 1 << 30), "clock": "virtual", "link_delay_ms": 1.0,
            "nodes": self.key, "links": [dict(lk, shaping_backend="synthetic") for lk in links],
            "versions": {"snekbed": "0.1.0", "generator": "gen_events"}, "started_wall_ts": self.wall0,
            "observer": observer,
        }
        (root / "meta.json").write_text(json.dumps(meta, indent=1))
        return total


def generate_run(root: Path, run_id: str, *, nodes: int = 20, duration_s: float = 120.0, seed: int = 0,
                 variant: str = "snek", topology: str | None = None, pairs: int = 40) -> int:
    """Write one synthetic run directory at ``root``; return the number of event lines."""
    run = _Run(run_id, nodes, duration_s, seed, variant)
    observer = run.build(pairs)
    return run.write(Path(root), observer, topology or f"random-{nodes}")


def bad_lines(path: Path, run_id: str, node_key: str) -> list[tuple[int, str]]:
    """Append BAD_LINES to event file ``path``; return [(line_no, expected reason)]."""
    text = path.read_text()
    first = text.count("\n") + 1
    out, added = [], []
    for i, (line, reason) in enumerate(BAD_LINES):
        added.append(line.replace('"R"', f'"{run_id}"').replace('"K"', f'"{node_key}"'))
        out.append((first + i, reason))
    path.write_text(text + "".join(a + "\n" for a in added))
    return out


def _one(args: tuple[str, str, int, float, int, str]) -> int:
    root, run_id, nodes, duration_s, seed, variant = args
    return generate_run(Path(root), run_id, nodes=nodes, duration_s=duration_s, seed=seed, variant=variant)


def generate_dataset(out: Path, events: int, *, nodes: int = 50, seed: int = 1, jobs: int = 2,
                     per_run: int = 250_000) -> int:
    """Write at least ``events`` event lines (a few % more at most) as ceil(events / per_run) runs
    under ``out``, plus one shorter run when the stories came out short; return the count."""
    runs = max(1, math.ceil(events / per_run))
    duration_s = max(60.0, events / runs / nodes / EVENTS_PER_NODE_S)
    variants = ("snek", "snek-legacy")
    tasks = [(str(out / f"run-{i:04d}"), f"syn{seed}-{i:04d}", nodes, duration_s, seed * 10_000 + i,
              variants[i % 2]) for i in range(runs)]
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        total = sum(pool.map(_one, tasks))
    i = runs
    while total < events:  # each story's length varies with its random topology: top up with one more run
        missing = events - total
        total += _one((str(out / f"run-{i:04d}"), f"syn{seed}-{i:04d}", nodes,
                       max(60.0, 1.05 * missing / nodes / EVENTS_PER_NODE_S), seed * 10_000 + i, variants[i % 2]))
        i += 1
    return total


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--events", type=int, default=1_000_000, help="approximate number of event lines")
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="runs generated in parallel")
    a = p.parse_args(argv)
    t = time.perf_counter()
    n = generate_dataset(a.out, a.events, nodes=a.nodes, seed=a.seed, jobs=a.jobs)
    print(f"wrote {n:,} event lines under {a.out} in {time.perf_counter() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
