"""Chaos scenario files: snekbed's own YAML, and the reference simulator's sequence JSON.

A scenario is a timeline of steps. Each step waits ``after_s`` seconds after the
previous one ended, does one thing (a fault, a traffic change, a wait, a check)
and, for faults, is followed by the checker: wait for re-convergence (at most the
timer-derived bound), a settle window, then every invariant of
:data:`INVARIANTS`, compared with what the step ``expect``\\ s.

Both formats load into the same :class:`Scenario`; every problem raises
:class:`ScenarioError` naming the file, the line and the field, e.g.
``root-kill.yaml:14: steps[2].target: unknown role 'rooot'``.

The reference format (matrix-org/pinecone cmd/pineconesim sequences) is
``{"EventSequence": [{"Command": ..., "Data": {...}}]}`` with the commands
AddNode, RemoveNode, AddPeer, RemovePeer, Delay (``Length`` in ms),
ConfigureAdversaryDefaults, ConfigureAdversaryPeer (``DropRates`` in percent,
as strings or numbers), StartPings, StopPings, and Debug / Play / Pause (UI
controls: accepted and noted, nothing to do). Removing a node or a peering that
is not there is a no-op, as in the reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from node.core.variants import VariantSpec
from orchestrator.model.topology import NODE_NAME_RE, Loc, TopologyError, _line_of, _pydantic_message, format_loc
from orchestrator.model.topology_loaders import _compose

__all__ = [
    "ADVERSARY_DROP_KINDS",
    "AnyStep",
    "INVARIANTS",
    "LINK_ROLES",
    "NODE_ROLES",
    "Scenario",
    "ScenarioError",
    "Step",
    "TrafficSpec",
    "load_scenario",
    "parse_reference_sequence",
    "parse_scenario_yaml",
]

#: The checker's invariant names (a contract: scripts read them from the JSON output).
InvariantName = Literal[
    "one_root_per_component",
    "root_is_highest_key",
    "snake_ordered",
    "pairs_reachable",
    "no_internal_errors",
    "reconverged_within_bound",
]
INVARIANTS: tuple[str, ...] = get_args(InvariantName)

#: Roles a node target may name instead of a node (resolved on the live graph when the step runs).
NODE_ROLES = (
    "root",
    "root_children",
    "highest_key",
    "lowest_key",
    "random",
    "max_degree",
    "cut_vertex",
    "min_cut_side",
    "all",
)
#: Roles a link target may name instead of ``[a, b]``.
LINK_ROLES = ("bridge", "random", "root_link")

#: Frame kinds an adversary can drop (``snekbed node --adversary``), and the reference's DropRates keys.
DropKind = Literal["all", "keepalive", "tree_announcement", "bootstrap", "wakeup_broadcast", "traffic"]
ADVERSARY_DROP_KINDS: tuple[str, ...] = get_args(DropKind)
_REFERENCE_DROP_KEYS = {
    "Overall": "all",
    "Keepalive": "keepalive",
    "TreeAnnouncement": "tree_announcement",
    "VirtualSnakeBootstrap": "bootstrap",
    "WakeupBroadcast": "wakeup_broadcast",
    "OverlayTraffic": "traffic",
}


class ScenarioError(TopologyError):
    """A scenario file is invalid: ``file:line: field: message`` (see TopologyError)."""

    def location(self) -> str:
        where = self.file or "<scenario>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.field}" if self.field else where


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrafficSpec(_Model):
    """The background ping mesh: ``rate_per_s`` pings a second over ``pairs`` sampled pairs, in each mode."""

    rate_per_s: float = Field(4.0, ge=0, le=1000)
    pairs: int = Field(20, ge=1, le=10_000)
    modes: tuple[Literal["snek", "tree"], ...] = ("snek", "tree")
    timeout_s: float = Field(5.0, gt=0, le=60)


def _check_target(v: str | None, roles: tuple[str, ...], what: str) -> str | None:
    if v is None or v in roles or NODE_NAME_RE.match(v):
        return v
    raise ValueError(f"{what} {v!r} is neither a node name nor a role ({', '.join(roles)})")


class _Step(_Model):
    """Fields every step has."""

    after_s: float = Field(0.0, ge=0, description="seconds after the previous step ended")
    settle_s: float | None = Field(None, ge=0, description="checker settle window (default: the scenario's)")
    check: bool | None = Field(None, description="run the checker after this step (default: after faults)")
    expect: dict[InvariantName, bool] = Field(default_factory=dict, description="invariants expected to break: false")
    note: str | None = None

    #: whether the checker runs after this step unless ``check`` says otherwise
    FAULT: ClassVar[bool] = True

    def wants_check(self) -> bool:
        return self.FAULT if self.check is None else self.check


class _NodeStep(_Step):
    target: str
    count: int = Field(1, ge=1, description="how many nodes for the roles random, root_children, all")

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        return _check_target(v, NODE_ROLES, "target")  # type: ignore[return-value]


class _LinkStep(_Step):
    link: tuple[str, str] | str

    @field_validator("link")
    @classmethod
    def _link(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in LINK_ROLES:
                raise ValueError(f"link {v!r} must be [a, b] or a role ({', '.join(LINK_ROLES)})")
            return v
        for name in v:
            if not NODE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a node name")
        if v[0] == v[1]:
            raise ValueError(f"a link joins two different nodes, not {v[0]!r} to itself")
        return v


class Kill(_NodeStep):
    action: Literal["kill"]


class Restart(_NodeStep):
    """Kill (if alive) and start again with the same key and peers."""

    action: Literal["restart"]


class Pause(_NodeStep):
    """SIGSTOP / ``docker pause``; resumed after ``for_s`` when given (else a later ``resume``)."""

    action: Literal["pause"]
    for_s: float | None = Field(None, gt=0)


class Resume(_NodeStep):
    action: Literal["resume"]


class RemoveNode(_NodeStep):
    """The node leaves for good (reference RemoveNode); no-op when absent."""

    action: Literal["remove_node"]


class Partition(_Step):
    """Cut every link between groups. ``groups`` lists node names (``rest`` = everyone not listed), or
    ``by`` derives two groups: ``halves`` (balanced, each half connected where possible, few links cut),
    ``min_cut`` (the smaller side of a minimum edge cut: on a sparse graph often a single leaf),
    ``root`` (the root alone against the rest)."""

    action: Literal["partition"]
    groups: tuple[tuple[str, ...], ...] | None = None
    by: Literal["halves", "min_cut", "root"] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Partition:
        if (self.groups is None) == (self.by is None):
            raise ValueError("give exactly one of 'groups' (lists of node names) or 'by' (halves, min_cut, root)")
        if self.groups is not None and len(self.groups) < 2:
            raise ValueError("a partition needs at least two groups")
        return self


class Heal(_Step):
    """Undo every partition (links cut by ``partition`` come back)."""

    action: Literal["heal"]


class LinkDown(_LinkStep):
    action: Literal["link_down"]


class LinkUp(_LinkStep):
    action: Literal["link_up"]


class Flap(_LinkStep):
    """Take the link down and up ``count`` times, ``period_s`` per cycle (down half, up half)."""

    action: Literal["flap"]
    period_s: float = Field(2.0, gt=0)
    count: int = Field(5, ge=1, le=1000)


class LinkChange(_LinkStep):
    """Change a link's class or shaping mid-run."""

    action: Literal["link_change"]
    link_class: str | None = Field(None, alias="class")
    shaping: dict[str, float] | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _something(self) -> LinkChange:
        if self.link_class is None and not self.shaping:
            raise ValueError("link_change needs 'class' or 'shaping'")
        return self


