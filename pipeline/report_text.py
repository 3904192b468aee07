"""The report's words: the clock its times are on, each table's caption (what one row is, and the rows that need a
word more), each figure's caption (what its title does not say), and what each frame type is.

Plain data and small functions of the report's inputs (rows as dicts); no Spark, no matplotlib. The captions that
count things (episodes, pings) count rows only, so the report reads the same however the analysis ran.
"""

from __future__ import annotations

from collections.abc import Mapping

from contract.frames import CONTROL_FRAME_TYPE_NAMES

__all__ = [
    "RUN_CLOCK", "RUN_CLOCK_AXIS", "CLOCK_TEXT", "TRAFFIC", "ALL_CONTROL", "NO_PATH", "FRAME_TYPE_WHAT",
    "TABLE_TEXT", "figure_captions", "is_control",
]  # fmt: skip

#: The one clock of the report's times: its name, as the tables' headers and the plots' axes spell it.
RUN_CLOCK = "run clock"
#: The x axis of a plot over time.
RUN_CLOCK_AXIS = "time on the run clock (s since the run's first node_started)"
#: The report's paragraph on its clock, right under its title.
CLOCK_TEXT = (
    "Times: every time in this report (when an episode began, the faults marked on the plots, the delivery "
    "timeline) is on the run clock: seconds since the run's first node_started event, the same zero for every "
    "table and plot. Durations (converged, settled, time since a fault) count from the start of their episode. "
    "snekbed chaos prints its steps' at_s on another clock, the scenario clock, which starts once the nodes are "
    "up (its --json says so: time_origin = {clock: scenario, mono_s}); a fault at at_s is at "
    "at_s + time_origin.mono_s - t0_s of episode 0 (the convergence table) on the run clock."
)

#: The frame type of user traffic: the pings and their pongs (PROTOCOL.md §8), apart from the control overhead.
TRAFFIC = "traffic"
#: The row of every control frame type of a link class, summed.
ALL_CONTROL = "all control"
#: The class mix shown for a ping that had no path when it was sent (no link classes, no shortest path).
NO_PATH = "(no path)"

#: Frame type -> what it is, for the overhead tables' rows (PROTOCOL.md sections).
FRAME_TYPE_WHAT: dict[str, str] = {
    "keepalive": "sent on a peering nothing else was written to for 3 s, to keep it alive (§3.5)",
    "tree_announcement": "a root's announcement: sent on each new peering and passed on down the tree when it "
                         "changes (§5.2, §5.9)",
    "bootstrap": "a node's SNEK bootstrap towards its own key, every bootstrap interval and after a change (§6.2)",
    "wakeup_broadcast": "a root's wakeup broadcast, flooded every 60 s and sent to a newly heard peer (§6.8)",
    "legacy_bootstrap": "the older SNEK variant's bootstrap (§7.4)",
    "legacy_bootstrap_ack": "the older SNEK variant's bootstrap acknowledgement (§7.4)",
    "legacy_setup": "the older SNEK variant's path setup (§7.4)",
    "legacy_teardown": "the older SNEK variant's path teardown (§7.4)",
    ALL_CONTROL: "the control frame types above, summed: this link class's whole control overhead",
    TRAFFIC: "the pings and their pongs (§8): user traffic the network carries, not overhead",
}


def is_control(frame_type: str) -> bool:
    """A frame type of the control overhead (every type but traffic)."""
    return frame_type in CONTROL_FRAME_TYPE_NAMES


