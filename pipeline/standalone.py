"""A Spark standalone cluster on this machine, from the pyspark in this environment: ``snekbed spark up|status|down``.

``start`` runs a master and N workers, each its own JVM (``pyspark/bin/spark-class``, no Spark installation
needed), bound to 127.0.0.1: every worker offers ``cores`` cores and ``memory`` to executors, and every daemon's own
heap is ``DAEMON_MEMORY``. It returns once the master's status page (``http://127.0.0.1:WEBUI/json/``) lists all N
workers ALIVE. What it starts is written to ``STATE_DIR/cluster.json`` as it starts it (pids, ports, the master URL),
so ``stop`` (``snekbed spark down``) finds every process even after an ``up`` that was killed; an ``up`` that fails
or is interrupted stops what it started itself. Each daemon leads a process group of its own, which also holds the
executors its worker launches and their Python workers: ``stop`` ends the whole group, TERM first, then KILL.

The driver (``snekbed analyze --master spark://127.0.0.1:PORT``) runs on this machine too, so the workers see the
run directories and ``--out`` at the same paths, and run the driver's Python (``pipeline.session`` sets
``PYSPARK_PYTHON`` for a master on loopback).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import pyspark

__all__ = ["DAEMON_MEMORY", "HOST", "Cluster", "ClusterError", "ClusterRefused", "alive_workers", "default_state_dir",
           "group_members", "read_state", "spark_class", "start", "stop"]

HOST = "127.0.0.1"
#: The heap of the master's and each worker's own JVM (executors get the worker's ``memory``).
DAEMON_MEMORY = "512m"
STATE_FILE = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterError(Exception):
    """The cluster failed after it began to start (a daemon that exited, no worker within the timeout) or could not
    be stopped."""


class ClusterRefused(ClusterError):
    """Refused before anything started: a port in use, a cluster already up from the same state directory, no
    ``spark-class`` in this pyspark."""


@dataclass
class Cluster:
    """What ``start`` started: the master URL to give ``--master``, its status page, and every daemon's pid (each
    the leader of its own process group)."""

    state_dir: str
    master_url: str
    webui_url: str
    workers: int
    cores: int
    memory: str
    pids: dict[str, int] = field(default_factory=dict)  # "master", "worker-1", ... -> pid (= process group id)
    worker_webui_ports: list[int] = field(default_factory=list)

    @property
    def json_url(self) -> str:
        return f"{self.webui_url}/json/"


def default_state_dir() -> Path:
    """Where ``snekbed spark`` keeps the cluster's state, logs and worker directories: ``$SNEKBED_SPARK_DIR``, else
    a directory of this user's under the system's temporary directory."""
    env = os.environ.get("SNEKBED_SPARK_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"snekbed-spark-{os.getuid()}"


def _own(state_dir: Path) -> None:
    """Refuse a state directory another user owns or others may write: Spark sources ``conf/spark-env.sh`` from
    it and ``down`` signals the pids its state file names. Raises ClusterRefused."""
    st = state_dir.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ClusterRefused(f"{state_dir}: owned by uid {st.st_uid} with mode {st.st_mode & 0o777:o}; the state "
                             "directory must be this user's and writable by no one else (Spark runs its "
                             "conf/spark-env.sh): remove it, or give another with --state-dir / SNEKBED_SPARK_DIR")


def spark_class() -> Path:
    """pyspark's own launcher script (it ``exec``s the JVM, so its pid is the daemon's)."""
    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.is_file():
        raise ClusterRefused(f"pyspark {pyspark.__version__} ships no bin/spark-class at {path}")
    return path


def read_state(state_dir: Path) -> Cluster | None:
    try:
        doc = json.loads((state_dir / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterRefused(f"{state_dir / STATE_FILE}: unreadable cluster state: {exc}") from exc
    return Cluster(**doc)


def _write_state(cluster: Cluster) -> None:
    path = Path(cluster.state_dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cluster), indent=2) + "\n")
    tmp.replace(path)


def _port(port: int, what: str) -> int:
    """``port`` if it is free on 127.0.0.1 (0: any free port)."""
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError as exc:
            raise ClusterRefused(f"{what} port {port} on {HOST} is not free ({exc.strerror}): choose another") from exc
        return s.getsockname()[1]


def _env(state_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR", "PYSPARK_DRIVER_PYTHON")}
    conf = state_dir / "conf"
    conf.mkdir(exist_ok=True)  # empty: Spark's defaults, not whatever a SPARK_HOME/conf holds
    env.update(SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP=HOST,
               SPARK_LOG_DIR=str(state_dir / "logs"), SPARK_DAEMON_MEMORY=DAEMON_MEMORY, PYSPARK_PYTHON=sys.executable,
               # a port taken between our check and the bind fails the daemon instead of moving it elsewhere; no
               # REST submission server (a fixed port, 6066); the marker names this cluster's processes (``stop``
               # ends no process group led by a process without it)
               SPARK_DAEMON_JAVA_OPTS=f"-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false "
                                      f"-Dsnekbed.spark.dir={state_dir}")  # fmt: skip
    return env


def _launch(argv: list[str], log: Path, env: dict[str, str]) -> int:
    with open(log, "ab") as fh:
        # its own session and process group: the executors a worker launches join it, and ``stop`` ends the group
        proc = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_CLOSE, 0), (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, fh.fileno(), 1), (os.POSIX_SPAWN_DUP2, fh.fileno(), 2)], setsid=True)
    return proc


def alive_workers(json_url: str, timeout_s: float = 5.0) -> list[dict]:
    """The workers the master's status page lists as ALIVE ([] while it does not answer)."""
    try:
        status = httpx.get(json_url, timeout=timeout_s).json()
    except (httpx.HTTPError, ValueError):
        return []
    return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]


