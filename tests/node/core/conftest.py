"""Fixtures of tests/node/core: the reference's wire vectors (:mod:`wirekit`), loaded once per module."""

from __future__ import annotations

from typing import Any

import pytest
from wirekit import load_vectors, vector_keys

from node.core.crypto import Identity


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    return load_vectors()


@pytest.fixture(scope="module")
def keys(vectors: dict[str, Any]) -> dict[str, Identity]:
    return vector_keys(vectors)
