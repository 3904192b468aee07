"""The admin API: HTTP + JSON (node.httplite: h11 on trio), loopback by default.

Contract (scripts depend on it; ``docs/node.md`` has examples):

=========================  ===========================================================================
``GET /healthz``           ``{"ok": true, "public_key": hex, "peers": int, "uptime_s": float}``
``GET /state``             ``{"public_key", "root": {"key", "sequence"}, "parent", "coords", "descending",
                           "peers": [{"port", "key", "class", "coords", ...}], "routing_table_size"}``
``GET /routes``            ``[{"key", "source", "destination", "expires_in_s"}]``: the valid routing-table entries
``POST /ping``             ``{"key": hex, "mode": "snek"|"tree", "count": int, "timeout_s": float}`` ->
                           ``{"sent", "received", "rtt_ms": [float], "hops": [int]}``
``POST /peers``            ``{"uri": "tcp://HOST:PORT?class=..", "timeout_s": float, "redial": bool}`` -> 201
                           when the peering is up (``port``, ``key``, ``class``), 202 while it is still dialling;
                           ``"redial": false`` (a radio link): dialled until it first comes up within
                           ``timeout_s`` and never again once it ends (202 ``"status": "failed"`` if it did not)
``DELETE /peers/{port}``   close that peering (and stop redialling its URI) -> ``{"port", "key"}``; 404;
                           ``?key=HEX&remote=URI`` (either): only if that port's peering has them, else 409
``POST /peers/shape``      ``{"peer": hex, "class": name|null, "shaping": {"delay_ms": float|null, ...}}`` ->
                           ``{"ports", "shapes": {port: shape}}``: the userspace shaper of the peerings with that
                           key is the class's shape with ``shaping`` over it, a null clearing a field (later
                           peerings with the key get it too); 404 when none is connected. ``"port": N`` instead
                           of (or beside) ``peer``: that peering alone, not remembered for later ones; 404 when
                           no peering (with that key) is on the port
``POST /traffic``          benchmark load: ``{"key", "payload_bytes", "count", "inflight", "timeout_s"}``
                           -> ``{"sent", "delivered", "lost", "elapsed_s", "frames_per_s"}``
``GET /recorder``          the flight recorder: JSON lines (contract.recorder), oldest first;
                           ``?last_s=S``: only the last S seconds; 404 when it is off (``--recorder-s 0``)
``GET /recorder.pcapng``   the same frames as pcapng for tshark and the dissector (node.flight)
=========================  ===========================================================================

Errors are JSON ``{"error": "..."}`` naming the field: 400 for malformed JSON
or a bad URI, 422 for a body that fails validation, 404 for an unknown port.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, TypeVar

import trio

from contract.checks import Checker, Invalid, Problem, as_bool, as_dict, as_float, as_int, as_str, bounded, literal

from node.config import ConfigError, HostPort
from node.flight import Record, read_out, to_jsonl, to_pcapng
from node.core.state import MAX_PORTS
from node.core.types import KEY_LEN
from node.httplite import App, JSONResponse, Request, Response, Route
from node.httplite import serve as serve_http
from node.load import LOAD_HEADER_LEN
from node.view import AdminView

__all__ = ["AdversaryRequest", "PeerRequest", "PingRequest", "ShapeRequest", "TrafficRequest", "build_app", "serve"]

log = logging.getLogger("snekbed.node.admin")

_HEX_KEY_LEN = 2 * KEY_LEN  # a public key in hex


def _hex_key(value: Any) -> str:
    value = as_str(value)
    if len(value) != _HEX_KEY_LEN or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise Problem("value_error", value, error=f"must be {_HEX_KEY_LEN} hex digits (an ed25519 public key)")
    return value.lower()


def _num(*, gt: float | None = None, ge: float | None = None, le: float) -> Callable[[Any], float]:
    return lambda v: bounded(as_float(v), v, gt=gt, ge=ge, le=le)  # type: ignore[no-any-return]


def _int(*, ge: int, le: int) -> Callable[[Any], int]:
    return lambda v: bounded(as_int(v), v, ge=ge, le=le)  # type: ignore[no-any-return]


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else check(v)


def _floats(*, nullable: bool) -> Callable[[Any], dict[str, float | None]]:
    """A ``{name: number}`` object (``null`` allowed as a value when ``nullable``); an error names the key."""
    def check(value: Any) -> dict[str, float | None]:
        raw = as_dict(value)
        checker = Checker("", raw, raw)
        out = {k: checker.field(k, _optional(as_float) if nullable else as_float) for k in raw}
        checker.done()
        return out
    return check


class _Body(Protocol):
    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self: ...


_B = TypeVar("_B", bound=_Body)


# The bodies are checked by hand (contract.checks), with pydantic's wording, not by pydantic models: pydantic
# is 8-9 MiB of a node's memory (docs/performance.md, "A node's memory"). tests/node/test_admin_bodies.py pins
# every message.


@dataclass(frozen=True)
class PingRequest:
    key: str
    mode: str = "snek"
    count: int = 1
    timeout_s: float = 5.0

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> PingRequest:
        c = Checker("PingRequest", raw, ("key", "mode", "count", "timeout_s"))
        body = cls(c.field("key", _hex_key), c.field("mode", lambda v: literal(v, ("snek", "tree")), "snek"),
                   c.field("count", _int(ge=1, le=1000), 1), c.field("timeout_s", _num(gt=0, le=60), 5.0))
        c.done()
        return body


@dataclass(frozen=True)
class PeerRequest:
    uri: str
    timeout_s: float = 10.0
    redial: bool = True

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> PeerRequest:
        c = Checker("PeerRequest", raw, ("uri", "timeout_s", "redial"))
        body = cls(c.field("uri", lambda v: as_str(v, min_length=1, max_length=2000)),
                   c.field("timeout_s", _num(ge=0, le=120), 10.0), c.field("redial", as_bool, True))
        c.done()
        return body


@dataclass(frozen=True)
class AdversaryRequest:
    """``{"drop": {KIND: PERCENT}, "peer": KEY}`` (the drop strategy), or ``{"strategy": NAME, PARAM: VALUE, ...}``
    (node.core.attacks; the parameters inline or as ``"params": {...}``)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("strategy", "drop", "peer", "params")
    strategy: str | None = None
    drop: dict[str, float] | None = None
    peer: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # the other keys: a strategy's parameters inline

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> AdversaryRequest:
        c = Checker("AdversaryRequest", raw, cls.FIELDS, extra=True)
        body = cls(c.field("strategy", _optional(as_str), None), c.field("drop", _optional(_floats(nullable=False)), None),
                   c.field("peer", _optional(_hex_key), None), c.field("params", as_dict, {}),
                   {k: raw[k] for k in c.unknown})
        c.done()
        return body


