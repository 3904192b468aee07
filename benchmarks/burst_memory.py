"""Where a simulation's memory goes during the wakeup-broadcast burst (issue 34), and what a change did to it.

The in-process network of ``snekbed sim`` (same configuration: boot spread, link classes, seed) is run to
``--until`` (past the t = 60 s burst, whether or not the snake has converged), sampling every ``--every``
protocol seconds from ``--from`` on: events queued (``InprocNetwork.queued_events``), frames in flight (the
heap's frame entries), frames delivered, the routers' wakeup-broadcast records (``Broadcasts.records``, §6.8:
one per node and source heard, kept 3 min), the bytes those records hold (``sys.getsizeof`` of the flat arrays and
the shared key index, or with ``--records dict`` of each router's dict and its values: the source keys are shared
with the frames and not counted), and resident memory. Then one summary row: peak RSS, wall time, frames,
records, bytes per record.

    .venv/bin/python benchmarks/burst_memory.py GRAPH.yaml --until 64 --out before.json
    .venv/bin/python benchmarks/burst_memory.py GRAPH.yaml --until 64 --records dict --out dict.json
    .venv/bin/python benchmarks/burst_memory.py GRAPH.yaml --until 64 --knob wakeup_broadcasts=0
    .venv/bin/python benchmarks/burst_memory.py GRAPH.yaml --tracemalloc 58.5 --until 61   # allocation sites
    .venv/bin/python benchmarks/burst_memory.py --compare before.json after.json           # side by side

``--tracemalloc T`` starts tracemalloc at protocol time T and prints the largest allocation sites still alive
at the end (slow: about 5x). ``--compare`` prints two summaries side by side with their ratios (before / after).
Not a test; a measurement (docs/performance.md, "The wakeup-broadcast burst").
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import trio
import trio.testing

from node.core.broadcast_records import DictRecords, FlatRecords
from node.core.variants import VariantSpec
from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S, InprocNetwork
from orchestrator.model.topology_loaders import load_topology
from orchestrator.sessions.sim import SimConfig, config_from_topology

MB = 1024 * 1024
_FRAME = 0  # InprocNetwork's heap entry kind of a frame in flight


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def records(net: InprocNetwork) -> tuple[int, int]:
    """(broadcast records, bytes they hold): each router's records (``Broadcasts.records``): a dict's table, values
    and their parts, or the flat arrays' buffers and the shared key index once (its keys are the frames')."""
    n = size = 0
    flat = False
    for node in net.nodes.values():
        recs = node.router.broadcasts.records
        n += len(recs)
        if isinstance(recs, FlatRecords):
            flat = True
            size += sum(sys.getsizeof(arr) for arr in (recs.seqs, recs.whens, recs.order))
            continue
        size += sys.getsizeof(recs.seen)
        size += sum(sys.getsizeof(v) for v in recs.seen.values())
    if flat:
        size += sys.getsizeof(net.keys.numbers) + sys.getsizeof(net.keys.keys)
    return n, size


def network(cfg: SimConfig) -> InprocNetwork:
    """The network ``snekbed sim`` builds from ``cfg`` (orchestrator.sessions.sim._Sim, without its observers)."""
    links = cfg.links
    if cfg.link_options is not None:
        links = [(*link, opts) for link, opts in zip(cfg.links, cfg.link_options)]
    return InprocNetwork(cfg.nodes, links, seed=cfg.seed, link_delay_ms=cfg.link_delay_ms, key_seeds=cfg.key_seeds,
                         shapers=cfg.shapers, variant=cfg.variant, variants=cfg.variants,
                         boot_spread_s=cfg.boot_spread_s, node_specs=cfg.node_specs)  # fmt: skip


def measure(a: argparse.Namespace) -> dict[str, Any]:
    topo = load_topology(a.graph)
    kw: dict[str, Any] = {"variant": VariantSpec.of("snek", a.knob)} if a.knob else {}
    cfg = config_from_topology(topo, seed=a.seed, boot_spread_s=DEFAULT_BOOT_SPREAD_S, **kw)
    net = network(cfg)
    if a.records == "dict":  # every router its own dict, as a TCP node (the layout before the flat one)
        for node in net.nodes.values():
            node.router.broadcasts.records = DictRecords(node.router.max_cached)
    samples: list[dict[str, Any]] = []
    wall0 = time.perf_counter()

    def sample(now: float) -> None:
        in_flight = sum(1 for e in net._heap if e[2] == _FRAME)
        n, size = records(net)
        samples.append({"t": round(now, 3), "queued": net.queued_events, "in_flight": in_flight,
                        "delivered": net.frames_delivered, "records": n, "records_mb": round(size / MB, 1),
                        "rss_mb": round(rss_mb(), 1), "wall_s": round(time.perf_counter() - wall0, 1)})  # fmt: skip
        if now + a.every <= a.until:
            net.call_at(now + a.every, sample)

    async def run() -> None:
        net.start()
        net.call_at(getattr(a, "from"), sample)
        if a.tracemalloc is not None:
            net.call_at(a.tracemalloc, lambda now: tracemalloc.start(4))
        await net.run_until(a.until)

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    wall = time.perf_counter() - wall0
    n, size = records(net)
    out: dict[str, Any] = {
        "graph": topo.name, "nodes": len(net.nodes), "links": len(net.links), "knobs": a.knob, "until": a.until,
        "records_layout": a.records,
        "wall_s": round(wall, 1), "frames_delivered": net.frames_delivered, "records": n,
        "records_mb": round(size / MB, 1), "bytes_per_record": round(size / n, 1) if n else None,
        "rss_mb": round(rss_mb(), 1), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_before": a.load_before, "load_after": Path("/proc/loadavg").read_text().split()[:3],
        "samples": samples,
    }  # fmt: skip
    if a.tracemalloc is not None:
        snap = tracemalloc.take_snapshot()
        out["tracemalloc"] = [{"mb": round(st.size / MB, 1), "blocks": st.count,
                               "where": [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in st.traceback]}
                              for st in snap.statistics("traceback")[:8]]  # fmt: skip
    return out


def table(rows: list[list[Any]], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def show(doc: dict[str, Any]) -> None:
    print(f"{doc['graph']} ({doc['nodes']} nodes, {doc['links']} links), knobs {doc['knobs'] or 'none'}, to t = {doc['until']} s")
    cols = ["t", "queued", "in_flight", "delivered", "records", "records_mb", "rss_mb", "wall_s"]
    print(table([[s[c] for c in cols] for s in doc["samples"]], cols))
    keys = ["wall_s", "frames_delivered", "records", "records_mb", "bytes_per_record", "rss_mb", "peak_rss_mb"]
    print(table([[doc[k] for k in keys]], keys))
    print(f"load average before {doc['load_before']}, after {doc['load_after']}")
    for st in doc.get("tracemalloc", []):
        print(f"{st['mb']:8.1f} MB {st['blocks']:9d} blocks  " + " <- ".join(reversed(st["where"])))


def burst(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with what happened between its first and last sample: RSS growth and wall time (the burst's own)."""
    first, last = doc["samples"][0], doc["samples"][-1]
    return doc | {"rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1),
                  "sampled_wall_s": round(last["wall_s"] - first["wall_s"], 1)}  # fmt: skip


