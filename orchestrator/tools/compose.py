"""Write a topology as a compose file that both ``docker compose`` (v2) and ``docker-compose`` 1.29 accept.

The file mirrors what the Docker backend builds, with fixed addresses so it is
self-contained: a ``control`` bridge (admin and metrics; each node's admin port
is also published on an ephemeral 127.0.0.1 port) and one internal /29 per link,
carved by :func:`orchestrator.backends.docker_net.plan_addresses` from a block of
``COMPOSE_POOL`` picked by a hash of the topology name (so the committed files
do not collide with each other). Node identities come from the same
``NodeSpec.seed_bytes(seed)`` as every backend.

Shaping: compose has no host-side step, so every link is shaped in the node's
userspace transport with its full effective shape (``class=..&delay_ms=..&loss_pct=..``
on both ends).

1.29 compatibility: no top-level ``name:``, no ``version:``, no
``healthcheck.start_interval``. Prometheus sits in the ``monitoring`` profile, on the
control network at the address the plan reserves for it (nothing on the host network),
finding this file's nodes through the Docker socket by their ``snekbed.run`` label
(``compose/prometheus/<name>.yml``); Grafana, which needs a registry, has its own
``grafana`` profile. Both publish on 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from pathlib import Path
from typing import Any

import yaml

from node.core.crypto import Identity

from orchestrator.backends.docker_net import (
    LABEL_NODE,
    LABEL_ROLE,
    LABEL_RUN,
    AddressPlan,
    DockerBackendError,
    link_labels,
    plan_addresses,
)
from orchestrator.backends.docker_plan import (
    LABEL_KEY,
    NODE_ADMIN_PORT,
    NODE_EVENTS_DIR,
    NODE_METRICS_PORT,
    NODE_PEER_PORT,
    REDIAL_MAX_S,
    implementation_of,
    peer_params,
)
from orchestrator.tools.monitoring import PROMETHEUS_PORT, prometheus_config
from orchestrator.model.topology import NodeSpec, Topology

__all__ = ["COMPOSE_POOL", "ComposeError", "compose_document", "render_compose", "write_compose", "compose_run_id",
           "PROMETHEUS_IMAGE", "GRAFANA_IMAGE", "prometheus_config_path", "render_prometheus_config"]

COMPOSE_POOL = "10.212.0.0/16"
PROMETHEUS_IMAGE = "snekbed-prometheus:latest"  # `snekbed image prometheus`; official: prom/prometheus:v2.53.3
GRAFANA_IMAGE = "grafana/grafana:11.3.1"
COMPOSE_SCRAPE_INTERVAL_S = 5.0
_HEALTHCHECK = ("import urllib.request as u; "
                f"u.urlopen('http://127.0.0.1:{NODE_ADMIN_PORT}/healthz', timeout=2).read()")


class ComposeError(Exception):
    """The compose file cannot be made (a pool too small, a shape a URI cannot carry, an unwritable path)."""


def compose_run_id(topology: Topology) -> str:
    """``compose-<name>`` (lowercased): the ``snekbed.run`` label and ``--run-id`` of a compose file's nodes."""
    return f"compose-{topology.name.lower()}"[:40]


def _block(topology: Topology, pool: str) -> str:
    """The block of ``pool`` this topology's file uses: the planned size, at an index hashed from the name."""
    try:
        pool_net = ipaddress.IPv4Network(pool)
    except ValueError as exc:
        raise ComposeError(f"--subnet-pool {pool!r}: not an IPv4 network ({exc})") from None
    size = ipaddress.IPv4Network(plan_addresses(topology, "probe", pool=pool).block).num_addresses
    blocks = pool_net.num_addresses // size
    index = int.from_bytes(hashlib.sha256(topology.name.encode()).digest()[:4], "big") % blocks
    return str(ipaddress.IPv4Network((int(pool_net.network_address) + index * size, 32 - int(math.log2(size)))))


