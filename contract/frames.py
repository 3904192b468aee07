"""Frame type names: the wire type number (PROTOCOL.md section 4) -> the name the run dataset and metrics use.

The protocol core keeps the numbers (``node.core.types.FrameType``, an ``IntEnum``);
this table is the only place their names are spelled. A test checks that the two
agree (``tests/test_architecture.py``).
"""

from __future__ import annotations

__all__ = [
    "CONTROL_FRAME_TYPE_NAMES",
    "FRAME_TYPE_NAMES",
    "UNKNOWN_FRAME_TYPE",
    "frame_type_name",
]

#: Wire type number (the index) -> name.
FRAME_TYPE_NAMES: tuple[str, ...] = ("keepalive", "tree_announcement", "bootstrap", "traffic", "wakeup_broadcast")

#: The frame types that are protocol overhead (everything but traffic).
CONTROL_FRAME_TYPE_NAMES: tuple[str, ...] = tuple(n for n in FRAME_TYPE_NAMES if n != "traffic")

#: The name counted for a type number outside the table.
UNKNOWN_FRAME_TYPE = "unknown"


def frame_type_name(t: int | None) -> str:
    """The name of wire frame type ``t``; ``"unknown"`` for numbers outside the table (or None)."""
    if t is not None and 0 <= t < len(FRAME_TYPE_NAMES):
        return FRAME_TYPE_NAMES[t]
    return UNKNOWN_FRAME_TYPE
