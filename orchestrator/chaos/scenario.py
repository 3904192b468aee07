"""Chaos scenario files: snekbed's own YAML, and the reference simulator's sequence JSON.

A scenario is a timeline of steps (orchestrator.chaos.steps: one class per ``action``). Each step waits
``after_s`` seconds after the previous one ended, does one thing (a fault, a traffic change, a wait, a check)
and, for faults, is followed by the checker: wait for re-convergence (at most the timer-derived bound), a
settle window, then every invariant of :data:`INVARIANTS`, compared with what the step ``expect``\\ s.

Both formats load into the same :class:`Scenario`; every problem raises :class:`ScenarioError` naming the file,
the line and the field, e.g. ``root-kill.yaml:14: steps[2].target: unknown role 'rooot'``. Given the topology
(``load_scenario(path, topology)``), every node a step names is looked up in it, and in the nodes the
scenario's join steps add, when the file is loaded: an unknown node is an error then, not a failure at run time.

The reference format (matrix-org/pinecone cmd/pineconesim sequences) is read by orchestrator.chaos.sequence:
its faults (RemoveNode, RemovePeer, adversary configuration) are judged by the checker, and at its end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from orchestrator.chaos.sequence import EXTENSION_KEY, translate
from orchestrator.chaos.steps import (
    _ACTIONS, ADVERSARY_DROP_KINDS, INVARIANTS, LINK_ROLES, MAX_WAIT_S, NODE_ROLES, Adversary, AnyStep, Check, Churn,
    Flap, Heal, HostCrash, HostPartition, HostRestart, Join, Kill, LinkChange, LinkDown, LinkUp, Mobility, Note,
    Partition, Pause, RemoveNode, Restart, Resume,
    ScenarioError, Step, Traffic, TrafficSpec, Wait, _LinkStep, _Model, _NodeStep, _SECONDS,
)  # fmt: skip
from orchestrator.model.mobility_change import CHANGEABLE_MODELS
from orchestrator.model.topology import Loc, Topology, TopologyError, _line_of, _pydantic_message, format_loc
from orchestrator.model.topology_loaders import _compose

__all__ = [
    "ADVERSARY_DROP_KINDS", "Adversary", "AnyStep", "Check", "Churn", "Flap", "Heal", "HostCrash", "HostPartition",
    "HostRestart", "INVARIANTS", "Join", "Kill",
    "LINK_ROLES", "LinkChange", "LinkDown", "LinkUp", "MAX_WAIT_S", "Mobility", "NODE_ROLES", "Note", "Partition",
    "Pause",
    "RemoveNode", "Restart", "Resume", "Scenario", "ScenarioError", "Step", "Traffic", "TrafficSpec", "Wait",
    "check_targets", "load_scenario", "parse_reference_sequence", "parse_scenario_yaml",
]  # fmt: skip
#: re-exported for orchestrator.chaos.apply, which dispatches on the step classes' bases
_STEP_BASES = (_LinkStep, _NodeStep)


class Scenario(_Model):
    name: str = "scenario"
    description: str = ""
    settle_s: float = Field(5.0, **_SECONDS)
    traffic: TrafficSpec | None = Field(default_factory=TrafficSpec)
    #: seconds added to the timer-derived re-convergence bound (scheduling on a loaded host)
    bound_margin_s: float = Field(10.0, **_SECONDS)
    #: while the nodes move (a topology with radios), the checker reads every this many seconds (0: never; docs/mobility.md)
    watch_s: float = Field(5.0, **_SECONDS)
    #: the scenario builds its network from nothing (reference sequences): no topology needed
    builds_network: bool = False
    steps: tuple[Step, ...] = Field(min_length=1)
    source: str | None = None

    def declared(self) -> tuple[list[str], list[tuple[str, str, str]]]:
        """Nodes and links the scenario adds with ``join`` steps: (node names, (a, b, class) links), in order.
        A backend that must create everything up front (Docker needs addresses) starts them absent."""
        nodes: list[str] = []
        links: list[tuple[str, str, str]] = []
        for st in self.steps:
            if not isinstance(st, Join):
                continue
            if st.node is not None:
                if st.node not in nodes:
                    nodes.append(st.node)
                links += [(st.node, p, st.link_class) for p in st.peers]
            elif st.link is not None:
                links.append((st.link[0], st.link[1], st.link_class))
        return nodes, links

    def join_variants(self) -> dict[str, str]:
        """Joining nodes that run their own variant: name -> variant spec text (the last join step wins)."""
        return {st.node: st.variant for st in self.steps
                if isinstance(st, Join) and st.node is not None and st.variant is not None}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The scenario as a document ``parse_scenario_yaml`` reads back (defaults left out)."""
        doc = self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True,
                              exclude={"source", "steps"})  # fmt: skip
        doc["steps"] = [st.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
                        | {"action": st.action} for st in self.steps]  # fmt: skip
        if self.traffic is not None and "traffic" not in doc:
            doc["traffic"] = {}
        return doc

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=120)