@dataclass(frozen=True)
class ShapeRequest:
    """``peer`` (every peering with that key, and later ones) or ``port`` (that peering alone; with ``peer`` too,
    only if it is that key's), at least one of them."""

    peer: str | None = None
    link_class: str | None = None  # "class" in the body ("link_class" is taken too)
    shaping: dict[str, float | None] = field(default_factory=dict)  # null: the field cleared (no delay, no rate)
    port: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ShapeRequest:
        c = Checker("ShapeRequest", raw, ("peer", "port", "class", "link_class", "shaping"))
        key = "class" if "class" in raw or "link_class" not in raw else "link_class"
        body = cls(c.field("peer", _optional(_hex_key), None), c.field("link_class", _optional(as_str), None, key=key),
                   c.field("shaping", _floats(nullable=True), {}),
                   c.field("port", _optional(_int(ge=1, le=MAX_PORTS)), None))
        if not c.errors and body.peer is None and body.port is None:
            c.rule("give 'peer' (a public key: every peering with it) or 'port' (one peering), or both")
        c.done()
        return body


@dataclass(frozen=True)
class TrafficRequest:
    key: str
    payload_bytes: int = 64
    count: int = 10_000
    inflight: int = 64
    timeout_s: float = 60.0

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> TrafficRequest:
        c = Checker("TrafficRequest", raw, ("key", "payload_bytes", "count", "inflight", "timeout_s"))
        body = cls(c.field("key", _hex_key), c.field("payload_bytes", _int(ge=LOAD_HEADER_LEN, le=60_000), 64),
                   c.field("count", _int(ge=1, le=100_000_000), 10_000), c.field("inflight", _int(ge=1, le=100_000), 64),
                   c.field("timeout_s", _num(gt=0, le=3600), 60.0))
        c.done()
        return body


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request, model: type[_B]) -> _B | JSONResponse:
    try:
        raw = await request.json()
    except ValueError:
        return _error(400, "request body is not valid JSON")
    if not isinstance(raw, dict):
        return _error(400, "request body must be a JSON object")
    try:
        return model.parse(raw)
    except Invalid as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        return _error(422, f"{where}: {err['msg']}")


