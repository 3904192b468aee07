"""The report's tables and plots of runs whose nodes move (pipeline.jobs.mobility; docs/pipeline.md, "Mobility").

Three tables, shown only when some run of the analysis has a ``mobility.jsonl``: delivery among connected pairs
against time (with the radio links' churn in the same bins) and against the nodes' speed (one row per run, the
slowest first), and the convergence of its radio episodes (each instant with a radio link change opens one: how many
converged before the next change, and how fast; one row per run, the slowest first). :func:`mobility_sections`
gives them as (title, caption, rows, columns) for pipeline.report.

Two plots, under the same condition (``MOBILITY_PLOTS``, drawn by :func:`mobility_plots` on a matplotlib Agg canvas,
embedded with :func:`mobility_figures`' titles and captions): delivery among connected pairs against time, a line a
run, over the radio link changes a bin; and delivery among connected pairs, stretch and control bytes per node-second
against the mean speed, a point a run.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure

from pipeline.report_text import RUN_CLOCK_AXIS

__all__ = ["MOBILITY_TEXT", "MOBILITY_PLOTS", "mobility_sections", "mobility_plots", "mobility_figures"]

MOBILITY_PLOTS = ("mobility_over_time.png", "mobility_against_speed.png")
#: runs drawn on the plot over time (the tables have them all)
MAX_SERIES = 12

MOBILITY_TEXT = {
    "Mobility: radio links and delivery over time": (
        "One row per run whose nodes move and time bin (s since the run's first node_started, the run clock) with a "
        "radio link change or a ping: radio links that came up (after the start) and went down in the bin, the "
        "radio links up at its end, and the pings sent in it whose pair was connected when the ping was recorded "
        "(a path in the live graph, fixed and radio links: pings.jsonl shortest_links not null), received and their "
        "ratio; pings between nodes in different components are counted apart (disconnected)."),
    "Mobility: delivery against speed": (
        "One row per run whose nodes move, the slowest first: the nodes placed, the time from the first to the last "
        "position line, their mean speed (each node's path between its position lines over that time, averaged), "
        "radio link changes a second, delivery among connected pairs, the stretch of the delivered pings with a "
        "known shortest path (path links over shortest-path links: mean, median), and the control frames and bytes "
        "sent per node-second of the time the nodes reported (frame_stats); bad lines: mobility.jsonl lines that "
        "broke the contract, left out."),
    "Mobility: convergence between radio link changes": (
        "One row per run whose nodes move, the slowest first: its radio episodes (every instant, a mobility tick, "
        "with a radio link change the network made opens one, action radio in the Convergence table, on the graph "
        "of the links up then), the share of them whose tree (every live node with its component's root) and snake "
        "(ordered too) converged before the next episode began (one cut short by the next change is counted as not "
        "converged: at speed, the honest measure of keeping up), and the median time to converge of those that did. "
        "Radio episodes are not faults: they have no reconv_* column of their own in the A/B tables."),
}

_TIMELINE_COLS = ["run_id", ("t_bin_s", "t (run clock, s)"), "link_ups", "link_downs", "radio_links",
                  "connected_sent", "connected_received", "connected_delivery", "disconnected_sent",
                  "disconnected_received"]
_RUNS_COLS = ["run_id", "nodes", "moved_s", "mean_speed_mps", "changes_per_s", "link_ups", "link_downs",
              "connected_sent", "connected_received", "connected_delivery", "disconnected_sent", "stretch_mean",
              "stretch_median", "control_frames_per_node_s", "control_bytes_per_node_s", "bad_lines"]
_RADIO_COLS = ["run_id", "mean_speed_mps", "changes_per_s", "radio_episodes", "radio_tree_converged_share",
               "radio_snake_converged_share", "radio_tree_median_s", "radio_snake_median_s"]


def mobility_sections(timeline: list[dict], runs: list[dict]) -> list[tuple[str, str, list[dict], list[Any]]]:
    """(title, caption, rows, columns) of each mobility table; none when no run's nodes move."""
    if not runs and not timeline:
        return []
    by_speed = _by_speed(runs)
    over_time, against_speed, radio = MOBILITY_TEXT
    return [(over_time, MOBILITY_TEXT[over_time], timeline, _TIMELINE_COLS),
            (against_speed, MOBILITY_TEXT[against_speed], by_speed, _RUNS_COLS),
            (radio, MOBILITY_TEXT[radio], by_speed, _RADIO_COLS)]


