"""The report's plots (matplotlib Agg canvas, no pyplot state): convergence time CDF, stretch histogram, delivery over
time with the faults marked, control overhead by link class and frame type with the ping traffic apart; with A/B
runs, one figure per experiment; with runs whose nodes move, the two mobility plots (pipeline.report_mobility).
``plots`` draws them and returns the PNGs and, for ``plots.json``, the data behind
each.

The faults on the delivery plot are named in a strip between the plot and its title, in as many lanes as it takes
for no two names to overlap (``fault_lanes``: each label goes to the lowest lane where it clears the labels already
there, by its extent as matplotlib renders it). That figure is laid out in inches and saved uncropped, so the boxes
``plots.json`` gives for its title, axes and labels (``layout``, PNG pixels from the top left) are where they are
in the PNG.
"""

from __future__ import annotations

import io as _bytes_io
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipeline.report_mobility import mobility_plots
from pipeline.report_text import RUN_CLOCK_AXIS, TRAFFIC, is_control

__all__ = ["PLOTS", "STRETCH_BIN", "Plots", "plots", "ab_plot_name", "ab_figure", "fault_lanes"]

PLOTS = ("convergence_cdf.png", "stretch_hist.png", "delivery_over_time.png", "overhead_by_class.png")
STRETCH_BIN = 0.1
DPI = 100
#: faults named on the delivery plot (every one is in plots.json)
MAX_FAULT_LABELS = 50
FAULT_FONT = 7
#: the delivery plot's layout, in inches: margins, the plot's height, one lane of fault labels, the title's band
_LEFT, _RIGHT, _BOTTOM, _PLOT_H, _GAP, _LANE_H, _TITLE_H, _WIDTH = 0.75, 0.25, 0.55, 3.0, 0.06, 0.15, 0.34, 8.0
#: pixels between two labels of a lane, and from a label to its line (points)
_LABEL_GAP_PX, _LABEL_OFFSET_PT = 4.0, 2.0


@dataclass(frozen=True)
class Plots:
    """The plots in ``PLOTS``: file name -> PNG, and file name -> the data drawn (for plots.json)."""

    png: dict[str, bytes]
    data: dict[str, dict]


def _figure(width: float, height: float):
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _png(fig: Figure, tight: bool = True) -> bytes:
    buf = _bytes_io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, **({"bbox_inches": "tight"} if tight else {}))
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
    ax.set_xlabel("seconds from the episode's start (run start or fault) to convergence")
    ax.set_ylabel("fraction of converged episodes")
    ax.set_title("Convergence time CDF")
    ax.grid(alpha=0.3)
    if data["tree"] or data["snake"]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the plot: it hides no step
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


def fault_lanes(spans: Sequence[tuple[float, float]], gap: float) -> list[int]:
    """The lane of each label from its horizontal extent ``(left, right)`` (pixels), in the order given: the lowest
    lane whose labels all end at least ``gap`` before this one begins (each lane remembers its rightmost end), so no
    two labels of a lane overlap."""
    ends: list[float] = []
    lanes = []
    for left, right in spans:
        lane = next((i for i, end in enumerate(ends) if left >= end + gap), len(ends))
        if lane == len(ends):
            ends.append(right)
        else:
            ends[lane] = max(ends[lane], right)
        lanes.append(lane)
    return lanes