def start(state_dir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g", port: int = 7077,
          webui_port: int = 8080, timeout_s: float = 120.0,
          progress: Callable[[str], None] = lambda _text: None) -> Cluster:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory`` for executors each) on 127.0.0.1 and
    wait until the master lists them all ALIVE. Raises ClusterError (having stopped what it started) when a port is
    taken, a daemon exits, or the workers do not register within ``timeout_s``; an interrupt stops them too."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _own(state_dir)
    old = read_state(state_dir)
    if old is not None and _running(old):
        raise ClusterRefused(f"a cluster is already up from {state_dir} ({old.master_url}): `snekbed spark down` first")
    port, webui_port = _port(port, "master"), _port(webui_port, "master web UI")
    env = _env(state_dir)
    cluster = Cluster(state_dir=str(state_dir), master_url=f"spark://{HOST}:{port}",
                      webui_url=f"http://{HOST}:{webui_port}", workers=workers, cores=cores, memory=memory)
    launcher = str(spark_class())
    deadline = time.monotonic() + timeout_s
    try:
        _write_state(cluster)  # before the first daemon: a killed `up` still leaves what `down` needs
        cluster.pids["master"] = _launch([launcher, MASTER_CLASS, "--host", HOST, "--port", str(port),
                                          "--webui-port", str(webui_port)], state_dir / "master.log", env)
        _write_state(cluster)
        progress(f"master {cluster.master_url} (pid {cluster.pids['master']}); waiting for it to answer")
        # workers started before the master answers register, get no reply and retry only 5-15 s later
        _wait(cluster, deadline, lambda: _master_alive(cluster.json_url), "the master did not answer")
        for i in range(1, workers + 1):
            ui = _port(0, "worker web UI")
            work = state_dir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            cluster.pids[f"worker-{i}"] = _launch([launcher, WORKER_CLASS, cluster.master_url, "--host", HOST,
                                                   "--cores", str(cores), "--memory", memory, "--webui-port", str(ui),
                                                   "--work-dir", str(work)], state_dir / f"worker-{i}.log", env)
            cluster.worker_webui_ports.append(ui)
            _write_state(cluster)
        progress(f"{workers} worker(s) started; waiting for the master to list them ALIVE")
        _wait(cluster, deadline, lambda: len(alive_workers(cluster.json_url)) >= workers,
              f"not all {workers} worker(s) registered with {cluster.master_url}")
    except BaseException:  # a failure or an interrupt: nothing this call started is left running
        stop(state_dir)
        raise
    return cluster


def _master_alive(json_url: str) -> bool:
    try:
        return httpx.get(json_url, timeout=5).json().get("status") == "ALIVE"
    except (httpx.HTTPError, ValueError):
        return False


def _wait(cluster: Cluster, deadline: float, ready: Callable[[], bool], failure: str) -> None:
    """Poll ``ready`` (a look at the master's own status page) until it holds; raise ClusterError when a daemon
    exits or ``deadline`` passes."""
    state_dir = Path(cluster.state_dir)
    while not ready():
        for name, pid in cluster.pids.items():
            if not group_members(pid):
                log = (state_dir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise ClusterError(f"the Spark {name} exited; the end of {state_dir / (name + '.log')}:\n{log}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{failure} within the timeout (logs under {state_dir})")
        time.sleep(0.2)  # between two looks at the status page, bounded by the deadline


def _running(cluster: Cluster) -> bool:
    return any(_ours(pid, cluster.state_dir) and group_members(pid) for pid in cluster.pids.values())


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _ours(pgid: int, state_dir: str) -> bool:
    """Whether group ``pgid`` may be this cluster's: its leader carries the cluster's marker (in its environment,
    which ``spark-class`` hands on to the JVM it ``exec``s, and in the JVM's command line), or the leader is gone (a
    pid in use as a group id is not handed out again while the group lives). A group led by another program (the pid
    reused after the cluster ended) is left alone."""
    marker = f"-Dsnekbed.spark.dir={state_dir}\0".encode()  # the last of the options, then the end of the string
    try:
        proc = Path(f"/proc/{pgid}")
        return marker in proc.joinpath("environ").read_bytes() or marker in proc.joinpath("cmdline").read_bytes()
    except OSError:
        return True


def stop(state_dir: Path, timeout_s: float = 30.0) -> list[str]:
    """Stop every daemon of the cluster started from ``state_dir`` (workers first, with their executors), TERM then
    KILL after ``timeout_s``; remove the state file. Returns the names of the daemons that were still running."""
    state_dir = state_dir.resolve()
    cluster = read_state(state_dir)
    if cluster is None:
        return []
    stopped = []
    for name, pid in sorted(cluster.pids.items(), key=lambda item: item[0] == "master"):
        if not _ours(pid, cluster.state_dir) or not group_members(pid):
            continue
        stopped.append(name)
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # the group's own exit, bounded
        if group_members(pid):
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while group_members(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        try:  # reap it when it is our own child (an `up` that failed)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    left = [name for name, pid in cluster.pids.items() if group_members(pid)]
    if left:
        raise ClusterError(f"could not stop {', '.join(left)} (pids {[cluster.pids[n] for n in left]})")
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
