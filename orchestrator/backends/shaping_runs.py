"""Shaping a Docker run: its link ends, its ``runs/<id>/shaping.json`` record, apply / re-apply / clear / show.

The per-endpoint work is :mod:`orchestrator.backends.shaping`; this module finds a run's
running link ends through the Docker backend (``link_endpoints``), their shapes in
the run's ``topology.json``, and the backend its nodes were started for in its
``meta.json``. ``snekbed links apply|show|clear`` (:mod:`orchestrator.cli.links`)
are thin wrappers over these functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.links import LinkShape, resolve_class
from netem.plan import RateQdisc, ShapingBackend
from netem.probe import probe
from orchestrator.backends.docker_links import link_endpoints
from orchestrator.model.runs import check_run_id, runs_root
from orchestrator.backends.shaping import (
    BACKENDS,
    Endpoint,
    EndpointState,
    ShapingRecord,
    ShapingRefused,
    apply_endpoints,
    clear_endpoint,
    endpoint_state,
    load_record,
    save_record,
)
from orchestrator.model.topology import Topology

__all__ = [
    "RECORD_FILE",
    "apply_run",
    "clear_run",
    "link_shape_in",
    "reapply",
    "record_path",
    "run_backend",
    "run_endpoints",
    "run_meta",
    "run_topology",
    "show_run",
]

RECORD_FILE = "shaping.json"


def record_path(run_id: str, runs_dir: str | Path | None = None) -> Path:
    """``<runs dir>/<run_id>/shaping.json`` (runs dir: ``--runs-dir``, ``$SNEKBED_RUNS_DIR`` or ``./runs``)."""
    return runs_root(runs_dir) / check_run_id(run_id) / RECORD_FILE


def run_endpoints(run_id: str, *, client: Any = None, runs_dir: str | Path | None = None) -> list[Endpoint]:
    """The running link ends of a Docker run, with each link's effective shape.

    Uses ``orchestrator.backends.docker_links.link_endpoints``; the shape comes from the run's
    ``topology.json`` (overrides included) when there is one, else from the class table.
    Raises ShapingRefused when the run has no running link ends or its topology.json cannot be read.
    """
    topology = run_topology(run_id, runs_dir)
    out: list[Endpoint] = []
    for le in link_endpoints(run_id, client):
        shape = getattr(le, "shape", None)
        if shape is None:
            shape = link_shape_in(topology, le.link_index, le.link_class)
        out.append(Endpoint(link=str(le.link_index), link_class=le.link_class, shape=shape, node=le.node, pid=le.pid,
                            ip=le.ip, peer=le.peer, peer_ip=le.peer_ip, container_id=le.container_id))
    if not out and run_meta(run_id, runs_dir).get("backend") == "swarm":
        raise ShapingRefused(f"run {run_id!r} is a swarm run: its tasks shape their links in userspace, from their "
                             "peer URIs, and have no kernel qdisc to apply, show or clear; `snekbed links check "
                             f"--run-id {run_id}` measures each link through the manager")  # fmt: skip
    if not out:
        raise ShapingRefused(f"run {run_id!r}: no running link ends (is it up? `snekbed status --run-id {run_id}`)")
    return out


def link_shape_in(topology: Topology | None, index: int, link_class: str) -> LinkShape:
    """Link ``index``'s shape in the run's ``topology`` (overrides included), else its class's in the class table."""
    if topology is not None and 0 <= index < len(topology.links):
        return topology.link_class_of(index).shape
    return resolve_class(link_class).shape


