"""The A/B statistics of pipeline.jobs.ab, on the driver, against known truth (no Spark session).

The interval is the inversion of the paired sign-flip test, so it is checked three ways: against a
brute-force scan of the test's acceptance region (every sign vector, every breakpoint); by its
coverage of a known mean difference on synthetic data (Monte Carlo with a fixed RNG: the numbers are
those the module docstring quotes); and by its false-alarm rate when the two arms are the same
distribution. Then the verdicts (significant, better) and the pairing of ``summarize``.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from pipeline.errors import JobInputError
from pipeline.jobs import ab
from pipeline.schemas import AB_RUNS_SCHEMA, AB_SCHEMA

# --------------------------------------------------------------------------- the interval


def brute_force_interval(d: list[float], alpha: float = 0.05) -> tuple[float, float]:
    """The acceptance region {delta: p(delta) > alpha} of the exact sign-flip test, by evaluating p at
    every breakpoint (where some sign vector's |sum| ties the observed one) and between them."""
    n, total = len(d), sum(d)
    signs = list(itertools.product((1, -1), repeat=n))

    def p(delta: float) -> float:
        x = [v - delta for v in d]
        t = abs(sum(x))
        return sum(abs(sum(s_i * x_i for s_i, x_i in zip(s, x))) >= t - 1e-9 for s in signs) / len(signs)

    points = set()
    for s in signs:
        a, k = sum(s_i * d_i for s_i, d_i in zip(s, d)), sum(s)
        if k != n:
            points.add((total - a) / (n - k))
        if k != -n:
            points.add((total + a) / (n + k))
    pts = sorted(points)
    probes = pts + [(x + y) / 2 for x, y in zip(pts, pts[1:])]
    accepted = [x for x in probes if p(x) > alpha]
    return min(accepted), max(accepted)


@pytest.mark.parametrize("d", [
    [3, 3, 0, 3, 3, 3, 3, 0],
    [4, 4, 0, 4, 4, 4, 4, 0, 4, 0],
    [1, -1, 2, -2, 0.5, -0.5, 3],
    [0.3, 1.7, -0.4, 2.2, 0.9, 1.1, 0.05],
    [-5.0, -4.0, -4.5, -6.0, 1.0, -3.0, -2.5, -4.2, -3.3],
])  # fmt: skip
def test_interval_is_exactly_the_tests_acceptance_region(d):
    iv = ab.interval(d)
    low, high = brute_force_interval(d)
    assert iv.diff == pytest.approx(sum(d) / len(d))
    assert iv.ci_low == pytest.approx(low, abs=1e-12) and iv.ci_high == pytest.approx(high, abs=1e-12)
    assert iv.significant == (low > 0 or high < 0)


def test_hand_checked_cases():
    # six seeds 3 s worse, two unchanged: p = P(the six signs agree) = 2 * 2^2 / 2^8
    iv = ab.interval([3, 3, 0, 3, 3, 3, 3, 0])
    assert (iv.diff, iv.ci_low, iv.ci_high, iv.p_value, iv.significant) == (2.25, 1.0, 3.0, 8 / 256, True)
    # identical arms: every difference 0 -> the point 0, p = 1, not significant
    iv = ab.interval([0.0] * 12)
    assert (iv.diff, iv.ci_low, iv.ci_high, iv.p_value, iv.significant) == (0.0, 0.0, 0.0, 1.0, False)
    # every seed moved by the same amount: the exact interval is that point
    iv = ab.interval([2.5] * 8)
    assert (iv.ci_low, iv.ci_high, iv.significant) == (2.5, 2.5, True)
    # five pairs cannot reject at 5 % (p >= 2/32): unbounded, never significant
    iv = ab.interval([10, 11, 12, 13, 14])
    assert (iv.ci_low, iv.ci_high, iv.p_value, iv.significant) == (None, None, 2 / 32, False)
    assert ab.interval([]) is None


def test_many_pairs_are_reproducible():
    d = list(np.random.default_rng(11).normal(0.4, 1.0, 23))  # beyond EXACT_PAIRS: drawn sign vectors
    ab._signs.cache_clear()
    first = ab.interval(d)
    ab._signs.cache_clear()
    assert ab.interval(d) == first
    assert first.ci_low < first.diff < first.ci_high


COVERAGE_TRIALS = 400


@pytest.mark.parametrize(("name", "n", "draw", "truth", "lowest"), [
    ("normal", 12, lambda rng, n: rng.normal(1.0, 2.0, n), 1.0, 0.93),
    ("t3", 12, lambda rng, n: 0.5 + rng.standard_t(3, n), 0.5, 0.93),
    ("discrete with ties", 12, lambda rng, n: rng.choice([0.0, 2.0, 2.0, 4.0], n), 2.0, 0.93),
    ("normal", 20, lambda rng, n: rng.normal(-1.0, 0.5, n), -1.0, 0.93),
    # skewed differences: the mean is covered less often at small N (module doc: about 85 %)
    ("lognormal", 20, lambda rng, n: rng.lognormal(0.0, 1.0, n), math.exp(0.5), 0.80),
])  # fmt: skip
def test_coverage_of_a_known_mean_difference(name, n, draw, truth, lowest):
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(COVERAGE_TRIALS):
        iv = ab.interval(list(draw(rng, n)))
        hits += iv.ci_low <= truth <= iv.ci_high
    coverage = hits / COVERAGE_TRIALS
    assert lowest <= coverage, (name, n, coverage)
    if name != "discrete with ties":  # ties make the closed interval conservative; otherwise it is not too wide
        assert coverage <= 0.985, (name, n, coverage)


@pytest.mark.parametrize(("name", "draw"), [
    ("lognormal", lambda rng, n: rng.lognormal(0.0, 1.0, n)),  # skewed times
    ("poisson counts", lambda rng, n: rng.poisson(0.4, n).astype(float)),  # internal errors: mostly 0
])  # fmt: skip
def test_false_alarms_when_the_arms_do_not_differ(name, draw):
    rng = np.random.default_rng(3)
    experiments = 300
    alarms = sum(ab.interval(list(draw(rng, 20) - draw(rng, 20))).significant for _ in range(experiments))
    assert alarms / experiments <= 0.07, (name, alarms)


def test_a_real_shift_is_found():
    rng = np.random.default_rng(5)
    found = sum(ab.interval(list(rng.normal(1.0, 1.0, 20))).significant for _ in range(100))
    assert found >= 95


# --------------------------------------------------------------------------- verdicts and pairing


def _row(exp: str, arm: str, seed: int, **metrics) -> dict:
    spec = {"a": "snek", "b": "snek,root_filter=1"}[arm]
    row = {"run_id": f"{exp}-{arm}-{seed}", "experiment": exp, "arm": arm, "seed": seed, "spec": spec}
    row.update({m.name: None for m in ab.METRICS})
    row.update(metrics)
    return row


def _experiment(exp: str, seeds: int, a_of, b_of) -> list[dict]:
    return [_row(exp, "a", s, **a_of(s)) for s in range(seeds)] + [_row(exp, "b", s, **b_of(s)) for s in range(seeds)]


def test_b_clearly_worse_is_significant_and_a_is_better():
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 0.5, (20, 3))
    rows = _experiment(
        "worse", 20,
        lambda s: {"start_snake_s": 5 + noise[s, 0], "delivery_disrupted": 0.9, "control_bytes_per_node_s": 80.0},
        lambda s: {"start_snake_s": 8 + noise[s, 1], "delivery_disrupted": 0.7 + 0.01 * noise[s, 2],
                   "control_bytes_per_node_s": 80.0},
    )  # fmt: skip
    doc = ab.summarize(rows)
    e = doc["worse"]
    assert (e["a"], e["b"], e["seeds"], e["unpaired_seeds"]) == ("snek", "snek,root_filter=1", 20, [])
    assert list(e["metrics"]) == ["start_snake_s", "delivery_disrupted", "control_bytes_per_node_s"]
    snake = e["metrics"]["start_snake_s"]
    assert snake["significant"] and snake["better"] == "a" and snake["ci_low"] > 0 and snake["n_pairs"] == 20
    assert snake["diff"] == pytest.approx(3 + float(np.mean(noise[:, 1] - noise[:, 0])))
    delivery = e["metrics"]["delivery_disrupted"]  # higher is better: b delivers less -> a is better
    assert delivery["significant"] and delivery["better"] == "a" and delivery["ci_high"] < 0
    same = e["metrics"]["control_bytes_per_node_s"]
    assert not same["significant"] and same["better"] is None and same["diff"] == 0.0
    assert snake["a"]["median"] == pytest.approx(float(np.median(5 + noise[:, 0])))
    assert snake["b"]["p25"] == pytest.approx(float(np.percentile(8 + noise[:, 1], 25)))
    json.dumps(doc, allow_nan=False)  # the document is plain JSON


