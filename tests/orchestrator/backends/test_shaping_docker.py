"""Shaping applied to real containers, and the measured conformance check (issue 4, phase 2).

One rig for the whole module: three containers from the node image in a line,
``n1 -bluetooth- n2 -remote- n3``, each link its own internal bridge with a /29 from
10.213.240.0/20, real ``snekbed node`` processes peering over the link addresses with
the userspace part of the kernel-partial plan in their peer URIs. The networks carry
the same labels as the Docker backend's, so ``snekbed links ...`` works on the rig as
on a run. Everything is labelled ``snekbed.run=<id>`` and removed by that label.

Marked docker and slow: needs a Docker engine and root (nsenter) on the host.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contract.links import default_classes
from netem.plan import ShapingBackend
from orchestrator.tools.links_check import CheckOptions, check_endpoints
from orchestrator.backends.shaping import (
    Endpoint,
    apply_endpoints,
    clear_endpoint,
    endpoint_state,
    find_dev,
    load_record,
    node_peer_query,
)
from orchestrator.backends.shaping_runs import apply_run, reapply, record_path, show_run
from tests.conftest import docker_available, need, need_module

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LABEL_RUN = "snekbed.run"
RIG_POOL = ipaddress.IPv4Network("10.213.240.0/20")
LINE = [("n1", "n2", "bluetooth"), ("n2", "n3", "remote")]
CLASSES = default_classes()


# ---------------------------------------------------------------- the rig


@dataclass
class Rig:
    run_id: str
    client: Any
    backend: ShapingBackend
    containers: dict[str, Any] = field(default_factory=dict)  # name -> Container
    keys: dict[str, str] = field(default_factory=dict)  # name -> public key hex
    nets: dict[int, str] = field(default_factory=dict)  # link index -> network id
    ips: dict[tuple[int, str], str] = field(default_factory=dict)  # (link, node) -> address

    def endpoints(self) -> list[Endpoint]:
        out = []
        for index, (a, b, cls) in enumerate(LINE):
            for me, peer in ((a, b), (b, a)):
                pid = int(self.client.api.inspect_container(self.containers[me].id)["State"]["Pid"])
                out.append(Endpoint(str(index), cls, CLASSES[cls].shape, me, pid, self.ips[index, me], peer,
                                    self.ips[index, peer], self.containers[me].id))
        return out

    def endpoint(self, link: int, node: str) -> Endpoint:
        return next(e for e in self.endpoints() if e.link == str(link) and e.node == node)


def _free_subnets(client: Any, count: int) -> list[ipaddress.IPv4Network]:
    taken = [ipaddress.ip_network(c["Subnet"]) for n in client.api.networks()
             for c in ((n.get("IPAM") or {}).get("Config") or []) if "Subnet" in c and ":" not in c["Subnet"]]
    free = [s for s in RIG_POOL.subnets(new_prefix=29) if not any(s.overlaps(t) for t in taken)]
    return random.sample(free, count)


def build_rig(client: Any, image: str, run_id: str, backend: ShapingBackend = "kernel-partial") -> Rig:
    """Networks (labelled as the Docker backend labels them), then the three node containers."""
    from node.core.crypto import Identity

    api = client.api
    rig = Rig(run_id, client, backend)
    for index, ((a, b, cls), subnet) in enumerate(zip(LINE, _free_subnets(client, len(LINE)))):
        hosts = list(subnet.hosts())
        ipam = __import__("docker").types.IPAMConfig(
            pool_configs=[__import__("docker").types.IPAMPool(subnet=str(subnet), gateway=str(hosts[0]))])
        labels = {LABEL_RUN: run_id, "snekbed.role": "link", "snekbed.link": str(index), "snekbed.a": a,
                  "snekbed.b": b, "snekbed.class": cls}
        rig.nets[index] = api.create_network(f"snekbed-{run_id}-l{index}", driver="bridge", internal=True, ipam=ipam,
                                             labels=labels)["Id"]
        rig.ips[index, a], rig.ips[index, b] = str(hosts[1]), str(hosts[2])
    names = sorted({n for a, b, _ in LINE for n in (a, b)})
    for name in names:
        seed = bytes.fromhex(uuid.uuid5(uuid.NAMESPACE_URL, f"{run_id}/{name}").hex * 2)
        rig.keys[name] = Identity(seed).public_key.hex()
        args = ["node", "--listen", "0.0.0.0:7000", "--admin", "127.0.0.1:8080", "--metrics", "off",
                "--key-seed", seed.hex(), "--name", name, "--run-id", run_id]
        mine = [(i, a, b, cls) for i, (a, b, cls) in enumerate(LINE) if name in (a, b)]
        for index, a, b, cls in mine:
            query = node_peer_query(cls, CLASSES[cls].shape, backend)
            if name == a:  # the lexicographically smaller end dials, as the Docker backend does
                args += ["--peer", f"tcp://{rig.ips[index, b]}:7000?{query}"]
            else:
                args += ["--inbound", f"tcp://{rig.ips[index, a]}?{query}"]
        first = mine[0][0]
        networking = api.create_networking_config(
            {rig.nets[first]: api.create_endpoint_config(ipv4_address=rig.ips[first, name])})
        cid = api.create_container(image, command=args, name=f"snekbed-{run_id}-{name}",
                                   labels={LABEL_RUN: run_id, "snekbed.node": name},
                                   host_config=api.create_host_config(init=True), networking_config=networking)["Id"]
        for index, *_ in mine[1:]:
            api.connect_container_to_network(cid, rig.nets[index], ipv4_address=rig.ips[index, name])
        api.start(cid)
        rig.containers[name] = client.containers.get(cid)
    return rig


def destroy_rig(client: Any, run_id: str) -> None:
    """Containers first, then networks, by label only."""
    api = client.api
    for c in api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}):
        api.remove_container(c["Id"], force=True)
    for n in api.networks(filters={"label": f"{LABEL_RUN}={run_id}"}):
        api.remove_network(n["Id"])


def _image(client: Any) -> str:
    """The node image of the working tree (``build_node_image`` snapshots the sources first);
    ``SNEKBED_TEST_IMAGE`` names a ready one instead."""
    from orchestrator.backends.image import build_node_image

    if tag := os.environ.get("SNEKBED_TEST_IMAGE"):
        return tag
    return build_node_image(client).tag


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    ok, why = docker_available()
    need(ok, why)
    need(os.geteuid() == 0, "shaping from the host (nsenter into the containers) needs root")
    import docker

    client = docker.from_env()
    image = _image(client)
    run_id = f"tn{uuid.uuid4().hex[:6]}"
    try:
        yield build_rig(client, image, run_id)
    finally:
        destroy_rig(client, run_id)
        assert not client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


def _probe_summary() -> dict[str, Any]:
    from netem.probe import probe

    caps = probe()
    return {**caps.summary(), "ethtool": caps.ethtool}


# ---------------------------------------------------------------- apply / show / clear


def test_apply_shapes_both_ends_found_by_address_and_is_idempotent(rig: Rig) -> None:
    caps = _probe_summary()
    need(caps["backend"] == "kernel-partial" or caps["netem"], f"kernel-partial shaping is unavailable: {caps}")
    record = apply_endpoints(rig.endpoints(), "kernel-partial", run_id=rig.run_id, capabilities=caps)
    assert len(record.endpoints) == 4
    n2 = {e.link: e for e in record.endpoints if e.node == "n2"}
    assert n2["0"].dev != n2["1"].dev  # n2 has one interface per link, each shaped with its own class
    for e in record.endpoints:
        shape = CLASSES[e.link_class].shape
        qdiscs = subprocess.run(["nsenter", "-t", str(rig.endpoint(int(e.link), e.node).pid), "-n", "tc", "qdisc",
                                 "show", "dev", e.dev], capture_output=True, text=True, check=True).stdout
        assert f"rate {shape.rate_mbit * 1000:g}Kbit" in qdiscs or f"rate {shape.rate_mbit:g}Mbit" in qdiscs, qdiscs
        assert e.where["delay"] == "node userspace (peer URI)" and e.where["loss"].startswith("kernel: iptables")
        assert e.userspace == {"delay_ms": shape.delay_ms, "jitter_ms": shape.jitter_ms}
    again = apply_endpoints(rig.endpoints(), "kernel-partial", run_id=rig.run_id, capabilities=caps)
    for e in again.endpoints:
        assert len(e.skipped) == 1 and not e.removed  # the loss rule was already there: not added twice
    for ep in rig.endpoints():
        rules = subprocess.run(["nsenter", "-t", str(ep.pid), "-n", "iptables", "-w", "-S", "INPUT"],
                               capture_output=True, text=True, check=True).stdout
        assert rules.count(f"-s {ep.peer_ip}/32") == 1
        assert endpoint_state(ep, "kernel-partial").in_sync


def test_reconnect_renames_and_unshapes_then_reapply_fixes_it(rig: Rig, tmp_path: Path) -> None:
    eps = rig.endpoints()
    apply_run(rig.run_id, backend="kernel-partial", runs_dir=tmp_path, endpoints=eps)
    ep = rig.endpoint(0, "n2")  # n2 is on two links: link 0's interface comes back under a new name
    before = find_dev(ep.pid, ep.ip)
    net = rig.client.networks.get(rig.nets[0])
    net.disconnect(rig.containers["n2"])
    net.connect(rig.containers["n2"], ipv4_address=ep.ip)
    after = find_dev(ep.pid, ep.ip)
    assert after != before, "Docker reused the interface name: the rename case is not exercised"
    state = endpoint_state(ep, "kernel-partial")
    assert not state.in_sync and state.dev == after
    assert any("stale" in p for p in state.problems), state.problems  # the old rule names a device that is gone
    assert any(f"root qdisc on {after} is" in p for p in state.problems), state.problems  # and the qdisc went with it
    record = reapply(rig.run_id, runs_dir=tmp_path, endpoints=rig.endpoints())
    assert record.backend == "kernel-partial"
    (n2,) = [e for e in record.endpoints if e.node == "n2" and e.link == "0"]
    assert n2.dev == after and len(n2.removed) == 1 and f"-i {before}" in " ".join(n2.removed[0])
    _, states = show_run(rig.run_id, runs_dir=tmp_path, endpoints=rig.endpoints())
    assert all(s.in_sync for s in states), [s.problems for s in states]


# ---------------------------------------------------------------- the measured check


def test_links_check_measures_bluetooth_and_remote_within_the_issue_tolerances(rig: Rig, tmp_path: Path) -> None:
    """The issue's acceptance: RTT within 10 %, throughput within 10 %, loss within 1 pp, on kernel-partial."""
    apply_run(rig.run_id, backend="kernel-partial", runs_dir=tmp_path, endpoints=rig.endpoints())

    record = load_record(record_path(rig.run_id, tmp_path))
    results = check_endpoints(rig.endpoints(), record=record, client=rig.client, keys=rig.keys,
                              options=CheckOptions(rtt_samples=150, loss_probes=5000, transfer_s=3.0,
                                                      rate_attempts=5))
    report = [r.to_json() for r in results]
    for r in report:  # shown with -s
        print(f"link {r['link']} {r['class']}: pass={r['pass']} asked={r['asked']} got={r['got']} "
              f"conditions={r['conditions']} fallback={r['fallback']!r}")
    assert [(r["link"], r["class"]) for r in report] == [("0", "bluetooth"), ("1", "remote")]
    for r in report:
        # A loaded host makes the nodes' delay timers late (RTT high) and stalls transfers (rate low):
        # the check measures such a reading again (rate_attempts) and judges the best; every attempt
        # and the host load are in got/conditions, shown with any failure. Never an expected failure.
        assert len(r["got"]["rtt_attempts_ms"]) <= 5, r["got"]
        assert r["backend"] == "kernel-partial"
        assert r["probe"]["netem"] is False or r["fallback"] is None
        if not r["probe"]["netem"]:
            assert "netem unavailable" in r["fallback"] and "fallback kernel-partial ran" in r["fallback"]
        assert r["tolerance"] == {"rtt_pct": 10.0, "rtt_floor_ms": 1.0, "rate_pct": 10.0, "loss_pp": 1.0}
        assert any(v.startswith("node userspace") for v in r["shaping"].values())
        for metric in ("rtt", "loss", "rate"):
            assert r["checks"][metric]["pass"], (r["link"], metric, r["checks"][metric], r["got"], r["conditions"])
        assert r["pass"] is True
        shape = CLASSES[r["class"]].shape
        assert r["asked"]["rtt_ms"] >= 2 * shape.delay_ms  # the delay is the node's: plain ICMP would show ~0.2 ms
        assert r["got"]["rtt_samples"] >= 140
        a, b, _ = LINE[int(r["link"])]
        assert set(r["got"]["loss_pct"]) == set(r["got"]["rate_mbit"]) == {f"{a}->{b}", f"{b}->{a}"}


