"""The pipeline's reads and writes: run directories (``rundirs``), exact line numbers and independent line counts
(``line_reads``), tables (``tables``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline import line_reads, rundirs, schemas, tables
from pipeline.errors import PipelineError, RunDatasetError
from tests.pipeline.conftest import assert_frames_equal

pytestmark = pytest.mark.spark

TRICKY = {
    "plain.jsonl": b"a\nb\nc\n",
    "no final newline.jsonl": b"a\nb",
    "crlf+cr.jsonl": b"a\r\nb\rc\r\n\r\nd",
    "blank lines.jsonl": b"\n\n x \n\n",
    "empty.jsonl": b"",
    "plus+and%41.jsonl": b"only\n",
}


def python_lines(data: bytes) -> list[str]:
    """Lines as Spark's text reader (and line_reads.count_lines) splits them."""
    text = data.decode().replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") or not text else lines


@pytest.fixture
def tricky_files(tmp_path) -> dict[Path, str]:
    d = tmp_path / "dir with space"
    d.mkdir()
    files = {}
    for i, (name, data) in enumerate(TRICKY.items()):
        (d / name).write_bytes(data)
        files[d / name] = f"run-{i % 2}"
    return files


def test_line_numbers_and_counts_are_exact(spark, tricky_files):
    got = line_reads.read_lines(spark, tricky_files, "events")
    expected_lines = []
    expected_counts = []
    for path, run_id in tricky_files.items():
        lines = python_lines(path.read_bytes())
        expected_lines += [(run_id, str(path.resolve()), i, line) for i, line in enumerate(lines, 1)]
        expected_counts.append((run_id, "events", str(path.resolve()), len(lines)))
    assert_frames_equal(got.lines, spark.createDataFrame(expected_lines, schemas.LINES_SCHEMA))
    assert sorted(got.count_rows) == sorted(expected_counts)