def compose_document(topology: Topology, *, seed: int | str = 0, pool: str = COMPOSE_POOL,
                     image: str = "snekbed-node:latest") -> dict[str, Any]:
    """The compose document (a dict) for ``topology``. Raises ComposeError."""
    run_id = compose_run_id(topology)
    if hosts := [n.name for n in topology.nodes if n.host]:
        raise ComposeError(f"host nodes (host: true) are not supported in compose files: use `snekbed up`, which "
                           f"prints their commands (nodes: {', '.join(hosts)})")
    if refs := [n.name for n in topology.nodes if implementation_of(n) == "reference"]:
        raise ComposeError(f"nodes of the Pinecone reference (spec pinecone) are not supported in compose files: use "
                           f"`snekbed up`, which runs them from the reference image (nodes: {', '.join(refs)})")
    try:
        plan = plan_addresses(topology, run_id, pool=_block(topology, pool))
    except DockerBackendError as exc:
        raise ComposeError(str(exc)) from None
    if plan.lan is not None:
        raise ComposeError("multicast nodes are not supported in compose files yet: use `snekbed up` "
                           f"(nodes: {', '.join(sorted(plan.lan.members))})")
    services = {spec.name: _node_service(topology, plan, spec, run_id=run_id, seed=seed, image=image)
                for spec in topology.nodes}
    services.update(_monitoring_services(topology, plan, run_id))
    return {"services": services, "networks": _networks(plan, run_id),
            "volumes": {"events": {"labels": {LABEL_RUN: run_id}}}}


def _node_service(topology: Topology, plan: AddressPlan, spec: NodeSpec, *, run_id: str, seed: int | str,
                  image: str) -> dict[str, Any]:
    """One node's service: ``snekbed node`` with its key, peers (the smaller name dials) and full link shapes."""
    seed_bytes = spec.seed_bytes(seed)
    key = Identity(seed_bytes).public_key.hex()
    command = ["node", "--listen", f"0.0.0.0:{NODE_PEER_PORT}", "--admin", f"0.0.0.0:{NODE_ADMIN_PORT}",
               "--metrics", f"0.0.0.0:{NODE_METRICS_PORT}", "--key-seed", seed_bytes.hex(),
               "--events", f"{NODE_EVENTS_DIR}/{spec.name}.jsonl", "--run-id", run_id, "--name", spec.name,
               "--backoff-max-s", str(REDIAL_MAX_S)]
    if spec.variant is not None or spec.knobs:
        command += ["--variant", str(spec.variant_spec())]
    networks: dict[str, Any] = {"control": {"ipv4_address": plan.control_ip(spec.name)}}
    for ln in plan.links_of(spec.name):
        try:
            query = peer_params(ln.link_class, topology.link_class_of(ln.index).shape)
        except DockerBackendError as exc:
            raise ComposeError(f"links[{ln.index}] ({ln.a}-{ln.b}): {exc}") from None
        peer_ip = ln.net.members[ln.peer_of(spec.name)]
        if spec.name == ln.dialer:
            command += ["--peer", f"tcp://{peer_ip}:{NODE_PEER_PORT}?{query}"]
        else:
            command += ["--inbound", f"tcp://{peer_ip}?{query}"]
        networks[f"l{ln.index}"] = {"ipv4_address": ln.net.members[spec.name]}
    return {
        "image": image,
        "init": True,
        "hostname": spec.name,
        "command": command,
        "labels": {LABEL_RUN: run_id, LABEL_NODE: spec.name, LABEL_KEY: key, LABEL_ROLE: "node"},
        "networks": networks,
        "ports": [f"127.0.0.1::{NODE_ADMIN_PORT}"],
        "volumes": [f"events:{NODE_EVENTS_DIR}"],
        "stop_grace_period": "5s",
        "healthcheck": {"test": ["CMD", "python3", "-c", _HEALTHCHECK], "interval": "5s", "timeout": "3s",
                        "retries": 3},
    }