def run_topology(run_id: str, runs_dir: str | Path | None) -> Topology | None:
    """The run's ``topology.json``, None when it has none. Raises ShapingRefused when it cannot be read."""
    path = record_path(run_id, runs_dir).with_name("topology.json")
    if not path.exists():
        return None
    try:
        return Topology.from_data(json.loads(path.read_text(encoding="utf-8")), file=str(path))
    except ValueError as exc:  # not JSON, or a TopologyError naming the file and field
        raise ShapingRefused(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None


def run_meta(run_id: str, runs_dir: str | Path | None = None) -> dict[str, Any]:
    """The run's ``meta.json``, empty when it has none or it cannot be read."""
    try:
        meta = json.loads(record_path(run_id, runs_dir).with_name("meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def run_backend(run_id: str, runs_dir: str | Path | None = None) -> ShapingBackend | None:
    """The backend the run's nodes were started for (meta.json ``shaping.backend``), if recorded."""
    value = (run_meta(run_id, runs_dir).get("shaping") or {}).get("backend")
    return value if value in BACKENDS else None


def apply_run(run_id: str, *, backend: ShapingBackend | None = None, force: bool = False, client: Any = None,
              runs_dir: str | Path | None = None, endpoints: list[Endpoint] | None = None,
              rate_qdisc: RateQdisc = "tbf") -> ShapingRecord:
    """Probe, then shape every running link end of ``run_id``; save and return the record.

    ``backend`` defaults to the one the nodes were started for (meta.json), else the
    probe's choice. Asking for a backend the probe says cannot work, or (without
    ``force``) one other than the nodes were started for (their userspace part would
    be wrong), raises ShapingRefused. ``endpoints`` overrides :func:`run_endpoints`.
    """
    caps = probe()
    started = run_backend(run_id, runs_dir)
    chosen: ShapingBackend = backend or started or caps.backend
    if chosen not in BACKENDS:
        raise ShapingRefused(f"unknown shaping backend {chosen!r} (expected one of {', '.join(BACKENDS)})")
    if chosen == "kernel-netem" and not caps.netem:
        raise ShapingRefused("backend kernel-netem asked for, but this kernel has no netem: " + "; ".join(caps.notes))
    if chosen == "kernel-partial" and caps.backend == "userspace":
        raise ShapingRefused("backend kernel-partial asked for, but tc/iptables statistic are unusable here: "
                             + "; ".join(caps.notes))
    if started is not None and chosen != started and not force:
        raise ShapingRefused(f"run {run_id}: its nodes were started for the {started!r} backend (their peer URIs "
                             f"carry its userspace part); applying {chosen!r} would shape some parts twice or not at "
                             "all. Pass force to do it anyway.")
    eps = endpoints if endpoints is not None else run_endpoints(run_id, client=client, runs_dir=runs_dir)
    notes = list(caps.notes)
    if started is None:
        notes.append(f"the run does not say which backend its nodes were started for; used {chosen}")
    record = apply_endpoints(eps, chosen, run_id=run_id, capabilities={**caps.summary(), "ethtool": caps.ethtool},
                             notes=notes, rate_qdisc=rate_qdisc)
    save_record(record, record_path(run_id, runs_dir))
    return record


def reapply(run_id: str, *, client: Any = None, runs_dir: str | Path | None = None,
            endpoints: list[Endpoint] | None = None) -> ShapingRecord:
    """Apply again with the backend recorded by the last apply (after a reconnect interfaces come back
    renamed and unshaped; devices are found by address again). Raises ShapingError."""
    previous = load_record(record_path(run_id, runs_dir))
    backend = previous.backend if previous is not None else None
    return apply_run(run_id, backend=backend, force=previous is not None, client=client, runs_dir=runs_dir,
                     endpoints=endpoints)


def clear_run(run_id: str, *, client: Any = None, runs_dir: str | Path | None = None,
              endpoints: list[Endpoint] | None = None) -> dict[str, list[list[str]]]:
    """Clear every running link end of ``run_id``; ``{"<link>@<node>": commands run}``. The record is
    removed. Raises ShapingError."""
    eps = endpoints if endpoints is not None else run_endpoints(run_id, client=client, runs_dir=runs_dir)
    out = {f"{ep.link}@{ep.node}": clear_endpoint(ep) for ep in eps}
    record_path(run_id, runs_dir).unlink(missing_ok=True)
    return out


def show_run(run_id: str, *, client: Any = None, runs_dir: str | Path | None = None,
             endpoints: list[Endpoint] | None = None) -> tuple[ShapingRecord | None, list[EndpointState]]:
    """The saved record (None before any apply) and the live state of every running link end.

    The live state is compared with the recorded backend (else the run's, else
    ``userspace``). Raises ShapingError.
    """
    record = load_record(record_path(run_id, runs_dir))
    backend: ShapingBackend = (record.backend if record else None) or run_backend(run_id, runs_dir) or "userspace"
    eps = endpoints if endpoints is not None else run_endpoints(run_id, client=client, runs_dir=runs_dir)
    return record, [endpoint_state(ep, backend) for ep in eps]
