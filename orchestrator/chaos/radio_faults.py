"""How a chaos scenario's faults meet radio links, the same on both backends (docs/mobility.md, "Chaos while they
move" and "On Docker").

:class:`RadioFaults` sits in front of a backend (orchestrator.chaos.inproc_mobile on the virtual clock,
orchestrator.chaos.docker_mobile through the nodes' admin APIs) whose ``radio`` is a
:class:`~orchestrator.backends.radio_links.MovingRadios`:

* a radio link is made only while both ends are live (a dead or paused node takes no new peering); a node that
  comes back (restart, resume, a join) gets the radio links in range then (``MovingRadios.reconcile``); a node that
  dies loses its radio links with it;
* ``partition`` cuts the radio links between the groups too, and keeps the groups apart however the nodes move
  until ``heal`` (a jammer between them); ``link_down`` of a pair cuts its radio links and keeps them cut until
  ``link_up`` (a pair joined by radio only is not given a fixed link by it);
* ``link_change`` changes fixed links only.
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.radio_links import MovingRadios

__all__ = ["RadioFaults", "merge_pairs"]


class RadioFaults:
    """The fault steps of a backend whose nodes move, in front of its own (``super()``). A subclass gives
    ``radio``, :meth:`planted_fault` and :meth:`has_fixed_link`, and calls :meth:`init_radio_faults` in its
    constructor."""

    radio: MovingRadios | None

    def init_radio_faults(self) -> None:
        self.sides: dict[str, int] | None = None  # a partition's groups: radio links between them are kept cut
        self.apart: set[frozenset[str]] = set()  # pairs a link_down keeps apart

    def planted_fault(self) -> str | None:
        """The backend's planted bug (TEST ONLY), for ``ignore_partition``."""
        raise NotImplementedError

    def has_fixed_link(self, a: str, b: str) -> bool:
        """Whether the topology links ``a`` and ``b`` by a fixed link (down or not)."""
        raise NotImplementedError

    def blocked(self, a: str, b: str) -> bool:
        """Whether a fault keeps ``a`` and ``b`` apart (a partition between them, a link_down of the pair)."""
        sides = self.sides
        split = sides is not None and a in sides and b in sides and sides[a] != sides[b]
        return split or frozenset((a, b)) in self.apart

    def _reconcile(self, reason: str = "link_down") -> tuple[list[Any], list[Any]]:
        return self.radio.reconcile(reason) if self.radio is not None else ([], [])

    def _in_range(self, a: str, b: str) -> bool:
        links = self.radio.graph.links if self.radio is not None else None
        return any({x, y} == {a, b} for x, y, _ in links or ())

    def _radio_back(self, name: str) -> None:
        """``name`` is live again (restart, resume, join): its radio links in range are made."""
        self._reconcile()

    # ------------------------------------------------------------------ nodes

    async def kill(self, name: str) -> None:
        await super().kill(name)  # type: ignore[misc]
        self._reconcile("kill")

    async def remove_node(self, name: str) -> bool:
        out: bool = await super().remove_node(name)  # type: ignore[misc]
        self._reconcile("kill")
        return out

    async def restart(self, name: str) -> None:
        await super().restart(name)  # type: ignore[misc]
        self._radio_back(name)

    async def resume(self, name: str) -> None:
        await super().resume(name)  # type: ignore[misc]
        self._radio_back(name)

    async def add_node(self, name: str, peers: tuple[str, ...], link_class: str, adversary: bool,
                       variant: Any = None) -> None:  # fmt: skip
        await super().add_node(name, peers, link_class, adversary, variant)  # type: ignore[misc]
        self._radio_back(name)

    # ------------------------------------------------------------------ links

    async def partition(self, groups: list[set[str]]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = await super().partition(groups)  # type: ignore[misc]
        if self.planted_fault() != "ignore_partition":
            self.sides = {n: gi for gi, g in enumerate(groups) for n in g}
        _, cut = self._reconcile("partition")
        return merge_pairs(out, cut)

    async def heal(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = await super().heal()  # type: ignore[misc]
        self.sides = None
        made, _ = self._reconcile()
        return merge_pairs(out, made)

    async def link_down(self, a: str, b: str) -> bool:
        fixed: bool = await super().link_down(a, b)  # type: ignore[misc]
        if not self._in_range(a, b):
            return fixed
        self.apart.add(frozenset((a, b)))
        self._reconcile()
        return True

    async def link_up(self, a: str, b: str, link_class: str | None = None) -> bool:
        pair = frozenset((a, b))
        if pair in self.apart:
            self.apart.discard(pair)
            self._reconcile()
            if not self.has_fixed_link(a, b):
                return True  # joined by radio only: no fixed link to make
        out: bool = await super().link_up(a, b, link_class)  # type: ignore[misc]
        return out


def merge_pairs(fixed: list[tuple[str, str]], radio: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """The fixed links' pairs, then the radio links' pairs not among them."""
    seen = {frozenset(p) for p in fixed}
    out = list(fixed)
    for a, b, _ in radio:
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            out.append((a, b))
    return out
