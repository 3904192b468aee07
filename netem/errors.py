"""Errors raised by the ``netem`` package.

One base class, :class:`NetemError`; each subclass carries the data it names, and
its message says what was wrong and where (which field, which device, which command).
Subclasses also inherit the matching builtin (``ValueError``, ``RuntimeError``) so
callers that only know the builtin still catch them.
"""

from __future__ import annotations


class NetemError(Exception):
    """Base: a shaping plan, a measurement or a capability probe went wrong.

    Link class errors (``contract.links.LinkClassError``) belong to the shared leaf.
    """


class PlanError(NetemError, ValueError):
    """A planner was given something it cannot turn into a command (bad device name, address...)."""

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what, self.value, self.reason = what, value, reason
        super().__init__(f"cannot plan shaping: {what}={value!r}: {reason}")
