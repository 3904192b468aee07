"""The report: report.md, report.html and PNG plots (matplotlib Agg canvas, no pyplot state).

``collect_inputs`` reads the (small) result tables and aggregates what the
plots need in Spark (``gather``: a table's rows that the driver already holds are
only sorted there); ``plots`` draws the plots and ``render`` turns all of it
into file contents without touching the disk (``pipeline.tables.write_files`` writes
them). Plots: convergence time
CDF, stretch histogram, delivery over time with disruptions marked, overhead by
link class; with A/B runs, one figure per experiment (``ab_<n>_<name>.png``: per
metric, both arms' distributions side by side with each seed's pair joined) and an
"A/B" section. ``plots.json`` lists the data behind every plot.
"""

from __future__ import annotations

import html
import io as _bytes_io
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from pipeline import parallel, schemas, tables
from pipeline.jobs.compare import GROUPINGS
from pipeline.jobs.episodes import EPISODE_ACTIONS

__all__ = ["ReportInputs", "gather", "collect_inputs", "plots", "render", "PLOTS", "ab_plot_name"]

PLOTS = ("convergence_cdf.png", "stretch_hist.png", "delivery_over_time.png", "overhead_by_class.png")
STRETCH_BIN = 0.1


@dataclass
class ReportInputs:
    """Everything the report shows, as plain Python values (rows are dicts)."""

    runs: list[dict]
    reconciliation: list[dict]
    quarantine_by_reason: list[dict]
    quarantine_examples: list[dict]
    convergence: list[dict]
    delivery_by_episode: list[dict]
    delivery: list[dict]
    timeline: list[dict]
    disruptions: list[dict]
    stretch_hist: list[dict]
    overhead: list[dict]
    churn: list[dict]
    summary: list[dict]
    compare: dict[str, list[dict]] = field(default_factory=dict)
    #: the A/B document (pipeline.jobs.ab.summarize); {} without A/B runs
    ab: dict[str, dict] = field(default_factory=dict)


#: The report's plain reads (a table's rows in order): name -> (table, its schema (None: as written), sort keys, columns
#: left out). Each is a Spark query, or, when the analysis holds the table's rows on the driver (``held``), those rows
#: sorted there.
PLAIN_READS: dict[str, tuple[str, StructType | None, tuple[str, ...], tuple[str, ...]]] = {
    "runs": ("runs", schemas.RUNS_SCHEMA, ("run_id",), ("nodes", "versions", "observer")),
    "convergence": ("convergence", schemas.CONVERGENCE_SCHEMA, ("run_id", "episode"), ()),
    "delivery_by_episode": ("delivery_by_episode", schemas.DELIVERY_EPISODE_SCHEMA, ("run_id", "episode"), ()),
    "delivery": ("delivery", schemas.DELIVERY_SCHEMA, ("run_id", "mode", "class_mix", "shortest_links",
                                                      "since_bucket"), ()),
    "timeline": ("delivery_timeline", schemas.DELIVERY_TIMELINE_SCHEMA, ("run_id", "mode", "t_bin_s"), ()),
    "summary": ("run_summary", schemas.RUN_SUMMARY_SCHEMA, ("run_id",), ()),
    **{f"compare_{by}": (f"compare_{by}", None, (by,), ()) for by in GROUPINGS},
}


def _sorted_rows(rows: pa.Table, schema: StructType | None, keys: tuple[str, ...],
                 left_out: tuple[str, ...]) -> list[dict] | None:
    """``rows`` as Spark's plain read gives them: the columns of ``schema`` in its types (None: as written, as
    ``TableStore.get``), in Spark's ascending order of ``keys`` (nulls first), as dicts without the ``left_out``
    columns. None when Spark must answer instead: a column the schema's types cannot take exactly, or a NaN in a key
    (Spark orders it after every number, Arrow does not)."""
    if schema is None:
        rows = rows.drop_columns([c for c in left_out if c in rows.column_names])
    else:
        wanted = StructType([f for f in schema.fields if f.name not in left_out])
        try:
            rows = rows.select(wanted.fieldNames()).cast(to_arrow_schema(wanted))
        except (KeyError, ValueError, TypeError, NotImplementedError):  # pyarrow's ArrowInvalid is a ValueError
            return None
    for key in keys:
        column = rows.column(key)
        if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
            return None
    return (rows.sort_by([(key, "ascending", "at_start") for key in keys]) if rows.num_rows else rows).to_pylist()


