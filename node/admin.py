"""The admin API: HTTP + JSON (starlette on hypercorn's trio worker), loopback by default.

Contract (scripts depend on it; ``docs/node.md`` has examples):

=========================  ===========================================================================
``GET /healthz``           ``{"ok": true, "public_key": hex, "peers": int, "uptime_s": float}``
``GET /state``             ``{"public_key", "root": {"key", "sequence"}, "parent", "coords", "descending",
                           "peers": [{"port", "key", "class", "coords", ...}], "routing_table_size"}``
``POST /ping``             ``{"key": hex, "mode": "snek"|"tree", "count": int, "timeout_s": float}`` ->
                           ``{"sent", "received", "rtt_ms": [float], "hops": [int]}``
``POST /peers``            ``{"uri": "tcp://HOST:PORT?class=..", "timeout_s": float}`` -> 201 when the
                           peering is up (``port``, ``key``, ``class``), 202 while it is still dialling
``DELETE /peers/{port}``   close that peering (and stop redialling its URI) -> ``{"port", "key"}``; 404
``POST /traffic``          benchmark load: ``{"key", "payload_bytes", "count", "inflight", "timeout_s"}``
                           -> ``{"sent", "delivered", "lost", "elapsed_s", "frames_per_s"}``
=========================  ===========================================================================

Errors are JSON ``{"error": "..."}`` naming the field: 400 for malformed JSON
or a bad URI, 422 for a body that fails validation, 404 for an unknown port.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contract.links import LINK_TYPE_NAMES
from node.config import ConfigError, HostPort
from node.core.ping import PingResult
from node.metrics import serve_app
from node.runtime import LOAD_HEADER_LEN, LOAD_MAGIC, LOAD_STRUCT, LoadFlow

if TYPE_CHECKING:
    from node.runtime import Node

__all__ = ["PeerRequest", "PingRequest", "TrafficRequest", "build_app", "ping", "run_load", "serve", "state_document"]

log = logging.getLogger("snekbed.node.admin")
_STALL_S = 0.5  # frames unacknowledged this long are written off as lost


def _hex_key(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise ValueError("must be 64 hex digits (an ed25519 public key)")
    return value.lower()


class PingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    mode: Literal["snek", "tree"] = "snek"
    count: int = Field(1, ge=1, le=1000)
    timeout_s: float = Field(5.0, gt=0, le=60)

    _key = field_validator("key")(_hex_key)


class PeerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: str = Field(min_length=1, max_length=2000)
    timeout_s: float = Field(10.0, ge=0, le=120)


class TrafficRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    payload_bytes: int = Field(64, ge=22, le=60_000)
    count: int = Field(10_000, ge=1, le=100_000_000)
    inflight: int = Field(64, ge=1, le=100_000)
    timeout_s: float = Field(60.0, gt=0, le=3600)

    _key = field_validator("key")(_hex_key)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request, model: type[BaseModel]) -> BaseModel | JSONResponse:
    try:
        raw = await request.json()
    except ValueError:
        return _error(400, "request body is not valid JSON")
    if not isinstance(raw, dict):
        return _error(400, "request body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        return _error(422, f"{where}: {err['msg']}")


def state_document(node: Node) -> dict[str, Any]:
    """The ``GET /state`` document: the router's, with link type numbers as class names."""
    s = node.router.state()
    for p in s["peers"]:
        lt = p.pop("link_type")
        p["class"] = LINK_TYPE_NAMES.get(lt, str(lt))
        conn = node.peers.get(p["port"])
        if conn is not None:
            p["link_class"] = conn.link.link_class
            p["remote"] = conn.remote
    return s


async def ping(node: Node, key: bytes, mode: str, count: int, timeout_s: float) -> dict[str, Any]:
    """Send ``count`` pings one after another (§8); tree mode first learns the target's coordinates."""
    rtts: list[float] = []
    hops: list[int] = []
    if mode == "tree" and key != node.key and not _coords_fresh(node, key):
        await _ping_once(node, key, "snek", timeout_s)  # its pong fills the coordinates cache
    for _ in range(count):
        res = await _ping_once(node, key, mode, timeout_s)
        if res is not None and res.received:
            rtts.append(round((res.rtt_s or 0.0) * 1000.0, 4))
            hops.append(res.hops if res.hops is not None else 0)
    return {"sent": count, "received": len(rtts), "rtt_ms": rtts, "hops": hops}


def _coords_fresh(node: Node, key: bytes) -> bool:
    hit = node.router.coords_cache.get(key)
    return hit is not None and trio.current_time() - hit[1] < node.router.t.coords_cache_lifetime_s


async def _ping_once(node: Node, key: bytes, mode: str, timeout_s: float) -> PingResult | None:
    """One ping, waiting for any outstanding ping to the same target first (one at a time, §8)."""
    lock = node.ping_locks.setdefault(key, trio.Lock())
    async with lock:
        r = node.router
        with trio.move_on_after(timeout_s + 1.0):
            while key in r.ping.pending:
                await node.ping_lot.park()
        if not r.ping.start(key, trio.current_time(), mode=mode, timeout_s=timeout_s):
            return None
        node.flush()
        box = node.ping_waiters.setdefault(key, [])
        with trio.move_on_after(timeout_s + 1.0):
            while not box:
                await node.ping_lot.park()
        node.ping_waiters.pop(key, None)
        if not lock.statistics().tasks_waiting:
            node.ping_locks.pop(key, None)
        return box[0] if box else None


