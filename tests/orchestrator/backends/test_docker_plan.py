"""The Docker backend's pure parts (no engine needed): address plans, node command lines,
the re-convergence bound, the run registry, and `up` refusing a bad topology before Docker."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import networkx as nx
import pytest
from click.testing import CliRunner

from contract.links import LinkShape
from node.core.crypto import Identity, derive_seed
from orchestrator import cli
from orchestrator.sessions import lifecycle
from orchestrator.backends.docker_plan import NODE_EVENTS_DIR, peer_params, plan_launches
from orchestrator.backends.docker_net import (
    AddressPoolExhausted,
    DockerBackendError,
    host_routes,
    plan_addresses,
)
from orchestrator.backends.docker_observe import reconvergence_bound_s, views_from_states
from orchestrator.backends.docker_session import links_not_made
from orchestrator.backends.swarm import SwarmBackend, SwarmError
from orchestrator.model.generators import line, ring
from orchestrator.model.runs import RunError, RunNotFound, create_run, latest_run_id, open_run
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from contract.dataset import ACTION_FIELDS, PING_FIELDS, validate_record

REPO = Path(__file__).resolve().parents[3]
MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"

# ---------------------------------------------------------------- address plans


def test_plan_carves_aligned_disjoint_subnets_inside_one_block() -> None:
    topo = load_topology(MESH)
    plan = plan_addresses(topo, "r1", pool="10.213.0.0/16")
    block = ipaddress.IPv4Network(plan.block)
    nets = [n.network for n in plan.networks()]
    assert nets[0].prefixlen == 26 and [n.prefixlen for n in nets[1:]] == [29] * 17
    for i, a in enumerate(nets):
        assert a.subnet_of(block)
        for b in nets[i + 1:]:
            assert not a.overlaps(b)
    # every link's /29: .1 gateway, a = .2, b = .3; the smaller name dials
    for ln, spec in zip(plan.links, topo.links):
        hosts = [str(h) for h in ln.net.network.hosts()]
        assert (ln.net.gateway, ln.ip_a, ln.ip_b) == (hosts[0], hosts[1], hosts[2])
        assert (ln.a, ln.b, ln.link_class) == (spec.a, spec.b, spec.link_class)
        assert ln.dialer == min(spec.a, spec.b)
    assert sorted(plan.control.members) == topo.node_names
    assert len(set(plan.control.members.values())) == 12


def test_plan_skips_taken_subnets_and_reports_exhaustion() -> None:
    topo = line(5)
    first = plan_addresses(topo, "a", pool="10.213.0.0/16")
    second = plan_addresses(topo, "b", pool="10.213.0.0/16", taken=[ipaddress.IPv4Network(first.block)])
    assert not ipaddress.IPv4Network(first.block).overlaps(ipaddress.IPv4Network(second.block))
    taken = [ipaddress.IPv4Network("10.213.0.0/25"), ipaddress.IPv4Network("10.213.0.192/28")]
    with pytest.raises(AddressPoolExhausted, match=r"10\.213\.0\.0/24: no free /25 block"):
        plan_addresses(topo, "c", pool="10.213.0.0/24", taken=taken)
    with pytest.raises(DockerBackendError, match="--address-pool 'nonsense'"):
        plan_addresses(topo, "d", pool="nonsense")


def test_plan_sizes_the_control_network_for_large_runs() -> None:
    plan = plan_addresses(ring(300), "big", pool="10.213.0.0/16")
    assert plan.control.network.prefixlen == 23  # 300 nodes + network, gateway, broadcast
    assert len(plan.links) == 300 and all(ln.net.network.prefixlen == 29 for ln in plan.links)


def test_lan_segment_only_for_multicast_nodes() -> None:
    topo = Topology.from_data({"name": "m", "nodes": [{"name": "a", "multicast": True}, {"name": "b", "multicast": True},
                                                      "c"], "links": [["a", "c"]]})
    plan = plan_addresses(topo, "m1")
    assert plan.lan is not None and sorted(plan.lan.members) == ["a", "b"]
    assert plan_addresses(line(3), "m2").lan is None


def test_host_routes_parses_proc_net_route(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
                     "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
                     "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")
    assert host_routes(str(table)) == [ipaddress.IPv4Network("172.17.0.0/16")]
    assert host_routes(str(tmp_path / "missing")) == []


# ---------------------------------------------------------------- node command lines


def test_peer_params_carry_class_and_userspace_part() -> None:
    assert peer_params("lan", LinkShape()) == "class=lan"
    assert peer_params("bluetooth", LinkShape(delay_ms=30, jitter_ms=5)) == "class=bluetooth&delay_ms=30&jitter_ms=5"
    full = LinkShape(delay_ms=25, jitter_ms=3, loss_pct=0.2, rate_mbit=20, queue_limit_pkts=100)
    assert peer_params("remote", full) == ("class=remote&delay_ms=25&jitter_ms=3&loss_pct=0.2&rate_mbit=20"
                                           "&queue_limit_pkts=100")
    with pytest.raises(DockerBackendError, match="duplicate_pct"):
        peer_params("lan", LinkShape(duplicate_pct=1))


def _args_of(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_launches_dial_from_the_smaller_name_with_kernel_partial_leftovers() -> None:
    topo = load_topology(MESH)
    plan = plan_addresses(topo, "r2")
    launches = plan_launches(topo, plan, run_id="r2", seed=7, shaping_backend="kernel-partial")
    n02 = launches["n02"].args
    assert n02[0] == "node" and "--key-seed" in n02
    assert _args_of(n02, "--events") == [f"{NODE_EVENTS_DIR}/n02.jsonl"]
    # n02-n12 is remote with delay 40 ms: n02 dials n12 and keeps only delay/jitter for its transport
    link = next(ln for ln in plan.links if {ln.a, ln.b} == {"n02", "n12"})
    assert f"tcp://{link.ip_b}:7000?class=remote&delay_ms=40&jitter_ms=3" in _args_of(n02, "--peer")
    assert f"tcp://{link.ip_a}?class=remote&delay_ms=40&jitter_ms=3" in _args_of(launches["n12"].args, "--inbound")
    # every link appears once as a --peer and once as an --inbound
    peers = sum(len(_args_of(la.args, "--peer")) for la in launches.values())
    inbound = sum(len(_args_of(la.args, "--inbound")) for la in launches.values())
    assert peers == inbound == len(topo.links)


def test_swarm_launches_dial_aliases_and_accept_by_subnet() -> None:
    """The swarm allocates addresses: the dialer dials the listener's alias on the link's overlay, the
    listener classifies by the link's subnet, and the whole shape stays in userspace; the same nodes and
    keys as the Docker backend."""
    topo = load_topology(MESH)
    plan = plan_addresses(topo, "r3")
    launches = plan_launches(topo, plan, run_id="r3", seed=7, shaping_backend="userspace", by_name=True)
    link = next(ln for ln in plan.links if {ln.a, ln.b} == {"n02", "n12"})
    query = "class=remote&delay_ms=40&jitter_ms=3&loss_pct=0.2&rate_mbit=10&queue_limit_pkts=100"
    assert f"tcp://l{link.index}-n12:7000?{query}" in _args_of(launches["n02"].args, "--peer")
    assert f"tcp://{link.net.subnet}?{query}" in _args_of(launches["n12"].args, "--inbound")
    docker = plan_launches(topo, plan, run_id="r3", seed=7, shaping_backend="userspace")
    assert {n: la.key for n, la in launches.items()} == {n: la.key for n, la in docker.items()}
    assert not any(ip in " ".join(la.args) for la in launches.values() for ln in plan.links
                   for ip in (f"{ln.ip_a}:", f"{ln.ip_b}:"))  # no planned address is dialled


def test_swarm_refuses_host_and_multicast_nodes() -> None:
    for extra, said in (({"host": True}, "host nodes"), ({"multicast": True}, "multicast nodes")):
        doc = {"name": "t", "nodes": [{"name": "a", **extra}, "b"], "links": [{"a": "a", "b": "b"}]}
        topo = Topology.from_data(doc)
        with pytest.raises(SwarmError, match=said):
            SwarmBackend.check_topology(topo)


def test_launch_keys_match_the_inproc_derivation() -> None:
    topo = load_topology(MESH)
    launches = plan_launches(topo, plan_addresses(topo, "r3"), run_id="r3", seed=0, shaping_backend="userspace")
    assert launches["n01"].key == Identity(bytes.fromhex("01" * 32)).public_key.hex()
    assert launches["n05"].key == Identity(derive_seed(0, "n05")).public_key.hex()
    userspace = launches["n04"].args
    assert any("loss_pct=2" in uri for uri in _args_of(userspace, "--peer") + _args_of(userspace, "--inbound"))


# ---------------------------------------------------------------- observation helpers


def test_reconvergence_bound_grows_with_the_diameter() -> None:
    short, long = reconvergence_bound_s(nx.path_graph(3)), reconvergence_bound_s(nx.path_graph(12))
    assert 30 < short < long < 60
    assert long - short == pytest.approx(9 * 1.25, abs=0.11)


def test_views_skip_malformed_states() -> None:
    k = "ab" * 32
    views = views_from_states({"a": {"public_key": k, "root": {"key": k, "sequence": 1}, "descending": None},
                               "b": None, "c": {"public_key": "zz"}})
    assert list(views) == ["a"] and views["a"].descending is None


# ---------------------------------------------------------------- run registry


def test_runs_registry_latest_and_contract_lines(tmp_path: Path) -> None:
    with pytest.raises(RunNotFound, match="no runs in"):
        latest_run_id(tmp_path)
    run = create_run(tmp_path, "first", topology={"name": "x", "nodes": [], "links": []})
    create_run(tmp_path, "second", topology={"name": "x", "nodes": [], "links": []})
    assert latest_run_id(tmp_path) == "second" and open_run(tmp_path).run_id == "second"
    assert open_run(tmp_path, "first").path == run.path
    with pytest.raises(RunError, match="already exists"):
        create_run(tmp_path, "first", topology={})
    with pytest.raises(RunError, match="--run-id 'Bad Id'"):
        open_run(tmp_path, "Bad Id")
    with pytest.raises(RunNotFound, match="no run 'third'"):
        open_run(tmp_path, "third")
    line_ = json.dumps(run.action("kill_root", "n05", {"key": "ab"}))
    assert validate_record(line_, ACTION_FIELDS, "first") is None
    ping = run.ping(sender="n01", sender_key="ab" * 32, target="n03", target_key="cd" * 32, mode="tree",
                    sent_mono_s=12.5, received=True, rtt_ms=1.5, hops=3, graph=nx.path_graph(["n01", "n02", "n03"]),
                    link_class={frozenset(("n01", "n02")): "lan", frozenset(("n02", "n03")): "remote"})
    assert validate_record(json.dumps(ping), PING_FIELDS, "first") is None
    assert (ping["shortest_links"], ping["link_classes"]) == (2, ["lan", "remote"])
    run.update_meta(observer={"a": 1})
    assert run.update_meta(observer={"b": 2})["observer"] == {"a": 1, "b": 2}


# ---------------------------------------------------------------- `up` validates before Docker


def test_up_rejects_a_bad_topology_before_touching_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: [a, b]\nlinks:\n  - {a: a, b: zz}\n")

    def no_docker(*_: object, **__: object) -> None:
        raise AssertionError("up touched Docker before validating the topology")

    monkeypatch.setattr(lifecycle, "connect", no_docker)
    monkeypatch.setattr("docker.from_env", no_docker)
    result = CliRunner().invoke(cli.main, ["up", str(bad), "--runs-dir", str(tmp_path / "runs"), "--run-id", "never"])
    assert result.exit_code == 2, result.output
    assert f"{bad}:4: links[0].b: unknown node 'zz'" in result.output
    assert not (tmp_path / "runs").exists()


def test_up_inproc_records_a_run_with_the_same_keys_as_docker(tmp_path: Path) -> None:
    runs = ["--runs-dir", str(tmp_path)]
    result = CliRunner().invoke(cli.main, ["up", str(MESH), "--backend", "inproc", "--run-id", "ip1", "--json", *runs])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["run_id"] == "ip1" and out["snake_converged_s"] is not None
    meta = json.loads((tmp_path / "ip1" / "meta.json").read_text())
    topo = load_topology(MESH)
    launches = plan_launches(topo, plan_addresses(topo, "ip1"), run_id="ip1", seed=0, shaping_backend="userspace")
    assert meta["backend"] == "inproc" and meta["nodes"] == {n: la.key for n, la in launches.items()}
    status = CliRunner().invoke(cli.main, ["status", "--json", *runs])  # the most recent run
    assert status.exit_code == 0 and json.loads(status.output)["backend"] == "inproc"
    ping = CliRunner().invoke(cli.main, ["ping", "n01", "n02", *runs])
    assert ping.exit_code == 2 and "used the 'inproc' backend" in ping.output


def test_links_not_made_are_read_from_the_nodes_state() -> None:
    """Docker reports the links a full router refused as the nodes' /state shows them (who lost a race for
    the 253 ports depends on connection order, so it is observed, not predicted)."""
    names = ["hub", *(f"s{i:03d}" for i in range(255))]
    topo = Topology.from_data({"name": "star", "nodes": names, "links": [{"a": "hub", "b": n} for n in names[1:]]})
    keys = {n: f"{i:064x}" for i, n in enumerate(names)}
    made = names[1:254]  # the hub took the first 253
    states = {"hub": {"peers": [{"key": keys[n]} for n in made]}}
    states.update({n: {"peers": [{"key": keys["hub"]}] if n in made else []} for n in names[1:]})
    states["s254"] = None  # did not answer: nothing is known of its link
    got = links_not_made(topo, keys, states)
    assert got == [{"a": "hub", "b": "s253", "class": "lan", "reason": "ports_full", "nodes": ["hub"]}]
    states["hub"]["peers"] = states["hub"]["peers"][:10]
    assert {r["reason"] for r in links_not_made(topo, keys, states)} == {"not_connected"}