def test_b_better_where_lower_is_better():
    rows = _experiment("bytes", 8, lambda s: {"control_bytes_per_node_s": 100.0 + s},
                       lambda s: {"control_bytes_per_node_s": 90.0 + s * 1.01})
    m = ab.summarize(rows)["bytes"]["metrics"]["control_bytes_per_node_s"]
    assert m["significant"] and m["better"] == "b" and m["ci_high"] < 0


def test_identical_arms_are_not_significant():
    rows = _experiment("same", 10, lambda s: {"start_tree_s": 1.0 + s % 3, "internal_errors": 0},
                       lambda s: {"start_tree_s": 1.0 + s % 3, "internal_errors": 0})
    for m in ab.summarize(rows)["same"]["metrics"].values():
        assert (m["diff"], m["ci_low"], m["ci_high"], m["significant"], m["better"]) == (0.0, 0.0, 0.0, False, None)


def test_float_noise_is_no_difference():
    # times derived from one schedule in both arms can differ in the last bit, all the same way
    rows = _experiment("noise", 8, lambda s: {"start_tree_s": 1.0 + 0.1 * s},
                       lambda s: {"start_tree_s": (1.0 + 0.1 * s) * (1 + 4e-16)})
    m = ab.summarize(rows)["noise"]["metrics"]["start_tree_s"]
    assert any(b != a for _, a, b in m["pairs"])
    assert (m["diff"], m["ci_low"], m["ci_high"], m["significant"]) == (0.0, 0.0, 0.0, False)


