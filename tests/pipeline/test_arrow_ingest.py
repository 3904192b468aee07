"""Clean files parsed by Arrow on the driver (pipeline.arrow_ingest) give exactly the rows Spark's ingest gives, or are
left to it."""

from __future__ import annotations

import json
import random
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from contract import dataset as contract
from pipeline import analysis, arrow_ingest, clean_files, line_reads, schemas, tables
from pipeline.errors import RunDatasetError
from pipeline.jobs import episodes, ingest
from tests.pipeline.conftest import assert_frames_equal, gen_events
from tests.pipeline.test_clean_files import _number
from tests.pipeline.test_contract import OTHER, VALID, event
from tests.pipeline.test_ingest import tricky_lines

pytestmark = pytest.mark.spark

GOOD = json.dumps(event("node_stopping", reason="x"), separators=(",", ":"))


def _without(obj: dict, key: str) -> dict:
    return {k: v for k, v in obj.items() if k != key}


def _spark_rows(spark, files: dict) -> dict[str, list[dict]]:
    """file -> the rows Spark's ingest accepts from it (validate_events: the fast path, then the slow path)."""
    numbered = line_reads.read_lines(spark, files, "events").lines
    read = ingest.accepted(ingest.validate_events(numbered), schemas.EVENTS_SCHEMA)
    by_file: dict[str, list[dict]] = {}
    for row in read.collect():
        by_file.setdefault(row.file, []).append(row.asDict())
    return by_file


def _write(tmp_path, name: str, lines: list[str]) -> object:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", errors="surrogatepass")
    return path


def test_each_file_gives_the_rows_spark_gives_or_is_left_to_spark(spark, tmp_path):
    """Every line of the ingest's tricky corpus (valid lines in odd spellings, invalid ones of every kind), after a
    clean line, as a file of its own: ``rows`` returns None, or every line is valid and the rows are exactly Spark's.
    The valid lines without an escape or a nested object are read here."""
    lines = tricky_lines() + [
        json.dumps(dict(event("node_stopping", reason="x"), port=5)),  # another event's field: Spark keeps it
        json.dumps(dict(event("node_stopping", reason="x"), port=None)),  # ... present but null: nothing to keep
        '{"v":1,"v":1,' + GOOD[1:],  # a repeated key
        json.dumps(event("node_stopping", reason="x")).replace('"x"', '"\\ud800"'),  # a lone surrogate
        json.dumps(event("bootstrap_accepted", origin=OTHER, from_port=1, to_port=None)),  # null, present
        json.dumps(dict(event("bootstrap_accepted", origin=OTHER, from_port=1), x={"to_port": None})),  # nested key
        json.dumps(dict(event("peer_up", port=1, peer=OTHER, link_class="lan"), extra=float("nan"))),  # NaN
        json.dumps(event("node_stopping", reason="x"), indent=None).replace(", ", " ,\t"),  # other whitespace
        json.dumps(dict(event("node_stopping", reason="x"), node_name=None)),
        json.dumps(_without(event("node_stopping", reason="x"), "node_name")),  # node_name absent
    ]
    files = {_write(tmp_path, f"{i:03d}", [GOOD, line]): "r1" for i, line in enumerate(lines)}
    by_file = _spark_rows(spark, files)
    taken = []
    for (path, run_id), line in zip(files.items(), lines):
        got = arrow_ingest.rows(path, run_id, "events")
        if got is None:
            continue
        taken.append(line)
        assert contract.validate_event(line, run_id) is None, line
        assert got.column("line").null_count == got.num_rows
        assert got.drop_columns(["line"]).to_pylist() == by_file[str(path.resolve())], line
    # every valid line without an escape is read here, but for another event's value, a repeated key, and a null in
    # a line with a nested object (the object could hold the key, so its presence is not certain)
    plain = [line for line in lines if contract.validate_event(line, "r1") is None and "\\" not in line
             and (line.count("{") == 1 or "null" not in line) and line not in (lines[-10], lines[-8])]
    assert [line for line in plain if line not in taken] == []
    for i in (-10, -8, -7, -5, -4, -1):  # the cases this module leaves to Spark
        assert lines[i] not in taken, lines[i]
    for i in (-9, -6, -2):  # null values of present keys
        assert lines[i] in taken, lines[i]