def _x_range(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return 0.0, 1.0
    lo, hi = min(xs), max(xs)
    pad = 0.03 * (hi - lo) if hi > lo else 1.0
    return lo - pad, hi + pad


def _box(extent, height: float) -> list[float]:
    """A display box (origin bottom left) as PNG pixels from the top left: [x0, y0, x1, y1], rounded to 0.01."""
    return [round(extent.x0, 2), round(height - extent.y1, 2), round(extent.x1, 2), round(height - extent.y0, 2)]


def _label_faults(fig: Figure, ax, strip, marks: list[tuple[float, str]]) -> list:
    """Name each fault in the strip above ``ax`` without overlaps; size the figure to the lanes it takes. Returns
    [(annotation, t, lane)]."""
    renderer = fig.canvas.get_renderer()
    offset_px = _LABEL_OFFSET_PT * DPI / 72
    right_edge = _WIDTH * DPI - 2  # the figure's right edge, less a margin
    labels, spans = [], []
    for t, action in sorted(marks, key=lambda m: m[0]):
        text = strip.annotate(action, (t, 0.5), xytext=(_LABEL_OFFSET_PT, 0), textcoords="offset points",
                              ha="left", va="center", fontsize=FAULT_FONT, color="red", annotation_clip=False,
                              bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none"}, zorder=3)
        width = text.get_window_extent(renderer).width
        x = ax.transData.transform((t, 0))[0]
        if x + offset_px + width > right_edge:  # it would leave the figure: its name ends at its line instead
            text.set_horizontalalignment("right")
            text.set_position((-_LABEL_OFFSET_PT, 0))
            spans.append((x - offset_px - width, x - offset_px))
        else:
            spans.append((x + offset_px, x + offset_px + width))
        labels.append((text, t))
    lanes = fault_lanes(spans, _LABEL_GAP_PX)
    n = max(lanes, default=0) + 1
    strip_h = n * _LANE_H
    height = _BOTTOM + _PLOT_H + _GAP + strip_h + _TITLE_H
    fig.set_size_inches(_WIDTH, height)
    width_frac = (_WIDTH - _LEFT - _RIGHT) / _WIDTH
    ax.set_position((_LEFT / _WIDTH, _BOTTOM / height, width_frac, _PLOT_H / height))
    strip.set_position((_LEFT / _WIDTH, (_BOTTOM + _PLOT_H + _GAP) / height, width_frac, strip_h / height))
    strip.set_ylim(0, n)
    out = []
    for (text, t), lane in zip(labels, lanes):
        text.xy = (t, lane + 0.5)
        strip.plot([t, t], [0, lane + 0.5], color="red", linestyle="--", alpha=0.6, linewidth=1, clip_on=False)
        out.append((text, t, lane))
    return out


def _delivery_over_time(timeline: list[dict], disruptions: list[dict], data: dict) -> bytes:
    fig = Figure(figsize=(_WIDTH, 5), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((_LEFT / _WIDTH, 0.1, 1 - (_LEFT + _RIGHT) / _WIDTH, 0.6))
    strip = fig.add_axes((_LEFT / _WIDTH, 0.75, 1 - (_LEFT + _RIGHT) / _WIDTH, 0.1), sharex=ax)
    series: dict[tuple, list] = defaultdict(list)
    for r in timeline:
        series[(r["run_id"], r["mode"])].append((r["t_bin_s"], r["delivery_ratio"]))
    data["series"] = {f"{run}/{mode}": pts for (run, mode), pts in series.items()}
    data["clock"] = "run"  # x: seconds since the run's first node_started, the faults' too
    for (run, mode), pts in sorted(series.items())[:12]:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{run} {mode}")
    marks = [(r["t_rel_s"], r["action"]) for r in disruptions]
    data["disruptions"] = marks
    for i, (t, _) in enumerate(marks[:MAX_FAULT_LABELS]):
        ax.axvline(t, color="red", linestyle="--", alpha=0.6, label="fault" if i == 0 else None)
    if not series:
        _empty(ax, "pings")
    ax.set_xlim(*_x_range([p[0] for pts in series.values() for p in pts] + [t for t, _ in marks]))
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel(RUN_CLOCK_AXIS)
    ax.set_ylabel("delivery ratio")
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="lower left")
    strip.set_axis_off()
    labelled = _label_faults(fig, ax, strip, marks[:MAX_FAULT_LABELS])
    title = strip.set_title("Ping delivery over time", pad=6)
    fig.canvas.draw()
    renderer, height = fig.canvas.get_renderer(), fig.bbox.height
    data["layout"] = {
        "size_px": [round(fig.bbox.width, 2), round(height, 2)],
        "title": _box(title.get_window_extent(renderer), height),
        "axes": _box(ax.get_window_extent(renderer), height), "x_label": ax.get_xlabel(),
        "labels": [{"t": t, "action": text.get_text(), "lane": lane,
                    "x_px": round(float(ax.transData.transform((t, 0))[0]), 2),
                    "box": _box(text.get_window_extent(renderer), height)} for text, t, lane in labelled],
    }  # fmt: skip
    return _png(fig, tight=False)


def _bars(ax, classes: list[str], types: list[str], value: Mapping[tuple[str, str], float], **kw) -> None:
    width = 0.8 / max(1, len(types))
    for i, ftype in enumerate(types):
        ax.bar([j + i * width for j in range(len(classes))], [value.get((c, ftype), 0.0) for c in classes],
               width=width, label=ftype, **kw)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(classes))], classes)
    ax.grid(alpha=0.3, axis="y")


