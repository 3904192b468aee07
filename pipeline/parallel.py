"""The analysis's independent Spark jobs, side by side on the driver's threads.

A small job's time is mostly the driver's (planning, code generation, scheduling, committing its output), so two
jobs at a time keep two cores busy; a big job's tasks still spread over all the cores. Each call gets its inputs
as arguments and returns its result: the caller combines them (no thread writes what another reads).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession

__all__ = ["collect_all", "job_threads", "outcomes", "side_by_side"]


def job_threads(spark: SparkSession) -> int:
    """How many of the analysis's independent jobs run at once: Spark's default parallelism (the cores of a local
    master), at least 2 and at most 4."""
    return max(2, min(4, spark.sparkContext.defaultParallelism))


def outcomes(workers: int, *calls: Callable[[], Any], name: str = "snekbed-analyze") -> list[Future]:
    """Run ``calls`` (each with its inputs bound, e.g. ``functools.partial``) on ``workers`` threads and wait for
    all of them; return their futures, in ``calls``' order, each done (a result or a failure). For a caller that must
    clean up after the calls that succeeded when another failed."""
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=name) as pool:
        return [pool.submit(call) for call in calls]


def side_by_side(workers: int, *calls: Callable[[], Any], name: str = "snekbed-analyze") -> list[Any]:
    """Run ``calls`` on ``workers`` threads, each submitting its own Spark jobs; wait for all of them, then raise the
    first failure, if any; else return their results in ``calls``' order. No call reads a table another one writes,
    so the tables are those of making the calls one after another."""
    return [future.result() for future in outcomes(workers, *calls, name=name)]


def collect_all(queries: Mapping[str, DataFrame], workers: int = 2) -> dict[str, list[Row]]:
    """Collect every query of ``queries`` (name -> DataFrame, each a small result), ``workers`` at a time: a
    small query's time is mostly the driver's (planning, scheduling), so side by side they keep the cores busy.
    Returns name -> rows, in ``queries``' order; raises the first failure, after the others have ended."""
    got = side_by_side(workers, *(df.collect for df in queries.values()), name="snekbed-collect")
    return dict(zip(queries, got))
