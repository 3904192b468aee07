"""node.httpserve on real sockets: a connection stays usable after a handler that never reads the request body.

The admin API's ``POST /peers/redial`` ignores its body. When the body arrives in a segment after the headers,
hypercorn used to answer and then close the connection (the client had not finished sending), and a client that
reused the connection got "Server disconnected without sending a response" (a CI failure of
test_redial_now_skips_the_backoff under load). The body here is sent 0.3 s after the headers, every time; the
answer waits for it (node.httpserve.DrainRequestBody).
"""

from __future__ import annotations

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from node.config import HostPort
from node.httpserve import serve_app
from tests.node.http_helpers import read_response


def _app() -> Starlette:
    async def ignores_body(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def reads_body(request: Request) -> JSONResponse:
        return JSONResponse({"got": (await request.body()).decode()})

    return Starlette(routes=[Route("/ignore", ignores_body, methods=["POST"]),
                             Route("/read", reads_body, methods=["POST"])])  # fmt: skip


async def test_a_handler_that_ignores_a_late_body_leaves_the_connection_open() -> None:
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        bound = await nursery.start(serve_app, _app(), HostPort("127.0.0.1", 0), stop.wait)
        host, port = bound.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        buf = bytearray()
        await stream.send_all(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 2\r\n\r\n")
        await trio.sleep(0.3)  # the handler has had all the time it needs to answer without the body
        try:
            await stream.send_all(b"{}")  # the body, late
            with trio.fail_after(5):
                first = await read_response(stream, buf)
            await stream.send_all(b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            with trio.fail_after(5):
                second = await read_response(stream, buf)
        except trio.BrokenResourceError as exc:
            raise AssertionError("the server closed the connection after the first response") from exc
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b'{"ok":true}'), first
        assert second.startswith(b"HTTP/1.1 200") and second.endswith(b'{"got":"hello"}'), second
        await stream.aclose()
        stop.set()
