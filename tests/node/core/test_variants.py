"""Variant specs and knobs (node.core.variants): parsing, canonical text, router options, peering."""

from __future__ import annotations

import pytest

from node.core.crypto import Identity
from node.core.router import Router
from node.core.snek_reference import SnekReference
from node.core.variants import KNOBS, VARIANTS, VariantError, VariantSpec


def test_spec_text_is_canonical_and_round_trips() -> None:
    s = VariantSpec.parse("snek, wakeup_broadcasts=0 ,root_filter=yes")
    assert str(s) == "snek,root_filter=1,wakeup_broadcasts=0"
    assert VariantSpec.parse(str(s)) == s
    # a knob at its default is not part of the spec: two specs that behave the same print the same
    assert str(VariantSpec.parse("snek,root_filter=0,entry_expiry=10")) == "snek"
    assert s.to_dict() == {"variant": "snek", "knobs": {"root_filter": True, "wakeup_broadcasts": False},
                           "spec": "snek,root_filter=1,wakeup_broadcasts=0"}


def test_later_knobs_win_even_back_to_the_default() -> None:
    spec = VariantSpec.parse("snek,root_filter=1,entry_expiry=20")
    assert str(spec.with_knobs(["root_filter=0"])) == "snek,entry_expiry=20"
    assert str(spec.with_knobs({"entry_expiry": 10})) == "snek,root_filter=1"
    assert str(VariantSpec.parse("legacy").with_knobs(["entry_expiry=10"])) == "legacy,entry_expiry=10"


@pytest.mark.parametrize(("text", "needle"), [
    ("", "no variant name"),
    ("nope", "unknown variant 'nope'"),
    ("snek,colour=red", "unknown knob 'colour'"),
    ("snek,root_filter", "not key=value"),
    ("snek,root_filter=maybe", "root_filter='maybe'"),
    ("snek,bootstrap_interval=0.01", "outside"),
    ("snek,entry_expiry=abc", "entry_expiry='abc'"),
])  # fmt: skip
def test_bad_specs_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(VariantError, match=needle):
        VariantSpec.parse(text)


def test_router_options_reach_the_router_and_the_variant() -> None:
    spec = VariantSpec.parse("snek,root_filter=1,bootstrap_interval=2.5,entry_expiry=4,hop_limiting=1,wakeup_broadcasts=0")
    r = Router(Identity(b"\x01" * 32), 0.0, **spec.router_options())
    assert type(r.snek) is SnekReference and r.variant == "snek"
    assert r.t.bootstrap_interval_s == 2.5 and r.hop_limiting and not r.broadcasts_enabled
    assert r.knobs["root_filter"] is True and r.knobs["entry_expiry"] == 4.0
    assert r.snek.root_filter and r.snek.expiry_s == 4.0
    # a router built without knobs has every knob at its default
    plain = Router(Identity(b"\x02" * 32), 0.0)
    assert plain.knobs == {k: v.default for k, v in KNOBS.items()}


def test_knobs_never_split_a_variant_but_capabilities_do() -> None:
    a, b = VariantSpec.parse("snek"), VariantSpec.parse("snek,root_filter=1")
    assert a.peering_refusal(b) is None
    for other in VARIANTS.values():
        spec = VariantSpec(other.name)
        refusal = a.peering_refusal(spec)
        assert (refusal is None) == (other.capabilities == a.capabilities)
        if refusal:
            assert f"0x{other.capabilities:08x}" in refusal
