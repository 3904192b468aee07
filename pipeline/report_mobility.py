"""The report's tables of runs whose nodes move (pipeline.jobs.mobility; docs/pipeline.md, "Mobility").

Two tables, shown only when some run of the analysis has a ``mobility.jsonl``: delivery among connected pairs
against time (with the radio links' churn in the same bins) and against the nodes' speed (one row per run, the
slowest first). :func:`mobility_sections` gives them as (title, caption, rows, columns) for pipeline.report.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MOBILITY_TEXT", "mobility_sections"]

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
        "radio link changes a second, and delivery among connected pairs; bad lines: mobility.jsonl lines that "
        "broke the contract, left out."),
}

_TIMELINE_COLS = ["run_id", ("t_bin_s", "t (run clock, s)"), "link_ups", "link_downs", "radio_links",
                  "connected_sent", "connected_received", "connected_delivery", "disconnected_sent",
                  "disconnected_received"]
_RUNS_COLS = ["run_id", "nodes", "moved_s", "mean_speed_mps", "changes_per_s", "link_ups", "link_downs",
              "connected_sent", "connected_received", "connected_delivery", "disconnected_sent", "bad_lines"]


def mobility_sections(timeline: list[dict], runs: list[dict]) -> list[tuple[str, str, list[dict], list[Any]]]:
    """(title, caption, rows, columns) of each mobility table; none when no run's nodes move."""
    if not runs and not timeline:
        return []
    by_speed = sorted(runs, key=lambda r: (r.get("mean_speed_mps") is None, r.get("mean_speed_mps") or 0.0,
                                           r["run_id"]))
    over_time, against_speed = MOBILITY_TEXT
    return [(over_time, MOBILITY_TEXT[over_time], timeline, _TIMELINE_COLS),
            (against_speed, MOBILITY_TEXT[against_speed], by_speed, _RUNS_COLS)]
