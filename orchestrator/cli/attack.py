"""``snekbed attack ATTACK --fractions 0,0.01,0.05,0.1,0.2 --topology T --seeds N [--variant V ...]
[--backend inproc|docker] [--select random|max_degree|victim] [--out DIR] [--json]``: damage curves of one attack
(orchestrator.experiments.attack), analysed with the Spark pipeline (pipeline.attack).

``--topology`` is a file or a shipped name (``mesh-12``: compose/topologies; ``graph-250``: the reference's
topologies). Output in ``OUT``: ``attack.json`` (the manifest of runs), ``runs/`` (every run directory),
``analysis/`` (the pipeline's tables and report), ``attack.md`` and one PNG per metric, ``attack-result.json``.
``--json`` prints ``{"attack", "fractions": [{"fraction", "metrics": {name: {mean, ci_low, ci_high, n,
n_missing}}}], "run_dirs", "wall_s", ...}`` (the first variant's curve), with ``variants`` (variant -> its
``fractions``) when several ``--variant`` are given. Exit 0 when the experiment ran (runs that failed a chaos check
are a result: ``runs_failed``); 1 when the analysis failed; 2 for bad input (an unknown attack, a fraction outside
[0, 1], a bad topology or variant, a strategy this build lacks), before any run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from contract.exit_codes import FAILED
from node.core.variants import VariantError, VariantSpec
from pipeline import analysis, session
from pipeline.attack import attack_runs, run_ids, summarize
from pipeline.attack_report import write_report
from pipeline.errors import PipelineError

from orchestrator.cli.options import BadInput
from orchestrator.experiments.attack import (SELECT_RULES, AttackError, AttackPlan, attack_of, attack_scenario,
                                             check_fractions, run_attack)
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology

__all__ = ["attack", "resolve_topology"]

REPO = Path(__file__).resolve().parents[2]
#: where a topology given by name is looked for, in order
TOPOLOGY_DIRS = (REPO / "compose" / "topologies", REPO.parent / "shared" / "topologies" / "pinecone")


def resolve_topology(text: str) -> Topology:
    """A topology file, or a shipped name; TopologyError names the file and field, BadInput an unknown name."""
    path = Path(text)
    if not path.exists() and not path.suffix:
        for d in TOPOLOGY_DIRS:
            for suffix in (".yaml", ".txt"):
                if (d / f"{text}{suffix}").is_file():
                    return load_topology(d / f"{text}{suffix}")
        raise BadInput(f"--topology {text!r}: no such file, and no shipped topology of that name "
                       f"(looked in {', '.join(str(d) for d in TOPOLOGY_DIRS)})")  # fmt: skip
    if not path.is_file():
        raise BadInput(f"--topology {text!r}: no such file")
    return load_topology(path)


def _fractions(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--fractions {text!r}: comma-separated numbers in [0, 1], e.g. 0,0.05,0.1") from None


@click.command("attack")
@click.argument("attack_name", metavar="ATTACK")
@click.option("--fractions", default="0,0.01,0.05,0.1,0.2", show_default=True, help="adversary fractions in [0, 1]")
@click.option("--topology", "topology_text", required=True, help="topology file or shipped name (mesh-12, graph-250)")
@click.option("--seeds", type=click.IntRange(1, 1000), default=5, show_default=True, help="seeds 0..N-1 per fraction")
@click.option("--variant", "variant_texts", multiple=True, metavar="SPEC", help="protocol variant (repeat to compare)")
@click.option("--backend", type=click.Choice(["inproc", "docker"]), default="inproc", show_default=True)
@click.option("--select", type=click.Choice(SELECT_RULES), default=None,
              help="how adversaries are chosen [default: the attack's own: victim for sybil, else random]")
@click.option("--window", "window_s", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
              help="seconds the adversaries act (one wakeup-broadcast period by default: each window holds one burst)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("attack"), show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Spark master for the analysis")
@click.option("--image", default=None, help="node image for --backend docker")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def attack(attack_name: str, fractions: str, topology_text: str, seeds: int, variant_texts: tuple[str, ...],
           backend: str, select: str | None, window_s: float, out: Path, master: str, image: str | None,
           as_json: bool) -> None:  # fmt: skip
    """Damage curves: run ATTACK at each adversary fraction and measure what it breaks."""
    t0 = time.monotonic()
    try:
        spec = attack_of(attack_name)
        fr = check_fractions(_fractions(fractions))
        variants = [VariantSpec.parse(v) for v in variant_texts] or [VariantSpec()]
        topology = resolve_topology(topology_text)
        plan = AttackPlan(spec, topology, fr, list(range(seeds)), variants, select=select, backend=backend, out=out,
                          window_s=window_s, image=image)  # fmt: skip
        attack_scenario(plan, max(fr), 0)  # a strategy this build lacks is bad input, before any run
    except (AttackError, VariantError, TopologyError) as exc:
        raise BadInput(str(exc)) from None

    def progress(run: dict[str, Any]) -> None:
        if not as_json:
            click.echo(f"{run['variant']} fraction {run['fraction']:g} seed {run['seed']}: {run['verdict']} "
                       f"({len(run['adversaries'])} adversaries, {run['wall_s']:.1f} s)", err=True)

    manifest = run_attack(plan, progress)
    run_dirs = [r["run_dir"] for r in manifest["runs"]]
    if not as_json:
        click.echo(f"{len(run_dirs)} runs in {manifest['runs_wall_s']:.0f} s; analysing with Spark", err=True)
    try:
        spark = session.get_spark(master, "snekbed-attack")
        try:
            result = analysis.analyze(spark, run_dirs, out / "analysis")
            ids = run_ids(manifest["runs"])
            per_run = {r["run_id"]: r for r in attack_runs(spark, result.tables, manifest["runs"], ids)}
        finally:
            spark.stop()
    except PipelineError as exc:
        click.echo(f"error: analysis failed: {exc}", err=True)
        sys.exit(FAILED)
    curves = summarize(manifest["runs"], per_run, ids, spec.targeted or plan.rule == "victim")
    report = write_report(out, manifest, curves)
    wall = round(time.monotonic() - t0, 1)
    doc: dict[str, Any] = {
        "attack": spec.name, "fractions": curves[str(variants[0])], "run_dirs": run_dirs,
        "topology": topology.name, "backend": backend, "select": plan.rule, "seeds": seeds,
        "runs_failed": [f"{r['variant']} f{r['fraction']:g} s{r['seed']}" for r in manifest["runs"]
                        if r["verdict"] != "pass"],
        "report": str(report), "out": str(out), "wall_s": wall,
    }  # fmt: skip
    if len(variants) > 1:
        doc["variants"] = curves
    (out / "attack-result.json").write_text(json.dumps(doc, indent=1))
    if as_json:
        click.echo(json.dumps(doc))
        click.echo(f"wall time: {wall:.1f} s", err=True)
        return
    for variant, curve in curves.items():
        click.echo(f"{spec.name} ({variant}):")
        for p in curve:
            shown = ", ".join(f"{m} {v['mean']:.3g}" if v["mean"] is not None else f"{m} -"
                              for m, v in p["metrics"].items())
            click.echo(f"  fraction {p['fraction']:g}: {shown}")
    click.echo(f"report: {report}")
    click.echo(f"wall time: {wall:.1f} s")
