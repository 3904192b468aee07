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


# The suite runs on two workers (pytest -n 2 --dist loadgroup: README, .ci/run). Tests that share a heavy
# resource stay on one worker: every Spark test on the worker that holds the session's one JVM, every Docker
# test on one worker so two runs' containers never compete for the 2 cores while a convergence bound ticks, and
# the tests that use the host's one multicast group and port (the multicast mark) one after another.
# The rest is spread over both. Without xdist the marks are inert.
XDIST_GROUPS = ("spark", "docker", "multicast")


# tryfirst: xdist's own hook turns xdist_group marks into the scheduling key; ours must run before it
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    uses = {"spark": {"spark"}, "docker": {"client", "image"}, "multicast": set()}  # fixtures implying the group
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for group in XDIST_GROUPS:
            if item.get_closest_marker(group) is not None or fixtures & uses[group]:
                item.add_marker(pytest.mark.xdist_group(group))
                break
