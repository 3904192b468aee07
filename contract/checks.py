"""Hand-written field checks with pydantic's error vocabulary, for code that must not load pydantic.

A node imports :mod:`contract.links` (the link-class table) and validates its admin API's bodies; pydantic
(with pydantic_core) is about 8-9 MiB of a node's resident memory, so neither uses it (docs/performance.md,
"A node's memory"). The checks here coerce like pydantic's lax mode does for the few types they need (a
number from an int, a bool or a numeric string; an int from an integral float) and report each problem as
pydantic does: an error dict with ``type``, ``loc``, ``msg``, ``input`` and ``ctx``, the message worded as
pydantic words it (tests/contract/test_contract_checks.py compares every wording with pydantic_core's own).

:meth:`Invalid.as_pydantic` turns the problems into a real ``pydantic.ValidationError`` for callers that catch
that (the orchestrator's topology validation); it imports pydantic_core only then, on an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Checker", "Invalid", "Problem", "as_dict", "as_float", "as_int", "as_str", "bounded", "literal", "message"]

Loc = tuple[str | int, ...]


class Problem(Exception):
    """One field's problem before it has a location: pydantic's error ``type`` and its ``ctx``."""

    def __init__(self, kind: str, value: Any, **ctx: Any) -> None:
        super().__init__(kind)
        self.kind, self.value, self.ctx = kind, value, ctx


def _number(x: float | int) -> str:
    """A bound as pydantic prints it: ``60000`` for 60000.0, ``0.5`` for 0.5."""
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


_TEMPLATES: dict[str, str] = {
    "missing": "Field required",
    "extra_forbidden": "Extra inputs are not permitted",
    "greater_than": "Input should be greater than {gt}",
    "greater_than_equal": "Input should be greater than or equal to {ge}",
    "less_than_equal": "Input should be less than or equal to {le}",
    "finite_number": "Input should be a finite number",
    "float_type": "Input should be a valid number",
    "float_parsing": "Input should be a valid number, unable to parse string as a number",
    "int_type": "Input should be a valid integer",
    "int_parsing": "Input should be a valid integer, unable to parse string as an integer",
    "int_from_float": "Input should be a valid integer, got a number with a fractional part",
    "string_type": "Input should be a valid string",
    "string_too_short": "String should have at least {min_length} character{s}",
    "string_too_long": "String should have at most {max_length} character{s}",
    "string_pattern_mismatch": "String should match pattern '{pattern}'",
    "literal_error": "Input should be {expected}",
    "dict_type": "Input should be a valid dictionary",
    "bool_type": "Input should be a valid boolean",
    "model_type": "Input should be a valid dictionary or instance of {class_name}",
    "value_error": "Value error, {error}",
}


def message(kind: str, ctx: Mapping[str, Any]) -> str:
    """The message pydantic gives an error of type ``kind`` with context ``ctx``."""
    shown = {k: _number(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in ctx.items()}
    count = ctx.get("min_length", ctx.get("max_length"))
    return _TEMPLATES[kind].format(**shown, s="" if count == 1 else "s")


@dataclass(frozen=True)
class _Error:
    kind: str
    loc: Loc
    value: Any
    ctx: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        out = {"type": self.kind, "loc": self.loc, "msg": message(self.kind, self.ctx), "input": self.value}
        return out | ({"ctx": dict(self.ctx)} if self.ctx else {})


class Invalid(ValueError):
    """Data that failed the checks: every problem found, in pydantic's order (fields, then the unknown ones)."""

    def __init__(self, title: str, errors: Iterable[_Error]) -> None:
        self.title, self._errors = title, tuple(errors)
        first = self.errors()[0]
        super().__init__(f"{title}: {'.'.join(str(p) for p in first['loc']) or '<object>'}: {first['msg']}")

    @classmethod
    def of(cls, title: str, problem: Problem, loc: Loc = ()) -> Invalid:
        """One problem at ``loc`` (the object itself by default)."""
        return cls(title, [_Error(problem.kind, loc, problem.value, problem.ctx)])

    def errors(self) -> list[dict[str, Any]]:
        """The problems as pydantic's ``ValidationError.errors()`` gives them (``type``, ``loc``, ``msg``, ...)."""
        return [e.as_dict() for e in self._errors]

    def as_pydantic(self) -> ValueError:
        """The same problems as a ``pydantic.ValidationError`` (its ``str()`` and ``errors()`` as pydantic's own)."""
        # Imported here, on an error only: a node that never sees bad input never loads pydantic_core (8 MiB).
        from pydantic_core import ValidationError  # noqa: PLC0415

        lines = [{"type": e.kind, "loc": e.loc, "input": e.value, "ctx": _pydantic_ctx(e.ctx)} for e in self._errors]
        return ValidationError.from_exception_data(self.title, lines)  # type: ignore[arg-type]


