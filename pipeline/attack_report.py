"""The damage-curve report of ``snekbed attack``: ``attack.md`` and one PNG per metric (the mean over seeds against
the adversary fraction, its 95 % interval as error bars, one curve per variant side by side)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipeline.attack import METRICS

__all__ = ["write_report"]


def _plot(metric: str, curves: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    fig = Figure(figsize=(6.0, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    n = max(len(curves), 1)
    for j, (variant, curve) in enumerate(curves.items()):
        pts = [(p["fraction"], p["metrics"][metric]) for p in curve if p["metrics"][metric]["mean"] is not None]
        if not pts:
            continue
        span = max((p["fraction"] for p in curve), default=1.0) or 1.0
        xs = [f + (j - (n - 1) / 2) * 0.008 * span for f, _ in pts]  # variants side by side
        ys = [m["mean"] for _, m in pts]
        lo = [m["mean"] - m["ci_low"] for _, m in pts]
        hi = [m["ci_high"] - m["mean"] for _, m in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=variant)
    ax.set_xlabel("adversary fraction")
    ax.set_ylabel(metric)
    ax.set_title(METRICS[metric][0], fontsize=9)
    ax.grid(True, alpha=0.3)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def _cell(m: Mapping[str, Any]) -> str:
    if m["mean"] is None:
        return "-"
    missing = f" ({m['n_missing']} missing)" if m.get("n_missing") else ""
    return f"{m['mean']:.3g} [{m['ci_low']:.3g}, {m['ci_high']:.3g}]{missing}"


def write_report(out: Path, manifest: Mapping[str, Any], curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> Path:
    """``OUT/attack.md`` and ``OUT/attack-<metric>.png``; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = list(next(iter(curves.values()))[0]["metrics"]) if curves else []
    lines = [f"# Attack {manifest['attack']}: damage curves", "",
             f"{manifest['what']}. Topology {manifest['topology']} ({manifest['nodes']} nodes), backend "
             f"{manifest['backend']}, adversaries chosen by `{manifest['select']}`, seeds {len(manifest['seeds'])}, "
             f"attack window {manifest['window_s']:g} s. Each cell: mean over seeds [95 % interval].", ""]  # fmt: skip
    for metric in metrics:
        png = f"attack-{metric}.png"
        _plot(metric, curves, out / png)
        lines += [f"## {metric}", "", METRICS[metric][0] + ".", "", f"![{metric}]({png})", "",
                  "| fraction | " + " | ".join(curves) + " |", "|---|" + "---|" * len(curves)]
        fractions = [p["fraction"] for p in next(iter(curves.values()))]
        for i, f in enumerate(fractions):
            lines.append(f"| {f:g} | " + " | ".join(_cell(c[i]["metrics"][metric]) for c in curves.values()) + " |")
        lines.append("")
    failed = [r for r in manifest["runs"] if r["verdict"] != "pass"]
    lines += ["## Runs", "", f"{len(manifest['runs'])} runs in {manifest['runs_wall_s']:.0f} s; "
              f"{len(failed)} failed a chaos check" + (": " + ", ".join(
                  f"{r['variant']} f{r['fraction']:g} s{r['seed']} ({r['verdict']})" for r in failed[:20])
                  if failed else "") + ".", ""]  # fmt: skip
    path = out / "attack.md"
    path.write_text("\n".join(lines))
    return path