def _monitoring_services(topology: Topology, plan: AddressPlan, run_id: str) -> dict[str, Any]:
    """Prometheus (profile ``monitoring``) and Grafana (profile ``grafana``) on the control network."""
    monitoring_labels = {LABEL_RUN: run_id, LABEL_ROLE: "monitoring"}
    prometheus = {
        # built here without a registry (`snekbed image prometheus`); SNEKBED_PROMETHEUS_IMAGE=prom/prometheus:...
        # switches to the official image, which takes the same entrypoint and flags
        "image": f"${{SNEKBED_PROMETHEUS_IMAGE:-{PROMETHEUS_IMAGE}}}",
        "profiles": ["monitoring"],
        "user": "0",  # reads the Docker socket for service discovery
        "entrypoint": ["prometheus"],
        "command": ["--config.file=/etc/snekbed/prometheus.yml", "--storage.tsdb.path=/prometheus",
                    f"--web.listen-address=:{PROMETHEUS_PORT}"],
        "volumes": [f"./{prometheus_config_path(topology)}:/etc/snekbed/prometheus.yml:ro",
                    "/var/run/docker.sock:/var/run/docker.sock:ro"],
        "networks": {"control": {"ipv4_address": plan.monitor_ip}},
        "ports": [f"127.0.0.1:${{SNEKBED_PROMETHEUS_PORT:-{PROMETHEUS_PORT}}}:{PROMETHEUS_PORT}"],
        "labels": monitoring_labels,
    }
    grafana = {
        "image": f"${{SNEKBED_GRAFANA_IMAGE:-{GRAFANA_IMAGE}}}",
        "profiles": ["grafana"],  # needs a registry (or a local Grafana image): its own profile
        "depends_on": ["prometheus"],
        "networks": {"control": {"ipv4_address": plan.grafana_ip}},
        "ports": ["127.0.0.1:${SNEKBED_GRAFANA_PORT:-3000}:3000"],
        "environment": {"GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
                        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": "/var/lib/grafana/dashboards/snekbed-overview.json"},
        "volumes": ["./grafana/provisioning:/etc/grafana/provisioning:ro",
                    "../dashboards:/var/lib/grafana/dashboards:ro"],
        "labels": monitoring_labels,
    }
    return {"prometheus": prometheus, "grafana": grafana}


def _networks(plan: AddressPlan, run_id: str) -> dict[str, Any]:
    """The control bridge and one internal /29 per link, with the plan's fixed subnets and the run's labels."""
    networks_doc: dict[str, Any] = {
        "control": {"driver": "bridge", "labels": {LABEL_RUN: run_id, LABEL_ROLE: "control"},
                    "ipam": {"config": [{"subnet": plan.control.subnet, "gateway": plan.control.gateway}]}},
    }
    for ln in plan.links:
        networks_doc[f"l{ln.index}"] = {
            "driver": "bridge", "internal": True,
            "labels": link_labels(run_id, ln),
            "ipam": {"config": [{"subnet": ln.net.subnet, "gateway": ln.net.gateway}]},
        }
    return networks_doc


def render_compose(topology: Topology, *, seed: int | str = 0, pool: str = COMPOSE_POOL,
                   image: str = "snekbed-node:latest", source: str | None = None) -> str:
    """The compose file's text: a header saying how it was made and how to use it, then the YAML."""
    doc = compose_document(topology, seed=seed, pool=pool, image=image)
    src = source or f"<{topology.name}>"
    name = f"{topology.name}.yml"
    header = [
        f"# {topology.name}: {len(topology.nodes)} snek nodes, {len(topology.links)} links. GENERATED - do not edit:",
        f"#   snekbed compose {src} -o compose/{name}" + (f" --seed {seed}" if seed != 0 else ""),
        "# Use (docker compose v2, or docker-compose 1.29 with the same arguments):",
        "#   snekbed image build",
        f"#   docker compose -f compose/{name} up -d        # nodes only",
        f"#   docker compose -f compose/{name} --profile monitoring up -d   # + Prometheus on 127.0.0.1:9090",
        "#     (snekbed image prometheus builds its image; SNEKBED_PROMETHEUS_IMAGE=prom/prometheus:v2.53.3 pulls one)",
        "#   add --profile grafana for Grafana on 127.0.0.1:3000 (pulls grafana/grafana; docs/monitoring.md)",
        f"#   docker compose -f compose/{name} down -v",
        f"# Node admin APIs: control network {doc['networks']['control']['ipam']['config'][0]['subnet']} port "
        f"{NODE_ADMIN_PORT}, or `docker compose -f compose/{name} port NODE {NODE_ADMIN_PORT}` (127.0.0.1 only).",
        f"# Links are shaped in each node's userspace transport; node keys come from seed {seed} and the names.",
    ]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(header) + "\n" + body


def prometheus_config_path(topology: Topology) -> str:
    """Where the compose file's Prometheus configuration sits, relative to the compose file."""
    return f"prometheus/{topology.name}.yml"


def render_prometheus_config(topology: Topology) -> str:
    """The ``monitoring`` profile's scrape configuration: this file's nodes, found by their run label."""
    return prometheus_config(run_id=compose_run_id(topology), scrape_interval_s=COMPOSE_SCRAPE_INTERVAL_S)


def write_compose(topology: Topology, path: Path, *, seed: int | str = 0, pool: str = COMPOSE_POOL,
                  image: str = "snekbed-node:latest", source: str | None = None) -> Path:
    """Write :func:`render_compose` to ``path`` and its Prometheus configuration next to it (parents created).

    Raises ComposeError."""
    text = render_compose(topology, seed=seed, pool=pool, image=image, source=source)
    prom = path.parent / prometheus_config_path(topology)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        prom.parent.mkdir(parents=True, exist_ok=True)
        prom.write_text(render_prometheus_config(topology), encoding="utf-8")
    except OSError as exc:
        raise ComposeError(f"cannot write {path}: {exc}") from None
    return path
