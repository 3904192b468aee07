"""The reference simulator's sequences (matrix-org/pinecone cmd/pineconesim): read, judged, written back.

A sequence is ``{"EventSequence": [{"Command": ..., "Data": {...}}]}`` with the commands AddNode, RemoveNode,
AddPeer, RemovePeer, Delay (``Length`` in ms), ConfigureAdversaryDefaults, ConfigureAdversaryPeer (``DropRates``
in percent, as strings or numbers), StartPings, StopPings, and Debug / Play / Pause (UI controls: accepted and
noted, nothing to do). Removing a node or a peering that is not there is a no-op, as in the reference.

:func:`translate` turns one into the step documents orchestrator.chaos.scenario validates, and judges it:

* **Faults** are RemoveNode, RemovePeer and the adversary configurations (:data:`FAULT_COMMANDS`): the checker
  runs after each, after its settle window or before the next command if that comes sooner
  (``check_within_s``: the Delays up to the next command), and once more at the end of the sequence (a ``check``
  step that also judges re-convergence since the last command).
* **The extension key** :data:`EXTENSION_KEY` (``"snekbed"``) carries what our YAML says and the reference
  format cannot: on an event, beside ``Command`` and ``Data``, ``{"expect": {...}, "settle_s": S, "check":
  bool, "note": "..."}``; at the top, beside ``EventSequence``, ``{"settle_s": S, "bound_margin_s": S, "end":
  {"expect": ..., "settle_s": ...}}``. The reference ignores both places: its UI (ui/modules/ui.js,
  ``validateEventSequence``) checks only that ``EventSequence`` exists and each event's ``Command`` and the
  keys *inside* ``Data``, and sends the server each event's ``Data`` alone. So the key never goes into ``Data``.

:func:`needs` says which commands a command cannot run without (an AddPeer needs both nodes' AddNode), for the
shrinker (orchestrator.chaos.shrink); :func:`sequence_text` writes a (shrunk) sequence back in the same format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.chaos.steps import MAX_WAIT_S, REFERENCE_DROP_KEYS, ScenarioError

__all__ = ["EXTENSION_KEY", "FAULT_COMMANDS", "Translated", "needs", "read_events", "sequence_text", "translate"]

#: the key that carries snekbed's own settings in a reference sequence (the reference ignores it)
EXTENSION_KEY = "snekbed"
#: reference commands that are faults: the checker runs after each
FAULT_COMMANDS = ("RemoveNode", "RemovePeer", "ConfigureAdversaryDefaults", "ConfigureAdversaryPeer")
#: what an event's extension may say (each a field of every step)
_EVENT_EXTENSION = ("expect", "settle_s", "check", "note")
#: what the top-level extension may say: scenario fields, and ``end`` (the final check's expect / settle_s)
_TOP_EXTENSION = ("settle_s", "bound_margin_s", "end")
_END_EXTENSION = ("expect", "settle_s")


@dataclass
class Translated:
    """A sequence as a scenario document, and where each step came from."""

    doc: dict[str, Any]
    #: steps[j] came from EventSequence[origin[j]]
    origin: list[int] = field(default_factory=list)
    #: EventSequence index -> line of its "Command"
    lines: dict[int, int] = field(default_factory=dict)
    #: steps[j] field -> the extension carried it (errors name EventSequence[i].snekbed.FIELD)
    extended: dict[int, set[str]] = field(default_factory=dict)
    #: steps[j] is a reference removal (RemoveNode, RemovePeer): an unknown node is a no-op there, not an error
    removals: set[int] = field(default_factory=set)


def read_events(text: str, file: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The document and its EventSequence, checked to be a list of events (ScenarioError otherwise)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"JSON syntax error at column {exc.colno}: {exc.msg}", file=file, line=exc.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("EventSequence"), list):
        raise ScenarioError("a sequence is an object with an 'EventSequence' list", file=file, line=1,
                            field="EventSequence")  # fmt: skip
    lines = command_lines(text)
    for i, ev in enumerate(doc["EventSequence"]):
        if not isinstance(ev, dict) or "Command" not in ev:
            raise ScenarioError("each event is an object with 'Command' and 'Data'", field=f"EventSequence[{i}]",
                                file=file, line=lines.get(i))  # fmt: skip
    return doc, doc["EventSequence"]


def translate(text: str, *, file: str | None = None, name: str | None = None) -> Translated:
    """The scenario document of a sequence (validated by the caller), with the faults judged (module docstring)."""
    doc, events = read_events(text, file)
    out = Translated({}, lines=command_lines(text))
    steps: list[dict[str, Any]] = []
    pending_after = 0.0
    for i, ev in enumerate(events):
        where = {"file": file, "line": out.lines.get(i)}
        cmd, data = ev["Command"], ev.get("Data") or {}
        if not isinstance(data, dict):
            raise ScenarioError("'Data' must be an object", field=f"EventSequence[{i}].Data", **where)
        step = _event_step(i, cmd, data, where)
        ext = _extension(ev.get(EXTENSION_KEY), _EVENT_EXTENSION, f"EventSequence[{i}].{EXTENSION_KEY}", where)
        if step is None:  # Delay: folded into the next step's after_s
            if ext:
                raise ScenarioError("a Delay carries no extension", field=f"EventSequence[{i}].{EXTENSION_KEY}", **where)
            pending_after += _delay_s(data, i, where)
            continue
        if cmd in FAULT_COMMANDS:
            step["check"] = True
        if cmd in ("RemoveNode", "RemovePeer"):
            out.removals.add(len(steps))
        if ext:
            out.extended[len(steps)] = set(ext)
            step.update(ext)
        window = _gap_after(events, i) if step.get("check") is True else None
        if window is not None:  # checked (a fault, or any command the extension asks it for): by the next command
            step["check_within_s"] = window
        step["after_s"] = pending_after
        pending_after = 0.0
        steps.append(step)
        out.origin.append(i)
    top = _extension(doc.get(EXTENSION_KEY), _TOP_EXTENSION, EXTENSION_KEY, {"file": file, "line": None})
    end = _extension(top.pop("end", None), _END_EXTENSION, f"{EXTENSION_KEY}.end", {"file": file, "line": None})
    steps.append({"action": "check", "reconvergence": True, "after_s": pending_after, **end,
                  "note": "the end of the sequence: every invariant, re-convergence timed from the last command"})
    out.origin.append(len(events))  # past the last event: errors name the top-level extension
    out.doc = {"name": name or "sequence", "traffic": None, "builds_network": True, "steps": steps, "source": file,
               "description": "translated from the reference simulator's sequence format", **top}  # fmt: skip
    return out


def _event_step(i: int, cmd: Any, data: Mapping[str, Any], where: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return _reference_step(cmd, data)
    except KeyError as exc:
        raise ScenarioError("required field is missing", field=f"EventSequence[{i}].Data.{exc.args[0]}",
                            **where) from None  # fmt: skip
    except ValueError as exc:
        at = exc.args[1] if len(exc.args) > 1 else "Data"
        raise ScenarioError(str(exc.args[0]), field=f"EventSequence[{i}].{at}", **where) from None


def _extension(value: Any, allowed: Sequence[str], prefix: str, where: dict[str, Any]) -> dict[str, Any]:
    """The extension object found at ``prefix`` (empty when absent); an unknown key is an error naming it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(f"the {EXTENSION_KEY!r} extension is an object with {', '.join(allowed)}", field=prefix,
                            **where)  # fmt: skip
    for key in value:
        if key not in allowed:
            raise ScenarioError(f"unknown extension key (known: {', '.join(allowed)})", field=f"{prefix}.{key}", **where)
    return dict(value)


