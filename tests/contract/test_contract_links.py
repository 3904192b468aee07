"""Link classes as data: the default table, validation, overrides, link type numbers."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

from contract.links import (
    DEFAULT_QUEUE_PKTS,
    InvalidLinkClass,
    LinkClass,
    LinkClassError,
    LinkShape,
    UnknownLinkClass,
    default_classes,
    link_type_number,
    load_classes,
    merge_classes,
    resolve_class,
)


def test_default_table_has_the_issue_classes_with_their_numbers():
    table = default_classes()
    assert {"bluetooth", "remote", "lan", "multicast", "pipe", "custom"} <= set(table)
    assert table["bluetooth"].shape == LinkShape(rate_mbit=1.5, delay_ms=30, jitter_ms=5, loss_pct=2, queue_limit_pkts=20)
    assert table["remote"].shape == LinkShape(rate_mbit=20, delay_ms=25, jitter_ms=3, loss_pct=0.2, queue_limit_pkts=100)
    assert table["lan"].shape == LinkShape(rate_mbit=1000, delay_ms=0.1)
    assert table["multicast"].shape == table["lan"].shape
    assert table["pipe"].shape.is_noop and table["custom"].shape.is_noop
    assert {n: c.link_type for n, c in table.items()} == {
        "bluetooth": "bluetooth", "remote": "remote", "lan": "multicast", "multicast": "multicast",
        "bonjour": "bonjour", "pipe": "pipe", "custom": "remote",
    }  # fmt: skip


def test_issue_ranges_hold_for_the_defaults():
    t = default_classes()
    bt, remote, lan = t["bluetooth"].shape, t["remote"].shape, t["lan"].shape
    assert 1 <= bt.rate_mbit <= 2 and 20 <= bt.delay_ms <= 60 and bt.jitter_ms > 0 and 1 <= bt.loss_pct <= 3
    assert bt.queue_limit_pkts is not None and bt.queue_limit_pkts <= 32
    assert 10 <= remote.rate_mbit < 100 and 15 <= remote.delay_ms <= 50 and 0 < remote.loss_pct < 1
    assert lan.rate_mbit == 1000 and lan.delay_ms < 1 and lan.loss_pct == 0


def test_every_default_class_explains_every_value_it_sets():
    for name, cls in default_classes().items():
        assert cls.source and "\n" not in cls.source, name
        for field, value in cls.shape.model_dump().items():
            if value not in (0, 0.0, None):
                line = getattr(cls.rationale, field)
                assert line and "\n" not in line, f"{name}.{field} has no rationale"


def test_link_type_numbers_follow_protocol_section_3_4():
    t = default_classes()
    assert [link_type_number(t[n]) for n in ("pipe", "multicast", "bonjour", "remote", "bluetooth")] == [0, 1, 2, 3, 4]
    assert link_type_number("bluetooth") == 4 and t["lan"].link_type_number == 1
    with pytest.raises(ValueError, match="unknown link type 'wifi'"):
        link_type_number("wifi")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"delay_ms": -1}, "delay_ms"),
        ({"loss_pct": 101}, "loss_pct"),
        ({"rate_mbit": 0}, "rate_mbit"),
        ({"delay_ms": float("nan")}, "delay_ms"),
        ({"delay_ms": 5, "jitter_ms": 6}, "jitter_ms \\(6\\) exceeds delay_ms \\(5\\)"),
        ({"reorder_pct": 5}, "reorder_pct needs delay_ms"),
        ({"queue_limit_pkts": 20}, "queue_limit_pkts needs rate_mbit"),
        ({"queue_limit_pkts": 0, "rate_mbit": 1}, "queue_limit_pkts"),
        ({"delay": 5}, "delay"),  # extra="forbid": a unit-less typo is rejected
    ],
)
def test_bad_shapes_are_rejected_naming_the_field(fields, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        LinkShape(**fields)


def test_shapes_are_frozen_and_hashable():
    shape = LinkShape(delay_ms=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        shape.delay_ms = 2  # type: ignore[misc]
    assert hash(shape) == hash(LinkShape(delay_ms=1.0))


def test_effective_queue_defaults_to_txqueuelen_only_with_a_rate():
    assert LinkShape().effective_queue_pkts is None
    assert LinkShape(rate_mbit=5).effective_queue_pkts == DEFAULT_QUEUE_PKTS == 1000
    assert LinkShape(rate_mbit=5, queue_limit_pkts=7).effective_queue_pkts == 7


def test_unknown_class_is_a_key_error_listing_known_names():
    with pytest.raises(UnknownLinkClass) as info:
        resolve_class("wifi", {"mesh": {"link_type": "remote", "source": "x"}})
    assert isinstance(info.value, KeyError) and isinstance(info.value, LinkClassError)
    assert str(info.value) == "unknown link class 'wifi' (known: bluetooth, bonjour, custom, lan, mesh, multicast, pipe, remote)"


def test_partial_override_merges_onto_the_default_and_drops_stale_rationale():
    cls = resolve_class("bluetooth", {"bluetooth": {"shape": {"loss_pct": 5}}})
    assert cls.shape == default_classes()["bluetooth"].shape.model_copy(update={"loss_pct": 5.0})
    assert cls.rationale.loss_pct is None and cls.rationale.delay_ms is not None
    assert cls.source.startswith("topology override of bluetooth (loss_pct)")
    assert default_classes()["bluetooth"].shape.loss_pct == 2  # defaults untouched


def test_custom_class_filled_in_by_a_topology():
    cls = resolve_class("custom", {"custom": {"shape": {"delay_ms": 10, "duplicate_pct": 1, "corrupt_pct": 0.5,
                                                         "reorder_pct": 2, "rate_mbit": 5, "queue_limit_pkts": 8},
                                              "source": "lab measurement"}})  # fmt: skip
    assert cls.link_type == "remote" and cls.source == "lab measurement"
    assert cls.shape.reorder_pct == 2 and cls.shape.queue_limit_pkts == 8


def test_new_class_must_be_complete_and_valid():
    table = merge_classes({"satellite": {"link_type": "remote", "shape": {"delay_ms": 300}, "source": "GEO hop"}})
    assert table["satellite"].shape.delay_ms == 300 and table["satellite"].name == "satellite"
    with pytest.raises(InvalidLinkClass, match=r"invalid link class 'satellite' in topology overrides: .*link_type"):
        merge_classes({"satellite": {"shape": {"delay_ms": 300}, "source": "GEO hop"}})
    with pytest.raises(InvalidLinkClass, match=r"shape.loss_pct"):
        resolve_class("bluetooth", {"bluetooth": {"shape": {"loss_pct": 500}}})
    with pytest.raises(InvalidLinkClass, match="is named 'lan'"):
        resolve_class("wan", {"wan": default_classes()["lan"]})


def test_linkclass_object_override_replaces_the_default():
    mine = LinkClass(name="lan", link_type="multicast", shape=LinkShape(delay_ms=2), source="slow lan")
    assert resolve_class("lan", {"lan": mine}) is mine


def test_load_classes_reports_file_and_class():
    with pytest.raises(InvalidLinkClass, match=r"'x' in topo.yaml: link_type"):
        load_classes("x: {link_type: wifi, source: s}", where="topo.yaml")
    with pytest.raises(InvalidLinkClass, match="expected a mapping of class names"):
        load_classes("- a\n- b\n")
    with pytest.raises(InvalidLinkClass, match="entry says name='y'"):
        load_classes("x: {name: y, link_type: pipe, source: s}")