class Churn(_Step):
    """For ``duration_s``, nodes leave and come back: ``fraction`` of the nodes cycle through, each down ``down_s``."""

    action: Literal["churn"]
    fraction: float = Field(0.2, gt=0, le=1)
    duration_s: float = Field(60.0, gt=0)
    down_s: float = Field(5.0, gt=0)


class Join(_Step):
    """A node joins (``node`` + ``peers``), or a link is added between existing nodes (``link``)."""

    action: Literal["join"]
    node: str | None = None
    peers: tuple[str, ...] = ()
    link: tuple[str, str] | None = None
    link_class: str = Field("pipe", alias="class")
    adversary: bool = False
    variant: str | None = Field(None, description="the joining node's protocol variant spec (default: the run's)")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("variant")
    @classmethod
    def _known_variant(cls, v: str | None) -> str | None:
        return None if v is None else str(VariantSpec.parse(v))  # VariantError is a ValueError: pydantic reports it

    @model_validator(mode="after")
    def _one_way(self) -> Join:
        if (self.node is None) == (self.link is None):
            raise ValueError("give 'node' (with optional 'peers') or 'link' ([a, b])")
        if self.variant is not None and self.node is None:
            raise ValueError("'variant' belongs to a joining 'node', not to a 'link'")
        for name in (self.node, *self.peers, *(self.link or ())):
            if name is not None and not NODE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a node name")
        return self


