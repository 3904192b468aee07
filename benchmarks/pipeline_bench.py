"""Time the whole analysis (ingest, reconciliation, jobs, report) on synthetic datasets, on local[2].

    .venv/bin/python benchmarks/pipeline_bench.py [--sizes 1000000,10000000] [--data DIR] [--master local[2]]

Datasets come from benchmarks/gen_events.py (realistic event mixes: mostly
bootstrap and frame_stats lines, root kills, pings) and are cached under
--data (regenerated when missing). Each size runs in a fresh Spark JVM (a
subprocess), so one size's warm JIT does not flatter the next. Prints a table:
events, wall time, events/s, stage times, the ratio of time to the smallest
size against the ratio of events (growing no faster than linearly means
time ratio <= events ratio) and the 10 M target (<= 120 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET_10M_S = 120.0


def dataset(data: Path, events: int) -> Path:
    """The cached dataset of about ``events`` event lines (generated if missing)."""
    path = data / f"events-{events}"
    marker = path / ".complete"
    if not marker.exists():
        sys.path.insert(0, str(HERE))
        import gen_events

        print(f"generating {events:,} events under {path} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        n = gen_events.generate_dataset(path, events, jobs=2)
        marker.write_text(str(n))
        print(f"  {n:,} lines in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return path


def run_once(path: Path, out: Path, master: str) -> dict:
    """One analysis in a fresh process: `snekbed analyze --json` (the same code path users run)."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "analyze", str(path), "--out", str(out), "--master", master,
           "--json", "--driver-memory", "6g"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"analysis failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    doc["process_wall_s"] = wall
    return doc


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000000,10000000", help="comma-separated event counts")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "snekbed-bench")
    p.add_argument("--master", default="local[2]")
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = []
    for n in sizes:
        path = dataset(a.data, n)
        doc = run_once(path, a.data / f"out-{n}", a.master)
        rows.append((n, doc))
        print(f"{doc['events']:,} events: {doc['wall_s']:.1f} s", file=sys.stderr, flush=True)

    base_n, base = rows[0]
    print(f"\nsnekbed analyze on {a.master} (wall time of `snekbed analyze --json`, including Spark start-up)\n")
    head = f"{'events':>12} {'wall s':>8} {'events/s':>10} {'ingest':>7} {'reconc':>7} {'jobs':>7} {'report':>7} " \
           f"{'time x':>7} {'events x':>9}"
    print(head)
    print("-" * len(head))
    for n, doc in rows:
        st = doc["stage_s"]
        events = doc["events"]
        print(f"{events:>12,} {doc['wall_s']:>8.1f} {events / doc['wall_s']:>10,.0f} {st['ingest']:>7.1f} "
              f"{st['reconcile']:>7.1f} {st['analyze']:>7.1f} {st['report']:>7.1f} "
              f"{doc['wall_s'] / base['wall_s']:>7.2f} {events / base['events']:>9.2f}")
    big = [doc for n, doc in rows if doc["events"] >= 9_000_000]
    if big:
        verdict = "met" if big[-1]["wall_s"] <= TARGET_10M_S else "MISSED"
        print(f"\ntarget: 10 M events in <= {TARGET_10M_S:.0f} s -> {verdict} ({big[-1]['wall_s']:.1f} s)")
    if len(rows) > 1:
        (n0, d0), (n1, d1) = rows[0], rows[-1]
        growth = (d1["wall_s"] / d0["wall_s"]) / (d1["events"] / d0["events"])
        print(f"time grows {'no faster than' if growth <= 1.0 else 'FASTER than'} linearly: "
              f"(time ratio / events ratio) = {growth:.2f}")


if __name__ == "__main__":
    main()