def _gap_after(events: Sequence[Mapping[str, Any]], i: int) -> float | None:
    """Seconds from event ``i`` to the next command that is not a Delay; None when none follows."""
    gap = 0.0
    for ev in events[i + 1:]:
        if ev.get("Command") != "Delay":
            return gap
        try:
            gap += max(0.0, float((ev.get("Data") or {}).get("Length", 0)) / 1000.0)
        except (TypeError, ValueError):
            return None  # the Delay's own check reports it
    return None


def _delay_s(data: Mapping[str, Any], i: int, where: dict[str, Any]) -> float:
    at = f"EventSequence[{i}].Data.Length"
    try:
        ms = float(data["Length"])
    except KeyError:
        raise ScenarioError("required field is missing", field=at, **where) from None
    except (TypeError, ValueError):
        raise ScenarioError(f"Length must be milliseconds, got {data['Length']!r}", field=at, **where) from None
    if not 0 <= ms <= MAX_WAIT_S * 1000:  # NaN fails too
        raise ScenarioError(f"Length must be 0 to {MAX_WAIT_S * 1000:.0f} ms (one day), got {ms:g}", field=at,
                            **where)  # fmt: skip
    return ms / 1000.0


def _reference_step(cmd: Any, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """One reference command as a step dict (validated later), None for Delay."""
    if cmd == "Delay":
        return None
    if cmd in ("Debug", "Play", "Pause"):
        return {"action": "note", "note": f"reference UI command {cmd}: nothing to do here"}
    if cmd == "AddNode":
        kind = data.get("NodeType", "Default")
        if kind not in ("Default", "GeneralAdversary"):
            raise ValueError(f"NodeType must be Default or GeneralAdversary, got {kind!r}", "Data.NodeType")
        return {"action": "join", "node": data["Name"], "adversary": kind == "GeneralAdversary", "check": False}
    if cmd == "RemoveNode":
        return {"action": "remove_node", "target": data["Name"], "check": False}
    if cmd == "AddPeer":
        return {"action": "join", "link": [data["Node"], data["Peer"]], "check": False}
    if cmd == "RemovePeer":
        return {"action": "link_down", "link": [data["Node"], data["Peer"]], "check": False}
    if cmd in ("ConfigureAdversaryDefaults", "ConfigureAdversaryPeer"):
        step: dict[str, Any] = {"action": "adversary", "target": data["Node"], "drop": _drop_rates(data["DropRates"]),
                                "check": False}  # fmt: skip
        if cmd == "ConfigureAdversaryPeer":
            step["peer"] = data["Peer"]
        return step
    if cmd == "StartPings":
        return {"action": "traffic", "enabled": True}
    if cmd == "StopPings":
        return {"action": "traffic", "enabled": False}
    raise ValueError(f"unknown command {cmd!r}", "Command")


def _drop_rates(rates: Any) -> dict[str, float]:
    if not isinstance(rates, dict):
        raise ValueError("DropRates must be an object", "Data.DropRates")
    drop: dict[str, float] = {}
    for key, value in rates.items():
        if key not in REFERENCE_DROP_KEYS:
            raise ValueError(f"unknown DropRates key {key!r} (known: {', '.join(REFERENCE_DROP_KEYS)})",
                             f"Data.DropRates.{key}")  # fmt: skip
        try:
            drop[REFERENCE_DROP_KEYS[key]] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"a drop rate is a percentage, got {value!r}", f"Data.DropRates.{key}") from None
    return drop


