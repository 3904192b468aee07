"""``snekbed chaos SCENARIO [--topology FILE] [--backend inproc|docker|swarm] [--seed N] [--record DIR] [--json]``.

``--repeat N`` runs it N times and reports the agreement per step (orchestrator.chaos.repeat); ``--shrink``
delta-debugs a failing reference sequence (orchestrator.chaos.shrink).

Exit codes (the rule of :mod:`contract.exit_codes`): 0 when every step passed, 1 when one failed (the JSON names
it), 2 for a bad scenario or topology file (the message names the file, line and field) or a run the backend
refuses before it starts, 3 when a fault was not confirmed (the verdict ``invalid``: the run proves nothing about
it).
``SCENARIO`` is a YAML scenario, a reference-simulator sequence (``.json``), or the
name of a shipped one (``snekbed chaos --list``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import click

from node.core.variants import VariantError, VariantSpec

from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S
from orchestrator.chaos.engine import (
    BACKENDS, ChaosOptions, ChaosSetupError, execute, require_topology, resolve_scenario, shipped_scenarios, step_line,
)  # fmt: skip
from orchestrator.chaos.nemesis import random_scenario
from orchestrator.chaos.repeat import EXIT_CODES, agreement_table, exit_code, repeat
from orchestrator.chaos.scenario import Scenario, ScenarioError, load_scenario, parse_reference_sequence
from orchestrator.chaos.shrink import shrink
from orchestrator.cli.options import BadInput, address_option
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.sessions.progress import ProgressLine
from orchestrator.model.topology_loaders import load_topology

#: EXIT_CODES (orchestrator.chaos.repeat's): the run's verdict -> the exit code: 0 pass, 1 fail, 3 invalid (a fault
#: was not confirmed: docs/chaos.md, "Confirmed faults"); 2 is a bad scenario or topology file
__all__ = ["EXIT_CODES", "chaos"]


@click.command("chaos")
@click.argument("scenario", required=False)
@click.option("--topology", "topology_path", type=click.Path(dir_okay=False, path_type=Path),
              help="topology file (optional for a sequence that builds its network)")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="inproc", show_default=True,
              help="swarm: services of the swarm this engine manages (docs/chaos.md, \"Swarm\")")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--random", "random_n", type=int, default=None, help="run a seeded random schedule of N faults")
@click.option("--clock", type=click.Choice(["virtual", "real"]), default="virtual", show_default=True,
              help="in-process backend only")
@click.option("--boot-spread", "boot_spread_s", type=click.FloatRange(min=0), default=DEFAULT_BOOT_SPREAD_S,
              show_default=True,
              help="in-process backend only: boot each node a random time (from the seed) up to this many seconds "
                   "before the links come up, so the routers' timers are not in lockstep; 0 boots all at once")
@click.option("--record", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write the run directory here (for `snekbed analyze`); Docker runs always record, under --runs-dir")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where Docker run directories go [default: $SNEKBED_RUNS_DIR or ./runs]")
@click.option("--image", default=None, help="node image for --backend docker [default: build or reuse snekbed-node]")
@click.option("--keep", is_flag=True, help="--backend docker: leave the containers up at the end (`snekbed down`)")
@click.option("--write-scenario", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="with --random: write the generated schedule as a scenario file that replays it")
@click.option("--variant", "variant_text", default="snek", show_default=True, metavar="NAME[,KNOB=VALUE...]",
              help="every node's protocol variant (snek, snek-s0, legacy; docs/variants.md; pinecone: the Pinecone "
                   "reference itself, --backend docker|swarm) unless the topology or a join step names another")
@click.option("--knob", "knobs", multiple=True, metavar="KEY=VALUE", help="a variant knob for every node; repeatable")
@click.option("--monitoring", is_flag=True,
              help="--backend docker: run Prometheus with the run (its URL is printed; `snekbed down` removes it, so "
                   "add --keep to look at it afterwards) scraping every node and this process's own view of the run")
@click.option("--prometheus-image", default=None, metavar="IMAGE",
              help="Prometheus image for --monitoring [default: build or reuse snekbed-prometheus, no registry needed]")
@click.option("--metrics", "metrics_at", default=None, metavar="HOST:PORT",
              help="serve this process's view of the run (snekbed_* series, docs/metrics.md) on HOST:PORT/metrics; "
                   "in-process runs need --clock real")
@click.option("--view", "view_at", default=None, metavar="HOST:PORT",
              help="serve the live `snekbed view` page of an in-process --clock real run (docs/view.md); a Docker "
                   "run is followed with `snekbed view --live`")
@click.option("--pinecone-src", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="--backend docker|swarm, nodes whose spec is pinecone: the Pinecone reference to build the reference "
                   "node from [default: $SNEKBED_PINECONE_SRC, else ../shared/reference]")
@click.option("--reference-image", default=None, metavar="IMAGE",
              help="--backend docker|swarm, nodes whose spec is pinecone: run this reference node image instead of "
                   "building one (a multi-host swarm: the tag `snekbed cluster up` printed)")
@click.option("--repeat", "repeat_n", type=click.IntRange(min=1), default=None, metavar="N",
              help="run the scenario N times (same seed) and report how often each step's verdict agreed; the exit "
                   "code is the worst run's (docs/chaos.md, \"Reproducibility\")")
@click.option("--shrink", is_flag=True,
              help="SCENARIO is a failing reference sequence (.json): delta-debug it to a smaller sequence that still "
                   "fails the same invariant, and write it (--shrink-out)")
@click.option("--shrink-out", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="with --shrink: where the smaller sequence goes [default: NAME.shrunk.json beside SCENARIO]")
@click.option("--shrink-runs", type=click.IntRange(min=1), default=200, show_default=True, metavar="N",
              help="with --shrink: at most this many reruns")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--list", "list_only", is_flag=True, help="list the shipped scenarios and exit")
@click.option("--quiet", is_flag=True, help="in process: no progress line on stderr")
@click.option("--progress-every", "progress_every_s", type=click.FloatRange(min=0.05), default=None,
              help="in process: seconds between two progress lines on stderr [default: 5; a terminal's display: 0.5]")
def chaos(scenario: str | None, topology_path: Path | None, backend: str, seed: int, random_n: int | None,
          clock: str, record: Path | None, runs_dir: Path | None, image: str | None, keep: bool,
          write_scenario: Path | None, variant_text: str, knobs: tuple[str, ...], monitoring: bool,
          prometheus_image: str | None, metrics_at: str | None, view_at: str | None, pinecone_src: Path | None,
          reference_image: str | None, as_json: bool, list_only: bool, boot_spread_s: float, repeat_n: int | None, shrink: bool,
          shrink_out: Path | None, shrink_runs: int, quiet: bool, progress_every_s: float | None) -> None:  # fmt: skip
    """Run a chaos scenario (faults, traffic, checks) and give a verdict."""
    _modes(scenario, repeat_n, shrink, shrink_out, view_at)
    if monitoring and backend != "docker":  # swarm too: Prometheus sits on one engine's control network
        raise click.UsageError("--monitoring runs Prometheus next to Docker nodes: it needs --backend docker "
                               "(watch an in-process run with --clock real --metrics HOST:PORT)")
    if metrics_at is not None and backend == "inproc" and clock != "real":
        raise click.UsageError("--metrics on an in-process run needs --clock real (virtual time outruns any scrape)")
    if view_at is not None and (backend != "inproc" or clock != "real"):
        raise click.UsageError("--view serves an in-process --clock real run; follow a Docker run with "
                               "`snekbed view --live` (virtual-clock runs: record, then `snekbed view RUN_DIR`)")
    view_addr = address_option(view_at, "--view")
    metrics_addr = address_option(metrics_at, "--metrics")
    try:
        variant = VariantSpec.parse(variant_text).with_knobs(knobs)
    except VariantError as exc:
        raise click.BadParameter(str(exc), param_hint="--variant/--knob") from None
    if list_only:
        for name, path in sorted(shipped_scenarios().items()):
            sc = load_scenario(path)
            click.echo(f"{name:<24} {sc.description.strip().splitlines()[0] if sc.description else ''}")
        return
    sc, topology = _inputs(scenario, topology_path, random_n, seed, write_scenario)

    def progress(rec: dict[str, Any]) -> None:
        if not as_json:
            click.echo(step_line(rec))

    options = ChaosOptions(backend=backend, seed=seed, variant=variant, record=record, runs_dir=runs_dir, image=image,
                           keep=keep, clock=clock, boot_spread_s=boot_spread_s, monitoring=monitoring,
                           prometheus_image=prometheus_image, metrics_at=metrics_addr, view_at=view_addr,
                           pinecone_src=pinecone_src, reference_image=reference_image,
                           watch=None if quiet else partial(ProgressLine, every_s=progress_every_s))  # fmt: skip
    try:
        if shrink:
            assert scenario is not None
            sys.exit(_shrink(Path(scenario), sc, topology, options, shrink_out, shrink_runs, as_json))
        if repeat_n is not None:
            sys.exit(_repeat(sc, topology, options, repeat_n, as_json))
        out = execute(sc, topology, options, progress)
    except ChaosSetupError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        t = out["traffic"]
        if "mobility" in out:  # nodes that moved (docs/mobility.md)
            m, w = out["mobility"], out.get("watch") or {}
            click.echo(f"moved {m['moved_s']:g} s: radio links {m['link_ups']} up, {m['link_downs']} down"
                       + (f"; watch: {w['readings']} readings, {w['judged_readings']} judged, {w['violations']} "
                          "violation(s)" if w else ""))
        click.echo(f"verdict: {out['verdict']}  (background pings delivered {t['delivered']}/{t['sent']})"
                   + (f"; run directory {out['run_dir']}" if out["run_dir"] else ""))
    sys.exit(exit_code(out["verdict"]))


def _modes(scenario: str | None, repeat_n: int | None, shrink: bool, shrink_out: Path | None,
           view_at: str | None) -> None:  # fmt: skip
    """Usage errors of --repeat and --shrink."""
    if shrink and repeat_n is not None:
        raise click.UsageError("--shrink and --repeat do not go together")
    if shrink and (scenario is None or Path(scenario).suffix.lower() != ".json"):
        raise click.UsageError("--shrink takes a reference sequence file (.json)")
    if shrink_out is not None and not shrink:
        raise click.UsageError("--shrink-out goes with --shrink")
    if view_at is not None and (shrink or repeat_n is not None):
        raise click.UsageError("--view serves one run: not with --shrink or --repeat")


def _inputs(scenario: str | None, topology_path: Path | None, random_n: int | None, seed: int,
            write_scenario: Path | None) -> tuple[Scenario, Topology | None]:  # fmt: skip
    """The scenario and the topology; a bad file is exit 2 (the message names the file, line and field)."""
    try:
        topology = load_topology(topology_path) if topology_path is not None else None
        if random_n is not None:
            if topology is None:
                raise click.UsageError("--random needs --topology")
            sc = random_scenario(topology, random_n, seed)
            if write_scenario is not None:
                write_scenario.write_text(sc.to_yaml())
        elif scenario is None:
            raise click.UsageError("give a SCENARIO (a file or a shipped name: --list) or --random N")
        else:
            sc = load_scenario(resolve_scenario(scenario), topology)  # every node a step names looked up now
        require_topology(sc, topology, scenario)
    except (ScenarioError, TopologyError) as exc:
        raise BadInput(str(exc)) from None
    return sc, topology


def _repeat(sc: Scenario, topology: Topology | None, options: ChaosOptions, n: int, as_json: bool) -> int:
    """--repeat N: the runs, the agreement per step (JSON or a table); the worst run's exit code."""

    def once(k: int) -> dict[str, Any]:
        record = options.record / f"run-{k + 1}" if options.record is not None else None
        out = execute(sc, topology, dataclasses.replace(options, record=record))
        if not as_json:
            click.echo(f"run {k + 1}/{n}: {out['verdict']}" + (f" (failed steps {out['failed_steps']})"
                                                              if out["failed_steps"] else ""), err=True)  # fmt: skip
        return out

    doc = repeat(once, n)
    click.echo(json.dumps(doc, indent=1) if as_json else agreement_table(doc))
    return exit_code(doc["verdict"])


