"""The run's faults, and what they do to the topology, read from ``actions.jsonl`` lines.

One :class:`FaultLog` follows the actions in order: disruptive ones (and restarts) become
:class:`Fault` marks on the timeline; ``link_down`` / ``link_up``, ``partition`` / ``heal`` and
``join`` of a link change the set of cut links and of links not joined yet
(docs/run-dataset.md, "actions.jsonl"). Replay snapshots it after every action; the live
view feeds it the lines appended since its last poll.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.dataset import DISRUPTIVE_ACTIONS

from orchestrator.tools.view.frames import link_id

__all__ = ["Fault", "FaultLog", "ActionsTail", "pair"]

NODE_DOWN = ("kill", "kill_root", "remove_node")


def pair(item: Any) -> frozenset[str] | None:
    """A link named ``"a--b"`` or ``[a, b]`` -> its id; anything else -> None."""
    if isinstance(item, str) and "--" in item:
        a, b = item.split("--", 1)
        return link_id(a, b)
    if isinstance(item, (list, tuple)) and len(item) == 2:
        return link_id(str(item[0]), str(item[1]))
    return None


@dataclass(frozen=True, slots=True)
class Fault:
    t: float
    action: str
    target: str | None
    detail: Mapping[str, Any] | None

    @property
    def label(self) -> str:
        d = self.detail or {}
        if self.action == "partition" and d.get("groups"):
            return "partition " + " | ".join(",".join(map(str, g)) for g in d["groups"])
        if self.action in ("partition", "heal") and d.get("links"):
            return f"{self.action} {len(d['links'])} links"
        return f"{self.action} {self.target}" if self.target else self.action

    def to_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 4), "action": self.action, "target": self.target, "detail": self.detail,
                "label": self.label}


@dataclass
class FaultLog:
    """Faults so far, and the links they cut. ``links``: every link of the topology (for group partitions)."""

    links: set[frozenset[str]]
    absent: set[frozenset[str]] = field(default_factory=set)  # links that join later and have not yet
    cut: set[frozenset[str]] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)

    def feed(self, action: Mapping[str, Any]) -> Fault | None:
        """One actions.jsonl record (already parsed). Raises KeyError / TypeError / ValueError when malformed."""
        t, name, target = float(action["mono_s"]), str(action["action"]), action.get("target")
        detail = action.get("detail")
        if isinstance(detail, str):  # the pipeline's tables keep it as JSON text
            detail = json.loads(detail)
        detail = detail if isinstance(detail, dict) else {}
        if name == "join":
            if (p := pair(target)) is not None:
                self.absent.discard(p)
        elif name == "link_down":
            if (p := pair(target)) is not None:
                self.cut.add(p)
        elif name == "link_up":
            if (p := pair(target)) is not None:
                self.cut.discard(p)
        elif name == "partition":
            if detail.get("links"):
                self.cut.update(p for x in detail["links"] if (p := pair(x)) is not None)
            elif detail.get("groups"):
                group_of = {str(n): i for i, g in enumerate(detail["groups"]) for n in g}
                self.cut.update(lid for lid in self.links
                                if all(n in group_of for n in lid) and len({group_of[n] for n in lid}) == 2)
        elif name == "heal":
            if detail.get("links"):
                self.cut.difference_update(p for x in detail["links"] if (p := pair(x)) is not None)
            else:
                self.cut.clear()
        if name in DISRUPTIVE_ACTIONS or name in ("restart", "remove_node"):
            fault = Fault(t, name, target if target is None else str(target), detail or None)
            self.faults.append(fault)
            return fault
        return None


class ActionsTail:
    """The lines appended to a run's ``actions.jsonl`` since the last read (the live view's feed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.bad: list[str] = []

    def read(self) -> Iterable[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._offset += end
        out = []
        for raw in data[:end].splitlines():
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                self.bad.append(f"{self.path}: not JSON ({exc})")
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out
