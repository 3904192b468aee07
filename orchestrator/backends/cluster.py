"""A multi-host Docker Swarm on one machine (``snekbed cluster up|down``): inner Docker engines in containers.

Each inner host is a container of ``snekbed-host:<hash12>`` (Debian's ``docker.io`` on the offline Debian base,
made with debootstrap as :mod:`orchestrator.backends.image_base` makes the node image's base, reused by content
hash) running ``dockerd --storage-driver=vfs`` (overlay on overlay does not work) with the flags that work on
these machines (``--privileged`` does not: the capability bounding set lacks CAP_SYS_RESOURCE; ../shared
DOCKER.md, "A multi-host swarm on one machine"). The hosts sit on one user network; everything is labelled
``snekbed.cluster=<id>`` (the host containers, their network, their data volumes), so ``down`` removes it by label
and an interrupted ``up`` removes what it made.

The swarm: one **manager** host ``m`` (availability ``drain``: it runs no node, so a host fault never takes the
control plane the orchestrator talks to) and N **worker** hosts ``h1``..``hN`` (the swarm node hostnames, which a
topology's ``placement: ["node.hostname==h2"]`` names). The manager's engine listens on ``tcp://<its ip>:2375``
(plain TCP, reachable from this machine only, on the cluster's bridge): ``DOCKER_HOST=tcp://<ip>:2375`` points the
swarm backend at the cluster. The node image (and the reference node's) is put on every worker with ``docker
save | docker exec -i HOST docker load``, only when the worker lacks that exact image id, and timed.

Each host's ``/var/lib/docker`` is a labelled volume, so a host that is stopped and started again (the chaos
action ``host_restart``) comes back with its swarm membership and images. The shared directories (``--share``,
default: the current directory) are bind-mounted at the same path on every host: a run's events directory under
them exists on every host, as a shared filesystem would on real machines.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from orchestrator.backends.image_base import build_offline_base, image_exists
from orchestrator.backends.image_common import ImageBuildError, Progress
from orchestrator.backends.image_inputs import hash_fields

__all__ = ["LABEL_CLUSTER", "LABEL_CLUSTER_HOST", "ENGINE_PORT", "ClusterError", "Cluster", "ClusterHost",
           "build_host_image", "cluster_up", "cluster_down", "find_cluster", "list_clusters", "host_client",
           "load_images",
           "crash_host", "start_host", "partition_host", "host_running", "outer_client", "outer_url"]

LABEL_CLUSTER = "snekbed.cluster"
LABEL_CLUSTER_HOST = "snekbed.cluster.host"
LABEL_CLUSTER_ROLE = "snekbed.cluster.role"
HOST_REPOSITORY = "snekbed-host"
HOST_PACKAGES = ("docker.io", "iptables", "iproute2", "ca-certificates", "procps")
ENGINE_PORT = 2375
MANAGER = "m"
ENGINE_TIMEOUT_S = 90.0  # an inner engine answers in about 10 s here
SWARM_TIMEOUT_S = 60.0
POLL_S = 0.2
#: ``docker run`` flags of an inner host (``--privileged`` fails here: see the module doc)
HOST_RUN_FLAGS = ("--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
                  "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
                  "--device-cgroup-rule", "a *:* rwm", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cgroupns=host",
                  "--tmpfs", "/run", "--init")  # /run fresh on each start: no stale docker.pid after a restart
_HOST_DOCKERFILE = """\
FROM {base}
LABEL snekbed.image="host" snekbed.base="{base}" snekbed.inputs="{inputs}"
ENTRYPOINT ["dockerd", "--storage-driver=vfs", "--host=unix:///var/run/docker.sock", "--host=tcp://0.0.0.0:2375"]
"""


class ClusterError(Exception):
    """The cluster could not be made, found or removed."""


@dataclass
class ClusterHost:
    name: str  # m, h1, h2, ... (the swarm node's hostname)
    container: str  # the outer container's name
    address: str = ""  # on the cluster network
    role: str = "worker"

    @property
    def url(self) -> str:
        return f"tcp://{self.address}:{ENGINE_PORT}"


@dataclass
class Cluster:
    id: str
    network: str
    hosts: list[ClusterHost] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    images: dict[str, Any] = field(default_factory=dict)

    @property
    def manager(self) -> ClusterHost:
        return next(h for h in self.hosts if h.role == "manager")

    @property
    def workers(self) -> list[ClusterHost]:
        return [h for h in self.hosts if h.role == "worker"]

    def host(self, name: str) -> ClusterHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.id, "network": self.network, "manager": self.manager.url,
                "docker_host": self.manager.url,
                "hosts": [{"name": h.name, "role": h.role, "address": h.address, "container": h.container}
                          for h in self.hosts],
                "timings_s": {k: round(v, 3) for k, v in self.timings.items()}, "images": self.images}


def outer_url() -> str:
    """The engine the inner hosts run on: ``$SNEKBED_CLUSTER_ENGINE``, else this machine's socket (never
    ``$DOCKER_HOST``, which may point at the cluster's manager)."""
    return os.environ.get("SNEKBED_CLUSTER_ENGINE") or "unix:///var/run/docker.sock"


