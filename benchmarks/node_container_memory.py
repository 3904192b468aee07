"""An idle node container's memory as ``docker stats`` shows it (issue 33: at most 20 MiB), image by image.

For each ``--image`` (default: the image ``snekbed up`` builds or reuses for this checkout), in turn: ``snekbed up``
the topology (mesh-12 by default), wait ``--idle-s`` after convergence (keepalives and bootstraps, no traffic),
read ``docker stats --no-stream`` of every node container of the run, then ``snekbed down`` (by the run's label,
also on a failure). Two images measured in one invocation are measured side by side, under the same load.

    flock /tmp/snekbed-heavy.lock .venv/bin/python benchmarks/node_container_memory.py
    flock /tmp/snekbed-heavy.lock .venv/bin/python benchmarks/node_container_memory.py \\
        --image snekbed-node:OLDHASH --image ""      # before and after

``docker stats`` memory is the cgroup's usage less its inactive page cache: a node's anonymous memory plus the
file pages it touched first in the container.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SNEKBED = str(Path(sys.executable).with_name("snekbed"))
UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "kB": 1e3 / 2**20, "MB": 1e6 / 2**20,
         "GB": 1e9 / 2**20}


def _mib(text: str) -> float:
    """``37.62MiB`` -> 37.62."""
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * UNITS[unit]
    raise ValueError(f"unknown memory figure {text!r}")


def container_mib(run_id: str) -> dict[str, float]:
    """Node name -> ``docker stats`` memory (MiB) of every container labelled with the run."""
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=snekbed.run={run_id}",
                          "--filter", "label=snekbed.role=node"], capture_output=True, text=True, check=True).stdout.split()
    if not ids:
        raise SystemExit(f"no node container of run {run_id} is running")
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *ids],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: _mib(line.split()[1]) for line in out.splitlines() if line.strip()}


def measure(topology: str, image: str, idle_s: float, runs_dir: Path, run_id: str) -> dict[str, Any]:
    up = [SNEKBED, "up", topology, "--run-id", run_id, "--runs-dir", str(runs_dir), "--timeout-s", "180"]
    t0 = time.monotonic()
    try:
        subprocess.run([*up, *(["--image", image] if image else [])], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        up_s = time.monotonic() - t0
        time.sleep(idle_s)  # the idle period itself is what is measured: nothing to wait on
        per_node = container_mib(run_id)
    finally:
        subprocess.run([SNEKBED, "down", "--run-id", run_id, "--runs-dir", str(runs_dir)], cwd=REPO,
                       stdout=subprocess.DEVNULL, check=False)
    values = sorted(per_node.values())
    return {"image": image or "(this checkout)", "run_id": run_id, "containers": len(values), "up_s": round(up_s, 1),
            "idle_s": idle_s, "mib": {"min": round(values[0], 2), "mean": round(sum(values) / len(values), 2),
                                      "max": round(values[-1], 2)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default="compose/topologies/mesh-12.yaml")
    ap.add_argument("--image", action="append", help="node image ('' = build or reuse this checkout's); repeatable")
    ap.add_argument("--idle-s", type=float, default=60.0, help="idle time after convergence (default 60)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, image in enumerate(args.image or [""]):
            rows.append(measure(args.topology, image, args.idle_s, Path(tmp), f"mem{os.getpid() % 10000}x{i}"))
    result = {"topology": args.topology, "load": os.getloadavg(), "cpus": os.cpu_count(), "rows": rows,
              "target": "<= 20 MiB per idle node container (docker stats)"}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.topology}, idle {args.idle_s:g} s after convergence; target: {result['target']}\n")
    print("| image | containers | min | mean | max |\n|---|---|---|---|---|")
    for r in rows:
        m = r["mib"]
        print(f"| {r['image']} | {r['containers']} | {m['min']:.1f} MiB | {m['mean']:.1f} MiB | {m['max']:.1f} MiB |")
    print(f"\nload {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
