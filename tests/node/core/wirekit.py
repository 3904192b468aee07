"""Test kit for the wire-vector tests (tests/node/core/test_wire_*.py): the reference's byte vectors.

``shared/spec/pinecone-wire-vectors.json`` holds frames, payloads and announcements the Go reference encodes,
with the seeds of the keys that signed them. The ``vectors`` and ``keys`` fixtures (``conftest.py``) load
them once per test module; a test that needs them is skipped where the file is missing (and fails in CI).
"""

from __future__ import annotations

import json
from typing import Any

from node.core.crypto import Identity
from tests.ci import SHARED, need

__all__ = ["VECTORS_PATH", "load_vectors", "pub", "vector_keys"]

VECTORS_PATH = SHARED / "spec/pinecone-wire-vectors.json"


def load_vectors() -> dict[str, Any]:
    need(VECTORS_PATH.exists(), f"wire vectors not found at {VECTORS_PATH}")
    return json.loads(VECTORS_PATH.read_text())


def vector_keys(vectors: dict[str, Any]) -> dict[str, Identity]:
    """The vectors' identities by name (k1, k2, ...), each checked against the public key the file gives."""
    ids = {k["name"]: Identity(bytes.fromhex(k["seed_hex"])) for k in vectors["keys"]}
    for k in vectors["keys"]:
        assert ids[k["name"]].public_key.hex() == k["public_key_hex"]
    return ids


def pub(keys: dict[str, Identity], name: str) -> bytes:
    return keys[name].public_key