def outer_client() -> docker.DockerClient:
    return docker.DockerClient(base_url=outer_url())


def _docker(*args: str, check: bool = True) -> str:
    """Run the docker CLI against the outer engine; return stdout. Raises ClusterError with stderr."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False, env=_outer_env())
    if check and proc.returncode != 0:
        raise ClusterError(f"docker {' '.join(args[:3])} ... failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def _outer_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": outer_url()}


def build_host_image(client: docker.DockerClient, *, progress: Progress | None = None) -> str:
    """``snekbed-host:<hash12>``: dockerd from Debian's docker.io on the offline base; built once per input hash."""
    base = build_offline_base(client, progress=progress, packages=HOST_PACKAGES)
    inputs = hash_fields("host", [("base", base), ("dockerfile", _HOST_DOCKERFILE)])
    tag = f"{HOST_REPOSITORY}:{inputs[:12]}"
    if image_exists(client, tag) is None:
        with tempfile.TemporaryDirectory(prefix="host-") as ctx:
            (Path(ctx) / "Dockerfile").write_text(_HOST_DOCKERFILE.format(base=base, inputs=inputs))
            try:
                client.images.build(path=ctx, tag=tag, rm=True, forcerm=True)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                raise ImageBuildError(tag, str(exc), []) from exc
    return tag


def host_client(host: ClusterHost, timeout_s: float = 30.0) -> docker.DockerClient:
    return docker.DockerClient(base_url=host.url, timeout=int(timeout_s))


def wait_engine(host: ClusterHost, timeout_s: float = ENGINE_TIMEOUT_S) -> docker.DockerClient:
    """Poll the host's engine until it answers a ping; its client. Raises ClusterError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            c = host_client(host, timeout_s=5)
            if c.ping():
                return c
        except (docker.errors.DockerException, requests.RequestException) as exc:
            last = str(exc)[:200]
        state = _docker("inspect", "-f", "{{.State.Status}}", host.container, check=False)
        if state and state != "running":
            logs = _docker("logs", "--tail", "5", host.container, check=False)
            raise ClusterError(f"inner host {host.name} stopped ({state}) before its engine answered: {logs}")
        time.sleep(POLL_S)
    raise ClusterError(f"the engine of inner host {host.name} ({host.url}) did not answer within {timeout_s:g} s "
                       f"({last})")


def wait_ready(manager: docker.DockerClient, names: Iterable[str], timeout_s: float = SWARM_TIMEOUT_S) -> None:
    """Poll the swarm's node list until every host in ``names`` is a ready node. Raises ClusterError."""
    want = set(names)
    deadline = time.monotonic() + timeout_s
    while True:
        ready = {n["Description"]["Hostname"] for n in manager.api.nodes()
                 if (n.get("Status") or {}).get("State") == "ready"}
        if want <= ready:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"swarm nodes not ready after {timeout_s:g} s: {', '.join(sorted(want - ready))}")
        time.sleep(POLL_S)


def list_clusters() -> list[Cluster]:
    """Every snekbed cluster on the outer engine, from its labelled host containers (hosts by name)."""
    fmt = '{{.Names}}\t{{.Label "snekbed.cluster"}}\t{{.Label "snekbed.cluster.host"}}\t' \
          '{{.Label "snekbed.cluster.role"}}'
    rows = [line.split("\t") for line in _docker("ps", "-a", "--filter", f"label={LABEL_CLUSTER}", "--format",
                                                 fmt).splitlines() if line.strip()]
    out = []
    for cid in sorted({r[1] for r in rows}):
        cl = Cluster(cid, f"snekbed-cluster-{cid}")
        for name, _cid, host, role in sorted((r for r in rows if r[1] == cid), key=lambda r: r[2]):
            cl.hosts.append(ClusterHost(host, name, _address(name, cl.network), role))
        out.append(cl)
    return out


def _address(container: str, network: str) -> str:
    return _docker("inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}', container,
                   check=False)


