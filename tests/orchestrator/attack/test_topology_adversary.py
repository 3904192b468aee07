"""A topology node's ``adversary:`` (docs/topology.md, docs/attacks.md): the spec of ``snekbed node --adversary``,
read by the flag's own parsers (orchestrator.model.adversary_spec); a bad one is a load error naming file, line
and field with the flag's message (exit 2); in process the node starts with it and the checker judges the honest
view from the first step; on Docker the node's command line carries ``--adversary SPEC`` (no Docker needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from node.config import ConfigError, parse_attack
from node.core.crypto import Identity
from node.core.variants import VariantSpec
from orchestrator import cli
from orchestrator.backends.docker_net import DockerBackendError, plan_addresses
from orchestrator.backends.docker_plan import plan_host_launches, plan_launches
from orchestrator.backends.inproc import InprocNetwork
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import parse_scenario_yaml
from orchestrator.model.adversary_spec import adversaries_of, parse_node_adversary, reference_refusal
from orchestrator.model.generators import ring
from orchestrator.sessions.sim import config_from_topology, run_sim_sync
from orchestrator.model.topology import NodeSpec, Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology, parse_yaml

KEY = "ab" * 32
TOPO = f"""\
name: adv
nodes:
  - a
  - name: b
    adversary: greyhole:forward=0.5
  - {{name: c, adversary: "drop:bootstrap=100,traffic=50@{KEY}"}}
  - {{name: d, variant: pinecone, adversary: "drop:all=10"}}
