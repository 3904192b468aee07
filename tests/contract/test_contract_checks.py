"""The link models' hand-written checks give pydantic's errors, word for word (no pydantic loaded to check).

The expected rows were what the pydantic models (before contract.links and node.admin left pydantic) answered for
the same input: location and message. Each check is compared twice: its own wording (``Invalid.errors()``, what a
node shows without loading pydantic) and pydantic_core's rendering of the same error (``Invalid.as_pydantic()``,
what the orchestrator catches).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pydantic
import pytest

from contract.checks import Invalid
from contract.links import LinkClass, LinkShape, resolve_class

SHAPE_ERRORS = [
    ({'delay_ms': -1}, 'delay_ms', 'Input should be greater than or equal to 0'),
    ({'loss_pct': 101}, 'loss_pct', 'Input should be less than or equal to 100'),
    ({'rate_mbit': 0}, 'rate_mbit', 'Input should be greater than 0'),
    ({'delay_ms': float("nan")}, 'delay_ms', 'Input should be a finite number'),
    ({'delay_ms': float("inf")}, 'delay_ms', 'Input should be a finite number'),
    ({'delay_ms': 5, 'jitter_ms': 6}, '', 'Value error, jitter_ms (6) exceeds delay_ms (5): delays would be clipped at 0 and the mean would drift above delay_ms'),
    ({'reorder_pct': 5}, '', 'Value error, reorder_pct needs delay_ms > 0: reordered frames are the ones sent without the delay'),
    ({'queue_limit_pkts': 20}, '', 'Value error, queue_limit_pkts needs rate_mbit: without a rate limit no queue builds up to bound'),
    ({'queue_limit_pkts': 0, 'rate_mbit': 1}, 'queue_limit_pkts', 'Input should be greater than or equal to 1'),
    ({'delay': 5}, 'delay', 'Extra inputs are not permitted'),
    ({'delay_ms': 'abc'}, 'delay_ms', 'Input should be a valid number, unable to parse string as a number'),
    ({'delay_ms': None}, 'delay_ms', 'Input should be a valid number'),
    ({'queue_limit_pkts': 2.5, 'rate_mbit': 1}, 'queue_limit_pkts', 'Input should be a valid integer, got a number with a fractional part'),
    ({'queue_limit_pkts': 'x', 'rate_mbit': 1}, 'queue_limit_pkts', 'Input should be a valid integer, unable to parse string as an integer'),
    ({'delay_ms': 70000}, 'delay_ms', 'Input should be less than or equal to 60000'),
    ({'rate_mbit': 1000000.0}, 'rate_mbit', 'Input should be less than or equal to 100000'),
    ({'delay_ms': [1]}, 'delay_ms', 'Input should be a valid number'),
    ({'queue_limit_pkts': 2000000, 'rate_mbit': 1}, 'queue_limit_pkts', 'Input should be less than or equal to 1000000'),
    ({'delay_ms': -1, 'loss_pct': 200, 'zz': 1}, 'delay_ms', 'Input should be greater than or equal to 0'),
    ({'delay_ms': 'nan'}, 'delay_ms', 'Input should be a finite number'),
]

CLASS_ERRORS = [
    ({'name': 'x', 'link_type': 'wifi', 'source': 's'}, 'link_type', "Input should be 'pipe', 'multicast', 'bonjour', 'remote' or 'bluetooth'"),
    ({'name': 'X', 'link_type': 'pipe', 'source': 's'}, 'name', "String should match pattern '^[a-z][a-z0-9_-]{0,31}$'"),
    ({'name': 'x', 'link_type': 'pipe', 'source': ''}, 'source', 'String should have at least 1 character'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 'a\nb'}, 'source', "String should match pattern '^[^\\n]+$'"),
    ({'name': 'x', 'link_type': 'pipe', 'source': "a" * 301}, 'source', 'String should have at most 300 characters'),
    ({'name': 'x', 'link_type': 'pipe'}, 'source', 'Field required'),
    ({'name': 'x', 'source': 's'}, 'link_type', 'Field required'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'shape': 5}, 'shape', 'Input should be a valid dictionary or instance of LinkShape'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'shape': {'delay_ms': -1}}, 'shape.delay_ms', 'Input should be greater than or equal to 0'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'rationale': {'foo': 'x'}}, 'rationale.foo', 'Extra inputs are not permitted'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'rationale': {'delay_ms': 5}}, 'rationale.delay_ms', 'Input should be a valid string'),
    ({'name': 5, 'link_type': 'pipe', 'source': 's'}, 'name', 'Input should be a valid string'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 5, 'extra': 1}, 'source', 'Input should be a valid string'),
    ({'name': 'x', 'link_type': 3, 'source': 's'}, 'link_type', "Input should be 'pipe', 'multicast', 'bonjour', 'remote' or 'bluetooth'"),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'shape': None}, 'shape', 'Input should be a valid dictionary or instance of LinkShape'),
    ({'name': 'x', 'link_type': 'pipe', 'source': 's', 'rationale': None}, 'rationale', 'Input should be a valid dictionary or instance of ShapeRationale'),
]


def _first(exc: Invalid | pydantic.ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    return ".".join(str(p) for p in err["loc"]), err["msg"]


@pytest.mark.parametrize(("model", "data", "loc", "msg"),
                         [(LinkShape, *row) for row in SHAPE_ERRORS] + [(LinkClass, *row) for row in CLASS_ERRORS])
def test_checks_word_errors_as_pydantic_did(model: Any, data: dict[str, Any], loc: str, msg: str) -> None:
    with pytest.raises(Invalid) as mine:
        model.parse(data)
    assert _first(mine.value) == (loc, msg)
    ours = [(e["loc"], e["type"], e["msg"]) for e in mine.value.errors()]
    theirs = [(e["loc"], e["type"], e["msg"]) for e in mine.value.as_pydantic().errors()]  # type: ignore[attr-defined]
    assert ours == theirs
    with pytest.raises(pydantic.ValidationError) as raised:  # the constructors raise pydantic's own error
        model(**data)
    assert _first(raised.value) == (loc, msg)


def test_every_error_is_listed_fields_first_then_unknown_keys() -> None:
    with pytest.raises(Invalid) as info:
        LinkShape.parse({"delay_ms": -1, "loss_pct": 200, "zz": 1})
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [
        (("delay_ms",), "greater_than_equal"), (("loss_pct",), "less_than_equal"), (("zz",), "extra_forbidden")]


def test_lax_coercion_as_pydantic() -> None:
    assert LinkShape.parse({"delay_ms": "5", "rate_mbit": 1, "queue_limit_pkts": 2.0}) == LinkShape(
        delay_ms=5.0, rate_mbit=1.0, queue_limit_pkts=2)
    assert LinkShape(delay_ms=True).delay_ms == 1.0 and LinkShape(delay_ms=" 1e3 ").delay_ms == 1000.0
    assert type(LinkShape(delay_ms=1).delay_ms) is float and type(LinkShape(rate_mbit=1, queue_limit_pkts="7").queue_limit_pkts) is int
    with pytest.raises(pydantic.ValidationError, match="valid dictionary or instance of LinkShape"):
        LinkShape.model_validate(5)


def test_model_api_the_orchestrator_uses() -> None:
    bt = resolve_class("bluetooth")
    assert list(LinkShape.model_fields) == ["delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "duplicate_pct",
                                            "corrupt_pct", "reorder_pct", "queue_limit_pkts"]
    assert LinkShape.model_validate(bt.shape.model_dump()) == bt.shape
    assert LinkShape(delay_ms=5, rate_mbit=1).model_dump(exclude_defaults=True) == {"delay_ms": 5.0, "rate_mbit": 1.0}
    dumped = bt.model_dump(exclude_none=True)
    assert dumped["shape"]["queue_limit_pkts"] == 20 and "reorder_pct" not in dumped["rationale"]
    assert LinkClass.model_validate(bt.model_dump()) == bt and bt.model_copy(update={"source": "x"}).source == "x"


def test_a_topology_override_error_has_pydantic_cause_with_locations() -> None:
    try:
        resolve_class("bluetooth", {"bluetooth": {"shape": {"loss_pct": 500}}})
    except ValueError as exc:
        cause = exc.__cause__
        assert isinstance(cause, pydantic.ValidationError)
        assert [e["loc"] for e in cause.errors()] == [("shape", "loss_pct")]
    else:
        raise AssertionError("the override was accepted")


def test_link_classes_and_checks_load_no_pydantic() -> None:
    code = "import sys, contract.links, contract.lines; contract.links.default_classes(); print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
