"""Ground keys of the chaos ``join`` steps (``key: {near: VICTIM, side: ...}``, ``key: {above_all: true}``;
docs/attacks.md): one rule for when a step runs and for before the run starts.

:func:`ground` is the rule, pure: given every node the run has made, by name and key, it places the joining node's
key among the honest ones (all but the joining node's, those of nodes that joined as adversaries and those the
topology makes adversaries from their start: :func:`topology_adversaries`) and grinds it
(:func:`node.core.grind.grind`, seeded by the run's seed and the node's name). When a step runs,
:func:`orchestrator.chaos.attack_steps.ground_key` calls it with the backend's keys. A backend whose keys are
fixed before the first step (Docker: each container gets its key seed when it is created) grinds them all
before the run with :func:`plan_ground_seeds`, which follows the scenario's joins in order and calls the same
rule on the keys each join will see, and creates each such node with its seed (:func:`with_ground_keys`, the
node's ``key_seed``); when the step runs, ``DockerAttacks.use_key`` checks that the key ground then is that one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from node.core.crypto import Identity
from node.core.grind import GrindError, Ground, above_all, grind, near
from orchestrator.chaos.checker import adversaries_after
from orchestrator.chaos.steps import Adversary, Join
from orchestrator.chaos.targets import TargetError
from orchestrator.model.topology import Topology

__all__ = ["created_keys", "ground", "plan_ground_seeds", "topology_adversaries", "with_ground_keys",
           "with_planned_keys"]


def ground(run_seed: int | str | bytes, step: Join, keys: Mapping[str, bytes],
           adversaries: Collection[str] = ()) -> tuple[Ground, str]:  # fmt: skip
    """The key ``step.key`` grinds for ``step.node`` among ``keys`` (every node the run has made: name -> key),
    and its rule (``above n7``, ``below n7``, ``above all``). ``adversaries`` (nodes that joined as adversaries,
    and the topology's: :func:`topology_adversaries`) and the joining node itself do not bound it. Raises
    TargetError: a victim that has not joined, no key found within ``max_tries``."""
    spec = step.key
    assert spec is not None and step.node is not None
    honest = {n: k for n, k in keys.items() if n != step.node and n not in adversaries}
    if spec.near is not None:
        if spec.near not in honest:
            raise TargetError(f"key: near {spec.near!r}, which has not joined the run")
        accept = near(honest[spec.near], honest.values(), spec.side)
        rule = f"{spec.side} {spec.near}"
    else:
        accept, rule = above_all(honest.values()), "above all"
    try:
        return grind(run_seed, step.node, accept, spec.max_tries), rule
    except GrindError as exc:
        raise TargetError(f"key: {exc} ({rule})") from None


def topology_adversaries(topology: Topology | None) -> set[str]:
    """The nodes ``topology`` makes adversaries from their start (their ``adversary:`` field): never honest keys."""
    return {n.name for n in topology.nodes if n.adversary is not None} if topology is not None else set()


def plan_ground_seeds(steps: Sequence[object], keys: Mapping[str, bytes], present: Iterable[str],
                      run_seed: int | str | bytes, adversaries: Iterable[str] = ()) -> dict[str, bytes]:  # fmt: skip
    """The seed each ``join`` step with a ``key`` will grind, for a node that first joins at that step: name ->
    seed. ``keys``: every node's key as created (those that join later included), ``present``: the nodes the run
    starts with; ``adversaries``: the topology's (:func:`topology_adversaries`). The steps are followed in order
    as the StepApplier applies them: a join makes its node one of the run's (with its ground key), an
    adversary's join adds it to the adversaries, an ``adversary`` step on a named node makes it one (or honest
    again: :func:`_turned`), a join whose grind fails (a victim not joined yet, ``max_tries`` spent) fails and
    adds nothing. A join of a node already made gets no seed here (its key was fixed when it was made: ``use_key``
    refuses what that step grinds). Pure."""
    made = {n: keys[n] for n in present}
    adversaries = set(adversaries)
    seeds: dict[str, bytes] = {}
    for step in steps:
        adversaries = _turned(step, made, adversaries)
        if not isinstance(step, Join) or step.node is None:
            continue
        if step.key is not None:
            try:
                g, _ = ground(run_seed, step, made, adversaries)
            except TargetError:
                continue  # the step fails when it runs, the same way: its node does not join
            if step.node not in made:
                seeds[step.node] = g.seed
                made[step.node] = g.key
        elif step.node not in made and step.node in keys:
            made[step.node] = keys[step.node]
        adversaries = set(adversaries_after(adversaries, "join", step.node, {"adversary": step.adversary}))
    return seeds


def _turned(step: object, made: Mapping[str, bytes], adversaries: set[str]) -> set[str]:
    """The adversaries after ``step`` when it is an ``adversary`` step on a named node (the checker's rule,
    checker.adversaries_after); a role (``root``, ``random``...) resolves only when the step runs, and a key ground
    then that differs from the planned one is refused (``use_key``), never used silently."""
    if not isinstance(step, Adversary):
        return adversaries
    detail = {"strategy": step.strategy, "drop": step.drop}
    for name in (n for n in step.named if n in made):
        adversaries = set(adversaries_after(adversaries, "adversary", name, detail))
    return adversaries


def with_ground_keys(topology: Topology, seeds: Mapping[str, bytes]) -> Topology:
    """``topology`` with each node of ``seeds`` given that key seed (its ``key_seed``)."""
    nodes = [n.model_copy(update={"key_seed": seeds[n.name].hex()}) if n.name in seeds else n for n in topology.nodes]
    return topology.model_copy(update={"nodes": nodes})


def created_keys(topology: Topology, run_seed: int | str | bytes) -> dict[str, bytes]:
    """Every node's key as a backend that creates them up front makes it: from ``NodeSpec.seed_bytes``."""
    return {n.name: Identity(n.seed_bytes(run_seed)).public_key for n in topology.nodes}


def with_planned_keys(topology: Topology, steps: Sequence[object], present: Iterable[str],
            run_seed: int | str | bytes) -> Topology:  # fmt: skip
    """``topology`` (every node of the run, those that join later included) with the key seed each of its ``join``
    steps will grind (:func:`plan_ground_seeds`), for a backend that makes every node before the first step.
    ``topology`` itself when no join has a ``key``."""
    if not any(isinstance(st, Join) and st.key is not None for st in steps):
        return topology
    seeds = plan_ground_seeds(steps, created_keys(topology, run_seed), present, run_seed,
                              topology_adversaries(topology))  # fmt: skip
    return with_ground_keys(topology, seeds)
