"""Protocol variants and knobs, by name (PROTOCOL.md §6, §7; docs/variants.md).

A :class:`VariantSpec` is what a user writes (``snek``, ``snek,root_filter=1``, ``legacy``) and what a
run records: a variant of :data:`VARIANTS` plus knob settings of :data:`KNOBS`. It is parsed once,
validated against the registries, and turned into router options with :meth:`VariantSpec.router_options`.
Its canonical text (:meth:`VariantSpec.__str__`) lists knobs in name order and only those that differ from
their defaults, so two specs that behave the same print the same.

Each variant is one module of the core behind :class:`~node.core.snek_api.SnekStrategy` (the registry
only names it) and owns the handshake capabilities it advertises: two nodes peer only when those match
exactly (§3.2, §7.4), so :meth:`VariantSpec.peering_refusal` is the reason a handshake between them fails.
Knobs never change the wire format: nodes with different knobs of one variant interoperate.

A spec may also name another **implementation**: ``pinecone`` is the Pinecone reference itself (the Go program
``node/pinecone`` on github.com/matrix-org/pinecone, docs/interop.md), run as a node of its own by the real-time
backends. The registry knows it (:attr:`Variant.implementation` ``"reference"``), so it is accepted wherever a
spec is; snekbed's router never runs it (:meth:`VariantSpec.router_options` refuses), and only the knobs the
reference's public API can set may differ from their defaults (:attr:`Variant.fixed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .codec import CAPABILITIES
from .planted import parse_planted_bug
from .snek import EXPIRY_S
from .snek_api import SnekFactory
from .snek_legacy import LEGACY_EXPIRY_S, SnekLegacy
from .snek_reference import SnekReference
from .snek_s0 import SnekS0
from .state import Timers

__all__ = ["KNOBS", "VARIANTS", "Knob", "Variant", "VariantError", "VariantSpec", "register", "variants_advertising"]


class VariantError(ValueError):
    """A variant spec that names an unknown variant or knob, or gives a knob a bad value."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One SNEK variant: its strategy module, its handshake capabilities, where it comes from."""

    name: str
    factory: SnekFactory
    capabilities: int
    seeds: str
    summary: str
    #: knob defaults of this variant where they differ from the knob's own (legacy: entry_expiry 3600 s)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: routes left by a lost node linger until ``entry_expiry`` (soft state); False when they are torn down
    soft_state: bool = True
    #: who runs it: ``"snekbed"`` (this router) or ``"reference"`` (the Pinecone reference's own code)
    implementation: str = "snekbed"
    #: knobs this implementation cannot change (constants of its code): a spec may not set them
    fixed: tuple[str, ...] = ()
    #: the variant of this router whose rules another implementation runs (pinecone: snek)
    protocol: str = ""

    def default(self, knob: str) -> Any:
        return self.defaults.get(knob, KNOBS[knob].default)


@dataclass(frozen=True, slots=True)
class Knob:
    """A what-if setting on top of any variant. ``parse`` turns the text form into the value (ValueError)."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    unit: str
    help: str


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (1/0, true/false, yes/no, on/off)")


def _seconds(lo: float, hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        v = float(text)
        if not lo <= v <= hi:
            raise ValueError(f"{v:g} s is outside {lo:g}..{hi:g} s")
        return v

    return parse


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("root_filter", False, _bool, "bool",
             "ignore SNEK routing entries installed under a root other than ours (next hop, step 6)"),
        Knob("bootstrap_interval", Timers().bootstrap_interval_s, _seconds(0.5, 3600), "s",
             "seconds between a node's bootstraps (§6.7 step 3; legacy: unused, it bootstraps on demand)"),
        Knob("entry_expiry", EXPIRY_S, _seconds(1.0, 86_400), "s",
             "lifetime of a routing-table entry and of the descending entry without a refresh (§6.7; legacy: 3600)"),
        Knob("hop_limiting", False, _bool, "bool", "decrement traffic hop limits and drop at zero (§4.9)"),
        Knob("bootstrap_min_gap", 0.0, _seconds(0.0, 60), "s",
             "reject a bootstrap whose origin's route was installed or refreshed under the same root less than this "
             "long ago (reason rate): a flood mitigation, not in the spec (docs/attacks.md); 0 is off"),
        Knob("wakeup_broadcasts", True, _bool, "bool", "send wakeup broadcasts (§6.8)"),
        Knob("planted_bug", "", parse_planted_bug, "name",
             "TEST ONLY: a routing bug planted on purpose (node.core.planted; docs/chaos.md); '' is none"),
    )
}  # fmt: skip

VARIANTS: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant to :data:`VARIANTS` (its module calls this once, at import)."""
    VARIANTS[variant.name] = variant
    return variant


