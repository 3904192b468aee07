"""Adversary strategies on Docker (orchestrator.chaos.backend.Attacks; docs/attacks.md).

A mixin of :class:`~orchestrator.chaos.docker_backend.DockerChaos`: a strategy is set through each node's admin
API, ``POST /adversary {"strategy": NAME, PARAM: VALUE, ...}`` (a reference node refuses every strategy but drop,
with its reason: the step fails with it). Ground keys (a join's ``key:``) are in process only: Docker gives each
container its key when the run starts, before any step has run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import trio

__all__ = ["DockerAttacks"]


class DockerAttacks:
    """Mixed into DockerChaos (which has ``_admin`` and ``session``)."""

    _admin: Any
    session: Any

    async def attack(self, name: str, strategy: str, params: dict[str, Any]) -> None:
        assert self._admin is not None
        await trio.to_thread.run_sync(self._admin.post, name, "/adversary", {"strategy": strategy, **params})

    async def node_keys(self, names: Iterable[str] | None = None) -> dict[str, bytes]:
        assert self.session is not None
        wanted = None if names is None else set(names)
        return {n: bytes.fromhex(k) for n, k in self.session.keys.items() if wanted is None or n in wanted}

    async def use_key(self, name: str, seed: bytes) -> None:
        raise NotImplementedError("a join's 'key' (a ground key) is in process only: Docker gives each container "
                                  "its key when the run starts (docs/attacks.md)")
