"""Run directories: validated (``load_run``, ``discover_runs``), sized, and turned into the small per-run tables.

A run directory is read through the dataset contract (``contract.dataset``: meta.json, topology.json, the event
logs, actions.jsonl and pings.jsonl; docs/run-dataset.md); an invalid one raises RunDatasetError naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from contract.dataset import RunMeta, TopologyFile, class_mix
from pipeline import schemas
from pipeline.errors import RunDatasetError

__all__ = ["RunDir", "ab_meta", "check_ab", "discover_runs", "input_size", "load_run", "observed_internal_errors",
           "run_rows"]


@dataclass(frozen=True)
class RunDir:
    """A validated run directory (see docs/run-dataset.md)."""

    path: Path
    meta: RunMeta
    topology: TopologyFile
    event_files: tuple[Path, ...]
    actions_file: Path
    pings_file: Path

    @property
    def run_id(self) -> str:
        return self.meta.run_id


def _read_json_file(path: Path, model: type) -> object:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDatasetError(str(path), "missing (every run directory needs it)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunDatasetError(str(path), f"not readable JSON: {exc}") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise RunDatasetError(str(path), f"field {where}: {first['msg']}") from None


def load_run(path: str | Path) -> RunDir:
    """Validate one run directory. Raises RunDatasetError naming the file and the problem."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise RunDatasetError(str(root), "not a directory")
    meta: RunMeta = _read_json_file(root / "meta.json", RunMeta)  # type: ignore[assignment]
    topo: TopologyFile = _read_json_file(root / "topology.json", TopologyFile)  # type: ignore[assignment]
    names = {n.name for n in topo.nodes}
    if names != set(meta.nodes):
        diff = sorted(names ^ set(meta.nodes))
        raise RunDatasetError(str(root / "meta.json"), f"nodes differ from topology.json: {diff}")
    unknown = sorted(set(meta.variants or {}) - set(meta.nodes))
    if unknown:
        raise RunDatasetError(str(root / "meta.json"), f"field variants: names unknown node(s) {unknown}")
    for i, link in enumerate(topo.links):
        for end in (link.a, link.b):
            if end not in names:
                raise RunDatasetError(str(root / "topology.json"), f"links[{i}] names unknown node {end!r}")
    events_dir = root / "events"
    if not events_dir.is_dir():
        raise RunDatasetError(str(events_dir), "missing events/ directory")
    event_files = tuple(sorted(events_dir.glob("*.jsonl")))
    for name in ("actions.jsonl", "pings.jsonl"):
        if not (root / name).is_file():
            raise RunDatasetError(str(root / name), "missing (may be empty, must exist)")
    return RunDir(root, meta, topo, event_files, root / "actions.jsonl", root / "pings.jsonl")


def discover_runs(paths: Sequence[str | Path]) -> list[RunDir]:
    """Run directories named by ``paths``: each is a run directory (has meta.json)
    or a directory whose immediate subdirectories are run directories.

    Raises RunDatasetError for a path that is neither, for an invalid run, when two runs
    share a run_id, or for an inconsistent A/B experiment (``check_ab``).
    """
    runs: list[RunDir] = []
    for p in paths:
        root = Path(p)
        if (root / "meta.json").exists():
            runs.append(load_run(root))
            continue
        subdirs = sorted(d for d in root.iterdir() if (d / "meta.json").exists()) if root.is_dir() else []
        if not subdirs:
            raise RunDatasetError(str(root), "not a run directory (no meta.json) and contains none")
        runs.extend(load_run(d) for d in subdirs)
    seen: dict[str, Path] = {}
    for run in runs:
        if run.run_id in seen:
            raise RunDatasetError(str(run.path), f"run_id {run.run_id!r} also used by {seen[run.run_id]}")
        seen[run.run_id] = run.path
    check_ab(runs)
    return runs


