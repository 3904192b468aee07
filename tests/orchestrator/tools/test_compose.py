"""Compose files: generated and committed, accepted by docker-compose 1.29 (and v2 when present),
and the 5-node line converging under the machine's docker-compose. (The monitoring profile, for real:
tests/orchestrator/tools/test_monitoring_live.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.tools.compose import (
    ComposeError,
    compose_document,
    compose_run_id,
    prometheus_config_path,
    render_compose,
    render_prometheus_config,
)
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.conftest import docker_available, need
from tests.orchestrator.docker_helpers import build_test_image

REPO = Path(__file__).resolve().parents[3]
FILES = ("line-5", "ring-8", "mesh-12")


def _compose_v2() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


# ---------------------------------------------------------------- the files (no engine)


@pytest.mark.parametrize("name", FILES)
def test_committed_compose_files_match_the_generator(name: str) -> None:
    topo = load_topology(REPO / "compose" / "topologies" / f"{name}.yaml")
    expected = render_compose(topo, source=f"compose/topologies/{name}.yaml")
    assert (REPO / "compose" / f"{name}.yml").read_text() == expected, (
        f"compose/{name}.yml is stale: snekbed compose compose/topologies/{name}.yaml -o compose/{name}.yml")
    assert (REPO / "compose" / prometheus_config_path(topo)).read_text() == render_prometheus_config(topo), (
        f"compose/{prometheus_config_path(topo)} is stale: snekbed compose compose/topologies/{name}.yaml "
        f"-o compose/{name}.yml")


@pytest.mark.parametrize("name", FILES)
def test_compose_document_is_v1_compatible_and_complete(name: str) -> None:
    topo = load_topology(REPO / "compose" / "topologies" / f"{name}.yaml")
    doc = yaml.safe_load((REPO / "compose" / f"{name}.yml").read_text())
    assert set(doc) == {"services", "networks", "volumes"}  # no top-level name: or version:
    assert "start_interval" not in json.dumps(doc)
    assert doc["networks"]["control"].get("internal") is None
    links = [n for n in doc["networks"] if n != "control"]
    assert len(links) == len(topo.links)
    for net in links:
        assert doc["networks"][net]["internal"] is True
        assert doc["networks"][net]["ipam"]["config"][0]["subnet"].endswith("/29")
    peers = inbound = 0
    for spec in topo.nodes:
        svc = doc["services"][spec.name]
        assert svc["init"] is True and svc["image"] == "snekbed-node:latest"
        assert svc["labels"]["snekbed.run"] == compose_run_id(topo) and svc["labels"]["snekbed.node"] == spec.name
        peers += svc["command"].count("--peer")
        inbound += svc["command"].count("--inbound")
    assert peers == inbound == len(topo.links)
    for svc, profile in (("prometheus", "monitoring"), ("grafana", "grafana")):
        assert doc["services"][svc]["profiles"] == [profile]
        assert "network_mode" not in doc["services"][svc]  # nothing on the host network
        assert all(p.startswith("127.0.0.1:") for p in doc["services"][svc]["ports"])
        for volume in doc["services"][svc]["volumes"]:
            src = volume.split(":")[0]
            if src.startswith("."):
                assert (REPO / "compose" / src).resolve().exists(), volume


def test_mesh_links_carry_their_full_shape_in_userspace() -> None:
    topo = load_topology(REPO / "compose" / "topologies" / "mesh-12.yaml")
    cmd = compose_document(topo)["services"]["n02"]["command"]
    remote = [a for a in cmd if "class=remote" in a]
    assert any("delay_ms=40" in a and "rate_mbit=10" in a and "loss_pct=0.2" in a for a in remote), remote
    assert any("class=bluetooth" in a and "loss_pct=2" in a and "queue_limit_pkts=20" in a for a in cmd)


def test_compose_refuses_what_it_cannot_express() -> None:
    topo = Topology.from_data({"name": "mc", "nodes": [{"name": "a", "multicast": True}, "b"], "links": [["a", "b"]]})
    with pytest.raises(ComposeError, match="multicast nodes are not supported"):
        compose_document(topo)
    with pytest.raises(ComposeError, match="--subnet-pool 'x'"):
        compose_document(topo, pool="x")


def _installed_composes() -> list[list[str]]:
    """Every Compose implementation on this machine: v1 (``docker-compose``, what Debian bookworm ships)
    and v2 (the ``docker compose`` plugin, which bookworm does not package)."""
    found = [["docker-compose"]] if shutil.which("docker-compose") is not None else []
    return found + ([["docker", "compose"]] if _compose_v2() else [])


def test_compose_config_accepts_every_file_with_every_installed_compose() -> None:
    composes = _installed_composes()
    need(bool(composes), "neither docker-compose (v1) nor the docker compose v2 plugin is installed")
    checked = 0
    for base in composes:
        for name in FILES:
            for profile in ([], ["--profile", "monitoring"]):
                done = subprocess.run([*base, "-f", str(REPO / "compose" / f"{name}.yml"), *profile, "config", "-q"],
                                      capture_output=True, text=True)
                assert done.returncode == 0, (base, name, profile, done.stderr)
                checked += 1
    assert checked == len(composes) * len(FILES) * 2


# ---------------------------------------------------------------- the line, for real


@pytest.fixture(scope="module")
def line5_project() -> Iterator[tuple[str, dict[str, str]]]:
    ok, why = docker_available()
    need(ok, why)
    need(shutil.which("docker-compose") is not None, "docker-compose (v1) is not installed")
    import docker

    client = docker.from_env()
    build_test_image(client)  # tags snekbed-node:latest, which the committed files name
    project = f"snektest{uuid.uuid4().hex[:8]}"
    base = ["docker-compose", "-f", str(REPO / "compose" / "line-5.yml"), "-p", project]
    try:
        done = subprocess.run([*base, "up", "-d"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        endpoints: dict[str, str] = {}
        for c in client.api.containers(filters={"label": f"com.docker.compose.project={project}"}):
            port = next(p for p in c["Ports"] if p.get("PrivatePort") == 8080 and p.get("PublicPort"))
            endpoints[c["Labels"]["snekbed.node"]] = f"127.0.0.1:{port['PublicPort']}"  # the published admin port
        yield project, endpoints
    finally:
        subprocess.run([*base, "down", "-v", "-t", "5"], capture_output=True, timeout=300)
        left = client.api.containers(all=True, filters={"label": f"com.docker.compose.project={project}"})
        nets = client.api.networks(filters={"label": f"com.docker.compose.project={project}"})
        assert not left and not nets, (left, nets)


@pytest.mark.docker
def test_docker_compose_line5_converges_and_pings(line5_project: tuple[str, dict[str, str]]) -> None:
    from orchestrator.backends.docker_observe import AdminClient, wait_converged

    _, endpoints = line5_project
    assert sorted(endpoints) == ["n01", "n02", "n03", "n04", "n05"]
    topo = load_topology(REPO / "compose" / "topologies" / "line-5.yaml")
    graph = topo.simple_graph()
    with AdminClient(endpoints) as admin:
        conv = wait_converged(admin, lambda: graph, t0=time.monotonic(), timeout_s=90)
        assert conv.converged, conv.summary()
        target = admin.state("n05")["public_key"]
        for mode in ("snek", "tree"):
            res = admin.ping("n01", target, mode=mode, count=2)
            assert res["received"] == 2 and res["hops"] == [5, 5], res
