"""The report: report.md, report.html and PNG plots.

``collect_inputs`` reads the (small) result tables and aggregates what the
plots need in Spark (``gather``: a table's rows that the driver already holds are
only sorted there); ``plots`` (pipeline.report_plots) draws the plots and ``render``
turns all of it into file contents without touching the disk
(``pipeline.tables.write_files`` writes them). The report's words, its clock and
each table's and figure's caption, are pipeline.report_text's. With A/B runs, one
figure per experiment (``ab_<n>_<name>.png``) and an "A/B" section.
``plots.json`` lists the data behind every plot.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from contract.frames import CONTROL_FRAME_TYPE_NAMES
from pipeline import parallel, schemas, tables
from pipeline.jobs.compare import GROUPINGS
from pipeline.jobs.episodes import EPISODE_ACTIONS
from pipeline.report_mobility import mobility_figures, mobility_sections
from pipeline.report_plots import PLOTS, STRETCH_BIN, Plots, ab_figure, ab_plot_name, plots
from pipeline.report_text import (
    ALL_CONTROL, CLOCK_TEXT, FRAME_TYPE_WHAT, NO_PATH, RUN_CLOCK, TABLE_TEXT, TRAFFIC, comparison_text,
    figure_captions,
)  # fmt: skip

__all__ = ["ReportInputs", "gather", "collect_inputs", "plots", "render", "PLOTS", "Plots", "ab_plot_name"]


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
    #: runs whose nodes move (pipeline.jobs.mobility): per time bin, and per run; [] without any
    mobility_timeline: list[dict] = field(default_factory=list)
    mobility_runs: list[dict] = field(default_factory=list)


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
    "mobility_timeline": ("mobility_timeline", schemas.MOBILITY_TIMELINE_SCHEMA, ("run_id", "t_bin_s"), ()),
    "mobility_runs": ("mobility_runs", schemas.MOBILITY_RUNS_SCHEMA, ("run_id",), ()),
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


def _overhead(t: Reader) -> DataFrame:
    """Frames and bytes sent per node-second by link class and frame type, the mean over the runs with that class and
    type; and per link class its control types summed within each run, then averaged (frame_type ``ALL_CONTROL``;
    a run's types share its node-seconds on the class, so their rates add up)."""
    sent = t("overhead_by_class", schemas.OVERHEAD_CLASS_SCHEMA).where("direction = 'sent'")
    rates = ("frames_per_node_s", "bytes_per_node_s")
    by_type = sent.groupBy("link_class", "frame_type").agg(*(F.mean(c).alias(c) for c in rates))
    per_run = sent.where(F.col("frame_type").isin(*CONTROL_FRAME_TYPE_NAMES)).groupBy("run_id", "link_class").agg(
        *(F.sum(c).alias(c) for c in rates))
    total = per_run.groupBy("link_class").agg(*(F.mean(c).alias(c) for c in rates)).select(
        "link_class", F.lit(ALL_CONTROL).alias("frame_type"), *rates)
    return by_type.unionByName(total).orderBy("link_class", F.col("frame_type") == ALL_CONTROL, "frame_type")


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
    "overhead": _overhead,
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


# --------------------------------------------------------------------------- the A/B section


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


#: A column of a report table: a row's key, or (key, the header shown).
Column = str | tuple[str, str]
#: When an episode began, on the report's one clock.
T0 = ("t0_rel_s", f"t0 ({RUN_CLOCK}, s)")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _table(rows: list[dict], cols: list[Column]) -> tuple[str, str]:
    """(markdown, html) of ``rows`` restricted to ``cols``."""
    keys = [c if isinstance(c, str) else c[0] for c in cols]
    heads = [c if isinstance(c, str) else c[1] for c in cols]
    md = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c)) for c in keys) + " |" for r in rows]
    h = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in heads) + "</tr>"]
    for r in rows:
        cls = ' class="bad"' if r.get("ok") is False else ""
        h.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in keys) + "</tr>")
    h.append("</table>")
    return "\n".join(md), "\n".join(h)


