"""Errors raised by the ``netem`` package.

One base class, :class:`NetemError`; each subclass carries the data it names, and
its message says what was wrong and where (which class, which field, which device).
Subclasses also inherit the matching builtin (``KeyError``, ``ValueError``) so
callers that only know the builtin still catch them.
"""

from __future__ import annotations

from collections.abc import Iterable


class NetemError(Exception):
    """Base: a link class, a shaping plan or a capability probe went wrong."""


class UnknownLinkClass(NetemError, KeyError):
    """A topology asked for a link class that neither the defaults nor its overrides define."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(name)

    def __str__(self) -> str:  # KeyError would print repr(name) only
        return f"unknown link class {self.name!r} (known: {', '.join(self.known)})"


class InvalidLinkClass(NetemError, ValueError):
    """A link class (default table or a topology override) failed validation."""

    def __init__(self, name: str, where: str, reason: str) -> None:
        self.name, self.where, self.reason = name, where, reason
        super().__init__(f"invalid link class {name!r} in {where}: {reason}")


class PlanError(NetemError, ValueError):
    """A planner was given something it cannot turn into a command (bad device name, address...)."""

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what, self.value, self.reason = what, value, reason
        super().__init__(f"cannot plan shaping: {what}={value!r}: {reason}")
