"""The chaos steps' adversary strategies and ground keys (docs/attacks.md, "Strategies").

:class:`~orchestrator.chaos.apply.StepApplier` hands an ``adversary`` step with a strategy other than drop to
:func:`apply_strategy`, and a ``join`` step with a ``key`` to :func:`ground_key` before the node joins. Both
go through the backend's :class:`~orchestrator.chaos.backend.Attacks` methods; a backend without them (or a
node that refuses a strategy, as the reference node does) fails the step with its reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

from node.core.attacks import STRATEGIES
from orchestrator.chaos.backend import ChaosBackend
from orchestrator.chaos.ground_keys import ground
from orchestrator.chaos.steps import Adversary, Join
from orchestrator.chaos.targets import TargetError

__all__ = ["apply_strategy", "ground_key", "node_strategy_seed"]


def node_strategy_seed(run_seed: object, name: str) -> int:
    """A seeded strategy's seed when the step gives none: from the run's seed and the node's name, so adversaries
    draw independent streams and each run seed samples the strategy's own randomness."""
    return int.from_bytes(hashlib.sha256(f"strategy:{run_seed}:{name}".encode()).digest()[:4], "big")


async def apply_strategy(backend: ChaosBackend, step: Adversary, names: Sequence[str],
                         act: Callable[[str, str | None, dict[str, Any]], None]) -> str:  # fmt: skip
    """Set ``step``'s strategy on every node of ``names`` (recording each as an action); the step's summary."""
    params = step.params()
    given = dict(params)
    try:
        if step.victim is not None:
            keys = await backend.node_keys([step.victim])
            if step.victim not in keys:
                raise TargetError(f"victim {step.victim!r} has not joined the run")
            params["victim"] = keys[step.victim].hex()
        seeded = "seed" in STRATEGIES.get(step.kind, (None, {}))[1] and "seed" not in given
        for n in names:
            mine = {**params, "seed": node_strategy_seed(getattr(backend, "seed", 0), n)} if seeded else params
            replaced = await backend.attack(n, step.kind, mine)
            act("adversary", n, {"strategy": step.kind, **given, **({"seed": mine["seed"]} if seeded else {}),
                                 **({"replaced": replaced} if replaced else {})})
    except NotImplementedError as exc:
        raise TargetError(f"adversary {step.kind}: {exc}") from None
    return step.kind + "".join(f" {k}={v}" for k, v in given.items())


async def ground_key(backend: ChaosBackend, step: Join, adversaries: Collection[str] = ()) -> dict[str, Any]:
    """Grind ``step.key`` for the joining node (seeded by the run's seed and its name) and give it to the
    backend for the join. The key is placed among the honest keys: ``adversaries`` (nodes that joined as
    adversaries, e.g. earlier sybils, and the topology's) do not bound it, so k sybils on one side of a victim cost about k times as
    many tries as one, not exponentially more (the rule: orchestrator.chaos.ground_keys.ground, which a backend
    that makes its keys before the run follows beforehand). Returns what the join's action records: the key, how
    many keys were tried, the rule."""
    assert step.key is not None and step.node is not None
    try:
        g, rule = ground(getattr(backend, "seed", 0), step, await backend.node_keys(), adversaries)
        await backend.use_key(step.node, g.seed)
    except NotImplementedError as exc:
        raise TargetError(f"key: {exc}") from None
    return {"key": g.key.hex(), "key_tries": g.tries, "key_rule": rule}
