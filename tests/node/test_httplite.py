"""node.httplite on real sockets: what the admin API and /metrics rely on, and bad requests refused cleanly."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import trio

from node import httplite
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


def _odd_app(errors: list[str]) -> App:
    async def not_a_response(request: Request) -> Response:
        return {"not": "a response"}  # type: ignore[return-value]

    async def boom(request: Request) -> Response:
        raise RuntimeError("a handler's bug")

    async def big(request: Request) -> Response:
        return Response(b"x" * (64 << 20))

    async def ok(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def error_handler_fails(request: Request, exc: Exception) -> Response:
        errors.append(str(exc))
        raise ValueError("the error handler's own bug")

    return App([Route("/odd", not_a_response), Route("/boom", boom), Route("/big", big), Route("/ok", ok)],
               on_error=error_handler_fails)


async def _ok(host: str, port: int) -> int:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://{host}:{port}/ok")).status_code


async def test_a_failure_in_one_connection_ends_that_connection_not_the_server() -> None:
    errors: list[str] = []
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        bound = await nursery.start(serve, _odd_app(errors), HostPort("127.0.0.1", 0), stop.wait)
        host, port = bound.rsplit(":", 1)
        for path in (b"/odd", b"/boom"):
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert await _closed(stream), path  # closed without an answer: there is none to give
            await stream.aclose()
        assert errors == ["a handler's bug"]
        assert await _ok(host, int(port)) == 200
        stop.set()


async def test_a_client_that_never_reads_its_response_is_cut_off(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(httplite, "WRITE_S", 0.3)
    caplog.set_level(logging.INFO, logger="snekbed.node.http")
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        bound = await nursery.start(serve, _odd_app([]), HostPort("127.0.0.1", 0), stop.wait)
        host, port = bound.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # 64 MiB: far more than socket buffers
        with trio.fail_after(10):
            while not any("took no" in r.getMessage() for r in caplog.records):
                await trio.sleep(0.01)  # polls the server's own log line, not a guess at its timing
        got = 0
        with trio.fail_after(10):
            while chunk := await stream.receive_some(1 << 20):
                got += len(chunk)
        assert got < 64 << 20  # the connection was closed mid-body
        await stream.aclose()
        assert await _ok(host, int(port)) == 200
        stop.set()


async def test_connections_beyond_the_limit_are_closed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httplite, "MAX_CONNECTIONS", 2)
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        bound = await nursery.start(serve, _odd_app([]), HostPort("127.0.0.1", 0), stop.wait)
        host, port = bound.rsplit(":", 1)
        held = []
        for _ in range(2):  # two kept-alive connections, each answered once: both hold their place
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
            with trio.fail_after(5):
                assert (await read_response(stream, bytearray())).startswith(b"HTTP/1.1 200")
            held.append(stream)
        extra = await trio.open_tcp_stream(host, int(port))
        assert await _closed(extra)
        await extra.aclose()
        await held.pop().aclose()
        with trio.fail_after(5):
            while True:  # the closed connection's place is given back once its task has seen the close
                try:
                    if await _ok(host, int(port)) == 200:
                        break
                except httpx.HTTPError:
                    await trio.sleep(0.01)
        for stream in held:
            await stream.aclose()
        stop.set()
