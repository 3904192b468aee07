"""Adversary strategies and ground keys in process (orchestrator.chaos.backend.Attacks; docs/attacks.md).

A mixin of :class:`~orchestrator.chaos.inproc_backend.InprocChaos`: a strategy of :mod:`node.core.attacks` is
set on the node's router directly; a ground key (:mod:`node.core.grind`) is the seed the node's identity is made
from when it next joins (``InprocChaos._identity`` looks here first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from node.core.attacks import make_strategy

__all__ = ["InprocAttacks"]


class InprocAttacks:
    """Mixed into InprocChaos (which has ``net`` and ``sleep``)."""

    net: Any

    async def sleep(self, seconds: float) -> None: ...

    @property
    def ground_seeds(self) -> dict[str, bytes]:
        """Node name -> the seed of its ground key (use_key), for its next join."""
        return self.__dict__.setdefault("_ground_seeds", {})

    async def attack(self, name: str, strategy: str, params: dict[str, Any]) -> dict[str, Any] | None:
        node = self.net.nodes[name]
        router = node.router
        old = router.attack
        router.set_attack(make_strategy(strategy, params, timers=router.t), self.net.now)
        self.net.flush(node)
        await self.sleep(0)
        return old.describe() if old is not None else None

    async def node_keys(self, names: Iterable[str] | None = None) -> dict[str, bytes]:
        wanted = None if names is None else set(names)
        return {n: node.key for n, node in self.net.nodes.items() if wanted is None or n in wanted}

    async def use_key(self, name: str, seed: bytes) -> None:
        self.ground_seeds[name] = seed
