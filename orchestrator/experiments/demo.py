"""The demo, the main job on a fresh machine (``snekbed demo``: orchestrator.cli.demo parses and calls :func:`run_demo`).

With a reachable Docker engine and the Docker backend installed, run the shipped
``demo`` chaos scenario (kill the root, partition into halves, heal, with pings
flowing all along) on the 12-node mixed mesh as containers, and tear down.
Otherwise run it on the reference graph-250 topology in the in-process backend.
Either way it says which one ran and why, records the run
directory (docs/run-dataset.md) under ``runs/<id>/``, analyzes it with Spark
(``snekbed analyze``, local mode) and prints where the report is.

Spark's JVM starts in a background thread while the scenario runs (it costs about 10 s of mostly waiting that
would otherwise come after the run); in the same thread the analysis then warms up on a small recorded
in-process run (its first pass compiles Spark's generated code and JIT-compiles Spark itself, so the
real analysis after the run is the warm second pass), at a low CPU priority so the nodes keep theirs.
The demo ends with where its time went (docs/performance.md).

Lines for the user go through an :class:`Echo` (the results to ``out``, progress and explanations to ``err``);
what stops the demo is a :class:`DemoError`, which the command line reports (exit 1), or before anything ran a
:class:`DemoRefused` (exit 2: a bad file, Docker asked for and not reachable, no analysis possible here).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import analysis, session
from pipeline.errors import PipelineError

from orchestrator.chaos.backend import DeferredRemoval
from orchestrator.chaos.engine import ChaosOptions, execute, resolve_scenario, step_line
from orchestrator.chaos.scenario import Scenario, ScenarioError, load_scenario
from orchestrator.model.runs import new_run_id, runs_root
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology

__all__ = ["DemoError", "DemoOptions", "DemoRefused", "Echo", "SparkWarmup", "analyze_run", "run_demo",
           "where_time_went"]

REPO = Path(__file__).resolve().parents[2]
SHARED_GRAPH = REPO.parent / "shared" / "topologies" / "pinecone" / "graph-250.txt"
MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"
#: a demo topology up to this many nodes records a small input (pipeline.session.SMALL_INPUT_BYTES) for the analysis
SMALL_DEMO_NODES = 300


class DemoError(Exception):
    """The demo cannot go on, or its run failed a chaos check: the message says why."""


class DemoRefused(DemoError):
    """The demo refused before anything ran: a bad scenario or topology file, Docker asked for and not reachable,
    or the analysis asked for and not possible here."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``snekbed demo`` was asked: ``backend`` auto, docker or inproc; ``topology`` and ``scenario`` instead of
    the defaults (mesh-12 on Docker, graph-250 in process; the shipped demo-quick)."""

    backend: str = "auto"
    runs_dir: Path | None = None
    analyze: bool = True
    master: str = "local[2]"
    topology: Path | None = None
    scenario: str = "demo-quick"


@dataclass(frozen=True)
class Echo:
    """Where the demo's lines go: its results (``out``) and its progress and explanations (``err``)."""

    out: Callable[[str], None]
    err: Callable[[str], None]


def _docker_reason() -> str | None:
    """None when the Docker backend can run here, else why not."""
    if importlib.util.find_spec("orchestrator.backends.docker") is None:
        return "the Docker backend is not part of this build yet"
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # the SDK raises several unrelated types when no engine answers
        return f"no Docker engine reachable ({exc.__class__.__name__})"
    return None


