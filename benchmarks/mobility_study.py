"""Issue 30's study: how SNEK keeps up with nodes that move (docs/mobility.md, "The study").

For each speed, a topology of N walkers (random waypoint in a square, both radios) and one scenario (background
pings while they walk, the movement stopped, a check once the bound allows), run by ``snekbed ab`` with two arms
(default ``snek`` against ``snek-s0``) over S seeds, in process. Speed 0 is the same nodes standing still, each
at a point drawn once from ``--layout-seed`` (random waypoint always moves, so 0 m/s is written as static
positions). Prints one table: per speed, the radio link changes a second (mean over the runs), each arm's
delivery among connected pairs, all pings, median stretch and control bytes per node-second (medians over the
seeds), the paired difference b - a of delivery among connected pairs with its 95 % interval (pipeline.jobs.ab),
and how many runs' final checks passed. ``--json`` prints the rows instead.

    python benchmarks/mobility_study.py --nodes 100 --seeds 10 --speeds 0,1,3,10,20 --out /tmp/mobility-study
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCENARIO = """\
name: mobility-study
description: background pings while the nodes walk, then the movement stopped and the network checked
traffic: {{rate_per_s: {rate}, pairs: {pairs}, timeout_s: 5}}
steps:
  - {{action: wait, s: {walk_s}}}
  - {{action: mobility, movement: stop}}
  - {{action: check, after_s: {after_s}}}
"""


def topology(n: int, speed: float, area_m: float, walk_s: float, bt_m: float, lan_m: float, layout_seed: int) -> str:
    lines = [f"name: walkers-{n}-{speed:g}mps", f"movement: {{tick_s: 1, duration_s: {walk_s:g}}}", "radios:",
             f"  bluetooth: {{range_m: {bt_m:g}}}", f"  lan: {{range_m: {lan_m:g}, class: lan}}", "nodes:"]
    rng = random.Random(layout_seed)
    for i in range(n):
        if speed > 0:
            lo, hi = 0.5 * speed, 1.5 * speed  # a spread around the nominal speed, as phones walk unevenly
            mob = (f"{{model: random_waypoint, area_m: [{area_m:g}, {area_m:g}], speed_mps: [{lo:g}, {hi:g}], "
                   f"pause_s: [0, 5]}}")
            lines.append(f"  - {{name: n{i:03d}, mobility: {mob}}}")
        else:
            x, y = rng.uniform(0, area_m), rng.uniform(0, area_m)
            lines.append(f"  - {{name: n{i:03d}, position: [{x:.2f}, {y:.2f}]}}")
    return "\n".join(lines) + "\n"


def link_changes_per_s(run_dir: Path, walk_s: float) -> float:
    changes = 0
    with (run_dir / "mobility.jsonl").open() as f:
        for line in f:
            d = json.loads(line)
            changes += d["kind"] in ("link_up", "link_down") and d["cause"] != "start"
    return changes / walk_s


def _median(doc: dict[str, Any], metric: str, arm: str) -> float | None:
    m = doc["metrics"].get(metric)
    return None if m is None or m.get(arm) is None else m[arm]["median"]


def _inputs(args: argparse.Namespace, speed: float, root: Path) -> Path:
    """The speed's directory under ``root``, with its topology.yaml and scenario.yaml written."""
    d = root / f"speed-{speed:g}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "topology.yaml").write_text(topology(args.nodes, speed, args.area_m, args.walk_s, args.bluetooth_m,
                                              args.lan_m, args.layout_seed))
    (d / "scenario.yaml").write_text(SCENARIO.format(rate=args.rate, pairs=args.pairs, walk_s=args.walk_s,
                                                     after_s=args.check_after_s))
    return d


def run_speed(args: argparse.Namespace, speed: float, root: Path) -> dict[str, Any]:
    d = _inputs(args, speed, root)
    t0 = time.monotonic()
    done = d / "ab" / "ab-result.json"  # an earlier invocation's result for this speed (--resume)
    if args.resume and done.exists():
        doc = json.loads(done.read_text())
    else:
        cmd = [sys.executable, "-m", "orchestrator.cli", "ab", "--a", args.a, "--b", args.b, "--scenario",
               str(d / "scenario.yaml"), "--topology", str(d / "topology.yaml"), "--seeds", str(args.seeds),
               "--out", str(d / "ab"), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"speed {speed:g}: snekbed ab exited {proc.returncode}\n{proc.stderr[-2000:]}")
        doc = json.loads(proc.stdout)
    manifest = json.loads((d / "ab" / "ab.json").read_text())
    rates = [link_changes_per_s(Path(r["run_dir"]), args.walk_s) for r in manifest["runs"]]
    conn = doc["metrics"].get("delivery_connected") or {}
    checks = {arm: sum(r["steps"][-1]["verdict"] == "pass" for r in manifest["runs"] if r["arm"] == arm)
              for arm in ("a", "b")}
    return {
        "speed_mps": speed, "link_changes_per_s": round(statistics.fmean(rates), 2),
        **{f"{k}_{arm}": _median(doc, k, arm) for arm in ("a", "b")
           for k in ("delivery_connected", "delivery_ratio", "stretch_median", "control_bytes_per_node_s")},
        "delivery_connected_diff": conn.get("diff"), "ci_low": conn.get("ci_low"), "ci_high": conn.get("ci_high"),
        "significant": conn.get("significant"), "checks_passed_a": checks["a"], "checks_passed_b": checks["b"],
        "seeds": args.seeds, "wall_s": round(time.monotonic() - t0, 1), "out": str(d / "ab"),
    }  # fmt: skip