# -- loading --------------------------------------------------------------------------------------


def load_scenario(path: str | Path, topology: Topology | None = None) -> Scenario:
    """Read a scenario: ``.json`` files in the reference's sequence format, anything else as YAML. With
    ``topology``, or for a sequence that builds its network, every node a step names must exist (check_targets)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read the file: {exc.strerror or exc}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from exc
    if path.suffix.lower() == ".json":
        return parse_reference_sequence(text, file=str(path), name=path.stem, topology=topology)
    return parse_scenario_yaml(text, file=str(path), name=path.stem, topology=topology)


def parse_scenario_yaml(text: str, *, file: str | None = None, name: str | None = None,
                        topology: Topology | None = None) -> Scenario:  # fmt: skip
    try:
        data, lines = _compose(text, file=file, what="YAML")
    except TopologyError as exc:
        raise ScenarioError(exc.message, file=exc.file, line=exc.line, field=exc.field) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"a scenario is a mapping with 'steps', got {type(data).__name__}", file=file, line=1)
    if name and "name" not in data:
        data["name"] = name
    data["source"] = file
    sc = _validate(data, file=file, lines=lines)
    if topology is not None or sc.builds_network:
        check_targets(sc, topology, file=file, lines=lines)
    return sc


def parse_reference_sequence(text: str, *, file: str | None = None, name: str | None = None,
                             topology: Topology | None = None) -> Scenario:  # fmt: skip
    """Translate ``{"EventSequence": [...]}`` into a Scenario (orchestrator.chaos.sequence), its faults judged;
    every node it names must be added by it (or be in ``topology``), but for removals (a no-op, as in the
    reference)."""
    tr = translate(text, file=file, name=name)
    origin = tr.origin
    n_events = len(origin) and origin[-1]  # the end check's origin: one past the last event

    def loc_map(loc: Loc) -> Loc:
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            j, rest = loc[1], loc[2:]
            if origin[j] == n_events:  # the end check: its settings came from the top-level extension
                return (EXTENSION_KEY, "end", *rest)
            if rest and rest[0] in tr.extended.get(j, ()):
                return ("EventSequence", origin[j], EXTENSION_KEY, *rest)
            return ("EventSequence", origin[j], *_reference_field(tr.doc["steps"][j].get("action"), rest))
        if loc and loc[0] in ("settle_s", "bound_margin_s"):  # only the top-level extension sets them
            return (EXTENSION_KEY, *loc)
        return loc

    lines = {("EventSequence", o): ln for o, ln in tr.lines.items()}
    sc = _validate(tr.doc, file=file, lines=lines, loc_map=loc_map)
    check_targets(sc, topology, file=file, lines=lines, loc_map=loc_map, skip=tr.removals)
    return sc


def _reference_field(action: Any, rest: Loc) -> Loc:
    """A step field's location as the reference command's ``Data`` names it (link[1] of AddPeer: Data.Peer)."""
    if rest[:1] == ("link",) and len(rest) == 2 and rest[1] in (0, 1):
        return ("Data", ("Node", "Peer")[rest[1]])  # type: ignore[index]
    if rest[:1] in (("target",), ("node",)):
        return ("Data", "Node" if action == "adversary" else "Name", *rest[1:])
    if rest[:1] == ("peer",):
        return ("Data", "Peer", *rest[1:])
    return rest


def _validate(data: Mapping[str, Any], *, file: str | None, lines: Mapping[Loc, int], loc_map: Any = None) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in _without_union_noise(exc.errors()):
            loc = _strip_union_tags(tuple(err["loc"]))
            message = _pydantic_message(err)
            tag = "model" if "'model'" in str(err.get("ctx", {}).get("discriminator")) else "action"
            known = ", ".join(CHANGEABLE_MODELS if tag == "model" else _ACTIONS)
            if err.get("type") == "union_tag_invalid":
                loc, message = (*loc, tag), f"unknown {tag} {err['ctx']['tag']!r} (known: {known})"
            elif err.get("type") == "union_tag_not_found":
                loc, message = (*loc, tag), f"required field is missing (one of: {known})"
            src = tuple(loc_map(loc)) if loc_map else loc
            problems.append(ScenarioError(message, file=file, line=_line_of(src, lines), field=format_loc(src)))
        first, *rest = problems
        raise ScenarioError(first.message, file=first.file, line=first.line, field=first.field, others=rest) from None


def _without_union_noise(errors: list[Any]) -> list[Any]:
    """pydantic reports a value that fits no member of a union once per member (``link: [a]`` is neither a pair
    nor a role name; ``traffic: {rate: 1}`` is neither TrafficSpec nor null): keep, per location, the errors of
    the member that got furthest (the longest locations), so the real error is not buried under the others. A
    one-step scenario whose step is invalid also gets "steps: at least 1 item after validation": left out."""
    out: list[Any] = []
    step_errors = any(len(e["loc"]) > 1 and e["loc"][0] == "steps" for e in errors)
    for err in errors:
        loc = _strip_union_tags(tuple(err["loc"]))
        if step_errors and loc == ("steps",) and err.get("type") == "too_short":
            continue  # "at least 1 item after validation, not 0": the one step was invalid, said above
        head = _union_head(loc)
        if head is None:
            out.append(err)
            continue
        rivals = [e for e in errors if _union_head(_strip_union_tags(tuple(e["loc"]))) == head]
        deepest = max(len(_strip_union_tags(tuple(e["loc"]))) for e in rivals)
        if len(loc) == deepest and err is next(e for e in rivals if len(_strip_union_tags(tuple(e["loc"]))) == deepest):
            out.append(err)
    return out or errors


#: fields whose type is a union of several kinds (pydantic names the member in the location, e.g. ``tuple[str, str]``)
_UNION_FIELDS = ("link", "traffic")


def _union_head(loc: Loc) -> Loc | None:
    """The location of the union field ``loc`` is inside of, or None."""
    for k, part in enumerate(loc):
        if part in _UNION_FIELDS:
            return loc[: k + 1]
    return None


def _strip_union_tags(loc: Loc) -> Loc:
    """pydantic puts the discriminator's value into the location (steps.2.kill.target) and a union member's
    type into it (steps.2.link.tuple[str, str].1, traffic.TrafficSpec.rate): drop them."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if isinstance(part, str) and i >= 2 and loc[i - 2] == "steps" and isinstance(loc[i - 1], int):
            if part in _ACTIONS:
                continue
        if part == "[key]":  # a mapping's key was wrong (expect: {snake: false}): the key itself says where
            continue
        if part in CHANGEABLE_MODELS and i >= 1 and loc[i - 1] == "model":  # a mobility step's model's tag
            continue
        if isinstance(part, str) and i >= 1 and loc[i - 1] in _UNION_FIELDS and not part.isidentifier():
            continue
        if isinstance(part, str) and i >= 1 and loc[i - 1] in _UNION_FIELDS and part in ("TrafficSpec", "str", "none"):
            continue
        out.append(part)
    return tuple(out)


