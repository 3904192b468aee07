"""``snekbed ab --a SPEC --b SPEC --scenario FILE [--topology FILE] [--seeds N] [--alpha A] [--backend inproc|docker]
[--out DIR] [--mixed] [--json]``: an A/B experiment of two protocol variants under identical chaos (orchestrator.experiments.ab),
analysed with the Spark pipeline (pipeline.jobs.ab).

Before any run it warns (stderr, and ``warnings`` in the JSON and ``OUT/ab.json``) when N seeds cannot reach
``p <= alpha`` with the exact paired sign-flip test (smallest p 2/2^N), and goes on. A seed where an arm never
converged counts, censored (docs/variants.md, "What an A/B experiment can conclude").

Output: ``OUT/ab.json`` (the manifest of runs), ``OUT/runs/`` (every run directory), ``OUT/analysis/``
(tables, report.html with the A/B section, and ``ab.json``: per metric ``a``, ``b``, ``diff``, ``ci_low``,
``ci_high``, ``significant``, ``better``, ``n_pairs``, ``n_censored``, ``n_dropped``). ``--json`` prints
``{"experiment", "a", "b", "seeds", "runs", "metrics": {...}, "out", "report", "wall_s", "alpha", "warnings",
"arms", "step_divergence", "mixed"}`` (``step_divergence``: the steps whose verdicts differ between arms;
``mixed``: with ``--mixed``, per arm the metrics of that arm against the mixed arm, else null).
Exit 0 when the experiment ran, whichever arm is better, even when runs failed a chaos check (``runs_failed``
names them: a variant that breaks an invariant is a result) and whatever the warnings; 1 when the analysis
failed; 2 for a bad spec, scenario or topology (the message names the file, line and field), before any run (the
rule: :mod:`contract.exit_codes`).
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
from pipeline.errors import PipelineError
from pipeline.jobs.ab import (CONFIDENCE, Metric, compare_metric, metric_warnings, power_warnings,
                              restricted, summary_text)

from orchestrator.experiments.ab import AbPlan, run_arms
from orchestrator.chaos.engine import ChaosOptions, ChaosSetupError, load_inputs, require_hostable
from orchestrator.chaos.scenario import ScenarioError
from orchestrator.cli.options import BadInput
from orchestrator.model.topology import TopologyError

__all__ = ["ab"]


def _spec(text: str, flag: str) -> VariantSpec:
    try:
        return VariantSpec.parse(text)
    except VariantError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


CHECKER_METRIC = Metric("checker_snake_reconverged_mean_s", True,
                        "the chaos checker's snake re-convergence after each fault step, mean over the run's steps")


def _fault_steps(run: dict[str, Any]) -> list[tuple[float | None, float | None]]:
    """(snake re-convergence, seconds watched) of each fault step of a run, the first step (the start) aside."""
    return [(s.get("snake_converged_s"), s.get("watched_s", s.get("bound_s"))) for s in run["steps"][1:]
            if s.get("action") not in ("wait", "check")]  # fmt: skip


def _checker_pair(a: list, b: list) -> tuple[float, float, str] | None:
    """Both arms' mean re-convergence over their fault steps, each step restricted to its pair's horizon
    (pipeline.jobs.ab.restricted: a step that never re-converged counts as the bound it was watched for)."""
    if not a or len(a) != len(b):
        return None
    va, vb, who = [], [], set()
    for (ta, ba), (tb, bb) in zip(a, b):
        got = restricted(ta, ba, tb, bb)
        if got is None:
            return None
        va.append(got[0])
        vb.append(got[1])
        who.update(got[2])
    return sum(va) / len(va), sum(vb) / len(vb), "".join(sorted(who))


def checker_comparison(manifest: dict[str, Any], confidence: float = CONFIDENCE) -> dict[str, Any] | None:
    """The same paired statistics on what the chaos checker measured live (the manifest's per-step snake
    re-convergence): a cross-check of the pipeline's event-derived numbers. A step that never re-converged
    counts, censored at the time it was watched (its bound, or the checker's horizon past it), as the pipeline
    counts an episode that never converged."""
    steps = {(r["seed"], r["arm"]): _fault_steps(r) for r in manifest["runs"]}
    pairs: list[tuple[int, float, float]] = []
    censored: dict[str, list[int]] = {"a": [], "b": []}
    dropped: list[int] = []
    for seed in manifest["seeds"]:
        if (seed, "a") not in steps or (seed, "b") not in steps or not steps[(seed, "a")]:
            continue
        got = _checker_pair(steps[(seed, "a")], steps[(seed, "b")])
        if got is None:
            dropped.append(seed)
            continue
        pairs.append((seed, got[0], got[1]))
        for arm in got[2]:
            censored[arm].append(seed)
    if not pairs:
        return None
    return compare_metric(CHECKER_METRIC, pairs, censored, dropped, confidence)


def analyze_arms(run_dirs: list[str], out: Path, master: str, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The Spark analysis of every run of the experiment: the A/B document (experiment -> arms and metrics), its
    intervals at ``confidence`` (in the report and tables too)."""
    spark = session.get_spark(master, "snekbed-ab")
    try:
        result = analysis.analyze(spark, run_dirs, out, confidence=confidence)
    finally:
        spark.stop()
    return result.ab


def _print_result(result: dict[str, Any], exp: dict[str, Any]) -> None:
    """The plain-text result (without --json)."""
    click.echo(summary_text({result["experiment"]: exp}))
    chk = result["checker"]
    if chk is not None:
        censored = f", {chk['n_censored']} censored" if chk.get("n_censored") else ""
        click.echo(f"chaos checker, snake re-convergence per fault (mean per run): a {chk['a']['median']:.3g} s, "
                   f"b {chk['b']['median']:.3g} s (medians); b - a = {chk['diff']:.3g} s "
                   f"[{chk['ci_low'] if chk['ci_low'] is not None else '-'}, "
                   f"{chk['ci_high'] if chk['ci_high'] is not None else '-'}], {chk['n_pairs']} pairs{censored}")
    click.echo(f"report: {result['report']}  ({result['wall_s']:.0f} s)")


def _print_divergence(div: list[dict[str, Any]]) -> None:
    """Where the arms' verdicts differ, step by step (the manifest's step_divergence)."""
    if not div:
        click.echo("step verdicts: the arms agree on every step of every seed")
        return
    click.echo(f"step verdicts differ on {len(div)} step(s):")
    for d in div[:20]:
        shown = ", ".join(f"{arm} {v or '-'}" for arm, v in d["verdicts"].items())
        click.echo(f"  seed {d['seed']} step {d['index']} ({d['action']}): {shown}")
    if len(div) > 20:
        click.echo(f"  ... {len(div) - 20} more in ab.json")


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


@click.command("ab")
@click.option("--a", "a_text", required=True, metavar="SPEC", help="arm A: a variant with optional ,knob=value pairs")
@click.option("--b", "b_text", required=True, metavar="SPEC", help="arm B, e.g. snek,root_filter=1")
@click.option("--scenario", required=True, help="chaos scenario file or shipped name (snekbed chaos --list)")
@click.option("--topology", "topology_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="topology file (optional for a sequence that builds its network)")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="seeds 0..N-1; each runs both arms")
@click.option("--alpha", type=click.FloatRange(0.0001, 0.5), default=round(1 - CONFIDENCE, 12), show_default=True,
              help="the paired test's level: significant at p <= alpha, intervals at 1 - alpha; warns before the "
                   "runs when the seeds cannot reach it")
@click.option("--backend", type=click.Choice(["inproc", "docker"]), default="inproc", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("ab"), show_default=True)
@click.option("--master", default="local[*]", show_default=True, help="Spark master for the analysis")
@click.option("--image", default=None, help="node image for --backend docker")
@click.option("--pinecone-src", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="--backend docker, an arm or node of spec pinecone: the Pinecone reference to build the reference "
                   "node from [default: $SNEKBED_PINECONE_SRC, else ../shared/reference]")
@click.option("--mixed", is_flag=True, help="a third arm: the topology's nodes alternating A's spec and B's (a mixed "
              "network), compared with each arm")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def ab(a_text: str, b_text: str, scenario: str, topology_path: Path | None, seeds: int, alpha: float, backend: str,
       out: Path, master: str, image: str | None, pinecone_src: Path | None, mixed: bool,
       as_json: bool) -> None:  # fmt: skip
    """Compare two protocol variants on the same topology, faults and seeds."""
    t0 = time.monotonic()
    a, b = _spec(a_text, "--a"), _spec(b_text, "--b")
    try:
        sc, topology = load_inputs(scenario, topology_path)
        for arm, spec in (("--a", a), ("--b", b)):  # before any run: an arm the backend cannot host is a usage error
            try:
                require_hostable(sc, topology, ChaosOptions(backend=backend, variant=spec))
            except ChaosSetupError as exc:
                raise click.BadParameter(str(exc), param_hint=arm) from None
    except (ScenarioError, TopologyError) as exc:
        raise BadInput(str(exc)) from None
    warnings = power_warnings(seeds, alpha)
    _warn(warnings)  # before any run: the user may stop here and add seeds
    if mixed and topology is None:
        raise click.BadParameter("a mixed arm alternates the topology's nodes: give --topology", param_hint="--mixed")
    plan = AbPlan(a, b, sc, topology, list(range(seeds)), backend=backend, out=out, image=image,
                  pinecone_src=pinecone_src, alpha=alpha, warnings=tuple(warnings), mixed=mixed)

    def progress(arm: str, seed: int, run: dict[str, Any]) -> None:
        if not as_json:
            reconv = [t for t, _ in _fault_steps(run)]
            shown = " ".join("never" if r is None else f"{r:.1f}" for r in reconv)
            click.echo(f"seed {seed:>3} arm {arm} ({run['spec']}): {run['verdict']}, snake re-convergence [{shown}] s, "
                       f"{run['wall_s']:.1f} s", err=True)

    manifest = run_arms(plan, progress)
    run_dirs = [r["run_dir"] for r in manifest["runs"] if r["run_dir"]]
    failed = [f"{r['arm']}-s{r['seed']}" for r in manifest["runs"] if r["verdict"] != "pass"]
    if not as_json:
        click.echo(f"{len(run_dirs)} runs in {manifest['runs_wall_s']:.0f} s; analysing with Spark", err=True)
    try:
        doc = analyze_arms(run_dirs, out / "analysis", master, round(1 - alpha, 12))
    except PipelineError as exc:
        click.echo(f"error: analysis failed: {exc}", err=True)
        sys.exit(FAILED)
    exp = doc.get(manifest["experiment"])
    if exp is None:
        click.echo(f"error: the analysis found no A/B runs of experiment {manifest['experiment']}", err=True)
        sys.exit(FAILED)
    late = metric_warnings(exp["metrics"], alpha)
    _warn(late)
    result = {
        "experiment": manifest["experiment"], "a": manifest["a"], "b": manifest["b"], "scenario": manifest["scenario"],
        "topology": manifest["topology"], "backend": backend, "seeds": seeds, "runs": len(run_dirs),
        "runs_failed": failed, "metrics": exp["metrics"], "checker": checker_comparison(manifest, round(1 - alpha, 12)),
        "out": str(out), "report": str(out / "analysis" / "report.html"), "wall_s": round(time.monotonic() - t0, 1),
        "alpha": alpha, "warnings": warnings + late, "arms": manifest["arms"],
        "step_divergence": manifest["step_divergence"],
        "mixed": {arm: doc[f"{manifest['experiment']} ({arm} vs mixed)"]["metrics"] for arm in ("a", "b")
                  if f"{manifest['experiment']} ({arm} vs mixed)" in doc} if mixed else None,
    }  # fmt: skip
    (out / "ab-result.json").write_text(json.dumps(result, indent=1))
    if as_json:
        click.echo(json.dumps(result))
    else:
        _print_result(result, exp)
    if failed:
        click.echo(f"note: {len(failed)} run(s) failed a chaos check: {', '.join(failed[:10])}", err=True)
    if not as_json:
        _print_divergence(result["step_divergence"])
