"""How many node containers come up and converge on this machine, and what they cost.

For each size N (ascending), a random tree of N nodes (``generators.random_graph(N, 1,
seed)``: N-1 lan links, depth ~log N, so one Docker network per link) is brought up
with the Docker backend exactly as ``snekbed up`` does, timed to convergence (tree
and snake, seconds after the last container started), measured, and taken down.
The same topology then runs on the in-process backend (virtual clock) for
comparison. Sizes stop at the first one that does not converge within the timeout.

Memory per container: the mean of each container's cgroup ``memory.usage_in_bytes``
(what the node itself uses), and the drop of the host's MemAvailable divided by N
(adds the containerd shim, docker-init, veths and bridges).

    .venv/bin/python benchmarks/containers_bench.py                   # 50,100,200,250
    .venv/bin/python benchmarks/containers_bench.py --sizes 10,20 --json

Prints a table (and the largest size that converged); --json prints one object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.backends.docker import DockerBackend  # noqa: E402
from orchestrator.backends.docker_net import DockerBackendError  # noqa: E402
from orchestrator.backends.docker_session import choose_shaping, start_run  # noqa: E402
from orchestrator.model.generators import random_graph  # noqa: E402
from orchestrator.model.runs import create_run  # noqa: E402
from orchestrator.sessions.sim import run_sim_sync  # noqa: E402
from orchestrator.sessions.sim import config_from_topology  # noqa: E402

MiB = 1024 * 1024


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def cgroup_usage(container_id: str) -> int | None:
    """Bytes the container's cgroup uses (v1 cgroupfs, v1 systemd or v2 layouts); None when not found."""
    for path in (f"/sys/fs/cgroup/memory/docker/{container_id}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current",
                 f"/sys/fs/cgroup/docker/{container_id}/memory.current"):
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return None


def bench_docker(n: int, *, seed: int, image: str, backend: DockerBackend, runs: Path, timeout_s: float,
                 shaping: tuple[Any, str]) -> dict[str, Any]:
    topo = random_graph(n, 1, seed, name=f"bench-tree-{n}")
    run = create_run(runs, f"bench{n}-{os.getpid()}", topology=topo.to_dict())
    before = mem_available()
    t0 = time.monotonic()
    out: dict[str, Any] = {"nodes": n, "links": len(topo.links)}
    try:
        session, result, conv = start_run(topo, run, backend=backend, image=image, seed=seed, shaping=shaping,
                                          timeout_s=timeout_s)
        usages = [u for cid in result.containers.values() if (u := cgroup_usage(cid)) is not None]
        out.update({
            "converged": conv.converged, "tree_s": conv.tree_s, "snake_s": conv.snake_s,
            "networks_s": round(result.network_s, 1), "containers_s": round(result.container_s, 1),
            "up_total_s": round(time.monotonic() - t0, 1),
            "mem_cgroup_mib": round(sum(usages) / len(usages) / MiB, 1) if usages else None,
            "mem_host_mib_per_node": round((before - mem_available()) / n / MiB, 1),
            "wrong_root": len(conv.wrong_root), "wrong_descending": len(conv.wrong_descending),
            "unreachable": len(conv.unreachable),
        })
        if conv.converged:
            lines = session.ping(session.sample_pairs(10), ["snek", "tree"])
            out["pings"] = f"{sum(x['received'] for x in lines)}/{len(lines)}"
    except DockerBackendError as exc:
        out.update({"converged": False, "error": str(exc).splitlines()[0]})
    finally:
        t_down = time.monotonic()
        report = backend.down(run.run_id)
        out["down_s"] = round(time.monotonic() - t_down, 1)
        out["left"] = report.containers_left + report.networks_left
    return out


def bench_inproc(n: int, *, seed: int) -> dict[str, Any]:
    topo = random_graph(n, 1, seed, name=f"bench-tree-{n}")
    res = run_sim_sync(config_from_topology(topo, seed=seed, pairs=10))
    return {"inproc_tree_s": res["tree_converged_s"], "inproc_snake_s": res["snake_converged_s"],
            "inproc_wall_s": res["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50,100,200,250", help="comma-separated node counts, ascending")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=300.0, help="convergence timeout per size")
    ap.add_argument("--image", default=None, help="node image (default: build/reuse snekbed-node:<hash>)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--shaping", choices=["auto", "userspace"], default="auto")
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the run directories here (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))

    backend = DockerBackend(workers=args.workers)
    if args.image is None:
        from orchestrator.backends.image import build_node_image

        args.image = build_node_image(backend.client).tag
    shaping = choose_shaping(args.shaping)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="snekbed-bench-") as tmp:
        runs = args.runs_dir or Path(tmp)
        for n in sizes:
            print(f"[{time.strftime('%H:%M:%S')}] {n} nodes ...", file=sys.stderr, flush=True)
            row = bench_docker(n, seed=args.seed, image=args.image, backend=backend, runs=runs,
                               timeout_s=args.timeout_s, shaping=shaping)
            row.update(bench_inproc(n, seed=args.seed))
            rows.append(row)
            print(f"[{time.strftime('%H:%M:%S')}] {json.dumps(row)}", file=sys.stderr, flush=True)
            if not row["converged"]:
                break
    best = max((r["nodes"] for r in rows if r["converged"]), default=0)
    doc = {"host": {"cpus": os.cpu_count(), "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                                                / 2**30, 1), "kernel": platform.release()},
           "image": args.image, "shaping": shaping[0], "topology": "random tree (random_graph(n, 1, seed))",
           "rows": rows, "largest_converged": best}
    if args.json:
        print(json.dumps(doc))
        return 0 if best else 1
    cols = [("nodes", "nodes"), ("links", "links"), ("networks_s", "nets s"), ("containers_s", "start s"),
            ("tree_s", "tree s"), ("snake_s", "snake s"), ("pings", "pings"), ("mem_cgroup_mib", "MiB/ctr"),
            ("mem_host_mib_per_node", "host MiB/node"), ("down_s", "down s"), ("inproc_tree_s", "inproc tree s"),
            ("inproc_snake_s", "inproc snake s"), ("inproc_wall_s", "inproc wall s")]
    print(f"containers_bench: {doc['host']['cpus']} cores, {doc['host']['mem_gib']} GiB, image {args.image}, "
          f"shaping {shaping[0]}; {doc['topology']}")
    print("  ".join(f"{h:>{max(len(h), 6)}}" for _, h in cols))
    for r in rows:
        print("  ".join(f"{_cell(r.get(k)):>{max(len(h), 6)}}" for k, h in cols) +
              ("" if r["converged"] else f"  NOT CONVERGED {r.get('error', '')}"))
    print("times: seconds after the last container started (docker, real clock) / protocol seconds (inproc, "
          "virtual clock)")
    print(f"largest number of node containers that came up and converged: {best}")
    return 0 if best else 1


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if isinstance(x, float) else str(x)


if __name__ == "__main__":
    sys.exit(main())
