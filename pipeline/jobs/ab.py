"""A/B experiments: the metrics of every run of both arms (Spark) and the paired comparison (driver).

An A/B experiment (``snekbed ab``) runs one topology and chaos scenario with two protocol variant
specs, arm ``a`` and arm ``b``, for N seeds; a seed gives both arms the same keys, delays and fault
schedule. Each run's meta.json ``ab`` names its experiment, arm and seed (docs/run-dataset.md).

``ab_runs`` (Spark, on the result tables): one row per A/B run with the metrics of :data:`METRICS`:

* ``start_tree_s``, ``start_snake_s``: convergence of episode 0 (the run start), as in ``convergence``;
* ``reconv_<tree|snake>_<kind>_s``: re-convergence after the faults of kind ``<kind>`` (the action
  that opened the episode: ``kill``, ``kill_root``, ``partition``, ``heal``, ...): the maximum over
  the run's episodes of that kind; null when the run has none, and null when one of them never
  converged (a maximum over the others would flatter the run; ``episodes_unconverged`` counts it);
* ``episodes_unconverged``: episodes, the start included, whose snake never converged;
* ``delivery_disrupted``: delivery ratio of the pings sent inside disruption episodes (episode >= 1:
  from a fault until the next action, as ``pings_enriched.episode`` places them), over
  ``pings_disrupted`` pings (null when there were none); ``delivery_ratio``: of every ping;
* ``delivery_connected``: delivery ratio of the pings whose pair the live graph connected when they were sent
  (pings.jsonl ``shortest_links`` not null), over ``pings_connected`` pings (null when there were none): with
  nodes that move (docs/mobility.md) the pairs apart are the radio graph's doing, not the protocol's, and
  ``delivery_ratio`` mixes them in; on a static graph it leaves out only pairs a partition or a kill separated;
* ``stretch_median``: median stretch of the delivered pings (as ``run_summary``);
* ``control_bytes_per_node_s``: control frames' bytes sent per node-second (``overhead.control_per_run``);
* ``internal_errors``: bugs caught at a peer boundary, as far as the run records them: event lines
  whose ``reason`` is ``internal_error`` (a ``peer_down``, or a ``frame_dropped`` counting ``count``),
  plus meta.json ``observer.internal_errors`` (a number, or {node: number}) when a recorder read
  the nodes' counters; 0 when there are none;
* ``censored`` (not compared): a JSON object {metric: seconds} for every time metric the run left
  null because an episode never converged: the time up to which it was watched and had not converged
  (the episode's horizon, from its fault to the next episode or the run's last event; for a
  ``reconv_*`` metric the maximum over its episodes of the converged time or, where one never
  converged, that episode's horizon). The metric is then known to be at least that long.

``summarize`` (driver, plain Python and numpy; an experiment has a few dozen rows): per experiment
and metric, the arms are paired by seed. A pair where an arm never converged is **counted, censored**
(not left out: leaving it out keeps only the seeds where the failing arm did converge, which flatters
that arm): both values of the pair are restricted to the pair's horizon ``tau`` (the smaller censoring
time of its censored arms): an arm that never converged counts as ``tau``, an arm that converged
counts as its time, or ``tau`` if it took longer. That is the paired difference of *restricted* means
(min(T, tau)), a standard estimand for censored times: it is known exactly from what was observed,
its sign is the known order of the two arms (0 when neither converged within ``tau``), and since
``tau`` is a symmetric function of the pair, swapping the arms' labels swaps the restricted values:
under "no difference" the sign-flip test below stays exact. It understates the failing arm's true
excess (its time is at least ``tau``), so a censored pair can only weaken, never invent, a
difference in its favour. ``n_censored`` counts such pairs, ``censored`` names their seeds per arm.
A seed with the metric null in an arm for another reason (no episode of that kind, no pings in
disruption) is left out (``n_dropped``, ``dropped``):

* ``a``, ``b``: {median, p25, p75} of each arm over the paired seeds (linear interpolation);
* ``diff``: the **mean** of the per-seed differences b - a (a difference within 1e-9 of the values'
  magnitude is float noise and counts as 0). The mean, not the median: a variant's
  effect often moves some seeds and leaves others exactly as they were (a seed replays the same
  schedule; a slower bootstrap interval delays the start convergence of 7 ring-8 seeds in 10 by
  3-4 s and leaves 3 unchanged). The median of such differences is 0 or near it, so a
  median-based test calls a consistent one-sided effect insignificant, while the mean is the
  expected cost per run, which is what a variant is chosen on;
* ``ci_low``, ``ci_high``: a 95 % interval of that mean, by inverting the paired **sign-flip
  (randomization) test**: the set of shifts ``delta`` for which the test does not reject that the
  differences minus ``delta`` are symmetric about 0, two-sided, ``p > 0.05``, with the mean as
  statistic. When the arms do not differ, the labels a and b of a seed are exchangeable, so each
  difference is as likely to be +d as -d, and the test's level is exact for any distribution:
  ties, counts, heavy tails, no normality; ``significant`` (0 outside the interval) is then a
  false alarm in at most 5 % of experiments. The interval covers the true mean difference 95 % of
  the time when the differences are symmetric about it; skewed ones are covered less at small N
  (tests/pipeline/test_ab_stats.py, 400 trials each: 94 % for normal and t(3) differences at N = 12
  and 20, 99 % for discrete ones with ties, 84 % for lognormal ones at N = 20; false alarms 6 % and
  3 % over 300 experiments whose arms are the same lognormal or Poisson distribution). A
  percentile bootstrap of the mean (measured while choosing, not shipped) misses as often for
  skewed data and already undercovers symmetric data at these N (about 93 % for normal
  differences at N = 20, 90 % at N = 8), so its false alarms exceed 5 %; a sign-test interval of
  the median is exact but, as above, blind to effects that leave some seeds unchanged. The
  sign-flip distribution is enumerated exactly up to :data:`EXACT_PAIRS` pairs (2^n sign vectors)
  and drawn beyond, :data:`DRAWS` vectors from a fixed seed: the result is reproducible. The
  smallest p the test can give with n pairs is 2 / 2^n (:func:`min_p_value`: every difference the
  same sign); with fewer than :func:`min_pairs` pairs (6 at 5 %) no shift can be rejected: the
  interval is unbounded (``ci_low``/``ci_high`` null) and nothing is significant. ``snekbed ab``
  says so before it runs (:func:`power_warnings`);
* ``p_value``: the test's p for a shift of 0; ``significant``: the interval excludes 0;
* ``better``: ``"a"`` or ``"b"`` when significant, by the metric's direction (lower is better for
  times, counts, bytes and stretch, higher for delivery), else None.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.errors import JobInputError
from pipeline.schemas import AB_RUNS_SCHEMA, EPISODE_ACTIONS

__all__ = [
    "CONFIDENCE", "EXACT_PAIRS", "DRAWS", "MIN_PAIRS", "Metric", "METRICS", "INFO_COLUMNS", "Interval", "ab_runs",
    "spread", "interval", "compare_metric", "summarize", "summary_rows", "summary_text", "min_p_value", "min_pairs",
    "power_warnings", "metric_warnings", "restricted", "censored_pair", "relevel",
]

CONFIDENCE = 0.95
#: the arm that runs A's and B's nodes together (snekbed ab --mixed), compared with each
MIXED = "mixed"
EXACT_PAIRS = 16  # up to this many pairs every sign vector is enumerated (2^16 = 65 536)
DRAWS = 20_000  # beyond: this many random sign vectors, from SIGN_SEED
SIGN_SEED = 20_240_611
MIN_PAIRS = 6  # the fewest pairs with which the exact test can reject at 5 % (2 / 2^6 < 0.05)
NOISE = 1e-9  # relative: a per-seed difference this small is float noise, taken as 0


@dataclass(frozen=True)
class Metric:
    """A column of ``ab_runs`` compared between the arms; ``lower_is_better`` gives ``better``."""

    name: str
    lower_is_better: bool
    what: str

    @property
    def better_when(self) -> str:
        return "lower" if self.lower_is_better else "higher"


def _reconv_metrics() -> list[Metric]:
    return [Metric(f"reconv_{kind}_{action}_s", True, f"{kind} re-convergence after {action} (max over episodes)")
            for action in EPISODE_ACTIONS for kind in ("tree", "snake")]  # fmt: skip


#: Every compared metric, in report order (all columns of ``ab_runs``).
METRICS: tuple[Metric, ...] = (
    Metric("start_tree_s", True, "tree convergence at the start (s)"),
    Metric("start_snake_s", True, "snake convergence at the start (s)"),
    *_reconv_metrics(),
    Metric("episodes_unconverged", True, "episodes whose snake never converged"),
    Metric("delivery_disrupted", False, "ping delivery ratio inside disruption episodes"),
    Metric("delivery_ratio", False, "ping delivery ratio, all pings"),
    Metric("delivery_connected", False, "ping delivery ratio between pairs the live graph connected"),
    Metric("stretch_median", True, "median stretch of delivered pings"),
    Metric("control_bytes_per_node_s", True, "control bytes sent per node per second"),
    Metric("internal_errors", True, "internal errors recorded"),
)
#: The columns of ``ab_runs`` that are not compared.
INFO_COLUMNS = ("run_id", "experiment", "arm", "seed", "spec", "variants", "pings_disrupted", "pings_connected",
                "censored")


# --------------------------------------------------------------------------- per-run metrics (Spark)


def _need(df: DataFrame, cols: tuple[str, ...], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise JobInputError("ab_runs", f"{what} lacks columns {missing}")


def _reconv(kind: str, action: str) -> Column:
    """Max of ``<kind>_converged_s`` over the episodes opened by ``action``; null if one never converged."""
    value = F.col(f"{kind}_converged_s")
    mine = F.col("action") == action
    unconverged = F.sum((mine & value.isNull()).cast("long"))
    return F.when(unconverged > 0, F.lit(None).cast("double")).otherwise(F.max(F.when(mine, value)))


def _censoring(convergence: DataFrame, events: DataFrame) -> DataFrame:
    """(run_id, censored): per run, the JSON object {time metric: seconds watched without converging} of the
    time metrics an unconverged episode left null (module doc). An episode's horizon runs from its fault to
    the next episode's, or to the run's last event."""
    end = events.groupBy("run_id").agg(F.max("mono_s").alias("_end_s"))
    nxt = F.lead("t0_s").over(Window.partitionBy("run_id").orderBy("episode"))
    conv = convergence.join(end, "run_id", "left").withColumn(
        "_horizon_s", F.coalesce(nxt, F.col("_end_s")) - F.col("t0_s"))
    ep, horizon = F.col("episode"), F.col("_horizon_s")
    levels = []
    for kind in ("tree", "snake"):
        value = F.col(f"{kind}_converged_s")
        levels.append(F.max(F.when((ep == 0) & value.isNull(), horizon)).alias(f"start_{kind}_s"))
        for action in EPISODE_ACTIONS:
            mine = F.col("action") == action
            unconverged = F.sum((mine & value.isNull()).cast("long"))
            levels.append(F.when(unconverged > 0, F.max(F.when(mine, F.coalesce(value, horizon))))
                          .alias(f"reconv_{kind}_{action}_s"))
    return conv.groupBy("run_id").agg(F.to_json(F.struct(*levels)).alias("censored"))


def ab_runs(ab_meta: DataFrame, convergence: DataFrame, enriched: DataFrame, control: DataFrame,
            events: DataFrame) -> DataFrame:  # fmt: skip
    """ab_meta (AB_META_SCHEMA), convergence (CONVERGENCE_SCHEMA), enriched pings (PINGS_ENRICHED_SCHEMA),
    control (overhead.control_per_run), events (EVENTS_SCHEMA) -> AB_RUNS_SCHEMA, one row per A/B run.

    Raises JobInputError when a DataFrame lacks a needed column."""
    _need(ab_meta, ("run_id", "experiment", "arm", "seed", "spec", "variants", "observer_internal_errors"), "ab_meta")
    _need(convergence, ("run_id", "episode", "action", "tree_converged_s", "snake_converged_s"), "convergence")
    _need(enriched, ("run_id", "episode", "received", "stretch", "shortest_links"), "enriched pings")
    _need(events, ("run_id", "event", "reason", "count", "mono_s"), "events")
    _need(convergence, ("t0_s",), "convergence")
    ep = F.col("episode")
    conv = convergence.groupBy("run_id").agg(
        F.max(F.when(ep == 0, F.col("tree_converged_s"))).alias("start_tree_s"),
        F.max(F.when(ep == 0, F.col("snake_converged_s"))).alias("start_snake_s"),
        *[_reconv(kind, action).alias(f"reconv_{kind}_{action}_s")
          for action in EPISODE_ACTIONS for kind in ("tree", "snake")],
        F.sum(F.col("snake_converged_s").isNull().cast("long")).alias("episodes_unconverged"),
    )  # fmt: skip
    disrupted = (ep >= 1).cast("long")
    received = F.col("received").cast("long")
    connected = F.col("shortest_links").isNotNull().cast("long")
    pings = enriched.groupBy("run_id").agg(
        F.sum(disrupted).alias("pings_disrupted"),
        F.sum(disrupted * received).alias("_received_disrupted"),
        (F.sum(received) / F.count("*")).alias("delivery_ratio"),
        F.sum(connected).alias("pings_connected"),
        F.sum(connected * received).alias("_received_connected"),
        F.percentile("stretch", 0.5).alias("stretch_median"),
    )
    errors = events.where(F.col("reason") == "internal_error").groupBy("run_id").agg(
        F.sum(F.when(F.col("event") == "frame_dropped", F.col("count")).otherwise(F.lit(1))).alias("_event_errors"))
    joined = (ab_meta.join(conv, "run_id", "left").join(pings, "run_id", "left")
              .join(control.select("run_id", "control_bytes_per_node_s"), "run_id", "left")
              .join(errors, "run_id", "left").join(_censoring(convergence, events), "run_id", "left"))  # fmt: skip
    n_disrupted = F.coalesce(F.col("pings_disrupted"), F.lit(0))
    n_connected = F.coalesce(F.col("pings_connected"), F.lit(0))
    cols = {
        "delivery_disrupted": F.when(n_disrupted > 0, F.col("_received_disrupted") / n_disrupted),
        "pings_disrupted": n_disrupted,
        "delivery_connected": F.when(n_connected > 0, F.col("_received_connected") / n_connected),
        "pings_connected": n_connected,
        "episodes_unconverged": F.col("episodes_unconverged"),
        "internal_errors": F.coalesce(F.col("_event_errors"), F.lit(0))
        + F.coalesce(F.col("observer_internal_errors"), F.lit(0)),
        "censored": F.coalesce(F.col("censored"), F.lit("{}")),
    }
    return joined.select(
        *[cols[f.name].cast(f.dataType).alias(f.name) if f.name in cols else F.col(f.name).cast(f.dataType)
          for f in AB_RUNS_SCHEMA.fields]
    ).orderBy("experiment", "arm", "seed")  # fmt: skip


# --------------------------------------------------------------------------- paired statistics (driver)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default, Spark's ``percentile``)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def spread(values: Iterable[float]) -> dict[str, float | None]:
    """{median, p25, p75} of ``values`` (all None when empty)."""
    v = sorted(float(x) for x in values)
    if not v:
        return {"median": None, "p25": None, "p75": None}
    return {"median": _quantile(v, 0.5), "p25": _quantile(v, 0.25), "p75": _quantile(v, 0.75)}


@lru_cache(maxsize=64)
def _signs(n: int) -> np.ndarray:
    """The sign vectors of the randomization distribution for n pairs (the identity first)."""
    if n <= EXACT_PAIRS:
        return np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    s = np.random.default_rng(SIGN_SEED + n).choice((1.0, -1.0), size=(DRAWS, n))
    s[0] = 1.0
    return s


def _p_value(d: np.ndarray, delta: float, signs: np.ndarray) -> float:
    """Two-sided sign-flip p for "the differences minus ``delta`` are symmetric about 0"."""
    x = d - delta
    t = abs(float(x.sum()))
    tol = 1e-9 * (t + float(np.abs(x).sum()) + 1e-300)  # sums that tie the observed one count as extreme
    return float((np.abs(signs @ x) >= t - tol).mean())


def min_p_value(n: int) -> float:
    """The smallest two-sided p the sign-flip test can give with ``n`` pairs: 2 / 2^n (the observed signs and
    their mirror image; beyond :data:`EXACT_PAIRS`, where sign vectors are drawn, not below 1 / DRAWS)."""
    if n <= 0:
        return 1.0
    return min(1.0, 2.0 / 2.0**n) if n <= EXACT_PAIRS else max(2.0 / 2.0**n, 1.0 / DRAWS)


def min_pairs(alpha: float) -> int | None:
    """The fewest pairs with which the test can reach ``p <= alpha`` (None: no number can)."""
    return next((n for n in range(1, 64) if min_p_value(n) <= alpha), None)


def power_warnings(n: int, alpha: float) -> list[str]:
    """What ``n`` pairs cannot conclude at level ``alpha``, said before an experiment runs (empty: nothing)."""
    need, p = min_pairs(alpha), min_p_value(n)
    test = "the exact paired sign-flip test"
    if p > alpha:
        more = f"; use --seeds {need} or more" if need is not None else ""
        return [f"{n} seed(s) give {n} pair(s): {test} cannot reach p <= {alpha:g} with {n} pairs (its smallest "
                f"two-sided p is 2/2^{n} = {p:.4g}), so every interval will be unbounded and no metric significant"
                f"{more}"]
    if 2 * p > alpha:
        return [f"{n} seeds give {n} pairs: {test} reaches p <= {alpha:g} only when every seed moves the same way "
                f"(its two smallest p are {p:.4g} and {2 * p:.4g}); a pair left out or censored as a tie can cost "
                f"the result"]
    return []


@dataclass(frozen=True)
class Interval:
    """The paired difference: mean, 95 % interval (None: unbounded), p for 0, significant."""

    diff: float
    ci_low: float | None
    ci_high: float | None
    p_value: float
    significant: bool


def _bound(d: np.ndarray, signs: np.ndarray, alpha: float, direction: int) -> float | None:
    """The end of the acceptance region {delta: p(delta) > alpha} on the ``direction`` side of the mean
    (None: unbounded).

    p only changes where some sign vector's |sum| ties the observed one, at the breakpoints
    delta = (S - a_s) / (n - k_s) and (S + a_s) / (n + k_s) (S the sum of d, a_s = s.d, k_s = the sum
    of s); a tie counts as extreme, so p at a breakpoint is p just inside it and the region ends at
    one. p falls as delta leaves the mean: a binary search over the breakpoints finds the last
    accepted one (about 17 evaluations of p)."""
    total, n = float(d.sum()), len(d)
    mean = total / n
    a, k = signs @ d, signs.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cands = np.concatenate([(total - a) / (n - k), (total + a) / (n + k)])
    side = np.unique(cands[np.isfinite(cands) & (direction * (cands - mean) > 0)])
    if direction < 0:
        side = side[::-1]  # nearest to the mean first
    if not len(side) or _p_value(d, float(side[-1]) + direction * (abs(float(side[-1]) - mean) + 1.0), signs) > alpha:
        return None  # p stays above alpha beyond the last breakpoint
    lo, hi = 0, len(side)  # side[lo] accepted (p there is p at the mean, 1), side[hi] rejected or past the end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _p_value(d, float(side[mid]), signs) > alpha:
            lo = mid
        else:
            hi = mid
    return float(side[lo])


def interval(diffs: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Mean of ``diffs`` and its interval by inverting the sign-flip test (module doc); None when empty."""
    if not diffs:
        return None
    d = np.asarray(diffs, dtype=float)
    alpha = 1.0 - confidence
    mean = float(d.mean())
    signs = _signs(len(d))
    if min_p_value(len(d)) > alpha:  # no shift can be rejected
        return Interval(mean, None, None, _p_value(d, 0.0, signs), False)
    if np.all(d == d[0]):  # every shift but d[0] is rejected: the exact interval is the point
        low = high = float(d[0])
    else:
        low, high = _bound(d, signs, alpha, -1), _bound(d, signs, alpha, +1)
    p0 = _p_value(d, 0.0, signs)
    outside = (low is not None and low > 0) or (high is not None and high < 0)
    if p0 > alpha:  # 0 is accepted: an end within rounding of 0 is 0
        low = 0.0 if low is not None and 0 < low <= 1e-9 * (abs(high or 0) + 1e-300) else low
        high = 0.0 if high is not None and -1e-9 * (abs(low or 0) + 1e-300) <= high < 0 else high
        outside = False
    return Interval(mean, low, high, p0, bool(outside and p0 <= alpha))


