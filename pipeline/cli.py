"""``snekbed analyze RUN_DIR... [--master local[*]|spark://HOST:PORT|...] [--out DIR] [--json]``.

Progress is visible while Spark works: a rich status line shows the current
stage, and a background thread polls Spark's status tracker for the running
stage's task counts. With ``--json`` the progress goes to stderr and stdout
gets one JSON object.

Exit codes (the rule of every snekbed command: :mod:`contract.exit_codes`): 0 analyzed; 1 the analysis failed
(input lines unaccounted for, Spark failing); 2 a path that is not a run directory, or a run directory that does
not meet the run-dataset contract (the message names the file and field), found before Spark starts; or Spark
that cannot start here (no Java, a bad ``--master``).
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from contract.exit_codes import BAD_INPUT
from pipeline.errors import PipelineError, SparkSetupError

__all__ = ["analyze", "spark_progress"]


@contextmanager
def spark_progress(spark, show: Callable[[str], None], every_s: float = 0.5) -> Iterator[Callable[[str, str], None]]:
    """Yield a ``progress(stage, detail)`` callback; meanwhile a thread adds Spark's live task
    counts (``SparkStatusTracker``) to what ``show`` displays."""
    state = {"text": "starting"}
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def tasks() -> str:
        parts = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                             + (f", {info.numActiveTasks} running" if info.numActiveTasks else ""))
        return "; ".join(parts[:3])

    def poll() -> None:
        while not stop.wait(every_s):
            try:
                live = tasks()
            except Exception:  # the tracker can race with a stopping context; progress is best effort
                live = ""
            show(state["text"] + (f"  [{live}]" if live else ""))

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()

    def progress(stage: str, detail: str) -> None:
        state["text"] = f"{stage}: {detail}"
        show(state["text"])

    try:
        yield progress
    finally:
        stop.set()
        thread.join(timeout=2)


def _refused(exc: PipelineError) -> click.ClickException:
    """Exit 2: refused before any job ran (printed as ``Error: ...`` like every click error)."""
    refused = click.ClickException(str(exc))
    refused.exit_code = BAD_INPUT
    return refused


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[N], local[*], spark://HOST:PORT, yarn, k8s://... ")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("analysis"),
              show_default=True, help="Where tables/ and the report go (replaced tables are overwritten).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (paths, counts, timings) on stdout.")
@click.option("--driver-memory", default="4g", show_default=True, help="Driver heap for local masters.")
@click.option("--spark-ui", is_flag=True, help="Keep the Spark UI on (http://localhost:4040).")
@click.option("--timeline-bin", "timeline_bin_s", type=float, default=5.0, show_default=True,
              help="Bin width (s) of the delivery-over-time plot.")
def analyze(run_dirs: tuple[Path, ...], master: str, out: Path, as_json: bool, driver_memory: str, spark_ui: bool,
            timeline_bin_s: float) -> None:
    """Analyze RUN_DIRs (run directories, or directories of them) with Spark.

    Writes Parquet tables under OUT/tables and OUT/report.md, OUT/report.html with PNG plots;
    runs that are arms of an A/B experiment (meta.json "ab") are also compared, into OUT/ab.json.
    Exits 2 when a run directory is invalid, 1 when input lines are unaccounted for.
    """
    from rich.console import Console

    from pipeline.rundirs import discover_runs, input_size
    from pipeline.session import get_spark

    console = Console(stderr=True)
    t0 = time.perf_counter()
    # the analysis's own imports (the jobs, matplotlib for the plots: about 1 s) load while the JVM starts
    loading = threading.Thread(target=importlib.import_module, args=("pipeline.analysis",), name="load-analysis")
    try:
        runs = discover_runs(list(run_dirs))  # a bad run directory fails here, before a JVM starts
    except PipelineError as exc:
        raise _refused(exc) from None
    loading.start()  # once there is something to analyze (an exit while it imports leaves a traceback)
    try:
        with console.status("starting Spark", spinner="dots") as status:
            spark = get_spark(master, "snekbed-analyze", ui=spark_ui, driver_memory=driver_memory,
                              input_bytes=input_size(runs))
            loading.join()
            from pipeline import analysis  # loaded by now (an import error surfaces here)

            try:
                with spark_progress(spark, lambda text: status.update(f"[bold]{text}")) as progress:
                    def report(stage: str, detail: str) -> None:
                        console.log(f"{stage}: {detail}")
                        progress(stage, detail)

                    result = analysis.analyze(spark, list(run_dirs), out, progress=report,
                                              timeline_bin_s=timeline_bin_s)
            finally:
                spark.stop()
    except SparkSetupError as exc:  # no Java, a bad --master: before any job ran
        raise _refused(exc) from None
    except PipelineError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        doc = result.to_json()
        doc["wall_s"] = round(time.perf_counter() - t0, 3)
        click.echo(json.dumps(doc))
        return
    console.print(f"[green]analyzed[/] {len(result.runs)} run(s), {result.events:,} events, "
                  f"{result.quarantined} line(s) quarantined, in {time.perf_counter() - t0:.1f} s")
    if result.ab:
        console.print(result.ab_text(), markup=False, highlight=False)
        console.print(f"A/B: {out / 'ab.json'}")
    console.print(f"report: {out / 'report.html'}  ({out / 'report.md'})")
    console.print(f"tables: {out / 'tables'}")


if __name__ == "__main__":  # pragma: no cover
    analyze(sys.argv[1:])
