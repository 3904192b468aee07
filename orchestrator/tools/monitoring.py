"""Monitoring a run: the orchestrator's own view as Prometheus series, and a Prometheus for a Docker run.

The nodes export what each of them sees (node/metrics.py, docs/metrics.md). What no node can
see (how many nodes are alive, how many pieces the network is in, whether the whole of it has
converged, when a fault was injected and how long the network took to recover) is known only to
the process that runs the topology or the chaos scenario. :class:`RunMetrics` holds that view,
every series labelled ``run``:

==========================================  =======  ===========  =============================================
series                                      type     labels       answers
==========================================  =======  ===========  =============================================
snekbed_live_nodes                          gauge    run          nodes running and not paused
snekbed_components                          gauge    run          connected components of the live graph
snekbed_converged                           gauge    run, kind    1 when every component has converged (tree,
                                                                  snake), as the observer decides
snekbed_faults_total                        counter  run, kind    faults injected, by kind (pre-set at 0)
snekbed_last_fault_timestamp_seconds        gauge    run          Unix time of the last fault
snekbed_since_last_fault_seconds            gauge    run          seconds since the last fault (at scrape time)
snekbed_reconvergence_seconds               gauge    run, kind    re-convergence time of the last episode
snekbed_pings_total                         counter  run, mode,   the chaos traffic's pings by outcome
                                                     result
==========================================  =======  ===========  =============================================

Series that have no value yet (no fault, no episode) are absent, never a made-up 0.

:func:`prometheus_config` writes the scrape configuration: node containers found through the
Docker socket by their labels (``snekbed.node``, and ``snekbed.run`` when one run is meant),
scraped on their control-network address, plus static targets for orchestrator exporters.
:func:`start_prometheus` runs Prometheus as a container of the run (labelled with it, removed by
``snekbed down``), on the run's control network at the address the plan reserves for it, its UI
published on 127.0.0.1 only.
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contract.dataset import DISRUPTIVE_ACTIONS

from orchestrator.backends.docker_net import ENDPOINT_CHANGES, LABEL_NODE, LABEL_ROLE, LABEL_RUN, AddressPlan

if TYPE_CHECKING:
    import docker

__all__ = ["FAULT_KINDS", "PROMETHEUS_PORT", "MetricsServer", "PrometheusInfo", "RunMetrics", "RunMonitoring", "monitor_docker_run", "prometheus_config",
           "serve_metrics", "start_prometheus", "targets_health"]

#: Every action the chaos runner counts as a fault (the contract's disruptive actions, and a restart, which
#: brings a node back that may take over as root).
FAULT_KINDS: tuple[str, ...] = (*DISRUPTIVE_ACTIONS, "restart")
PROMETHEUS_PORT = 9090
NODE_METRICS_PORT = 9100  # `snekbed node --metrics` in every container snekbed starts
SCRAPE_INTERVAL_S = 2.0
LABEL_PROMETHEUS = "prometheus"  # snekbed.role of the Prometheus container of a run


class _SinceLastFault(Collector):
    def __init__(self, metrics: RunMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("snekbed_since_last_fault_seconds", "Seconds since the last fault was injected.",
                              labels=["run"])
        if self.m.last_fault_wall is not None:
            g.add_metric([self.m.run_id], max(0.0, time.time() - self.m.last_fault_wall))
        yield g


class _Served:
    """The registry as the exporter serves it: every collection is a scrape, and records which of the run's
    updates it carried (what :meth:`RunMetrics.flush` waits on)."""

    def __init__(self, metrics: RunMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        version = self.m.version
        yield from self.m.registry.collect()
        self.m.served(version)

    def restricted_registry(self, names: Iterable[str]) -> Any:  # a `name[]` query: not a whole scrape
        return self.m.registry.restricted_registry(names)


class RunMetrics:
    """The orchestrator's view of one run (module docstring), thread-safe, in its own registry.

    The exporter goes away with the orchestrator: whatever Prometheus scraped last is the run's last word on
    it. :meth:`flush` waits until a scrape has carried every update, so that word is the final one.
    """

    def __init__(self, run_id: str, registry: CollectorRegistry | None = None) -> None:
        self.run_id = run_id
        self._cond = threading.Condition()
        self.version = 0  # bumped by every update
        self._served = -1  # the version the last whole scrape carried (-1: never scraped)
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r, run = self.registry, ["run"]
        self._live = Gauge("snekbed_live_nodes", "Nodes running and not paused.", run, registry=r)
        self._components = Gauge("snekbed_components", "Connected components of the live graph.", run, registry=r)
        self._converged = Gauge("snekbed_converged", "1 when every component has converged (kind: tree, snake).",
                                [*run, "kind"], registry=r)
        self._faults = Counter("snekbed_faults", "Faults injected, by kind.", [*run, "kind"], registry=r)
        self._last_fault = Gauge("snekbed_last_fault_timestamp_seconds", "Unix time of the last fault.", run,
                                 registry=r)
        self._reconv = Gauge("snekbed_reconvergence_seconds",
                             "Re-convergence time of the last fault episode (kind: tree, snake).", [*run, "kind"],
                             registry=r)
        self._pings = Counter("snekbed_pings", "Pings of the run's traffic, by mode and result (received, lost).",
                              [*run, "mode", "result"], registry=r)
        self.last_fault_wall: float | None = None
        self.registry.register(_SinceLastFault(self))
        for kind in FAULT_KINDS:  # counters of a bounded label set start at 0, so increase() sees the first fault
            self._faults.labels(run_id, kind)
        for mode in ("snek", "tree"):
            for result in ("received", "lost"):
                self._pings.labels(run_id, mode, result)

    def fault(self, kind: str, wall: float | None = None) -> None:
        """A fault of ``kind`` was injected at Unix time ``wall`` (now when None)."""
        self.last_fault_wall = time.time() if wall is None else wall
        self._faults.labels(self.run_id, kind).inc()
        self._last_fault.labels(self.run_id).set(self.last_fault_wall)
        self._updated()

    def observe(self, live_nodes: int, components: int, tree: bool, snake: bool) -> None:
        self._live.labels(self.run_id).set(live_nodes)
        self._components.labels(self.run_id).set(components)
        self._converged.labels(self.run_id, "tree").set(1 if tree else 0)
        self._converged.labels(self.run_id, "snake").set(1 if snake else 0)
        self._updated()

    def episode(self, tree_s: float | None, snake_s: float | None) -> None:
        """The last fault episode re-converged after these many seconds (None: it did not, the series is kept)."""
        for kind, value in (("tree", tree_s), ("snake", snake_s)):
            if value is not None:
                self._reconv.labels(self.run_id, kind).set(value)
        self._updated()

    def ping(self, mode: str, delivered: bool, n: int = 1) -> None:
        """``n`` more pings of the run's traffic in ``mode`` were answered (delivered) or lost."""
        self._pings.labels(self.run_id, mode, "received" if delivered else "lost").inc(n)
        self._updated()

    def _updated(self) -> None:
        with self._cond:
            self.version += 1

    def served(self, version: int) -> None:
        """A scrape carried every update up to ``version`` (the exporter calls this)."""
        with self._cond:
            self._served = max(self._served, version)
            self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until a scrape has carried every update made so far: True when one has.
        False also when nothing ever scraped the exporter (no Prometheus reached it): nothing to wait for then."""
        with self._cond:
            target = self.version
            if self._served < 0:
                return False
            return self._cond.wait_for(lambda: self._served >= target, timeout_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class MetricsServer:
    """A running ``GET /metrics`` endpoint (prometheus_client's threaded server)."""

    host: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(metrics: RunMetrics, host: str, port: int = 0) -> MetricsServer:
    """Serve ``metrics`` on ``host:port`` (0: a free port) in a daemon thread. Raises OSError."""
    server, thread = start_http_server(port, addr=host, registry=_Served(metrics))  # type: ignore[arg-type]
    return MetricsServer(host, int(server.server_address[1]), server, thread)


# ---------------------------------------------------------------- Prometheus


def prometheus_config(*, run_id: str | None = None, orchestrators: Iterable[tuple[str, str]] = (),
                      scrape_interval_s: float = SCRAPE_INTERVAL_S) -> str:
    """The scrape configuration (YAML text).

    Node containers come from the Docker socket (looked up every scrape interval): every container labelled
    ``snekbed.node`` (and ``snekbed.run=<run_id>`` when given), scraped at its address on the network labelled
    ``snekbed.role=control``, port 9100, with ``node``, ``run`` and ``node_key`` labels from its
    container labels. ``orchestrators``: ``(run_id, "host:port")`` exporters of :class:`RunMetrics`, their own
    labels honoured (their series' ``run`` stays ``run``). The interval, 2 s by default, is short enough that
    an episode of 5 s spans two scrapes.
    """
    filters = [{"name": "label", "values": [LABEL_NODE]}]
    if run_id is not None:
        filters.append({"name": "label", "values": [f"{LABEL_RUN}={run_id}"]})
    label = "__meta_docker_container_label_"
    nodes = {
        "job_name": "snek-nodes",
        # found within a scrape interval of their container's start (Prometheus runs before the first one)
        "docker_sd_configs": [{"host": "unix:///var/run/docker.sock", "refresh_interval": f"{scrape_interval_s:g}s",
                               "filters": filters}],
        "relabel_configs": [
            # one target per container: its address on the network labelled snekbed.role=control
            {"source_labels": ["__meta_docker_network_label_snekbed_role"], "regex": "control", "action": "keep"},
            # docker_sd gives one target per published port: keep the admin port's (or the portless) one
            {"source_labels": ["__meta_docker_port_private"], "regex": "(8080|)", "action": "keep"},
            {"source_labels": ["__meta_docker_network_ip"], "target_label": "__address__",
             "replacement": f"$1:{NODE_METRICS_PORT}"},
            {"source_labels": [label + "snekbed_node"], "target_label": "node"},
            {"source_labels": [label + "snekbed_run"], "target_label": "run"},
            {"source_labels": [label + "snekbed_key"], "target_label": "node_key"},
            {"source_labels": ["run", "node"], "separator": "/", "target_label": "instance"},
        ],
    }
    jobs: list[dict[str, Any]] = [nodes]
    orch = [{"targets": [addr], "labels": {"run": run}} for run, addr in orchestrators]
    if orch:  # the exporter's series carry their own ``run`` label: kept as it is (no ``exported_run``)
        jobs.append({"job_name": "snekbed-orchestrator", "honor_labels": True, "static_configs": orch})
    jobs.append({"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{PROMETHEUS_PORT}"]}]})
    doc = {"global": {"scrape_interval": f"{scrape_interval_s:g}s", "evaluation_interval": f"{scrape_interval_s:g}s"},
           "scrape_configs": jobs}
    return "# generated by snekbed (orchestrator/tools/monitoring.py)\n" + yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class PrometheusInfo:
    container_id: str
    url: str  # http://127.0.0.1:<published port>
    address: str  # its address on the run's control network