#: A table of the analysis, in a schema (None: as written): ``tables.TableStore.get``.
Reader = Callable[[str, StructType | None], DataFrame]


def _disruptions(t: Reader) -> DataFrame:
    bounds = t("episodes", schemas.EPISODES_SCHEMA).where("episode = 0").groupBy("run_id").agg(
        F.first("t0_s").alias("start_s"))
    return t("actions", schemas.ACTIONS_SCHEMA).where(F.col("action").isin(*EPISODE_ACTIONS)).join(
        bounds, "run_id").select("run_id", "action", "target", (F.col("mono_s") - F.col("start_s")).alias("t_rel_s")
                                 ).orderBy("run_id", "t_rel_s")


#: The report's aggregates: name -> its small Spark query over the result tables (see ``gather``).
_AGGREGATES: dict[str, Callable[[Reader], DataFrame]] = {
    "quarantine_by_reason": lambda t: t("quarantine", schemas.QUARANTINE_SCHEMA).groupBy(
        "run_id", "source", "reason").count().orderBy("run_id", "source", "reason"),
    "quarantine_examples": lambda t: t("quarantine", schemas.QUARANTINE_SCHEMA).orderBy(
        "run_id", "file", "line_no").select("file", "line_no", "reason", "message").limit(20),
    "disruptions": _disruptions,
    "stretch_hist": lambda t: t("pings_enriched", schemas.PINGS_ENRICHED_SCHEMA).where(
        F.col("stretch").isNotNull()).groupBy(
        (F.floor(F.col("stretch") / STRETCH_BIN + 1e-9) * STRETCH_BIN).alias("bin")).count().orderBy("bin"),
    "overhead": lambda t: t("overhead_by_class", schemas.OVERHEAD_CLASS_SCHEMA).where("direction = 'sent'").groupBy(
        "link_class", "frame_type").agg(F.mean("frames_per_node_s").alias("frames_per_node_s"),
                                        F.mean("bytes_per_node_s").alias("bytes_per_node_s")
                                        ).orderBy("link_class", "frame_type"),
    "churn": lambda t: t("churn_by_node", schemas.CHURN_NODE_SCHEMA).groupBy("run_id").agg(
        F.sum("root_changes").alias("root_changes"), F.sum("parent_changes").alias("parent_changes"),
        F.count("*").alias("nodes")).orderBy("run_id"),
}
#: Every input of the report, by name: the plain reads and the aggregates.
INPUTS = (*PLAIN_READS, *_AGGREGATES)
#: The inputs read from the comparison's tables (run_summary, compare_*): the others can be gathered, and the plots
#: drawn (``plots``), while the comparison is computed.
COMPARISON_INPUTS = ("summary", *(f"compare_{by}" for by in GROUPINGS))


def gather(spark: SparkSession, out: str | Path, names: Iterable[str], workers: int = 2,
           read: Reader | None = None,
           held: Callable[[str], pa.Table | None] | None = None) -> dict[str, list[dict]]:  # fmt: skip
    """The rows (dicts) of the report inputs ``names`` (of ``INPUTS``), read from the result tables under ``out``.
    ``read(name, schema)`` gives a table (default: ``tables.TableStore(spark, out).get``, from its Parquet files).
    ``held(name)`` gives a table's rows when the driver holds them (``tables.TableStore.arrow``), else None: the plain
    reads (``PLAIN_READS``) of those tables need no query. The queries run ``workers`` at a time
    (``parallel.collect_all``).
    Raises ValueError for an unknown name."""
    t = read or tables.TableStore(spark, out).get
    rows: dict[str, list[dict]] = {}
    queries: dict[str, DataFrame] = {}
    for name in names:
        if name not in PLAIN_READS:
            if name not in _AGGREGATES:
                raise ValueError(f"not an input of the report: {name!r}")
            queries[name] = _AGGREGATES[name](t)
            continue
        table, schema, keys, left_out = PLAIN_READS[name]
        got = held(table) if held else None
        plain = _sorted_rows(got, schema, keys, left_out) if got is not None else None
        if plain is not None:
            rows[name] = plain
        else:
            queries[name] = t(table, schema).drop(*left_out).orderBy(*keys)
    rows.update({name: [r.asDict() for r in got] for name, got in parallel.collect_all(queries, workers).items()})
    return rows