def _by_speed(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (r.get("mean_speed_mps") is None, r.get("mean_speed_mps") or 0.0, r["run_id"]))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _none(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)


def _over_time(timeline: list[dict], data: dict) -> bytes:
    fig = Figure(figsize=(8, 5.5))
    ax, churn = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    delivery: dict[str, list] = defaultdict(list)
    changes: dict[str, list] = defaultdict(list)
    for r in timeline:
        changes[r["run_id"]].append((r["t_bin_s"], r["link_ups"] + r["link_downs"]))
        if r["connected_delivery"] is not None:
            delivery[r["run_id"]].append((r["t_bin_s"], r["connected_delivery"]))
    data.update(clock="run", delivery=dict(delivery), link_changes=dict(changes))
    for i, run in enumerate(sorted(changes)[:MAX_SERIES]):
        pts = delivery.get(run, [])
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=run)[0]
        churn.step([p[0] for p in changes[run]], [p[1] for p in changes[run]], where="post", color=line.get_color())
    if not delivery:
        _none(ax, "pings between connected pairs")
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("delivery among\nconnected pairs")
    ax.set_title("Delivery among connected pairs and radio link changes over time")
    ax.grid(alpha=0.3)
    if delivery:
        ax.legend(fontsize=7, loc="lower left")
    churn.set_ylabel("radio link changes\n(ups + downs) a bin")
    churn.set_xlabel(RUN_CLOCK_AXIS)
    churn.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


#: the panels against speed: column of mobility_runs, y label, what a panel without a point lacks
SPEED_PANELS = (("connected_delivery", "delivery among connected pairs", "connected pairs' pings"),
                ("stretch_mean", "mean stretch of delivered pings", "stretch"),
                ("control_bytes_per_node_s", "control bytes sent per node-second", "control overhead"))


def _against_speed(runs: list[dict], data: dict) -> bytes:
    fig = Figure(figsize=(11, 3.6))
    axes = fig.subplots(1, len(SPEED_PANELS))
    for ax, (col, label, lacking) in zip(axes, SPEED_PANELS):
        pts = [(r["mean_speed_mps"], r[col], r["run_id"]) for r in _by_speed(runs)
               if r.get("mean_speed_mps") is not None and r.get(col) is not None]  # fmt: skip
        data[col] = pts
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18)
        else:
            _none(ax, lacking)
        if col == "connected_delivery":
            ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("mean speed (m/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle("Delivery, stretch and control overhead against the nodes' mean speed (a point a run)", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def mobility_plots(timeline: list[dict], runs: list[dict]) -> tuple[dict[str, bytes], dict[str, dict]]:
    """(file name -> PNG, file name -> the data drawn) of ``MOBILITY_PLOTS``; both empty when no run's nodes move."""
    if not runs and not timeline:
        return {}, {}
    data: dict[str, dict] = {name: {} for name in MOBILITY_PLOTS}
    over_time, against_speed = MOBILITY_PLOTS
    png = {over_time: _over_time(timeline, data[over_time]), against_speed: _against_speed(runs, data[against_speed])}
    return png, data


def mobility_figures(timeline: list[dict], runs: list[dict]) -> list[tuple[str, str, str]]:
    """(file, title, caption) of each plot of ``mobility_plots``, for the report; none when no run's nodes move."""
    if not runs and not timeline:
        return []
    drawn = len({r["run_id"] for r in timeline})
    over_time, against_speed = MOBILITY_PLOTS
    return [
        (over_time, "Mobility: delivery among connected pairs over time", (
            "Top: the share of the pings answered among those whose pair the live graph connected when sent, per "
            f"bin of send time on the run clock, a line a run ({min(drawn, MAX_SERIES)} of {drawn} drawn). Bottom: "
            "the radio links that came up or went down in each bin (the start's links left out), same colours.")),
        (against_speed, "Mobility: delivery, stretch and overhead against speed", (
            f"One point per run whose nodes move ({len(runs)}), at its nodes' mean speed: delivery among connected "
            "pairs; the mean stretch of its delivered pings (path links / shortest-path links); the control bytes "
            "its nodes sent per node-second of reported time. A run without a value is not drawn on that panel.")),
    ]