def _tar_one(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def start_prometheus(client: docker.DockerClient, run_id: str, *, image: str, network: str, address: str,
                     config: str, timeout_s: float = 30.0) -> PrometheusInfo:
    """Run Prometheus for ``run_id`` on the run's control ``network`` at ``address``; wait until it is ready.

    The container carries ``snekbed.run=<run_id>`` and ``snekbed.role=prometheus`` (so ``snekbed down``
    removes it with the run), reads the Docker socket (read-only) for its targets, and publishes its
    port on 127.0.0.1 only. Raises RuntimeError when it does not become ready.
    """
    import docker.errors

    api = client.api
    host_config = api.create_host_config(
        binds=["/var/run/docker.sock:/var/run/docker.sock:ro"],
        port_bindings={PROMETHEUS_PORT: ("127.0.0.1", None)},
        network_mode=network,
    )
    networking = api.create_networking_config({network: api.create_endpoint_config(ipv4_address=address)})
    created = api.create_container(
        image, name=f"snekbed-{run_id}-prometheus", user="0", entrypoint=["prometheus"],
        command=["--config.file=/etc/snekbed/prometheus.yml", "--storage.tsdb.path=/prometheus",
                 f"--web.listen-address=:{PROMETHEUS_PORT}", "--web.enable-lifecycle"],
        labels={LABEL_RUN: run_id, LABEL_ROLE: LABEL_PROMETHEUS}, ports=[PROMETHEUS_PORT],
        host_config=host_config, networking_config=networking, detach=True,
    )  # fmt: skip
    cid = created["Id"]
    try:
        api.put_archive(cid, "/etc", _tar_one("snekbed/prometheus.yml", config.encode()))
        with ENDPOINT_CHANGES:
            api.start(cid)
        port = api.inspect_container(cid)["NetworkSettings"]["Ports"][f"{PROMETHEUS_PORT}/tcp"][0]["HostPort"]
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, timeout_s)
    except (docker.errors.APIError, RuntimeError, KeyError, IndexError, TypeError) as exc:
        logs = ""
        try:
            logs = api.logs(cid, tail=20).decode(errors="replace")
        except docker.errors.APIError:
            pass
        raise RuntimeError(f"Prometheus ({image}) for run {run_id} did not start: {exc}\n{logs}") from exc
    return PrometheusInfo(cid, url, address)