def collect_inputs(spark: SparkSession, out: str | Path, reconciliation: list[dict],
                   ab: Mapping[str, dict] | None = None, workers: int = 2,
                   read: Reader | None = None,
                   held: Callable[[str], pa.Table | None] | None = None,
                   gathered: Mapping[str, list[dict]] | None = None) -> ReportInputs:  # fmt: skip
    """Everything the report shows: the inputs of ``gathered`` (name -> rows, from ``gather``), and ``gather`` of the
    others (``read``, ``held`` and ``workers`` as there); ``ab`` is the A/B document of the analysis
    (pipeline.jobs.ab.summarize), if it has A/B runs."""
    rows = dict(gathered or {})
    rows.update(gather(spark, out, [name for name in INPUTS if name not in rows], workers, read, held))
    compared = {by: rows.pop(f"compare_{by}") for by in GROUPINGS}
    return ReportInputs(reconciliation=reconciliation, compare=compared, ab=dict(ab or {}), **rows)


# --------------------------------------------------------------------------- plots


def _figure(width: float, height: float):
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _png(fig: Figure) -> bytes:
    buf = _bytes_io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)


def _convergence_cdf(convergence: list[dict], data: dict) -> bytes:
    fig, ax = _figure(7, 4)
    for kind in ("tree", "snake"):
        values = sorted(r[f"{kind}_converged_s"] for r in convergence if r[f"{kind}_converged_s"] is not None)
        data[kind] = values
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                    label=f"{kind} ({len(values)} episodes)")
    if not data["tree"] and not data["snake"]:
        _empty(ax, "converged episodes")
    ax.set_xlabel("convergence time after start / disruption (s)")
    ax.set_ylabel("fraction of episodes")
    ax.set_title("Convergence time CDF")
    ax.grid(alpha=0.3)
    if data["tree"] or data["snake"]:
        ax.legend(loc="lower right")
    return _png(fig)


def _stretch_hist(stretch_hist: list[dict], data: dict) -> bytes:
    fig, ax = _figure(7, 4)
    bins = [(r["bin"], r["count"]) for r in stretch_hist]
    data["bins"] = bins
    if bins:
        ax.bar([b for b, _ in bins], [c for _, c in bins], width=STRETCH_BIN * 0.9, align="edge")
    else:
        _empty(ax, "delivered pings")
    ax.set_xlabel("stretch = path links / shortest-path links")
    ax.set_ylabel("pings")
    ax.set_title("Stretch of delivered pings")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def _delivery_over_time(timeline: list[dict], disruptions: list[dict], data: dict) -> bytes:
    fig, ax = _figure(8, 4)
    series: dict[tuple, list] = defaultdict(list)
    for r in timeline:
        series[(r["run_id"], r["mode"])].append((r["t_bin_s"], r["delivery_ratio"]))
    data["series"] = {f"{run}/{mode}": pts for (run, mode), pts in series.items()}
    for (run, mode), pts in sorted(series.items())[:12]:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{run} {mode}")
    marks = [(r["t_rel_s"], r["action"]) for r in disruptions]
    data["disruptions"] = marks
    for i, (t, action) in enumerate(marks[:50]):
        ax.axvline(t, color="red", linestyle="--", alpha=0.6, label="disruption" if i == 0 else None)
        ax.annotate(action, (t, 1.02), xycoords=("data", "axes fraction"), fontsize=7, color="red", rotation=45)
    if not series:
        _empty(ax, "pings")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("delivery ratio")
    ax.set_title("Ping delivery over time (disruptions dashed)", pad=20)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="lower left")
    return _png(fig)


