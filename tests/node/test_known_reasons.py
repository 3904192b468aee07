"""Every reason a node can count a peer disconnect or a dropped frame under is one of its known label values
(node.view.DISCONNECT_REASONS and DROPS, the router's part in node.core.reasons), which its /metrics exports
at 0 from the start (tests/node/test_fresh_metrics.py).

Two ways. The source: every literal reason the node's code hands to a counting function, or to what ends a
peering, is read off the syntax tree and must be known. The producers, driven: arbitrary frames (hypothesis)
go through the codec and the router of each variant, and every drop and disconnect they cause must be known.
The counting functions also refuse an unknown reason (AssertionError), so any other test that reaches one
fails as well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.frames import FRAME_TYPE_NUMBERS, frame_type_name
from node.core import reasons as router_reasons
from node.core import wire
from node.core.crypto import Identity, derive_seed
from node.core.errors import MalformedFrame
from node.core.router import Router
from node.core.types import Frame, LinkType, Watermark
from node.core.variants import VARIANTS
from node.peer import END_REASONS
from node.view import DISCONNECT_REASONS, DROPS, SHELL_DISCONNECT_REASONS, SHELL_DROPS, ShellCounters

NODE = Path(__file__).resolve().parents[2] / "node"
ROUTER_DROP_REASONS = frozenset(r for _, r in router_reasons.DROPS)
SHELL_DROP_REASONS = frozenset(r for _, r in SHELL_DROPS)

#: (call written as a plain name or as an attribute, its name) -> (position of the reason argument, known set)
FUNNELS: dict[tuple[bool, str], tuple[int, frozenset[str]]] = {
    (False, "count_drop"): (2, ROUTER_DROP_REASONS),  # node.core.reasons.count_drop(counters, t, reason)
    (True, "_drop"): (1, ROUTER_DROP_REASONS),  # snek_legacy's
    (True, "_disconnect"): (1, router_reasons.DISCONNECT_REASONS),  # Router._disconnect(port, reason, now)
    (True, "count_drop"): (1, SHELL_DROP_REASONS),  # ShellCounters.count_drop(ftype, reason, n)
    (True, "_on_drop"): (1, SHELL_DROP_REASONS),
    (True, "count_disconnect"): (0, SHELL_DISCONNECT_REASONS),
    (True, "stop_peers"): (0, SHELL_DISCONNECT_REASONS),
    (True, "drop_peer"): (1, SHELL_DISCONNECT_REASONS),
    (True, "close"): (0, DISCONNECT_REASONS),  # PeerConn.close(reason): whoever ends the peering
    (False, "PeerClosed"): (0, END_REASONS),
    (True, "_set_reason"): (0, END_REASONS),
}
#: functions whose returned strings are disconnect reasons (the router drops the peer for them)
RETURNS = {"check_announcement": router_reasons.DISCONNECT_REASONS, "received": router_reasons.BROADCAST_REASONS}


def _literals(node: ast.expr | None) -> Iterator[str]:
    """The string constants an argument can be: itself, or either branch of ``a if c else b``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)


