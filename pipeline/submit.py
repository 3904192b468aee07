"""Entry point for ``spark-submit``: the same analysis as ``snekbed analyze``, on the launcher's session.

    python -m pipeline.package dist/snekbed-pipeline.zip        # the code, for the executors
    spark-submit --master spark://HOST:7077 \\
        --py-files dist/snekbed-pipeline.zip \\
        --driver-java-options -XX:-DontCompileHugeMethods \\
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        pipeline/submit.py --out /shared/analysis /shared/runs/run-1 /shared/runs/run-2

Run directories and ``--out`` must be paths every executor and the driver can
read (a shared filesystem). Master, memory, the Spark UI (``spark.ui.enabled``,
on unless turned off) and the rest come from spark-submit; this script only
adds the pipeline's SQL settings. The driver's Python is ``PYSPARK_PYTHON``
(or ``PYSPARK_DRIVER_PYTHON``); it needs pyspark, pydantic, networkx and
matplotlib. The pipeline code itself comes from the ``--py-files`` zip: the
first progress line names where the driver loaded it from.

spark-submit sends the driver's stderr to its stdout: progress lines come
first, the result (the same JSON object as ``snekbed analyze --json``) is the
last line. Exit status 1 on a pipeline error (``error: ...``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# ``spark-submit .../pipeline/submit.py`` puts this file's directory first on sys.path, which would
# make pipeline/report.py, schemas.py, ... importable as top-level modules (``report``, ``schemas``) and
# hide where the ``pipeline`` package really comes from. The package must come from --py-files.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

# Imported only now, after the path fix above (so from --py-files); this script runs under spark-submit,
# where pyspark is always there.
from pipeline import analysis  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.session import get_spark  # noqa: E402


def code_origin() -> list[str]:
    """Where the loaded ``pipeline`` modules come from: the roots (a zip or a directory) holding them."""
    roots = set()
    for name, module in list(sys.modules.items()):
        if name != "pipeline" and not name.startswith("pipeline."):
            continue
        file = getattr(module, "__file__", None)
        if file:
            depth = name.count(".") + (1 if Path(file).name == "__init__.py" else 0)
            roots.add(str(Path(file).parents[depth]))
    return sorted(roots)


def _launcher_conf(key: str, default: str) -> str:
    """A setting spark-submit passed (``--conf``, spark-defaults.conf), read before the session exists."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the launcher's JVM: its system properties hold spark-submit's settings
    return SparkConf().get(key, default)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="submit.py", description="snekbed analysis under spark-submit")
    parser.add_argument("run_dirs", nargs="+", help="run directories, or directories of them")
    parser.add_argument("--out", default="analysis", help="output directory (tables/ and the report)")
    parser.add_argument("--timeline-bin", type=float, default=5.0, help="delivery-over-time bin (s)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    print(f"code: pipeline from {', '.join(code_origin())}", file=sys.stderr, flush=True)
    ui = _launcher_conf("spark.ui.enabled", "true").strip().lower() == "true"
    spark = get_spark(None, "snekbed-analyze", ui=ui)  # master and resources from spark-submit
    try:
        result = analysis.analyze(
            spark, args.run_dirs, args.out, timeline_bin_s=args.timeline_bin,
            progress=lambda stage, detail: print(f"[{time.perf_counter() - t0:7.1f}s] {stage}: {detail}",
                                                 file=sys.stderr, flush=True),
        )
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
