"""Write a run directory in the run-dataset contract (docs/run-dataset.md).

``meta.json``, ``topology.json``, ``events/<node>.jsonl``, ``actions.jsonl`` and
``pings.jsonl``: what every backend's recording shares (a run's outcome, its id, the versions it ran). The
in-process backend's writer is :class:`orchestrator.backends.inproc_record.RunRecorder`; the Docker backend's
nodes write their own event logs.
"""

from __future__ import annotations

import platform
import uuid
from importlib import metadata
from typing import Any

from contract.frames import UNKNOWN_FRAME_TYPE, frame_type_name

__all__ = ["drop_type_name", "outcome_of", "versions", "new_run_id", "STATS_INTERVAL_S"]

STATS_INTERVAL_S = 10.0


def drop_type_name(t: Any) -> str:
    """A dropped frame's type name; a number outside the table is written as the number."""
    name = frame_type_name(t)
    return str(t) if name == UNKNOWN_FRAME_TYPE else name


def outcome_of(exc: BaseException) -> str:
    """A run's ``outcome`` for the exception that ended it: ``interrupted`` for Ctrl-C, SystemExit or a
    cancellation (trio.Cancelled, asyncio.CancelledError: matched by name, this module imports no trio),
    ``failed`` for anything else."""
    if isinstance(exc, KeyboardInterrupt | SystemExit) or type(exc).__name__ in ("Cancelled", "CancelledError"):
        return "interrupted"
    return "failed"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("snekbed", "trio", "pynacl"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "unknown"
    return out