def _reasons_in(tree: ast.Module) -> Iterator[tuple[int, str, frozenset[str]]]:
    """``(line, literal reason, the set it must be in)`` for each reason literal of a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            key = (True, f.attr) if isinstance(f, ast.Attribute) else (False, getattr(f, "id", ""))
            if key in FUNNELS:
                pos, known = FUNNELS[key]
                arg = node.args[pos] if len(node.args) > pos else None
                arg = next((k.value for k in node.keywords if k.arg == "reason"), arg)
                yield from ((node.lineno, r, known) for r in _literals(arg))
        elif isinstance(node, ast.FunctionDef) and node.name in RETURNS:
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return):
                    yield from ((ret.lineno, r, RETURNS[node.name]) for r in _literals(ret.value))
        elif isinstance(node, ast.FunctionDef) and node.name == "drop_peer":
            yield from ((node.lineno, r, SHELL_DISCONNECT_REASONS) for d in node.args.defaults for r in _literals(d))
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "problem" for t in node.targets):
            yield from ((node.lineno, r, router_reasons.ANNOUNCEMENT_REASONS) for r in _literals(node.value))
        elif isinstance(node, ast.Assign) and any(getattr(t, "attr", None) == "reason" for t in node.targets):
            yield from ((node.lineno, r, END_REASONS) for r in _literals(node.value) if r)  # "": not ended yet


def test_every_literal_reason_in_the_code_is_known() -> None:
    found, unknown = [], []
    for path in sorted(NODE.rglob("*.py")):
        for line, reason, known in _reasons_in(ast.parse(path.read_text(), str(path))):
            found.append(reason)
            if reason not in known:
                unknown.append(f"{path.relative_to(NODE.parent)}:{line}: {reason!r}")
    assert not unknown, "reasons not in the known sets:\n" + "\n".join(unknown)
    # the scan reads what it should: the producers' own words
    assert {"admin_removed", "ports_full", "node_stopping", "eof", "read_timeout", "queue_full", "peer_gone",
            "adversary", "hop_limit", "announcement_replay", "bad_broadcast", "announcement_no_hops"} <= set(found)


def test_the_known_sets_hold_together() -> None:
    assert DISCONNECT_REASONS == SHELL_DISCONNECT_REASONS | router_reasons.DISCONNECT_REASONS
    assert DROPS == SHELL_DROPS | router_reasons.DROPS
    labels = {*router_reasons.ALL_TYPES}
    assert {t for t, _ in DROPS} <= labels and all(r and r == r.strip() for r in DISCONNECT_REASONS)
    counters = ShellCounters()
    with pytest.raises(AssertionError, match="not in SHELL_DISCONNECT_REASONS"):
        counters.count_disconnect("made_up")
    with pytest.raises(AssertionError, match="not in SHELL_DROPS"):
        counters.count_drop(3, "made_up", 1)
    with pytest.raises(AssertionError, match="not in DROPS"):
        router_reasons.count_drop(counters.drops, 0, "hop_limit")  # hop limits apply to traffic only
    assert not counters.disconnects and not counters.drops


# ---------------------------------------------------------------- the producers, driven

_US, _PEER = Identity(derive_seed("known-reasons", 1)), Identity(derive_seed("known-reasons", 2))
_TYPE = st.sampled_from([*FRAME_TYPE_NUMBERS, 5, 0x42, 0xFF])
_KEY = st.one_of(st.just(_PEER.public_key), st.just(_US.public_key), st.binary(min_size=32, max_size=32))
_COORDS = st.lists(st.integers(0, 300), max_size=4).map(tuple)


@st.composite
def _raw(draw: st.DrawFn) -> bytes:
    """Bytes shaped like a frame: a header (sometimes wrong) and any body."""
    body = draw(st.binary(max_size=120))
    magic = draw(st.sampled_from([b"pine", b"pine", b"pinf"]))
    length = draw(st.one_of(st.just(10 + len(body)), st.integers(0, 200)))
    return magic + bytes([0, draw(_TYPE), 0, draw(st.integers(0, 255))]) + length.to_bytes(2, "big") + body


@st.composite
def _encoded(draw: st.DrawFn) -> bytes | None:
    """A frame the codec writes, with arbitrary fields and payload (None when they do not encode)."""
    f = Frame(draw(_TYPE), draw(st.integers(0, 255)), draw(_KEY), draw(_KEY), draw(_COORDS), draw(_COORDS),
              Watermark(draw(_KEY), draw(st.integers(0, 5))), draw(st.binary(max_size=200)))  # fmt: skip
    try:
        return wire.encode_frame(f)
    except ValueError:
        return None


def _router(variant: str, adversary: bool) -> tuple[Router, int]:
    r = Router(_US, 0.0, snek=variant, hop_limiting=True)
    if adversary:
        r.set_adversary({"all": 50})
    port = r.add_peer(_PEER.public_key, int(LinkType.REMOTE), 0.0)
    assert port is not None
    return r, port


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.lists(st.one_of(_raw(), _encoded()), min_size=1, max_size=6), adversary=st.booleans())
def test_arbitrary_frames_are_counted_under_known_reasons_only(variant: str, data: list, adversary: bool) -> None:
    """What a peer may send, through FrameDecoder.feed_raw (the shell's reader) and Router.bytes_received (the
    shell's hand-over): every MalformedFrame is a drop the shell knows, every router drop and disconnect one
    the router knows."""
    if VARIANTS[variant].implementation != "snekbed":
        return
    r, port = _router(variant, adversary)
    for i, raw in enumerate(d for d in data if d is not None):
        try:
            frames = wire.FrameDecoder().feed_raw(raw)
            if port in r.peers:
                r.bytes_received(port, frames, float(i))
        except MalformedFrame as exc:
            assert (frame_type_name(exc.frame_type), exc.reason) in SHELL_DROPS, exc
        out = r.drain()
        assert {reason for _, reason in out.disconnects} <= router_reasons.DISCONNECT_REASONS
    for key in r.counters:
        if key[0] == "frame_dropped":
            assert (frame_type_name(key[1]), key[2]) in router_reasons.DROPS, key
        elif key[0] == "disconnect":
            assert key[1] in router_reasons.DISCONNECT_REASONS, key
