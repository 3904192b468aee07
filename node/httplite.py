"""A node's own HTTP/1.1 server: h11 on trio, for the admin API and ``/metrics``.

A node answers a dozen small JSON requests and a scrape; it does not need an ASGI framework. starlette on
hypercorn (with h2, hpack, wsproto, anyio and asyncio behind them) cost every node about 4 MiB more than this
(benchmarks/node_memory_bench.py; docs/performance.md, "A node's memory"), so the node serves with this
instead; the orchestrator's pages (``snekbed view``, the chaos engine's) keep hypercorn through
:mod:`node.httpserve`.

What it does: HTTP/1.1 with keep-alive (at most ``MAX_CONNECTIONS`` at once; a response the client does not take
within ``WRITE_S`` closes its connection), request bodies by Content-Length or chunked (read whole, at most
``MAX_BODY`` bytes, before the handler runs, so a handler that ignores its body never leaves a half-read request on
a connection that is reused), routes with ``{name}`` path parameters, 404 for an unknown path and 405 with
``Allow`` for a known path and another method, 400 for a request h11 cannot parse, 413 for a body too large, and a
500 from the app's error handler when a handler raises; any other failure ends that connection, never the server. ``await nursery.start(serve, app, where, stop)`` binds,
reports the address actually bound (``host:port``; port 0 picks a free one) and serves until ``stop`` returns.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote

import h11
import trio

from node.config import HostPort

__all__ = ["App", "JSONResponse", "QueryParams", "Request", "Response", "Route", "serve"]

log = logging.getLogger("snekbed.node.http")

MAX_BODY = 1 << 20  # bytes of one request body (the admin API's largest is a few hundred)
MAX_HEAD = 16 << 10  # bytes of a request line and headers
IDLE_S = 30.0  # a kept-alive connection with no new request is closed after this long
READ_S = 10.0  # a request begun must be read whole within this long
WRITE_S = 10.0  # a response must be taken by the client within this long, or the connection is closed
MAX_CONNECTIONS = 64  # connections served at once; one more is closed at once (fds are the node's peers' too)


class QueryParams(Mapping[str, str]):
    """The query string: ``params["k"]`` / ``params.get("k")`` give the last value, iteration the names."""

    def __init__(self, query: str) -> None:
        self._items = parse_qsl(query, keep_blank_values=True)
        self._last = dict(self._items)

    def __getitem__(self, key: str) -> str:
        return self._last[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._last)

    def __len__(self) -> int:
        return len(self._last)


class Request:
    """One request, its body already read."""

    __slots__ = ("body_bytes", "headers", "method", "path", "path_params", "query_params")

    def __init__(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> None:
        path, _, query = target.partition("?")
        self.method = method
        self.path = unquote(path)
        self.query_params = QueryParams(query)
        self.path_params: dict[str, str] = {}
        self.headers = headers
        self.body_bytes = body

    async def body(self) -> bytes:
        return self.body_bytes

    async def json(self) -> Any:
        """The body as JSON. Raises ValueError (bad UTF-8 or bad JSON)."""
        return json.loads(self.body_bytes.decode("utf-8"))


class Response:
    """A whole response: status, media type, body."""

    __slots__ = ("body", "media_type", "status_code")

    def __init__(self, content: bytes | str = b"", status_code: int = 200, media_type: str = "text/plain") -> None:
        self.body = content.encode("utf-8") if isinstance(content, str) else content
        self.status_code = status_code
        self.media_type = media_type


class JSONResponse(Response):
    """``content`` as compact JSON (no NaN, UTF-8 as is)."""

    def __init__(self, content: Any, status_code: int = 200) -> None:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        super().__init__(text, status_code, "application/json")


Handler = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


class Route:
    """``Route("/peers/{port}", handler, methods=["DELETE"])``: a path (``{name}`` matches one segment)."""

    __slots__ = ("endpoint", "methods", "path", "pattern")

    def __init__(self, path: str, endpoint: Handler, methods: Sequence[str] = ("GET",)) -> None:
        self.path = path
        self.endpoint = endpoint
        self.methods = frozenset(m.upper() for m in methods)
        parts = re.split(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", path)
        regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts))
        self.pattern = re.compile(f"^{regex}$")


class App:
    """Routes in order; the first whose path and method match answers."""

    def __init__(self, routes: Sequence[Route], on_error: ErrorHandler | None = None) -> None:
        self.routes = list(routes)
        self.on_error = on_error

    async def handle(self, request: Request) -> Response:
        allowed: set[str] = set()
        for route in self.routes:
            m = route.pattern.match(request.path)
            if m is None:
                continue
            if request.method not in route.methods and not (request.method == "HEAD" and "GET" in route.methods):
                allowed |= route.methods
                continue
            request.path_params = m.groupdict()
            try:
                return await route.endpoint(request)
            except Exception as exc:  # a handler's bug answers 500 and is logged; the node goes on
                if self.on_error is None:
                    log.error("http %s %s failed", request.method, request.path, exc_info=exc)
                    return Response("Internal Server Error", 500)
                return await self.on_error(request, exc)
        if allowed:
            return _MethodNotAllowed(allowed)
        return Response("Not Found", 404)


class _MethodNotAllowed(Response):
    __slots__ = ("allow",)

    def __init__(self, allowed: set[str]) -> None:
        super().__init__("Method Not Allowed", 405)
        self.allow = ", ".join(sorted(allowed))


class _Stalled(Exception):
    """The client did not take a response within ``WRITE_S``."""


async def _write(stream: trio.SocketStream, data: bytes) -> None:
    with trio.move_on_after(WRITE_S) as scope:
        await stream.send_all(data)
    if scope.cancelled_caught:
        raise _Stalled(f"a client took no {len(data)}-byte response within {WRITE_S:g} s")


class _Refused(Exception):
    """A request this server will not read on (status, reason): answered, then the connection closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await stream.receive_some(65536)
        conn.receive_data(data)  # b"" is the peer's end of stream: h11 then says ConnectionClosed


