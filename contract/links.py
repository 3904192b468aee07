"""Link classes as data: what a link between two nodes looks like.

A :class:`LinkShape` is the set of impairments for ONE direction of a link; every
backend applies it to each direction independently (each endpoint shapes what it
sends, or, for loss on the ``kernel-partial`` backend, what it receives from the
peer: see :mod:`netem.plan`). A :class:`LinkClass` names a shape, the peer link
type the node uses in next-hop refinement (PROTOCOL.md section 3.4) and a one-line
rationale for the numbers.

The default table ships as ``contract/classes.yaml`` (package data). Topologies can
override fields of a default class or add classes of their own through
:func:`resolve_class` / :func:`merge_classes`.

The link type names and numbers (``LINK_TYPE_NUMBERS``, ``LINK_TYPE_NAMES``) are
defined here once; ``node.core.types.LinkType`` is the core's ``IntEnum`` of the same
numbers, and a test checks that the two agree.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "DEFAULT_QUEUE_PKTS",
    "LINK_TYPE_NAMES",
    "LINK_TYPE_NUMBERS",
    "InvalidLinkClass",
    "LinkClass",
    "LinkClassError",
    "LinkShape",
    "LinkType",
    "ShapeRationale",
    "UnknownLinkClass",
    "default_classes",
    "link_type_number",
    "load_classes",
    "merge_classes",
    "resolve_class",
]

LinkType = Literal["pipe", "multicast", "bonjour", "remote", "bluetooth"]

#: PROTOCOL.md section 3.4: a lower number is preferred ("faster").
LINK_TYPE_NUMBERS: dict[str, int] = {"pipe": 0, "multicast": 1, "bonjour": 2, "remote": 3, "bluetooth": 4}

#: Link type number -> name (the ``class`` the node's ``GET /state`` shows for a peer).
LINK_TYPE_NAMES: dict[int, str] = {number: name for name, number in LINK_TYPE_NUMBERS.items()}

#: Queue bound (packets) used when a shape has a rate but no ``queue_limit_pkts``:
#: Linux's default ``txqueuelen``, so the kernel and userspace backends agree.
DEFAULT_QUEUE_PKTS = 1000

_MAX_DELAY_MS = 60_000.0  # a minute one way is a broken link, not a slow one
_MAX_RATE_MBIT = 100_000.0  # 100 Gbit/s


class LinkClassError(Exception):
    """Base: a link class is unknown or does not validate."""


class UnknownLinkClass(LinkClassError, KeyError):
    """A topology asked for a link class that neither the defaults nor its overrides define."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(name)

    def __str__(self) -> str:  # KeyError would print repr(name) only
        return f"unknown link class {self.name!r} (known: {', '.join(self.known)})"


class InvalidLinkClass(LinkClassError, ValueError):
    """A link class (default table or a topology override) failed validation."""

    def __init__(self, name: str, where: str, reason: str) -> None:
        self.name, self.where, self.reason = name, where, reason
        super().__init__(f"invalid link class {name!r} in {where}: {reason}")


class LinkShape(BaseModel):
    """Impairments for one direction of a link. All-default means "no shaping".

    Raises ``pydantic.ValidationError`` (a ``ValueError``) on out-of-range or
    inconsistent values; the message names the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    delay_ms: float = Field(0.0, ge=0, le=_MAX_DELAY_MS, description="mean one-way delay")
    jitter_ms: float = Field(0.0, ge=0, le=_MAX_DELAY_MS, description="uniform +/- spread around delay_ms")
    loss_pct: float = Field(0.0, ge=0, le=100, description="independent random loss, per packet/frame")
    rate_mbit: float | None = Field(None, gt=0, le=_MAX_RATE_MBIT, description="bottleneck rate; None = unlimited")
    duplicate_pct: float = Field(0.0, ge=0, le=100)
    corrupt_pct: float = Field(0.0, ge=0, le=100)
    reorder_pct: float = Field(0.0, ge=0, le=100, description="share sent without the delay (netem semantics)")
    queue_limit_pkts: int | None = Field(None, ge=1, le=1_000_000, description="bottleneck queue bound (tail drop)")

    @model_validator(mode="after")
    def _consistent(self) -> LinkShape:
        if self.jitter_ms > self.delay_ms:
            raise ValueError(
                f"jitter_ms ({self.jitter_ms:g}) exceeds delay_ms ({self.delay_ms:g}): delays would be "
                "clipped at 0 and the mean would drift above delay_ms"
            )
        if self.reorder_pct and not self.delay_ms:
            raise ValueError("reorder_pct needs delay_ms > 0: reordered frames are the ones sent without the delay")
        if self.queue_limit_pkts is not None and self.rate_mbit is None:
            raise ValueError("queue_limit_pkts needs rate_mbit: without a rate limit no queue builds up to bound")
        return self

    @property
    def is_noop(self) -> bool:
        """True when this shape changes nothing (the ``pipe`` class)."""
        return self == LinkShape()

    @property
    def effective_queue_pkts(self) -> int | None:
        """The queue bound every backend uses: ``queue_limit_pkts``, or ``DEFAULT_QUEUE_PKTS`` when rate-limited."""
        if self.rate_mbit is None:
            return None
        return self.queue_limit_pkts if self.queue_limit_pkts is not None else DEFAULT_QUEUE_PKTS


class ShapeRationale(BaseModel):
    """One line per :class:`LinkShape` field saying where its number comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delay_ms: str | None = None
    jitter_ms: str | None = None
    loss_pct: str | None = None
    rate_mbit: str | None = None
    duplicate_pct: str | None = None
    corrupt_pct: str | None = None
    reorder_pct: str | None = None
    queue_limit_pkts: str | None = None