@dataclass(frozen=True)
class Section:
    """A table of the report: its title, its caption (what one row is), its rows and columns."""

    title: str
    text: str
    rows: list[dict]
    cols: list[Column]


def _by_episode(inp: ReportInputs) -> list[dict]:
    """Delivery per episode, each row with its episode's action and t0 (from the convergence table)."""
    episodes = {(r["run_id"], r["episode"]): r for r in inp.convergence}
    return [{**r, **{k: episodes.get((r["run_id"], r["episode"]), {}).get(k) for k in ("action", "t0_rel_s")}}
            for r in inp.delivery_by_episode]  # fmt: skip


def _sections(inp: ReportInputs) -> list[Section]:
    """The report's tables, in order (the A/B section goes after the first)."""
    ok = all(r["ok"] for r in inp.reconciliation)
    total = {k: sum(r[k] for r in inp.reconciliation) for k in ("lines", "parsed", "quarantined")}
    adds_up = (f"Every input line is parsed or quarantined: {'yes' if ok else 'NO'} ({total['lines']} lines = "
               f"{total['parsed']} parsed + {total['quarantined']} quarantined). ")
    delivery = [{**r, "class_mix": NO_PATH} if not r["class_mix"] and r["shortest_links"] is None else r
                for r in inp.delivery]  # fmt: skip
    overhead = [{**r, "what": FRAME_TYPE_WHAT.get(r["frame_type"], "")} for r in inp.overhead]
    rates = ["frames_per_node_s", "bytes_per_node_s"]
    out = [
        Section("Runs", TABLE_TEXT["Runs"], inp.runs,
                ["run_id", "backend", "variant", "topology", "n_nodes", "n_links", "class_mix", "clock", "seed"]),
        Section("Reconciliation", adds_up + TABLE_TEXT["Reconciliation"], inp.reconciliation,
                ["run_id", "source", "file", "lines", "parsed", "quarantined", "ok"]),
        Section("Quarantine by reason", TABLE_TEXT["Quarantine by reason"], inp.quarantine_by_reason,
                ["run_id", "source", "reason", "count"]),
        Section("Quarantine examples", TABLE_TEXT["Quarantine examples"], inp.quarantine_examples,
                ["file", "line_no", "reason", "message"]),
        Section("Convergence", TABLE_TEXT["Convergence"], inp.convergence,
                ["run_id", "episode", "action", "target", T0, "live_nodes", "components", "tree_converged_s",
                 "snake_converged_s", "tree_settled_s", "snake_settled_s"]),
        Section("Delivery per episode", TABLE_TEXT["Delivery per episode"], _by_episode(inp),
                ["run_id", "episode", "action", T0, "sent", "received", "delivery_ratio", "stretch_mean",
                 "stretch_median", "stretch_p95", "rtt_median_ms"]),
        Section("Delivery and stretch by class mix, hop distance and time since disruption",
                TABLE_TEXT["Delivery and stretch by class mix, hop distance and time since disruption"], delivery,
                ["run_id", "mode", "class_mix", "shortest_links", "since_bucket", "sent", "received",
                 "delivery_ratio", "stretch_median", "stretch_max"]),
        Section("Control overhead by link class and frame type",
                TABLE_TEXT["Control overhead by link class and frame type"],
                [r for r in overhead if r["frame_type"] != TRAFFIC], ["link_class", "frame_type", *rates, "what"]),
        Section("Ping traffic by link class", TABLE_TEXT["Ping traffic by link class"],
                [r for r in overhead if r["frame_type"] == TRAFFIC], ["link_class", "frame_type", *rates, "what"]),
        Section("Churn", TABLE_TEXT["Churn"], inp.churn, ["run_id", "nodes", "root_changes", "parent_changes"]),
        Section("Run summary", TABLE_TEXT["Run summary"], inp.summary, list(schemas.RUN_SUMMARY_SCHEMA.fieldNames())),
    ]
    for by, rows in inp.compare.items():
        cols = [by, "runs"] + [c for c in (rows[0].keys() if rows else []) if c.endswith("_mean") or c.endswith("_max")]
        out.append(Section(f"Comparison by {by}", comparison_text(by), rows, cols))
    out += [Section(*sec) for sec in mobility_sections(inp.mobility_timeline, inp.mobility_runs)]
    return out