def test_big_file_keeps_numbers_in_order(spark, tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text("".join(f"{i}\n" for i in range(1, 200_001)))
    got = line_reads.read_lines(spark, {path: "r"}, "events").lines
    from pyspark.sql import functions as F

    wrong = got.where(F.col("line").cast("long") != F.col("line_no")).count()
    assert wrong == 0
    assert got.count() == 200_000


@pytest.fixture
def layout_restored(spark):
    """The session's file layout settings as get_spark set them, again after a test that changed them."""
    yield
    for key, value in line_reads.ONE_FILE_PER_TASK.items():
        spark.conf.set(key, value)
    spark.conf.unset("spark.sql.files.minPartitionNum")


def _packed(largest: int) -> line_reads.ReadLayout:
    """A packed layout for files of at most ``largest`` bytes, with tasks small enough that they hold a few files."""
    return line_reads.ReadLayout(True, {"spark.sql.files.maxPartitionBytes": str(8 * largest),
                                "spark.sql.files.openCostInBytes": str(largest)})


def test_line_numbers_are_exact_when_files_share_a_task(spark, tricky_files, tmp_path, layout_restored):
    """Packed reads (many files, several per task): the same exact numbers, and tasks really held several files."""
    files = dict(tricky_files)
    for i in range(40):  # files of different sizes, so Spark's packing mixes them
        path = tmp_path / f"n{i:02d}.jsonl"
        path.write_text("".join(f"{i}:{j}\n" for j in range(1, 1 + (i * 37) % 300)))
        files[path] = f"run-{i % 3}"
    largest = max(p.stat().st_size for p in files)
    got = line_reads.read_lines(spark, files, "events", _packed(largest))
    expected = [(run_id, str(path.resolve()), i, line) for path, run_id in files.items()
                for i, line in enumerate(python_lines(path.read_bytes()), 1)]
    assert_frames_equal(got.lines, spark.createDataFrame(expected, schemas.LINES_SCHEMA))
    nonempty = sum(1 for p in files if p.stat().st_size)
    tasks = got.lines.rdd.getNumPartitions()
    assert 3 <= tasks < nonempty / 3, tasks  # several files per task, and a task per run at least


def test_read_layout_packs_only_many_files_and_never_below_the_largest():
    assert line_reads.read_layout([10] * line_reads.PACK_FILES_ABOVE) == line_reads.ReadLayout(
        False, line_reads.ONE_FILE_PER_TASK)
    big = line_reads.read_layout([10] * line_reads.PACK_FILES_ABOVE + [5 << 30])
    # Spark splits a file above min(maxPartitionBytes, max(openCostInBytes, bytes / minPartitionNum))
    assert big.packed and int(big.settings["spark.sql.files.maxPartitionBytes"]) >= 5 << 30
    assert big.settings["spark.sql.files.minPartitionNum"] == "1"  # and so the cores do not change the layout


def test_a_packed_read_that_would_split_a_file_fails_loudly(spark, tmp_path, layout_restored):
    """Line numbers need every file whole in one task: a layout that lets Spark split one is refused."""
    files = {}
    for i in range(3):
        path = tmp_path / f"f{i}.jsonl"
        path.write_text("".join(f"{j}\n" for j in range(20_000)))
        files[path] = "r"
    with pytest.raises(PipelineError, match="split"):
        line_reads.read_lines(spark, files, "events", line_reads.ReadLayout(
            True, {"spark.sql.files.maxPartitionBytes": "4096", "spark.sql.files.openCostInBytes": "1"}))


def test_a_packed_read_never_numbers_a_line_wrongly(spark, tmp_path, monkeypatch, layout_restored):
    """The line numbers of a packed read come from the driver's line counts: if they ever disagreed with how
    Spark splits lines, the query fails naming the cause instead of numbering lines wrongly."""
    files = {}
    for i in range(4):
        path = tmp_path / f"f{i}.jsonl"
        path.write_text("".join(f"{i}:{j}\n" for j in range(50)))
        files[path] = "r"
    real = line_reads.count_lines
    # each file's last line: too far
    monkeypatch.setattr(line_reads, "count_lines", lambda path, *a: real(path, *a) - 1)
    layout = line_reads.ReadLayout(True, {"spark.sql.files.maxPartitionBytes": "1000000",
                                          "spark.sql.files.openCostInBytes": "1000"})
    got = line_reads.read_lines(spark, files, "events", layout)
    with pytest.raises(Exception, match="numbered outside its file"):
        got.lines.collect()


def test_count_lines_matches_splitting_in_chunks(tmp_path):
    for name, data in TRICKY.items():
        p = tmp_path / name.replace(" ", "_")
        p.write_bytes(data)
        assert line_reads.count_lines(p) == len(python_lines(data)) == line_reads.count_lines(p, chunk_bytes=1), name


def make_run(root: Path, run_id: str = "r1") -> Path:
    key = "ab" * 32
    (root / "events").mkdir(parents=True)
    (root / "meta.json").write_text(json.dumps({
        "run_id": run_id, "backend": "inproc", "variant": "snek", "topology": "t", "clock": "virtual",
        "nodes": {"a": key, "b": "cd" * 32}, "links": [{"a": "a", "b": "b", "class": "lan"}],
        "started_wall_ts": 1.0,
    }))
    (root / "topology.json").write_text(json.dumps({
        "name": "t", "nodes": [{"name": "a"}, {"name": "b"}], "links": [{"a": "a", "b": "b", "class": "lan"}]}))
    (root / "actions.jsonl").write_text("")
    (root / "pings.jsonl").write_text("")
    (root / "events" / "a.jsonl").write_text("")
    return root


def test_discover_runs_accepts_a_run_or_a_parent(tmp_path):
    make_run(tmp_path / "p" / "r1", "r1")
    make_run(tmp_path / "p" / "r2", "r2")
    assert [r.run_id for r in rundirs.discover_runs([tmp_path / "p"])] == ["r1", "r2"]
    assert [r.run_id for r in rundirs.discover_runs([tmp_path / "p" / "r2"])] == ["r2"]


@pytest.mark.parametrize(
    "damage, where, what",
    [
        (lambda r: (r / "meta.json").unlink(), "", "not a run directory"),
        (lambda r: (r / "pings.jsonl").unlink(), "pings.jsonl", "missing"),
        (lambda r: (r / "topology.json").write_text("{"), "topology.json", "not readable JSON"),
        (lambda r: (r / "meta.json").write_text(json.dumps(dict(json.loads((r / "meta.json").read_text()),
                                                                 clock="sundial"))), "meta.json", "field clock"),
        (lambda r: shutil.rmtree(r / "events"), "events", "missing events/"),
    ],
)
def test_bad_run_directories_raise_naming_file_and_problem(tmp_path, damage, where, what):
    run = make_run(tmp_path / "r1")
    damage(run)
    with pytest.raises(RunDatasetError) as err:
        rundirs.discover_runs([run])
    assert where in err.value.path and what in str(err.value)


def test_input_size_counts_the_input_lines_of_every_run(tmp_path):
    """The size that picks the small-input session: event logs, actions and pings of all runs, nothing else."""
    r1, r2 = make_run(tmp_path / "p" / "r1", "r1"), make_run(tmp_path / "p" / "r2", "r2")
    (r1 / "events" / "a.jsonl").write_bytes(b"x" * 1000)
    (r1 / "events" / "b.jsonl").write_bytes(b"x" * 300)
    (r2 / "actions.jsonl").write_bytes(b"x" * 20)
    (r2 / "pings.jsonl").write_bytes(b"x" * 7)
    (r2 / "events" / "notes.txt").write_bytes(b"x" * 5000)  # not an event log
    assert rundirs.input_size(rundirs.discover_runs([tmp_path / "p"])) == 1327
    assert rundirs.input_size([]) == 0


def test_duplicate_run_ids_are_rejected(tmp_path):
    make_run(tmp_path / "x" / "a", "same")
    make_run(tmp_path / "x" / "b", "same")
    with pytest.raises(RunDatasetError, match="also used by"):
        rundirs.discover_runs([tmp_path / "x"])


def _meta_update(run: Path, **fields) -> None:
    meta = json.loads((run / "meta.json").read_text())
    meta.update(fields)
    (run / "meta.json").write_text(json.dumps(meta))


def _ab(experiment: str = "e", arm: str = "a", seed: int = 0, a: str = "snek", b: str = "snek,root_filter=1") -> dict:
    return {"experiment": experiment, "arm": arm, "seed": seed, "a": a, "b": b}


def test_ab_and_variants_meta_are_read_typed(tmp_path):
    run = make_run(tmp_path / "r1")
    _meta_update(run, variant="snek,root_filter=1", variants={"b": "snek"}, ab=_ab(arm="b", seed=4),
                 observer={"internal_errors": {"a": 2, "b": 1}})
    [r] = rundirs.discover_runs([run])
    assert (r.meta.ab.experiment, r.meta.ab.arm, r.meta.ab.seed, r.meta.ab.spec) == ("e", "b", 4, "snek,root_filter=1")
    assert r.meta.variants == {"b": "snek"}
    assert rundirs.observed_internal_errors(r.meta.observer) == 3
    assert rundirs.observed_internal_errors({"internal_errors": 5}) == 5
    assert rundirs.observed_internal_errors({}) is None
    assert rundirs.observed_internal_errors({"internal_errors": "x"}) is None
    plain = make_run(tmp_path / "r2", "r2")
    assert rundirs.discover_runs([plain])[0].meta.ab is None


@pytest.mark.parametrize(
    "fields, what",
    [
        ({"ab": _ab(arm="c")}, "field ab.arm"),
        ({"ab": {"experiment": "e", "arm": "a", "seed": 1}}, "field ab.a"),
        ({"ab": _ab(experiment="")}, "field ab.experiment"),
        ({"variants": {"nobody": "snek"}}, "field variants: names unknown node"),
    ],
)
def test_bad_ab_meta_is_rejected_naming_the_field(tmp_path, fields, what):
    run = make_run(tmp_path / "r1")
    _meta_update(run, **fields)
    with pytest.raises(RunDatasetError, match=what) as err:
        rundirs.discover_runs([run])
    assert err.value.path.endswith("meta.json")


def test_ab_experiments_must_be_consistent(tmp_path):
    first = make_run(tmp_path / "x" / "r1", "r1")
    second = make_run(tmp_path / "x" / "r2", "r2")
    _meta_update(first, ab=_ab(arm="a", seed=1))
    _meta_update(second, ab=_ab(arm="a", seed=1))
    with pytest.raises(RunDatasetError, match="arm a seed 1 is also recorded by") as err:
        rundirs.discover_runs([tmp_path / "x"])
    assert err.value.path == str(second.resolve() / "meta.json")
    _meta_update(second, ab=_ab(arm="b", seed=1, b="snek,bootstrap_interval=8"))
    with pytest.raises(RunDatasetError, match="has a='snek' b='snek,bootstrap_interval=8' here"):
        rundirs.discover_runs([tmp_path / "x"])
    _meta_update(second, ab=_ab(arm="b", seed=1))
    assert [r.meta.ab.arm for r in rundirs.discover_runs([tmp_path / "x"])] == ["a", "b"]


def test_ab_meta_frame(spark, tmp_path):
    plain = make_run(tmp_path / "x" / "p", "p")
    assert rundirs.ab_meta(spark, rundirs.discover_runs([plain])) is None
    run = make_run(tmp_path / "x" / "r1", "r1")
    _meta_update(run, ab=_ab(arm="b", seed=2), variants={"a": "snek"}, observer={"internal_errors": 2})
    df = rundirs.ab_meta(spark, rundirs.discover_runs([tmp_path / "x"]))
    assert [tuple(r) for r in df.collect()] == [
        ("r1", "e", "b", 2, "snek,root_filter=1", "snek", "snek,root_filter=1", '{"a": "snek"}', 2)]
    assert df.schema == schemas.AB_META_SCHEMA


def test_write_split_and_read_table(spark, tmp_path):
    df = spark.createDataFrame([("r1", "x", 1), ("r1", "y", 2), ("r2", "x", 3)], "run_id string, t string, n long")
    paths = tables.write_split(df, tmp_path, "t", {"x": "table_x", "y": "table_y", "z": "table_z"})
    assert set(paths) == {"table_x", "table_y", "table_z"}
    schema = schemas.StructType.fromJson({"type": "struct", "fields": [
        {"name": "run_id", "type": "string", "nullable": True, "metadata": {}},
        {"name": "n", "type": "long", "nullable": True, "metadata": {}}]})
    got = tables.read_table(spark, tmp_path, "table_x", schema).collect()
    assert sorted(tuple(r) for r in got) == [("r1", 1), ("r2", 3)]
    assert tables.read_table(spark, tmp_path, "table_z", schema).count() == 0
    assert not list((tmp_path / "tables").glob("_staging*"))
    with pytest.raises(RunDatasetError):
        tables.read_table(spark, tmp_path, "nope", schema)


@pytest.mark.parametrize("in_memory", [False, True], ids=["on-disk", "in-memory"])
def test_a_table_store_writes_and_reads_the_same_rows_in_both_modes(spark, tmp_path, in_memory):
    """tables.TableStore: the rows put are the rows written (partitioned by run, or in one file) and the rows got back,
    in the schema asked for; an empty table reads as empty; in memory, what is got is one partition (no shuffle
    for later steps) and is dropped by release."""
    store = tables.TableStore(spark, tmp_path, in_memory=in_memory)
    rows = [("r1", "a", 1, ["x", "y"]), ("r1", "b", None, []), ("r/2", "c", 3, None)]
    df = spark.createDataFrame(rows, "run_id string, k string, n long, tags array<string>")
    schema = schemas.StructType.fromJson({"type": "struct", "fields": [
        {"name": "k", "type": "string", "nullable": True, "metadata": {}},
        {"name": "n", "type": "long", "nullable": True, "metadata": {}},
        {"name": "run_id", "type": "string", "nullable": True, "metadata": {}}]})
    store.put("parts", df)
    store.put("flat", df, (), one_file=True)
    store.put("none", df.where("n > 100"))
    store.put("none_flat", df.where("n > 100"), ())
    assert set(store.paths) == {"parts", "flat", "none", "none_flat"}
    assert sorted(p.name for p in (tmp_path / "tables" / "parts").iterdir() if p.is_dir()) == ["run_id=r%2F2", "run_id=r1"]
    want = sorted((k, n, r) for r, k, n, _ in rows)
    for name in ("parts", "flat"):
        got = store.get(name, schema)
        assert got.columns == ["k", "n", "run_id"]
        assert sorted(tuple(r) for r in got.collect()) == want
        assert sorted(tuple(r) for r in tables.read_table(spark, tmp_path, name, schema).collect()) == want  # on disk
        if in_memory:
            assert got.rdd.getNumPartitions() == 1
    tags = {r["k"]: r["tags"] for r in store.get("flat").collect()}
    assert tags == {"a": ["x", "y"], "b": [], "c": None}
    assert store.get("none", schema).count() == 0 and tables.read_table(spark, tmp_path, "none", schema).count() == 0
    assert tables.read_table(spark, tmp_path, "none_flat", schema).count() == 0
    store.drop("parts")
    assert not (tmp_path / "tables" / "parts").exists() and "parts" not in store.paths
    with pytest.raises(RunDatasetError):
        store.get("parts", schema)
    store.release()
    assert sorted(tuple(r) for r in store.get("flat", schema).collect()) == want  # from its files now