def compare(before: dict[str, Any], after: dict[str, Any]) -> None:
    keys = ["peak_rss_mb", "rss_growth_mb", "records_mb", "bytes_per_record", "wall_s", "sampled_wall_s",
            "frames_delivered", "records"]
    before, after = burst(before), burst(after)
    rows = []
    for k in keys:
        b, x = before[k], after[k]
        ratio = f"{b / x:.2f}x" if isinstance(b, (int, float)) and isinstance(x, (int, float)) and x else ""
        rows.append([k, b, x, ratio])
    first, last = before["samples"][0]["t"], before["samples"][-1]["t"]
    print(f"{before['graph']} to t = {before['until']} s (growth and sampled wall: t = {first} to {last} s): "
          f"before (load {before['load_before']}) vs after (load {after['load_before']})")  # fmt: skip
    print(table(rows, ["measure", "before", "after", "before / after"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph", nargs="?")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", action="append", default=[], help="KEY=VALUE, a variant knob for every node")
    ap.add_argument("--from", type=float, default=58.0, help="first sample (protocol s)")
    ap.add_argument("--until", type=float, default=64.0, help="run to this protocol time")
    ap.add_argument("--every", type=float, default=0.5, help="protocol seconds between samples")
    ap.add_argument("--records", choices=("flat", "dict"), default="flat",
                    help="the broadcast records' layout: flat (snekbed sim's) or a dict per router (a TCP node's)")
    ap.add_argument("--tracemalloc", type=float, default=None, metavar="T", help="trace allocations from T on")
    ap.add_argument("--out", type=Path, help="also write the measurement here (JSON)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        compare(*(json.loads(p.read_text()) for p in a.compare))
        return
    if not a.graph:
        ap.error("GRAPH is required (or --compare BEFORE AFTER)")
    a.load_before = Path("/proc/loadavg").read_text().split()[:3]
    doc = measure(a)
    show(doc)
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