def test_numbers_in_float_fields_are_the_doubles_spark_reads(spark, tmp_path):
    """Number texts of every length, with and without a fraction or an exponent, integers beyond 64 bits, in a float
    field: the double Arrow reads is Spark's, bit for bit (or the file is left to Spark)."""
    rnd = random.Random(20261126)
    texts = [_number(rnd) for _ in range(600)] + ["-0.0", "0", "1e-400", "4.9e-324", "2.2250738585072011e-308",
                                                   "9007199254740993", "123456789012345678901234567890",
                                                   "1" + "0" * 308, "0." + "0" * 60 + "1"]
    files = {}
    for i, text in enumerate(texts):
        line = json.dumps(event("node_stopping", reason="x"), separators=(",", ":")).replace('"mono_s":1.5',
                                                                                             f'"mono_s":{text}')
        files[_write(tmp_path, f"{i:03d}", [line])] = "r1"
    by_file = _spark_rows(spark, files)
    taken = 0
    for (path, run_id), text in zip(files.items(), texts):
        got = arrow_ingest.rows(path, run_id, "events")
        if got is None:  # not finite, a negative zero, a number too long for Spark: Spark reads the file
            continue
        taken += 1
        mine, theirs = got.column("mono_s")[0].as_py(), by_file[str(path.resolve())][0]["mono_s"]
        assert struct.pack("<d", mine) == struct.pack("<d", theirs), (text, mine, theirs)
    assert taken >= len(texts) * 0.8  # the rest: overflowing exponents (not finite), negative zeros


def _files(tmp_path, cases: dict[str, bytes]) -> dict[str, object]:
    out = {}
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        out[name] = path
    return out


def test_files_with_what_only_spark_reads_are_left_to_it(tmp_path):
    good = GOOD.encode()
    cases = {
        "cr": good + b"\r\n",
        "escape": GOOD.replace('"x"', '"\\u0078"').encode(),
        "nan": (GOOD[:-1] + ',"extra":NaN}').encode(),
        "infinity": (GOOD[:-1] + ',"extra":[-Infinity]}').encode(),
        "latin1": GOOD.replace('"x"', '"\xe9"').encode("latin-1"),
        "blank": good + b"\n\n" + good + b"\n",
        "spaces_line": good + b"\n   \n",
        "two_values": good + good + b"\n" + b"\n",
        "leading_space": b" " + good + b"\n",
        "not_json": good + b"\nnot json\n",
        "truncated": good + b"\n" + good[:40],
        "long_int": (GOOD[:-1] + ',"extra":1' + "0" * 1000 + "}\n").encode(),
        "long_float": GOOD.replace('"mono_s":1.5', '"mono_s":1.' + "0" * 1000).encode(),
        "long_key": (GOOD[:-1] + ',"' + "k" * 600 + '":1}\n').encode(),
        "nested_1001": (GOOD[:-1] + ',"extra":' + "[" * 1001 + "]" * 1001 + "}\n").encode(),
        "deep": (GOOD[:-1] + ',"extra":' + "[" * 100_000 + "]" * 100_000 + "}\n").encode(),
        "absent_nullable": json.dumps(_without(event("node_stopping", reason="x"), "node_name")).encode(),
        "nested_nullable": json.dumps(dict(event("bootstrap_accepted", origin=OTHER, from_port=1),
                                           x={"to_port": None})).encode(),
        "foreign": json.dumps(dict(event("node_stopping", reason="x"), root=OTHER)).encode(),
        "int_as_float": json.dumps(event("peer_up", port=1.0, peer=OTHER, link_class="lan")).encode(),
        "big_int": json.dumps(event("peer_up", port=2**63, peer=OTHER, link_class="lan")).encode(),
        "infinite": GOOD.replace('"mono_s":1.5', '"mono_s":1e999').encode(),
        "list_null": json.dumps(event("coords_changed", coords=[1, None])).encode(),
        "choice": json.dumps(event("frame_stats", **dict(VALID["frame_stats"], direction="up"))).encode(),
        "hex": json.dumps(event("peer_up", port=1, peer=OTHER.upper(), link_class="lan")).encode(),
        "version": json.dumps(dict(event("node_stopping", reason="x"), v=2)).encode(),
        "run": json.dumps(dict(event("node_stopping", reason="x"), run_id="r2")).encode(),
        "unknown_event": json.dumps(dict(event("node_stopping", reason="x"), event="warp")).encode(),
        "repeated": ('{"reason":"y",' + GOOD[1:]).encode(),
        "required_null": json.dumps(event("node_stopping", reason=None)).encode(),
        "negative_zero": GOOD.replace('"mono_s":1.5', '"mono_s":-0').encode(),  # Spark reads 0.0
        "inf": (GOOD[:-1] + ',"x":Inf}').encode(),  # Arrow's parser takes Inf as a number
        "minus_inf_nested": (GOOD[:-1] + ',"x":[{"y":-Inf}]}').encode(),
        "nul": (GOOD[:-1] + ',"x":1}\x00\n').encode(),
        "value_then_null": (GOOD + " null\n").encode(),  # two values on one line: Arrow makes a row of the null
        # a value spread over two lines, and a line of two values making up the row count: three rows for three lines
        "spread": (GOOD[:-1] + ',"x":\n{"y":1}}\n' + GOOD + GOOD + "\n").encode(),
        "spread_nullable": (GOOD[:-1] + ',"x":\n{"node_name":null}}\n'
                            + json.dumps(_without(event("node_stopping", reason="x"), "node_name")) + GOOD + "\n"
                            ).encode(),
    }
    for name, path in _files(tmp_path, cases).items():
        got = arrow_ingest.why_not(path, "r1", "events")
        assert isinstance(got, arrow_ingest.Left), name
        assert got.reason, name
    assert "missing" in arrow_ingest.why_not(tmp_path / "absent_nullable.jsonl", "r1", "events").reason
    assert "another event" in arrow_ingest.why_not(tmp_path / "foreign.jsonl", "r1", "events").reason


