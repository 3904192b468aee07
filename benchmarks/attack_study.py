"""Issue 31's study: every attack of the catalogue at growing adversary fractions, two protocol variants side by
side, on graph-250 and a 100-node mixed mesh (docs/attacks.md, "The study").

Each (topology, attack) is one ``snekbed attack`` (in process, Spark's analysis, report and plots in
``OUT/<topology>/<attack>/``), every arm over the same seeds. Each curve's JSON (the command's, without the run
directories) goes to ``RESULTS/<topology>-<attack>.json`` (``--results``, default ``OUT``; the repository keeps
its own in docs/data/attack-study/); one already there is not run again, so the study resumes where it stopped,
across machines too (``--only`` runs a subset). Prints one table per topology: per
attack and fraction, each variant's delivery among honest pairs, the victim's reachability (targeted attacks),
tree / snake re-convergence after the adversaries left and honest control bytes per node-second (means over the
seeds), with each attack's wall time. ``--json`` prints the rows instead.

    python benchmarks/attack_study.py --seeds 10 --out /tmp/attack-study
    python benchmarks/attack_study.py --seeds 10 --only graph-250:drop,greyhole --out /tmp/attack-study
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.experiments.attack import ATTACKS
from orchestrator.model.generators import mesh_mixed

FRACTIONS = "0,0.01,0.05,0.1,0.2"
#: the columns of the table: metric -> header
COLUMNS = {"delivery_honest": "delivery", "victim_reachability": "victim", "tree_reconverged_s": "tree s",
           "snake_reconverged_s": "snake s", "control_bytes_per_node_s": "ctl B/node-s"}


def topologies(out: Path) -> dict[str, str]:
    """name -> what ``--topology`` takes: graph-250 is shipped; the mixed mesh is written once (seed 3)."""
    mixed = out / "mixed-100.yaml"
    if not mixed.exists():
        mixed.parent.mkdir(parents=True, exist_ok=True)
        mixed.write_text(mesh_mixed(100, seed=3, name="mixed-100").to_yaml())
    return {"graph-250": "graph-250", "mixed-100": str(mixed)}


def run_one(topology: str, attack: str, where: Path, cached: Path, seeds: int, variants: list[str],
            master: str) -> dict[str, Any]:  # fmt: skip
    """One damage curve (kept in ``cached``)."""
    if cached.exists():
        return json.loads(cached.read_text())
    cmd = [sys.executable, "-m", "orchestrator.cli", "attack", attack, "--fractions", FRACTIONS, "--topology",
           topology, "--seeds", str(seeds), "--out", str(where), "--master", master, "--json"]
    for v in variants:
        cmd += ["--variant", v]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:  # a run whose check failed is a result (runs_failed), not an exit code
        raise SystemExit(f"{attack} on {topology}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    result["study_wall_s"] = round(time.monotonic() - t0, 1)
    result["seeds"], result["variants_run"] = seeds, variants
    result.pop("run_dirs", None)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result, indent=1) + "\n")
    return result


def rows(topo: str, attack: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (fraction, variant): the metrics' means and intervals, the runs that failed their check."""
    curves = result.get("variants") or {"snek": result["fractions"]}
    failed = result.get("runs_failed") or []
    out = []
    for i, fraction in enumerate(f["fraction"] for f in result["fractions"]):
        for variant, curve in curves.items():
            metrics = curve[i]["metrics"]
            out.append({"topology": topo, "attack": attack, "fraction": fraction, "variant": variant,
                        **{m: metrics.get(m) for m in COLUMNS}, "runs_failed": len(failed),
                        "wall_s": result.get("wall_s")})  # fmt: skip
    return out


def _cell(m: dict[str, Any] | None) -> str:
    if not m or m.get("mean") is None:
        return "-"
    mean = m["mean"]
    return f"{mean:.3g}" if abs(mean) < 1000 else f"{mean:.0f}"


def table(all_rows: list[dict[str, Any]]) -> str:
    lines = []
    for topo in dict.fromkeys(r["topology"] for r in all_rows):
        lines += [f"\n{topo}\n", "| attack | fraction | variant | " + " | ".join(COLUMNS.values()) + " |",
                  "|---|---|---|" + "---|" * len(COLUMNS)]
        for r in (r for r in all_rows if r["topology"] == topo):
            lines.append(f"| {r['attack']} | {r['fraction']:g} | {r['variant']} | "
                         + " | ".join(_cell(r[m]) for m in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--variant", action="append", help="default: snek and snek-s0")
    ap.add_argument("--only", action="append", default=[], help="TOPOLOGY:ATTACK[,ATTACK...] (repeatable)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", type=Path, default=Path("attack-study"))
    ap.add_argument("--results", type=Path, help="where each curve's JSON is kept (default: OUT)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    variants = a.variant or ["snek", "snek-s0"]
    wanted = {(t, x) for spec in a.only for t, xs in [spec.split(":", 1)] for x in xs.split(",")}
    all_rows = []
    for name, topo in topologies(a.out).items():
        for attack in ATTACKS:
            if wanted and (name, attack) not in wanted:
                continue
            where = a.out / name / attack
            cached = (a.results or a.out) / f"{name}-{attack}.json"
            result = run_one(topo, attack, where, cached, a.seeds, variants, a.master)
            print(f"{name} {attack}: {result.get('study_wall_s')} s", file=sys.stderr, flush=True)
            all_rows += rows(name, attack, result)
    print(json.dumps(all_rows, indent=1) if a.json else table(all_rows))


if __name__ == "__main__":
    main()