def _wait_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout_s:g} s ({last})")


def targets_health(url: str) -> Mapping[str, list[dict[str, Any]]]:
    """Active targets by job, from Prometheus's targets API."""
    doc = httpx.get(f"{url}/api/v1/targets", params={"state": "active"}, timeout=5.0).json()
    out: dict[str, list[dict[str, Any]]] = {}
    for t in doc["data"]["activeTargets"]:
        out.setdefault(t["labels"].get("job", ""), []).append(t)
    return out


@dataclass
class RunMonitoring:
    """Prometheus for one Docker run, and the orchestrator's exporter it scrapes (when the run has one)."""

    prometheus: PrometheusInfo
    exporter: MetricsServer | None
    metrics: RunMetrics | None = None

    def close(self, flush: bool = True) -> None:
        """Stop the exporter (Prometheus is a container of the run: it goes with the run). With ``flush``, once
        Prometheus has scraped the run's last update (at most two scrape intervals and a second)."""
        if self.exporter is None:
            return
        if flush and self.metrics is not None:
            self.metrics.flush(2 * SCRAPE_INTERVAL_S + 1)
        self.exporter.close()


def monitor_docker_run(client: docker.DockerClient, plan: AddressPlan, *, image: str,
                       metrics: RunMetrics | None = None) -> RunMonitoring:
    """Start Prometheus for the run ``plan`` belongs to, scraping its nodes and (given ``metrics``) an exporter.

    The exporter listens on the control network's gateway, the host's own address on that bridge: the
    run's Prometheus reaches it, nothing outside the host does. Raises OSError / RuntimeError.
    """
    exporter = None
    orchestrators: list[tuple[str, str]] = []
    if metrics is not None:
        exporter = serve_metrics(metrics, plan.control.gateway, 0)
        orchestrators.append((plan.run_id, f"{exporter.host}:{exporter.port}"))
    try:
        prom = start_prometheus(client, plan.run_id, image=image, network=plan.control.name,
                                address=plan.monitor_ip,
                                config=prometheus_config(run_id=plan.run_id, orchestrators=orchestrators))
    except BaseException:
        if exporter is not None:
            exporter.close()
        raise
    return RunMonitoring(prom, exporter, metrics)