#: Table title -> its caption: what one row is, and what its special rows and cells mean.
TABLE_TEXT: dict[str, str] = {
    "Runs": "One row per run analyzed, from its meta.json: the backend it ran on, the protocol variant, the "
            "topology, its nodes and links, the link classes it has, its clock (virtual: in process; real: Docker) "
            "and its seed.",
    "Reconciliation": "One row per input file: its lines, and how many were parsed and how many quarantined. ok: "
                      "they add up (a red row does not: lines were lost or counted twice).",
    "Quarantine by reason": "One row per run, input (events, actions, pings) and reason: the lines set aside, not "
                            "analyzed. No row: every line was valid.",
    "Quarantine examples": "The first 20 quarantined lines (by run, file and line): where each is, why it was set "
                           "aside and the parser's message. No row: none was quarantined.",
    "Convergence": "One row per episode: episode 0 is the run start, each later one opens with a fault (action, "
                   "target). t0: when it began, on the run clock. live_nodes, components: the network it had to "
                   "converge to. *_converged_s: seconds from t0 until every live node had its component's root "
                   "(tree) and also its expected descending neighbour (snake), as the in-process observer "
                   "measures; *_settled_s: converged and stayed so until the next episode. –: never within the "
                   "episode, typically because the next fault came first (a flap 1 s apart leaves no time).",
    "Delivery per episode": "One row per run and episode (the Convergence table's, with its action and t0 on the "
                            "run clock): the pings sent in it, those answered, their delivery ratio, the stretch of "
                            "the delivered ones (path links / shortest-path links; 1 is a shortest path) and their "
                            "median round trip.",
    "Delivery and stretch by class mix, hop distance and time since disruption": (
        "One row per run, ping mode (snek: along the virtual snake; tree: along the spanning tree), class mix (the "
        "link classes on the shortest path when the ping was sent), shortest-path length in links, and time since "
        f"the last fault (or the run start). Class mix {NO_PATH} and shortest_links –: there was no path to the "
        "target when the ping was sent (it was down, or cut off in another component), so no stretch either."),
    "Control overhead by link class and frame type": (
        "One row per link class and control frame type (what: the frame), then the class's total (all control): "
        "frames and bytes sent per node per second of the time the nodes reported (frame_stats), the mean over the "
        "runs that have the class. Ping traffic is not control overhead: it is in the next table."),
    "Ping traffic by link class": (
        "One row per link class: the traffic frames sent per node per second, the mean over the runs that have the "
        "class. They are the measurement pings and their pongs (user traffic), kept apart from the overhead."),
    "Churn": "One row per run: the nodes that changed their root or parent at least once, and how many root and "
             "parent changes they made in all, the run start's included.",
    "Run summary": "One row per run, its headline numbers: start_*: convergence of the run start; disruption_*_max_s: "
                   "the slowest re-convergence after a fault; episodes_unconverged: episodes whose snake never "
                   "converged; delivery over all its pings; control_*: control frames only (no ping traffic), per "
                   "node-second; changes per node.",
}


def comparison_text(by: str) -> str:
    """The caption of the table comparing runs by ``by``."""
    return (f"One row per {by}: how many runs have it, and over them the mean of each run-summary number (_mean) and, "
            "for the convergence times and the overhead, the worst (_max).")


def _converged(rows: list[dict], kind: str) -> tuple[int, int]:
    done = sum(r[f"{kind}_converged_s"] is not None for r in rows)
    return done, len(rows) - done


def _bin_width(timeline: list[dict]) -> float | None:
    """The delivery timeline's bin width (``snekbed analyze --timeline-bin``): the smallest step between two bins of a
    series; None when no series has two."""
    starts: dict[tuple, list[float]] = {}
    for r in timeline:
        starts.setdefault((r["run_id"], r["mode"]), []).append(r["t_bin_s"])
    steps = [b - a for ts in starts.values() for a, b in zip(sorted(ts), sorted(ts)[1:]) if b > a]
    return min(steps) if steps else None


def figure_captions(inp: Mapping[str, list[dict]]) -> dict[str, str]:
    """Plot file -> its caption, from the report's inputs (``vars(ReportInputs)``): what each plot's title does not
    say (what one point or bar is, its clock, what is left out, counts)."""
    conv = inp["convergence"]
    runs = len({r["run_id"] for r in conv})
    tree, tree_never = _converged(conv, "tree")
    snake, snake_never = _converged(conv, "snake")
    stretch = sum(r["count"] for r in inp["stretch_hist"])
    faults = len(inp["disruptions"])
    series = len({(r["run_id"], r["mode"]) for r in inp["timeline"]})
    bin_s = _bin_width(inp["timeline"])
    width = "" if bin_s is None else f" {bin_s:.6g} s"
    control = sorted({r["frame_type"] for r in inp["overhead"] if is_control(r["frame_type"])})
    return {
        "convergence_cdf.png": (
            f"Each step up is one episode of {len(conv)} from {runs} run(s) (the run start or a fault): the seconds "
            f"from its start until the tree (every live node with its component's root: {tree} episodes) and the "
            f"snake (also every descending neighbour right: {snake}) converged. Episodes that never converged are "
            f"not drawn: {tree_never} for the tree, {snake_never} for the snake."),
        "stretch_hist.png": (
            f"{stretch} delivered pings with a known shortest path, in bins of 0.1: path links / shortest-path links, "
            "1 being a shortest path. Pings that were lost, or had no path when sent, have no stretch."),
        "delivery_over_time.png": (
            f"Share of the pings answered, per{width} bin of send time on the run clock (s since each run's first "
            f"node_started), one line per run and ping mode ({series} drawn, at most 12). The dashed red lines are "
            f"the {faults} fault(s) that opened an episode, each named above the plot (labels stacked so that none "
            "overlaps another)."),
        "overhead_by_class.png": (
            "Left: control bytes sent per node per second, by link class and control frame type ("
            + (", ".join(control) or "none") + "), the mean over the runs with that class. Right, on its own scale: "
            "the ping traffic (pings and pongs) on each class, user traffic rather than overhead."),
    }
