"""The life of a run as ``snekbed up|status|ping|kill-root|down`` drive it: bring a topology up on a backend
(Docker, swarm, or in one process) into its run directory, reopen a live run, report it, take it down.

``up`` on Docker or a swarm is two steps: :func:`prepare_docker` checks that this engine can serve the request and
readies the images, before the run's directory exists (a refusal, :class:`Refused`, leaves no run directory and
``runs/LATEST`` as it was); then :func:`up_docker` starts the run in its directory. That rolls back on failure or
Ctrl-C (:func:`orchestrator.backends.docker_session.start_run` removes everything labelled with the run) and
:func:`rolled_back` says what that did; a run that comes up but does not converge in time stays up for inspection.
``down`` goes by label, so it also removes what a crashed ``up`` left.

The Docker SDK is loaded only when a Docker or swarm run is asked for (these functions import the Docker backends
inside them: tests/test_architecture.py's LAZY_BOUNDARIES), so ``up --backend inproc`` and ``status`` of an
in-process run work without the docker extra.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netem.plan import ShapingBackend
from orchestrator.backends.docker_net import DEFAULT_POOL, AddressPlan, DockerBackendError
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

__all__ = ["DEFAULT_TIMEOUT_S", "DEFAULT_HOST_TIMEOUT_S", "LIVE_BACKENDS", "UpError", "Refused", "UpCallbacks",
           "DockerPrep", "DockerUp", "connect", "open_session", "status_report", "prepare_docker", "up_docker",
           "up_inproc", "rolled_back", "take_down"]

DEFAULT_TIMEOUT_S = 120.0  # convergence, after the last container started
DEFAULT_HOST_TIMEOUT_S = 600.0  # host nodes: how long `up` waits for each to be started by hand
LIVE_BACKENDS = ("docker", "swarm")  # meta.json backends whose runs live on an engine


class UpError(Exception):
    """``up`` on an engine failed after the run directory was made; the message says what was rolled back (or,
    when only monitoring failed, that the run is up and how to remove it)."""


class Refused(Exception):
    """The request was refused before anything was made or changed (``up``: no run directory, nothing on the
    engine): the engine does not answer or is no swarm manager, the backend cannot run the topology, this host
    has no kernel shaping for ``--shaping kernel``, or the reference node cannot be built here."""


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
class DockerPrep:
    """What :func:`prepare_docker` readied for an ``up`` on an engine, before the run's directory exists."""

    backend: DockerBackend
    shaping: tuple[ShapingBackend, str]  # (backend, why)
    image: str
    reference_image: str | None = None  # nodes whose spec is pinecone run it
    prometheus_image: str | None = None  # with monitoring only


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


def prepare_docker(topology: Topology, *, swarm: bool = False, shaping: str = "auto", pool: str | None = None,
                   workers: int = 8, image: str | None = None, monitoring: bool = False,
                   prometheus_image: str | None = None, pinecone_src: Path | None = None,
                   reference_image: str | None = None, callbacks: UpCallbacks | None = None) -> DockerPrep:
    """Everything ``up`` does on this engine (or its swarm) before the run's directory is made: check that the
    engine can run ``topology`` as asked, then build (or reuse) the node image unless ``image`` is given, the
    reference image (from the reference at ``pinecone_src``, else the default) when a node's spec is ``pinecone``
    unless ``reference_image`` is given, and with ``monitoring`` the Prometheus image.

    Raises Refused when the request cannot be served here; ImageError when an image could not be built. Either
    way nothing of the run exists yet.
    """
    from orchestrator.backends.docker_session import choose_shaping
    from orchestrator.backends.image import build_node_image, build_prometheus_image
    from orchestrator.backends.image_reference import ReferenceImageError, build_reference_image
    from orchestrator.backends.swarm import SHAPING_WHY, SwarmBackend

    cb = callbacks or UpCallbacks()
    try:
        backend = connect(pool, workers, swarm=swarm)
        if isinstance(backend, SwarmBackend):
            backend.require_manager()
            backend.check_topology(topology)
        shaping_choice: tuple[ShapingBackend, str] = ("userspace", SHAPING_WHY) if swarm else choose_shaping(shaping)
    except DockerBackendError as exc:  # EngineUnreachable, SwarmError, --shaping kernel on a host without it
        raise Refused(str(exc)) from None
    if image is None:
        image = build_node_image(backend.client, progress=cb.image_line).tag
        cb.image_built(image)
    if reference_image is None and reference_nodes(topology.variants()):
        try:
            reference_image = build_reference_image(backend.client, pinecone_src=pinecone_src,
                                                    progress=cb.image_line).tag  # fmt: skip
        except ReferenceImageError as exc:
            raise Refused(str(exc)) from None
        cb.image_built(reference_image)
    if monitoring and prometheus_image is None:
        prometheus_image = build_prometheus_image(backend.client)
    return DockerPrep(backend, shaping_choice, image, reference_image, prometheus_image if monitoring else None)


