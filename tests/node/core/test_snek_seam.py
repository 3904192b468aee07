"""The SNEK variant is chosen once, at construction, and owns the frame types it names (PROTOCOL.md §7.4)."""

from __future__ import annotations

import pytest
from routerkit import identities

from node.core.router import SNEK_VARIANTS, Router
from node.core.snek_reference import SnekReference
from node.core.types import Frame, FrameType


class _Legacyish(SnekReference):
    """The reference rules, plus a frame type of its own (as the legacy variant's 0xE0-0xE3), minus type 2."""

    frame_types = frozenset((0xE0,))

    def __init__(self, host, now: float) -> None:
        self.got: list[tuple[int, int]] = []
        super().__init__(host, now)

    def frame_received(self, port: int, frame: Frame, now: float) -> None:
        self.got.append((port, frame.type))


def test_the_router_hands_a_variant_its_own_frame_types() -> None:
    me, peer = identities(2, "seam")
    r = Router(me, 0.0, snek=_Legacyish)
    port = r.add_peer(peer.public_key, 3, 0.0)
    r.frame_received(port, Frame(0xE0, payload=b"legacy"), 0.0)
    r.frame_received(port, Frame(FrameType.BOOTSTRAP, destination_key=peer.public_key), 0.0)
    assert r.snek.got == [(port, 0xE0)]  # type 2 is not this variant's: the router drops it as unknown
    assert r.counters[("frame_dropped", 2, "unknown_type")] == 1
    assert r.counters[("frame_dropped", 0xE0, "unknown_type")] == 0


def test_variants_by_name() -> None:
    me = identities(1, "seam")[0]
    assert type(Router(me, 0.0).snek) is SNEK_VARIANTS["snek"] is SnekReference
    with pytest.raises(KeyError):
        Router(me, 0.0, snek="no-such-variant")
