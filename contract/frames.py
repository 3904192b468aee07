"""Frame type names: the wire type number (PROTOCOL.md section 4) -> the name the run dataset and metrics use.

The protocol core keeps the numbers (``node.core.types.FrameType`` and, for the older SNEK variant of
section 7.4, ``node.core.types.LegacyFrameType``, both ``IntEnum``); this table is the only place their names
are spelled. A test checks that the two agree (``tests/contract/test_contract_frames.py``).

The numbers are not contiguous (0-4, then 0xE0-0xE3), so per-type counters are kept by **slot**: the
position of the name in :data:`FRAME_TYPE_NAMES`, with one more slot, :data:`UNKNOWN_FRAME_SLOT`, for every
other number (:func:`frame_type_slot`).
"""

from __future__ import annotations

__all__ = [
    "CONTROL_FRAME_TYPE_NAMES",
    "FRAME_TYPE_NAMES",
    "FRAME_TYPE_NUMBERS",
    "FRAME_TYPE_SLOTS",
    "UNKNOWN_FRAME_SLOT",
    "UNKNOWN_FRAME_TYPE",
    "frame_type_name",
    "frame_type_slot",
]

#: Every frame type name, by slot.
FRAME_TYPE_NAMES: tuple[str, ...] = (
    "keepalive", "tree_announcement", "bootstrap", "traffic", "wakeup_broadcast",  # section 4.4
    "legacy_bootstrap", "legacy_bootstrap_ack", "legacy_setup", "legacy_teardown",  # section 7.4 (experimental)
)  # fmt: skip

#: The wire type number of each name, by slot.
FRAME_TYPE_NUMBERS: tuple[int, ...] = (0, 1, 2, 3, 4, 0xE0, 0xE1, 0xE2, 0xE3)

#: The frame types that are protocol overhead (everything but traffic).
CONTROL_FRAME_TYPE_NAMES: tuple[str, ...] = tuple(n for n in FRAME_TYPE_NAMES if n != "traffic")

#: The name counted for a type number outside the table.
UNKNOWN_FRAME_TYPE = "unknown"

#: The slot counted for a type number outside the table (one past the last name).
UNKNOWN_FRAME_SLOT = len(FRAME_TYPE_NAMES)

_SLOT_OF = dict(zip(FRAME_TYPE_NUMBERS, range(len(FRAME_TYPE_NUMBERS))))

#: Type byte (0-255, the index) -> slot: one tuple index on the per-frame path.
FRAME_TYPE_SLOTS: tuple[int, ...] = tuple(_SLOT_OF.get(t, UNKNOWN_FRAME_SLOT) for t in range(256))


def frame_type_slot(t: int | None) -> int:
    """The counter slot of wire frame type ``t``; :data:`UNKNOWN_FRAME_SLOT` for numbers outside the table."""
    return _SLOT_OF.get(t, UNKNOWN_FRAME_SLOT) if isinstance(t, int) else UNKNOWN_FRAME_SLOT


def frame_type_name(t: int | None) -> str:
    """The name of wire frame type ``t``; ``"unknown"`` for numbers outside the table (or None)."""
    slot = frame_type_slot(t)
    return FRAME_TYPE_NAMES[slot] if slot < UNKNOWN_FRAME_SLOT else UNKNOWN_FRAME_TYPE