async def run_load(
    node: Node, dest: bytes, payload_bytes: int, count: int, inflight: int, timeout_s: float
) -> dict[str, Any]:
    """Closed-loop benchmark traffic to ``dest``, which acknowledges every 16 frames (the node's load sink).

    At most ``inflight`` frames are unacknowledged; frames unacknowledged for 0.5 s
    without any progress are written off as lost. Frames are SNEK-routed Traffic
    whose payload starts with the ``snekload`` header. Raises ValueError for a bad size.
    """
    if not LOAD_HEADER_LEN <= payload_bytes <= 60_000:
        raise ValueError(f"payload_bytes must be in {LOAD_HEADER_LEN}..60000, not {payload_bytes}")
    flow = random.getrandbits(32)
    st = node.load_flows[flow] = LoadFlow()
    pad = bytes(payload_bytes - LOAD_HEADER_LEN)
    pack = LOAD_STRUCT.pack
    send = node.router.send_traffic
    sent = lost = 0
    start = trio.current_time()
    try:
        with trio.move_on_after(timeout_s):
            while st.acked + lost < count:
                room = min(inflight - (sent - st.acked - lost), count - sent, 32)
                if room > 0:  # 32 at most between checkpoints (half a flow bucket): the writers drain in between
                    now = trio.current_time()
                    for _ in range(room):
                        sent += 1
                        flags = 1 if (sent == count or sent - st.acked - lost >= inflight) else 0
                        send(dest, pack(LOAD_MAGIC, 0, flags, flow, sent) + pad, now)
                    node.flush()
                    await trio.lowlevel.checkpoint()
                    continue
                before = st.acked
                with trio.move_on_after(_STALL_S):
                    await st.lot.park()
                if st.acked == before:
                    lost = sent - st.acked
        elapsed = trio.current_time() - start
        with trio.move_on_after(0.2):  # the last ack may still be on its way
            while st.acked < sent - lost:
                await st.lot.park()
    finally:
        del node.load_flows[flow]
    return {
        "sent": sent,
        "delivered": st.acked,
        "lost": max(0, sent - st.acked),
        "elapsed_s": round(elapsed, 6),
        "frames_per_s": round(st.acked / elapsed, 1) if elapsed > 0 else 0.0,
    }


def build_app(node: Node) -> Starlette:
    """The admin ASGI app for ``node``."""

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "ok": not node.stopping,
                "public_key": node.key.hex(),
                "peers": len(node.peers),
                "uptime_s": round(trio.current_time() - node.started_at, 3),
            }
        )

    async def state(request: Request) -> JSONResponse:
        return JSONResponse(state_document(node))

    async def ping_route(request: Request) -> JSONResponse:
        body = await _body(request, PingRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, PingRequest)
        result = await ping(node, bytes.fromhex(body.key), body.mode, body.count, body.timeout_s)
        return JSONResponse(result)

    async def add_peer(request: Request) -> JSONResponse:
        body = await _body(request, PeerRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, PeerRequest)
        if node.stopping:
            return _error(409, "the node is stopping")
        try:
            result = await node.add_peer(body.uri, body.timeout_s)
        except ConfigError as exc:
            return _error(400, str(exc))
        return JSONResponse(result, status_code=201 if result["status"] == "connected" else 202)

    async def drop_peer(request: Request) -> JSONResponse:
        raw = request.path_params["port"]
        if not raw.isdigit() or not 1 <= int(raw) <= 253:
            return _error(400, f"port {raw!r}: expected a peer port 1..253")
        peer = node.drop_peer(int(raw))
        if peer is None:
            return _error(404, f"port {raw}: no peer on this port")
        return JSONResponse({"port": peer.port, "key": peer.key.hex(), "status": "closed"})

    async def list_peers(request: Request) -> JSONResponse:
        return JSONResponse(state_document(node)["peers"])

    async def traffic(request: Request) -> JSONResponse:
        body = await _body(request, TrafficRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, TrafficRequest)
        result: dict[str, Any] = await run_load(
            node, bytes.fromhex(body.key), body.payload_bytes, body.count, body.inflight, body.timeout_s
        )
        return JSONResponse(result)

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.error("admin %s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    return Starlette(
        exception_handlers={Exception: crashed},
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/state", state, methods=["GET"]),
            Route("/ping", ping_route, methods=["POST"]),
            Route("/peers", list_peers, methods=["GET"]),
            Route("/peers", add_peer, methods=["POST"]),
            Route("/peers/{port}", drop_peer, methods=["DELETE"]),
            Route("/traffic", traffic, methods=["POST"]),
        ]
    )


async def serve(
    node: Node,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin API on ``where`` until ``shutdown_trigger`` returns. Raises OSError."""
    await serve_app(build_app(node), where, shutdown_trigger, task_status=task_status)