def run_one_arm(args: argparse.Namespace, speed: float, root: Path) -> dict[str, Any]:
    """``--one-arm``: arm A alone, each seed through ``snekbed chaos --json`` (no Spark): delivery among connected
    pairs from the run's own ``mobility.delivery``, mean and 95 % interval (normal) over the seeds."""
    d = _inputs(args, speed, root)
    docs = []
    for seed in range(args.seeds):
        cmd = [sys.executable, "-m", "orchestrator.cli", "chaos", str(d / "scenario.yaml"), "--topology",
               str(d / "topology.yaml"), "--seed", str(seed), "--variant", args.a, "--json", "--quiet"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"speed {speed:g} seed {seed}: snekbed chaos exited {proc.returncode}\n{proc.stderr[-2000:]}")
        docs.append(json.loads(proc.stdout))
    conn = [x["mobility"]["delivery"]["connected"] for x in docs]
    ratios = [c["delivered"] / c["sent"] for c in conn if c["sent"]]
    half = 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else None
    return {"speed_mps": speed, "seeds": len(docs), "link_changes_per_s": round(statistics.fmean(
        (x["mobility"]["link_ups"] + x["mobility"]["link_downs"]) / args.walk_s for x in docs), 2),
        "delivery_connected": statistics.fmean(ratios), "ci95_half": half,
        "checks_passed": sum(x["steps"][-1]["verdict"] == "pass" for x in docs),
        "watch_violations": sum((x.get("watch") or {}).get("violations", 0) for x in docs)}  # fmt: skip


def _fmt(v: Any, nd: int = 3) -> str:
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--speeds", default="0,1,3,10,20", help="m/s, comma-separated (each walker: 0.5x to 1.5x)")
    p.add_argument("--area-m", type=float, default=300.0)
    p.add_argument("--bluetooth-m", type=float, default=10.0)
    p.add_argument("--lan-m", type=float, default=50.0)
    p.add_argument("--walk-s", type=float, default=120.0)
    p.add_argument("--check-after-s", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=4.0)
    p.add_argument("--pairs", type=int, default=50)
    p.add_argument("--layout-seed", type=int, default=0)
    p.add_argument("--a", default="snek")
    p.add_argument("--b", default="snek-s0")
    p.add_argument("--out", type=Path, default=Path("mobility-study"))
    p.add_argument("--resume", action="store_true", help="reuse a speed's finished snekbed ab result under --out")
    p.add_argument("--one-arm", action="store_true", help="arm --a alone, snekbed chaos per seed (no A/B, no Spark)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.one_arm:
        rows = [run_one_arm(args, float(s), args.out) for s in args.speeds.split(",")]
        print(json.dumps(rows, indent=1))
        return 0
    rows = [run_speed(args, float(s), args.out) for s in args.speeds.split(",")]
    (args.out / "study.json").write_text(json.dumps(rows, indent=1))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{args.nodes} nodes, {args.area_m:g} m square, bluetooth {args.bluetooth_m:g} m + lan {args.lan_m:g} m, "
          f"{args.walk_s:g} s walking, {args.seeds} seeds, a = {args.a}, b = {args.b}")
    print("| m/s | link changes/s | deliv. connected a | b | b - a [95 % CI] | all pings a | b | stretch a | b "
          "| control B/node/s a | b | checks passed a | b |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ci = f"{_fmt(r['delivery_connected_diff'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
        print(f"| {r['speed_mps']:g} | {r['link_changes_per_s']:g} | {_fmt(r['delivery_connected_a'])} | "
              f"{_fmt(r['delivery_connected_b'])} | {ci} | {_fmt(r['delivery_ratio_a'])} | {_fmt(r['delivery_ratio_b'])} "
              f"| {_fmt(r['stretch_median_a'], 2)} | {_fmt(r['stretch_median_b'], 2)} | "
              f"{_fmt(r['control_bytes_per_node_s_a'], 0)} | {_fmt(r['control_bytes_per_node_s_b'], 0)} | "
              f"{r['checks_passed_a']}/{r['seeds']} | {r['checks_passed_b']}/{r['seeds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
