"""The admin API's bodies are checked by hand (contract.checks), with the errors pydantic gave: the same 422 JSON.

Each row is what ``POST`` of that body answered when node.admin validated with pydantic models: the error's
location and message (the handler answers ``{"error": "LOC: MSG"}`` with the first one). Checked in process, on
the bodies' own ``parse`` (the endpoints are covered by tests/node/test_node_admin.py); and, cheaply in a
subprocess, that a node started as its container starts it (``snekbed node``) loads no pydantic.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from contract.checks import Invalid
from node.admin import AdversaryRequest, PeerRequest, PingRequest, ShapeRequest, TrafficRequest

K = "00" * 32

ROWS: list[tuple[Any, dict[str, Any], str, str]] = [
    (PingRequest, {}, 'key', 'Field required'),
    (PingRequest, {'key': 'abc'}, 'key', 'Value error, must be 64 hex digits (an ed25519 public key)'),
    (PingRequest, {'key': K, 'mode': 'flood'}, 'mode', "Input should be 'snek' or 'tree'"),
    (PingRequest, {'key': K, 'count': 0}, 'count', 'Input should be greater than or equal to 1'),
    (PingRequest, {'key': K, 'bogus': 1}, 'bogus', 'Extra inputs are not permitted'),
    (PingRequest, {'key': K, 'count': 2.5}, 'count', 'Input should be a valid integer, got a number with a fractional part'),
    (PingRequest, {'key': K, 'timeout_s': 0}, 'timeout_s', 'Input should be greater than 0'),
    (PingRequest, {'key': K, 'timeout_s': 61}, 'timeout_s', 'Input should be less than or equal to 60'),
    (PingRequest, {'key': 5}, 'key', 'Input should be a valid string'),
    (PingRequest, {'bogus': 1, 'key': 'x'}, 'key', 'Value error, must be 64 hex digits (an ed25519 public key)'),
    (PingRequest, {'key': K, 'count': None}, 'count', 'Input should be a valid integer'),
    (PingRequest, {'key': K, 'timeout_s': 'nan'}, 'timeout_s', 'Input should be less than or equal to 60'),
    (PeerRequest, {}, 'uri', 'Field required'),
    (PeerRequest, {'uri': ''}, 'uri', 'String should have at least 1 character'),
    (PeerRequest, {'uri': "x" * 2001}, 'uri', 'String should have at most 2000 characters'),
    (PeerRequest, {'uri': 'u', 'timeout_s': -1}, 'timeout_s', 'Input should be greater than or equal to 0'),
    (PeerRequest, {'uri': 'u', 'timeout_s': 121}, 'timeout_s', 'Input should be less than or equal to 120'),
    (PeerRequest, {'uri': 5}, 'uri', 'Input should be a valid string'),
    (PeerRequest, {'uri': 'u', 'redial': 'no'}, 'redial', 'Input should be a valid boolean'),
    (PeerRequest, {'uri': 'u', 'redial': 0}, 'redial', 'Input should be a valid boolean'),
    (PeerRequest, {'uri': 'u', 'x': 1}, 'x', 'Extra inputs are not permitted'),
    (AdversaryRequest, {'drop': {'traffic': 'abc'}}, 'drop.traffic', 'Input should be a valid number, unable to parse string as a number'),
    (AdversaryRequest, {'drop': [1]}, 'drop', 'Input should be a valid dictionary'),
    (AdversaryRequest, {'peer': 'zz'}, 'peer', 'Value error, must be 64 hex digits (an ed25519 public key)'),
    (AdversaryRequest, {'strategy': 5}, 'strategy', 'Input should be a valid string'),
    (AdversaryRequest, {'params': 5}, 'params', 'Input should be a valid dictionary'),
    (AdversaryRequest, {'drop': {'a': None}}, 'drop.a', 'Input should be a valid number'),
    (ShapeRequest, {}, '', "Value error, give 'peer' (a public key: every peering with it) or 'port' (one peering), or both"),
    (ShapeRequest, {'peer': None, 'port': None}, '', "Value error, give 'peer' (a public key: every peering with it) or 'port' (one peering), or both"),
    (ShapeRequest, {'port': 0}, 'port', 'Input should be greater than or equal to 1'),
    (ShapeRequest, {'port': 254}, 'port', 'Input should be less than or equal to 253'),
    (ShapeRequest, {'port': 'x'}, 'port', 'Input should be a valid integer, unable to parse string as an integer'),
    (ShapeRequest, {'port': 1.5}, 'port', 'Input should be a valid integer, got a number with a fractional part'),
    (ShapeRequest, {'peer': 'zz'}, 'peer', 'Value error, must be 64 hex digits (an ed25519 public key)'),
    (ShapeRequest, {'peer': K, 'class': 5}, 'class', 'Input should be a valid string'),
    (ShapeRequest, {'peer': K, 'class': 'lan', 'shaping': {'delay_ms': 'abc'}}, 'shaping.delay_ms', 'Input should be a valid number, unable to parse string as a number'),
    (ShapeRequest, {'peer': K, 'shaping': 5}, 'shaping', 'Input should be a valid dictionary'),
    (ShapeRequest, {'peer': K, 'x': 1}, 'x', 'Extra inputs are not permitted'),
    (TrafficRequest, {}, 'key', 'Field required'),
    (TrafficRequest, {'key': K, 'payload_bytes': 5}, 'payload_bytes', 'Input should be greater than or equal to 22'),
    (TrafficRequest, {'key': K, 'count': 0}, 'count', 'Input should be greater than or equal to 1'),
    (TrafficRequest, {'key': K, 'inflight': 100001}, 'inflight', 'Input should be less than or equal to 100000'),
    (TrafficRequest, {'key': K, 'timeout_s': 0}, 'timeout_s', 'Input should be greater than 0'),
    (TrafficRequest, {'key': K, 'payload_bytes': 60001}, 'payload_bytes', 'Input should be less than or equal to 60000'),
]


@pytest.mark.parametrize(("model", "body", "loc", "msg"), ROWS)
def test_bad_bodies_are_refused_with_pydantics_words(model: Any, body: dict[str, Any], loc: str, msg: str) -> None:
    with pytest.raises(Invalid) as info:
        model.parse(body)
    err = info.value.errors()[0]
    assert (".".join(str(p) for p in err["loc"]), err["msg"]) == (loc, msg)


def test_good_bodies_take_defaults_and_coerce_as_before() -> None:
    assert PingRequest.parse({"key": "AB" * 32, "count": "3"}) == PingRequest("ab" * 32, "snek", 3, 5.0)
    assert PingRequest.parse({"key": K, "count": True}).count == 1
    assert PeerRequest.parse({"uri": "tcp://h:1"}) == PeerRequest("tcp://h:1", 10.0)
    adv = AdversaryRequest.parse({"strategy": "forge", "rate_per_s": 5, "params": {"kinds": ["bootstrap"]}})
    assert adv.strategy == "forge" and adv.extra == {"rate_per_s": 5} and adv.params == {"kinds": ["bootstrap"]}
    assert AdversaryRequest.parse({"drop": {"a": 1}, "peer": None}).drop == {"a": 1.0}
    shape = ShapeRequest.parse({"peer": K, "class": "lan", "shaping": {"delay_ms": None, "loss_pct": 1}})
    assert shape.link_class == "lan" and shape.shaping == {"delay_ms": None, "loss_pct": 1.0}
    assert ShapeRequest.parse({"peer": K, "link_class": "lan"}).link_class == "lan"
    assert ShapeRequest.parse({"port": "7"}) == ShapeRequest(None, None, {}, 7)
    assert ShapeRequest.parse({"port": 7, "peer": K}) == ShapeRequest(K, None, {}, 7)
    assert TrafficRequest.parse({"key": K}) == TrafficRequest(K, 64, 10_000, 64, 60.0)


def test_a_node_as_its_container_starts_it_loads_no_pydantic() -> None:
    """``snekbed node`` (the image's entrypoint) resolves to node.cli through the lazy command group."""
    code = ("import sys, click; from orchestrator.cli import main; "
            "main.get_command(click.Context(main), 'node'); import node.lifecycle; "
            "print('node.admin' in sys.modules, sorted(m for m in sys.modules if m.startswith('pydantic')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "True []", out.stdout
