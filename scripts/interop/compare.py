"""The same topology on the Pinecone reference and on snekbed: convergence, delivery and stretch side by side.

    .venv/bin/python scripts/interop/compare.py --pinecone-src DIR [--gopath DIR] TOPOLOGY... [--seed 0] [--json]

For each topology file (the reference simulator's edge lists: each line a walk) it runs

* ``refsim`` (scripts/interop/refsim/main.go): the reference's routers in one process, linked by in-memory
  pipes with up to 1 ms of read jitter as in the reference simulator, in real time;
* ``snekbed sim --kill-root`` (virtual clock, 1 ms links, routers booted up to 1 s apart);

with the same node keys (snekbed's derive_seed(seed, name)), so both elect the same root and order the same
snake, and prints tree and snake convergence, delivery and stretch (path links / shortest-path links) of 100
SNEK pings of random pairs, then the same after the root is stopped. The ping pairs are drawn by each side's
own generator: the stretch figures are two samples of the same distribution, not the same pings.

Building refsim is as for run.py (``--pinecone-src``, ``--gopath``). refsim runs in real time and its
memory grows with the network (about 4.4 GB for graph-250's 248 nodes); topologies of up to a few hundred
nodes suit it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from run import SetupError, build_refnode  # noqa: E402  (this directory is on the path only from here)


def _ours(topology: Path, seed: int, max_time: float) -> dict:
    cmd = [str(REPO / ".venv" / "bin" / "snekbed"), "sim", str(topology), "--json", "--kill-root", "--seed",
           str(seed), "--max-time", str(max_time)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: ran, not converged (its JSON says so)
        return {"error": f"snekbed sim exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    d = json.loads(proc.stdout)
    rk = d.get("root_kill") or {}
    return {"tree_s": d["tree_converged_s"], "snake_s": d["snake_converged_s"], "pings": d["pings"],
            "stretch": d["stretch"], "kill_tree_s": rk.get("tree_reconverged_s"),
            "kill_snake_s": rk.get("snake_reconverged_s"), "kill_pings": rk.get("pings"),
            "kill_stretch": rk.get("stretch"), "nodes": d.get("nodes")}  # fmt: skip


def _theirs(refsim: Path, topology: Path, seed: int, max_time: float) -> dict:
    cmd = [str(refsim), "-topology", str(topology), "-kill-root", "-seed", str(seed), "-max-time", str(max_time)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        why = "killed (out of memory?)" if proc.returncode in (-9, 137) else f"exit {proc.returncode}"
        return {"error": f"refsim {why}: {proc.stderr.strip()[-300:]}"}
    d = json.loads(proc.stdout)
    rk = d.get("root_kill") or {}
    pings, kpings = d.get("pings") or {}, rk.get("pings") or {}
    return {"tree_s": d["tree_converged_s"], "snake_s": d["snake_converged_s"],
            "pings": {k: pings.get(k) for k in ("sent", "delivered")}, "stretch": pings.get("stretch"),
            "kill_tree_s": rk.get("tree_reconverged_s"), "kill_snake_s": rk.get("snake_reconverged_s"),
            "kill_pings": {k: kpings.get(k) for k in ("sent", "delivered")}, "kill_stretch": kpings.get("stretch"),
            "nodes": d.get("nodes")}  # fmt: skip


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _p(p: dict | None) -> str:
    return "-" if not p else f"{p.get('delivered')}/{p.get('sent')}"


def _s(s: dict | None) -> str:
    return "-" if not s or s.get("mean") is None else f"{s['mean']:.2f} / {s['median']:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("topologies", nargs="+", type=Path)
    p.add_argument("--pinecone-src", type=Path, required=True)
    p.add_argument("--gopath", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-time", type=float, default=300.0, help="give up on a convergence after this long")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="snekbed-compare-") as tmp:
        try:
            refsim = build_refnode(a.pinecone_src, a.gopath, Path(tmp), "refsim")
            for topo in a.topologies:
                rows.append({"topology": topo.name, "reference": _theirs(refsim, topo, a.seed, a.max_time),
                             "snekbed": _ours(topo, a.seed, a.max_time)})  # fmt: skip
                if not a.json:
                    print(f"{topo.name} done", file=sys.stderr, flush=True)
        except SetupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| topology | run | nodes | tree s | snake s | pings | stretch mean / median | root killed: tree s | snake s "
          "| pings | stretch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for who in ("reference", "snekbed"):
            r = row[who]
            if "error" in r:
                print(f"| {row['topology']} | {who} | {r['error']} |")
                continue
            print(f"| {row['topology']} | {who} | {r['nodes']} | {_f(r['tree_s'])} | {_f(r['snake_s'])} | "
                  f"{_p(r['pings'])} | {_s(r['stretch'])} | {_f(r['kill_tree_s'])} | {_f(r['kill_snake_s'])} | "
                  f"{_p(r['kill_pings'])} | {_s(r['kill_stretch'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
