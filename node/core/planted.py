"""TEST ONLY: a routing bug planted on purpose, to prove that the chaos tooling finds a real defect and that the
flight recorder shows it (docs/chaos.md, "A planted routing bug"). Never on unless a test asks (sans-IO).

A test plants it with the variant knob ``planted_bug`` (node.core.variants.KNOBS), on one node of a topology
(``nodes: [{name: n03, knobs: {planted_bug: misroute_after_peer_loss}}]``) or on a node's command line
(``snekbed node --knob planted_bug=misroute_after_peer_loss``). Its default, ``""``, is off: the router then
never looks at it but for one flag read per batch of received frames and per decoded Traffic frame, and the
transit fast path (node.core.forward) is untouched.

* ``misroute_after_peer_loss``: once the node has lost a peer (any peer, for any reason: a kill, a partition, a
  link cut), it sends every transit Traffic frame (another node's, bound for another node) back out of the port
  it arrived on, as a stale port table would. The peer there sees its own next hop come back and drops the
  frame (``loop``, or ``watermark``): pings through the node are lost, so ``pairs_reachable`` fails at the
  first check after a fault next to it, and not before. The node's routing state, announcements and
  bootstraps stay right (the tree and the snake converge); only the forwarding of Traffic is wrong.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Final

from .state import Send
from .types import Frame, FrameType

__all__ = ["MISROUTE_AFTER_PEER_LOSS", "PLANTED_BUGS", "parse_planted_bug", "send_back"]

MISROUTE_AFTER_PEER_LOSS: Final = "misroute_after_peer_loss"
#: every bug that can be planted (the knob's values besides "", off)
PLANTED_BUGS: Final[tuple[str, ...]] = (MISROUTE_AFTER_PEER_LOSS,)
_TRAFFIC: Final = int(FrameType.TRAFFIC)


def parse_planted_bug(text: str) -> str:
    """The knob's value: ``""`` (also ``off``, ``none``, ``0``) or a name of :data:`PLANTED_BUGS`. Raises
    ValueError naming the known ones."""
    t = text.strip().lower()
    if t in ("", "off", "none", "0"):
        return ""
    if t not in PLANTED_BUGS:
        raise ValueError(f"{text!r} is not a planted bug (known: {', '.join(PLANTED_BUGS)}; test only)")
    return t


def send_back(sends: MutableSequence[Send], start: int, from_port: int, own_key: bytes) -> None:
    """The planted misroute: of ``sends[start:]`` (what forwarding one frame that arrived on ``from_port`` put in
    the outbox), every Traffic frame of another node's bound elsewhere goes back to ``from_port`` instead."""
    for i in range(start, len(sends)):
        port, item = sends[i]
        if port != from_port and type(item) is Frame and item.type == _TRAFFIC and item.source_key != own_key:
            sends[i] = (from_port, item)
