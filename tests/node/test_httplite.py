"""node.httplite on real sockets: what the admin API and /metrics rely on, and bad requests refused cleanly."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from node.config import HostPort
from node.httplite import MAX_BODY, App, JSONResponse, Request, Response, Route, serve
from tests.node.http_helpers import read_response


def _app(errors: list[str]) -> App:
    async def ignores_body(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"body": await request.json(), "query": dict(request.query_params)})

    async def drop(request: Request) -> JSONResponse:
        return JSONResponse({"port": request.path_params["port"]})

    async def text(request: Request) -> Response:
        return Response(b"x 1\n", media_type="text/plain; version=0.0.4")

    async def boom(request: Request) -> Response:
        raise RuntimeError("a handler's bug")

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        errors.append(f"{request.method} {request.path}: {exc}")
        return JSONResponse({"error": str(exc)}, status_code=500)

    return App([Route("/ignore", ignores_body, methods=["POST"]), Route("/echo", echo, methods=["POST"]),
                Route("/peers/{port}", drop, methods=["DELETE"]), Route("/metrics", text),
                Route("/boom", boom)], on_error=crashed)  # fmt: skip


async def _serve(nursery: trio.Nursery, errors: list[str]) -> tuple[str, int, trio.Event]:
    stop = trio.Event()
    bound = await nursery.start(serve, _app(errors), HostPort("127.0.0.1", 0), stop.wait)
    host, port = bound.rsplit(":", 1)
    return host, int(port), stop


async def _closed(stream: trio.SocketStream) -> bool:
    with trio.fail_after(5):
        return await stream.receive_some(4096) == b""


async def test_json_routes_params_and_the_status_of_what_does_not_match() -> None:
    errors: list[str] = []
    async with trio.open_nursery() as nursery:
        host, port, stop = await _serve(nursery, errors)
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            echo = await client.post("/echo?last_s=2&x=1&x=3", json={"a": [1, "é"]})
            assert echo.status_code == 200 and echo.headers["content-type"] == "application/json"
            assert echo.json() == {"body": {"a": [1, "é"]}, "query": {"last_s": "2", "x": "3"}}
            assert (await client.delete("/peers/7")).json() == {"port": "7"}
            scrape = await client.get("/metrics")
            assert scrape.content == b"x 1\n" and scrape.headers["content-type"] == "text/plain; version=0.0.4"
            head = await client.head("/metrics")
            assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == "4"
            assert (await client.get("/nowhere")).status_code == 404
            wrong = await client.get("/peers/7")
            assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE"
            boom = await client.get("/boom")
            assert boom.status_code == 500 and boom.json() == {"error": "a handler's bug"}
            assert errors == ["GET /boom: a handler's bug"]
            again = await client.post("/echo", json=[])  # the server goes on after a handler's bug
            assert again.json()["body"] == []
        stop.set()


async def test_a_handler_that_ignores_a_late_body_leaves_the_connection_open() -> None:
    """The body is read whole before the handler runs, so a second request on the connection is answered."""
    async with trio.open_nursery() as nursery:
        host, port, stop = await _serve(nursery, [])
        stream = await trio.open_tcp_stream(host, port)
        buf = bytearray()
        await stream.send_all(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
        await trio.sleep(0.3)  # a late body segment: nothing may be answered before it arrives
        await stream.send_all(b"{}")
        with trio.fail_after(5):
            first = await read_response(stream, buf)
        await stream.send_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              b"3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n")  # fmt: skip
        with trio.fail_after(5):
            second = await read_response(stream, buf)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b'{"ok":true}'), first
        assert second.startswith(b"HTTP/1.1 200") and second.endswith(b'{"body":[1,2],"query":{}}'), second
        await stream.send_all(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        with trio.fail_after(5):
            third = await read_response(stream, buf)
        assert b"connection: close" in third.lower() and await _closed(stream)
        await stream.aclose()
        stop.set()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"GET / HTTP/1.1\r\n\r\n", b"400"),  # no Host header
    (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(MAX_BODY + 1).encode() + b"\r\n\r\n" + b"x" * 70_000,
     b"413"),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
    (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     + (b"10000\r\n" + b"x" * 0x10000 + b"\r\n") * 17, b"413"),
], ids=["garbage", "no-host", "body-too-large", "headers-too-large", "chunked-body-too-large"])  # fmt: skip
async def test_a_bad_request_is_refused_and_closed_and_the_server_goes_on(request_bytes: bytes, status: bytes) -> None:
    async with trio.open_nursery() as nursery:
        host, port, stop = await _serve(nursery, [])
        stream = await trio.open_tcp_stream(host, port)
        await stream.send_all(request_bytes)
        buf = bytearray()
        with trio.fail_after(5):
            answer = await read_response(stream, buf)
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
        assert b"connection: close" in answer.lower()
        await stream.aclose()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://{host}:{port}/metrics")).status_code == 200
        stop.set()


async def test_stopping_ends_serve_and_frees_the_port() -> None:
    async with trio.open_nursery() as nursery:
        host, port, stop = await _serve(nursery, [])
        stop.set()
    with pytest.raises(OSError):
        await trio.open_tcp_stream(host, port)


def test_a_json_body_that_is_not_utf8_is_a_value_error() -> None:
    async def main() -> Any:
        return await Request("POST", "/x", {}, b"\xff").json()

    with pytest.raises(ValueError):
        trio.run(main)
