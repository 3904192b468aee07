"""The swarm backend: a topology as Docker Swarm services (one per node) on attachable overlay networks.

It reuses the Docker backend's address plan (``docker_net``), its node command lines
(``plan_launches``) and its observation (admin APIs): what differs is where things run.
Everything goes through the Docker SDK's swarm API on a manager of the swarm:

* one **overlay network** per link (``internal``, ``attachable``, the plan's /29) and a
  control overlay (not internal: tasks on it also get the host's ``docker_gwbridge``,
  which host-mode published ports need); every network labelled as in the Docker backend;
* one **service** per node: one replica, restart policy ``none`` (a killed node stays
  down until restarted), endpoint mode ``dnsrr`` (the kernels here have no IPVS, so a
  virtual IP would not answer), placement spread over the swarm's nodes plus the
  topology's ``placement`` constraints; the service and its container carry
  ``snekbed.run`` / ``snekbed.node`` / ``snekbed.key``;
* **addresses** are the swarm's to allocate (a service cannot ask for one), so peering
  goes by name: each node has the alias ``l<index>-<name>`` on each link network, the
  dialer dials the listener's alias, and the listener's ``--inbound`` rule names the
  link's subnet (the dialer is its only other member);
* the **admin and metrics ports** are published in ``host`` mode on ports the engine
  picks (the ingress routing mesh needs IPVS); the orchestrator reaches a node at
  ``<address of the swarm node running the task>:<published port>``, read from the task;
* **shaping** is the nodes' userspace transport only: the kernel backend shapes from the
  host inside a container's namespace, which is impossible for a task on another host.

Faults: ``kill`` scales the service to 0 (the task is stopped: SIGTERM, SIGKILL after
STOP_GRACE_S; the restart policy keeps it down); ``restart`` scales it back to 1: a new
task and container with the same key and command, possibly on another swarm node, with
new overlay addresses and new published ports. Cleanup (:meth:`SwarmBackend.down`) goes
by label: services first, then networks one at a time with retries.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from netem.plan import ShapingBackend
from orchestrator.backends.docker import (
    DockerBackend,
    DownReport,
    Progress,
    UpResult,
    _noop,
    require_reference_image,
)
from orchestrator.backends.docker_plan import (
    LABEL_KEY,
    NODE_ADMIN_PORT,
    NODE_EVENTS_DIR,
    NODE_METRICS_PORT,
    HostLaunch,
    NodeLaunch,
    link_alias,
    link_shape,
    plan_launches,
)
from orchestrator.backends.cluster import ClusterError, find_cluster, load_images
from orchestrator.model.placement import PlacementError, plan_hosts
from orchestrator.model.topology import Topology
from orchestrator.backends.docker_net import (
    LABEL_NODE,
    LABEL_ROLE,
    LABEL_RUN,
    AddressPlan,
    DockerBackendError,
    _remove_with_retry,
    create_networks,
    network_lock,
    remove_networks,
)

if TYPE_CHECKING:
    import docker

__all__ = ["SwarmBackend", "SwarmError", "swarm_state", "SHAPING_WHY", "STOP_GRACE_S", "TASK_TIMEOUT_S"]

#: Why a swarm run shapes in userspace only (recorded in meta.json's ``shaping.why``).
SHAPING_WHY = ("swarm backend: links are shaped by the nodes' userspace transport; the kernel backend shapes from the "
               "host inside a container's network namespace, which cannot reach tasks on other hosts")
STOP_GRACE_S = 3  # SIGTERM, then SIGKILL after this long (kill, down)
TASK_TIMEOUT_S = 120.0  # how long up/restart wait for a task to run
TASK_POLL_S = 0.25
#: Task states after which a task will not run again (restart policy none).
_DEAD = {"complete", "failed", "shutdown", "rejected", "orphaned", "remove"}


class SwarmError(DockerBackendError):
    """The engine is not a swarm manager, or the swarm could not do what was asked."""


def swarm_state(client: docker.DockerClient) -> dict[str, Any]:
    """``{"state": inactive|active|pending|..., "manager": bool, "node_id": str}`` of this engine. Never raises."""
    try:
        info = client.api.info().get("Swarm") or {}
    except Exception as exc:  # the engine itself is away: say so in the state
        return {"state": f"unreachable ({exc})", "manager": False, "node_id": ""}
    return {"state": info.get("LocalNodeState", "inactive"), "manager": bool(info.get("ControlAvailable")),
            "node_id": info.get("NodeID", "")}


def service_name(run_id: str, node: str) -> str:
    """``snekbed-<run>-<node>``: 63 characters at most (run ids and node names are short)."""
    return f"snekbed-{run_id}-{node}"


class SwarmBackend(DockerBackend):
    """Creates, inspects and removes runs as services of the swarm this engine manages."""

    name = "swarm"
    #: node -> host of the last ``up`` whose topology places its nodes (plan_hosts); {} when the swarm chose
    planned: dict[str, str] = {}
    #: image -> {id, loaded_on, seconds} of the last ``up`` on a snekbed cluster (place_images); {} elsewhere
    images_placed: dict[str, Any] = {}

    # ------------------------------------------------------------ checks

    def require_manager(self) -> None:
        """Raise SwarmError unless this engine is an active swarm manager (services are created on managers)."""
        st = swarm_state(self.client)
        if st["state"] != "active" or not st["manager"]:
            raise SwarmError(f"--backend swarm needs an engine that is a swarm manager (this one: {st['state']}"
                             f"{', worker' if st['state'] == 'active' else ''}); make one with `docker swarm init "
                             "--advertise-addr ADDR` (docs/orchestrator.md, \"Swarm\")")

    @staticmethod
    def check_topology(topology: Topology) -> None:
        """Raise SwarmError for what a swarm cannot run: host nodes, multicast LAN segments."""
        hosts = [n.name for n in topology.nodes if n.host]
        if hosts:
            raise SwarmError(f"topology {topology.name}: host nodes ({', '.join(hosts)}) run outside Docker next to "
                             "one engine; the swarm backend runs every node as a service (use --backend docker)")
        multicast = [n.name for n in topology.nodes if n.multicast]
        if multicast:
            raise SwarmError(f"topology {topology.name}: multicast nodes ({', '.join(multicast)}) need a LAN segment "
                             "with multicast, which overlay networks do not carry (use --backend docker)")

    def worker_hosts(self) -> list[str]:
        """The hostnames of the swarm's nodes that take tasks (ready, availability active), sorted."""
        return sorted((n.get("Description") or {}).get("Hostname", "") for n in self.api.nodes()
                      if (n.get("Status") or {}).get("State") == "ready"
                      and (n.get("Spec") or {}).get("Availability") == "active")  # fmt: skip

    def place_images(self, images: list[str], progress: Progress) -> dict[str, Any]:
        """On a ``snekbed cluster``'s swarm, load each image onto every worker that lacks that exact image id (from
        the engine the cluster runs on: cluster.load_images); per image its id, the hosts it went to and the seconds.
        {} on any other swarm: there the hosts pull from a registry, or were given the image by hand
        (docs/multi-host.md, "On real machines")."""
        address = urlparse(str(self.api.base_url)).hostname
        if not address or not images:
            return {}
        try:
            cluster = find_cluster(manager_address=address)
        except ClusterError:
            return {}
        progress("images on hosts", 0, len(images))
        try:
            placed = load_images(cluster, images, lambda _line: None)
        except ClusterError as exc:
            raise SwarmError(f"putting {', '.join(images)} on the hosts of cluster {cluster.id}: {exc}") from None
        progress("images on hosts", len(images), len(images))
        return placed

    def plan_hosts(self, topology: Topology) -> dict[str, str]:
        """Node -> host for the nodes the topology places (``host: h2``, ``placement``: orchestrator.model.placement);
        {} when it places none. Raises SwarmError for a pin to a host the swarm lacks."""
        if topology.placement is None and not topology.pins:
            return {}
        names = [n.name for n in topology.nodes if not n.host]
        links = [(ln.a, ln.b, ln.link_class) for ln in topology.links]
        try:
            return plan_hosts(names, topology.pins, links, topology.placement, self.worker_hosts())
        except PlacementError as exc:
            raise SwarmError(f"topology {topology.name}: {exc}") from None

    # ------------------------------------------------------------ up

    def up(self, topology: Topology, *, run_id: str, events_dir: Path, image: str, seed: int | str = 0,
           shaping_backend: ShapingBackend = "userspace", progress: Progress | None = None,
           on_plan: Callable[[AddressPlan, dict[str, NodeLaunch], dict[str, HostLaunch]], None] | None = None,
           reference_image: str | None = None) -> UpResult:
        """Create the overlays and one service per node (a reference node's runs ``reference_image``); wait until
        every task runs.

        Shaping is userspace whatever ``shaping_backend`` says (see the module doc). The
        events directory is bind-mounted into every task: on a multi-host swarm the same
        path must exist on every host (each host's copy holds the logs of the tasks it ran).
        Raises SwarmError / DockerBackendError; everything created is labelled, so
        :meth:`down` removes it after any failure.
        """
        self.require_manager()
        self.check_topology(topology)
        require_reference_image(topology, reference_image)
        images = {"snekbed": image, "reference": reference_image or ""}
        progress = progress or _noop
        events_dir = events_dir.absolute()
        events_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.images_placed = self.place_images(sorted({img for img in images.values() if img}), progress)
        self.planned = self.plan_hosts(topology)
        with network_lock(self.lock_path):
            plan = self.plan(topology, run_id)
            launches = plan_launches(topology, plan, run_id=run_id, seed=seed, shaping_backend="userspace",
                                     by_name=True)
            if on_plan is not None:
                on_plan(plan, launches, {})
            net_ids = create_networks(self.client, plan, progress=progress, driver="overlay")
        t_nets = time.monotonic()
        services: dict[str, str] = {}
        progress("services", 0, len(launches))
        for name in sorted(launches, reverse=True):  # listeners first, as in the Docker backend
            services[name] = self._create_service(run_id, launches[name], plan, net_ids,
                                                  images[launches[name].implementation], events_dir, topology)
            progress("services", len(services), len(launches))
        starts = self._wait_running(run_id, services, progress)
        shapes = {ln.index: link_shape(topology, ln.index) for ln in plan.links}
        link_backends = {i: "none" if shape.is_noop else "userspace" for i, shape in sorted(shapes.items())}
        first, last = min(starts.values(), default=t_nets), max(starts.values(), default=t_nets)
        return UpResult(plan, launches, services, "userspace", link_backends, first, last, t_nets - t0, last - t_nets)

    def _create_service(self, run_id: str, launch: NodeLaunch, plan: AddressPlan, net_ids: dict[str, str],
                        image: str, events_dir: Path, topology: Topology) -> str:
        """Create the service of one node; return its id. Raises DockerBackendError naming the node."""
        import docker.errors
        import docker.types as dt

        labels = {LABEL_RUN: run_id, LABEL_NODE: launch.name, LABEL_KEY: launch.key, LABEL_ROLE: "node"}
        spec = dt.ContainerSpec(
            image, args=launch.args, hostname=launch.name, labels=labels, init=True,
            mounts=[dt.Mount(NODE_EVENTS_DIR, str(events_dir), type="bind")],
            stop_grace_period=STOP_GRACE_S * 1_000_000_000, stop_signal="SIGTERM")
        networks = [dt.NetworkAttachmentConfig(net_ids[plan.control.name])]
        networks += [dt.NetworkAttachmentConfig(net_ids[ln.net.name], aliases=[link_alias(ln.index, launch.name)])
                     for ln in launch.links]
        constraints = list(topology.node(launch.name).placement)
        if launch.name in self.planned:  # snekbed's own placement (orchestrator.model.placement)
            constraints.append(f"node.hostname=={self.planned[launch.name]}")
        task = dt.TaskTemplate(
            spec, restart_policy=dt.RestartPolicy(condition="none"), networks=networks,
            placement=dt.Placement(constraints=constraints or None, preferences=[("spread", "node.id")]),
            log_driver=dt.DriverConfig("json-file", {"max-size": "10m", "max-file": "2"}))
        ports = [{"Protocol": "tcp", "TargetPort": port, "PublishMode": "host"}
                 for port in (NODE_ADMIN_PORT, NODE_METRICS_PORT)]
        try:
            created = self.api.create_service(
                task, name=service_name(run_id, launch.name), labels=labels,
                mode=dt.ServiceMode("replicated", replicas=1), endpoint_spec=dt.EndpointSpec(mode="dnsrr", ports=ports))
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"creating the service of node {launch.name} (image {image}) failed: "
                                     f"{exc.explanation or exc}") from exc
        return str(created["ID"])

    def _wait_running(self, run_id: str, services: dict[str, str], progress: Progress,
                      timeout_s: float = TASK_TIMEOUT_S) -> dict[str, float]:
        """Poll until every service's task runs; node -> monotonic time it was first seen running.

        Raises SwarmError naming the nodes whose task failed (with the swarm's reason) or did
        not run within ``timeout_s``.
        """
        started: dict[str, float] = {}
        deadline = time.monotonic() + timeout_s
        progress("tasks", 0, len(services))
        while True:
            tasks = self._tasks(run_id)
            now = time.monotonic()
            failed = []
            for name in services:
                t = tasks.get(name)
                state = (t or {}).get("Status", {}).get("State")
                if state == "running":
                    started.setdefault(name, now)
                elif state in _DEAD:
                    failed.append(f"{name}: {state} ({(t or {}).get('Status', {}).get('Err') or 'no error given'})")
            progress("tasks", len(started), len(services))
            if failed:
                raise SwarmError(f"run {run_id}: task(s) stopped before running: {'; '.join(failed[:5])}")
            if len(started) == len(services):
                return started
            if now >= deadline:
                late = sorted(set(services) - set(started))
                said = "; ".join(f"{n}: {(tasks.get(n) or {}).get('Status', {}).get('State', 'no task')}"
                                 f" {(tasks.get(n) or {}).get('Status', {}).get('Err') or ''}".rstrip()
                                 for n in late[:5])
                raise SwarmError(f"run {run_id}: {len(late)} task(s) not running after {timeout_s:g} s ({said}); "
                                 "is the image on every swarm node (docs/orchestrator.md, \"Swarm\")?")
            time.sleep(TASK_POLL_S)

    # ------------------------------------------------------------ inspect

    def services(self, run_id: str | None) -> dict[str, dict[str, Any]]:
        """node name -> the engine's service document, for the run (every run when None)."""
        label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
        found = self.api.services(filters={"label": label})
        return {s["Spec"]["Labels"].get(LABEL_NODE, s["ID"][:12]): s for s in found}

    def _tasks(self, run_id: str) -> dict[str, dict[str, Any]]:
        """node name -> its newest task (by creation) among the run's services."""
        ids = {s["ID"]: name for name, s in self.services(run_id).items()}
        if not ids:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for t in self.api.tasks(filters={"service": list(ids)}):
            name = ids.get(t.get("ServiceID", ""))
            if name is None:
                continue
            if name not in out or t.get("CreatedAt", "") > out[name].get("CreatedAt", ""):
                out[name] = t
        return out

    def _node_addrs(self) -> dict[str, str]:
        """swarm node id -> the address it advertises (where its host-mode published ports are)."""
        return {n["ID"]: (n.get("Status") or {}).get("Addr", "") for n in self.api.nodes()}

    def containers(self, run_id: str, *, all: bool = True) -> dict[str, dict[str, Any]]:
        """node name -> a summary of its current task, shaped like the Docker backend's container summary.

        ``Id`` is the service id, ``State`` the task's state (``running`` when it runs),
        ``Container`` the task's container id, ``SwarmNode`` the swarm node running it.
        """
        out: dict[str, dict[str, Any]] = {}
        services = self.services(run_id)
        tasks = self._tasks(run_id)
        for name, svc in services.items():
            t = tasks.get(name) or {}
            status = t.get("Status") or {}
            replicas = ((svc.get("Spec") or {}).get("Mode") or {}).get("Replicated", {}).get("Replicas", 0)
            state = status.get("State", "absent")
            if state == "running" and (t.get("DesiredState") != "running" or not replicas):
                state = "stopping"
            out[name] = {"Id": svc["ID"], "State": state, "Status": f"task {state}: {status.get('Message', '')}",
                         "Labels": svc["Spec"].get("Labels") or {}, "Task": t.get("ID"),
                         "Container": (status.get("ContainerStatus") or {}).get("ContainerID"),
                         "SwarmNode": t.get("NodeID")}
        return out

    def admin_endpoints(self, run_id: str, plan: dict[str, Any]) -> dict[str, str]:
        """node name -> ``ADDR:PORT`` of its admin API: the running task's swarm node and host-mode published port."""
        addrs = self._node_addrs()
        out: dict[str, str] = {}
        for name, t in self._tasks(run_id).items():
            if (t.get("Status") or {}).get("State") != "running":
                continue
            for port in ((t.get("Status") or {}).get("PortStatus") or {}).get("Ports") or []:
                if port.get("TargetPort") == NODE_ADMIN_PORT and port.get("PublishedPort"):
                    out[name] = f"{addrs.get(t.get('NodeID', ''), '127.0.0.1') or '127.0.0.1'}:{port['PublishedPort']}"
                    break
        return out

    def hostnames(self) -> dict[str, str]:
        """swarm node id -> its host's name."""
        return {n["ID"]: (n.get("Description") or {}).get("Hostname", "") for n in self.api.nodes()}

    def placements(self, run_id: str) -> dict[str, dict[str, Any]]:
        """node name -> where its task runs: swarm node id and hostname, container id, overlay addresses."""
        hostnames = self.hostnames()
        out: dict[str, dict[str, Any]] = {}
        for name, t in self._tasks(run_id).items():
            nets = {(a.get("Network") or {}).get("Spec", {}).get("Name", ""): (a.get("Addresses") or [""])[0]
                    for a in t.get("NetworksAttachments") or []}
            out[name] = {"swarm_node": t.get("NodeID"), "host": hostnames.get(t.get("NodeID", ""), ""),
                         "container": ((t.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID"),
                         "addresses": nets}
        return out

    def logs_tail(self, container_id: str, lines: int = 10) -> list[str]:
        """The last ``lines`` lines a node's service printed (``container_id`` is the service id); [] if none."""
        import docker.errors

        try:
            raw = self.api.service_logs(container_id, stdout=True, stderr=True, tail=lines)
            text = b"".join(raw) if not isinstance(raw, bytes) else raw
        except docker.errors.APIError:
            return []
        return text.decode("utf-8", "replace").rstrip().splitlines()[-lines:]

    # ------------------------------------------------------------ act

    def _scale(self, run_id: str, node: str, replicas: int) -> str:
        import docker.errors
        import docker.types as dt

        svc = self.services(run_id).get(node)
        if svc is None:
            raise DockerBackendError(f"run {run_id}: no service for node {node!r}")
        try:
            self.api.update_service(svc["ID"], svc["Version"]["Index"], mode=dt.ServiceMode("replicated", replicas),
                                    fetch_current_spec=True)
        except docker.errors.APIError as exc:
            raise DockerBackendError(f"run {run_id}: scaling {node} to {replicas} failed: "
                                     f"{exc.explanation or exc}") from exc
        return str(svc["ID"])

    def kill(self, run_id: str, node: str) -> str:
        """Scale the node's service to 0 and wait until its task has stopped. Returns the service id.

        The task gets SIGTERM (SIGKILL after STOP_GRACE_S); restart policy ``none`` keeps it
        down. Raises DockerBackendError when the run has no such node.
        """
        sid = self._scale(run_id, node, 0)
        deadline = time.monotonic() + STOP_GRACE_S + 15.0
        while time.monotonic() < deadline:
            t = self._tasks(run_id).get(node)
            if t is None or (t.get("Status") or {}).get("State") != "running":
                break
            time.sleep(TASK_POLL_S)
        return sid

    def restart(self, run_id: str, node: str, timeout_s: float = TASK_TIMEOUT_S) -> str:
        """Scale the node's service back to 1 and wait until the new task runs. Returns the service id."""
        sid = self._scale(run_id, node, 1)
        deadline = time.monotonic() + timeout_s
        while True:
            t = self._tasks(run_id).get(node) or {}
            if (t.get("Status") or {}).get("State") == "running" and t.get("DesiredState") == "running":
                return sid
            if time.monotonic() >= deadline:
                raise SwarmError(f"run {run_id}: {node} not running {timeout_s:g} s after its restart "
                                 f"({(t.get('Status') or {}).get('State', 'no task')})")
            time.sleep(TASK_POLL_S)

    def reapply_shaping(self, run_id: str, topology: Topology, backend: ShapingBackend) -> int:
        """Nothing to do: a swarm run is shaped by the nodes themselves."""
        return 0

    # ------------------------------------------------------------ down

    def down(self, run_id: str | None) -> DownReport:
        """Remove every service labelled ``snekbed.run=<run_id>`` (every run when None), then the networks.

        Services first; their tasks' containers go with them (waited for, up to
        STOP_GRACE_S + 20 s); then labelled containers still on this engine (a task the
        swarm lost track of); then networks one at a time with retries (an overlay can
        report "active endpoints" for a moment after its last task left). Never raises for
        engine errors: they are in ``report.errors``.
        """
        import docker.errors

        label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
        report = DownReport()
        with contextlib.suppress(docker.errors.APIError):
            self.require_manager()
            for svc in self.api.services(filters={"label": label}):
                if _remove_with_retry(lambda sid=svc["ID"]: self.api.remove_service(sid), f"service {svc['ID'][:12]}",
                                      report.errors):
                    report.containers_removed += 1
            deadline = time.monotonic() + STOP_GRACE_S + 20.0
            while time.monotonic() < deadline and self.api.containers(all=True, filters={"label": label}):
                time.sleep(0.25)
        for c in self.api.containers(all=True, filters={"label": label}):
            _remove_with_retry(lambda cid=c["Id"]: self.api.remove_container(cid, force=True), f"container "
                               f"{c['Id'][:12]}", report.errors)
        for _ in range(3):
            report.networks_removed += remove_networks(self.client, label, report.errors)
            if not self.api.networks(filters={"label": label}):
                break
            time.sleep(1.0)
        left_services = 0
        with contextlib.suppress(docker.errors.APIError):
            left_services = len(self.api.services(filters={"label": label}))
        report.containers_left = left_services + len(self.api.containers(all=True, filters={"label": label}))
        report.networks_left = len(self.api.networks(filters={"label": label}))
        return report

    def run_ids(self) -> list[str]:
        """Every run id that still has a labelled service, container or network here."""
        ids = set(super().run_ids())
        with contextlib.suppress(Exception):
            ids |= {s["Spec"]["Labels"][LABEL_RUN] for s in self.api.services(filters={"label": LABEL_RUN})}
        return sorted(ids)