def check_ab(runs: Sequence[RunDir]) -> None:
    """The A/B runs among ``runs`` (meta.json ``ab``) form consistent experiments: every run of an
    experiment names the same ``a`` and ``b`` specs, and no (experiment, arm, seed) has two runs.
    Raises RunDatasetError naming the meta.json at fault."""
    specs: dict[str, tuple[tuple[str, str], Path]] = {}
    slots: dict[tuple[str, str, int], Path] = {}
    for run in runs:
        ab = run.meta.ab
        if ab is None:
            continue
        where = str(run.path / "meta.json")
        first = specs.setdefault(ab.experiment, ((ab.a, ab.b), run.path))
        if first[0] != (ab.a, ab.b):
            raise RunDatasetError(where, f"field ab: experiment {ab.experiment!r} has a={ab.a!r} b={ab.b!r} here "
                                         f"but a={first[0][0]!r} b={first[0][1]!r} in {first[1]}")
        slot = (ab.experiment, ab.arm, ab.seed)
        if slot in slots:
            raise RunDatasetError(where, f"field ab: experiment {ab.experiment!r} arm {ab.arm} seed {ab.seed} "
                                         f"is also recorded by {slots[slot]}")
        slots[slot] = run.path


def input_size(runs: Sequence[RunDir]) -> int:
    """Bytes of the input lines of ``runs`` (event logs, actions.jsonl, pings.jsonl): what
    ``get_spark(input_bytes=...)`` judges small or not."""
    total = 0
    for run in runs:
        for path in (*run.event_files, run.actions_file, run.pings_file):
            try:
                total += path.stat().st_size
            except OSError as exc:
                raise RunDatasetError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return total


def run_rows(runs: Sequence[RunDir]) -> dict[str, tuple[StructType, list[tuple]]]:
    """The small per-run tables built from meta.json and topology.json: runs, nodes and links, each as its schema
    (schemas.RUNS_SCHEMA, NODES_SCHEMA, LINKS_SCHEMA) and its rows."""
    run_rows, node_rows, link_rows = [], [], []
    for r in runs:
        m = r.meta
        shaping = {frozenset((ml.a, ml.b)): ml.shaping_backend for ml in m.links}
        classes = [link.link_class for link in r.topology.links]
        run_rows.append(
            (
                m.run_id, m.backend, m.variant, m.topology, m.seed, m.clock, m.link_delay_ms, m.started_wall_ts,
                dict(m.nodes), dict(m.versions), json.dumps(m.observer, sort_keys=True), class_mix(classes),
                len(m.nodes), len(r.topology.links), str(r.path),
            )
        )
        node_rows.extend((m.run_id, name, key) for name, key in sorted(m.nodes.items()))
        link_rows.extend(
            (m.run_id, lk.a, lk.b, lk.link_class, shaping.get(frozenset((lk.a, lk.b)))) for lk in r.topology.links
        )
    return {"runs": (schemas.RUNS_SCHEMA, run_rows), "nodes": (schemas.NODES_SCHEMA, node_rows),
            "links": (schemas.LINKS_SCHEMA, link_rows)}


def observed_internal_errors(observer: Mapping) -> int | None:
    """meta.json ``observer.internal_errors``: a number, or {node: number} (summed); None when absent
    or of another shape."""
    value = observer.get("internal_errors")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
        return sum(value.values())
    return None


def ab_meta(spark: SparkSession, runs: Sequence[RunDir]) -> DataFrame | None:
    """schemas.AB_META_SCHEMA for the runs with meta.json ``ab`` (None when there are none):
    run_id, experiment, arm, seed, spec (the arm's), a, b, variants (JSON text or null),
    observer_internal_errors (``observed_internal_errors``)."""
    rows = [
        (r.run_id, r.meta.ab.experiment, r.meta.ab.arm, r.meta.ab.seed, r.meta.ab.spec, r.meta.ab.a, r.meta.ab.b,
         json.dumps(r.meta.variants, sort_keys=True) if r.meta.variants else None,
         observed_internal_errors(r.meta.observer))
        for r in runs if r.meta.ab is not None
    ]  # fmt: skip
    return spark.createDataFrame(rows, schemas.AB_META_SCHEMA) if rows else None