def _overhead_by_class(overhead: list[dict], data: dict) -> bytes:
    fig, ax = _figure(8, 4)
    classes = sorted({r["link_class"] for r in overhead})
    types = sorted({r["frame_type"] for r in overhead})
    value = {(r["link_class"], r["frame_type"]): r["bytes_per_node_s"] for r in overhead}
    data["bytes_per_node_s"] = {f"{c}/{t}": v for (c, t), v in value.items()}
    width = 0.8 / max(1, len(types))
    for i, ftype in enumerate(types):
        ax.bar([j + i * width for j in range(len(classes))], [value.get((c, ftype), 0.0) for c in classes],
               width=width, label=ftype)
    if classes:
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(classes))], classes)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "frame_stats")
    ax.set_ylabel("bytes sent per node per second")
    ax.set_title("Control overhead by link class")
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def ab_plot_name(index: int, experiment: str) -> str:
    """File name of the A/B figure of the ``index``-th experiment (1-based, in document order)."""
    return f"ab_{index}_{re.sub(r'[^A-Za-z0-9_.-]+', '-', experiment).strip('-.')[:40] or 'experiment'}.png"


def _ab_figure(experiment: str, e: Mapping, data: dict) -> bytes:
    """Per metric with pairs: arm a's and arm b's values side by side (box plots), each seed's pair joined."""
    metrics = {name: m for name, m in e["metrics"].items() if m["n_pairs"]}
    data.update(experiment=experiment, a=e["a"], b=e["b"], metrics={
        name: {"pairs": m["pairs"], "diff": m["diff"], "ci": [m["ci_low"], m["ci_high"]],
               "significant": m["significant"], "better": m["better"], "censored": m.get("censored")}
        for name, m in metrics.items()})  # fmt: skip
    cols = min(4, max(1, len(metrics)))
    rows = max(1, math.ceil(len(metrics) / cols))
    fig = Figure(figsize=(3.2 * cols, 2.9 * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, m) in zip(flat, metrics.items()):
        a = [p[1] for p in m["pairs"]]
        b = [p[2] for p in m["pairs"]]
        ax.boxplot([a, b], positions=[0, 1], widths=0.5, showfliers=False)
        for _, va, vb in m["pairs"]:
            ax.plot([0, 1], [va, vb], color="grey", alpha=0.5, linewidth=0.8)
        ax.scatter([0] * len(a), a, s=12, color="tab:blue", zorder=3)
        ax.scatter([1] * len(b), b, s=12, color="tab:orange", zorder=3)
        ax.set_xticks([0, 1], ["a", "b"])
        ci = "" if m["ci_low"] is None else f" [{m['ci_low']:.3g}, {m['ci_high']:.3g}]"
        verdict = f"{m['better']} better" if m["better"] else "no significant difference"
        if m.get("n_censored"):
            verdict += f", {m['n_censored']} censored"
        ax.set_title(f"{name}\nb - a = {m['diff']:.3g}{ci}\n{verdict}", fontsize=7,
                     color="black" if not m["significant"] else "darkred")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    for ax in flat[len(metrics):]:
        ax.set_axis_off()
    if not metrics:
        _empty(flat[0], "paired seeds")
    fig.suptitle(f"A/B {experiment}: a = {e['a']}, b = {e['b']} ({e['seeds']} paired seeds)", fontsize=9)
    fig.tight_layout()
    return _png(fig)


def _censored_cell(m: Mapping) -> str:
    """How many pairs an arm never converged in, and in which arm: ``2 (b: 3, 4)``."""
    cens = m.get("censored") or {}
    named = "; ".join(f"{arm}: {', '.join(map(str, cens[arm]))}" for arm in ("a", "b") if cens.get(arm))
    return f"{m.get('n_censored', 0)}" + (f" ({named})" if named else "")


def _ab_rows(e: Mapping) -> list[dict]:
    def rng(s: Mapping) -> str:
        return "–" if s["p25"] is None else f"{s['p25']:.4g} – {s['p75']:.4g}"

    out = []
    for name, m in e["metrics"].items():
        out.append({
            "metric": name, "better when": m["better_when"], "pairs": m["n_pairs"],
            "censored": _censored_cell(m), "left out": m.get("n_dropped", 0),
            "a median": m["a"]["median"], "a p25 – p75": rng(m["a"]),
            "b median": m["b"]["median"], "b p25 – p75": rng(m["b"]),
            "b − a (mean)": m["diff"],
            "95% interval": "unbounded" if m["ci_low"] is None and m["diff"] is not None else
            (f"[{m['ci_low']:.4g}, {m['ci_high']:.4g}]" if m["ci_low"] is not None else None),
            "p": m["p_value"], "significant": "yes" if m["significant"] else "no", "better": m["better"],
        })  # fmt: skip
    return out


AB_COLUMNS = ["metric", "better when", "pairs", "censored", "left out", "a median", "a p25 – p75", "b median",
              "b p25 – p75", "b − a (mean)", "95% interval", "p", "significant", "better"]
AB_TEXT = ("Runs of arm a and arm b are paired by seed (same keys, delays and faults). Per metric: each arm's "
           "median and quartiles over the paired seeds; b − a is the mean of the per-seed differences, with a 95% "
           "interval from the paired sign-flip test (exact under no difference; unbounded below 6 pairs); "
           "significant = the interval excludes 0; better by the metric's direction. Reconvergence metrics are "
           "per fault kind: the worst episode of that kind in the run. pairs = the seeds the metric used; censored = "
           "those where an arm never converged (seeds named per arm): they count, that arm's time as the time it was "
           "watched, both arms' values capped there (restricted means, docs/variants.md); left out = seeds with no "
           "value for another reason.")


# --------------------------------------------------------------------------- tables


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _table(rows: list[dict], cols: list[str]) -> tuple[str, str]:
    """(markdown, html) of ``rows`` restricted to ``cols``."""
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    h = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"]
    for r in rows:
        cls = ' class="bad"' if r.get("ok") is False else ""
        h.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>")
    h.append("</table>")
    return "\n".join(md), "\n".join(h)


@dataclass(frozen=True)
class Plots:
    """The plots in ``PLOTS``: file name -> PNG, and file name -> the data drawn (for plots.json)."""

    png: dict[str, bytes]
    data: dict[str, dict]


def plots(inp: Mapping[str, list[dict]]) -> Plots:
    """The plots in ``PLOTS``, drawn from the inputs convergence, stretch_hist, timeline, disruptions and
    overhead (none of ``COMPARISON_INPUTS``; name -> rows: a ``gather`` of them; or
    ``vars(report_inputs)``)."""
    data: dict[str, dict] = {name: {} for name in PLOTS}
    png = {
        "convergence_cdf.png": _convergence_cdf(inp["convergence"], data["convergence_cdf.png"]),
        "stretch_hist.png": _stretch_hist(inp["stretch_hist"], data["stretch_hist.png"]),
        "delivery_over_time.png": _delivery_over_time(inp["timeline"], inp["disruptions"],
                                                      data["delivery_over_time.png"]),
        "overhead_by_class.png": _overhead_by_class(inp["overhead"], data["overhead_by_class.png"]),
    }
    return Plots(png, data)


def render(inp: ReportInputs, drawn: Plots | None = None) -> dict[str, bytes | str]:
    """File name -> content: report.md, report.html, plots.json and the PNGs in ``PLOTS`` (``drawn``: already drawn
    from these inputs by ``plots``; else drawn here)."""
    drawn = drawn or plots(vars(inp))
    data: dict[str, dict] = dict(drawn.data)
    files: dict[str, bytes | str] = dict(drawn.png)
    ab_plots = []
    for i, (exp, e) in enumerate(inp.ab.items(), start=1):
        name = ab_plot_name(i, exp)
        data[name] = {}
        files[name] = _ab_figure(exp, e, data[name])
        ab_plots.append((exp, e, name))
    files["plots.json"] = json.dumps(data, indent=1, default=str)
    ok = all(r["ok"] for r in inp.reconciliation)
    total = {k: sum(r[k] for r in inp.reconciliation) for k in ("lines", "parsed", "quarantined")}
    sections: list[tuple[str, str, list[dict], list[str]]] = [
        ("Runs", "", inp.runs, ["run_id", "backend", "variant", "topology", "n_nodes", "n_links", "class_mix", "clock",
                                "seed"]),
        ("Reconciliation", f"Every input line is parsed or quarantined: {'yes' if ok else 'NO'} "
                           f"({total['lines']} lines = {total['parsed']} parsed + {total['quarantined']} quarantined).",
         inp.reconciliation, ["run_id", "source", "file", "lines", "parsed", "quarantined", "ok"]),
        ("Quarantine by reason", "", inp.quarantine_by_reason, ["run_id", "source", "reason", "count"]),
        ("Quarantine examples", "", inp.quarantine_examples, ["file", "line_no", "reason", "message"]),
        ("Convergence", "Per episode: the run start and each disruptive action. `converged` as the in-process "
                        "observer measures it; `settled` = converged and stayed so until the next episode "
                        "(– = never).", inp.convergence,
         ["run_id", "episode", "action", "target", "t0_rel_s", "live_nodes", "components", "tree_converged_s",
          "snake_converged_s", "tree_settled_s", "snake_settled_s"]),
        ("Delivery per episode", "", inp.delivery_by_episode,
         ["run_id", "episode", "sent", "received", "delivery_ratio", "stretch_mean", "stretch_median", "stretch_p95",
          "rtt_median_ms"]),
        ("Delivery and stretch by class mix, hop distance and time since disruption", "", inp.delivery,
         ["run_id", "mode", "class_mix", "shortest_links", "since_bucket", "sent", "received", "delivery_ratio",
          "stretch_median", "stretch_max"]),
        ("Control overhead by link class (sent, mean over runs)", "", inp.overhead,
         ["link_class", "frame_type", "frames_per_node_s", "bytes_per_node_s"]),
        ("Churn", "", inp.churn, ["run_id", "nodes", "root_changes", "parent_changes"]),
        ("Run summary", "", inp.summary, list(schemas.RUN_SUMMARY_SCHEMA.fieldNames())),
    ]
    for by, rows in inp.compare.items():
        cols = [by, "runs"] + [c for c in (rows[0].keys() if rows else []) if c.endswith("_mean") or c.endswith("_max")]
        sections.append((f"Comparison by {by}", "", rows, cols))
    md = ["# snekbed analysis", "", f"{len(inp.runs)} run(s).", ""]
    body = [f"<h1>snekbed analysis</h1><p>{len(inp.runs)} run(s).</p>"]
    for png, title in zip(PLOTS, ("Convergence time CDF", "Stretch histogram", "Delivery over time",
                                  "Overhead by class")):
        md += [f"![{title}]({png})", ""]
        body.append(f'<figure><img src="{png}" alt="{title}"><figcaption>{title}</figcaption></figure>')
    for i, (title, text, rows, cols) in enumerate(sections):
        t_md, t_html = _table(rows, cols)
        md += [f"## {title}", "", text, "", t_md, ""] if text else [f"## {title}", "", t_md, ""]
        body.append(f"<h2>{html.escape(title)}</h2>" + (f"<p>{html.escape(text)}</p>" if text else "") + t_html)
        if i == 0 and ab_plots:  # the A/B result right after the runs: it is what such an analysis is for
            md += ["## A/B", "", AB_TEXT, ""]
            body.append(f"<h2>A/B</h2><p>{html.escape(AB_TEXT)}</p>")
            for exp, e, png in ab_plots:
                head = f"Experiment {exp}: arm a = {e['a']}, arm b = {e['b']}; {e['seeds']} paired seed(s)"
                if e["unpaired_seeds"]:
                    head += f" (seeds with one arm only, left out: {', '.join(map(str, e['unpaired_seeds']))})"
                t_md, t_html = _table(_ab_rows(e), AB_COLUMNS)
                md += [f"### A/B {exp}", "", head + ".", "", t_md, "", f"![A/B {exp}]({png})", ""]
                body.append(f"<h3>A/B {html.escape(exp)}</h3><p>{html.escape(head)}.</p>" + t_html
                            + f'<figure><img src="{png}" alt="A/B {html.escape(exp)}">'
                            f"<figcaption>A/B {html.escape(exp)}: a vs b per metric, each seed's pair joined"
                            "</figcaption></figure>")
    files["report.md"] = "\n".join(md)
    files["report.html"] = (
        "<!doctype html><html><head><meta charset='utf-8'><title>snekbed analysis</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}tr.bad{background:#fdd}img{max-width:100%}"
        "</style></head><body>" + "\n".join(body) + "</body></html>"
    )
    return files