def _difference(a: float, b: float) -> float:
    """b - a, with float noise (within ``NOISE`` of the values' magnitude) taken as an exact 0: times
    derived from the same schedule differ by 1e-16 s, which must not read as a consistent effect."""
    d = b - a
    return 0.0 if abs(d) <= NOISE * max(abs(a), abs(b)) else d


def _censored_at(row: Mapping) -> dict[str, float]:
    """A run's ``censored`` column as {metric: seconds} (absent or empty: {})."""
    text = row.get("censored")
    return {k: float(v) for k, v in json.loads(text).items() if v is not None} if text else {}


def restricted(a: float | None, a_level: float | None, b: float | None,
               b_level: float | None) -> tuple[float, float, str] | None:  # fmt: skip
    """One pair's values for the paired test: ``a`` and ``b`` (None: never converged, watched for ``*_level``
    seconds) restricted to the pair's horizon tau, the smaller censoring time (module doc), and which arms were
    censored (``""``, ``"a"``, ``"b"``, ``"ab"``). None when a value is missing and not censored."""
    if (a is None and a_level is None) or (b is None and b_level is None):
        return None
    levels = (None if a is not None else a_level, None if b is not None else b_level)
    cut = [c for c in levels if c is not None]
    if not cut:
        return float(a), float(b), ""  # type: ignore[arg-type]
    tau = min(cut)
    va, vb = (tau if v is None else min(float(v), tau) for v in (a, b))
    return va, vb, "".join(arm for arm, c in zip("ab", levels) if c is not None)


