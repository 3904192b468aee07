"""The life of a run as ``snekbed up|status|ping|kill-root|down`` drive it: bring a topology up on a backend
(Docker, swarm, or in one process) into its run directory, reopen a live run, report it, take it down.

``up`` on Docker or a swarm rolls back on failure or Ctrl-C (:func:`orchestrator.backends.docker_session.start_run`
removes everything labelled with the run) and :func:`rolled_back` says what that did; a run that comes up but does
not converge in time stays up for inspection. ``down`` goes by label, so it also removes what a crashed ``up`` left.

The Docker SDK is loaded only when a Docker or swarm run is asked for (these functions import the Docker backends
inside them: tests/test_architecture.py's LAZY_BOUNDARIES), so ``up --backend inproc`` and ``status`` of an
in-process run work without the docker extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netem.plan import ShapingBackend
from orchestrator.backends.docker_net import DEFAULT_POOL, DockerBackendError
from orchestrator.backends.image_common import ImageError
from orchestrator.backends.inproc import DEFAULT_BOOT_SPREAD_S
from orchestrator.model.hosting import reference_nodes
from orchestrator.model.runs import RunDir, RunError, open_run, runs_root
from orchestrator.model.topology import Topology
from orchestrator.sessions.sim import config_from_topology, run_sim_sync
from orchestrator.tools.monitoring import monitor_docker_run

if TYPE_CHECKING:
    from orchestrator.backends.docker import DockerBackend, DownReport, UpResult
    from orchestrator.backends.docker_observe import Convergence
    from orchestrator.backends.docker_session import DockerSession

__all__ = ["DEFAULT_TIMEOUT_S", "DEFAULT_HOST_TIMEOUT_S", "LIVE_BACKENDS", "UpError", "UpCallbacks", "DockerUp",
           "connect", "open_session", "status_report", "up_docker", "up_inproc", "rolled_back", "take_down"]

DEFAULT_TIMEOUT_S = 120.0  # convergence, after the last container started
DEFAULT_HOST_TIMEOUT_S = 600.0  # host nodes: how long `up` waits for each to be started by hand
LIVE_BACKENDS = ("docker", "swarm")  # meta.json backends whose runs live on an engine


class UpError(Exception):
    """``up`` on an engine failed after the run directory was made; the message says what was rolled back (or,
    when only monitoring failed, that the run is up and how to remove it)."""


def _ignore(*_: Any) -> None:
    """A progress callback that shows nothing."""


@dataclass(slots=True)
class UpCallbacks:
    """What an ``up`` on an engine reports while it works (all optional)."""

    image_line: Callable[[str], None] = _ignore  # a line of the node image's build
    image_built: Callable[[str], None] = _ignore  # the node image's tag, once it is there
    phase: Callable[[str, int, int], None] = _ignore  # (phase, done, total): networks, containers
    converging: Callable[[float, int, int], None] = _ignore  # (seconds waited, converged nodes, live nodes)
    announce: Callable[[str], None] | None = None  # host nodes' commands to run (default: stderr)


@dataclass(slots=True)
class DockerUp:
    """What :func:`up_docker` brought up: ``out`` is ``snekbed up --json``'s object."""

    session: DockerSession
    result: UpResult
    convergence: Convergence
    out: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- reaching a live run


def connect(pool: str | None = None, workers: int = 8, *, swarm: bool = False) -> DockerBackend:
    """The Docker backend on the engine of the environment, or with ``swarm`` the swarm backend (this engine must
    manage a swarm). Raises EngineUnreachable (a DockerBackendError)."""
    from orchestrator.backends.docker import DockerBackend
    from orchestrator.backends.engine import docker_client
    from orchestrator.backends.swarm import SwarmBackend

    return (SwarmBackend if swarm else DockerBackend)(docker_client(), pool=pool or DEFAULT_POOL, workers=workers)


