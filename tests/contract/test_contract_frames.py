"""The shared leaf's name tables agree with the protocol core's numbers."""

from __future__ import annotations

from contract.dataset import EVENT_TYPES
from contract.frames import (
    CONTROL_FRAME_TYPE_NAMES,
    FRAME_TYPE_NAMES,
    FRAME_TYPE_NUMBERS,
    FRAME_TYPE_SLOTS,
    UNKNOWN_FRAME_SLOT,
    UNKNOWN_FRAME_TYPE,
    frame_type_name,
    frame_type_slot,
)
from contract.links import LINK_TYPE_NAMES, LINK_TYPE_NUMBERS, default_classes
from node.core.types import FrameType, LegacyFrameType, LinkType


def test_frame_type_names_follow_the_core_frame_type_numbers():
    core = [*FrameType, *LegacyFrameType]
    assert len(FRAME_TYPE_NAMES) == len(FRAME_TYPE_NUMBERS) == len(core)
    for slot, t in enumerate(core):
        assert FRAME_TYPE_NUMBERS[slot] == int(t)
        assert FRAME_TYPE_NAMES[slot] == t.name.lower() == frame_type_name(t) == frame_type_name(int(t))
        assert FRAME_TYPE_SLOTS[int(t)] == frame_type_slot(t) == slot


def test_unknown_frame_types_have_one_name_and_one_slot():
    for t in (len(FrameType), 0xDF, 0xE4, 0xFF, -1, None):
        assert frame_type_name(t) == UNKNOWN_FRAME_TYPE
        assert frame_type_slot(t) == UNKNOWN_FRAME_SLOT == len(FRAME_TYPE_NAMES)
    assert UNKNOWN_FRAME_TYPE not in FRAME_TYPE_NAMES
    assert len(FRAME_TYPE_SLOTS) == 256 and FRAME_TYPE_SLOTS[0xE4] == UNKNOWN_FRAME_SLOT


def test_control_frames_are_every_type_but_traffic():
    assert set(CONTROL_FRAME_TYPE_NAMES) == set(FRAME_TYPE_NAMES) - {FrameType.TRAFFIC.name.lower()}


def test_frame_stats_accept_exactly_the_frame_type_names():
    (field,) = [f for f in EVENT_TYPES["frame_stats"] if f.name == "frame_type"]
    assert field.choices == FRAME_TYPE_NAMES


def test_link_type_tables_follow_the_core_link_type_numbers():
    assert LINK_TYPE_NAMES == {int(t): t.name.lower() for t in LinkType}
    assert LINK_TYPE_NUMBERS == {t.name.lower(): int(t) for t in LinkType}
    assert {c.link_type for c in default_classes().values()} == set(LINK_TYPE_NUMBERS)
