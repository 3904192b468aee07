"""Planted failures and small graphs the chaos, recorder, attack and view tests share.

``PLANTED``: n03 drops every Traffic frame it receives, so pings through it or to it are lost, the adversary step
fails and every live node's flight recorder is dumped. ``write_two_rings``: a graph with one cut vertex."""

from __future__ import annotations

from pathlib import Path

from orchestrator.chaos.scenario import Scenario, parse_scenario_yaml

#: the scenario as a file's text (for `snekbed chaos FILE`)
PLANTED_YAML = """\
name: planted
settle_s: 1
traffic: null
steps:
  - {action: wait, until: converged, within_s: 120}
  - {action: adversary, target: n03, drop: {traffic: 100}}
"""

#: the same, parsed
PLANTED: Scenario = parse_scenario_yaml(PLANTED_YAML)


#: two rings of five joined at node h, the only cut vertex: every path between {a, b, c, d} and {e, f, g, i}
#: goes through h
TWO_RINGS_LINKS = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "h"), ("h", "a"), ("h", "e"), ("e", "f"), ("f", "g"),
                   ("g", "i"), ("i", "h")]  # fmt: skip


def write_two_rings(path: Path) -> Path:
    """Write the two-rings topology (YAML) to ``path`` and return it."""
    path.write_text("name: two-rings\nnodes: [a, b, c, d, e, f, g, h, i]\nlinks:\n"
                    + "".join(f"  - [{x}, {y}]\n" for x, y in TWO_RINGS_LINKS))  # fmt: skip
    return path
