"""Option parsing shared by the ``snekbed`` commands."""

from __future__ import annotations

import click

from node.config import ConfigError, HostPort, parse_hostport

__all__ = ["address_option"]


def address_option(text: str | None, flag: str) -> HostPort | None:
    """A ``HOST:PORT`` option value (None when not given); a bad one is a usage error naming ``flag``."""
    if text is None:
        return None
    try:
        return parse_hostport(text, flag)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None
