"""Flight-recorder dumps in a replay: what a run directory's ``recorder/`` holds, placed on the run's clock.

A chaos step that fails or is invalid leaves every live node's flight recorder in the run directory as
``recorder/<step>-<node>.jsonl`` (contract.recorder: one record a line, oldest first) beside
``recorder/<step>-<node>.pcapng`` (docs/chaos.md, "Flight recorder"; docs/run-dataset.md, "recorder/"). The replay
page draws each dump on the timeline at its step: from the step's start (the ``step`` action of
``actions.jsonl``) to the moment the rings were read out (a record's ``mono_s`` + ``age_s``), over the span
the rings cover (their oldest record on). Per node it tells what was kept (records by kind) and what was
dropped and why, the dropped frames themselves (up to :data:`MAX_DROPS` per node), and the files to open in
Wireshark.

A line that is not a recorder record (``contract.dataset.validate_record`` with ``RECORDER_FIELDS``) is skipped
and reported with its file and line, as the replay reports a bad event line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.dataset import validate_record
from contract.recorder import RECORDER_FIELDS

__all__ = ["Dump", "NodeDump", "read_dumps", "RECORDER_DIR", "MAX_DROPS"]

RECORDER_DIR = "recorder"  # orchestrator.chaos.flight writes there
MAX_DROPS = 50  # dropped frames listed per node (all are counted)
_NAME = re.compile(r"^(\d+)-(.+)\.jsonl$")

Skip = Callable[[Path, int, str], None]  # told a bad line: file, line number, why


@dataclass
class NodeDump:
    """One node's ring in one step's dump."""

    name: str
    file: str  # relative to the run directory
    pcapng: str | None
    records: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)  # reason -> frames
    dropped: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_DROPS dropped frames
    t_from: float | None = None  # its oldest record
    t_read: float | None = None  # when it was read out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "pcapng": self.pcapng, "records": self.records,
                "kinds": dict(self.kinds), "drops": dict(self.drops), "dropped": self.dropped,
                "t_from": _r(self.t_from), "t_read": _r(self.t_read)}


@dataclass
class Dump:
    """Every node's ring as one failing (or invalid) step left them."""

    step: int
    action: str | None  # the step's action (its `step` record), None when actions.jsonl does not say
    step_t: float | None  # when the step started
    nodes: list[NodeDump]

    @property
    def t(self) -> float | None:
        """When the rings were read out (right after the step's verdict)."""
        times = [n.t_read for n in self.nodes if n.t_read is not None]
        return max(times) if times else None

    @property
    def t_from(self) -> float | None:
        times = [n.t_from for n in self.nodes if n.t_from is not None]
        return min(times) if times else None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "action": self.action, "step_t": self.step_t, "t": _r(self.t),
                "t_from": _r(self.t_from), "nodes": [n.to_dict() for n in self.nodes],
                "dropped": sum(sum(n.drops.values()) for n in self.nodes),
                "label": f"recorder: step {self.step}" + (f" {self.action}" if self.action else "")
                         + f", {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}"}


def _r(t: float | None) -> float | None:
    return None if t is None else round(t, 4)


def _steps(run: Path) -> dict[int, tuple[float, str | None]]:
    """Each chaos step's start and action, from the run's ``step`` actions (bad lines: the timeline reports them)."""
    out: dict[int, tuple[float, str | None]] = {}
    try:
        text = (run / "actions.jsonl").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            a = json.loads(line)
            if a.get("action") == "step":
                d = a.get("detail") or {}
                out.setdefault(int(d["index"]), (float(a["mono_s"]), d.get("action")))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


def _node(run: Path, file: Path, name: str, skip: Skip) -> NodeDump:
    pcap = file.with_suffix(".pcapng")
    nd = NodeDump(name, str(file.relative_to(run)), str(pcap.relative_to(run)) if pcap.is_file() else None)
    with open(file, encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            bad = validate_record(line, RECORDER_FIELDS)
            if bad is not None:
                skip(file, line_no, f"{bad[0]}: {bad[1]}")
                continue
            rec = json.loads(line)
            t = float(rec["mono_s"])
            nd.records += 1
            nd.kinds[rec["kind"]] += 1
            nd.t_from = t if nd.t_from is None else min(nd.t_from, t)
            read = t + float(rec["age_s"])
            nd.t_read = read if nd.t_read is None else max(nd.t_read, read)
            if rec["kind"] == "dropped":
                nd.drops[rec.get("reason") or "unknown"] += 1
                if len(nd.dropped) < MAX_DROPS:
                    nd.dropped.append({"t": round(t, 4), "frame_type": rec.get("frame_type"),
                                       "reason": rec.get("reason"), "port": rec.get("port"), "ping": rec.get("ping")})
    return nd


def read_dumps(run: Path, skip: Skip) -> list[Dump]:
    """The run directory's flight-recorder dumps, by step; [] when it has none."""
    folder = run / RECORDER_DIR
    if not folder.is_dir():
        return []
    by_step: dict[int, list[NodeDump]] = {}
    for file in sorted(folder.glob("*.jsonl")):
        m = _NAME.match(file.name)
        if m is None:
            skip(file, 0, "not a dump's name (recorder/<step>-<node>.jsonl)")
            continue
        by_step.setdefault(int(m.group(1)), []).append(_node(run, file, m.group(2), skip))
    steps = _steps(run)
    return [Dump(i, steps.get(i, (None, None))[1], steps.get(i, (None, None))[0], nodes)
            for i, nodes in sorted(by_step.items())]