def test_clean_files_are_read_with_their_line_numbers(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(GOOD + "\n" + GOOD)  # no end on the last line: still two lines, as count_lines counts
    got = arrow_ingest.rows(path, "r1", "events")
    assert got.num_rows == 2 == line_reads.count_lines(path) and got.column("line_no").to_pylist() == [1, 2]
    assert got.column("file").to_pylist() == [str(path.resolve())] * 2
    (tmp_path / "empty.jsonl").write_text("")
    assert arrow_ingest.rows(tmp_path / "empty.jsonl", "r1", "events").num_rows == 0
    long_line = json.dumps(event("coords_changed", coords=list(range(200))), separators=(",", ":"))
    assert len(long_line) > arrow_ingest.PLAIN_LINE
    (tmp_path / "long.jsonl").write_text(long_line + "\n")
    assert arrow_ingest.rows(tmp_path / "long.jsonl", "r1", "events").column("coords").to_pylist() == [list(range(200))]
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(RunDatasetError, match="dir.jsonl: cannot read"):
        arrow_ingest.rows(tmp_path / "dir.jsonl", "r1", "events")
    assert not arrow_ingest.supported("actions")  # detail is a json value: Spark renders it
    assert arrow_ingest.supported("events") and arrow_ingest.supported("pings")


def test_a_generated_run_reads_as_the_driver_reads_it_line_by_line(tmp_path):
    """Every event log and the pings of a generated run: Arrow's rows are clean_files' rows (whose equality with
    Spark's ingest test_clean_files checks), schema and values."""
    run = tmp_path / "gen"
    gen_events.generate_run(run, "gen", nodes=8, duration_s=40.0, seed=3, variant="snek")
    for path, source in [*[(p, "events") for p in sorted((run / "events").glob("*.jsonl"))],
                         (run / "pings.jsonl", "pings")]:
        mine = arrow_ingest.rows(path, "gen", source)
        assert mine is not None, arrow_ingest.why_not(path, "gen", source)
        assert mine.equals(clean_files.rows(path, "gen", source)), path


@pytest.mark.slow
def test_the_tables_on_disk_are_the_same_read_by_arrow_or_by_spark(spark, tmp_path):
    """On disk, clean files are read by Arrow and the others by Spark (a malformed line, a line Arrow does not take);
    every table, the quarantine and the reconciliation are those of Spark reading every file."""
    run = tmp_path / "mixed"
    gen_events.generate_run(run, "mixed", nodes=6, duration_s=30.0, seed=5, variant="snek")
    logs = sorted((run / "events").glob("*.jsonl"))
    with logs[0].open("a") as f:
        f.write("not json\n")
    with logs[1].open("a") as f:
        f.write(json.dumps(dict(event("node_stopping", reason="café"), run_id="mixed")) + "\n")  # valid, escaped
    assert arrow_ingest.rows(logs[0], "mixed", "events") is None and arrow_ingest.rows(logs[1], "mixed", "events") is None
    assert arrow_ingest.rows(logs[2], "mixed", "events") is not None
    by_arrow = analysis.analyze(spark, [run], tmp_path / "arrow", in_memory=False, arrow_reads=True)
    by_spark = analysis.analyze(spark, [run], tmp_path / "spark", in_memory=False, arrow_reads=False)
    assert by_arrow.quarantined == 1 and by_arrow.reconciliation == by_spark.reconciliation
    assert all(r["ok"] for r in by_arrow.reconciliation) and by_arrow.events == by_spark.events
    parts = {p.name.startswith("part-arrow-") for p in (tmp_path / "arrow" / "tables" / "events").rglob("*.parquet")}
    assert parts == {True, False}  # Arrow's parts and Spark's files, side by side in one table
    for name in by_spark.tables:
        assert_frames_equal(spark.read.parquet(tables.table_path(tmp_path / "arrow", name)),
                            spark.read.parquet(tables.table_path(tmp_path / "spark", name)))


def test_a_batch_reads_its_clean_files_together_and_leaves_the_others(tmp_path):
    """Files parsed together keep their own line numbers (a last line without an end, an empty file between); when
    one file is not clean, the others are still read, in order, and only that one is left."""
    other = json.dumps(event("peer_up", port=1, peer=OTHER, link_class="lan"), separators=(",", ":"))
    a = _write(tmp_path, "a", [GOOD, other, GOOD])
    (tmp_path / "b.jsonl").write_text(other + "\n" + GOOD)  # no end on its last line
    b = tmp_path / "b.jsonl"
    (tmp_path / "c.jsonl").write_text("")
    d = _write(tmp_path, "d", [other])
    rows, left = arrow_ingest.batch([a, b, tmp_path / "c.jsonl", d], "r1", "events")
    assert left == {}
    assert list(zip(rows.column("file").to_pylist(), rows.column("line_no").to_pylist())) == [
        (str(a), 1), (str(a), 2), (str(a), 3), (str(b), 1), (str(b), 2), (str(d), 1)]
    assert rows.column("event").to_pylist() == ["node_stopping", "peer_up", "node_stopping", "peer_up",
                                                "node_stopping", "peer_up"]
    for path in (a, b, d):  # as each file read alone
        alone = arrow_ingest.rows(path, "r1", "events")
        assert rows.filter(pc.equal(rows.column("file"), str(path))).equals(alone)
    # files that are not clean alone are not clean together either: a value spread from one file into the next
    (tmp_path / "x.jsonl").write_text(GOOD[:-1] + ',"x":')
    (tmp_path / "y.jsonl").write_text("{}}\n")
    (tmp_path / "z.jsonl").write_text(GOOD + GOOD + "\n")
    spread = [tmp_path / f"{name}.jsonl" for name in "xyz"]
    rows, left = arrow_ingest.batch(spread, "r1", "events")
    assert rows.num_rows == 0 and sorted(left) == sorted(str(p) for p in spread)
    bad = _write(tmp_path, "bad", [GOOD, "not json"])
    rows, left = arrow_ingest.batch([a, bad, d], "r1", "events")
    assert list(left) == [str(bad)] and left[str(bad)].reason == "a line does not start with {"
    assert rows.column("file").to_pylist() == [str(a)] * 3 + [str(d)]


def test_run_bounds_on_the_driver_are_sparks(spark, tmp_path):
    """A small analysis of clean files takes each run's bounds from the events' rows on the driver: the rows Spark's
    ``episodes.run_bounds`` gives for the same events (two runs, one without node_started)."""
    parts = []
    for run_id, seed in (("b1", 1), ("b2", 2)):
        gen_events.generate_run(tmp_path / run_id, run_id, nodes=5, duration_s=30.0, seed=seed, variant="snek")
        for path in sorted((tmp_path / run_id / "events").glob("*.jsonl")):
            parts.append(clean_files.rows(path, run_id, "events"))
    events = pa.concat_tables(parts)
    no_start = events.filter(pc.and_(pc.equal(events.column("run_id"), "b2"),
                                     pc.not_equal(events.column("event"), "node_started")))
    events = pa.concat_tables([events.filter(pc.equal(events.column("run_id"), "b1")), no_start])
    mine = sorted(analysis._run_bounds(events))
    theirs = sorted(tuple(r) for r in episodes.run_bounds(spark.createDataFrame(events)).collect())
    assert mine == theirs and mine[1][1] is None and mine[0][1] is not None


@pytest.mark.slow
def test_an_analysis_into_an_earlier_ones_out_keeps_nothing_of_it(spark, tmp_path, monkeypatch):
    """When Arrow reads every file, its staged parts are the whole table: nothing of an earlier analysis into the same
    output directory stays (another run's rows). And a failure after the staging leaves no staged part behind."""
    first, second = tmp_path / "a", tmp_path / "b"
    gen_events.generate_run(first, "ra", nodes=5, duration_s=30.0, seed=1, variant="snek")
    gen_events.generate_run(second, "rb", nodes=4, duration_s=30.0, seed=2, variant="snek")
    out = tmp_path / "out"
    analysis.analyze(spark, [first, second], out, in_memory=False, arrow_reads=True)
    again = analysis.analyze(spark, [second], out, in_memory=False, arrow_reads=True)
    assert all(r["ok"] for r in again.reconciliation)
    for name in ("events", "pings"):
        assert {r.run_id for r in spark.read.parquet(tables.table_path(out, name)).select("run_id").distinct().collect()
                } == {"rb"}, name
    with (sorted((second / "events").glob("*.jsonl"))[0]).open("a") as f:
        f.write("not json\n")  # one file for Spark's ingest, which fails here

    def fail(*args, **kwargs):
        raise RuntimeError("Spark's ingest failed")

    monkeypatch.setattr(tables, "write_split", fail)
    with pytest.raises(RuntimeError, match="ingest failed"):
        analysis.analyze(spark, [second], out, in_memory=False, arrow_reads=True)
    assert list((out / "tables").glob("_staging-*")) == []
