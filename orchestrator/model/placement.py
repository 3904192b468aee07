"""Where a topology's nodes run on a swarm of several hosts (docs/multi-host.md, "Placement").

A topology may say where its nodes run, in three ways that combine:

* a node pinned to a host: ``host: h2`` (a swarm node's hostname; ``host: true`` still means a host node outside
  Docker); it is kept as the node's ``on_host``;
* ``placement: spread`` (or ``{spread: true}``): snekbed assigns every node a host itself, balanced, before the
  run starts, instead of leaving it to the swarm's spread preference, which places one service at a time: the
  placement is then known in advance, the same on every run, and recorded;
* ``placement: {local: [bluetooth]}``: nodes joined by links of these classes run on one host, as radios are
  (all of a group's nodes where one of them is pinned; a group with two different pins is refused).

:func:`plan_hosts` is the pure rule (no Docker): groups of nodes joined by local links (each node alone without
``local``), pinned groups on their pin, then, with ``spread``, the other groups largest first (ties: the smallest
node name) each on the host with the fewest nodes so far (ties: the hosts' order). Without ``spread`` only pinned
groups are assigned; the swarm places the rest. :func:`placement_problems` finds a topology's mistakes (a bad
host name, an unknown class, a group pinned twice) as (location, message) pairs for the topology's loader.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["HOST_NAME_RE", "PlacementError", "PlacementSpec", "local_groups", "placement_problems", "plan_hosts"]

#: a swarm node's hostname as a pin names it
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")

Loc = tuple[Any, ...]


class PlacementError(ValueError):
    """A placement that cannot be made on the hosts at hand (a pin to a host the swarm lacks)."""


class PlacementSpec(BaseModel):
    """A topology's ``placement``: ``spread`` (or ``{spread: true}``), and ``local`` link classes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spread: bool = Field(True, description="snekbed assigns every node a host, balanced, before the run")
    local: list[str] = Field(default_factory=list, description="link classes whose nodes share a host")

    @model_validator(mode="before")
    @classmethod
    def _word(cls, data: Any) -> Any:
        """``placement: spread`` means ``{spread: true}``."""
        if data == "spread":
            return {"spread": True}
        if isinstance(data, str):
            raise ValueError(f"placement {data!r}: expected 'spread' or {{spread: BOOL, local: [CLASS, ...]}}")
        return data


def local_groups(names: Sequence[str], links: Iterable[tuple[str, str, str]], local: Iterable[str]) -> list[list[str]]:
    """The nodes in groups joined by links (a, b, class) of the ``local`` classes, each group sorted, the groups
    in the order of their first node in ``names``."""
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    classes = set(local)
    for a, b, cls in links:
        if cls in classes and a in parent and b in parent:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(root(n), []).append(n)
    return [sorted(g) for g in groups.values()]


def _pins_of(group: Sequence[str], pins: Mapping[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in group:
        if n in pins:
            out.setdefault(pins[n], []).append(n)
    return out


def placement_problems(names: Sequence[str], pins: Mapping[str, str], links: Iterable[tuple[str, str, str]],
                       spec: PlacementSpec | None, known_classes: Iterable[str]) -> list[tuple[Loc, str]]:  # fmt: skip
    """A topology's placement mistakes as (location, message): ``pins`` maps node -> the host it names."""
    problems: list[tuple[Loc, str]] = []
    index = {n: i for i, n in enumerate(names)}
    for n, host in pins.items():
        if not HOST_NAME_RE.match(host):
            problems.append((("nodes", index[n], "host"), f"host {host!r}: a swarm host's name (like h2: letters, "
                             "digits, '.', '-'), or true for a host node outside Docker"))
    if spec is None:
        return problems
    known = set(known_classes)
    for i, cls in enumerate(spec.local):
        if cls not in known:
            problems.append((("placement", "local", i), f"unknown link class {cls!r} (known: "
                             f"{', '.join(sorted(known))})"))
    for group in local_groups(names, links, spec.local):
        pinned = _pins_of(group, pins)
        if len(pinned) > 1:
            first = min(n for ns in pinned.values() for n in ns)
            said = "; ".join(f"{', '.join(ns)} on {h}" for h, ns in sorted(pinned.items()))
            problems.append((("nodes", index[first], "host"), f"nodes joined by {'/'.join(spec.local)} links run on "
                             f"one host (placement.local), but they are pinned to different hosts: {said}"))
    return problems


def plan_hosts(names: Sequence[str], pins: Mapping[str, str], links: Iterable[tuple[str, str, str]],
               spec: PlacementSpec | None, hosts: Sequence[str]) -> dict[str, str]:  # fmt: skip
    """Node -> host for the nodes snekbed places (module doc); {} when the topology says nothing of placement.

    Raises PlacementError when a pin names a host not in ``hosts``, or ``hosts`` is empty while something is to
    be placed."""
    if spec is None and not pins:
        return {}
    if not hosts:
        raise PlacementError("the topology places its nodes on hosts, but the swarm has no worker to run them")
    for n, host in sorted(pins.items()):
        if host not in hosts:
            raise PlacementError(f"node {n!r} is pinned to host {host!r}, which the swarm does not have "
                                 f"(its workers: {', '.join(hosts)})")
    groups = local_groups(names, list(links), spec.local if spec is not None else ())
    load = dict.fromkeys(hosts, 0)
    out: dict[str, str] = {}
    free: list[list[str]] = []
    for group in groups:
        pinned = _pins_of(group, pins)
        if not pinned:
            free.append(group)
            continue
        host = min(pinned)  # one by placement_problems; a group of one node may only be pinned once anyway
        for n in group:
            out[n] = pins.get(n, host)
            load[out[n]] += 1
    if spec is not None and spec.spread:
        for group in sorted(free, key=lambda g: (-len(g), g[0])):
            host = min(hosts, key=lambda h: (load[h], hosts.index(h)))
            for n in group:
                out[n] = host
            load[host] += len(group)
    return out