async def _send(conn: h11.Connection, stream: trio.SocketStream, response: Response, head_only: bool) -> None:
    headers = [("content-type", response.media_type), ("content-length", str(len(response.body)))]
    if isinstance(response, _MethodNotAllowed):
        headers.append(("allow", response.allow))
    if conn.their_state is h11.MUST_CLOSE:
        headers.append(("connection", "close"))
    data = conn.send(h11.Response(status_code=response.status_code, headers=headers))
    if not head_only and response.body:
        data += conn.send(h11.Data(data=response.body))
    data += conn.send(h11.EndOfMessage())
    await _write(stream, data)


async def _read_request(conn: h11.Connection, stream: trio.SocketStream) -> tuple[h11.Request, bytes] | None:
    """The next request and its whole body, or None when the client closed the connection."""
    with trio.move_on_after(IDLE_S) as idle:
        event = await _next_event(conn, stream)
    if idle.cancelled_caught or isinstance(event, h11.ConnectionClosed):
        return None
    if not isinstance(event, h11.Request):
        raise _Refused(400, f"expected a request, got {type(event).__name__}")
    length = next((int(v) for k, v in event.headers if k == b"content-length"), 0)  # h11 checked it is a number
    if length > MAX_BODY:
        raise _Refused(413, f"request body of {length} bytes, over {MAX_BODY}")
    if conn.client_is_waiting_for_100_continue:
        await _write(stream, conn.send(h11.InformationalResponse(status_code=100, headers=[])))
    body = bytearray()
    with trio.move_on_after(READ_S) as slow:
        while True:
            part = await _next_event(conn, stream)
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > MAX_BODY:
                    raise _Refused(413, f"request body over {MAX_BODY} bytes")
            elif isinstance(part, h11.EndOfMessage):
                return event, bytes(body)
            elif isinstance(part, h11.ConnectionClosed):
                return None
    assert slow.cancelled_caught
    raise _Refused(408, f"request body not received within {READ_S:g} s")


async def _serve_connection(app: App, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    try:
        while True:
            try:
                got = await _read_request(conn, stream)
            except (_Refused, h11.RemoteProtocolError) as exc:
                status = exc.status if isinstance(exc, _Refused) else (exc.error_status_hint or 400)
                log.info("http: %s from a client: %s", status, exc)
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    refusal = Response(f"{exc}", status)
                    headers = [("content-type", "text/plain"), ("content-length", str(len(refusal.body))),
                               ("connection", "close")]
                    try:
                        data = conn.send(h11.Response(status_code=status, headers=headers))
                        data += conn.send(h11.Data(data=refusal.body)) + conn.send(h11.EndOfMessage())
                        await _write(stream, data)
                    except h11.LocalProtocolError:
                        pass
                return
            if got is None:
                return
            event, body = got
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            request = Request(event.method.decode("ascii"), event.target.decode("latin-1"), headers, body)
            response = await app.handle(request)
            await _send(conn, stream, response, head_only=request.method == "HEAD")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    except _Stalled as exc:
        log.info("http: %s: closed", exc)
    except Exception as exc:  # a bug here (an error handler that raised, a handler's bad return) ends this
        log.error("http: a connection failed", exc_info=exc)  # connection, never the node
    finally:
        await stream.aclose()


async def _limited(app: App, limiter: trio.CapacityLimiter, stream: trio.SocketStream) -> None:
    try:
        limiter.acquire_on_behalf_of_nowait(stream)
    except trio.WouldBlock:
        log.info("http: %d connections open: one more closed", limiter.total_tokens)
        await stream.aclose()
        return
    try:
        await _serve_connection(app, stream)
    finally:
        limiter.release_on_behalf_of(stream)


async def serve(
    app: App,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``where`` until ``shutdown_trigger`` returns; report "host:port" bound. Raises OSError."""
    listeners = await trio.open_tcp_listeners(where.port, host=where.host)
    host, port = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        limiter = trio.CapacityLimiter(MAX_CONNECTIONS)
        nursery.start_soon(trio.serve_listeners, lambda stream: _limited(app, limiter, stream), listeners)
        task_status.started(str(HostPort(host, port)))
        await shutdown_trigger()
        nursery.cancel_scope.cancel()
