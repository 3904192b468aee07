"""Fixtures for the pipeline tests: one local SparkSession per test session, and run directories.

Spark tests are marked ``@pytest.mark.spark``; without Java or pyspark they skip (and fail under CI).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, java_available, need, need_module


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_events", REPO / "benchmarks" / "gen_events.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_events"] = module
    spec.loader.exec_module(module)
    return module


gen_events = _load_generator()


def pytest_collection_modifyitems(config, items) -> None:
    """Every test here that starts Spark (its fixtures include ``spark``) carries the ``spark`` mark, so that
    ``-m "not spark"`` leaves out every one of them: an unmarked one stops the run, named."""
    here = Path(__file__).parent
    unmarked = [item.nodeid for item in items if here in Path(str(item.path)).parents
                and "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("spark") is None]
    if unmarked:
        raise pytest.UsageError("tests that start Spark need @pytest.mark.spark: " + ", ".join(unmarked))


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession, UI off, 2 shuffle partitions; skips (or fails in CI) without Java."""
    need(java_available(), "Java is needed for the Spark tests (install a JRE 17+)")
    need_module("pyspark", "pyspark is needed for the Spark tests (pip install -e .[spark])")
    from pipeline.session import get_spark

    session = get_spark("local[2]", "snekbed-tests", shuffle_partitions=2, driver_memory="2g")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synthetic_runs(tmp_path_factory) -> list[Path]:
    """Two small synthetic runs with known convergence (meta.observer), different variants and class mixes."""
    root = tmp_path_factory.mktemp("synthetic")
    runs = []
    for i, (variant, nodes) in enumerate((("snek", 12), ("snek-legacy", 9))):
        path = root / f"run-{i}"
        gen_events.generate_run(path, f"syn-{i}", nodes=nodes, duration_s=60.0, seed=40 + i, variant=variant)
        runs.append(path)
    return runs


def read_meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def _norm(value, digits: int | None):
    if isinstance(value, float) and digits is not None:
        return round(value, digits)
    if isinstance(value, list):
        return tuple(_norm(v, digits) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v, digits)) for k, v in value.items()))
    if hasattr(value, "asDict"):
        return tuple(_norm(v, digits) for v in value)
    return value


def assert_frames_equal(actual, expected, *, float_digits: int | None = 9, ordered: bool = False) -> None:
    """Whole-DataFrame equality: same column names and types, same rows (as a multiset unless ``ordered``).

    Floats are compared after rounding to ``float_digits`` (None: exactly). pyspark.testing's
    assertDataFrameEqual would do, but it imports pyspark.pandas, which does not load with pandas 3.
    """
    a_fields = [(f.name, f.dataType.simpleString()) for f in actual.schema.fields]
    e_fields = [(f.name, f.dataType.simpleString()) for f in expected.schema.fields]
    assert a_fields == e_fields, f"schemas differ:\n  actual   {a_fields}\n  expected {e_fields}"
    key = lambda row: tuple((v is None, repr(v)) for v in row)  # noqa: E731
    a_rows = [_norm(r, float_digits) for r in actual.collect()]
    e_rows = [_norm(r, float_digits) for r in expected.collect()]
    if not ordered:
        a_rows, e_rows = sorted(a_rows, key=key), sorted(e_rows, key=key)
    if a_rows != e_rows:
        extra = [r for r in a_rows if r not in e_rows][:5]
        missing = [r for r in e_rows if r not in a_rows][:5]
        raise AssertionError(f"rows differ ({len(a_rows)} vs {len(e_rows)}):\n  unexpected {extra}\n  missing {missing}")
