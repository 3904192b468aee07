"""Adversary strategies and ground keys on Docker (orchestrator.chaos.backend.Attacks; docs/attacks.md).

A mixin of :class:`~orchestrator.chaos.docker_backend.DockerChaos`: a strategy is set through each node's admin
API, ``POST /adversary {"strategy": NAME, PARAM: VALUE, ...}`` (a reference node refuses every strategy but drop,
with its reason: the step fails with it).

Ground keys (a join's ``key:``): Docker gives each container its key seed when the run starts, nodes that join
later included (they are created stopped). So the engine grinds every join's key before the containers exist
(:func:`orchestrator.chaos.ground_keys.plan_ground_seeds`, the same rule a step applies, on the keys each join
will see) and creates that node with its seed (its ``key_seed``). When the step runs it grinds again among the
keys of the nodes that have joined (:meth:`DockerAttacks.node_keys` leaves out the ones still waiting for their
join, as in process), and :meth:`DockerAttacks.use_key` checks that the container has exactly that seed, or fails
the step saying why (a node made with the run, or one joined before; keys that changed since the plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import trio

from orchestrator.chaos.targets import TargetError

__all__ = ["DockerAttacks"]


class DockerAttacks:
    """Mixed into DockerChaos (which has ``_admin``, ``session``, ``topology``, ``seed`` and ``_start_stopped``)."""

    _admin: Any
    session: Any
    topology: Any
    seed: int
    _start_stopped: set[str]

    @property
    def waiting(self) -> set[str]:
        """Nodes the scenario joins later that have not joined yet (``add_node`` takes each out)."""
        return self.__dict__.setdefault("_waiting", set(self._start_stopped))

    async def adversary(self, name: str, drop: dict[str, float], peer: str | None) -> None:
        assert self._admin is not None and self.session is not None
        body = {"drop": drop, "peer": self.session.keys[peer] if peer is not None else None}
        await trio.to_thread.run_sync(self._admin.post, name, "/adversary", body)

    async def attack(self, name: str, strategy: str, params: dict[str, Any]) -> dict[str, Any] | None:
        assert self._admin is not None
        got = await trio.to_thread.run_sync(self._admin.post, name, "/adversary", {"strategy": strategy, **params})
        return got.get("replaced")  # a reference node has no strategies but drop: it refuses before this

    async def node_keys(self, names: Iterable[str] | None = None) -> dict[str, bytes]:
        """The keys of the nodes that have joined the run (created stopped and not joined yet: left out)."""
        assert self.session is not None
        wanted = None if names is None else set(names)
        return {n: bytes.fromhex(k) for n, k in self.session.keys.items()
                if n not in self.waiting and (wanted is None or n in wanted)}  # fmt: skip

    async def use_key(self, name: str, seed: bytes) -> None:
        """Nothing to do when ``name``'s container was created with ``seed``; else the step fails (TargetError)."""
        if name not in self.topology.node_names:
            raise TargetError(f"key: node {name!r} was not declared when the run started (Docker needs its address)")
        made = self.topology.node(name).seed_bytes(self.seed)
        if made == seed:
            return
        if name not in self._start_stopped:
            why = (f"{name} started with the run, with its own key: on Docker a ground key goes to a node the "
                   "scenario joins later (created with the key ground before the run)")
        elif name not in self.waiting:
            why = f"{name} has joined before, with the key its container was created with"
        else:
            why = (f"{name}'s container was created with the key ground before the run for the keys this join "
                   "would see; the run's keys are not those now (a node that did not join, or left, as planned)")
        raise TargetError(f"key: the ground key's seed {seed.hex()[:16]}.. is not the one {name} was created with "
                          f"({made.hex()[:16]}..): {why} (docs/attacks.md)")
