"""Host nodes (``host: true``) without an engine: topology checks, the address plan, both ends' command lines,
the command a user is shown, and the writers that refuse them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from node.core.crypto import Identity, derive_seed
from orchestrator.backends.docker_plan import plan_host_launches, plan_launches
from orchestrator.backends.docker_net import plan_addresses
from orchestrator.backends.docker_session import host_node_text
from orchestrator.tools.compose import ComposeError, compose_document
from orchestrator.model.topology import TopologyError
from orchestrator.model.topology_loaders import load_topology

REPO = Path(__file__).resolve().parents[3]
LINE_HOST = REPO / "compose" / "topologies" / "line-host.yaml"


def _load_text(tmp_path: Path, text: str) -> object:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return load_topology(path)


@pytest.mark.parametrize(("text", "where", "says"), [
    ("nodes:\n  - a\n  - {name: b, admin: '127.0.0.1:9000'}\nlinks: [[a, b]]\n", ":3: nodes[1].admin",
     "'admin' is for host nodes"),
    ("nodes:\n  - a\n  - {name: h, host: true, admin: localhost}\nlinks: [[a, h]]\n", ":3: nodes[1].admin",
     "expected HOST:PORT"),
    ("nodes:\n  - {name: g, host: true}\n  - {name: h, host: true}\nlinks: [[g, h]]\n", ":3: nodes[1].listen",
     "host node 'g' dials it"),
    ("nodes:\n  - a\n  - {name: h, host: true, multicast: true}\nlinks: [[a, h]]\n", ":3: nodes[1].multicast",
     "cannot join"),
])
def test_bad_host_node_fields_name_file_line_and_field(tmp_path: Path, text: str, where: str, says: str) -> None:
    with pytest.raises(TopologyError) as err:
        _load_text(tmp_path, text)
    assert f"t.yaml{where}: " in str(err.value) and says in str(err.value), str(err.value)


def test_host_node_gets_no_container_address_and_dials_its_container_peer(tmp_path: Path) -> None:
    topo = load_topology(LINE_HOST)
    plan = plan_addresses(topo, "hp1")
    assert plan.host_nodes == ("h",) and set(plan.control.members) == {"n01", "n02"}
    launches = plan_launches(topo, plan, run_id="hp1", seed=3, shaping_backend="kernel-partial")
    assert set(launches) == {"n01", "n02"}
    link = plan.links[1]  # n02 - h
    inbound = [a for a in launches["n02"].args if a.startswith(f"tcp://{link.net.gateway}?")]
    # the whole shape, in userspace
    assert inbound == [f"tcp://{link.net.gateway}?class=lan&delay_ms=0.1&rate_mbit=1000"]
    hosts = plan_host_launches(topo, plan, run_id="hp1", seed=3, events_dir=tmp_path / "events",
                               admin={"h": "127.0.0.1:8123"})
    h = hosts["h"]
    assert h.key == Identity(derive_seed(3, "h")).public_key.hex()
    args = h.args
    assert args[:5] == ["node", "--listen", "off", "--admin", "127.0.0.1:8123"]
    assert args[args.index("--key-seed") + 1] == derive_seed(3, "h").hex()
    assert args[args.index("--events") + 1] == str((tmp_path / "events" / "h.jsonl").absolute())
    assert args[args.index("--peer") + 1] == f"tcp://{link.ip_a}:7000?class=lan&delay_ms=0.1&rate_mbit=1000"
    text = host_node_text("hp1", hosts, 60)
    command = [line for line in text.splitlines() if line.startswith("snekbed node ")]
    assert len(command) == 1 and shlex.split(command[0]) == ["snekbed", *args]


def test_two_linked_host_nodes_the_smaller_dials_the_others_listen(tmp_path: Path) -> None:
    topo = _load_text(tmp_path, "nodes:\n  - a\n  - {name: g, host: true}\n"
                                "  - {name: h, host: true, listen: '192.0.2.7:7001'}\nlinks: [[a, g], [g, h]]\n")
    plan = plan_addresses(topo, "hp2")  # type: ignore[arg-type]
    hosts = plan_host_launches(topo, plan, run_id="hp2", seed=0, events_dir=tmp_path,  # type: ignore[arg-type]
                               admin={"g": "127.0.0.1:1", "h": "127.0.0.1:2"})
    peers = [hosts["g"].args[i + 1] for i, a in enumerate(hosts["g"].args) if a == "--peer"]
    assert peers == [f"tcp://{plan.links[0].ip_a}:7000?class=lan&delay_ms=0.1&rate_mbit=1000",
                     "tcp://192.0.2.7:7001?class=lan&delay_ms=0.1&rate_mbit=1000"]
    assert "--peer" not in hosts["h"].args and hosts["h"].args[2] == "192.0.2.7:7001"


def test_compose_refuses_host_nodes() -> None:
    with pytest.raises(ComposeError, match="host nodes"):
        compose_document(load_topology(LINE_HOST))