def _pydantic_ctx(ctx: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ValueError(v) if k == "error" else v for k, v in ctx.items()}


class Checker:
    """Collects the problems of one object's fields; :meth:`done` raises them together as :class:`Invalid`."""

    def __init__(self, title: str, data: Mapping[str, Any], known: Iterable[str], *, extra: bool = False,
                 loc: Loc = ()) -> None:
        self.title, self.data, self.loc = title, data, loc
        self.errors: list[_Error] = []
        self.unknown = [k for k in data if k not in set(known)]
        if not extra:
            self._extra = [_Error("extra_forbidden", (*loc, k), data[k], {}) for k in self.unknown]
        else:
            self._extra = []

    def field(self, name: str, check: Any, default: Any = ..., *, key: str | None = None) -> Any:
        """``check(value)`` of ``data[key or name]`` (``default`` when absent; required when no default)."""
        key = key or name
        if key not in self.data:
            if default is ...:
                self.errors.append(_Error("missing", (*self.loc, key), dict(self.data), {}))
            return default
        try:
            return check(self.data[key])
        except Problem as p:
            self.errors.append(_Error(p.kind, (*self.loc, key), p.value, p.ctx))
        except Invalid as inner:
            self.errors += [_Error(e.kind, (*self.loc, key, *e.loc), e.value, e.ctx)
                            for e in inner._errors]
        return None

    def rule(self, problem: str | None) -> None:
        """An object-wide rule (pydantic's ``model_validator``): ``problem`` is its message, or None when kept."""
        if problem is not None:
            self.errors.append(_Error("value_error", self.loc, dict(self.data), {"error": problem}))

    @property
    def ok(self) -> bool:
        return not self.errors and not self._extra

    def done(self) -> None:
        if not self.ok:
            raise Invalid(self.title, [*self.errors, *self._extra])


# ---------------------------------------------------------------- one value


def as_float(value: Any, *, finite: bool = False) -> float:
    """A number as pydantic's lax ``float`` takes it. Raises Problem."""
    if isinstance(value, (bool, int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise Problem("float_parsing", value) from None
    else:
        raise Problem("float_type", value)
    if finite and not math.isfinite(out):
        raise Problem("finite_number", value)
    return out


def as_int(value: Any) -> int:
    """An integer as pydantic's lax ``int`` takes it (an integral float or a numeric string). Raises Problem."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise Problem("int_from_float", value)
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise Problem("int_parsing", value) from None
    raise Problem("int_type", value)


def as_str(value: Any, *, min_length: int | None = None, max_length: int | None = None,
           pattern: str | None = None) -> str:
    """A string (no coercion, as pydantic) within the given length and pattern. Raises Problem."""
    if not isinstance(value, str):
        raise Problem("string_type", value)
    if min_length is not None and len(value) < min_length:
        raise Problem("string_too_short", value, min_length=min_length)
    if max_length is not None and len(value) > max_length:
        raise Problem("string_too_long", value, max_length=max_length)
    # pydantic's regex engine reads ``$`` as the end of the text, Python's also before a final newline
    if pattern is not None and not re.search(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern, value):
        raise Problem("string_pattern_mismatch", value, pattern=pattern)
    return value


def bounded(value: float | int, original: Any, *, gt: float | None = None, ge: float | None = None,
            le: float | None = None) -> Any:
    """``value`` when within the bounds (the upper checked first, as pydantic does). Raises Problem."""
    if le is not None and not value <= le:
        raise Problem("less_than_equal", original, le=le)
    if gt is not None and not value > gt:
        raise Problem("greater_than", original, gt=gt)
    if ge is not None and not value >= ge:
        raise Problem("greater_than_equal", original, ge=ge)
    return value


def literal(value: Any, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (strings). Raises Problem."""
    if value in choices and isinstance(value, str):
        return value
    quoted = [repr(c) for c in choices]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    raise Problem("literal_error", value, expected=expected)


def as_bool(value: Any) -> bool:
    """A JSON boolean (strict: no 0/1 or strings, as a switch in a request body should be). Raises Problem."""
    if not isinstance(value, bool):
        raise Problem("bool_type", value)
    return value


def as_dict(value: Any) -> dict[Any, Any]:
    """A mapping (pydantic's ``dict_type``). Raises Problem."""
    if not isinstance(value, Mapping):
        raise Problem("dict_type", value)
    return dict(value)