def censored_pair(name: str, a: Mapping, b: Mapping) -> tuple[float, float, str] | None:
    """:func:`restricted` for metric ``name`` of two ``ab_runs`` rows (a null value counts as censored when the
    row's ``censored`` gives the seconds it was watched)."""
    return restricted(a.get(name), _censored_at(a).get(name), b.get(name), _censored_at(b).get(name))


def metric_warnings(doc_metrics: Mapping[str, Mapping], alpha: float) -> list[str]:
    """Metrics whose pairs, after the ones left out, can no longer reach ``p <= alpha``."""
    out = []
    for name, m in doc_metrics.items():
        if m.get("n_dropped") and min_p_value(m["n_pairs"]) > alpha:
            out.append(f"{name}: {m['n_pairs']} pair(s) left after {m['n_dropped']} left out (seeds "
                       f"{', '.join(map(str, m['dropped']))}, no value): it cannot reach p <= {alpha:g}")
    return out


def relevel(experiment: Mapping, confidence: float) -> dict:
    """An experiment of the A/B document with every metric's test redone at ``confidence`` (from its pairs)."""
    by_name = {m.name: m for m in METRICS}
    metrics = {}
    for name, m in experiment["metrics"].items():
        metric = by_name.get(name, Metric(name, m["better_when"] == "lower", name))
        pairs = [(int(p[0]), float(p[1]), float(p[2])) for p in m["pairs"]]
        metrics[name] = compare_metric(metric, pairs, m.get("censored"), m.get("dropped", ()), confidence)
    return {**experiment, "confidence": confidence, "metrics": metrics}


