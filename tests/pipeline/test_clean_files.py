"""Clean files read on the driver (pipeline.clean_files) give exactly the rows Spark's ingest gives, or are left to it."""

from __future__ import annotations

import json
import random

import pytest

from contract import dataset as contract
from pipeline import analysis, clean_files, line_reads, schemas, tables
from pipeline.errors import RunDatasetError
from pipeline.jobs import ingest
from tests.pipeline.conftest import assert_frames_equal, gen_events
from tests.pipeline.test_contract import OTHER, event
from tests.pipeline.test_ingest import lines_frame, tricky_lines

pytestmark = pytest.mark.spark


def _action(detail_text: str) -> str:
    return ('{"run_id":"r1","mono_s":1.5,"wall_ts":1000000000.0,"action":"kill","target":"n1","detail":'
            + detail_text + "}")


class _Number(str):
    """A JSON number token in a generated value (rendered as written)."""


def _text(value) -> str:
    if isinstance(value, _Number):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=random.Random(str(value)).random() < 0.5)


def _number(rnd: random.Random) -> _Number:
    def digits(n: int) -> str:
        return "".join(rnd.choice("0123456789") for _ in range(n))

    whole = rnd.choice(["0", str(rnd.randint(1, 9)) + digits(rnd.choice([0, 1, 4, 9, 18, 19, 29, 37, 38, 41]))])
    text = rnd.choice(["", "-"]) + whole
    if rnd.random() < 0.6:
        text += "." + digits(rnd.choice([1, 2, 3, 8, 16, 30, 38, 40]))
    if rnd.random() < 0.2:
        text += rnd.choice("eE") + rnd.choice(["", "+", "-"]) + str(rnd.randint(0, 320))
    return _Number(text)


def _string(rnd: random.Random) -> str:
    pool = 'abc xyz/\\"{}[]:,\t\n\x01\x1f\x7f\u00e9\u00fc\u4e2d\U0001f600\u2028\uff01\ufffd\U00010348'
    return "".join(rnd.choice(pool) for _ in range(rnd.randint(0, 6)))


def _value(rnd: random.Random, depth: int = 0):
    roll = rnd.random()
    if depth < 3 and roll < 0.2:
        return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    if depth < 3 and roll < 0.45:
        return {_string(rnd): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}
    return rnd.choice([None, True, False, _string(rnd), _number(rnd), _number(rnd), _number(rnd)])


def test_a_json_field_is_rendered_as_spark_renders_it_or_left_to_spark(spark):
    """``spark_json`` of any JSON value equals the ``detail`` column Spark's ingest makes of the same text, or says it
    does not know (Unsure: the file then goes to Spark). 800 random values: numbers of every length, with and without
    a fraction or an exponent; strings with escapes, control characters and non-ASCII; nested lists and objects.
    Most are rendered, so the comparison is not empty."""
    rnd = random.Random(20261126)
    values = [_value(rnd) for _ in range(800)]
    texts = [_text(v) for v in values]
    got = {r.line_no: r.detail for r in ingest.accepted(
        ingest.validate_actions(lines_frame(spark, [_action(t) for t in texts])), schemas.ACTIONS_SCHEMA).collect()}
    rendered = 0
    for i, text in enumerate(texts, 1):
        try:
            value = clean_files.parse(text)
            mine = None if value is None else clean_files.spark_json(value)  # a null detail is a null column
        except clean_files.Unsure:
            continue
        rendered += 1
        assert mine == got[i], text
    assert rendered >= len(texts) // 4, f"only {rendered} of {len(texts)} values rendered"


def test_the_usual_detail_values_are_rendered():
    for text, want in [('{"nodes": 12}', '{"nodes":12}'), ('{"b": 1, "a": [true, null, "x"]}', '{"a":[true,null,"x"],"b":1}'),
                       ('{"t": 1.2805439873305133}', '{"t":1.2805439873305133}'), ("1700000000.0", "1700000000"),
                       ("1.50", "1.5"), ("-0.0", "0"), ('"caf\\u00e9\\n"', '"café\\n"'),
                       ('{"\uff01": 1, "\U0001f600": 2}', '{"\U0001f600":2,"\uff01":1}')]:  # Java sorts by UTF-16
        assert clean_files.spark_json(clean_files.parse(text)) == want
    for text in ("1e-05", "1.5E300", "1" * 39, '"\\u0001"', '{"a": 1, "a": 2}'):
        with pytest.raises(clean_files.Unsure):
            clean_files.spark_json(clean_files.parse(text))


