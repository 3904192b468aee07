"""Shared test helpers.

Tests that need Docker, Java or Prometheus call ``need(...)``: on a laptop
without the thing they skip and say why; under CI (tests/ci.py: CI=1, true or yes)
they fail, so CI can never go green by skipping what it was meant to run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.ci import IN_CI, REPO, SHARED, need, need_module

__all__ = ["IN_CI", "REPO", "SHARED", "TOPOLOGIES", "docker_available", "java_available", "need", "need_module"]

TOPOLOGIES = SHARED / "topologies" / "pinecone"


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
