"""A planted failure shared by the flight-recorder and view tests: n03 drops every Traffic frame it receives, so
pings through it or to it are lost, the adversary step fails and every live node's flight recorder is dumped."""

from __future__ import annotations

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