# -- nodes the steps name, looked up when the file is loaded --------------------------------------


def _named(step: AnyStep) -> Iterator[tuple[Loc, str]]:
    """(field location inside the step, node name) for every node ``step`` names (roles are not names)."""
    if isinstance(step, _NodeStep) and isinstance(step.target, tuple):
        yield from ((("target", k), n) for k, n in enumerate(step.target))
    elif isinstance(step, _NodeStep) and step.target not in NODE_ROLES:
        yield ("target",), step.target
    if isinstance(step, Adversary) and step.peer is not None:
        yield ("peer",), step.peer
    if isinstance(step, Adversary) and step.victim is not None:
        yield ("victim",), step.victim
    if isinstance(step, _LinkStep) and not isinstance(step.link, str):
        yield from ((("link", k), n) for k, n in enumerate(step.link))
    if isinstance(step, Partition) and step.groups is not None:
        for g, group in enumerate(step.groups):
            yield from ((("groups", g, k), n) for k, n in enumerate(group) if n != "rest")
    if isinstance(step, Join):
        yield from ((("peers", k), n) for k, n in enumerate(step.peers))
        yield from ((("link", k), n) for k, n in enumerate(step.link or ()))
        if step.key is not None and step.key.near is not None:
            yield ("key", "near"), step.key.near
    if isinstance(step, Mobility):
        yield from ((("nodes", k), n) for k, n in enumerate(step.nodes))


