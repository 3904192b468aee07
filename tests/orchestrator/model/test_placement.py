"""Where a topology's nodes run on several hosts: ``host: h2``, ``placement: spread``, ``placement.local``
(orchestrator.model.placement; docs/multi-host.md, "Placement")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.placement import PlacementError, PlacementSpec, local_groups, plan_hosts
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology

REPO = Path(__file__).resolve().parents[3]
HOSTS = ["h1", "h2", "h3"]


def _links(t: Topology) -> list[tuple[str, str, str]]:
    return [(ln.a, ln.b, ln.link_class) for ln in t.links]


def _plan(t: Topology, hosts: list[str] = HOSTS) -> dict[str, str]:
    return plan_hosts([n.name for n in t.nodes if not n.host], t.pins, _links(t), t.placement, hosts)


def _load(tmp_path: Path, text: str) -> Topology:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return load_topology(path)


def test_host_pins_a_node_and_true_still_means_a_host_node(tmp_path: Path) -> None:
    t = _load(tmp_path, "name: t\nnodes:\n  - {name: a, host: h2}\n  - {name: b, host: true}\n  - c\n"
                        "links: [[a, c, lan], [b, c, remote]]\n")
    assert (t.node("a").on_host, t.node("a").host) == ("h2", False)
    assert (t.node("b").on_host, t.node("b").host) == (None, True)
    assert t.pins == {"a": "h2"} and t.placement is None
    assert _plan(t) == {"a": "h2"}  # no placement: only the pinned node is placed, the swarm places the rest
    again = Topology.from_data(json.loads(t.model_dump_json(by_alias=True, exclude_none=True)))
    assert again.pins == {"a": "h2"}  # topology.json keeps the pin (as on_host)


def test_spread_balances_and_local_classes_share_a_host() -> None:
    mesh = load_topology(REPO / "compose" / "topologies" / "mesh-12.yaml")
    spread = _plan(mesh.model_copy(update={"placement": PlacementSpec()}))
    assert sorted(spread) == sorted(mesh.node_names)
    assert sorted(list(spread.values()).count(h) for h in HOSTS) == [4, 4, 4]
    # the three sites are joined inside by lan links: each site on one host, one site a host
    sites = mesh.model_copy(update={"placement": PlacementSpec(local=["lan"])})
    by_lan = _plan(sites)
    for site in (["n01", "n02", "n03", "n04"], ["n05", "n06", "n07", "n08"], ["n09", "n10", "n11", "n12"]):
        assert len({by_lan[n] for n in site}) == 1, by_lan
    assert sorted(by_lan.values()) == sorted(HOSTS * 4)
    # a pin moves its whole group: n05's site on h1, the others fill h2 and h3
    pinned = Topology.from_data({**json.loads(sites.model_dump_json(by_alias=True, exclude_none=True)),
                                 "nodes": [{"name": n, **({"host": "h1"} if n == "n05" else {})}
                                           for n in sites.node_names]})  # fmt: skip
    plan = _plan(pinned)
    assert {plan[n] for n in ("n05", "n06", "n07", "n08")} == {"h1"}
    assert {plan["n01"], plan["n09"]} == {"h2", "h3"}
    assert _plan(pinned) == plan  # the same topology and hosts: the same placement
    again = Topology.from_data(pinned.to_record())  # what a run keeps (topology.json) and the chaos engine rebuilds
    assert (again.placement, again.pins) == (pinned.placement, pinned.pins) and _plan(again) == plan


def test_a_pin_to_a_host_the_swarm_lacks_is_refused() -> None:
    t = Topology.from_data({"name": "t", "nodes": [{"name": "a", "host": "h9"}, "b"]})
    with pytest.raises(PlacementError, match=r"node 'a' is pinned to host 'h9'.*h1, h2, h3"):
        _plan(t)
    with pytest.raises(PlacementError, match="no worker"):
        _plan(t, [])


@pytest.mark.parametrize(("text", "where", "what"), [
    ("name: t\nnodes:\n  - {name: a, host: 'bad host'}\n", "t.yaml:3: nodes[0].host", "a swarm host's name"),
    ("name: t\nplacement: pack\nnodes: [a]\n", "t.yaml:2: placement", "expected 'spread'"),
    ("name: t\nplacement: {local: [lan, bluetoth]}\nnodes: [a]\n", "t.yaml:2: placement.local[1]",
     "unknown link class 'bluetoth'"),
    ("name: t\nplacement: {local: [lan]}\nnodes:\n  - {name: a, host: h1}\n  - {name: b, host: h2}\n"
     "links: [[a, b, lan]]\n", "t.yaml:4: nodes[0].host", "pinned to different hosts: a on h1; b on h2"),
    ("name: t\nplacement: {spread: true, pack: 1}\nnodes: [a]\n", "t.yaml:2: placement.pack", "unknown field"),
])  # fmt: skip
def test_placement_mistakes_name_file_line_and_field(tmp_path: Path, text: str, where: str, what: str) -> None:
    with pytest.raises(TopologyError) as err:
        _load(tmp_path, text)
    assert where in str(err.value) and what in str(err.value), str(err.value)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), edges=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29), st.booleans()),
                                            max_size=40), hosts=st.integers(1, 4))  # fmt: skip
def test_the_plan_keeps_groups_together_and_balances_them(n: int, edges: list[tuple[int, int, bool]],
                                                          hosts: int) -> None:  # fmt: skip
    """Property: every node placed; each local group on one host; no host holds more than the lightest host
    plus the largest group (greedy largest-first bound)."""
    names = [f"n{i:02d}" for i in range(n)]
    links = [(names[a % n], names[b % n], "bluetooth" if bt else "lan") for a, b, bt in edges if a % n != b % n]
    spec = PlacementSpec(local=["bluetooth"])
    hs = [f"h{i}" for i in range(1, hosts + 1)]
    plan = plan_hosts(names, {}, links, spec, hs)
    assert sorted(plan) == sorted(names)
    groups = local_groups(names, links, ["bluetooth"])
    assert all(len({plan[x] for x in g}) == 1 for g in groups)
    load = [list(plan.values()).count(h) for h in hs]
    assert max(load) - min(load) <= max(len(g) for g in groups)
