"""``mobility.jsonl``: where the nodes of a mobile run were and when its radio links came and went.

A run of a topology with radios (docs/mobility.md) writes this file into its run directory beside the five
files every run has (docs/run-dataset.md, "mobility.jsonl"); a run without radios writes none. One JSON
object a line, in time order:

* ``position``: node ``node`` is at ``(x_m, y_m)``: every placed node at the first tick, then a node at each
  tick where it moved;
* ``link_up`` / ``link_down``: the radio ``radio`` joined / stopped joining ``a`` and ``b`` (``a < b``), of
  link class ``link_class``, ``distance_m`` apart, because of ``cause``; ``made`` says whether the in-process
  network made (or cut) a peering for it (false: it refused one, e.g. a dead node or a router out of ports).

Every line carries every field of :data:`MOBILITY_FIELDS` (``null`` where its kind has none); check a line with
``contract.dataset.validate_record(line, MOBILITY_FIELDS)``.
"""

from __future__ import annotations

from contract.dataset import Field

__all__ = ["LINK_CAUSES", "MOBILITY_FIELDS", "MOBILITY_FILE", "MOBILITY_KINDS"]

MOBILITY_FILE = "mobility.jsonl"

MOBILITY_KINDS = ("position", "link_up", "link_down")

#: why a radio link changed: it was there when the run started, the pair came within range, the pair went beyond
#: range plus hysteresis, or a node left the radio graph (it has no position any more)
LINK_CAUSES = ("start", "in_range", "out_of_range", "node_gone")

MOBILITY_FIELDS: tuple[Field, ...] = (
    Field("run_id", "str"),
    Field("mono_s", "float"),
    Field("wall_ts", "float"),
    Field("kind", "str", choices=MOBILITY_KINDS),
    Field("node", "str", nullable=True),
    Field("x_m", "float", nullable=True),
    Field("y_m", "float", nullable=True),
    Field("a", "str", nullable=True),
    Field("b", "str", nullable=True),
    Field("radio", "str", nullable=True),
    Field("link_class", "str", nullable=True),
    Field("distance_m", "float", nullable=True),
    Field("cause", "str", nullable=True, choices=LINK_CAUSES),
    Field("made", "bool", nullable=True),
)
