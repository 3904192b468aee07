"""``mobility.jsonl`` read on the driver (docs/pipeline.md, "Mobility").

A run whose nodes move writes ``mobility.jsonl`` beside its five files (contract.mobility, docs/run-dataset.md): its
nodes' positions and its radio links' ups and downs, a few lines a node a second at most, so the file is read here,
on the driver, rather than by the ingest: each line checked against the contract
(``contract.dataset.validate_record``), the valid ones as rows of ``schemas.MOBILITY_SCHEMA`` (with their file and
line), the others counted per run (the ``bad_lines`` of ``mobility_runs``). A run without the file has no rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from contract.dataset import validate_record
from contract.mobility import MOBILITY_FIELDS, MOBILITY_FILE
from pipeline.rundirs import RunDir

__all__ = ["read_mobility"]


def read_mobility(runs: Sequence[RunDir]) -> tuple[list[tuple], dict[str, int]]:
    """The valid lines of every run's ``mobility.jsonl`` as MOBILITY_SCHEMA rows (tuples), and the lines that broke
    the contract per run id (runs with the file only)."""
    rows: list[tuple] = []
    bad: dict[str, int] = {}
    for run in runs:
        path = run.path / MOBILITY_FILE
        if not path.is_file():
            continue
        bad[run.run_id] = 0
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if validate_record(line, MOBILITY_FIELDS, run.run_id) is not None:
                    bad[run.run_id] += 1
                    continue
                obj = json.loads(line)
                rows.append((*(obj.get(f.name) for f in MOBILITY_FIELDS), str(path), number))
    return rows, bad