def up_docker(topology: Topology, run: RunDir, prep: DockerPrep, *, seed: int, timeout_s: float,
              host_timeout_s: float = DEFAULT_HOST_TIMEOUT_S, callbacks: UpCallbacks | None = None) -> DockerUp:
    """Bring ``topology`` up as ``run`` with what :func:`prepare_docker` readied, and wait for convergence; with
    a Prometheus image in ``prep``, Prometheus starts once the run's networks exist, before its first node.

    Raises UpError when the run could not be brought up or its monitoring could not start (rolled back: the
    message says what went); KeyboardInterrupt after rolling back (see :func:`rolled_back`).
    """
    from orchestrator.backends.docker_session import start_run

    cb = callbacks or UpCallbacks()
    backend = prep.backend
    started: list[str] = []  # Prometheus's URL, once it runs

    def monitor(plan: AddressPlan) -> None:  # once the networks exist, before the first node starts
        assert prep.prometheus_image is not None
        started.append(monitor_docker_run(backend.client, plan, image=prep.prometheus_image).prometheus.url)

    try:
        session, result, conv = start_run(topology, run, backend=backend, image=prep.image, seed=seed,
                                          shaping=prep.shaping, timeout_s=timeout_s, progress=cb.phase,
                                          converge_progress=cb.converging, announce=cb.announce,
                                          host_timeout_s=host_timeout_s, reference_image=prep.reference_image,
                                          on_networks=monitor if prep.prometheus_image is not None else None)
    except (DockerBackendError, ImageError, RunError, OSError, RuntimeError) as exc:  # Prometheus's: OSError, Runtime
        raise UpError(f"{exc}\n({rolled_back(run)})") from exc
    prometheus_url = started[0] if started else None
    if prometheus_url is not None:
        run.update_meta(monitoring={"prometheus": prometheus_url, "exporter": None})
    mobility = None
    if topology.radios:  # the nodes move for the movement's duration, then the network is judged where they stopped
        mobility, conv = _move_then_converge(topology, run, session, result.plan, conv, seed=seed,
                                             timeout_s=timeout_s, callbacks=cb)
    out = {"run_id": run.run_id, "run_dir": str(run.path), "topology": topology.name, "backend": backend.name,
           "nodes": len(result.containers) + len(result.hosts),
           "host_nodes": {n: h.to_dict() for n, h in result.hosts.items()},
           "links": len(result.plan.links), "image": prep.image, "reference_image": prep.reference_image,
           "shaping_backend": result.shaping_backend, "shaping_unapplied": run.meta().get("shaping_unapplied", []),
           "networks_s": round(result.network_s, 3), "containers_s": round(result.container_s, 3), **conv.summary(),
           "links_refused": run.meta().get("links_refused", []), "prometheus": prometheus_url,
           **({"mobility": mobility} if mobility is not None else {})}
    return DockerUp(session, result, conv, out)


