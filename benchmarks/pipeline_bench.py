"""Time the whole analysis (ingest, reconciliation, jobs, report) on a small real run and on synthetic datasets.

    .venv/bin/python benchmarks/pipeline_bench.py [--sizes 1000000,10000000] [--data DIR] [--master local[2]]
                                                  [--small-repeat 3]

Small run: a real recorded run (``snekbed sim`` of compose/topologies/mesh-12.yaml with a root
kill, about 1 100 event lines, cached under --data), analyzed by ``snekbed analyze --json`` in a
fresh process, against an empty Spark job started the same way: a fresh process that imports the
same command, starts Spark with the session builder and settings ``snekbed analyze`` uses
(``pipeline.session.get_spark``, same master and driver memory) and runs one trivial action. Both are
timed as whole processes, alternately, --small-repeat times; the medians and their ratio are
printed (target: analyze <= 2 x the empty job). ``--small-repeat 0`` skips this row; ``--sizes ''``
skips the synthetic ones.

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
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET_10M_S = 120.0
TARGET_SMALL_RATIO = 2.0
SMALL_TOPOLOGY = REPO / "compose" / "topologies" / "mesh-12.yaml"


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


def small_run(data: Path) -> Path:
    """The cached small real run: an in-process `snekbed sim` of mesh-12 with a root kill, recorded."""
    path = data / "small-mesh-12"
    marker = path / ".complete"
    if not marker.exists():
        if path.exists():
            import shutil

            shutil.rmtree(path)
        cmd = [sys.executable, "-m", "orchestrator.cli", "sim", str(SMALL_TOPOLOGY), "--kill-root", "--seed", "0",
               "--run-id", "bench-small", "--record", str(path), "--json"]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
        if proc.returncode != 0:
            raise SystemExit(f"recording the small run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        marker.write_text("")
    return path


def empty_spark_job(run: Path, master: str, driver_memory: str) -> None:
    """The baseline of the small-run row (run in a fresh process): what `snekbed analyze RUN` does before
    and after its analysis, and nothing else: import the command, check the run directory, start Spark
    with the same session builder and settings (for this input's size), run one trivial action, stop."""
    import orchestrator.cli  # noqa: F401  (the entry point `snekbed analyze` is started through)
    from pipeline import cli, rundirs, session  # noqa: F401

    runs = rundirs.discover_runs([run])
    spark = session.get_spark(master, "snekbed-analyze", ui=False, driver_memory=driver_memory,
                              input_bytes=rundirs.input_size(runs))
    try:
        spark.range(1).collect()
    finally:
        spark.stop()


def time_empty_job(run: Path, master: str, driver_memory: str) -> float:
    """Wall time of `empty_spark_job` in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--empty-spark-job", str(run), "--master", master,
           "--driver-memory", driver_memory]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"empty Spark job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def run_once(path: Path, out: Path, master: str, driver_memory: str = "6g") -> dict:
    """One analysis in a fresh process: `snekbed analyze --json` (the same code path users run)."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "analyze", str(path), "--out", str(out), "--master", master,
           "--json", "--driver-memory", driver_memory]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"analysis failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    doc["process_wall_s"] = wall
    return doc


def small_row(data: Path, master: str, driver_memory: str, repeat: int) -> float:
    """Time the small real run against the empty Spark job, alternately; print the medians and their ratio."""
    path = small_run(data)
    empty, analyzed, docs = [], [], []
    for i in range(repeat):
        empty.append(time_empty_job(path, master, driver_memory))
        doc = run_once(path, data / "out-small", master, driver_memory)
        analyzed.append(doc["process_wall_s"])
        docs.append(doc)
        print(f"small run {i + 1}/{repeat}: empty job {empty[-1]:.1f} s, analyze {analyzed[-1]:.1f} s",
              file=sys.stderr, flush=True)
    e, w = statistics.median(empty), statistics.median(analyzed)
    doc = docs[analyzed.index(sorted(analyzed)[(len(analyzed) - 1) // 2])]
    st = doc["stage_s"]
    ratio = w / e
    print(f"\nsmall real run ({doc['events']:,} events, mesh-12 with a root kill) on {master}: whole fresh processes, "
          f"median of {repeat}\n")
    head = f"{'':>22} {'wall s':>8} {'ingest':>7} {'reconc':>7} {'jobs':>7} {'report':>7}"
    print(head)
    print("-" * len(head))
    print(f"{'empty Spark job':>22} {e:>8.1f}")
    print(f"{'snekbed analyze':>22} {w:>8.1f} {st['ingest']:>7.1f} {st['reconcile']:>7.1f} {st['analyze']:>7.1f} "
          f"{st['report']:>7.1f}")
    verdict = "met" if ratio <= TARGET_SMALL_RATIO else "MISSED"
    print(f"\nsmall run: analyze / empty Spark job = {ratio:.2f} (target <= {TARGET_SMALL_RATIO:.0f}x -> {verdict}); "
          f"all pairs: {', '.join(f'{x:.1f}/{y:.1f}' for x, y in zip(analyzed, empty))}\n", flush=True)
    return ratio


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000000,10000000", help="comma-separated event counts")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "snekbed-bench")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--small-repeat", type=int, default=3,
                   help="small-run row: pairs (empty job, analysis) to time; 0 skips the row")
    p.add_argument("--driver-memory", default="4g", help="driver heap of the small-run row (analyze's default)")
    p.add_argument("--empty-spark-job", type=Path, metavar="RUN_DIR", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.empty_spark_job:
        empty_spark_job(a.empty_spark_job, a.master, a.driver_memory)
        return
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    if a.small_repeat > 0:
        small_row(a.data, a.master, a.driver_memory, a.small_repeat)
    if not sizes:
        return
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