def open_session(run: RunDir) -> DockerSession:
    """A live (Docker or swarm) run, reopened from its directory on this engine.

    Raises RunError for a run of another backend (before any engine is needed), TopologyError for a bad
    ``topology.json``, DockerBackendError (EngineUnreachable) when the engine does not answer."""
    backend = run.meta().get("backend")
    if backend not in LIVE_BACKENDS:
        raise RunError(f"run {run.run_id} used the {backend or 'unknown'!r} backend: only Docker and swarm runs "
                       "are live (status shows what an in-process run recorded)")
    from orchestrator.backends.docker_session import DockerSession

    return DockerSession.open(run, connect(swarm=backend == "swarm"))


def status_report(run: RunDir) -> dict[str, Any]:
    """``snekbed status --json``: for a live run, one poll of every node (DockerSession.status); for an in-process
    run, what it recorded (``run_id``, ``backend``, ``observer``). Raises what :func:`open_session` raises."""
    meta = run.meta()
    if meta.get("backend") == "inproc":
        return {"run_id": run.run_id, "backend": "inproc", "observer": meta.get("observer", {})}
    return open_session(run).status()


# ---------------------------------------------------------------- up


def up_inproc(topology: Topology, run: RunDir, *, seed: int, timeout_s: float) -> dict[str, Any]:
    """Run ``topology`` in this process (the in-process backend, as ``snekbed sim``), recorded into ``run``;
    returns ``snekbed sim --json``'s object with ``run_id``."""
    cfg = config_from_topology(topology, seed=seed, record=run.path, run_id=run.run_id,
                               max_time_s=max(timeout_s, 60.0), boot_spread_s=DEFAULT_BOOT_SPREAD_S)
    out = run_sim_sync(cfg)
    out["run_id"] = run.run_id
    return out


def up_docker(topology: Topology, run: RunDir, *, seed: int, timeout_s: float, shaping: str, pool: str | None,
              image: str | None, workers: int, monitoring: bool = False, prometheus_image: str | None = None,
              host_timeout_s: float = DEFAULT_HOST_TIMEOUT_S, swarm: bool = False,
              callbacks: UpCallbacks | None = None, pinecone_src: Path | None = None) -> DockerUp:
    """Bring ``topology`` up on this engine (or its swarm) as ``run`` and wait for convergence.

    Builds (or reuses) the node image unless ``image`` is given, and the reference image (from the reference at
    ``pinecone_src``, else the default) when a node's spec is ``pinecone``; with ``monitoring``, the Prometheus
    image too, and starts Prometheus once the run is up. Raises EngineUnreachable before anything is created when the engine
    does not answer; UpError when the run could not be brought up (rolled back: the message says what went) or its
    monitoring could not start (the run stays up); KeyboardInterrupt after rolling back (see :func:`rolled_back`).
    """
    from orchestrator.backends.docker_session import choose_shaping, start_run
    from orchestrator.backends.image import build_node_image, build_prometheus_image
    from orchestrator.backends.image_reference import build_reference_image
    from orchestrator.backends.swarm import SHAPING_WHY

    cb = callbacks or UpCallbacks()
    backend = connect(pool, workers, swarm=swarm)
    try:
        shaping_choice: tuple[ShapingBackend, str] = ("userspace", SHAPING_WHY) if swarm else choose_shaping(shaping)
        if image is None:
            image = build_node_image(backend.client, progress=cb.image_line).tag
            cb.image_built(image)
        reference_image = None
        if reference_nodes(topology.variants()):
            reference_image = build_reference_image(backend.client, pinecone_src=pinecone_src,
                                                    progress=cb.image_line).tag  # fmt: skip
            cb.image_built(reference_image)
        if monitoring and prometheus_image is None:
            prometheus_image = build_prometheus_image(backend.client)
        session, result, conv = start_run(topology, run, backend=backend, image=image, seed=seed,
                                          shaping=shaping_choice, timeout_s=timeout_s, progress=cb.phase,
                                          converge_progress=cb.converging, announce=cb.announce,
                                          host_timeout_s=host_timeout_s, reference_image=reference_image)
    except (DockerBackendError, ImageError, RunError) as exc:
        raise UpError(f"{exc}\n({rolled_back(run)})") from exc
    prometheus_url = None
    if monitoring:
        assert prometheus_image is not None
        try:
            prometheus_url = monitor_docker_run(backend.client, result.plan, image=prometheus_image).prometheus.url
        except (OSError, RuntimeError) as exc:
            raise UpError(f"{exc}\n(the run is up: `snekbed down --run-id {run.run_id}` removes it)") from exc
        run.update_meta(monitoring={"prometheus": prometheus_url, "exporter": None})
    out = {"run_id": run.run_id, "run_dir": str(run.path), "topology": topology.name, "backend": backend.name,
           "nodes": len(result.containers) + len(result.hosts),
           "host_nodes": {n: h.to_dict() for n, h in result.hosts.items()},
           "links": len(result.plan.links), "image": image, "reference_image": reference_image,
           "shaping_backend": result.shaping_backend, "shaping_unapplied": run.meta().get("shaping_unapplied", []),
           "networks_s": round(result.network_s, 3), "containers_s": round(result.container_s, 3), **conv.summary(),
           "links_refused": run.meta().get("links_refused", []), "prometheus": prometheus_url}
    return DockerUp(session, result, conv, out)