def test_each_file_gives_the_rows_spark_gives_or_is_left_to_spark(spark, tmp_path):
    """Every line of the ingest's tricky corpus (valid lines in odd spellings, invalid ones of every kind) as a file
    of its own: ``rows`` returns None (Spark's ingest then reads it) or exactly the row Spark accepts. The valid lines
    in the recorder's spelling, and in the other spellings that need no special care, are read on the driver."""
    lines = tricky_lines() + [
        json.dumps(dict(event("node_stopping", reason="x"), port=5)),  # another event's field: Spark keeps it
        '{"v":1,"v":1,' + json.dumps(event("node_stopping", reason="x"))[1:],  # a repeated key
        json.dumps(event("node_stopping", reason="x")).replace('"x"', '"\\ud800"'),  # a lone surrogate
    ]
    files = {}
    for i, line in enumerate(lines):
        path = tmp_path / f"{i:03d}.jsonl"
        path.write_text(line + "\n", encoding="utf-8", errors="surrogatepass")
        files[path] = "r1"
    numbered = line_reads.read_lines(spark, files, "events").lines
    read = ingest.accepted(ingest.validate_events(numbered), schemas.EVENTS_SCHEMA)
    by_file = {}
    for row in read.collect():
        by_file.setdefault(row.file, []).append(row.asDict())
    taken = 0
    for path, run_id in files.items():
        got = clean_files.rows(path, run_id, "events")
        if got is None:
            continue
        taken += 1
        assert got.column("line").null_count == got.num_rows
        assert got.drop_columns(["line"]).to_pylist() == by_file.get(str(path.resolve()), []), path.read_text()
    valid = sum(contract.validate_event(line, "r1") is None for line in lines)
    assert taken >= valid - 6, f"{taken} of {valid} valid one-line files read on the driver"
    for i in (-3, -2, -1):
        assert clean_files.rows(list(files)[i], "r1", "events") is None


def test_files_with_what_only_spark_reads_are_left_to_it(tmp_path):
    good = json.dumps(event("node_stopping", reason="x"))
    cases = {"cr": (good + "\r\n").encode(), "latin1": (good.replace('"x"', '"\xe9"')).encode("latin-1"),
             "blank": (good + "\n\n" + good + "\n").encode(), "bad": (good + "\nnot json\n").encode(),
             "deep": ("[" * 100_000 + "]" * 100_000 + "\n").encode(),  # the validator's json.loads recurses too deep
             "deep_field": (good[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode(),
             # past Jackson's limits (numbers of 1000 characters, nesting 1000 deep): Spark quarantines these
             "long_int": (good[:-1] + ', "extra": 1' + "0" * 1000 + "}\n").encode(),
             "long_float": good.replace('"mono_s": 1.5', '"mono_s": 1.' + "0" * 1000).encode(),
             "nested_1001": (good[:-1] + ', "extra": ' + "[" * 1001 + "]" * 1001 + "}\n").encode()}
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        assert clean_files.rows(path, "r1", "events") is None, name
    path = tmp_path / "ok.jsonl"
    path.write_text(good + "\n" + good)  # no end on the last line: still two lines, as count_lines counts
    got = clean_files.rows(path, "r1", "events")
    assert got.num_rows == 2 == line_reads.count_lines(path) and got.column("line_no").to_pylist() == [1, 2]
    (tmp_path / "empty.jsonl").write_text("")
    assert clean_files.rows(tmp_path / "empty.jsonl", "r1", "events").num_rows == 0
    (tmp_path / "dir.jsonl").mkdir()  # what the *.jsonl glob of a run directory can also find
    with pytest.raises(RunDatasetError, match="dir.jsonl: cannot read"):
        clean_files.rows(tmp_path / "dir.jsonl", "r1", "events")


@pytest.mark.slow
def test_a_run_with_clean_and_unclean_files_gives_the_same_tables_in_memory_and_on_disk(spark, tmp_path):
    """In memory, clean files are read on the driver and the others by Spark (a malformed line, a detail value with
    an exponent); the tables, the quarantine and the reconciliation are those of the analysis on disk."""
    run = tmp_path / "mixed"
    gen_events.generate_run(run, "mixed", nodes=6, duration_s=30.0, seed=5, variant="snek")
    first = sorted((run / "events").glob("*.jsonl"))[0]
    with first.open("a") as f:
        f.write("not json\n")
    with (run / "actions.jsonl").open("a") as f:
        f.write(json.dumps({"run_id": "mixed", "mono_s": 29.0, "wall_ts": 1e9, "action": "ping", "target": None,
                            "detail": {"t": 1e-05, "peer": OTHER}}) + "\n")
    assert clean_files.rows(first, "mixed", "events") is None
    assert clean_files.rows(run / "actions.jsonl", "mixed", "actions") is None
    assert clean_files.rows(run / "pings.jsonl", "mixed", "pings") is not None
    mem = analysis.analyze(spark, [run], tmp_path / "mem", in_memory=True)
    disk = analysis.analyze(spark, [run], tmp_path / "disk", in_memory=False, arrow_reads=False)  # Spark reads all
    assert mem.quarantined == 1 and mem.reconciliation == disk.reconciliation
    assert all(r["ok"] for r in mem.reconciliation)
    for name in ("events", "actions", "pings", "quarantine", "convergence", "delivery", "overhead_by_node"):
        assert_frames_equal(spark.read.parquet(tables.table_path(tmp_path / "mem", name)),
                            spark.read.parquet(tables.table_path(tmp_path / "disk", name)))