def _shrink(path: Path, sc: Scenario, topology: Topology | None, options: ChaosOptions, out_path: Path | None,
            max_runs: int, as_json: bool) -> int:  # fmt: skip
    """--shrink: the original run, then ddmin (orchestrator.chaos.shrink); the smaller sequence written."""
    quiet = dataclasses.replace(options, record=None)
    original = execute(sc, topology, options)
    reruns = 0

    def run(text: str) -> dict[str, Any]:
        nonlocal reruns
        reruns += 1
        cand = parse_reference_sequence(text, file=str(path), name=path.stem, topology=topology)
        out = execute(cand, topology, quiet)
        if not as_json:
            click.echo(f"rerun {reruns}: {len(cand.steps)} steps, {out['verdict']}", err=True)
        return out

    result = shrink(path.read_text(encoding="utf-8"), run, original=original, max_runs=max_runs, file=str(path))
    if result is None:
        click.echo(f"{path}: the run's verdict is {original['verdict']} with no invariant failed: nothing to shrink",
                   err=True)  # fmt: skip
        return exit_code(original["verdict"])
    target = out_path or path.with_name(f"{path.stem}.shrunk.json")
    target.write_text(result.text, encoding="utf-8")
    doc = {"source": str(path), "written": str(target), **result.to_dict()}
    if as_json:
        click.echo(json.dumps({"shrink": doc}, indent=1))
    else:
        click.echo(f"shrunk {path} from {doc['commands_before']} to {doc['commands_after']} commands in "
                   f"{doc['reruns']} reruns, still failing {doc['invariant']}: {target}"
                   + ("" if doc["one_minimal"] else f" (the {max_runs} reruns ran out: maybe not minimal)"))
    return exit_code(original["verdict"])
