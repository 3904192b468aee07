"""A topology node's ``adversary:`` field (docs/topology.md, docs/attacks.md): the node is adversarial from its
start. The field holds one spec of ``snekbed node --adversary`` (``greyhole:forward=0.5``, ``drop:bootstrap=100``,
``bootstrap=100@PEERKEY``) and is read by the flag's own parsers (``node.config.parse_attack`` and
``parse_adversary``), so a bad spec gets the flag's message. A reference node (variant ``pinecone``,
docs/interop.md) has only ``drop``: another strategy is refused with the reason the reference node gives.

In process the node's router starts with it (orchestrator.backends.inproc); on Docker the node's command line
carries ``--adversary SPEC`` (orchestrator.backends.docker_plan). A chaos run records each such node as an
``adversary`` action when it starts, as a step's, so the checker judges the honest view from the first step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from node.config import ConfigError, parse_adversary, parse_attack
from node.core.attacks import STRATEGY_NAMES, make_strategy
from node.core.variants import VariantSpec

__all__ = ["NodeAdversary", "adversaries_of", "check_adversary", "parse_node_adversary", "reference_refusal"]

FLAG = "--adversary"


@dataclass(frozen=True, slots=True)
class NodeAdversary:
    """A parsed ``adversary:`` spec: ``drop`` (rates, peer key or None) or ``attack`` (strategy, params)."""

    spec: str
    drop: tuple[dict[str, float], bytes | None] | None = None
    attack: tuple[str, dict[str, str]] | None = None

    def detail(self) -> dict[str, Any]:
        """The ``adversary`` action's detail, as a step's (orchestrator.chaos.apply, attack_steps) records it, with
        ``spec`` and ``from: topology`` (a drop spec's peer is a key: ``peer_key``)."""
        if self.attack is not None:
            name, params = self.attack
            typed = make_strategy(name, params).describe()  # the parameters given, as the strategy took them
            out: dict[str, Any] = {"strategy": name, **{k: typed.get(k, v) for k, v in params.items()}}
        else:
            rates, peer = self.drop or ({}, None)
            out = {"drop": dict(rates), **({"peer_key": peer.hex()} if peer is not None else {})}
        return {**out, "spec": self.spec, "from": "topology"}


def parse_node_adversary(spec: str) -> NodeAdversary:
    """``spec`` parsed as ``snekbed node --adversary`` parses it. Raises node.config.ConfigError (a ValueError)
    with the flag's message."""
    attack = parse_attack(spec)
    if attack is not None:
        return NodeAdversary(spec, attack=attack)
    return NodeAdversary(spec, drop=parse_adversary(spec))


def reference_refusal(spec: str) -> str | None:
    """Why a reference node (node/pinecone) refuses ``spec``, in its words (``--adversary 'SPEC': STRATEGY: the
    reference node has only the drop strategy ...``); None for a drop spec, which it takes."""
    head = spec.partition(":")[0].strip()
    if head == "drop" or head not in STRATEGY_NAMES:
        return None
    names = [n for n in STRATEGY_NAMES if n not in ("drop", "none")] + ["none"]
    return str(ConfigError(FLAG, spec, f"{head}: the reference node has only the drop strategy (the simulator's "
                                       f"GeneralAdversary); {', '.join(names[:-1])} and {names[-1]} are snekbed "
                                       "node's (docs/attacks.md)"))


def check_adversary(spec: str, variant: str | None) -> str:
    """The ``adversary`` field's check (NodeSpec): ``spec`` parses as the flag's, and a node whose ``variant`` is
    the reference's gives only ``drop``. Returns ``spec`` stripped; raises ValueError with the flag's message."""
    spec = spec.strip()
    parse_node_adversary(spec)
    if variant is not None and VariantSpec.parse(variant).implementation == "reference":
        why = reference_refusal(spec)
        if why is not None:
            raise ValueError(why)
    return spec


def adversaries_of(nodes: Iterable[Any]) -> dict[str, NodeAdversary]:
    """Name -> the parsed ``adversary`` of each node of ``nodes`` (NodeSpec) that has one, in order."""
    return {n.name: parse_node_adversary(n.adversary) for n in nodes if n.adversary is not None}
