"""Reaching the Docker engine: a client from the environment (``DOCKER_HOST`` or the local socket), pinged."""

from __future__ import annotations

import docker
import docker.errors

from orchestrator.backends.docker_net import DockerBackendError

__all__ = ["EngineUnreachable", "docker_client"]


class EngineUnreachable(DockerBackendError):
    """The Docker engine did not answer (no socket, no permission, not running)."""


def docker_client() -> docker.DockerClient:
    """``docker.from_env()``, pinged. Raises EngineUnreachable ("cannot reach the Docker engine: ...")."""
    try:
        client = docker.from_env()
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnreachable(f"cannot reach the Docker engine: {exc}") from exc
    return client
