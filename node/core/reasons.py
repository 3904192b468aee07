"""Why the protocol core drops a peer or a frame: every reason it counts, named once (sans-IO).

The router counts ``("disconnect", reason)`` when it drops a peer and ``("frame_dropped", type, reason)``
when it drops a frame; the shell exports them as ``snek_peer_disconnects_total{reason}`` and
``snek_dropped_frames_total{type, reason}``, and, because the sets below are known in advance, exports every
one at 0 from the start, so that ``rate()`` and ``increase()`` see the first one (docs/metrics.md).

The sets are the contract: the router counts a peer drop only for a reason in :data:`DISCONNECT_REASONS`
(``Router._disconnect``) and a frame drop only through :func:`count_drop`, which takes only a pair of
:data:`DROPS`. Anything else is a bug (AssertionError). Frame types are named as the metrics name them
(:mod:`contract.frames`: a number outside the table is ``unknown``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from contract.frames import FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE, frame_type_name

from .errors import MALFORMED_REASONS

__all__ = [
    "ALL_TYPES",
    "ANNOUNCEMENT_REASONS",
    "BROADCAST_REASONS",
    "DECODE_BODY_REASONS",
    "DECODE_HEADER_REASONS",
    "DISCONNECT_REASONS",
    "DROPS",
    "DROP_TYPES",
    "count_drop",
]

#: Every frame type label: each name of the table and ``unknown``.
ALL_TYPES: Final[tuple[str, ...]] = (*FRAME_TYPE_NAMES, UNKNOWN_FRAME_TYPE)

#: §5.3 steps 2-3: an announcement that parses but that the tree refuses (node.core.announce: the first four;
#: node.core.tree.Tree.check_announcement: the last two).
ANNOUNCEMENT_REASONS: Final[frozenset[str]] = frozenset({
    "announcement_no_hops", "announcement_first_hop_not_root", "announcement_port_zero",
    "announcement_duplicate_key", "announcement_last_hop_not_peer", "announcement_replay",
})  # fmt: skip

#: §6.8: a wakeup broadcast whose signed root does not parse, or does not verify (node.core.broadcast).
BROADCAST_REASONS: Final[frozenset[str]] = frozenset({"bad_broadcast", "bad_signature"})

#: Every reason the router drops a peer for: an announcement whose payload does not parse (a MalformedFrame's
#: reason, or a BadSignature's ``bad_signature``), or one refused above.
DISCONNECT_REASONS: Final[frozenset[str]] = MALFORMED_REASONS | ANNOUNCEMENT_REASONS | BROADCAST_REASONS

#: What :class:`~node.core.wire.FrameDecoder` raises on a frame's header: no type is known yet (``unknown``).
DECODE_HEADER_REASONS: Final[frozenset[str]] = frozenset({"bad_magic", "short_length"})
#: What :func:`~node.core.wire.decode_frame` raises on a whole frame of any type, past its header.
DECODE_BODY_REASONS: Final[frozenset[str]] = frozenset(
    {"truncated", "trailing_bytes", "bad_coords", "bad_varu64", "bad_payload_length"}
)

_LEGACY: Final = ("legacy_bootstrap", "legacy_bootstrap_ack", "legacy_setup", "legacy_teardown")

#: Every reason the router drops a frame for -> the frame types it can drop for it (the module counting it).
DROP_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "adversary": ALL_TYPES,  # router: node.core.adversary, at whatever rates it was given ("all": any type)
    "unknown_type": ("bootstrap", *_LEGACY, UNKNOWN_FRAME_TYPE),  # router: neither it nor its variant takes it
    "hop_limit": ("traffic",),  # forward: hop limiting (a variant knob) and the hop limit ran out
    "loop": ("traffic", "bootstrap", "legacy_bootstrap"),  # forward, snek_reference, snek_s0, snek_legacy
    "watermark": ("traffic", "bootstrap"),  # forward, snek_reference: the next hop's watermark is worse (§6.5)
    "legacy_mode": ("bootstrap",),  # snek_legacy: type 2 is not used by §7.4's variant
    "no_route": ("legacy_bootstrap_ack",),  # snek_legacy
    "malformed": ("legacy_teardown",),  # snek_legacy: its payload does not parse
    "unknown_path": ("legacy_teardown",),  # snek_legacy: §7.3.4 step 1
    "foreign_port": ("legacy_teardown",),  # snek_legacy: §7.3.4 step 2
}

#: Every ``(frame type label, reason)`` the router counts a dropped frame under.
DROPS: Final[frozenset[tuple[str, str]]] = frozenset((t, r) for r, types in DROP_TYPES.items() for t in types)


def count_drop(counters: Counter[tuple[Any, ...]], t: int, reason: str) -> None:
    """Count one dropped frame of wire type ``t`` as ``("frame_dropped", t, reason)`` in ``counters``.

    Raises AssertionError (a bug) when the pair is not in :data:`DROPS`.
    """
    assert (frame_type_name(t), reason) in DROPS, f"frame drop ({frame_type_name(t)}, {reason}) is not in DROPS"
    counters[("frame_dropped", t, reason)] += 1