def test_pairing_by_seed_leaves_out_missing_seeds_and_null_values():
    rows = [
        _row("x", "a", 1, start_tree_s=1.0), _row("x", "b", 1, start_tree_s=2.0),
        _row("x", "a", 2, start_tree_s=1.5), _row("x", "b", 2, start_tree_s=None),  # b never converged
        _row("x", "a", 3, start_tree_s=1.0), _row("x", "b", 4, start_tree_s=9.0),  # no partner
        _row("y", "b", 1, start_tree_s=3.0), _row("y", "a", 1, start_tree_s=1.0),
    ]  # fmt: skip
    doc = ab.summarize(rows)
    x = doc["x"]
    assert x["seeds"] == 2 and x["unpaired_seeds"] == [3, 4]
    assert x["runs"] == {"a": ["x-a-1", "x-a-2", "x-a-3"], "b": ["x-b-1", "x-b-2", "x-b-4"]}
    m = x["metrics"]["start_tree_s"]
    assert m["pairs"] == [[1, 1.0, 2.0]] and m["n_pairs"] == 1 and m["diff"] == 1.0
    assert (m["ci_low"], m["ci_high"], m["significant"]) == (None, None, False)
    assert doc["y"]["metrics"]["start_tree_s"]["pairs"] == [[1, 1.0, 3.0]]
    assert list(x["metrics"]) == ["start_tree_s"]  # metrics no run has are not listed


def test_a_seed_twice_in_one_arm_is_an_error():
    rows = [_row("x", "a", 1, start_tree_s=1.0), {**_row("x", "a", 1, start_tree_s=2.0), "run_id": "other"}]
    with pytest.raises(JobInputError, match="seed 1 twice"):
        ab.summarize(rows)