def _move_then_converge(topology: Topology, run: RunDir, session: DockerSession, plan: AddressPlan,
                        before: Convergence, *, seed: int, timeout_s: float,
                        callbacks: UpCallbacks) -> tuple[dict[str, Any], Convergence]:
    """Move the nodes (orchestrator.sessions.docker_moving), then wait for convergence on the graph where they
    stopped, timed from then; the ``mobility`` report (with the convergence before they moved as ``before``) and
    that convergence. Rolls the run back on any failure (UpError; KeyboardInterrupt propagates after it)."""
    from orchestrator.backends.docker_session import roll_back
    from orchestrator.sessions.docker_moving import move_nodes

    try:
        mobility = move_nodes(topology, run, session, plan, seed=seed, progress=callbacks.phase)
        conv = session.converge(t0=time.monotonic(), timeout_s=timeout_s, what="movement",
                                progress=callbacks.converging)
    except (DockerBackendError, OSError, RuntimeError) as exc:
        roll_back(run, session.backend, exc)
        raise UpError(f"moving the nodes: {exc}\n({rolled_back(run)})") from exc
    except BaseException as exc:
        roll_back(run, session.backend, exc)
        raise
    run.update_meta(observer={**run.meta().get("observer", {}), "movement": conv.summary()})
    return {**mobility, "before": before.summary()}, conv


def rolled_back(run: RunDir) -> str:
    """What the rollback of a failed or interrupted ``up`` did (start_run removed it by label), in words."""
    done = run.meta().get("rollback")
    if done is None:
        return f"run {run.run_id}: nothing was created on the engine"
    left = done.get("containers_left", 0) or done.get("networks_left", 0)
    errors = "; ".join(done.get("errors") or [])
    said = (f"run {run.run_id} rolled back: removed {done.get('containers_removed', 0)} containers and "
            f"{done.get('networks_removed', 0)} networks")
    if left:
        said += (f"; LEFT {done.get('containers_left', 0)} containers, {done.get('networks_left', 0)} networks"
                 + (f" ({errors})" if errors else "") + f": `snekbed down --run-id {run.run_id}` removes them")
    elif errors:  # the engine did not answer the rollback: what is left is not known, not none
        said += f"; the rollback did not finish ({errors}): `snekbed down --run-id {run.run_id}` removes what is left"
    return said


# ---------------------------------------------------------------- down


def take_down(runs_dir: Path | None, run_id: str | None, *, all_runs: bool = False) -> tuple[str | None, DownReport]:
    """Remove a run (the latest without ``run_id``; every run with ``all_runs``) by its label, and record ``down``
    in its directory when it has one. A ``run_id`` without a directory (another runs dir?) is still removed by label.

    Returns (the run id or None for every run, what was removed and what is left). Raises RunError when no run
    is named and there is no latest one; Refused when the engine does not answer, or the run is a swarm run and
    this engine is no manager of a swarm; DockerBackendError when removing failed.
    """
    from orchestrator.backends.engine import EngineUnreachable

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
    try:
        report = _down_everywhere(target, run)
    except EngineUnreachable as exc:
        raise Refused(str(exc)) from None
    if run is not None:
        run.action("down", None, {"containers_removed": report.containers_removed,
                                  "networks_removed": report.networks_removed, "errors": report.errors})
    return target, report


def _down_everywhere(target: str | None, run: RunDir | None) -> DownReport:
    """Remove the run's swarm services (when this engine manages a swarm), then its containers and networks.

    Both sweeps go by label, so a swarm run, a Docker run or leftovers of either all go; the
    report adds them up. Raises Refused when a swarm run's engine is no swarm manager.
    """
    from orchestrator.backends.docker import DownReport
    from orchestrator.backends.swarm import SwarmBackend, swarm_state

    is_swarm = run is not None and run.meta().get("backend") == "swarm"  # a bad meta.json fails before the engine
    plain = connect()
    state = swarm_state(plain.client)
    if is_swarm and not state["manager"]:
        raise Refused(f"run {target} is a swarm run: run `snekbed down` on a manager of its swarm "
                         f"(this engine's swarm state: {state['state']})")
    total = DownReport()
    label = {"label": f"snekbed.run={target}" if target else "snekbed.run"}
    # the swarm sweep only for a swarm run or the services of one: it also force-removes the run's containers,
    # which would leave a Docker run's (on an engine that is a manager for another run) uncounted
    if state["manager"] and (is_swarm or plain.api.services(filters=label)):
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
        total.containers_left += len(plain.api.services(filters=label))
    return total