def _overhead_by_class(overhead: list[dict], data: dict) -> bytes:
    fig = Figure(figsize=(10, 4))
    ax, tx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    control = [r for r in overhead if is_control(r["frame_type"])]
    traffic = [r for r in overhead if r["frame_type"] == TRAFFIC]
    value = {(r["link_class"], r["frame_type"]): r["bytes_per_node_s"] for r in control + traffic}
    data["control_bytes_per_node_s"] = {f"{r['link_class']}/{r['frame_type']}": r["bytes_per_node_s"] for r in control}
    data["traffic_bytes_per_node_s"] = {r["link_class"]: r["bytes_per_node_s"] for r in traffic}
    classes = sorted({r["link_class"] for r in control})
    if classes:
        _bars(ax, classes, sorted({r["frame_type"] for r in control}), value)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "control frames (frame_stats)")
    ax.set_ylabel("control bytes sent per node per second")
    ax.set_title("Control overhead by link class and frame type")
    traffic_classes = sorted({r["link_class"] for r in traffic})
    if traffic_classes:
        _bars(tx, traffic_classes, [TRAFFIC], value, color="grey", hatch="//")
    else:
        _empty(tx, "ping traffic")
    tx.set_ylabel("ping bytes sent per node per second")
    tx.set_title("Ping traffic (not overhead)")
    fig.tight_layout()
    return _png(fig)


def ab_plot_name(index: int, experiment: str) -> str:
    """File name of the A/B figure of the ``index``-th experiment (1-based, in document order)."""
    return f"ab_{index}_{re.sub(r'[^A-Za-z0-9_.-]+', '-', experiment).strip('-.')[:40] or 'experiment'}.png"


def ab_figure(experiment: str, e: Mapping, data: dict) -> bytes:
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


def plots(inp: Mapping[str, list[dict]]) -> Plots:
    """The plots in ``PLOTS``, drawn from the inputs convergence, stretch_hist, timeline, disruptions and
    overhead (name -> rows: a ``pipeline.report.gather`` of them; or ``vars(report_inputs)``); and, when the inputs
    mobility_timeline and mobility_runs have rows, those in ``report_mobility.MOBILITY_PLOTS``."""
    data: dict[str, dict] = {name: {} for name in PLOTS}
    png = {
        "convergence_cdf.png": _convergence_cdf(inp["convergence"], data["convergence_cdf.png"]),
        "stretch_hist.png": _stretch_hist(inp["stretch_hist"], data["stretch_hist.png"]),
        "delivery_over_time.png": _delivery_over_time(inp["timeline"], inp["disruptions"],
                                                      data["delivery_over_time.png"]),
        "overhead_by_class.png": _overhead_by_class(inp["overhead"], data["overhead_by_class.png"]),
    }
    moving_png, moving_data = mobility_plots(inp.get("mobility_timeline", []), inp.get("mobility_runs", []))
    png.update(moving_png)
    data.update(moving_data)
    return Plots(png, data)
