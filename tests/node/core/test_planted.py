"""The test-only planted routing bug (node.core.planted, knob ``planted_bug``): off by default and inert until asked;
planted, the router forwards as usual until it loses a peer, then sends every transit Traffic frame back out of the
port it came in on (through the fast path's bytes too), never its own frames."""

from __future__ import annotations

import pytest

from node.core import wire
from node.core.planted import MISROUTE_AFTER_PEER_LOSS, parse_planted_bug
from node.core.types import FrameType
from node.core.variants import VariantError, VariantSpec
from tests.node.core.routerkit import Bench, identities, traffic_frame

PLANTED = VariantSpec.parse(f"snek,planted_bug={MISROUTE_AFTER_PEER_LOSS}")


def _hub(spec: VariantSpec) -> tuple[Bench, bytes, bytes, int, int, int]:
    """A router between a root (port 1), a leaf (port 2) and a third peer (port 3): (bench, root key, leaf key,
    ports)."""
    leaf, me, other, root = identities(4, "planted")
    b = Bench(me, **spec.router_options())
    up = b.join(root)
    down, third = b.connect(leaf), b.connect(other)
    b.drain()
    return b, root.public_key, leaf.public_key, up, down, third


def _traffic_sent(b: Bench) -> list[int]:
    return [port for port, f in b.drain() if f.type == FrameType.TRAFFIC]


@pytest.mark.parametrize("spec", [VariantSpec(), PLANTED])
def test_before_any_peer_is_lost_the_router_forwards_as_usual(spec: VariantSpec) -> None:
    b, root, leaf, up, down, _ = _hub(spec)
    b.send(down, traffic_frame(root, leaf))
    assert _traffic_sent(b) == [up]
    assert not b.r.misrouting
    fast = b.r.forwarding.fast_forwards
    raw = wire.encode_frame(traffic_frame(root, leaf, b"x" * 40))
    b.r.bytes_received(down, [(raw[5], raw), (raw[5], raw)], b.now)  # a miss, then a hit of the transit cache
    assert _traffic_sent(b) == [up, up] and b.r.forwarding.fast_forwards == fast + 1  # the fast path, open


def test_once_a_peer_is_lost_transit_traffic_goes_back_where_it_came_from() -> None:
    b, root, leaf, up, down, third = _hub(PLANTED)
    b.r.remove_peer(third, b.now, "eof")
    b.drain()
    assert b.r.misrouting
    b.send(down, traffic_frame(root, leaf))
    assert _traffic_sent(b) == [down]
    fast = b.r.forwarding.fast_forwards
    raw = wire.encode_frame(traffic_frame(root, leaf, b"y" * 40))
    b.r.bytes_received(down, [(raw[5], raw), (raw[5], raw)], b.now)  # raw bytes too: the fast path is closed
    assert _traffic_sent(b) == [down, down] and b.r.forwarding.fast_forwards == fast
    b.r.send_traffic(root, b"own", b.now)  # the node's own frames still go the right way
    assert _traffic_sent(b) == [up]


def test_without_the_knob_a_lost_peer_changes_nothing() -> None:
    b, root, leaf, up, down, third = _hub(VariantSpec())
    b.r.remove_peer(third, b.now, "eof")
    b.drain()
    b.send(down, traffic_frame(root, leaf))
    assert _traffic_sent(b) == [up] and not b.r.misrouting and b.r.planted_bug == ""


def test_the_knob_names_a_known_bug_and_the_reference_refuses_it() -> None:
    assert parse_planted_bug("") == parse_planted_bug("off") == ""
    assert str(PLANTED) == "snek,planted_bug=misroute_after_peer_loss" and str(VariantSpec()) == "snek"
    with pytest.raises(VariantError, match="not a planted bug"):
        VariantSpec.parse("snek,planted_bug=drop_everything")
    with pytest.raises(VariantError, match="fixes planted_bug"):
        VariantSpec.parse(f"pinecone,planted_bug={MISROUTE_AFTER_PEER_LOSS}")