def _ab_section(inp: ReportInputs, ab_plots: list[tuple[str, Mapping, str]]) -> tuple[list[str], list[str]]:
    """(markdown lines, html parts) of the A/B section."""
    md = ["## A/B", "", AB_TEXT, ""]
    body = [f"<h2>A/B</h2><p>{html.escape(AB_TEXT)}</p>"]
    for exp, e, png in ab_plots:
        head = f"Experiment {exp}: arm a = {e['a']}, arm b = {e['b']}; {e['seeds']} paired seed(s)"
        if e["unpaired_seeds"]:
            head += f" (seeds with one arm only, left out: {', '.join(map(str, e['unpaired_seeds']))})"
        t_md, t_html = _table(_ab_rows(e), AB_COLUMNS)
        caption = (f"A/B {exp}: per metric, arm a's and arm b's values over the seeds (box: quartiles), each seed's "
                   "pair joined by a line; a red panel title is a significant difference")
        md += [f"### A/B {exp}", "", head + ".", "", t_md, "", f"![A/B {exp}]({png})", "", f"*{caption}.*", ""]
        body.append(f"<h3>A/B {html.escape(exp)}</h3><p>{html.escape(head)}.</p>" + t_html
                    + f'<figure><img src="{png}" alt="A/B {html.escape(exp)}">'
                    f"<figcaption>{html.escape(caption)}.</figcaption></figure>")
    return md, body


#: Plot file -> the title of its figure in the report (the caption says what the title does not).
FIGURE_TITLES = dict(zip(PLOTS, ("Convergence time CDF", "Stretch histogram", "Delivery over time",
                                 "Control overhead and ping traffic by link class")))


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
        files[name] = ab_figure(exp, e, data[name])
        ab_plots.append((exp, e, name))
    files["plots.json"] = json.dumps(data, indent=1, default=str)
    md = ["# snekbed analysis", "", f"{len(inp.runs)} run(s).", "", CLOCK_TEXT, ""]
    body = [f"<h1>snekbed analysis</h1><p>{len(inp.runs)} run(s).</p><p>{html.escape(CLOCK_TEXT)}</p>"]
    figures = [(png, FIGURE_TITLES[png], caption) for png, caption in figure_captions(vars(inp)).items()]
    figures += [fig for fig in mobility_figures(inp.mobility_timeline, inp.mobility_runs) if fig[0] in files]
    for png, title, caption in figures:
        md += [f"![{title}]({png})", "", f"*{title}: {caption}*", ""]
        body.append(f'<figure><img src="{png}" alt="{title}"><figcaption><b>{html.escape(title)}</b>: '
                    f"{html.escape(caption)}</figcaption></figure>")
    for i, sec in enumerate(_sections(inp)):
        t_md, t_html = _table(sec.rows, sec.cols)
        md += [f"## {sec.title}", "", sec.text, "", t_md, ""]
        body.append(f"<h2>{html.escape(sec.title)}</h2><p>{html.escape(sec.text)}</p>" + t_html)
        if i == 0 and ab_plots:  # the A/B result right after the runs: it is what such an analysis is for
            ab_md, ab_body = _ab_section(inp, ab_plots)
            md += ab_md
            body += ab_body
    files["report.md"] = "\n".join(md)
    files["report.html"] = (
        "<!doctype html><html><head><meta charset='utf-8'><title>snekbed analysis</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}tr.bad{background:#fdd}img{max-width:100%}"
        "figcaption{font-size:13px;color:#333;max-width:60em}"
        "</style></head><body>" + "\n".join(body) + "</body></html>"
    )
    return files
