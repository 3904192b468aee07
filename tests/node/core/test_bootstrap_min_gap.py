"""The ``bootstrap_min_gap`` knob (a bootstrap-flood mitigation, not in the spec: docs/attacks.md, docs/variants.md):
a bootstrap whose origin's route was installed or refreshed under the same root less than the gap ago is rejected
(``bootstrap_rejected``, reason ``rate``) and not forwarded; one after the gap, or under another root, is taken.
Both variants of snekbed's router honour it; the older snake and the reference cannot set it."""

from __future__ import annotations

import pytest
from routerkit import Bench, bootstrap_frame, bootstraps_in, chain, identities

from node.core.types import Root
from node.core.variants import VariantError, VariantSpec

K = identities(10)
ME, ROOT = K[5], K[9]
R1 = Root(ROOT.public_key, 1)


def _bench(spec: str) -> tuple[Bench, int, int]:
    """ME under ROOT, Y = K[1] a second peer; a route to K[3] learnt from Y at t = 1."""
    b = Bench(ME, **VariantSpec.parse(spec).router_options())  # type: ignore[arg-type]
    p = b.join(ROOT, [])
    y = b.join(K[1], [ROOT])
    b.drain()
    b.at(1.0).send(y, bootstrap_frame(K[3], 1000, R1))
    assert b.r.table.get(K[3].public_key) is not None
    b.drain()
    return b, p, y


@pytest.mark.parametrize("variant", ["snek", "snek-s0"])
def test_a_refresh_within_the_gap_is_rejected_as_rate_and_one_after_it_taken(variant: str) -> None:
    b, _p, y = _bench(f"{variant},bootstrap_min_gap=2")
    key = K[3].public_key
    b.at(2.5).send(y, bootstrap_frame(K[3], 1001, R1))  # 1.5 s after the last: inside the gap
    assert b.r.table.get(key).last_seen == 1.0  # type: ignore[union-attr]
    assert b.r.counters[("bootstrap_rejected", "rate")] == 1 and bootstraps_in(b.drain()) == []
    b.at(3.0).send(y, bootstrap_frame(K[3], 1002, R1))  # 2 s after: taken
    assert b.r.table.get(key).last_seen == 3.0  # type: ignore[union-attr]
    assert b.r.counters[("bootstrap_rejected", "rate")] == 1


@pytest.mark.parametrize("variant", ["snek", "snek-s0"])
def test_without_the_knob_or_under_a_new_root_nothing_is_rejected_for_rate(variant: str) -> None:
    b, _p, y = _bench(variant)  # off by default: the spec's behaviour
    b.at(1.1).send(y, bootstrap_frame(K[3], 1001, R1))
    assert b.r.table.get(K[3].public_key).last_seen == 1.1  # type: ignore[union-attr]
    g, p, y = _bench(f"{variant},bootstrap_min_gap=30")
    g.at(2.0).announce(p, chain([ROOT], root_seq=2))  # the root's sequence moves: routes of R1 are another root's
    g.at(2.5).send(y, bootstrap_frame(K[3], 1001, Root(ROOT.public_key, 2)))
    assert g.r.table.get(K[3].public_key).last_seen == 2.5  # type: ignore[union-attr]
    assert g.r.counters[("bootstrap_rejected", "rate")] == 0


def test_the_knob_is_a_setting_of_snekbeds_variants_only() -> None:
    assert VariantSpec.parse("snek,bootstrap_min_gap=1.5").knob("bootstrap_min_gap") == 1.5
    assert str(VariantSpec.parse("snek-s0,bootstrap_min_gap=0")) == "snek-s0"  # the default is not written
    for spec in ("legacy,bootstrap_min_gap=1", "pinecone,bootstrap_min_gap=1", "snek,bootstrap_min_gap=61"):
        with pytest.raises(VariantError, match="bootstrap_min_gap"):
            VariantSpec.parse(spec)
