"""Entry point for ``spark-submit``: the same analysis as ``snekbed analyze``, on the launcher's session.

    python -m pipeline.package dist/snekbed-pipeline.zip        # the code, for the executors
    spark-submit --master spark://HOST:7077 \\
        --py-files dist/snekbed-pipeline.zip \\
        --driver-java-options -XX:-DontCompileHugeMethods \\
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        pipeline/submit.py --out /shared/analysis /shared/runs/run-1 /shared/runs/run-2

Run directories and ``--out`` must be paths every executor and the driver can
read (a shared filesystem). Master, memory and the rest come from
spark-submit; this script only adds the pipeline's SQL settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="submit.py", description="snekbed analysis under spark-submit")
    parser.add_argument("run_dirs", nargs="+", help="run directories, or directories of them")
    parser.add_argument("--out", default="analysis", help="output directory (tables/ and the report)")
    parser.add_argument("--timeline-bin", type=float, default=5.0, help="delivery-over-time bin (s)")
    args = parser.parse_args(argv)

    from pipeline import analysis, io
    from pipeline.errors import PipelineError

    spark = io.get_spark(None, "snekbed-analyze")  # master and resources from spark-submit
    t0 = time.perf_counter()
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
