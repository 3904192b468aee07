"""The ingest's plan (pipeline.ingest_plan): which reader takes each input file, decided from the mode, the source and
the file's size, as plain frozen data, with no Spark and no file opened."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline import ingest_exec, ingest_plan, line_reads, rundirs, tables
from pipeline.errors import PipelineError
from tests.pipeline.conftest import gen_events


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[rundirs.RunDir]:
    root = tmp_path_factory.mktemp("plan")
    for i in range(2):
        gen_events.generate_run(root / f"run-{i}", f"plan-{i}", nodes=4, duration_s=30.0, seed=i, variant="snek")
    return rundirs.discover_runs([root])


def _routes(plan: ingest_plan.IngestPlan) -> dict[str, tuple[list[list[Path]], list[Path]]]:
    return {s.source: ([[f.path for f in b.files] for b in s.driver], [t.file.path for t in s.spark])
            for s in plan.sources}


def test_in_memory_every_file_is_offered_to_clean_files_in_input_order(two_runs):
    plan = ingest_plan.plan(two_runs, in_memory=True, arrow_reads=False)
    assert plan.in_memory and [s.source for s in plan.sources] == list(ingest_plan.SOURCES)
    events = [f.resolve() for r in two_runs for f in r.event_files]
    for src in plan.sources:
        assert src.reader == ingest_plan.CLEAN_FILES and not src.spark
        assert [list(f.path for f in b.files) for b in src.driver] == [[f.path for f in src.files]]
    assert [f.path for f in plan.sources[0].files] == events
    assert plan.sources[0].run_of() == {f.resolve(): r.run_id for r in two_runs for f in r.event_files}
    # the layout of every Spark read is that of all the input files, whichever reader takes them
    sizes = [f.size for s in plan.sources for f in s.files]
    assert plan.layout == line_reads.read_layout(sizes)


def test_on_disk_arrow_reads_events_and_pings_in_batches_of_one_run(two_runs):
    plan = ingest_plan.plan(two_runs, in_memory=False, arrow_reads=True)
    routes = _routes(plan)
    for source in ("events", "pings"):
        src = plan.sources[ingest_plan.SOURCES.index(source)]
        assert src.reader == ingest_plan.ARROW_INGEST and not src.spark
        batches = [b.files for b in src.driver]
        assert [b.index for b in src.driver] == list(range(len(batches)))
        assert all(len({f.run_id for f in batch}) == 1 for batch in batches)  # a batch holds one run's files
        assert sorted(p for b in routes[source][0] for p in b) == sorted(f.path for f in src.files)
    actions = plan.sources[1]
    assert actions.reader is None and not actions.driver
    assert [t.file.path for t in actions.spark] == [f.path for f in actions.files]
    assert all("only Spark renders" in t.reason for t in actions.spark)


def test_on_disk_a_batch_is_bounded_and_a_big_file_goes_to_spark(two_runs, monkeypatch):
    files = {f.resolve(): f.stat().st_size for f in two_runs[0].event_files}
    largest = max(files.values())
    monkeypatch.setattr(ingest_plan, "ARROW_BATCH_BYTES", largest + 1)
    monkeypatch.setattr(ingest_plan, "ARROW_FILE_BYTES", largest - 1)  # the largest file(s) are left to Spark
    src = ingest_plan.plan(two_runs[:1], in_memory=False, arrow_reads=True).sources[0]
    assert all(sum(f.size for f in b.files) <= largest + 1 for b in src.driver)
    assert {t.file.path for t in src.spark} == {p for p, size in files.items() if size == largest}
    assert {f.path for b in src.driver for f in b.files} == {p for p, size in files.items() if size < largest}
    assert all(t.reason == f"{largest} bytes: Spark's ingest streams a file this large" for t in src.spark)


def test_without_arrow_reads_spark_reads_every_file(two_runs):
    plan = ingest_plan.plan(two_runs, in_memory=False, arrow_reads=False)
    for src in plan.sources:
        assert src.reader is None and not src.driver
        assert [t.file for t in src.spark] == list(src.files)


def test_a_file_linked_twice_is_planned_once(two_runs, tmp_path):
    run = two_runs[0]
    link = run.path / "events" / "zz-link.jsonl"
    link.symlink_to(run.event_files[0])
    try:
        again = rundirs.load_run(run.path)
        plan = ingest_plan.plan([again], in_memory=True, arrow_reads=False)
        paths = [f.path for f in plan.sources[0].files]
        assert len(paths) == len(set(paths)) == len(run.event_files)
    finally:
        link.unlink()


def test_the_plan_is_frozen_data(two_runs):
    plan = ingest_plan.plan(two_runs, in_memory=True, arrow_reads=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.sources[0].reader = None  # type: ignore[misc]
    assert plan == ingest_plan.plan(two_runs, in_memory=True, arrow_reads=False)


def test_a_plan_is_carried_out_only_into_a_store_of_its_mode(two_runs, tmp_path):
    plan = ingest_plan.plan(two_runs, in_memory=False, arrow_reads=False)
    store = tables.TableStore(None, tmp_path, in_memory=True)  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="planned not in memory"):
        ingest_exec.execute(None, plan, two_runs, store, 2, lambda stage, detail: None)  # type: ignore[arg-type]

