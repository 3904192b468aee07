"""Moving nodes in process: a :class:`~orchestrator.model.mobility_spec.World`'s movers on an
:class:`~orchestrator.backends.inproc.InprocNetwork`'s virtual clock (docs/mobility.md).

:class:`RadioLinks` is :class:`~orchestrator.backends.radio_links.MovingRadios` on the in-process network: every
``tick_s`` of protocol time (``InprocNetwork.call_at``) the nodes move and each radio link that comes up is made as
a peering of its radio's link class (``InprocNetwork.connect``, shaped as a fixed link of that class is: netem's
userspace shaper), each that goes down cut (``InprocNetwork.disconnect``, reason ``link_down``); a radio with loss
over distance reshapes its links (``InprocNetwork.reshape``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contract.links import LinkClass, LinkShape, link_type_number
from netem.userspace import shaper_factory

from orchestrator.backends.inproc import InprocNetwork
from orchestrator.backends.radio_links import MobilityLog, MovingRadios, radio_shape
from orchestrator.model.mobility_spec import World
from orchestrator.model.radio_graph import Radio, RadioLink

__all__ = ["MobilityLog", "RadioLinks"]


class RadioLinks(MovingRadios):
    """Moves ``world``'s nodes on ``net`` and keeps its radio links as the radio graph says (MovingRadios: the
    options ``available``, ``blocked`` and ``cut``, the counters and the report)."""

    def __init__(self, net: InprocNetwork, world: World, classes: Mapping[str, LinkClass],
                 log: MobilityLog | None = None, *, available: Callable[[str], bool] | None = None,
                 blocked: Callable[[str, str], bool] | None = None,
                 cut: Callable[[int, str], None] | None = None) -> None:
        self.net = net
        super().__init__(world, classes, log, available=available, blocked=blocked, cut=cut)

    def now(self) -> float:
        return self.net.now

    def call_at(self, t: float, fn: Callable[[float], None]) -> None:
        self.net.call_at(t, fn)

    def connect(self, link: RadioLink, radio: Radio, loss_pct: int) -> int | None:
        a, b, _ = link
        return self.net.connect(a, b, radio.link_class, **self._options(radio, loss_pct))

    def is_up(self, lid: int) -> bool:
        return lid in self.net.links

    def disconnect(self, lid: int, reason: str) -> None:
        self.net.disconnect(lid, reason)

    def reshape(self, lid: int, radio: Radio, loss_pct: int) -> None:
        opts = self._options(radio, loss_pct)
        self.net.reshape(lid, radio.link_class, opts.get("shaper"), opts.get("sized", False))

    def _options(self, radio: Radio, loss_pct: int) -> dict[str, Any]:
        """``connect``'s options for a link of ``radio`` with ``loss_pct`` added by distance (as sim.link_options
        shapes a fixed link: a peering is a reliable stream, so a lost segment arrives late, not never)."""
        cls = self.classes[radio.name]
        shape = radio_shape(cls, loss_pct)
        opts: dict[str, Any] = {"link_type": link_type_number(cls)}
        if shape != LinkShape():
            opts["shaper"] = shaper_factory(shape, loss_mode="retransmit")
            opts["sized"] = shape.rate_mbit is not None
        return opts