links: [[a, b], [b, c], [c, d], [d, a]]
"""


def _with(name: str, spec: str, topology: Topology) -> Topology:
    doc = topology.to_dict()
    doc["nodes"] = [{**n, "adversary": spec} if n["name"] == name else n for n in doc["nodes"]]
    return Topology.from_data(doc)


# ---------------------------------------------------------------- the field: parsing and errors


def test_the_field_holds_the_flags_spec_and_round_trips() -> None:
    topo = parse_yaml(TOPO, file="adv.yaml")
    assert [n.adversary for n in topo.nodes] == [None, "greyhole:forward=0.5", f"drop:bootstrap=100,traffic=50@{KEY}",
                                                 "drop:all=10"]  # fmt: skip
    assert Topology.from_data(json.loads(topo.to_json())).to_dict() == topo.to_dict() == parse_yaml(topo.to_yaml()).to_dict()
    assert topo.to_record()["nodes"][1] == {"name": "b", "adversary": "greyhole:forward=0.5"}  # topology.json
    advs = adversaries_of(topo.nodes)
    assert list(advs) == ["b", "c", "d"]
    assert advs["b"].attack == ("greyhole", {"forward": "0.5"}) == parse_attack("greyhole:forward=0.5")
    assert advs["c"].drop == ({"bootstrap": 100.0, "traffic": 50.0}, bytes.fromhex(KEY)) and advs["c"].attack is None
    # the action a run records for it, as a step's (strategy and typed parameters, or drop rates)
    assert advs["b"].detail() == {"strategy": "greyhole", "forward": 0.5, "spec": "greyhole:forward=0.5",
                                  "from": "topology"}  # fmt: skip
    assert advs["c"].detail()["drop"] == {"bootstrap": 100.0, "traffic": 50.0}
    assert advs["c"].detail()["peer_key"] == KEY


@pytest.mark.parametrize("spec", ["greyhole:forward=2", "drop:bogus=1", "bootstrap", "forge:kinds=nonsense",
                                  "sybil", "drop:traffic=50@123", "root_takeover:mode=sometimes"])
def test_a_bad_spec_names_file_line_and_field_with_the_flags_message(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConfigError) as flag:  # what `snekbed node --adversary SPEC` says (node.config)
        parse_node_adversary(spec)
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nnodes:\n  - a\n  - b\n  - name: c\n    multicast: false\n    adversary: '{spec}'\n"
                    "links: [[a, b], [b, c]]\n")  # fmt: skip
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    err = info.value
    assert (err.file, err.line, err.field) == (str(path), 7, "nodes[2].adversary"), str(err)
    assert err.message == str(flag.value) and str(err) == f"{path}:7: nodes[2].adversary: {flag.value}"


def test_a_reference_node_takes_drop_only_and_refuses_the_rest_as_it_does(tmp_path: Path) -> None:
    path = tmp_path / "ref.yaml"
    path.write_text("name: ref\nnodes:\n  - a\n  - {name: r, variant: pinecone, adversary: 'greyhole:forward=0.3'}\n"
                    "links: [[a, r]]\n")  # fmt: skip
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert (info.value.line, info.value.field) == (4, "nodes[1].adversary")
    # the reference node's own words (node/pinecone/admin.go refusedStrategy), behind the flag's
    assert info.value.message == ("--adversary 'greyhole:forward=0.3': greyhole: the reference node has only the drop "
                                  "strategy (the simulator's GeneralAdversary); greyhole, sybil, root_takeover, "
                                  "bootstrap_flood, announcement_flood, replay, forge and none are snekbed node's "
                                  "(docs/attacks.md)")  # fmt: skip
    assert reference_refusal("drop:bootstrap=100") is None and reference_refusal("traffic=5") is None
    # a `snekbed chaos` run on it stops there: exit 2, the message with file, line and field, nothing made
    res = CliRunner().invoke(cli.main, ["chaos", "demo", "--topology", str(path), "--record", str(tmp_path / "run")])
    assert res.exit_code == 2 and f"{path}:4: nodes[1].adversary: --adversary 'greyhole" in res.output, res.output
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- Docker: the plan carries the flag


def test_the_docker_plan_gives_the_node_its_adversary_flag() -> None:
    topo = parse_yaml(TOPO)
    launches = plan_launches(topo, plan_addresses(topo, "r1", pool="10.213.0.0/16"), run_id="r1", seed=3,
                             shaping_backend="userspace")  # fmt: skip
    args = {n: la.args for n, la in launches.items()}
    assert "--adversary" not in args["a"]
    for name, spec in (("b", "greyhole:forward=0.5"), ("c", f"drop:bootstrap=100,traffic=50@{KEY}")):
        i = args[name].index("--adversary")
        assert args[name][0] == "node" and args[name][i + 1] == spec and args[name].count("--adversary") == 1
    # the reference node takes a drop spec with the same flag (its program is pinecone-node: no `node` command)
    assert launches["d"].program == "pinecone-node" and args["d"][args["d"].index("--adversary") + 1] == "drop:all=10"
    # a host node's command carries it too
    host = Topology.from_data({"name": "h", "nodes": [{"name": "h1", "host": True, "adversary": "replay"}, "x"],
                               "links": [["h1", "x"]]})  # fmt: skip
    hl = plan_host_launches(host, plan_addresses(host, "r2", pool="10.213.0.0/16"), run_id="r2", seed=0,
                            events_dir=Path("/tmp/ev"), admin={"h1": "127.0.0.1:9999"})  # fmt: skip
    assert "--adversary replay" in hl["h1"].command


def test_the_plan_refuses_a_strategy_a_reference_node_would_refuse() -> None:
    """A run-wide ``--variant pinecone`` is written into every node (Topology.with_variant) after the load check."""
    topo = _with("n02", "bootstrap_flood:multiple=5", ring(4))
    ref = topo.with_variant(VariantSpec.parse("pinecone"))
    with pytest.raises(DockerBackendError, match=r"node n02 runs pinecone: --adversary 'bootstrap_flood:multiple=5': "
                                                 r"bootstrap_flood: the reference node has only the drop strategy"):
        plan_launches(ref, plan_addresses(ref, "r3", pool="10.213.0.0/16"), run_id="r3", seed=0,
                      shaping_backend="userspace")  # fmt: skip


# ---------------------------------------------------------------- in process


def test_an_inproc_node_starts_with_its_adversary_and_a_restart_keeps_it() -> None:
    specs = [NodeSpec(name="a", adversary=f"drop:bootstrap=100@{KEY}"), NodeSpec(name="b", adversary="replay"),
             NodeSpec(name="c", adversary="none"), NodeSpec(name="d")]  # fmt: skip
    net = InprocNetwork(["a", "b", "c", "d"], [], node_specs=specs)
    a, b, c, d = (net.nodes[n].router for n in "abcd")
    assert a.adversary is not None and a.attack is None
    assert bytes.fromhex(KEY) in a.adversary.per_peer and not a.adversary.defaults.by_type  # that peer only
    assert b.attack is not None and b.attack.name == "replay" and b.adversary is None
    assert c.attack is None and c.adversary is None and d.attack is None and d.adversary is None
    again = net.add_node("b", Identity(bytes(32))).router  # restarted: made with it again, as a container is
    assert again is not b and again.attack is not None and again.attack.name == "replay"


def _run(topology: Topology, steps: str, record: Path | None = None) -> tuple[InprocChaos, dict[str, Any]]:
    scenario = parse_scenario_yaml(f"name: topo-adversary\nsteps:\n{steps}")

    async def main() -> tuple[InprocChaos, dict[str, Any]]:
        b = InprocChaos(topology, seed=1, record=record)
        return b, await run_scenario(b, scenario, seed=1)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_greyhole_from_the_topology_swallows_from_the_start_and_the_checker_judges_honest_nodes(
        tmp_path: Path) -> None:
    """Ring of 8, n03 ``greyhole:forward=0``: honest pairs whose path crosses it lose their pings (the expected
    break), pairs with n03 at an end are not judged, and the tree and snake of the honest nodes hold; the same ring
    without it delivers every ping."""
    steps = "  - {action: wait, s: 40}\n  - {action: check, expect: {pairs_reachable: false}}\n"
    topo = _with("n03", "greyhole:forward=0", ring(8))
    b, out = _run(topo, steps, tmp_path / "run")
    wait, check = out["steps"]
    assert check["verdict"] == "pass", check
    inv = check["invariants"]
    for name, held in inv.items():
        assert held["detail"].startswith("honest view (1 adversarial node(s) ignored)"), (name, held)
    assert inv["pairs_reachable"]["expected"] is False and not inv["pairs_reachable"]["held"]
    assert "lost: n0" in inv["pairs_reachable"]["detail"]
    lost = inv["pairs_reachable"]["detail"].split("lost: ")[1].split(";")[0]
    assert "n03" not in lost  # pairs with the adversary at an end are not counted
    assert all(inv[n]["held"] for n in ("one_root_per_component", "root_is_highest_key", "snake_ordered",
                                      "no_internal_errors"))  # fmt: skip
    assert b.net.nodes["n03"].router.attack.describe()["swallowed"] > 0  # what it should have forwarded
    # recorded as a step's adversary action, at the run's start, before the first step; topology.json keeps the field
    acts = [json.loads(x) for x in (tmp_path / "run" / "actions.jsonl").read_text().splitlines()]
    first = [x for x in acts if x["action"] in ("adversary", "step")][0]
    assert (first["action"], first["target"], first["mono_s"]) == ("adversary", "n03", 0.0)
    assert first["detail"] == {"strategy": "greyhole", "forward": 0.0, "spec": "greyhole:forward=0", "from": "topology"}
    doc = json.loads((tmp_path / "run" / "topology.json").read_text())
    assert [n.get("adversary") for n in doc["nodes"] if n["name"] == "n03"] == ["greyhole:forward=0"]
    # control: the honest ring delivers every ping, and the plain view is judged
    _, honest = _run(ring(8), "  - {action: wait, s: 40}\n  - {action: check}\n")
    pairs = honest["steps"][1]["invariants"]["pairs_reachable"]
    assert pairs["held"] and not pairs["detail"].startswith("honest view"), pairs


def test_snekbed_sim_starts_a_topology_adversary_too() -> None:
    """``snekbed sim`` (and ``up --backend inproc``) of the same ring: the greyhole swallows from the start, so fewer
    pings arrive than on the honest ring with the same seed and pairs."""
    def sim(topo: Topology) -> dict[str, Any]:
        return run_sim_sync(config_from_topology(topo, seed=2, pairs=40))

    honest, attacked = sim(ring(8)), sim(_with("n03", "greyhole:forward=0", ring(8)))
    assert honest["pings"]["delivered"] == honest["pings"]["sent"] == 40, honest["pings"]
    assert attacked["pings"]["delivered"] < attacked["pings"]["sent"], attacked["pings"]
