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

__all__ = ["DrainRequestBody", "serve_app"]

ASGIApp = Callable[..., Awaitable[None]]


class DrainRequestBody:
    """ASGI middleware: read what is left of an HTTP request body before the response's last chunk goes out.

    hypercorn keeps an HTTP/1.1 connection open for the next request only if, when the response ends, the client
    has finished sending (h11 ``their_state`` DONE). A handler that ignores the body (``POST /peers/redial``)
    can answer before a body sent in a later segment arrives; hypercorn then closes the connection, and a client
    that reuses it reads "Server disconnected without sending a response". Draining the body (for at most
    ``DRAIN_S``) before the final chunk keeps the connection usable whatever the handler reads.
    """

    DRAIN_S = 5.0

    def __init__(self, app: object) -> None:
        self.app: ASGIApp = app  # type: ignore[assignment]

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:  # fmt: skip
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        done = False

        async def tracked_receive() -> dict:
            nonlocal done
            message = await receive()
            if message.get("type") != "http.request" or not message.get("more_body", False):
                done = True
            return message

        async def draining_send(message: dict) -> None:
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                with trio.move_on_after(self.DRAIN_S):
                    while not done:
                        await tracked_receive()
            await send(message)

        await self.app(scope, tracked_receive, draining_send)


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
        await hypercorn_serve(DrainRequestBody(app), config,  # type: ignore[arg-type]
                              shutdown_trigger=shutdown_trigger, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(started)
        task_status.started(binds[0].split("://", 1)[1] if binds else str(where))