class _Handlers:
    """The admin API's endpoints on one node's view: each takes a request and answers JSON."""

    def __init__(self, node: AdminView) -> None:
        self.node = node

    def routes(self) -> list[Route]:
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/state", self.state, methods=["GET"]),
            Route("/routes", self.routes_table, methods=["GET"]),
            Route("/ping", self.ping, methods=["POST"]),
            Route("/peers", self.list_peers, methods=["GET"]),
            Route("/peers", self.add_peer, methods=["POST"]),
            Route("/peers/redial", self.redial, methods=["POST"]),
            Route("/peers/shape", self.shape, methods=["POST"]),
            Route("/peers/{port}", self.drop_peer, methods=["DELETE"]),
            Route("/adversary", self.adversary, methods=["POST"]),
            Route("/traffic", self.traffic, methods=["POST"]),
            Route("/recorder", self.recorder, methods=["GET"]),
            Route("/recorder.pcapng", self.recorder_pcapng, methods=["GET"]),
        ]

    # ------------------------------------------------------------ reads

    async def healthz(self, request: Request) -> JSONResponse:
        node = self.node
        return JSONResponse(
            {
                "ok": not node.stopping,
                "public_key": node.key.hex(),
                "peers": len(node.peers),
                "uptime_s": round(trio.current_time() - node.started_at, 3),
            }
        )

    async def state(self, request: Request) -> JSONResponse:
        return JSONResponse(self.node.state())

    async def routes_table(self, request: Request) -> JSONResponse:
        return JSONResponse(self.node.routes())

    async def list_peers(self, request: Request) -> JSONResponse:
        return JSONResponse(self.node.state()["peers"])

    def _flight(self, request: Request) -> list[Record] | JSONResponse:
        """The flight recorder read out (``?last_s=S``: its last S seconds), or the error to answer."""
        unknown = sorted(set(request.query_params) - {"last_s"})
        if unknown:
            return _error(400, f"unknown query parameter {unknown[0]!r} (known: last_s)")
        raw = request.query_params.get("last_s")
        try:
            last_s = float(raw) if raw is not None else math.inf
        except ValueError:
            return _error(400, f"last_s: {raw!r} is not a number of seconds")
        if not last_s > 0 or math.isnan(last_s):
            return _error(400, f"last_s: must be a number of seconds above 0, not {raw}")
        rec = self.node.recorder
        if rec is None:
            return _error(404, "the flight recorder is off (snekbed node --recorder-s 0)")
        now = trio.current_time()
        entries = [e for e in rec.entries(now) if e[0] >= now - last_s]
        return read_out(entries, now, self.node.key, self.node.name)

    async def recorder(self, request: Request) -> Response:
        got = self._flight(request)
        if isinstance(got, JSONResponse):
            return got
        return Response(to_jsonl(got), media_type="application/x-ndjson")

    async def recorder_pcapng(self, request: Request) -> Response:
        got = self._flight(request)
        if isinstance(got, JSONResponse):
            return got
        return Response(to_pcapng(got, trio.current_time()), media_type="application/x-pcapng")

    # ------------------------------------------------------------ actions

    async def ping(self, request: Request) -> JSONResponse:
        body = await _body(request, PingRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, PingRequest)
        result = await self.node.ping(bytes.fromhex(body.key), body.mode, body.count, body.timeout_s)
        return JSONResponse(result)

    async def add_peer(self, request: Request) -> JSONResponse:
        body = await _body(request, PeerRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, PeerRequest)
        if self.node.stopping:
            return _error(409, "the node is stopping")
        try:
            result = await self.node.add_peer(body.uri, body.timeout_s, redial=body.redial)
        except ConfigError as exc:
            return _error(400, str(exc))
        return JSONResponse(result, status_code=201 if result["status"] == "connected" else 202)

    async def drop_peer(self, request: Request) -> JSONResponse:
        raw = request.path_params["port"]
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_PORTS:
            return _error(400, f"port {raw!r}: expected a peer port 1..{MAX_PORTS}")
        unknown = sorted(set(request.query_params) - {"key", "remote"})
        if unknown:
            return _error(400, f"unknown parameter {unknown[0]!r} (known: key, remote)")
        want = {k: request.query_params.get(k) for k in ("key", "remote") if k in request.query_params}
        there = self.node.peers.get(int(raw))
        if there is not None and want:  # conditional: only the peering the caller means (its port may be reused)
            have = {"key": there.key.hex(), "remote": there.remote}
            if any(have[k] != (v.lower() if k == "key" else v) for k, v in want.items()):
                return JSONResponse({"error": f"port {raw}: its peering is another one", "port": int(raw), **have},
                                    status_code=409)  # fmt: skip
        peer = self.node.drop_peer(int(raw))
        if peer is None:
            return _error(404, f"port {raw}: no peer on this port")
        return JSONResponse({"port": peer.port, "key": peer.key.hex(), "status": "closed"})

    async def redial(self, request: Request) -> JSONResponse:
        return JSONResponse({"woken": self.node.redial_now()})

    async def shape(self, request: Request) -> JSONResponse:
        body = await _body(request, ShapeRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, ShapeRequest)
        peer = bytes.fromhex(body.peer) if body.peer is not None else None
        try:
            shapes = self.node.set_link_shape(peer, body.link_class, body.shaping, port=body.port)
        except (ValueError, KeyError) as exc:
            return _error(422, str(exc))
        if not shapes and body.port is not None:
            key = f" {body.peer[:16]}..." if body.peer is not None else ""
            return _error(404, f"port {body.port}: no peer{key} on this port")
        if not shapes:
            return _error(404, f"peer {str(body.peer)[:16]}...: not connected")
        return JSONResponse({"ports": sorted(shapes), "shapes": {str(p): s for p, s in sorted(shapes.items())}})

    async def adversary(self, request: Request) -> JSONResponse:
        body = await _body(request, AdversaryRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, AdversaryRequest)
        params = {**body.params, **body.extra}
        if body.strategy in (None, "drop"):
            if body.drop is None or params:
                return _error(422, "drop: the drop strategy takes 'drop' ({kind: percent}) and 'peer' only"
                              if body.drop is not None else "drop: give 'drop' ({kind: percent}) or a 'strategy'")
            try:
                result = self.node.set_adversary(body.drop, bytes.fromhex(body.peer) if body.peer else None)
            except ValueError as exc:
                return _error(422, f"drop: {exc}")
            return JSONResponse(result)
        if body.drop is not None or body.peer is not None:
            return _error(422, f"strategy: {body.strategy} takes no 'drop' or 'peer' (those are the drop strategy's)")
        try:
            return JSONResponse(self.node.set_attack(body.strategy, params))
        except ValueError as exc:
            return _error(422, str(exc))

    async def traffic(self, request: Request) -> JSONResponse:
        body = await _body(request, TrafficRequest)
        if isinstance(body, JSONResponse):
            return body
        assert isinstance(body, TrafficRequest)
        result: dict[str, Any] = await self.node.run_load(
            bytes.fromhex(body.key), body.payload_bytes, body.count, body.inflight, body.timeout_s
        )
        return JSONResponse(result)


async def _crashed(request: Request, exc: Exception) -> JSONResponse:
    log.error("admin %s %s failed", request.method, request.path, exc_info=exc)
    return _error(500, f"internal error: {type(exc).__name__}: {exc}")


def build_app(node: AdminView) -> App:
    """The admin app for ``node`` (it sees only the view: :class:`node.view.AdminView`)."""
    return App(_Handlers(node).routes(), on_error=_crashed)


async def serve(
    node: AdminView,
    where: HostPort,
    shutdown_trigger: Callable[[], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin API on ``where`` until ``shutdown_trigger`` returns. Raises OSError."""
    await serve_http(build_app(node), where, shutdown_trigger, task_status=task_status)