class Adversary(_NodeStep):
    """The target drops received frames by kind at ``drop`` percentages (0-100), from every peer or one."""

    action: Literal["adversary"]
    drop: dict[DropKind, float]
    peer: str | None = None

    @field_validator("drop")
    @classmethod
    def _percent(cls, v: dict[str, float]) -> dict[str, float]:
        for k, pct in v.items():
            if not 0 <= pct <= 100:
                raise ValueError(f"drop rate for {k} must be 0-100 (percent), got {pct}")
        return v


class Traffic(_Step):
    """Start, stop or change the background ping mesh."""

    action: Literal["traffic"]
    enabled: bool = True
    rate_per_s: float | None = Field(None, ge=0, le=1000)
    pairs: int | None = Field(None, ge=1)
    FAULT: ClassVar[bool] = False


class Wait(_Step):
    """Wait until converged, at most ``within_s`` (``until: converged``), or just ``s`` seconds."""

    action: Literal["wait"]
    until: Literal["converged"] | None = None
    within_s: float = Field(120.0, gt=0)
    s: float | None = Field(None, ge=0)
    FAULT: ClassVar[bool] = False

    @model_validator(mode="after")
    def _one_way(self) -> Wait:
        if (self.until is None) == (self.s is None):
            raise ValueError("give 'until: converged' (with 'within_s') or 's' (seconds)")
        return self


class Check(_Step):
    """Run the checker now (no fault)."""

    action: Literal["check"]
    FAULT: ClassVar[bool] = True


class Note(_Step):
    """A reference UI command (Debug, Play, Pause) or a comment: recorded, nothing done."""

    action: Literal["note"]
    FAULT: ClassVar[bool] = False


#: One step of any action: orchestrator.chaos.apply dispatches on the class (a ``match``, checked exhaustive).
AnyStep = Union[
    Kill, Restart, Pause, Resume, RemoveNode, Partition, Heal, LinkDown, LinkUp, Flap, LinkChange, Churn, Join,
    Adversary, Traffic, Wait, Check, Note,
]  # fmt: skip
#: A step as a scenario file gives it: the class is chosen by ``action``.
Step = Annotated[AnyStep, Field(discriminator="action")]


class Scenario(_Model):
    name: str = "scenario"
    description: str = ""
    settle_s: float = Field(5.0, ge=0)
    traffic: TrafficSpec | None = Field(default_factory=TrafficSpec)
    #: seconds added to the timer-derived re-convergence bound (scheduling on a loaded host)
    bound_margin_s: float = Field(10.0, ge=0)
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


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario: ``.json`` files in the reference's sequence format, anything else as YAML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read the file: {exc.strerror or exc}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from exc
    if path.suffix.lower() == ".json":
        return parse_reference_sequence(text, file=str(path), name=path.stem)
    return parse_scenario_yaml(text, file=str(path), name=path.stem)


def parse_scenario_yaml(text: str, *, file: str | None = None, name: str | None = None) -> Scenario:
    try:
        data, lines = _compose(text, file=file, what="YAML")
    except TopologyError as exc:
        raise ScenarioError(exc.message, file=exc.file, line=exc.line, field=exc.field) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"a scenario is a mapping with 'steps', got {type(data).__name__}", file=file, line=1)
    if name and "name" not in data:
        data["name"] = name
    data["source"] = file
    return _validate(data, file=file, lines=lines)


def _validate(data: Mapping[str, Any], *, file: str | None, lines: Mapping[Loc, int], loc_map: Any = None) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = _strip_union_tags(tuple(err["loc"]))
            message = _pydantic_message(err)
            if err.get("type") == "union_tag_invalid":
                loc, message = (*loc, "action"), f"unknown action {err['ctx']['tag']!r} (known: {', '.join(_ACTIONS)})"
            elif err.get("type") == "union_tag_not_found":
                loc, message = (*loc, "action"), "required field is missing"
            src = tuple(loc_map(loc)) if loc_map else loc
            problems.append(ScenarioError(message, file=file, line=_line_of(src, lines), field=format_loc(src)))
        first, *rest = problems
        raise ScenarioError(first.message, file=first.file, line=first.line, field=first.field, others=rest) from None