register(Variant("snek", SnekReference, CAPABILITIES, "001/004 as the reference code runs them",
                 "the current Pinecone reference: bootstraps every 5 s, watermarks, link refinement"))  # fmt: skip
register(Variant("snek-s0", SnekS0, CAPABILITIES, "000",
                 "seed S0's own rules on the reference's frames: no watermarks, no link refinement, "
                 "exact-match-only peer ancestors, bootstraps every 5 s and never sooner"))  # fmt: skip
register(Variant("legacy", SnekLegacy, 0x8000003B, "002/003",
                 "the older snake (§7): ascending/descending paths set up and torn down explicitly, 1 h hard state, "
                 "no watermarks, frame types 0xE0-0xE3", defaults={"entry_expiry": LEGACY_EXPIRY_S}, soft_state=False,
                 fixed=("bootstrap_min_gap",)))  # fmt: skip
register(Variant("pinecone", SnekReference, CAPABILITIES, "the reference's own code",
                 "the Pinecone reference implementation itself (node/pinecone on github.com/matrix-org/pinecone, "
                 "docs/interop.md), as a node of its own: Docker and swarm backends only",
                 implementation="reference", fixed=("root_filter", "bootstrap_interval", "entry_expiry", "planted_bug",
                                                              "bootstrap_min_gap"),
                 protocol="snek"))  # fmt: skip