def _analysis_reason() -> str | None:
    """None when `snekbed analyze` can run here, else why not."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[pipeline]')"
    if shutil.which("java") is None:
        return "no `java` on PATH (Spark needs a JRE; scripts/setup.sh installs one)"
    return None


#: the CPU priority (nice) of Spark's JVM while it warms up beside the scenario's nodes
WARMUP_NICE = 10
#: Analyses of the warm-up run, at most, while the scenario goes on: a JVM's first analysis compiles Spark's
#: generated code and JIT-compiles Spark's own, and the next ones keep getting faster for a few rounds
#: (21, 15, then 12-13 s for the same small run in one JVM on a 2-core machine).
WARMUP_ROUNDS = 3


class WarmupCancelled(Exception):
    """The scenario ended first: the warm-up analysis stops at its next stage (pipeline.analysis progress)."""


class SparkWarmup:
    """Start the analysis's SparkSession in a thread, so the JVM starts while the scenario runs; then, with
    ``warm_run=True``, warm the analysis up on a small recorded run (``warm_up``).

    ``session()`` stops a warm-up still running, waits for the thread and returns the session, or raises
    what starting it raised (a failed warm-up is only reported: ``warmup_error``). The session is built by
    ``pipeline.session.get_spark`` with the settings ``snekbed analyze`` uses. The thread is a daemon: a demo
    that fails before the analysis does not wait for it (``close()`` stops a session that did start).
    """

    def __init__(self, master: str, driver_memory: str = "2g", input_bytes: int | None = None,
                 warm_run: bool = False) -> None:  # fmt: skip
        self.started_at = time.monotonic()
        self.ready_s: float | None = None  # how long the JVM and session took to start
        self.warmup_s: float | None = None  # how long the warm-up analyses took (None: none ran to its end)
        self.warmup_rounds = 0  # warm-up analyses run to their end
        self.warmup_error: str | None = None
        self._spark: Any = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(master, driver_memory, input_bytes, warm_run),
                                        name="spark-warmup", daemon=True)
        self._thread.start()

    def _start(self, master: str, driver_memory: str, input_bytes: int | None, warm_run: bool) -> None:
        try:
            self._spark = session.get_spark(master, "snekbed-analyze", driver_memory=driver_memory,
                                       input_bytes=input_bytes)
        except BaseException as exc:  # handed to the caller of session()
            self._error = exc
        self.ready_s = time.monotonic() - self.started_at
        if self._spark is not None and warm_run:
            t = time.monotonic()
            try:
                self.warm_up()
            except Exception as exc:  # best effort: the real analysis runs either way, and says so
                # stopped by session(): at a stage boundary (WarmupCancelled) or a job it cancelled (a py4j error)
                self.warmup_error = (f"stopped after {time.monotonic() - t:.0f} s: the run ended first"
                                     if self._stop.is_set() else f"{type(exc).__name__}: {str(exc)[:200]}")
            if self.warmup_rounds:
                self.warmup_s = time.monotonic() - t

    def warm_up(self) -> None:
        """Analyze a small in-process run (mesh-12 with a root kill, recorded by ``snekbed sim`` in a
        subprocess) with the session, up to ``WARMUP_ROUNDS`` times (``warmup_rounds`` counts those that
        ended), into a temporary directory that is removed after, with the JVM's CPU priority lowered to
        ``WARMUP_NICE`` (Linux, best effort). Raises WarmupCancelled when ``session()`` is called first, and
        whatever the recording or the analysis raises."""
        lowered = _renice(self._spark, WARMUP_NICE)
        tmp = Path(tempfile.mkdtemp(prefix="snekbed-warmup-"))
        try:
            run = tmp / "run"
            subprocess.run(["nice", "-n", str(WARMUP_NICE), sys.executable, "-m", "orchestrator.cli", "sim", str(MESH),
                            "--kill-root", "--seed", "0", "--run-id", "warmup", "--record", str(run), "--json"],
                           check=True, capture_output=True, timeout=120)  # fmt: skip

            def stop_here(stage: str, detail: str) -> None:
                if self._stop.is_set():
                    raise WarmupCancelled(stage)

            for _ in range(WARMUP_ROUNDS):
                analysis.analyze(self._spark, [run], tmp / "analysis", progress=stop_here, check_reconciliation=False)
                self.warmup_rounds += 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            self._spark.catalog.clearCache()  # a cancelled ingest may leave its cached verdicts behind
            if lowered:
                _renice(self._spark, 0)

    def stop_soon(self) -> None:
        """Stop a warm-up still running, without waiting: its jobs are cancelled and it ends at its next stage
        (the nodes' shutdown after the scenario then has the CPU to itself)."""
        if self._thread.is_alive():
            self._stop.set()
            if self._spark is not None:
                self._spark.sparkContext.cancelAllJobs()

    def session(self) -> Any:
        if self._thread.is_alive():
            self._stop.set()
        while self._thread.is_alive():
            # the warm-up's side-by-side threads may submit a job after a cancel: cancel until it has stopped
            if self._spark is not None:
                self._spark.sparkContext.cancelAllJobs()
            self._thread.join(0.2)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._spark

    def close(self) -> None:
        if not self._thread.is_alive() and self._spark is not None:
            self._spark.stop()
            self._spark = None


def _renice(spark: Any, nice: int) -> bool:
    """Set the CPU priority of every thread of Spark's local JVM to ``nice`` (threads it starts later inherit
    it). Linux only, best effort: False when the JVM or its threads cannot be found or changed (raising the
    priority again needs privileges a user may not have; the JVM then stays low, which only costs time
    when something else competes for the CPU)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    tasks = Path(f"/proc/{getattr(proc, 'pid', 0)}/task")
    if proc is None or not tasks.is_dir():
        return False
    changed = False
    for tid in os.listdir(tasks):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            changed = True
        except OSError:  # the thread ended, or no privilege to raise its priority
            pass
    return changed


def analyze_run(run_dir: Path, warm: SparkWarmup, timings: dict[str, float], echo: Echo) -> Path:
    """What `snekbed analyze RUN_DIR --out RUN_DIR/analysis` does, on the warmed-up session; returns the
    report's path and adds the analysis's phases to ``timings``. Raises DemoError."""
    out = run_dir / "analysis"
    t = time.monotonic()
    try:
        spark = warm.session()
        timings["analysis: waiting for Spark (and its warm-up)"] = time.monotonic() - t
        echo.err(f"demo: analyzing {run_dir} with Spark")
        t = time.monotonic()
        result = analysis.analyze(spark, [run_dir], out, progress=lambda stage, detail: echo.err(f"  {stage}: {detail}"))
        timings["analysis: jobs and report"] = time.monotonic() - t
    except PipelineError as exc:
        raise DemoError(str(exc)) from exc
    finally:
        t = time.monotonic()
        warm.close()
        timings["analysis: stopping Spark"] = time.monotonic() - t
    echo.err(f"demo: analyzed {result.events:,} events, {result.quarantined} line(s) quarantined")
    return out / "report.html"


def _wait_for_removal(removal: DeferredRemoval | None, run_id: str, timings: dict[str, float], echo: Echo) -> None:
    """Wait for the run's deferred teardown; its time goes into ``timings``. A failure is reported, not raised:
    it must not hide the demo's own result or error, and `snekbed down RUN_ID` finishes the job."""
    if removal is None or not removal.started:
        return
    try:
        timings["containers and networks removed, after the analysis"] = removal.wait()
    except Exception as exc:  # the engine's errors come in many types; what is left is named on stderr
        echo.err(f"demo: removing the run's containers and networks failed: {exc} "
                 f"(remove what is left with: snekbed down {run_id})")


def where_time_went(timings: dict[str, float], total_s: float, warm: SparkWarmup | None,
                    removal: DeferredRemoval | None = None) -> str:
    """The demo's closing breakdown: each phase's seconds and share of the whole, and what ran beside them."""
    lines = [f"where the time went ({total_s:.0f} s in all):"]
    for name, secs in timings.items():
        lines.append(f"  {name:<50} {secs:6.1f} s  {100 * secs / total_s:3.0f} %")
    if removal is not None and removal.took_s is not None:
        lines.append(f"  (beside the analysis: the engine removed the containers and networks in {removal.took_s:.1f} s)")
    if warm is not None and warm.ready_s is not None:
        beside = f"Spark's JVM took {warm.ready_s:.1f} s to start"
        if warm.warmup_s is not None:
            beside += f", the analysis warmed up {warm.warmup_rounds} time(s) in {warm.warmup_s:.1f} s"
            if warm.warmup_error:
                beside += f" (one more: {warm.warmup_error})"
        elif warm.warmup_error:
            beside += f"; the analysis warm-up did not finish: {warm.warmup_error}"
        lines.append(f"  (in the background while the scenario ran: {beside})")
    return "\n".join(lines)


def run_demo(options: DemoOptions, echo: Echo) -> None:
    """Run the main experiment: a topology converges, loses its root, splits and heals, with pings flowing all
    along; the run is recorded, checked by the chaos checker and analyzed with Spark. Raises DemoError."""
    why = _docker_reason() if options.backend != "inproc" else "asked for inproc"
    if options.backend == "docker" and why:
        raise DemoRefused(f"--backend docker: {why}")
    run_id = new_run_id()
    run_dir = runs_root(options.runs_dir) / run_id
    sc, topo = _inputs(options, why, echo)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    warm = _warm_up(options, topo)
    seen_at: list[float] = []  # wall clock of each step's record

    def progress(rec: dict[str, Any]) -> None:
        seen_at.append(time.monotonic())
        echo.out(step_line(rec))
        if warm is not None and rec.get("index") == len(sc.steps) - 1:
            warm.stop_soon()  # the last step is over: the nodes stop next, and must stop within their grace period

    # Docker: once the nodes have stopped (their event logs complete) the analysis starts, and the engine removes
    # the containers and networks beside it; the demo ends only when both have
    removal = DeferredRemoval() if warm is not None else None
    try:
        out = execute(sc, topo, ChaosOptions(backend="docker" if why is None else "inproc", record=run_dir,
                                             removal=removal), progress)  # fmt: skip
    except BaseException:
        if warm is not None:
            warm.close()
        _wait_for_removal(removal, run_id, {}, echo)
        raise
    scenario_s = time.monotonic() - t0
    timings.update(_scenario_timings(out, seen_at, t0, scenario_s, removal))
    t = out["traffic"]
    echo.out(f"chaos verdict: {out['verdict']} (background pings delivered {t['delivered']}/{t['sent']}; "
             f"{scenario_s:.0f} s)")
    echo.out(f"run directory: {run_dir}")
    if warm is not None:
        try:
            report = analyze_run(run_dir, warm, timings, echo)
        finally:
            _wait_for_removal(removal, run_id, timings, echo)
        echo.out(f"report: {report}")
        echo.out(f"        {report.with_suffix('.md')}  (tables: {report.parent / 'tables'})")
    echo.out(where_time_went(timings, time.monotonic() - t0, warm, removal))
    if out["verdict"] != "pass":
        raise DemoError(f"the chaos checker failed steps {out['failed_steps']} (see above)")


def _inputs(options: DemoOptions, why: str | None, echo: Echo) -> tuple[Scenario, Topology]:
    """The scenario and the topology, saying which backend runs them (``why`` not: Docker runs them)."""
    try:
        sc = load_scenario(resolve_scenario(options.scenario))
        if why is None:
            echo.err(f"demo: Docker backend, {(options.topology or MESH).name}, scenario {sc.name}")
            return sc, load_topology(options.topology or MESH)
        echo.err(f"demo: in-process backend ({why}), scenario {sc.name}")
        return sc, load_topology(options.topology or (SHARED_GRAPH if SHARED_GRAPH.exists() else MESH))
    except (ScenarioError, TopologyError) as exc:
        raise DemoRefused(str(exc)) from None


def _warm_up(options: DemoOptions, topo: Topology) -> SparkWarmup | None:
    """Spark started beside the run (None without the analysis); DemoRefused when it cannot run here."""
    if not options.analyze:
        return None
    why_not = _analysis_reason()
    if why_not:
        raise DemoRefused(f"cannot analyze the run here: {why_not} (or run with --no-analyze)")
    # The JVM starts before the run exists, so its size is estimated: the shipped demo topologies (mesh-12,
    # graph-250) record a few MB, well inside session.SMALL_INPUT_BYTES; a bigger --topology gets the default
    # session (the same results either way, only the speed differs).
    small = len(topo.node_names) <= SMALL_DEMO_NODES
    return SparkWarmup(options.master, input_bytes=0 if small else None, warm_run=small)


def _scenario_timings(out: dict[str, Any], seen_at: list[float], t0: float, scenario_s: float,
                      removal: DeferredRemoval | None) -> dict[str, float]:  # fmt: skip
    """The scenario's phases, from the wall clock of each step's record."""
    if not seen_at:
        return {"scenario": scenario_s}
    last = "last pings answered, nodes stopped" if removal is not None and removal.started else \
        "last pings answered, nodes removed"
    return {
        "node image check (a build if sources changed)": out.get("prepare_s", 0.0),
        "nodes up, first convergence": seen_at[0] - t0 - out.get("prepare_s", 0.0),
        "faults and recoveries (scenario steps)": seen_at[-1] - seen_at[0],
        last: t0 + scenario_s - seen_at[-1],
    }
