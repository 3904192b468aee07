"""What the ``snekbed`` commands share: option parsing, and how an error becomes an exit code.

Every command exits by the rule of :mod:`contract.exit_codes` (docs/orchestrator.md, "Exit codes"): 0 done,
1 ran and failed (``click.ClickException``, ``sys.exit(FAILED)``), 2 refused before anything started
(:class:`BadInput`, and click's own usage errors), 3 an invalid chaos run, 130 interrupted.
"""

from __future__ import annotations

import click

from contract.exit_codes import BAD_INPUT
from node.config import ConfigError, HostPort, parse_hostport

__all__ = ["BadInput", "address_option"]


class BadInput(click.ClickException):
    """Exit 2 (``BAD_INPUT``): the command refused before anything started (a malformed or invalid file, a run
    that does not exist, a request this machine cannot serve). Printed as ``Error: MESSAGE`` like every click
    error; give it the library error's message, which names the file (and the line and field)."""

    exit_code = BAD_INPUT


def address_option(text: str | None, flag: str) -> HostPort | None:
    """A ``HOST:PORT`` option value (None when not given); a bad one is a usage error naming ``flag``."""
    if text is None:
        return None
    try:
        return parse_hostport(text, flag)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None
