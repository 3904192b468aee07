"""The steps of a chaos scenario: one pydantic class per ``action`` (orchestrator.chaos.scenario loads files).

Each step class validates its own fields; :data:`AnyStep` is the union orchestrator.chaos.apply dispatches on and
:data:`Step` the same union discriminated by ``action``, as a scenario file gives it. Times are finite and bounded
(:data:`MAX_WAIT_S`): a wait of ``.inf`` or ``1e9`` seconds is refused when the file is loaded.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from node.core.attacks import STRATEGIES, make_strategy
from node.core.grind import DEFAULT_MAX_TRIES, MAX_TRIES
from node.core.variants import VariantSpec
from orchestrator.model.mobility_spec import GaussMarkovSpec, RandomWaypointSpec, SpeedRange, StaticSpec
from orchestrator.model.topology import NODE_NAME_RE, TopologyError

__all__ = [
    "ADVERSARY_DROP_KINDS", "AnyStep", "HOST_ROLES", "HostCrash", "HostPartition", "HostRestart",
    "INVARIANTS", "LINK_ROLES", "MAX_WAIT_S", "NODE_ROLES", "REFERENCE_DROP_KEYS",
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

#: Roles a host target may name instead of a host (resolved on the live run when the step runs).
HOST_ROLES = ("root_host", "busiest_host")
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

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
    """The background ping mesh: ``rate_per_s`` pings a second over ``pairs`` sampled pairs, in each mode; with
    ``focus``, every pair to and from those nodes takes every other turn (targets.with_focus)."""

    rate_per_s: float = Field(4.0, ge=0, le=1000)
    pairs: int = Field(20, ge=1, le=10_000)
    modes: tuple[Literal["snek", "tree"], ...] = ("snek", "tree")
    timeout_s: float = Field(5.0, gt=0, le=60)
    focus: tuple[str, ...] = ()

    @field_validator("focus")
    @classmethod
    def _node_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not NODE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a node name")
        return v


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
    #: a node, a role, or a list of nodes: every node of the list in one step, applied and confirmed together
    target: str | tuple[str, ...]
    count: int = Field(1, ge=1, description="how many nodes for the roles random, root_children, all")

    @field_validator("target")
    @classmethod
    def _target(cls, v: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(v, str):
            return _check_target(v, NODE_ROLES, "target")  # type: ignore[return-value]
        if not v:
            raise ValueError("target: an empty list names no node")
        for name in v:
            if name in NODE_ROLES or not NODE_NAME_RE.match(name):
                raise ValueError(f"target {name!r} is not a node name (a list names nodes, never roles)")
        repeated = sorted({n for n in v if v.count(n) > 1})
        if repeated:
            raise ValueError(f"target names {', '.join(repeated)} more than once")
        return v

    @property
    def named(self) -> tuple[str, ...]:
        """The nodes the target names (none for a role)."""
        if isinstance(self.target, tuple):
            return self.target
        return () if self.target in NODE_ROLES else (self.target,)


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

    @field_validator("target")
    @classmethod
    def _one(cls, v: str | tuple[str, ...]) -> str | tuple[str, ...]:
        if isinstance(v, tuple):
            raise ValueError("remove_node takes one node, not a list")
        return v


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


class GroundKey(_Model):
    """A joining node's key, ground (node.core.grind): ``near: VICTIM`` with ``side`` above or below (next to
    the victim in the snake), or ``above_all: true`` (above every honest key: the root). Seeded by the run's seed,
    at most ``max_tries`` keys tried."""

    near: str | None = None
    side: Literal["above", "below"] = "above"
    above_all: bool = False
    max_tries: int = Field(DEFAULT_MAX_TRIES, ge=1, le=MAX_TRIES)

    @model_validator(mode="after")
    def _one_way(self) -> GroundKey:
        if (self.near is None) == (not self.above_all):
            raise ValueError("give 'near: VICTIM' (with 'side: above|below') or 'above_all: true'")
        if self.near is not None and not NODE_NAME_RE.match(self.near):
            raise ValueError(f"near: {self.near!r} is not a node name")
        return self


class Join(_Step):
    """A node joins (``node`` + ``peers``), or a link is added between existing nodes (``link``)."""

    action: Literal["join"]
    node: str | None = None
    peers: tuple[str, ...] = ()
    link: tuple[str, str] | None = None
    link_class: str = Field("pipe", alias="class")
    adversary: bool = False
    variant: str | None = Field(None, description="the joining node's protocol variant spec (default: the run's)")
    key: GroundKey | None = Field(None, description="a key ground for the joining node (docs/attacks.md)")

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
        if self.key is not None and self.node is None:
            raise ValueError("'key' belongs to a joining 'node', not to a 'link'")
        for name in (self.node, *self.peers, *(self.link or ())):
            if name is not None and not NODE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a node name")
        return self


#: adversary strategies (node.core.attacks; docs/attacks.md): ``drop`` and the others
StrategyName = Literal["drop", "greyhole", "sybil", "root_takeover", "bootstrap_flood", "announcement_flood",
                       "replay", "forge", "none"]  # fmt: skip
#: the strategy parameters a step may give (each strategy takes its own: node.core.attacks.STRATEGIES)
STRATEGY_PARAMS = ("forward", "seed", "victim", "mode", "period_s", "multiple", "interval_s", "rate_per_s", "kinds")


class Adversary(_NodeStep):
    """The target turns adversary. ``strategy: drop`` (the default when ``drop`` is given): it drops received
    frames by kind at ``drop`` percentages (0-100), from every peer or ``peer``. Any other strategy
    (node.core.attacks, docs/attacks.md) with its parameters; ``none``: honest again."""

    action: Literal["adversary"]
    strategy: StrategyName | None = None
    drop: dict[DropKind, float] | None = None
    peer: str | None = None
    forward: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    victim: str | None = None
    mode: Literal["drop", "withhold", "rejoin"] | None = None
    period_s: float | None = Field(None, **_SECONDS)
    multiple: float | None = Field(None, ge=1, le=10_000)
    interval_s: float | None = Field(None, ge=0.01, le=MAX_WAIT_S)
    rate_per_s: float | None = Field(None, gt=0, le=1000)
    kinds: tuple[str, ...] | None = None

    @property
    def kind(self) -> str:
        """The strategy: ``drop`` unless another is named."""
        return self.strategy or "drop"

    def params(self) -> dict[str, Any]:
        """The strategy's parameters as given (``victim`` still a node name)."""
        return {k: getattr(self, k) for k in STRATEGY_PARAMS if getattr(self, k) is not None}

    @model_validator(mode="after")
    def _strategy_fields(self) -> Adversary:
        kind, params = self.kind, self.params()
        if kind == "drop":
            if self.drop is None:
                raise ValueError("give 'drop' ({kind: percent}) or a 'strategy' (docs/attacks.md)")
            if params:
                raise ValueError(f"{', '.join(params)}: not a parameter of the drop strategy (name a 'strategy')")
            return self
        if self.drop is not None or self.peer is not None:
            raise ValueError(f"'drop' and 'peer' belong to the drop strategy, not to {kind}")
        known = STRATEGIES[kind][1]
        extra = [k for k in params if k not in known]
        if extra:
            raise ValueError(f"{', '.join(extra)}: not a parameter of {kind} (its parameters: {', '.join(known) or 'none'})")
        if self.victim is not None and not NODE_NAME_RE.match(self.victim):
            raise ValueError(f"victim: {self.victim!r} is not a node name")
        make_strategy(kind, {**params, **({"victim": "00" * 32} if "victim" in params else {})})
        return self

    @field_validator("drop")
    @classmethod
    def _percent(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for k, pct in (v or {}).items():
            if not 0 <= pct <= 100:
                raise ValueError(f"drop rate for {k} must be 0-100 (percent), got {pct}")
        return v


class _HostStep(_Step):
    """A fault of a whole host of a multi-host swarm (``snekbed cluster``; docs/multi-host.md): ``host`` is a swarm
    node's hostname (``h2``) or a role: ``root_host`` (the host running the root), ``busiest_host`` (the most
    live nodes)."""

    host: str

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if v in HOST_ROLES or _HOST_NAME_RE.match(v):
            return v
        raise ValueError(f"host {v!r} is neither a hostname nor a role ({', '.join(HOST_ROLES)})")


class HostCrash(_HostStep):
    """The host stops at once (its engine killed): every node on it dies together; peers elsewhere see no FIN."""

    action: Literal["host_crash"]


class HostRestart(_HostStep):
    """The host comes back (crashed first if it runs): its engine starts, and the nodes it ran start again."""

    action: Literal["host_restart"]


class HostPartition(_HostStep):
    """The host is cut off the other hosts' overlays (VXLAN dropped both ways) for ``for_s`` (else until ``heal``):
    its nodes run on, every link that crosses to it is cut."""

    action: Literal["host_partition"]
    for_s: float | None = Field(None, gt=0, le=MAX_WAIT_S)


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
    Adversary, Traffic, Wait, Check, Note, Mobility, HostCrash, HostRestart, HostPartition,
]  # fmt: skip
#: A step as a scenario file gives it: the class is chosen by ``action``.
Step = Annotated[AnyStep, Field(discriminator="action")]


#: every step's ``action``, in the order of AnyStep
_ACTIONS: tuple[str, ...] = tuple(get_args(cls.model_fields["action"].annotation)[0] for cls in get_args(AnyStep))