def find_cluster(cluster_id: str | None = None, *, manager_address: str | None = None) -> Cluster:
    """The cluster with this id, or whose manager has this address, or the only one. Raises ClusterError."""
    found = list_clusters()
    if cluster_id is not None:
        found = [c for c in found if c.id == cluster_id]
    if manager_address is not None:
        found = [c for c in found if any(h.role == "manager" and h.address == manager_address for h in c.hosts)]
    if not found:
        said = f" with manager {manager_address}" if manager_address else f" {cluster_id}" if cluster_id else ""
        raise ClusterError(f"no snekbed cluster{said} on the engine {outer_url()} (snekbed cluster up --hosts 3)")
    if len(found) > 1:
        raise ClusterError(f"several clusters ({', '.join(c.id for c in found)}): name one with --cluster")
    return found[0]


def host_running(host: ClusterHost) -> bool:
    return _docker("inspect", "-f", "{{.State.Running}}", host.container, check=False) == "true"


def crash_host(host: ClusterHost) -> None:
    """SIGKILL the inner host's container: its engine and every task on it die at once."""
    _docker("kill", host.container)


def start_host(cluster: Cluster, host: ClusterHost, timeout_s: float = ENGINE_TIMEOUT_S) -> float:
    """Start a crashed host again and wait until its engine answers and the swarm lists it ready; seconds taken."""
    t0 = time.monotonic()
    _docker("start", host.container)
    host.address = _address(host.container, cluster.network) or host.address
    wait_engine(host, timeout_s)
    wait_ready(host_client(cluster.manager), [host.name], timeout_s)
    return time.monotonic() - t0


#: the overlay data plane (VXLAN) between hosts; the control plane (2377, 7946) stays up
_VXLAN_RULES = (("INPUT", "--dport"), ("OUTPUT", "--dport"))


def partition_host(host: ClusterHost, cut: bool) -> None:
    """Cut the host off the others' overlays (drop VXLAN, UDP 4789, in and out of it), or undo that."""
    for chain, port in _VXLAN_RULES:
        rule = [chain, "-p", "udp", port, "4789", "-j", "DROP"]
        present = subprocess.run(["docker", "exec", host.container, "iptables", "-C", *rule], capture_output=True,
                                 env=_outer_env(), check=False).returncode == 0
        if cut and not present:
            _docker("exec", host.container, "iptables", "-I", *rule)
        elif not cut and present:
            _docker("exec", host.container, "iptables", "-D", *rule)


def load_images(cluster: Cluster, images: Iterable[str], progress: Progress) -> dict[str, Any]:
    """Put each image on every worker (``docker save | docker exec -i HOST docker load``) unless that worker has
    the exact image id already; per image: its id, the hosts it was loaded on, and the seconds it took."""
    out: dict[str, Any] = {}
    for image in images:
        image_id = _docker("image", "inspect", "-f", "{{.Id}}", image)
        loaded, t0 = [], time.monotonic()
        for h in cluster.workers:
            with contextlib.suppress(docker.errors.ImageNotFound):
                if host_client(h).images.get(image).id == image_id:
                    continue
            progress(f"loading {image} on {h.name}")
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, env=_outer_env())
            load = subprocess.run(["docker", "exec", "-i", h.container, "docker", "load", "-q"], stdin=save.stdout,
                                  capture_output=True, text=True, check=False, env=_outer_env())
            assert save.stdout is not None
            save.stdout.close()
            if save.wait() != 0 or load.returncode != 0:
                raise ClusterError(f"loading {image} on {h.name} failed: {load.stderr.strip()[-300:]}")
            loaded.append(h.name)
        out[image] = {"id": image_id, "loaded_on": loaded, "seconds": round(time.monotonic() - t0, 3)}
    return out


def cluster_up(hosts: int, *, share: Iterable[Path] = (), images: Iterable[str] = (), cluster_id: str | None = None,
               progress: Progress | None = None) -> Cluster:
    """Start ``hosts`` worker engines and a manager, form the swarm, load ``images`` on the workers.

    Everything is labelled ``snekbed.cluster=<id>``; on any failure or interrupt what was made is removed
    before the exception propagates. Raises ClusterError / ImageError.
    """
    progress = progress or (lambda _s: None)
    if not 1 <= hosts <= 9:
        raise ClusterError(f"--hosts {hosts}: give 1 to 9 hosts")
    outer = outer_client()
    t0 = time.monotonic()
    tag = build_host_image(outer, progress=progress)
    cid = cluster_id or secrets.token_hex(3)
    if any(c.id == cid for c in list_clusters()):  # checked before anything is made: the except below
        raise ClusterError(f"a cluster {cid} is already up: `snekbed cluster down` it first")  # removes by id
    cl = Cluster(cid, f"snekbed-cluster-{cid}")
    cl.timings["host_image_s"] = time.monotonic() - t0
    try:
        _start(cl, tag, hosts, [Path(p).absolute() for p in share], progress)
        cl.images = load_images(cl, images, progress)
        cl.timings["images_s"] = sum(v["seconds"] for v in cl.images.values())
        cl.timings["total_s"] = time.monotonic() - t0
    except BaseException:
        cluster_down(cid)
        raise
    return cl


