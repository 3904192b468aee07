"""Frames per type and tree/snake events per protocol second in an in-process run (the settle-or-storm probe).

    PYTHONPATH=$PWD python benchmarks/storm_probe.py GRAPH.yaml --max-time 120 [--bucket 5]

Prints, per time bucket: frames sent per type, parent/root/coords/descending changes, and how many nodes have a
wrong descending entry (check_convergence). Not a test; a diagnostic.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import trio
import trio.testing

from node.core.variants import VariantSpec
from orchestrator.model.observe import check_convergence
from orchestrator.sessions.sim import _Sim
from orchestrator.sessions.sim import config_from_topology
from orchestrator.model.topology_loaders import load_topology

NAMES = {0: "keepalive", 1: "tree", 2: "bootstrap", 3: "traffic", 4: "wakeup"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("--max-time", type=float, default=120.0)
    ap.add_argument("--bucket", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", action="append", default=[], help="name=value (variant knobs)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--run-to", type=float, default=None, help="keep running to this protocol time after convergence")
    ap.add_argument("--boot-spread", type=float, default=0.0, help="InprocNetwork boot_spread_s (snekbed sim --boot-spread)")
    a = ap.parse_args()
    topo = load_topology(a.graph)
    kw = {}
    if a.knob:
        kw["variant"] = VariantSpec.of("snek", a.knob)
    cfg = config_from_topology(topo, seed=a.seed, max_time_s=a.max_time, pairs=0, boot_spread_s=a.boot_spread, **kw)
    sim = _Sim(cfg, None)
    net = sim.net
    B = a.bucket
    frames: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    events: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    per_node_parent: collections.Counter = collections.Counter()
    wrong: dict[int, tuple[int, int]] = {}

    def on_frame(node, direction, frame, cls, now):
        if direction == "sent":
            frames[int(now // B)][NAMES.get(int(frame.type), frame.type)] += 1

    prev = sim._on_event

    def on_event(node, kind, fields, now):
        events[int(now // B)][kind] += 1
        if kind == "parent_changed":
            per_node_parent[node.name] += 1
        prev(node, kind, fields, now)

    net.on_frame = on_frame
    net.on_event = on_event

    def sample(now):
        v = check_convergence(sim.live_graph(), sim.views())
        wrong[int(now // B)] = (len(v.wrong_root), len(v.wrong_descending))
        net.call_at(now + B, sample)

    async def go():
        net.start()
        net.call_at(B - 1e-6, sample)
        t0 = time.perf_counter()
        tree_s, snake_s = await sim.converge(net.now)
        if a.run_to is not None and net.now < a.run_to:
            await net.run_until(a.run_to)
        return tree_s, snake_s, time.perf_counter() - t0

    tree_s, snake_s, wall = trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))
    n = len(cfg.nodes)
    rows = []
    for b in sorted(set(frames) | set(events)):
        f, e = frames[b], events[b]
        rows.append({"t": b * B, **{k: f[k] for k in ("tree", "bootstrap", "wakeup", "traffic")},
                     "per_node_s": round(sum(f.values()) / n / B, 2),
                     "parent": e["parent_changed"], "root": e["root_changed"], "coords": e["coords_changed"],
                     "desc": e["descending_changed"], "wrong": wrong.get(b)})
    if a.json:
        print(json.dumps({"tree_s": tree_s, "snake_s": snake_s, "wall": wall, "rows": rows}))
    else:
        print(f"nodes {n} tree {tree_s} snake {snake_s} wall {wall:.1f}s links_refused {len(net.links_refused)}")
        hdr = ["t", "tree", "bootstrap", "wakeup", "traffic", "per_node_s", "parent", "root", "coords", "desc", "wrong"]
        print("\t".join(hdr))
        for r in rows:
            print("\t".join(str(r[h]) for h in hdr))
        print("top parent flappers:", per_node_parent.most_common(10))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