# ---------------------------------------------------------------- the CLI on the rig as a run


def test_cli_show_clear_on_the_rig_as_a_run(rig: Rig, tmp_path: Path) -> None:
    need_module("orchestrator.backends.docker", "snekbed links on a run needs the Docker backend")
    from orchestrator.cli import main

    runs = tmp_path / "runs"
    (runs / rig.run_id).mkdir(parents=True)
    (runs / rig.run_id / "meta.json").write_text(json.dumps({"backend": "docker", "nodes": rig.keys,
                                                             "shaping": {"backend": "kernel-partial"}}))
    cli = CliRunner()
    applied = cli.invoke(main, ["links", "apply", "--run-id", rig.run_id, "--runs-dir", str(runs), "--json"])
    assert applied.exit_code == 0, applied.output
    assert {(e["link"], e["node"]) for e in json.loads(applied.stdout)["endpoints"]} == {
        ("0", "n1"), ("0", "n2"), ("1", "n2"), ("1", "n3")}
    shown = cli.invoke(main, ["links", "show", "--run-id", rig.run_id, "--runs-dir", str(runs)])
    assert shown.exit_code == 0, shown.output
    assert "in sync" in shown.stdout and "kernel-partial" in shown.stdout
    checked = cli.invoke(main, ["links", "check", "--run-id", rig.run_id, "--runs-dir", str(runs), "--json",
                                "--link", "1", "--metric", "loss", "--loss-probes", "2000"])
    lines = [json.loads(x) for x in checked.stdout.splitlines()]
    assert len(lines) == 1 and lines[0]["link"] == "1" and set(lines[0]["checks"]) == {"loss"}, checked.output
    assert {"link", "class", "backend", "asked", "got", "pass"} <= set(lines[0])
    cleared = cli.invoke(main, ["links", "clear", "--run-id", rig.run_id, "--runs-dir", str(runs), "--json"])
    assert cleared.exit_code == 0, cleared.output
    for ep in rig.endpoints():
        state = endpoint_state(ep, "userspace")  # nothing of ours may be left
        assert state.in_sync and not state.loss_rules, state
    assert clear_endpoint(rig.endpoint(0, "n1")) == []  # clearing again finds nothing to do