def _mobility_problem(step: Mobility, topology: Topology | None) -> tuple[Loc, str] | None:
    """What a mobility step asks that ``topology`` cannot do: it has no radios, no such group, a node not placed."""
    if topology is None:
        return None
    if not topology.radios:
        return ("action",), "the topology's nodes do not move (it declares no radios; docs/mobility.md)"
    groups = topology.movement.groups if topology.movement is not None else {}
    if step.group is not None and step.group not in groups:
        return ("group",), f"unknown group {step.group!r} (known: {', '.join(sorted(groups)) or 'none'})"
    placed = {n.name for n in topology.nodes if n.position is not None or n.mobility is not None}
    for k, name in enumerate(step.nodes):
        if name in topology.node_names and name not in placed:
            return ("nodes", k), f"node {name!r} has no position and no mobility model: it is on no radio"
    return None


def check_targets(sc: Scenario, topology: Topology | None, *, file: str | None = None,
                  lines: Mapping[Loc, int] | None = None, loc_map: Any = None, skip: set[int] = frozenset()) -> None:  # type: ignore[assignment]  # fmt: skip
    """ScenarioError (file, line, field) for every node a step names that is neither in ``topology`` nor added by
    one of the scenario's join steps. Steps in ``skip`` (a reference sequence's removals: a no-op for a node
    that is not there) are not looked at."""
    known = set(topology.node_names if topology is not None else ()) | set(sc.declared()[0])
    where = "not in the topology, nor added by a join step" if topology is not None else "no step adds it"
    problems = []
    for i, step in enumerate(sc.steps):
        if i in skip:
            continue
        for field, name in _named(step):
            if name in known:
                continue
            loc: Loc = ("steps", i, *field)
            src = tuple(loc_map(loc)) if loc_map else loc
            problems.append(ScenarioError(f"unknown node {name!r}: {where}",
                                          file=file, line=_line_of(src, lines or {}), field=format_loc(src)))  # fmt: skip
        moving = _mobility_problem(step, topology) if isinstance(step, Mobility) else None
        if moving is not None:
            src = ("steps", i, *moving[0])
            problems.append(ScenarioError(moving[1], file=file, line=_line_of(src, lines or {}), field=format_loc(src)))
    if problems:
        first, *rest = problems
        raise ScenarioError(first.message, file=first.file, line=first.line, field=first.field, others=rest)
