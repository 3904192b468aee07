"""The run registry: one directory per run under ``runs/``, and "the most recent run".

Layout of ``runs/<id>/`` (the run-dataset contract, docs/run-dataset.md)::

    meta.json        backend, nodes {name: key}, links with shaping_backend, versions, observer results
    topology.json    the topology the run was started with
    events/<name>.jsonl   each node's own event log (the Docker backend bind-mounts events/ into every container)
    actions.jsonl    what the orchestrator did, to whom, when (mono_s = time.monotonic(), wall_ts = time.time())
    pings.jsonl      every ping the orchestrator asked for
    docker.json      the Docker backend's address plan (how to reach the nodes)

``runs/`` is ``--runs-dir``, else ``$SNEKBED_RUNS_DIR``, else ``./runs``. The most
recent run is named in ``runs/LATEST`` (written when a run directory is created),
falling back to the newest directory. Several CLI processes (``up``, ``ping``,
``kill-root``) append to the same run, so JSON-lines files are opened in append
mode per line, and JSON documents are replaced atomically.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from orchestrator.model.record import versions

__all__ = [
    "RunError",
    "RunNotFound",
    "RunDir",
    "RUN_ID_RE",
    "runs_root",
    "new_run_id",
    "check_run_id",
    "check_new_run",
    "create_run",
    "open_run",
    "latest_run_id",
    "list_runs",
    "write_json_atomic",
    "versions",
]

RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")
LATEST_FILE = "LATEST"
ENV_RUNS_DIR = "SNEKBED_RUNS_DIR"


class RunError(Exception):
    """Base: a run directory is missing, unreadable or inconsistent."""


class RunNotFound(RunError):
    """No run with this id (or no run at all) under the runs directory."""


def runs_root(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """``runs_dir``, else ``$SNEKBED_RUNS_DIR``, else ``./runs`` (absolute)."""
    chosen = runs_dir or os.environ.get(ENV_RUNS_DIR) or "runs"
    return Path(chosen).expanduser().absolute()


def new_run_id() -> str:
    """A short random id: 8 lowercase hex digits (container names stay readable)."""
    return secrets.token_hex(4)


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a valid id; raises RunError naming it otherwise."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise RunError(f"--run-id {run_id!r}: must be 1-40 characters of a-z 0-9 _ . - starting with a letter or digit "
                       "(it becomes part of container and network names)")
    return run_id


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temp file + rename. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class RunDir:
    """One run's directory; append-only writers for actions and pings, atomic JSON documents."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id = path.name

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def events_dir(self) -> Path:
        return self.path / "events"

    def exists(self) -> bool:
        return self.path.is_dir()

    # ------------------------------------------------------------ documents

    def read_json(self, name: str, default: Any = None) -> Any:
        """Parse ``name`` in the run dir; ``default`` when missing. Raises RunError when unreadable."""
        path = self.path / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return default
        except (OSError, ValueError) as exc:
            raise RunError(f"{path}: cannot read ({exc})") from exc

    def write_json(self, name: str, obj: Any) -> None:
        write_json_atomic(self.path / name, obj)

    def meta(self) -> dict[str, Any]:
        """meta.json, or {} before it is written."""
        return self.read_json("meta.json", {}) or {}

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into meta.json (``observer`` is merged one level deep); return the result."""
        meta = self.meta()
        for key, value in fields.items():
            if key == "observer" and isinstance(value, Mapping):
                meta.setdefault("observer", {}).update(value)
            else:
                meta[key] = value
        self.write_json("meta.json", meta)
        return meta

    # ------------------------------------------------------------ JSON lines

    def _append(self, name: str, obj: Mapping[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with open(self.path / name, "a", encoding="utf-8") as handle:  # one write per line: appends interleave whole
            handle.write(line)

    def action(self, action: str, target: str | None = None, detail: Mapping[str, Any] | None = None, *,
               mono_s: float | None = None, wall_ts: float | None = None) -> dict[str, Any]:
        """Append one actions.jsonl line (contract.dataset ACTION_FIELDS); return it."""
        mono = time.monotonic() if mono_s is None else mono_s
        wall = time.time() - (time.monotonic() - mono) if wall_ts is None else wall_ts
        obj = {"run_id": self.run_id, "mono_s": round(mono, 6), "wall_ts": round(wall, 6), "action": action,
               "target": target, "detail": dict(detail) if detail is not None else None}
        self._append("actions.jsonl", obj)
        return obj

    def ping(self, *, sender: str, sender_key: str, target: str, target_key: str, mode: str, sent_mono_s: float,
             received: bool, rtt_ms: float | None, hops: int | None, graph: nx.Graph | None = None,
             link_class: Mapping[frozenset[str], str] | None = None) -> dict[str, Any]:
        """Append one pings.jsonl line (contract.dataset PING_FIELDS); return it.

        ``graph`` (the live topology) gives ``shortest_links`` and the classes along one
        shortest path (``link_class`` maps {a, b} to a class name).
        """
        shortest: int | None = None
        classes: list[str] = []
        if graph is not None and sender in graph and target in graph:
            try:
                path = nx.shortest_path(graph, sender, target)
            except nx.NetworkXNoPath:
                path = []
            if path:
                shortest = len(path) - 1
                classes = [(link_class or {}).get(frozenset(e), "unknown") for e in zip(path, path[1:])]
        obj = {"run_id": self.run_id, "sender": sender, "sender_key": sender_key, "target": target,
               "target_key": target_key, "mode": mode, "sent_mono_s": round(sent_mono_s, 6),
               "sent_wall_ts": round(time.time() - (time.monotonic() - sent_mono_s), 6), "received": received,
               "rtt_ms": rtt_ms, "hops": hops, "shortest_links": shortest, "link_classes": classes}
        self._append("pings.jsonl", obj)
        return obj

    def actions(self) -> list[dict[str, Any]]:
        """Every actions.jsonl line, parsed (unparsable lines are skipped)."""
        path = self.path / "actions.jsonl"
        out: list[dict[str, Any]] = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out


def check_new_run(root: Path, run_id: str) -> RunDir:
    """The directory a new run ``run_id`` would have under ``root``, not made yet: a command checks its id
    before it does anything. Raises RunError for a bad id or when the directory already holds a run."""
    check_run_id(run_id)
    run = RunDir(root / run_id)
    if (run.path / "topology.json").exists():
        raise RunError(f"run {run_id!r} already exists in {root}; pick another --run-id or remove {run.path}")
    return run


def create_run(root: Path, run_id: str, *, topology: Mapping[str, Any]) -> RunDir:
    """Create ``root/<run_id>/`` with ``events/`` and ``topology.json``; mark it as the latest run.

    Raises RunError for a bad id or when the directory already holds a run (:func:`check_new_run`).
    """
    run = check_new_run(root, run_id)
    run.events_dir.mkdir(parents=True, exist_ok=True)
    run.write_json("topology.json", dict(topology))
    (root / LATEST_FILE).write_text(run_id + "\n", encoding="utf-8")
    return run


def latest_run_id(root: Path) -> str:
    """The id in ``root/LATEST``, else the newest run directory. Raises RunNotFound."""
    try:
        run_id = (root / LATEST_FILE).read_text(encoding="utf-8").strip()
        if run_id and (root / run_id).is_dir():
            return run_id
    except OSError:
        pass
    runs = list_runs(root)
    if not runs:
        raise RunNotFound(f"no runs in {root}: start one with `snekbed up TOPOLOGY` (or pass --runs-dir)")
    return runs[-1]


def list_runs(root: Path) -> list[str]:
    """Run ids under ``root`` (directories with a topology.json), oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and (p / "topology.json").exists()]
    return [p.name for p in sorted(found, key=lambda p: (p / "topology.json").stat().st_mtime)]


def open_run(root: Path, run_id: str | None = None) -> RunDir:
    """The run ``run_id`` (default: the most recent) under ``root``. Raises RunNotFound."""
    if run_id is None:
        run_id = latest_run_id(root)
    check_run_id(run_id)
    run = RunDir(root / run_id)
    if not run.exists():
        raise RunNotFound(f"no run {run_id!r} in {root} (known: {', '.join(list_runs(root)[-8:]) or 'none'})")
    return run
