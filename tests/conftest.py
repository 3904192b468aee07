"""Shared test helpers.

Tests that need Docker, Java or Prometheus call ``need(...)``: on a laptop
without the thing they skip and say why; with CI=true they fail, so CI can
never go green by skipping what it was meant to run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TOPOLOGIES = SHARED / "topologies" / "pinecone"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(ok: bool, why: str) -> None:
    """Skip (laptop) or fail (CI=true) when a required component is missing."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"CI=true and a required component is missing: {why}")
    pytest.skip(why)


def docker_available() -> tuple[bool, str]:
    try:
        import docker

        docker.from_env().ping()
        return True, ""
    except Exception as exc:  # the SDK raises several unrelated types when no engine answers
        return False, f"no Docker engine reachable ({exc.__class__.__name__}: {exc})"


def java_available() -> bool:
    return shutil.which("java") is not None


@pytest.fixture
def shared_dir() -> Path:
    need(SHARED.is_dir(), f"shared/ reference material not found at {SHARED}")
    return SHARED
