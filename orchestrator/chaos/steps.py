"""The steps of a chaos scenario: one pydantic class per ``action`` (orchestrator.chaos.scenario loads files).

Each step class validates its own fields; :data:`AnyStep` is the union orchestrator.chaos.apply dispatches on and
:data:`Step` the same union discriminated by ``action``, as a scenario file gives it. Times are finite and bounded
(:data:`MAX_WAIT_S`): a wait of ``.inf`` or ``1e9`` seconds is refused when the file is loaded.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from node.core.variants import VariantSpec
from orchestrator.model.mobility_spec import GaussMarkovSpec, RandomWaypointSpec, SpeedRange, StaticSpec
from orchestrator.model.topology import NODE_NAME_RE, TopologyError

__all__ = [
    "ADVERSARY_DROP_KINDS", "AnyStep", "INVARIANTS", "LINK_ROLES", "MAX_WAIT_S", "NODE_ROLES", "REFERENCE_DROP_KEYS",
    "ScenarioError", "Step", "TrafficSpec",
]  # fmt: skip

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
REFERENCE_DROP_KEYS = {
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


#: the longest any time of a scenario may be (a wait, a delay, a settle window, a pause, a churn): one day. A
#: wait of ``.inf`` or ``1e9`` seconds would never end; it is refused when the file is loaded.
MAX_WAIT_S = 86_400.0
#: a number of seconds: finite (``.inf`` and ``.nan`` are refused: ``allow_inf_nan=False``), 0 up to MAX_WAIT_S
_SECONDS = {"ge": 0, "le": MAX_WAIT_S}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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

    after_s: float = Field(0.0, **_SECONDS, description="seconds after the previous step ended")
    settle_s: float | None = Field(None, **_SECONDS, description="checker settle window (default: the scenario's)")
    check: bool | None = Field(None, description="run the checker after this step (default: after faults)")
    expect: dict[InvariantName, bool] = Field(default_factory=dict, description="invariants expected to break: false")
    note: str | None = None
    #: the checker runs at most this many seconds after the step's fault, however long re-convergence and the settle
    #: window would take; the next step's ``after_s`` then counts from the fault, the check inside it. A reference
    #: sequence gives its faults the time until their next command (docs/chaos.md, "Reference sequences judged").
    check_within_s: float | None = Field(None, **_SECONDS)

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
    for_s: float | None = Field(None, gt=0, le=MAX_WAIT_S)


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
    period_s: float = Field(2.0, gt=0, le=MAX_WAIT_S)
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
    duration_s: float = Field(60.0, gt=0, le=MAX_WAIT_S)
    down_s: float = Field(5.0, gt=0, le=MAX_WAIT_S)


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


#: the models a mobility step may give a node (orchestrator.model.mobility_change)
ChangeModel = Annotated[Union[StaticSpec, RandomWaypointSpec, GaussMarkovSpec], Field(discriminator="model")]


class Mobility(_Step):
    """Change how the nodes move (a topology with radios; docs/mobility.md): ``movement: stop`` halts every node
    where it is, ``movement: start`` moves them again for ``for_s`` (default the topology's ``movement.duration_s``);
    ``speed_mps`` changes the speed of ``nodes`` or of a ``group``'s reference point, ``model`` gives ``nodes`` a
    new model, ``position`` puts ``nodes`` there (standing, unless ``model`` says how they go on). Not a fault:
    the checker runs after it only when ``check: true`` (the watch runs while nodes move)."""

    action: Literal["mobility"]
    movement: Literal["stop", "start"] | None = None
    for_s: float | None = Field(None, gt=0, le=MAX_WAIT_S)
    nodes: tuple[str, ...] = ()
    group: str | None = None
    speed_mps: SpeedRange | None = None
    model: ChangeModel | None = None
    position: tuple[float, float] | None = None
    FAULT: ClassVar[bool] = False

    @field_validator("speed_mps")
    @classmethod
    def _ordered(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and v[0] > v[1]:
            raise ValueError(f"[min, max] with min {v[0]:g} above max {v[1]:g}")
        return v

    @model_validator(mode="after")
    def _something(self) -> Mobility:
        changes = self.speed_mps is not None or self.model is not None or self.position is not None
        if self.movement is None and not changes:
            raise ValueError("a mobility step needs 'movement' (stop, start), 'speed_mps', 'model' or 'position'")
        if self.for_s is not None and self.movement != "start":
            raise ValueError("'for_s' is how long a 'movement: start' moves the nodes")
        if self.speed_mps is not None and self.model is not None:
            raise ValueError("give 'speed_mps' or a 'model' (with its own speed), not both")
        if self.group is not None and (self.nodes or self.model is not None or self.position is not None):
            raise ValueError("'group' takes 'speed_mps' only (its reference point's speed); name 'nodes' for the rest")
        if changes and not self.nodes and self.group is None:
            raise ValueError("name the 'nodes' (or, for 'speed_mps', a 'group') the change is for")
        for name in self.nodes:
            if not NODE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a node name")
        return self


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
    within_s: float = Field(120.0, gt=0, le=MAX_WAIT_S)
    s: float | None = Field(None, **_SECONDS)
    FAULT: ClassVar[bool] = False

    @model_validator(mode="after")
    def _one_way(self) -> Wait:
        if (self.until is None) == (self.s is None):
            raise ValueError("give 'until: converged' (with 'within_s') or 's' (seconds)")
        return self


class Check(_Step):
    """Run the checker now (no fault). ``reconvergence``: judge ``reconverged_within_bound`` too, timed from this
    step (the check at the end of a reference sequence: from its last command)."""

    action: Literal["check"]
    reconvergence: bool = False
    FAULT: ClassVar[bool] = True


class Note(_Step):
    """A reference UI command (Debug, Play, Pause) or a comment: recorded, nothing done."""

    action: Literal["note"]
    FAULT: ClassVar[bool] = False


#: One step of any action: orchestrator.chaos.apply dispatches on the class (a ``match``, checked exhaustive).
AnyStep = Union[
    Kill, Restart, Pause, Resume, RemoveNode, Partition, Heal, LinkDown, LinkUp, Flap, LinkChange, Churn, Join,
    Adversary, Traffic, Wait, Check, Note, Mobility,
]  # fmt: skip
#: A step as a scenario file gives it: the class is chosen by ``action``.
Step = Annotated[AnyStep, Field(discriminator="action")]


#: every step's ``action``, in the order of AnyStep
_ACTIONS: tuple[str, ...] = tuple(get_args(cls.model_fields["action"].annotation)[0] for cls in get_args(AnyStep))
