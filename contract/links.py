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

The models are frozen dataclasses checked by hand (:mod:`contract.checks`), not pydantic
models: every node imports this module, and pydantic is 8-9 MiB of a node's memory.
Their errors carry pydantic's wording and, from the constructors, are pydantic's
``ValidationError`` (built only when a check fails).

The link type names and numbers (``LINK_TYPE_NUMBERS``, ``LINK_TYPE_NAMES``) are
defined here once; ``node.core.types.LinkType`` is the core's ``IntEnum`` of the same
numbers, and a test checks that the two agree.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, Self

import yaml

from contract.checks import Checker, Invalid, Problem, as_float, as_int, as_str, bounded, literal

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


def _finite(lo_key: str, lo: float, hi: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        return bounded(as_float(value, finite=True), value, le=hi, **{lo_key: lo})  # type: ignore[no-any-return]
    return check


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _queue(value: Any) -> int:
    return bounded(as_int(value), value, ge=1, le=1_000_000)  # type: ignore[no-any-return]


#: LinkShape's fields: name -> (default, check, description). The one place their ranges are written.
_SHAPE_FIELDS: dict[str, tuple[Any, Callable[[Any], Any], str]] = {
    "delay_ms": (0.0, _finite("ge", 0, _MAX_DELAY_MS), "mean one-way delay"),
    "jitter_ms": (0.0, _finite("ge", 0, _MAX_DELAY_MS), "uniform +/- spread around delay_ms"),
    "loss_pct": (0.0, _finite("ge", 0, 100), "independent random loss, per packet/frame"),
    "rate_mbit": (None, _optional(_finite("gt", 0, _MAX_RATE_MBIT)), "bottleneck rate; None = unlimited"),
    "duplicate_pct": (0.0, _finite("ge", 0, 100), ""),
    "corrupt_pct": (0.0, _finite("ge", 0, 100), ""),
    "reorder_pct": (0.0, _finite("ge", 0, 100), "share sent without the delay (netem semantics)"),
    "queue_limit_pkts": (None, _optional(_queue), "bottleneck queue bound (tail drop)"),
}


def _shape_rules(v: Mapping[str, Any]) -> str | None:
    """The rules across fields (checked once every field is valid): the first one broken, or None."""
    if v["jitter_ms"] > v["delay_ms"]:
        return (f"jitter_ms ({v['jitter_ms']:g}) exceeds delay_ms ({v['delay_ms']:g}): delays would be "
                "clipped at 0 and the mean would drift above delay_ms")
    if v["reorder_pct"] and not v["delay_ms"]:
        return "reorder_pct needs delay_ms > 0: reordered frames are the ones sent without the delay"
    if v["queue_limit_pkts"] is not None and v["rate_mbit"] is None:
        return "queue_limit_pkts needs rate_mbit: without a rate limit no queue builds up to bound"
    return None


class _Model:
    """Frozen dataclass plumbing shared by the link models: keyword construction checked by hand, and the
    parts of pydantic's model API the orchestrator and netem use (``model_validate``, ``model_dump``,
    ``model_copy``, ``model_fields``). A bad value raises ``pydantic.ValidationError`` from the constructor
    (pydantic is loaded then, on the error only); :meth:`parse` raises :class:`contract.checks.Invalid`
    and never loads it."""

    model_fields: ClassVar[dict[str, Any]]

    def __init__(self, **data: Any) -> None:
        try:
            values = self._check(data)
        except Invalid as exc:
            raise exc.as_pydantic() from None
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @classmethod
    def _check(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        """``data`` checked into an instance. Raises :class:`contract.checks.Invalid` (no pydantic)."""
        values = cls._check(data)
        obj = object.__new__(cls)
        for key, value in values.items():
            object.__setattr__(obj, key, value)
        return obj

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """An instance from a mapping (or the instance itself). Raises ``pydantic.ValidationError``."""
        if isinstance(data, cls):
            return data
        try:
            return cls.parse(_nested_mapping(cls, data))
        except (Invalid, Problem) as exc:
            raise _as_invalid(cls, exc).as_pydantic() from None

    def model_dump(self, *, exclude_defaults: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, default in self._defaults().items():
            value = getattr(self, name)
            if (exclude_defaults and value == default) or (exclude_none and value is None):
                continue
            out[name] = (value.model_dump(exclude_defaults=exclude_defaults, exclude_none=exclude_none)
                         if isinstance(value, _Model) else value)
        return out

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        return type(self)(**{**self.model_dump(), **(update or {})})

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def _nested_mapping(cls: type, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Problem("model_type", value, class_name=cls.__name__)
    return value


def _as_invalid(cls: type, exc: Invalid | Problem) -> Invalid:
    return exc if isinstance(exc, Invalid) else Invalid.of(cls.__name__, exc)


def _nested(cls: type[_Model]) -> Callable[[Any], Any]:
    """A field holding a model: an instance of it, or a mapping checked into one."""
    def check(value: Any) -> Any:
        return value if isinstance(value, cls) else cls.parse(_nested_mapping(cls, value))
    return check


@dataclasses.dataclass(frozen=True, init=False)
class LinkShape(_Model):
    """Impairments for one direction of a link. All-default means "no shaping".

    Raises ``pydantic.ValidationError`` (a ``ValueError``) on out-of-range or
    inconsistent values; the message names the field. ``LinkShape.parse`` checks the
    same without pydantic (raises :class:`contract.checks.Invalid`).
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    rate_mbit: float | None = None
    duplicate_pct: float = 0.0
    corrupt_pct: float = 0.0
    reorder_pct: float = 0.0
    queue_limit_pkts: int | None = None

    @classmethod
    def _check(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        checker = Checker("LinkShape", data, _SHAPE_FIELDS)
        values = {name: checker.field(name, check, default) for name, (default, check, _) in _SHAPE_FIELDS.items()}
        if not checker.errors:
            checker.rule(_shape_rules(values))
        checker.done()
        return values

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


LinkShape.model_fields = {name: description for name, (_, _, description) in _SHAPE_FIELDS.items()}


@dataclasses.dataclass(frozen=True, init=False)
class ShapeRationale(_Model):
    """One line per :class:`LinkShape` field saying where its number comes from."""

    delay_ms: str | None = None
    jitter_ms: str | None = None
    loss_pct: str | None = None
    rate_mbit: str | None = None
    duplicate_pct: str | None = None
    corrupt_pct: str | None = None
    reorder_pct: str | None = None
    queue_limit_pkts: str | None = None

    @classmethod
    def _check(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        checker = Checker("ShapeRationale", data, _SHAPE_FIELDS)
        values = {name: checker.field(name, _optional(as_str), None) for name in _SHAPE_FIELDS}
        checker.done()
        return values


ShapeRationale.model_fields = {name: "" for name in _SHAPE_FIELDS}

_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"


@dataclasses.dataclass(frozen=True, init=False)
class LinkClass(_Model):
    """A named kind of link: shape, the peer link type nodes see, and why the numbers are what they are."""

    name: str = ""
    link_type: LinkType = "pipe"
    shape: LinkShape = LinkShape()
    source: str = ""
    rationale: ShapeRationale = ShapeRationale()

    @classmethod
    def _check(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        checker = Checker("LinkClass", data, cls.model_fields)
        values = {
            "name": checker.field("name", lambda v: as_str(v, pattern=_NAME_PATTERN)),
            "link_type": checker.field("link_type", lambda v: literal(v, tuple(LINK_TYPE_NUMBERS))),
            "shape": checker.field("shape", _nested(LinkShape), LinkShape()),
            "source": checker.field("source", lambda v: as_str(v, min_length=1, max_length=300, pattern=r"^[^\n]+$")),
            "rationale": checker.field("rationale", _nested(ShapeRationale), ShapeRationale()),
        }
        checker.done()
        return values

    @property
    def link_type_number(self) -> int:
        return LINK_TYPE_NUMBERS[self.link_type]


LinkClass.model_fields = {"name": "", "link_type": "", "shape": "", "source": "one-line source or rationale",
                          "rationale": ""}


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
        return LinkClass.parse(body)
    except Invalid as exc:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<class>'}: {err['msg']}" for err in exc.errors()
        )
        # the cause is pydantic's error (the orchestrator reads its errors()); it is built on an error only
        raise InvalidLinkClass(name, where, reasons) from exc.as_pydantic()


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
