"""The radio graph: which pairs of nodes a radio joins, given where the nodes are (docs/mobility.md).

Pure computation. A :class:`Radio` is a technology (Bluetooth, a LAN found by multicast, ...) with a range, a
link class and the nodes that carry it. Two nodes that both carry a radio are joined by it while they are
close enough, with hysteresis so that a pair at the edge does not flap every tick:

* a link **comes up** when the two are at most ``range_m`` apart;
* a link that is up **goes down** only when they are more than ``range_m * (1 + hysteresis)`` apart.

Where several radios join a pair, each is a link of its own (its own peering, of its radio's class). A link
is the triple ``(a, b, radio)`` with ``a < b``. :func:`radio_links` gives the links for positions and the links
that were up before; :func:`link_changes` the ups and downs between two sets of links, with their cause.

Loss with distance (optional, per radio): none up to ``loss_start_fraction * range_m``, then growing linearly
to ``loss_edge_pct`` at ``range_m``, and ``loss_edge_pct`` in the hysteresis band beyond
(:meth:`Radio.loss_pct`). It adds to the link class's own loss as independent losses do:
``1 - (1 - class) (1 - distance)``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contract.mobility import LINK_CAUSES
from orchestrator.model.mobility import Point, distance

__all__ = ["Radio", "RadioLink", "LinkChange", "CAUSES", "radio_links", "link_changes", "RadioGraph",
           "combined_loss_pct"]

RadioLink = tuple[str, str, str]
"""``(a, b, radio)`` with ``a < b``: one radio link between two nodes."""

#: why a radio link changed (contract.mobility): it was there at the start, the pair came within range, it went
#: beyond range plus the hysteresis, or one of its nodes left the radio graph (no position any more)
CAUSES = LINK_CAUSES


@dataclass(frozen=True, slots=True)
class Radio:
    """One radio technology: ``range_m`` (> 0), the ``link_class`` of its links, ``hysteresis`` (>= 0: a link
    up stays up to ``range_m * (1 + hysteresis)``), the nodes that carry it (None: every node placed), and
    its loss with distance (``loss_edge_pct`` 0: none)."""

    name: str
    range_m: float
    link_class: str
    hysteresis: float = 0.1
    members: frozenset[str] | None = None
    loss_start_fraction: float = 0.5
    loss_edge_pct: float = 0.0

    def __post_init__(self) -> None:
        if not self.range_m > 0 or not self.hysteresis >= 0:
            raise ValueError(f"radio {self.name!r}: range_m must be > 0 and hysteresis >= 0")
        if not 0 <= self.loss_start_fraction < 1 or not 0 <= self.loss_edge_pct <= 100:
            raise ValueError(f"radio {self.name!r}: loss_start_fraction in [0, 1), loss_edge_pct in [0, 100]")

    @property
    def drop_m(self) -> float:
        """Beyond this distance a link that is up goes down."""
        return self.range_m * (1 + self.hysteresis)

    def carries(self, node: str) -> bool:
        return self.members is None or node in self.members

    def loss_pct(self, distance_m: float) -> float:
        """The loss the distance adds (percent): 0 up to the start of the slope, then linear to the edge."""
        start = self.loss_start_fraction * self.range_m
        if self.loss_edge_pct == 0 or distance_m <= start:
            return 0.0
        return self.loss_edge_pct * min(1.0, (distance_m - start) / (self.range_m - start))


def combined_loss_pct(class_pct: float, distance_pct: float) -> float:
    """Two independent losses together (percent)."""
    return 100.0 * (1.0 - (1.0 - class_pct / 100.0) * (1.0 - distance_pct / 100.0))


@dataclass(frozen=True, slots=True)
class LinkChange:
    """A radio link came up (``up``) or went down, why (one of :data:`CAUSES`) and how far apart the two were
    (None when a node has no position any more)."""

    a: str
    b: str
    radio: str
    up: bool
    cause: str
    distance_m: float | None

    @property
    def link(self) -> RadioLink:
        return (self.a, self.b, self.radio)


def _pairs_within(positions: Mapping[str, Point], reach_m: float) -> Iterable[tuple[str, str, float]]:
    """Every pair ``(a, b, d)``, ``a < b``, at most ``reach_m`` apart: a grid of cells ``reach_m`` wide, each
    node compared with the nodes of its cell and the eight around it (not every other node)."""
    cells: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, (x, y) in positions.items():
        cells[(math.floor(x / reach_m), math.floor(y / reach_m))].append(name)
    for (cx, cy), here in cells.items():
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for b in cells.get((cx + dx, cy + dy), ()):
                    for a in here:
                        if a < b and (d := distance(positions[a], positions[b])) <= reach_m:
                            yield a, b, d


def radio_links(positions: Mapping[str, Point], radios: Iterable[Radio],
                previous: frozenset[RadioLink] = frozenset()) -> frozenset[RadioLink]:
    """The radio links for ``positions`` (node -> (x, y) metres; a node without one is on no radio), given the
    links ``previous``ly up: a pair within ``range_m`` is linked, and a pair linked before stays linked up to
    ``drop_m``."""
    out: set[RadioLink] = set()
    for radio in radios:
        members = {n: p for n, p in positions.items() if radio.carries(n)}
        for a, b, d in _pairs_within(members, radio.drop_m):
            if d <= radio.range_m or (a, b, radio.name) in previous:
                out.add((a, b, radio.name))
    return frozenset(out)


def link_changes(before: frozenset[RadioLink] | None, after: frozenset[RadioLink],
                 positions: Mapping[str, Point]) -> list[LinkChange]:
    """What changed from ``before`` (None: nothing was up yet, the run starts) to ``after``: every down first,
    then every up, each in link order (so a router's port freed by a down can serve an up)."""
    start = before is None
    before = before or frozenset()

    def apart(a: str, b: str) -> float | None:
        pa, pb = positions.get(a), positions.get(b)
        return None if pa is None or pb is None else round(distance(pa, pb), 6)

    downs = [LinkChange(a, b, r, False, "out_of_range" if (d := apart(a, b)) is not None else "node_gone", d)
             for a, b, r in sorted(before - after)]
    ups = [LinkChange(a, b, r, True, "start" if start else "in_range", apart(a, b)) for a, b, r in sorted(after - before)]
    return downs + ups


class RadioGraph:
    """The radio links as time goes: :meth:`step` with each tick's positions returns that tick's changes."""

    def __init__(self, radios: Iterable[Radio]) -> None:
        self.radios = tuple(radios)
        self.links: frozenset[RadioLink] | None = None  # None until the first step

    def step(self, positions: Mapping[str, Point]) -> list[LinkChange]:
        after = radio_links(positions, self.radios, self.links or frozenset())
        changes = link_changes(self.links, after, positions)
        self.links = after
        return changes