def test_table_rows_and_text_follow_the_document():
    rows = _experiment("t", 6, lambda s: {"start_tree_s": 1.0 + s}, lambda s: {"start_tree_s": 3.0 + s})
    doc = ab.summarize(rows)
    [row] = ab.summary_rows(doc)
    assert len(row) == len(AB_SCHEMA.fields)
    as_dict = dict(zip(AB_SCHEMA.fieldNames(), row))
    assert (as_dict["experiment"], as_dict["metric"], as_dict["diff"], as_dict["better"]) == ("t", "start_tree_s",
                                                                                              2.0, "a")
    text = ab.summary_text(doc)
    assert "experiment t: a = snek, b = snek,root_filter=1, 6 paired seed(s)" in text
    assert "start_tree_s" in text and " * a" in text


def test_every_ab_runs_column_is_a_metric_or_described():
    assert sorted(m.name for m in ab.METRICS) == sorted(set(AB_RUNS_SCHEMA.fieldNames()) - set(ab.INFO_COLUMNS))


# --------------------------------------------------------------------------- what N pairs can conclude


def test_the_smallest_p_and_the_fewest_pairs():
    assert ab.min_p_value(5) == 2 / 32 and ab.min_p_value(6) == 2 / 64 and ab.min_p_value(0) == 1.0
    assert ab.min_pairs(0.05) == ab.MIN_PAIRS == 6 and ab.min_pairs(0.01) == 8 and ab.min_pairs(0.1) == 5
    assert ab.min_p_value(30) == 1 / ab.DRAWS  # drawn sign vectors: no p below one draw
    assert ab.min_pairs(1e-6) is None


def test_five_pairs_are_warned_about_six_are_noted_twenty_are_not():
    [five] = ab.power_warnings(5, 0.05)
    assert "cannot reach p <= 0.05" in five and "2/2^5 = 0.0625" in five and "--seeds 6" in five, five
    [six] = ab.power_warnings(6, 0.05)
    assert "only when every seed moves the same way" in six, six
    assert ab.power_warnings(20, 0.05) == [] and ab.power_warnings(8, 0.05) == []
    assert "--seeds 8" in ab.power_warnings(7, 0.01)[0]


def test_the_interval_follows_the_level():
    d = [1.0, 1.2, 0.9, 1.1, 1.3, 0.8, 1.05]  # seven pairs all one way: p = 2/128
    assert ab.interval(d).significant
    iv = ab.interval(d, confidence=0.99)  # 2/128 > 0.01: unbounded
    assert (iv.ci_low, iv.ci_high, iv.significant) == (None, None, False)
    m = ab.summarize(_experiment("lvl", 7, lambda s: {"start_tree_s": 1.0}, lambda s: {"start_tree_s": 1.0 + d[s]}),
                     confidence=0.99)["lvl"]
    assert m["confidence"] == 0.99 and not m["metrics"]["start_tree_s"]["significant"]


# --------------------------------------------------------------------------- censored pairs


def _censored(seconds: dict[str, float]) -> str:
    return json.dumps(seconds)


def test_a_pair_whose_arm_never_converged_counts_censored():
    # arm b re-converges in seeds 0-2 and never in seeds 3-7 (watched 60 s); arm a always, in about 5 s
    def b_of(s):
        if s < 3:
            return {"reconv_snake_kill_s": 6.0 + 0.1 * s}
        return {"reconv_snake_kill_s": None, "censored": _censored({"reconv_snake_kill_s": 60.0})}

    rows = _experiment("cens", 8, lambda s: {"reconv_snake_kill_s": 5.0 + 0.1 * s}, b_of)
    m = ab.summarize(rows)["cens"]["metrics"]["reconv_snake_kill_s"]
    assert m["n_pairs"] == 8 and m["n_censored"] == 5 and m["n_dropped"] == 0, m
    assert m["censored"] == {"a": [], "b": [3, 4, 5, 6, 7]}
    assert m["pairs"][3] == [3, 5.3, 60.0]  # the arm that never converged counts as its horizon
    assert m["significant"] and m["better"] == "a" and m["ci_low"] > 0 and m["p_value"] == 2 / 256
    # dropping them (as before) would leave 3 pairs, where nothing can be concluded
    kept = [p for p in m["pairs"] if p[0] < 3]
    assert ab.interval([b - a for _, a, b in kept]).ci_low is None