class LinkClass(BaseModel):
    """A named kind of link: shape, the peer link type nodes see, and why the numbers are what they are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    link_type: LinkType
    shape: LinkShape = LinkShape()
    source: str = Field(min_length=1, max_length=300, pattern=r"^[^\n]+$", description="one-line source or rationale")
    rationale: ShapeRationale = ShapeRationale()

    @property
    def link_type_number(self) -> int:
        return LINK_TYPE_NUMBERS[self.link_type]


def link_type_number(cls: LinkClass | str) -> int:
    """The PROTOCOL.md section 3.4 number (0..4) of a class or a link type name.

    Raises ``ValueError`` for an unknown link type name.
    """
    link_type = cls.link_type if isinstance(cls, LinkClass) else cls
    try:
        return LINK_TYPE_NUMBERS[link_type]
    except KeyError:
        raise ValueError(f"unknown link type {link_type!r} (known: {', '.join(LINK_TYPE_NUMBERS)})") from None


def _validate_class(name: str, data: Mapping[str, Any], where: str) -> LinkClass:
    body = dict(data)
    if body.setdefault("name", name) != name:
        raise InvalidLinkClass(name, where, f"entry says name={body['name']!r} but is listed under {name!r}")
    try:
        return LinkClass.model_validate(body)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<class>'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidLinkClass(name, where, reasons) from exc


def load_classes(text: str, *, where: str = "<string>") -> dict[str, LinkClass]:
    """Parse a YAML mapping ``name -> {link_type, shape, source, rationale}`` into link classes.

    Raises InvalidLinkClass naming the class and ``where`` (a file name) on any bad entry.
    """
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidLinkClass("<table>", where, f"not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidLinkClass("<table>", where, f"expected a mapping of class names, got {type(raw).__name__}")
    out: dict[str, LinkClass] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise InvalidLinkClass(str(name), where, f"expected a mapping, got {type(body).__name__}")
        out[str(name)] = _validate_class(str(name), body, where)
    return out


@functools.cache
def _default_table() -> tuple[tuple[str, LinkClass], ...]:
    text = importlib.resources.files("contract").joinpath("classes.yaml").read_text(encoding="utf-8")
    return tuple(load_classes(text, where="contract/classes.yaml").items())


def default_classes() -> dict[str, LinkClass]:
    """The default table from ``contract/classes.yaml`` (a fresh dict; the classes are frozen)."""
    return dict(_default_table())


def _merge_one(name: str, base: LinkClass | None, override: LinkClass | Mapping[str, Any]) -> LinkClass:
    where = "topology overrides"
    if isinstance(override, LinkClass):
        if override.name != name:
            raise InvalidLinkClass(name, where, f"class object is named {override.name!r}")
        return override
    if not isinstance(override, Mapping):
        raise InvalidLinkClass(name, where, f"expected a LinkClass or a mapping, got {type(override).__name__}")
    if base is None:  # a new class: must be complete
        return _validate_class(name, override, where)
    merged: dict[str, Any] = base.model_dump(exclude_defaults=False)
    shape_override = override.get("shape")
    if isinstance(shape_override, Mapping):  # the default's reasons no longer hold for changed values
        merged["rationale"] = {k: v for k, v in merged["rationale"].items() if k not in shape_override}
    for key, value in override.items():
        if key in ("shape", "rationale") and isinstance(value, Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    if "source" not in override:
        changed = sorted(override.get("shape", {}) or {}) + sorted(k for k in override if k not in ("shape", "rationale"))
        merged["source"] = f"topology override of {name} ({', '.join(changed) or 'no fields'}); was: {base.source}"[:300]
    return _validate_class(name, merged, where)


def merge_classes(overrides: Mapping[str, LinkClass | Mapping[str, Any]] | None = None) -> dict[str, LinkClass]:
    """The default table with ``overrides`` applied.

    A mapping override of a known class is merged field by field onto the default
    (``{"bluetooth": {"shape": {"loss_pct": 5}}}`` keeps the rest of bluetooth); an
    override for a new name must be a complete class. Raises InvalidLinkClass.
    """
    table = default_classes()
    for name, override in (overrides or {}).items():
        table[name] = _merge_one(name, table.get(name), override)
    return table


def resolve_class(name: str, overrides: Mapping[str, LinkClass | Mapping[str, Any]] | None = None) -> LinkClass:
    """Look up ``name`` in the default table plus ``overrides``.

    Raises UnknownLinkClass (a KeyError; the message lists the known names) or
    InvalidLinkClass when an override does not validate.
    """
    overrides = overrides or {}
    if name in overrides:
        return _merge_one(name, default_classes().get(name), overrides[name])
    table = default_classes()
    if name not in table:
        raise UnknownLinkClass(name, set(table) | set(overrides))
    return table[name]
