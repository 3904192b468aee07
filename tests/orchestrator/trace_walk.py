"""The five-node ns-2 trace walk the Docker mobility tests replay (test_chaos_mobility_docker.py under chaos,
test_up_moving_docker.py under ``snekbed up``) and how they read the link changes a run recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.dataset import validate_record
from contract.mobility import MOBILITY_FIELDS

#: c crosses the others' ranges and comes back, d passes by along y = 30, e walks away: 7 ups and 8 downs
TRACE = """\
$node_(0) set X_ 0.0
$node_(0) set Y_ 0.0
$node_(1) set X_ 8.0
$node_(1) set Y_ 0.0
$node_(2) set X_ 50.0
$node_(2) set Y_ 0.0
$node_(3) set X_ 0.0
$node_(3) set Y_ 30.0
$node_(4) set X_ 20.0
$node_(4) set Y_ 0.0
$ns_ at 1.0 "$node_(2) setdest 0.0 1.0 5.0"
$ns_ at 2.0 "$node_(3) setdest 100.0 30.0 8.0"
$ns_ at 3.0 "$node_(4) setdest 80.0 0.0 4.0"
$ns_ at 12.0 "$node_(2) setdest 60.0 5.0 6.0"
"""

TOPOLOGY = """\
name: tracewalk
movement: {tick_s: 0.5, duration_s: 24}
radios:
  bluetooth: {range_m: 10}
  lan: {range_m: 25, class: lan, loss: {edge_pct: 10, start_fraction: 0.2}}
nodes:
""" + "".join(f"  - {{name: {n}, mobility: {{model: trace, file: moves.tcl, id: {i}}}}}\n" for i, n in enumerate("abcde"))


def write_trace_walk(where: Path) -> Path:
    """The trace (``moves.tcl``) and the topology (``trace.yaml``, returned) in ``where``."""
    (where / "moves.tcl").write_text(TRACE)
    topo = where / "trace.yaml"
    topo.write_text(TOPOLOGY)
    return topo


def trace_links(run: Path, run_id: str) -> list[tuple[Any, ...]]:
    """The link changes (kind, a, b, radio, cause) a run recorded in its mobility.jsonl, each line checked against
    the run-dataset contract."""
    lines = (run / "mobility.jsonl").read_text().splitlines()
    assert all(validate_record(line, MOBILITY_FIELDS, run_id) is None for line in lines)
    rows = [json.loads(line) for line in lines]
    return [(r["kind"], r["a"], r["b"], r["radio"], r["cause"]) for r in rows if r["kind"] != "position"]