def rolled_back(run: RunDir) -> str:
    """What the rollback of a failed or interrupted ``up`` did (start_run removed it by label), in words."""
    done = run.meta().get("rollback")
    if done is None:
        return f"run {run.run_id}: nothing was created on the engine"
    left = done.get("containers_left", 0) or done.get("networks_left", 0)
    said = (f"run {run.run_id} rolled back: removed {done.get('containers_removed', 0)} containers and "
            f"{done.get('networks_removed', 0)} networks")
    if left or done.get("errors"):
        said += (f"; LEFT {done.get('containers_left', 0)} containers, {done.get('networks_left', 0)} networks "
                 f"({'; '.join(done.get('errors') or [])}): `snekbed down --run-id {run.run_id}` removes them")
    return said


# ---------------------------------------------------------------- down


def take_down(runs_dir: Path | None, run_id: str | None, *, all_runs: bool = False) -> tuple[str | None, DownReport]:
    """Remove a run (the latest without ``run_id``; every run with ``all_runs``) by its label, and record ``down``
    in its directory when it has one. A ``run_id`` without a directory (another runs dir?) is still removed by label.

    Returns (the run id or None for every run, what was removed and what is left). Raises RunError when no run
    is named and there is no latest one; DockerBackendError (EngineUnreachable, SwarmError) from the engine.
    """
    target: str | None = None
    run: RunDir | None = None
    if not all_runs:
        try:
            run = open_run(runs_root(runs_dir), run_id)
            target = run.run_id
        except RunError:
            if run_id is None:
                raise
            target = run_id
    report = _down_everywhere(target, run)
    if run is not None:
        run.action("down", None, {"containers_removed": report.containers_removed,
                                  "networks_removed": report.networks_removed, "errors": report.errors})
    return target, report


def _down_everywhere(target: str | None, run: RunDir | None) -> DownReport:
    """Remove the run's swarm services (when this engine manages a swarm), then its containers and networks.

    Both sweeps go by label, so a swarm run, a Docker run or leftovers of either all go; the
    report adds them up. Raises SwarmError when a swarm run's engine is no swarm manager.
    """
    from orchestrator.backends.docker import DownReport
    from orchestrator.backends.swarm import SwarmBackend, SwarmError, swarm_state

    plain = connect()
    is_swarm = run is not None and run.meta().get("backend") == "swarm"
    state = swarm_state(plain.client)
    if is_swarm and not state["manager"]:
        raise SwarmError(f"run {target} is a swarm run: run `snekbed down` on a manager of its swarm "
                         f"(this engine's swarm state: {state['state']})")
    total = DownReport()
    if state["manager"]:
        first = SwarmBackend(plain.client).down(target)
        total.containers_removed += first.containers_removed
        total.networks_removed += first.networks_removed
        total.errors += first.errors
    second = plain.down(target)
    total.containers_removed += second.containers_removed
    total.networks_removed += second.networks_removed
    total.volumes_removed += second.volumes_removed
    total.errors += second.errors
    total.containers_left, total.networks_left = second.containers_left, second.networks_left
    if state["manager"]:
        total.containers_left += len(plain.api.services(filters={"label": f"snekbed.run={target}" if target
                                                                 else "snekbed.run"}))
    return total
