"""The A/B analysis on real recorded runs: in-process chaos runs (`demo` on line-5), one per seed and arm,
stamped with meta.json ``ab`` as `snekbed ab` records them, through the whole analysis in Spark.

Two experiments and one plain run are analyzed together:

* ``slower-bootstrap``: arm a ``snek``, arm b ``snek,bootstrap_interval=8`` (the knob's timers really
  run in arm b), seeds 0-7. A slower bootstrap interval means fewer bootstrap frames (b sends less
  control traffic in every seed) and a snake that waits longer for the next bootstrap after the heal
  (7 s later in 6 seeds of 8, the same to a link delay in the other 2): both come out significant, ``better`` b for
  the bytes and a for the re-convergence, the second only because the difference is a mean (the
  median of such differences would not tell, see pipeline.jobs.ab);
* ``same``: both arms ``snek``, seeds 0-2: the same protocol on the same seed gives the same run, so
  every difference is 0 and nothing is significant;
* one run without ``ab``: it is analyzed as usual and is in no A/B table.

Then the same output directory is analyzed again with the plain run alone: no A/B table, file or
report section is left.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from node.core.variants import VariantSpec
from orchestrator.chaos.engine import resolve_scenario
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import load_scenario
from orchestrator.model.topology_loaders import load_topology
from pipeline import analysis, report, schemas, tables
from pipeline.errors import JobInputError
from pipeline.jobs import ab
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPOLOGY = REPO / "compose" / "topologies" / "line-5.yaml"
EXPERIMENTS = {  # name -> (spec a, spec b, seeds)
    "slower-bootstrap": ("snek", "snek,bootstrap_interval=8", range(8)),
    "same": ("snek", "snek", range(3)),
}


def record_chaos(out: Path, seed: int, spec: str, run_id: str) -> dict:
    """`snekbed chaos demo --topology line-5.yaml --seed SEED --record OUT` with the timers of ``spec``."""
    topology = load_topology(TOPOLOGY)
    scenario = load_scenario(resolve_scenario("demo"))
    # the routers boot in lockstep (boot_spread_s=0): each arm's bootstraps then leave on exact multiples of its
    # interval, so the slower arm re-converges the heal later in every seed, the property the tests below read
    # back through the pipeline; booted apart (the CLI's default), the phases differ by seed and a pair can invert
    backend = InprocChaos(topology, seed=seed, timers=VariantSpec.parse(spec).timers(), record=out, run_id=run_id,
                          declared=scenario.declared(), scenario_name=scenario.name, boot_spread_s=0.0)  # fmt: skip
    return trio.run(functools.partial(run_scenario, backend, scenario, seed=seed),
                    clock=trio.testing.MockClock(autojump_threshold=0))


def stamp(run: Path, meta: dict) -> None:
    doc = json.loads((run / "meta.json").read_text())
    doc.update(meta)
    (run / "meta.json").write_text(json.dumps(doc, indent=2))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """{(experiment, arm, seed): run dir} and the plain run, recorded once."""
    root = tmp_path_factory.mktemp("ab-runs")
    runs: dict = {}
    for exp, (spec_a, spec_b, seeds) in EXPERIMENTS.items():
        for seed in seeds:
            for arm, spec in (("a", spec_a), ("b", spec_b)):
                run_id = f"{exp}-{arm}-{seed}"
                out = root / run_id
                doc = record_chaos(out, seed, spec, run_id)
                assert doc["verdict"] == "pass", (run_id, doc["failed_steps"])
                stamp(out, {"variant": str(VariantSpec.parse(spec)),
                            "ab": {"experiment": exp, "arm": arm, "seed": seed, "a": spec_a, "b": spec_b}})
                runs[(exp, arm, seed)] = out
    plain = root / "plain"
    record_chaos(plain, 3, "snek", "plain")
    return {"ab": runs, "plain": plain}


@pytest.fixture(scope="module")
def analyzed(spark, recorded, tmp_path_factory):
    out = tmp_path_factory.mktemp("ab-analysis")
    result = analysis.analyze(spark, [*recorded["ab"].values(), recorded["plain"]], out)
    rows = {r["run_id"]: r.asDict() for r in tables.read_table(spark, out, "ab_runs", schemas.AB_RUNS_SCHEMA).collect()}
    return out, result, rows


def rows_of(spark, out: Path, name: str, schema) -> list[dict]:
    return [r.asDict() for r in tables.read_table(spark, out, name, schema).collect()]


# --------------------------------------------------------------------------- per-run metrics


def test_one_ab_runs_row_per_ab_run_with_its_arm(analyzed, recorded):
    _, _, rows = analyzed
    assert set(rows) == {f"{e}-{a}-{s}" for e, a, s in recorded["ab"]}  # the plain run is not an A/B run
    for (exp, arm, seed) in recorded["ab"]:
        r = rows[f"{exp}-{arm}-{seed}"]
        spec_a, spec_b, _ = EXPERIMENTS[exp]
        assert (r["experiment"], r["arm"], r["seed"], r["spec"]) == (exp, arm, seed, spec_a if arm == "a" else spec_b)
        assert r["internal_errors"] == 0 and r["episodes_unconverged"] == 0


def test_metrics_agree_with_the_other_tables(spark, analyzed):
    out, _, rows = analyzed
    conv: dict = {}
    for c in rows_of(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA):
        conv.setdefault(c["run_id"], []).append(c)
    summary = {r["run_id"]: r for r in rows_of(spark, out, "run_summary", schemas.RUN_SUMMARY_SCHEMA)}
    for run_id, r in rows.items():
        eps = {c["episode"]: c for c in conv[run_id]}
        assert [eps[i]["action"] for i in sorted(eps)] == ["start", "kill_root", "partition", "heal"]
        assert (r["start_tree_s"], r["start_snake_s"]) == (eps[0]["tree_converged_s"], eps[0]["snake_converged_s"])
        for action, ep in (("kill_root", 1), ("partition", 2), ("heal", 3)):
            assert r[f"reconv_tree_{action}_s"] == eps[ep]["tree_converged_s"], (run_id, action)
            assert r[f"reconv_snake_{action}_s"] == eps[ep]["snake_converged_s"], (run_id, action)
        assert r["reconv_snake_kill_s"] is None and r["reconv_tree_link_down_s"] is None  # no such faults
        s = summary[run_id]
        assert r["control_bytes_per_node_s"] == pytest.approx(s["control_bytes_per_node_s"])
        assert r["stretch_median"] == pytest.approx(s["stretch_median"])
        assert r["delivery_ratio"] == pytest.approx(s["delivery_ratio"])


def test_delivery_during_disruption_from_the_raw_files(analyzed, recorded):
    """Oracle: pings.jsonl and actions.jsonl read in plain Python: pings sent at or after the first fault."""
    _, _, rows = analyzed
    for key, run in recorded["ab"].items():
        actions = [json.loads(line) for line in (run / "actions.jsonl").read_text().splitlines()]
        first_fault = min(a["mono_s"] for a in actions if a["action"] in schemas.EPISODE_ACTIONS)
        pings = [json.loads(line) for line in (run / "pings.jsonl").read_text().splitlines()]
        inside = [p for p in pings if p["sent_mono_s"] >= first_fault]
        r = rows["-".join(map(str, key))]
        assert r["pings_disrupted"] == len(inside) > 100
        assert r["delivery_disrupted"] == pytest.approx(sum(p["received"] for p in inside) / len(inside))
        # connected when sent: the live graph had a path (the partition step parts pairs: some are not)
        connected = [p for p in pings if p.get("shortest_links") is not None]
        assert r["pings_connected"] == len(connected) < len(pings)
        assert r["delivery_connected"] == pytest.approx(sum(p["received"] for p in connected) / len(connected))


# --------------------------------------------------------------------------- pairing and verdicts


def test_the_arms_are_paired_by_seed(spark, analyzed):
    out, result, rows = analyzed
    assert set(result.ab) == set(EXPERIMENTS)
    for exp, (spec_a, spec_b, seeds) in EXPERIMENTS.items():
        e = result.ab[exp]
        assert (e["a"], e["b"], e["seeds"], e["unpaired_seeds"]) == (spec_a, spec_b, len(seeds), [])
        assert e["runs"] == {arm: [f"{exp}-{arm}-{s}" for s in seeds] for arm in ("a", "b")}
        for name, m in e["metrics"].items():
            expected = [[s, rows[f"{exp}-a-{s}"][name], rows[f"{exp}-b-{s}"][name]] for s in seeds
                        if rows[f"{exp}-a-{s}"][name] is not None and rows[f"{exp}-b-{s}"][name] is not None]
            assert m["pairs"] == expected, (exp, name)
            assert m["n_pairs"] == len(expected)
            assert m["diff"] == pytest.approx(sum(b - a for _, a, b in expected) / len(expected))
    table = rows_of(spark, out, "ab", schemas.AB_SCHEMA)
    assert {(r["experiment"], r["metric"]) for r in table} == {(x, m) for x, e in result.ab.items() for m in e["metrics"]}
    for r in table:
        m = result.ab[r["experiment"]]["metrics"][r["metric"]]
        assert (r["diff"], r["ci_low"], r["ci_high"], r["significant"], r["better"], r["n_pairs"]) == (
            m["diff"], m["ci_low"], m["ci_high"], m["significant"], m["better"], m["n_pairs"])


def test_a_slower_bootstrap_sends_less_and_reconverges_later(analyzed):
    _, result, _ = analyzed
    e = result.ab["slower-bootstrap"]
    control = e["metrics"]["control_bytes_per_node_s"]
    assert control["n_pairs"] == 8 and all(b < a for _, a, b in control["pairs"])
    assert control["significant"] and control["better"] == "b" and control["ci_high"] < 0
    heal = e["metrics"]["reconv_snake_heal_s"]
    diffs = [b - a for _, a, b in heal["pairs"]]
    # 7 s later or the same (to the events' link delays), never earlier
    assert all(d > -0.01 for d in diffs) and sum(d > 1 for d in diffs) >= 6, diffs
    assert heal["significant"] and heal["better"] == "a" and heal["ci_low"] > 0
    assert heal["b"]["median"] > heal["a"]["median"]
    assert e["metrics"]["internal_errors"]["significant"] is False


def test_identical_arms_are_not_significant(analyzed):
    _, result, _ = analyzed
    metrics = result.ab["same"]["metrics"]
    assert {"start_tree_s", "start_snake_s", "reconv_snake_kill_root_s", "reconv_snake_partition_s",
            "delivery_disrupted", "control_bytes_per_node_s", "internal_errors"} <= set(metrics)
    for name, m in metrics.items():  # three pairs: too few to reject anything, and nothing to reject
        assert m["n_pairs"] == 3, name
        assert (m["diff"], m["ci_low"], m["ci_high"], m["significant"], m["better"]) == (0.0, None, None, False, None)
        assert m["a"] == m["b"]


def test_json_file_result_and_cli_document_agree(analyzed):
    out, result, _ = analyzed
    text = (out / analysis.AB_FILE).read_text()
    assert json.loads(text) == result.ab == analysis.load_ab(out) == result.to_json()["ab"]
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in ab.json"))
    for e in result.ab.values():
        for m in e["metrics"].values():
            assert {"a", "b", "diff", "ci_low", "ci_high", "significant", "better", "n_pairs"} <= set(m)
            assert set(m["a"]) == set(m["b"]) == {"median", "p25", "p75"}
    assert {"ab_runs", "ab"} <= set(result.tables)
    assert out / analysis.AB_FILE in result.report_files
    text = result.ab_text()  # what `snekbed analyze` prints
    assert "experiment slower-bootstrap: a = snek, b = snek,bootstrap_interval=8, 8 paired seed(s)" in text
    assert "experiment same: a = snek, b = snek, 3 paired seed(s)" in text


# --------------------------------------------------------------------------- report


def test_report_has_the_ab_section_and_plots(analyzed):
    out, result, _ = analyzed
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert md.index("## Runs") < md.index("## A/B") < md.index("## Reconciliation")
    assert "### A/B slower-bootstrap" in md and "### A/B same" in md
    assert "arm a = snek, arm b = snek,bootstrap_interval=8; 8 paired seed(s)" in md
    section = md.split("### A/B slower-bootstrap", 1)[1].split("###", 1)[0]
    [row] = [line for line in section.splitlines() if line.startswith("| reconv_snake_heal_s |")]
    assert row.rstrip().endswith("| yes | a |"), row
    [row] = [line for line in section.splitlines() if line.startswith("| control_bytes_per_node_s |")]
    assert row.rstrip().endswith("| yes | b |"), row
    assert "| metric | better when | pairs | censored | left out |" in section  # every run converged: 0 and 0
    assert row.startswith("| control_bytes_per_node_s | lower | 8 | 0 | 0 |"), row
    data = json.loads((out / "plots.json").read_text())
    from matplotlib.image import imread

    for i, exp in enumerate(result.ab, start=1):
        png = report.ab_plot_name(i, exp)
        assert f"]({png})" in md and f'src="{png}"' in html
        pixels = imread(out / png)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400 and pixels.std() > 0.01, png
        assert data[png]["experiment"] == exp
        assert data[png]["metrics"]["start_snake_s"]["pairs"] == result.ab[exp]["metrics"]["start_snake_s"]["pairs"]
    assert set(report.PLOTS) <= {p.name for p in result.report_files}


# --------------------------------------------------------------------------- without A/B runs


def test_without_ab_runs_there_is_no_ab_output(spark, analyzed, recorded):
    out, _, _ = analyzed  # the same output directory: the earlier A/B outputs must not survive
    result = analysis.analyze(spark, [recorded["plain"]], out)
    assert result.ab == {} and "ab" not in result.to_json()
    assert not {"ab_runs", "ab"} & set(result.tables)
    assert not (out / "tables" / "ab_runs").exists() and not (out / "tables" / "ab").exists()
    assert not (out / analysis.AB_FILE).exists() and analysis.load_ab(out) == {}
    md = (out / "report.md").read_text()
    assert "A/B" not in md and "A/B" not in (out / "report.html").read_text()
    assert {p.name for p in result.report_files} == {"report.md", "report.html", "plots.json", *report.PLOTS}
    assert not any(name.startswith("ab_") for name in json.loads((out / "plots.json").read_text()))


def test_runs_that_converged_are_censored_nowhere(analyzed):
    _, result, rows = analyzed
    assert {r["censored"] for r in rows.values()} == {"{}"}
    for e in result.ab.values():
        for name, m in e["metrics"].items():
            assert (m["n_censored"], m["censored"], m["n_dropped"]) == (0, {"a": [], "b": []}, 0), name


def test_ab_runs_job_needs_its_columns(spark, analyzed):
    out, _, _ = analyzed
    conv = tables.read_table(spark, out, "convergence", schemas.CONVERGENCE_SCHEMA)
    with pytest.raises(JobInputError, match="ab_meta lacks"):
        ab.ab_runs(conv, conv, conv, conv, conv)