def test_restricted_to_the_pairs_horizon():
    both = {"reconv_snake_heal_s": None}
    rows = [
        # both never converged: a tie at the shorter horizon
        _row("h", "a", 0, **both, censored=_censored({"reconv_snake_heal_s": 40.0})),
        _row("h", "b", 0, **both, censored=_censored({"reconv_snake_heal_s": 30.0})),
        # b converged after a's horizon: neither had converged within it, a tie
        _row("h", "a", 1, **both, censored=_censored({"reconv_snake_heal_s": 20.0})),
        _row("h", "b", 1, reconv_snake_heal_s=25.0),
        # a converged before b's horizon: the known order, b - a = 20 - 4
        _row("h", "a", 2, reconv_snake_heal_s=4.0),
        _row("h", "b", 2, **both, censored=_censored({"reconv_snake_heal_s": 20.0})),
        # no value and no censoring (no such episode in a): left out, named
        _row("h", "a", 3, **both), _row("h", "b", 3, reconv_snake_heal_s=3.0),
    ]  # fmt: skip
    m = ab.summarize(rows)["h"]["metrics"]["reconv_snake_heal_s"]
    assert m["pairs"] == [[0, 30.0, 30.0], [1, 20.0, 20.0], [2, 4.0, 20.0]]
    assert (m["n_pairs"], m["n_censored"], m["censored"]) == (3, 3, {"a": [0, 1], "b": [0, 2]})
    assert (m["n_dropped"], m["dropped"]) == (1, [3])
    assert ab.censored_pair("reconv_snake_heal_s", rows[4], rows[5]) == (4.0, 20.0, "b")
    [row] = [r for r in ab.summary_rows(ab.summarize(rows)) if r[1] == "reconv_snake_heal_s"]
    assert dict(zip(AB_SCHEMA.fieldNames(), row))["n_censored"] == 3


def test_censoring_keeps_the_test_exact_when_the_arms_do_not_differ():
    # both arms draw from one distribution of times, watched for a horizon that varies per run: false alarms <= 5 %
    rng = np.random.default_rng(17)

    def arm(seed: int) -> dict:
        t, horizon = rng.lognormal(2.0, 0.8), rng.uniform(8.0, 20.0)
        if t <= horizon:
            return {"reconv_snake_kill_s": t}
        return {"reconv_snake_kill_s": None, "censored": _censored({"reconv_snake_kill_s": horizon})}

    alarms = censored = 0
    for i in range(200):
        m = ab.summarize(_experiment(f"e{i}", 12, arm, arm))[f"e{i}"]["metrics"]["reconv_snake_kill_s"]
        alarms += m["significant"]
        censored += m["n_censored"]
        assert m["n_pairs"] == 12
    assert censored > 200  # censoring is common here
    assert alarms / 200 <= 0.07, alarms


def test_a_mixed_arm_is_compared_with_each_arm_alone():
    """``snekbed ab --mixed``: the mixed arm's runs (spec A+B) pair by seed with each arm; A against B is as before."""
    rows = _experiment("x", 8, lambda s: {"start_snake_s": 5.0 + 0.01 * s}, lambda s: {"start_snake_s": 5.0 + 0.01 * s})
    rows += [{**_row("x", "a", s, start_snake_s=9.0 + 0.01 * s), "arm": "mixed", "run_id": f"x-mixed-{s}",
              "spec": "snek+snek,root_filter=1"} for s in range(8)]  # fmt: skip
    doc = ab.summarize(rows)
    assert sorted(doc) == ["x", "x (a vs mixed)", "x (b vs mixed)"]
    assert not doc["x"]["metrics"]["start_snake_s"]["significant"]
    for arm in ("a", "b"):
        e = doc[f"x ({arm} vs mixed)"]
        assert (e["a"], e["b"], e["seeds"]) == (_row("x", arm, 0)["spec"], "snek+snek,root_filter=1", 8)
        m = e["metrics"]["start_snake_s"]
        assert m["significant"] and m["better"] == "a" and m["diff"] == pytest.approx(4.0), m
        assert e["runs"]["b"] == [f"x-mixed-{s}" for s in range(8)]