def compare_metric(metric: Metric, pairs: Sequence[tuple[int, float, float]],
                   censored: Mapping[str, Sequence[int]] | None = None, dropped: Sequence[int] = (),
                   confidence: float = CONFIDENCE) -> dict:  # fmt: skip
    """One metric of one experiment: ``pairs`` of (seed, a value, b value) -> the JSON object of the metric.

    ``censored``: {"a": seeds, "b": seeds} whose arm never converged (its value in ``pairs`` is already the
    restricted one, :func:`censored_pair`); ``dropped``: the paired seeds left out (no value, not censored)."""
    a = [p[1] for p in pairs]
    b = [p[2] for p in pairs]
    iv = interval([_difference(x, y) for x, y in zip(a, b)], confidence)
    better = None
    if iv is not None and iv.significant:
        b_higher = iv.ci_low is not None and iv.ci_low > 0
        better = ("a" if b_higher else "b") if metric.lower_is_better else ("b" if b_higher else "a")
    cens = {arm: sorted((censored or {}).get(arm, ())) for arm in ("a", "b")}
    return {
        "n_pairs": len(pairs),
        "a": spread(a),
        "b": spread(b),
        "diff": iv.diff if iv else None,
        "ci_low": iv.ci_low if iv else None,
        "ci_high": iv.ci_high if iv else None,
        "p_value": iv.p_value if iv else None,
        "significant": bool(iv and iv.significant),
        "better": better,
        "better_when": metric.better_when,
        "pairs": [[p[0], p[1], p[2]] for p in pairs],
        "n_censored": len(set(cens["a"]) | set(cens["b"])),
        "censored": cens,
        "n_dropped": len(dropped),
        "dropped": sorted(dropped),
    }