def variants_advertising(capabilities: int) -> str:
    """Which variants advertise ``capabilities`` in their handshake, in words (for refusal messages)."""
    names = sorted(v.name for v in VARIANTS.values() if v.capabilities == capabilities)
    if not names:
        return f"capabilities 0x{capabilities:08x} (no variant known here)"
    return f"variant {' or '.join(names)} (capabilities 0x{capabilities:08x})"


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """A variant and knob settings (only those that differ from the variant's default, sorted by name)."""

    name: str = "snek"
    knobs: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.name not in VARIANTS:
            raise VariantError(f"unknown variant {self.name!r} (known: {', '.join(sorted(VARIANTS))})")
        for k, v in self.knobs:
            if k not in KNOBS:
                raise VariantError(f"unknown knob {k!r} (known: {', '.join(KNOBS)})")
            variant = VARIANTS[self.name]
            if k in variant.fixed and v != variant.default(k):
                settable = ", ".join(x for x in KNOBS if x not in variant.fixed)
                raise VariantError(f"variant {self.name} fixes {k} at {_text(variant.default(k))} (a constant of "
                                   f"the {variant.implementation} implementation); it can set only {settable}")

    # ------------------------------------------------------------------ building

    @classmethod
    def of(cls, name: str = "snek", knobs: Mapping[str, Any] | Iterable[str] = ()) -> VariantSpec:
        """From a variant name and knobs as a mapping (values or their text) or ``key=value`` strings."""
        variant = VARIANTS.get(name)
        if variant is None:
            raise VariantError(f"unknown variant {name!r} (known: {', '.join(sorted(VARIANTS))})")
        values = _knob_values(knobs)
        return cls(name, tuple(sorted((k, v) for k, v in values.items() if v != variant.default(k))))

    @classmethod
    def parse(cls, text: str) -> VariantSpec:
        """``NAME[,knob=value...]`` as on the command line (``snek,root_filter=1``)."""
        parts = [p.strip() for p in str(text).split(",")]
        if not parts[0]:
            raise VariantError(f"variant spec {text!r} has no variant name")
        return cls.of(parts[0], [p for p in parts[1:] if p])

    def with_knobs(self, knobs: Mapping[str, Any] | Iterable[str]) -> VariantSpec:
        """This spec with more knobs (later settings win, a knob set back to its default included)."""
        return VariantSpec.of(self.name, {**dict(self.knobs), **_knob_values(knobs)})

    # ------------------------------------------------------------------ reading

    def __str__(self) -> str:
        return ",".join([self.name, *(f"{k}={_text(v)}" for k, v in self.knobs)])

    def knob(self, name: str) -> Any:
        """The value of knob ``name`` (the variant's default when not set). KeyError for an unknown knob."""
        return dict(self.knobs).get(name, self.variant.default(name))

    def knob_values(self) -> dict[str, Any]:
        """Every knob with its value, defaults included (for meta.json, /state, node_started)."""
        return {k: self.knob(k) for k in KNOBS}

    @property
    def variant(self) -> Variant:
        return VARIANTS[self.name]

    @property
    def capabilities(self) -> int:
        return self.variant.capabilities

    @property
    def implementation(self) -> str:
        """``"snekbed"`` for a variant of this router, ``"reference"`` for the Pinecone reference (``pinecone``)."""
        return self.variant.implementation

    def as_protocol(self) -> VariantSpec:
        """The variant of this router whose rules the spec's implementation runs, with the same knobs
        (``pinecone,hop_limiting=1`` -> ``snek,hop_limiting=1``; a spec of this router is itself)."""
        return VariantSpec.of(self.variant.protocol, dict(self.knobs)) if self.variant.protocol else self

    def peering_refusal(self, other: VariantSpec) -> str | None:
        """Why a node running ``self`` and one running ``other`` cannot peer (None when they can)."""
        if self.capabilities == other.capabilities:
            return None
        return (f"variant {other.name} advertises capabilities 0x{other.capabilities:08x}, "
                f"variant {self.name} needs exactly 0x{self.capabilities:08x}")  # fmt: skip

    def slowest(self, specs: Iterable[VariantSpec]) -> tuple[float, float]:
        """(bootstrap interval, entry expiry) that bound re-convergence in a network of ``specs`` and this
        one: the longest of each, the expiry counting only soft-state variants (else the default 10 s)."""
        every = [self, *specs]
        interval = max(float(s.knob("bootstrap_interval")) for s in every)
        expiry = max((float(s.knob("entry_expiry")) for s in every if s.variant.soft_state), default=EXPIRY_S)
        return interval, expiry

    def timers(self, base: Timers | None = None) -> Timers:
        """``base`` (default timers) with this spec's bootstrap interval."""
        base = base or Timers()
        interval = dict(self.knobs).get("bootstrap_interval")
        return base if interval is None else replace(base, bootstrap_interval_s=float(interval))

    def router_options(self, base: Timers | None = None) -> dict[str, Any]:
        """Keyword arguments for :class:`~node.core.router.Router` that make it run this spec. Raises
        VariantError for a spec of another implementation (``pinecone``): this router never runs it."""
        if self.implementation != "snekbed":
            raise VariantError(f"{self} is the Pinecone reference implementation (node/pinecone, docs/interop.md), "
                               "not a variant of snekbed's router: it runs as a node of its own, on the Docker "
                               "and swarm backends")
        return {
            "snek": self.name,
            "timers": self.timers(base),
            "hop_limiting": bool(self.knob("hop_limiting")),
            "broadcasts": bool(self.knob("wakeup_broadcasts")),
            "knobs": self.knob_values(),
        }

    def to_dict(self) -> dict[str, Any]:
        """What a run records: ``{"variant": name, "knobs": {set knobs}, "spec": text}``."""
        return {"variant": self.name, "knobs": dict(self.knobs), "spec": str(self)}


def _knob_values(knobs: Mapping[str, Any] | Iterable[str]) -> dict[str, Any]:
    """Knobs given as a mapping (values or their text) or ``key=value`` strings -> {name: parsed value}."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(knobs, Mapping):
        pairs = list(knobs.items())
    else:
        for item in knobs:
            name, sep, text = str(item).partition("=")
            if not sep or not name.strip():
                raise VariantError(f"knob {item!r} is not key=value")
            pairs.append((name.strip(), text.strip()))
    values: dict[str, Any] = {}
    for k, v in pairs:
        knob = KNOBS.get(k)
        if knob is None:
            raise VariantError(f"unknown knob {k!r} (known: {', '.join(KNOBS)})")
        try:
            values[k] = knob.parse(v) if isinstance(v, str) else knob.parse(str(int(v) if isinstance(v, bool) else v))
        except ValueError as exc:
            raise VariantError(f"knob {k}={v!r}: {exc}") from None
    return values


def _text(v: Any) -> str:
    if v == "":
        return "''"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