def _strip_union_tags(loc: Loc) -> Loc:
    """pydantic puts the discriminator's value into the location (steps.2.kill.target): drop it."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if isinstance(part, str) and i >= 2 and loc[i - 2] == "steps" and isinstance(loc[i - 1], int):
            if part in _ACTIONS:
                continue
        out.append(part)
    return tuple(out)


#: every step's ``action``, in the order of AnyStep
_ACTIONS: tuple[str, ...] = tuple(get_args(cls.model_fields["action"].annotation)[0] for cls in get_args(AnyStep))


# -- the reference simulator's sequences ----------------------------------------------------------


def parse_reference_sequence(text: str, *, file: str | None = None, name: str | None = None) -> Scenario:
    """Translate ``{"EventSequence": [...]}`` into a Scenario (see the module docstring)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"JSON syntax error at column {exc.colno}: {exc.msg}", file=file, line=exc.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("EventSequence"), list):
        raise ScenarioError("a sequence is an object with an 'EventSequence' list", file=file, line=1,
                            field="EventSequence")  # fmt: skip
    lines = _command_lines(text)
    steps: list[dict[str, Any]] = []
    origin: list[int] = []  # steps[i] came from EventSequence[origin[i]]
    pending_after = 0.0
    for i, ev in enumerate(doc["EventSequence"]):
        where = {"file": file, "line": lines.get(i)}
        if not isinstance(ev, dict) or "Command" not in ev:
            raise ScenarioError("each event is an object with 'Command' and 'Data'", field=f"EventSequence[{i}]",
                                **where)  # fmt: skip
        cmd, data = ev["Command"], ev.get("Data") or {}
        if not isinstance(data, dict):
            raise ScenarioError("'Data' must be an object", field=f"EventSequence[{i}].Data", **where)
        try:
            step = _reference_step(cmd, data)
        except KeyError as exc:
            raise ScenarioError("required field is missing", field=f"EventSequence[{i}].Data.{exc.args[0]}",
                                **where) from None  # fmt: skip
        except ValueError as exc:
            raise ScenarioError(str(exc.args[0]), field=f"EventSequence[{i}].{exc.args[1] if len(exc.args) > 1 else 'Data'}",
                                **where) from None  # fmt: skip
        if step is None:  # Delay: folded into the next step's after_s
            pending_after += _delay_s(data, i, where)
            continue
        step["after_s"] = pending_after
        pending_after = 0.0
        steps.append(step)
        origin.append(i)
    if pending_after or not steps:
        steps.append({"action": "wait", "s": 0.0, "after_s": pending_after})
        origin.append(max(len(doc["EventSequence"]) - 1, 0))
    data = {"name": name or "sequence", "traffic": None, "builds_network": True, "steps": steps, "source": file,
            "description": "translated from the reference simulator's sequence format"}  # fmt: skip
    ref_lines = {("steps", j): lines[o] for j, o in enumerate(origin) if o in lines}

    def loc_map(loc: Loc) -> Loc:
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            return ("EventSequence", origin[loc[1]], *loc[2:])
        return loc

    lines_by_src = {("EventSequence", origin[j]): ln for (_, j), ln in ref_lines.items()}
    return _validate(data, file=file, lines=lines_by_src, loc_map=loc_map)


def _delay_s(data: Mapping[str, Any], i: int, where: dict[str, Any]) -> float:
    try:
        ms = float(data["Length"])
    except KeyError:
        raise ScenarioError("required field is missing", field=f"EventSequence[{i}].Data.Length", **where) from None
    except (TypeError, ValueError):
        raise ScenarioError(f"Length must be milliseconds, got {data['Length']!r}",
                            field=f"EventSequence[{i}].Data.Length", **where) from None  # fmt: skip
    if ms < 0:
        raise ScenarioError("Length must not be negative", field=f"EventSequence[{i}].Data.Length", **where)
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
        rates = data["DropRates"]
        if not isinstance(rates, dict):
            raise ValueError("DropRates must be an object", "Data.DropRates")
        drop: dict[str, float] = {}
        for key, value in rates.items():
            if key not in _REFERENCE_DROP_KEYS:
                raise ValueError(f"unknown DropRates key {key!r} (known: {', '.join(_REFERENCE_DROP_KEYS)})",
                                 f"Data.DropRates.{key}")  # fmt: skip
            try:
                drop[_REFERENCE_DROP_KEYS[key]] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"a drop rate is a percentage, got {value!r}", f"Data.DropRates.{key}") from None
        step: dict[str, Any] = {"action": "adversary", "target": data["Node"], "drop": drop, "check": False}
        if cmd == "ConfigureAdversaryPeer":
            step["peer"] = data["Peer"]
        return step
    if cmd == "StartPings":
        return {"action": "traffic", "enabled": True}
    if cmd == "StopPings":
        return {"action": "traffic", "enabled": False}
    raise ValueError(f"unknown command {cmd!r}", "Command")


def _command_lines(text: str) -> dict[int, int]:
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
