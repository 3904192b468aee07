"""Serve an ASGI app with hypercorn on trio, inside the caller's nursery (admin API and /metrics).

``await nursery.start(serve_app, app, where, shutdown_trigger)`` binds, reports
the address actually bound (``host:port``; port 0 picks a free one) and serves
until ``shutdown_trigger`` returns, the trio pattern of STYLE.md §3.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from node.config import HostPort

__all__ = ["serve_app"]


async def serve_app(
    app: object,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI app with hypercorn on trio; report "host:port" actually bound. Raises OSError."""
    config = Config()
    config.bind = [str(where)]
    config.accesslog = None
    config.errorlog = logging.getLogger("snekbed.node.http")  # server errors (and app tracebacks) go to our log
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 30.0

    async def started(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(started)
        task_status.started(binds[0].split("://", 1)[1] if binds else str(where))