def _metric_of(m: Metric, arms: Mapping[str, Mapping[int, Mapping]], seeds: Sequence[int],
               confidence: float) -> dict:  # fmt: skip
    """``compare_metric`` over the paired seeds, censored pairs counted (module doc)."""
    pairs: list[tuple[int, float, float]] = []
    censored: dict[str, list[int]] = {"a": [], "b": []}
    dropped: list[int] = []
    for s in seeds:
        got = censored_pair(m.name, arms["a"][s], arms["b"][s])
        if got is None:
            dropped.append(s)
            continue
        pairs.append((s, got[0], got[1]))
        for arm in got[2]:
            censored[arm].append(s)
    return compare_metric(m, pairs, censored, dropped, confidence)


def summarize(rows: Iterable[Mapping], confidence: float = CONFIDENCE) -> dict[str, dict]:
    """``ab_runs`` rows -> the A/B document: experiment -> {"a": spec, "b": spec, "seeds": paired seeds,
    "runs": {"a": [run_id...], "b": [...]}, "unpaired_seeds": [...], "confidence", "metrics": {name: object}},
    each metric's object as ``compare_metric`` makes it: n_pairs, a, b, diff, ci_low, ci_high, p_value,
    significant, better, better_when, ``pairs`` ([seed, a value, b value] per paired seed, censored values
    restricted), n_censored, censored, n_dropped and dropped.

    A metric is listed when some run of the experiment has a value for it or was censored on it. An experiment
    with a ``mixed`` arm (``snekbed ab --mixed``) also gets ``"<experiment> (a vs mixed)"`` and
    ``"<experiment> (b vs mixed)"``, the same document with the mixed arm as ``b``. Raises JobInputError for two
    runs in one (experiment, arm, seed)."""
    by_exp: dict[str, dict[str, dict[int, Mapping]]] = {}
    for r in rows:
        arms = by_exp.setdefault(r["experiment"], {"a": {}, "b": {}})
        arm = arms.setdefault(r["arm"], {})
        if r["seed"] in arm:
            raise JobInputError("ab", f"experiment {r['experiment']!r} arm {r['arm']} has seed {r['seed']} twice "
                                      f"({arm[r['seed']]['run_id']}, {r['run_id']})")
        arm[r["seed"]] = r
    doc: dict[str, dict] = {}
    for exp in sorted(by_exp):
        arms = by_exp[exp]
        doc[exp] = _compare(arms["a"], arms["b"], confidence)
        if MIXED in arms:  # the mixed arm (snekbed ab --mixed) against each arm alone
            for arm in ("a", "b"):
                doc[f"{exp} ({arm} vs {MIXED})"] = _compare(arms[arm], arms[MIXED], confidence)
    return doc


