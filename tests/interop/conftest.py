"""The reference node for the interop tests: built once per session (and cached across sessions in pytest's
cache directory, by a hash of its sources), or the tests skip on a machine without Go or the reference (and
fail under CI: tests.ci.need)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.reference import build_reference_node, reference_available
from tests.ci import need


@pytest.fixture(scope="session")
def reference_binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ok, why = reference_available()
    need(ok, f"the reference node cannot be built here: {why}")
    return build_reference_node(reference_out(request, tmp_path_factory))


def reference_out(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the binary is cached: pytest's cache directory, or a temporary one without the cache plugin."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("reference-node") if cache is not None else tmp_path_factory.mktemp("reference-node")