def command_lines(text: str) -> dict[int, int]:
    """EventSequence index -> 1-based line of its ``"Command"`` key (the JSON parser keeps no positions)."""
    out: dict[int, int] = {}
    i = 0
    pos = text.find('"EventSequence"')
    while pos >= 0:
        pos = text.find('"Command"', pos + 1)
        if pos < 0:
            break
        out[i] = text.count("\n", 0, pos) + 1
        i += 1
    return out


# -- shrinking: what a command needs, and the sequence written back ----------------------------------


def _names(ev: Mapping[str, Any]) -> tuple[str, ...]:
    data = ev.get("Data") or {}
    keys = ("Name",) if ev.get("Command") in ("AddNode", "RemoveNode") else ("Node", "Peer")
    return tuple(str(data[k]) for k in keys if isinstance(data, dict) and k in data)


def needs(events: Sequence[Mapping[str, Any]]) -> dict[int, set[int]]:
    """Event index -> the earlier events it cannot run without: an AddPeer or an adversary configuration needs
    the last AddNode of each node it names, before it. Removals need nothing (removing what is not there is a
    no-op), nor do Delays and UI commands."""
    out: dict[int, set[int]] = {}
    added: dict[str, int] = {}
    for i, ev in enumerate(events):
        cmd = ev.get("Command")
        if cmd in ("AddPeer", "ConfigureAdversaryDefaults", "ConfigureAdversaryPeer"):
            out[i] = {added[n] for n in _names(ev) if n in added}
        if cmd == "AddNode":
            for n in _names(ev):
                added[n] = i
    return out


def sequence_text(doc: Mapping[str, Any], keep: Sequence[int]) -> str:
    """The sequence ``doc`` with only the events ``keep`` (indices), in the same format: consecutive Delays merged
    into one, every other top-level key (the extension too) as it was."""
    events = doc["EventSequence"]
    kept: list[dict[str, Any]] = []
    for i in sorted(keep):
        ev = events[i]
        if ev.get("Command") == "Delay" and kept and kept[-1].get("Command") == "Delay":
            total = float(kept[-1]["Data"]["Length"]) + float(ev["Data"]["Length"])
            kept[-1] = {**kept[-1], "Data": {**kept[-1]["Data"], "Length": int(total) if total.is_integer() else total}}
            continue
        kept.append(ev)
    out = {"EventSequence": kept, **{k: v for k, v in doc.items() if k != "EventSequence"}}
    return json.dumps(out, indent=4) + "\n"