def _start(cl: Cluster, tag: str, hosts: int, share: list[Path], progress: Progress) -> None:
    t0 = time.monotonic()
    lab = f"{LABEL_CLUSTER}={cl.id}"
    _docker("network", "create", "--label", lab, cl.network)
    names = [MANAGER] + [f"h{i}" for i in range(1, hosts + 1)]
    for name in names:
        h = ClusterHost(name, f"snekbed-cluster-{cl.id}-{name}", role="manager" if name == MANAGER else "worker")
        volume = f"{h.container}-data"
        _docker("volume", "create", "--label", lab, volume)
        mounts = [a for p in share for a in ("-v", f"{p}:{p}")]
        _docker("run", "-d", "--name", h.container, "--hostname", name, "--network", cl.network, "--label", lab,
                "--label", f"{LABEL_CLUSTER_HOST}={name}", "--label", f"{LABEL_CLUSTER_ROLE}={h.role}",
                *HOST_RUN_FLAGS, "-v", f"{volume}:/var/lib/docker", *mounts, tag,
                f"--cgroup-parent=/snekbed-cluster-{cl.id}-{name}")
        h.address = _address(h.container, cl.network)
        cl.hosts.append(h)
        progress(f"started inner host {name} ({h.address})")
    clients = {h.name: wait_engine(h) for h in cl.hosts}
    cl.timings["engines_s"] = time.monotonic() - t0
    progress(f"{len(clients)} engines answer after {cl.timings['engines_s']:.1f} s")
    mgr = clients[MANAGER]
    mgr.swarm.init(advertise_addr=cl.manager.address, listen_addr=f"{cl.manager.address}:2377")
    token = mgr.swarm.attrs["JoinTokens"]["Worker"]
    for h in cl.workers:
        clients[h.name].swarm.join([f"{cl.manager.address}:2377"], token, advertise_addr=h.address,
                                   listen_addr=f"{h.address}:2377")
    wait_ready(mgr, names)
    for n in mgr.api.nodes():
        if n["Description"]["Hostname"] == MANAGER:
            spec = dict(n["Spec"], Availability="drain")
            mgr.api.update_node(n["ID"], n["Version"]["Index"], spec)
    cl.timings["swarm_s"] = time.monotonic() - t0
    progress(f"swarm of {len(names)} nodes ready after {cl.timings['swarm_s']:.1f} s")


def cluster_down(cluster_id: str | None = None) -> dict[str, int]:
    """Remove the cluster's (every cluster's, when None) hosts, network and volumes by label; what is left."""
    label = f"{LABEL_CLUSTER}={cluster_id}" if cluster_id else LABEL_CLUSTER
    names = _docker("ps", "-aq", "--filter", f"label={label}", check=False).split()
    cgroups = [c for c in (_docker("inspect", "-f", "{{.Config.Hostname}} {{.Config.Labels}}", n, check=False)
                           for n in names) if c]
    parents = {f"snekbed-cluster-{_label_value(c, LABEL_CLUSTER)}-{c.split()[0]}" for c in cgroups}
    if names:
        _docker("rm", "-f", "-v", *names, check=False)
    for net in _docker("network", "ls", "-q", "--filter", f"label={label}", check=False).split():
        _docker("network", "rm", net, check=False)
    for vol in _docker("volume", "ls", "-q", "--filter", f"label={label}", check=False).split():
        _docker("volume", "rm", "-f", vol, check=False)
    _remove_cgroups(parents)
    left = {"containers": len(_docker("ps", "-aq", "--filter", f"label={label}", check=False).split()),
            "networks": len(_docker("network", "ls", "-q", "--filter", f"label={label}", check=False).split()),
            "volumes": len(_docker("volume", "ls", "-q", "--filter", f"label={label}", check=False).split())}
    return {"hosts_removed": len(names), **{f"{k}_left": v for k, v in left.items()}}


def _label_value(text: str, key: str) -> str:
    for part in text.replace("map[", " ").replace("]", " ").split():
        if part.startswith(key + ":"):
            return part.split(":", 1)[1]
    return ""


def _remove_cgroups(parents: set[str], timeout_s: float = 10.0) -> None:
    """rmdir the (empty) cgroups the inner engines made for their tasks, deepest first; waits for their processes to
    go (the kernel empties them when the host's PID namespace dies)."""
    root = Path("/sys/fs/cgroup")
    deadline = time.monotonic() + timeout_s
    dirs = [d for parent in parents for ctl in root.iterdir() if (d := ctl / parent).is_dir()]
    while dirs and time.monotonic() < deadline:
        for top in list(dirs):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
            if not top.exists():
                dirs.remove(top)
        if dirs:
            time.sleep(POLL_S)