def _compare(xs: dict[int, Mapping], ys: dict[int, Mapping], confidence: float) -> dict[str, Any]:
    """One arm (as ``a``) against another (as ``b``), paired by seed."""
    arms = {"a": xs, "b": ys}
    seeds = sorted(set(xs) & set(ys))
    metrics = {}
    for m in METRICS:
        runs = [r for arm in arms.values() for r in arm.values()]
        if all(r.get(m.name) is None and m.name not in _censored_at(r) for r in runs):
            continue
        metrics[m.name] = _metric_of(m, arms, seeds, confidence)
    return {
        "a": next((r["spec"] for r in xs.values()), None),
        "b": next((r["spec"] for r in ys.values()), None),
        "seeds": len(seeds),
        "unpaired_seeds": sorted(set(xs) ^ set(ys)),
        "runs": {arm: [arms[arm][s]["run_id"] for s in sorted(arms[arm])] for arm in ("a", "b")},
        "confidence": confidence,
        "metrics": metrics,
    }


def summary_rows(doc: Mapping[str, Mapping]) -> list[tuple]:
    """The A/B document as AB_SCHEMA rows (experiment, metric order)."""
    out = []
    for exp, e in doc.items():
        for name, m in e["metrics"].items():
            out.append((exp, name, m["better_when"], e["a"], e["b"], m["n_pairs"],
                        m["a"]["median"], m["a"]["p25"], m["a"]["p75"], m["b"]["median"], m["b"]["p25"],
                        m["b"]["p75"], m["diff"], m["ci_low"], m["ci_high"], m["p_value"], m["significant"],
                        m["better"], m.get("n_censored", 0), m.get("n_dropped", 0)))  # fmt: skip
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def summary_text(doc: Mapping[str, Mapping]) -> str:
    """A plain-text table of the A/B document (what ``snekbed ab`` may print)."""
    lines = []
    for exp, e in doc.items():
        lines.append(f"experiment {exp}: a = {e['a']}, b = {e['b']}, {e['seeds']} paired seed(s)")
        conf = f"{100 * e.get('confidence', CONFIDENCE):.3g}% CI"
        lines.append(f"  {'metric':<30} {'n':>3} {'cens':>4} {'a median [p25, p75]':>26} {'b median [p25, p75]':>26} "
                     f"{'b - a (mean) [' + conf + ']':>30}  better")
        for name, m in e["metrics"].items():
            a, b = m["a"], m["b"]
            ci = f"{_num(m['diff'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}]"
            lines.append(f"  {name:<30} {m['n_pairs']:>3} {m.get('n_censored', 0):>4} "
                         f"{_num(a['median']) + ' [' + _num(a['p25']) + ', ' + _num(a['p75']) + ']':>26} "
                         f"{_num(b['median']) + ' [' + _num(b['p25']) + ', ' + _num(b['p75']) + ']':>26} "
                         f"{ci:>30}{' *' if m['significant'] else '  '} {m['better'] or '-'}")  # fmt: skip
    return "\n".join(lines)
