"""Where an idle node's memory goes, and whether it grows.

Two tables:

1. **Imports**: a fresh interpreter's peak RSS after importing each layer a node loads (bare Python, trio, the
   compiled core, PyNaCl, prometheus_client, the link classes, the node's HTTP server, the admin API, the whole
   node), each in its own process, side by side with what a node loaded before (pydantic; starlette on
   hypercorn), so the cost of each layer is a difference measured in one run.
2. **Nodes**: ``--nodes N`` real ``snekbed node`` processes on 127.0.0.1 in a line (each peers with the next),
   their RSS (anonymous and file-backed) and PSS right after start, once converged, and after ``--minutes`` of
   keepalives and bootstraps with no traffic: the growth column says whether anything accumulates.

    .venv/bin/python benchmarks/node_memory_bench.py                      # 3 nodes, 10 minutes
    .venv/bin/python benchmarks/node_memory_bench.py --minutes 1 --json

The issue's target is a container's ``docker stats`` figure (cgroup usage less inactive page cache), which sits
between a process's anonymous RSS and its full RSS; both are printed. ``benchmarks/node_container_memory.py``
measures that figure itself on real containers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

#: (label, the imports of that layer); each row is measured in a fresh interpreter
LAYERS: list[tuple[str, str]] = [
    ("bare python", "pass"),
    ("trio", "import trio"),
    ("trio + compiled core (node.core.router)", "import trio, node.core.router"),
    ("+ prometheus_client", "import trio, node.core.router, prometheus_client"),
    ("+ link classes (contract.links, no pydantic)", "import trio, node.core.router, prometheus_client, contract.links"),
    ("  (and pydantic, as a node loaded it before)", "import trio, node.core.router, prometheus_client, contract.links, "
                                                    "pydantic"),
    ("+ node HTTP server (node.httplite)", "import trio, node.core.router, prometheus_client, contract.links, "
                                           "node.httplite"),
    ("  (before: starlette on hypercorn instead)", "import trio, node.core.router, prometheus_client, "
                                                   "contract.links, hypercorn.trio, starlette.applications"),
    ("+ admin API and metrics (node.admin, node.metrics)", "import node.admin, node.metrics"),
    ("the whole node (node.lifecycle + the CLI)", "import node.lifecycle, orchestrator.cli"),
]

#: VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's peak
PEAK = ("print(next(int(line.split()[1]) * 1024 for line in open('/proc/self/status') "
        "if line.startswith('VmHWM:')))")


def layer_rss(code: str) -> int:
    out = subprocess.run([sys.executable, "-c", f"{code}\n{PEAK}"], cwd=REPO, capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip().splitlines()[-1])


def proc_memory(pid: int) -> dict[str, int]:
    """RSS (anonymous, file-backed) from /proc/PID/status and PSS from smaps_rollup, in bytes."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["Pss"] = int(line.split()[1]) * 1024
    return out


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def start_nodes(n: int, tmp: Path) -> list[dict[str, Any]]:
    """N nodes in a line on 127.0.0.1; each waits for its admin API to answer before the next dials it."""
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        info_file = tmp / f"n{i}.log"
        argv = [sys.executable, "-m", "orchestrator.cli", "node", "--listen", "127.0.0.1:0", "--admin",
                "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--key-seed", f"{i + 1:064x}", "--name", f"n{i}"]
        if nodes:
            argv += ["--peer", f"tcp://{nodes[-1]['listen']}?class=lan"]
        log = info_file.open("w")
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        up: dict[str, Any] | None = None
        while up is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"node n{i} did not come up: {info_file.read_text()[-2000:]}")
            for line in info_file.read_text().splitlines():
                if " up: {" in line:
                    up = json.loads(line.split(" up: ", 1)[1])
            time.sleep(0.05)
        nodes.append({"proc": proc, "pid": proc.pid, "listen": up["listen"], "admin": up["admin"],
                      "key": up["public_key"]})
    return nodes


def converged(nodes: list[dict[str, Any]]) -> bool:
    """Every node names the same root, and the line's snake is whole (each node but the lowest has descending)."""
    states = [_get(f"http://{n['admin']}/state") for n in nodes]
    roots = {s["root"]["key"] for s in states}
    lowest = min(n["key"] for n in nodes)
    return len(roots) == 1 and all(s["descending"] for s, n in zip(states, nodes) if n["key"] != lowest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=10.0, help="idle time after convergence (default 10)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    layers = [{"layer": label, "rss_bytes": layer_rss(code)} for label, code in LAYERS]
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_nodes(args.nodes, Path(tmp))
        try:
            started = [proc_memory(n["pid"]) for n in nodes]
            t0 = time.monotonic()
            while not converged(nodes):
                if time.monotonic() - t0 > 120:
                    raise SystemExit("the nodes did not converge within 120 s")
                time.sleep(0.5)
            conv_s = time.monotonic() - t0
            at_converged = [proc_memory(n["pid"]) for n in nodes]
            time.sleep(args.minutes * 60)  # the benchmark's idle period itself: nothing to wait on
            assert converged(nodes), "the line fell apart while idle"
            after = [proc_memory(n["pid"]) for n in nodes]
        finally:
            for n in nodes:
                os.killpg(n["proc"].pid, signal.SIGTERM)
            for n in nodes:
                n["proc"].wait(timeout=30)

    def mean(rows: list[dict[str, int]], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows) / MiB

    result = {
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()},
        "layers": [{**row, "rss_mib": round(row["rss_bytes"] / MiB, 1)} for row in layers],
        "nodes": args.nodes, "idle_minutes": args.minutes, "converged_s": round(conv_s, 2),
        "node_mib": {phase: {k: round(mean(rows, k), 2) for k in ("VmRSS", "RssAnon", "RssFile", "Pss")}
                     for phase, rows in (("started", started), ("converged", at_converged), ("after_idle", after))},
        "target": "<= 20 MiB per idle node container (docker stats)",
    }
    result["growth_mib"] = round(result["node_mib"]["after_idle"]["VmRSS"] - result["node_mib"]["converged"]["VmRSS"], 2)
    if args.json:
        print(json.dumps(result))
        return
    base = layers[0]["rss_bytes"]
    print("| layer (fresh interpreter) | peak RSS | over bare python |\n|---|---|---|")
    for row in layers:
        print(f"| {row['layer']} | {row['rss_bytes'] / MiB:.1f} MiB | {(row['rss_bytes'] - base) / MiB:+.1f} MiB |")
    print(f"\n{args.nodes} nodes in a line, converged in {conv_s:.1f} s; mean per node (MiB); target: "
          f"{result['target']}\n")
    print("| phase | RSS | anonymous | file-backed | PSS |\n|---|---|---|---|---|")
    for phase, m in result["node_mib"].items():
        print(f"| {phase.replace('_', ' ')} | {m['VmRSS']:.1f} | {m['RssAnon']:.1f} | {m['RssFile']:.1f} | {m['Pss']:.1f} |")
    print(f"\ngrowth over {args.minutes:g} idle minutes: {result['growth_mib']:+.2f} MiB RSS per node; "
          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
