"""Issue 2 benchmarks: next-hop decision cost, and in-process convergence at scale; issue 14: the
compiled core against the pure-Python one.

    .venv/bin/python benchmarks/core_bench.py            # everything (grid4-2025 takes minutes)
    .venv/bin/python benchmarks/core_bench.py --quick    # next-hop table + graph-250 only
    .venv/bin/python benchmarks/core_bench.py --compare  # compiled vs pure core, side by side (--quick too)

Targets: <= 5 us per next-hop decision and <= 2x growth from 100 to 10 000
table entries; grid4-2025 converged (virtual clock) in <= 60 s wall and <= 2 GB.

``--compare`` runs the measurements twice in child processes, once on the core this install runs
(compiled by mypyc when ``pip install`` could) and once with ``SNEKBED_PURE_CORE=1`` (the ``.py``
files), ``--rounds`` times each, alternating, and keeps each side's best (lowest) figure: the CPU
time per forwarded frame (transit cache hit, and decode + decision + encode), per next-hop decision at
100 and 10 000 table entries, and the in-process sim's wall time (its own ``wall_s``, start-up excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import node.core  # noqa: E402
from node.core import wire  # noqa: E402
from node.core.crypto import Identity, derive_seed  # noqa: E402
from node.core.router import Router  # noqa: E402
from node.core.snek import Entry, next_hop_reference  # noqa: E402
from node.core.state import frame_bytes  # noqa: E402
from node.core.types import INITIAL_WATERMARK, Announcement, Frame, FrameType, Root  # noqa: E402

TOPOLOGIES = REPO.parent / "shared" / "topologies" / "pinecone"


def _router_with_table(n_entries: int, rng: random.Random) -> Router:
    """A router with 4 peers (one of them its parent, 6 hops from the root) and n table entries."""
    ids = [Identity(derive_seed("bench", i)) for i in range(12)]
    ids.sort(key=lambda i: i.public_key)
    root, me, peers = ids[-1], ids[0], ids[1:5]
    r = Router(me, 0.0, broadcasts=False)
    chain = [root, *ids[5:10]]
    for j, p in enumerate(peers):
        port = r.add_peer(p.public_key, 3, 0.0)
        ann = Announcement(root.public_key, 1)
        for k, hop in enumerate([*chain[: 2 + j], p]):
            ann = wire.sign_announcement_for_port(ann, hop, 1 + k)
        r.frame_received(port, wire.announcement_frame(ann), 0.0)
    r.outbox.clear()
    r.events.clear()
    root_now = r.root
    for _ in range(n_entries):
        key = rng.randbytes(32)
        r.table.install(Entry(key, rng.choice(r.up_ports()), -1, 0.0, root_now, rng.randrange(1, 10**12)))
    return r


def bench_next_hop(sizes: list[int], decisions: int = 20_000, reference: bool = True) -> list[dict]:
    rows = []
    for n in sizes:
        rng = random.Random(n)
        r = _router_with_table(n, rng)
        dests = [rng.randbytes(32) for _ in range(decisions)]
        now = 1.0
        for d in dests[:2000]:  # build the index and warm caches before timing
            r.snek_next_hop(d, False, INITIAL_WATERMARK, now)
        t = time.process_time()
        for d in dests:
            r.snek_next_hop(d, False, INITIAL_WATERMARK, now)
        fast = (time.process_time() - t) / decisions * 1e6
        t = time.process_time()
        for d in dests[:200]:
            r.snek_next_hop(d, True, INITIAL_WATERMARK, now)
        boot = (time.process_time() - t) / 200 * 1e6
        ref_n = min(decisions, 200) if reference else 0
        t = time.process_time()
        for d in dests[:ref_n]:
            next_hop_reference(own=r.key, dest=d, bootstrap=False, wm=INITIAL_WATERMARK, parent=r.parent,
                               root_key=r.root.key, peers=r.peers, table=r.table, now=now)
        ref = (time.process_time() - t) / ref_n * 1e6 if ref_n else float("nan")
        rows.append({"entries": n, "us_per_decision": fast, "us_bootstrap": boot, "us_reference_scan": ref})
    return rows


def _transit_router() -> tuple[Router, list[int], list[Identity]]:
    """B with five peers, ROOT's tree announced through each (B's parent: the first) and a bootstrap from each."""
    ids = sorted((Identity(derive_seed("bench-transit", i)) for i in range(6)), key=lambda i: i.public_key)
    root, me = ids[-1], ids[2]
    peers = [ids[0], ids[1], ids[3], ids[4], root]
    r = Router(me, 100.0, broadcasts=False)
    ports = []
    for k, ident in enumerate(peers):
        port = r.add_peer(ident.public_key, 3, 100.0)
        assert port is not None
        ann = wire.sign_announcement_for_port(Announcement(root.public_key, 1, ()), root, 3 if ident is root else 10 + k)
        if ident is not root:
            ann = wire.sign_announcement_for_port(ann, ident, 3)
        r.frame_received(port, wire.announcement_frame(ann), 100.0)
        payload = wire.make_signed_root_payload(ident, 1_700_000_000_000, root.public_key, 1)
        r.frame_received(port, Frame(FrameType.BOOTSTRAP, destination_key=ident.public_key,
                                     payload=wire.encode_signed_root_payload(payload)), 100.0)  # fmt: skip
        ports.append(port)
    r.drain()
    return r, ports, peers


def bench_forwarding(frames: int = 20_000, reps: int = 5) -> dict:
    """CPU per transit Traffic frame at a router with five peers, 100 B payloads, in batches of 32 as a
    stream reader hands them over, outputs taken with ``drain()`` and encoded with ``frame_bytes`` (what
    the shell does): through the transit cache (``bytes_received``, every frame a hit) and through the
    full path (``decode_frame`` + ``frame_received`` + encode). SNEK-routed frames for the peers' keys
    and tree-routed ones for their coordinates, from every other peer. Best of ``reps``."""
    r, ports, peers = _transit_router()
    raws: list[tuple[int, bytes]] = []
    for i, src in enumerate(peers):
        for j, dst in enumerate(peers):
            if i == j:
                continue
            f = Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dst.public_key, source_key=src.public_key,
                      source_coords=(10 + i, 3), payload=bytes(100))  # fmt: skip
            raws.append((ports[i], wire.encode_frame(f)))
            if j < len(peers) - 1:  # the last is the root, whose coordinates are empty
                f = Frame(FrameType.TRAFFIC, hop_limit=10, destination_key=dst.public_key, source_key=src.public_key,
                          destination_coords=(10 + j,), source_coords=(10 + i, 3), payload=bytes(100))  # fmt: skip
                raws.append((ports[i], wire.encode_frame(f)))
    batches = [(port, [(3, raw)] * 32) for port, raw in raws]
    now = 100.5
    decode = wire.decode_frame

    def fast() -> int:
        n = 0
        while n < frames:
            for port, batch in batches:
                r.bytes_received(port, batch, now)
                for _, item in r.drain().sends:
                    frame_bytes(item)
                n += len(batch)
        return n

    def full() -> int:
        n = 0
        while n < frames:
            for port, batch in batches:
                for _, raw in batch:
                    r.frame_received(port, decode(raw), now)
                for _, item in r.drain().sends:
                    frame_bytes(item)
                n += len(batch)
        return n

    out = {}
    for name, run in (("cache_hit", fast), ("full_path", full)):
        run()  # warm up (and fill the transit cache)
        best = float("inf")
        for _ in range(reps):
            t = time.process_time()
            n = run()
            best = min(best, (time.process_time() - t) / n * 1e6)
        out[f"us_per_frame_{name}"] = best
    assert r.fast_forwards > 0
    return out


def big_topology(nodes: int) -> Path:
    """A generated internet-like graph of ``nodes`` nodes, mean degree 6 (``snekbed generate preferential``),
    cached under benchmarks/.data."""
    path = REPO / "benchmarks" / ".data" / f"preferential-{nodes}-d6-s1.yaml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "orchestrator.cli", "generate", "preferential", "--nodes", str(nodes),
                        "--mean-degree", "6", "--seed", "1", "-o", str(path)], check=True, cwd=REPO)
    return path


def bench_sim(name: str, timeout_s: float, path: Path | None = None) -> dict:
    path = path or TOPOLOGIES / f"{name}.txt"
    cmd = [sys.executable, "-m", "orchestrator.cli", "sim", str(path), "--json", "--pairs", "100"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: ran, not converged (its JSON says so)
        return {"topology": name, "error": proc.stderr[-500:]}
    out = json.loads(proc.stdout)
    return {
        "topology": name,
        "nodes": out["nodes"],
        "wall_s": wall,
        "sim_wall_s": out["wall_s"],
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mb": after.ru_maxrss / 1024,
        "tree_s": out["tree_converged_s"],
        "snake_s": out["snake_converged_s"],
        "pings": f"{out['pings']['delivered']}/{out['pings']['sent']}",
        "frames": out["frames_delivered"],
    }


# ---------------------------------------------------------------- --compare: compiled vs pure core

#: (key, label, unit) of the figures --compare shows, in order; lower is better for all of them
COMPARED = [
    ("us_per_frame_cache_hit", "forwarding, transit cache hit", "µs CPU / frame"),
    ("us_per_frame_full_path", "forwarding, decode + decision + encode", "µs CPU / frame"),
    ("next_hop_100", "next-hop decision, 100 table entries", "µs CPU"),
    ("next_hop_10000", "next-hop decision, 10 000 table entries", "µs CPU"),
    ("sim_graph-250", "sim graph-250 (248 nodes), converged", "s wall"),
    ("sim_graph-250_cpu", "sim graph-250, whole process", "s CPU"),
    ("sim_grid4-2025", "sim grid4-2025 (2025 nodes), converged", "s wall"),
    ("sim_grid4-2025_cpu", "sim grid4-2025, whole process", "s CPU"),
    ("sim_grid4-2025_rss", "sim grid4-2025, peak memory", "MB RSS"),
    ("sim_big", "sim generated graph (--big N nodes), converged", "s wall"),
    ("sim_big_cpu", "sim generated graph, whole process", "s CPU"),
    ("sim_big_rss", "sim generated graph, peak memory", "MB RSS"),
]


def measure_core(quick: bool, reps: int, big: int = 0) -> dict:
    """Every figure of :data:`COMPARED` on the core this process runs (best of ``reps`` where cheap);
    ``big``: also a generated graph of that many nodes."""
    out: dict = {"core": node.core.implementation()}
    for _ in range(reps):
        for row in bench_next_hop([100, 10_000], reference=False):
            key = f"next_hop_{row['entries']}"
            out[key] = min(out.get(key, float("inf")), row["us_per_decision"])
    out.update(bench_forwarding(reps=reps))
    sims: list[tuple[str, Path | None]] = [("graph-250", None)] + ([] if quick else [("grid4-2025", None)])
    if big:
        sims.append(("big", big_topology(big)))
    for name, path in sims:
        sim = bench_sim(name, 7200, path)  # each sim is its own child: its peak RSS is its own
        if "error" in sim:
            raise SystemExit(f"sim {name} failed on the {out['core']} core: {sim['error']}")
        out[f"sim_{name}"], out[f"sim_{name}_cpu"] = sim["sim_wall_s"], sim["cpu_s"]
        out[f"sim_{name}_rss"] = sim["peak_rss_mb"]
        if name == "big":
            out["big_nodes"], out["big_pings"] = sim["nodes"], sim["pings"]
    return out


def compare(quick: bool, rounds: int, reps: int, big: int = 0, big_compiled_only: bool = False) -> dict[str, dict]:
    """Run :func:`measure_core` in child processes, the installed core then the pure one, ``rounds`` times
    alternating; keep each side's best figure. ``big``: also a generated graph of that many nodes (in the
    first round only; on the compiled core alone with ``big_compiled_only``)."""
    sides: dict[str, dict] = {"compiled": {}, "pure": {}}
    for round_no in range(rounds):
        for side, best in sides.items():
            env = {k: v for k, v in os.environ.items() if k != node.core.PURE_CORE_ENV}
            if side == "pure":
                env[node.core.PURE_CORE_ENV] = "1"
            n_big = big if round_no == 0 and not (big_compiled_only and side == "pure") else 0
            argv = [sys.executable, __file__, "--measure-core", "--reps", str(reps), *(["--quick"] if quick else []),
                    "--big", str(n_big)]
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
            if proc.returncode != 0:
                raise SystemExit(f"measuring the {side} core failed:\n{proc.stderr[-3000:]}")
            got = json.loads(proc.stdout)
            if side == "compiled" and got["core"] != "compiled (mypyc)":
                raise SystemExit("the compiled core is not installed here (pip install -e . builds it; "
                                 "docs/compiled-core.md): nothing to compare")  # fmt: skip
            for key, value in got.items():
                best[key] = value if isinstance(value, str) else min(best.get(key, float("inf")), value)
    return sides


def print_comparison(con: Console, sides: dict[str, dict], rounds: int) -> None:
    t = Table(title=f"node/core compiled by mypyc vs pure Python (best of {rounds} alternating runs each)")
    for c in ("measure", "unit", "pure Python", "compiled", "speed-up"):
        t.add_column(c, justify="left" if c in ("measure", "unit") else "right")
    pure, comp = sides["pure"], sides["compiled"]
    for key, label, unit in COMPARED:
        if key in pure and key in comp:
            t.add_row(label, unit, f"{pure[key]:.4g}", f"{comp[key]:.4g}", f"{pure[key] / comp[key]:.2f}x")
        elif key in comp:  # --big-compiled-only: the pure core was not run on the big graph
            t.add_row(label, unit, "-", f"{comp[key]:.4g}", "")
    growth = {side: sides[side]["next_hop_10000"] / sides[side]["next_hop_100"] for side in ("pure", "compiled")
              if "next_hop_100" in sides[side] and "next_hop_10000" in sides[side]}
    if len(growth) == 2:
        t.add_row("next-hop growth, 100 -> 10 000 entries", "ratio (target <= 2)", f"{growth['pure']:.2f}",
                  f"{growth['compiled']:.2f}", "")
    if "big_nodes" in comp:
        t.add_row("  (generated graph: nodes, pings delivered)", "", f"{pure.get('big_pings', '-')}",
                  f"{comp['big_nodes']} nodes, {comp['big_pings']}", "")
    t.caption = ("CPU figures are process_time per operation in one process; sims are `snekbed sim --json --pairs 100`, "
                 "seed 0: their own wall_s (start-up excluded), the whole process's CPU time and peak RSS (the "
                 "largest child so far: sims run smallest first). Targets: next hop <= 5 µs and <= 2x growth; "
                 "grid4-2025 <= 60 s wall, <= 2 GB; a 10 000-node graph converges in <= 8 GB.")
    con.print(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip grid4-2025")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", action="store_true", help="the compiled core vs the pure-Python one, side by side")
    ap.add_argument("--rounds", type=int, default=2, help="--compare: alternating runs per core (best kept)")
    ap.add_argument("--reps", type=int, default=3, help="--compare: repetitions of each CPU measurement (best kept)")
    ap.add_argument("--measure-core", action="store_true", help=argparse.SUPPRESS)  # --compare's child
    ap.add_argument("--big", type=int, default=0, metavar="N",
                    help="--compare: also simulate a generated preferential graph of N nodes (e.g. 10000)")
    ap.add_argument("--big-compiled-only", action="store_true",
                    help="--compare --big: run the big graph on the compiled core only (the pure core takes hours)")
    args = ap.parse_args()
    con = Console()
    if args.measure_core:
        print(json.dumps(measure_core(args.quick, args.reps, args.big)))
        return
    if args.compare:
        sides = compare(args.quick, args.rounds, args.reps, args.big, args.big_compiled_only)
        if args.json:
            print(json.dumps(sides))
        else:
            print_comparison(Console(width=max(con.width, 110)), sides, args.rounds)
        return
    nh = bench_next_hop([100, 1_000, 10_000])
    sims = [bench_sim("graph-250", 600)]
    if not args.quick:
        sims.append(bench_sim("grid4-2025", 1800))
    if args.json:
        print(json.dumps({"next_hop": nh, "sim": sims}))
        return
    t = Table(title="SNEK next-hop decision (indexed, §6.3 exact; CPU time per decision)")
    for c in ("table entries", "µs / decision (traffic)", "µs / decision (bootstrap)", "µs reference scan", "speed-up"):
        t.add_column(c, justify="right")
    for row in nh:
        t.add_row(str(row["entries"]), f"{row['us_per_decision']:.2f}", f"{row['us_bootstrap']:.2f}",
                  f"{row['us_reference_scan']:.1f}", f"{row['us_reference_scan'] / row['us_per_decision']:.0f}x")
    growth = nh[-1]["us_per_decision"] / nh[0]["us_per_decision"]
    t.caption = f"growth 100 -> 10 000 entries: {growth:.2f}x (target <= 2x); target <= 5 µs per decision"
    con.print(t)
    t = Table(title="In-process convergence, virtual clock (1 ms mean link delay, seed 0)")
    for c in ("topology", "nodes", "wall s", "cpu s", "peak RSS MB", "tree s", "snake s", "pings", "frames"):
        t.add_column(c, justify="right")
    for s in sims:
        if "error" in s:
            t.add_row(s["topology"], "error", s["error"][:60])
            continue
        t.add_row(s["topology"], str(s["nodes"]), f"{s['wall_s']:.1f}", f"{s['cpu_s']:.1f}", f"{s['peak_rss_mb']:.0f}",
                  str(s["tree_s"]), str(s["snake_s"]), s["pings"], str(s["frames"]))
    t.caption = ("Go reference, graph-250 in-process: tree 7.6 s, snake 40 s, ~3.5 MiB/node. "
                 "Targets: grid4-2025 <= 60 s wall, <= 2 GB.")
    con.print(t)


if __name__ == "__main__":
    main()
