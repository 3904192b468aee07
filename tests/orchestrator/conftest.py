"""Fixtures for the orchestrator tests: kernel namespaces, and the Docker engine with the node image."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.ci import need
from tests.conftest import docker_available
from tests.netns_fixtures import kernel_tools, netns, nsrun  # noqa: F401  (pytest finds fixtures imported here)
from tests.orchestrator.docker_helpers import build_test_image


@pytest.fixture(scope="module")
def client() -> object:
    """A Docker client; skips without an engine (fails under CI: tests/ci.py)."""
    ok, why = docker_available()
    need(ok, why)
    import docker  # the Docker SDK, an optional extra: only Docker tests load it

    return docker.from_env()


@pytest.fixture(scope="module")
def image(client: object) -> str:
    """The node image, built from local parts or reused (SNEKBED_TEST_IMAGE names one to use as is)."""
    return build_test_image(client)


@pytest.fixture
def run_id(client: object) -> Iterator[str]:
    """A fresh run id; whatever the test left under it is removed by label at the end."""
    from orchestrator.backends.docker import DockerBackend  # needs the Docker SDK, as the client does

    rid = f"t{uuid.uuid4().hex[:7]}"
    try:
        yield rid
    finally:
        DockerBackend(client).down(rid)  # type: ignore[arg-type]
