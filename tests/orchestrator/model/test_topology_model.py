"""The Topology model: graph views, node options, link classes, serialisation."""

from __future__ import annotations

import networkx as nx
import pytest
from pydantic import ValidationError

from contract.links import default_classes
from node.core.crypto import Identity, derive_seed
from orchestrator.model.topology import LinkSpec, NodeSpec, Topology, format_loc


@pytest.fixture
def topo() -> Topology:
    return Topology.from_data(
        {
            "name": "model",
            "nodes": ["a", "b", {"name": "c", "multicast": True}, "d", "e"],
            "links": [
                ["a", "b", "bluetooth"],
                ["b", "a", "remote"],  # a second, distinct peering between a and b
                {"a": "b", "b": "c"},
                {"a": "d", "b": "e", "class": "custom", "shaping": {"delay_ms": 12, "loss_pct": 0.5}},
            ],
        }
    )


def test_multigraph_keeps_parallel_links(topo: Topology) -> None:
    g = topo.graph()
    assert isinstance(g, nx.MultiGraph)
    assert g.number_of_nodes() == 5 and g.number_of_edges() == 4
    assert g.number_of_edges("a", "b") == 2
    assert {k: d["class"] for k, d in g["a"]["b"].items()} == {0: "bluetooth", 1: "remote"}
    assert g.nodes["c"]["multicast"] is True and g.nodes["a"]["variant"] is None  # None: the run's variant
    assert g.edges["d", "e", 3]["shaping"] == {"delay_ms": 12, "loss_pct": 0.5}


def test_simple_graph_merges_parallel_links(topo: Topology) -> None:
    g = topo.simple_graph()
    assert type(g) is nx.Graph
    assert g.number_of_edges() == 3
    assert g.edges["a", "b"]["links"] == [0, 1]
    assert g.edges["a", "b"]["class"] == "bluetooth"


def test_neighbours_components_connectivity(topo: Topology) -> None:
    assert topo.node_names == ["a", "b", "c", "d", "e"]
    assert topo.neighbours("b") == ["a", "c"]
    assert topo.neighbours("e") == ["d"]
    assert topo.components() == [{"a", "b", "c"}, {"d", "e"}]
    assert not topo.is_connected()
    with pytest.raises(ValueError, match="has no node 'zz'"):
        topo.neighbours("zz")


def test_link_class_of_applies_shaping(topo: Topology) -> None:
    defaults = default_classes()
    assert topo.link_class_of(0) == defaults["bluetooth"]
    custom = topo.link_class_of(3)
    assert custom.link_type == defaults["custom"].link_type
    assert (custom.shape.delay_ms, custom.shape.loss_pct, custom.shape.rate_mbit) == (12, 0.5, None)
    with pytest.raises(IndexError):
        topo.link_class_of(9)


def test_class_overrides_and_additions() -> None:
    topo = Topology.from_data(
        {
            "name": "ov",
            "nodes": ["a", "b"],
            "links": [["a", "b", "bluetooth"], ["a", "b", "sat"]],
            "classes": {
                "bluetooth": {"shape": {"loss_pct": 5}},
                "sat": {
                    "link_type": "remote",
                    "shape": {"delay_ms": 280, "rate_mbit": 8},
                    "source": "GEO satellite hop",
                },
            },
        }
    )
    bt = topo.link_class_of(0)
    assert bt.shape.loss_pct == 5 and bt.shape.rate_mbit == default_classes()["bluetooth"].shape.rate_mbit
    sat = topo.link_class_of(1)
    assert (sat.name, sat.link_type, sat.shape.delay_ms) == ("sat", "remote", 280)


def test_key_seed_is_fixed_or_derived_from_run_seed_and_name() -> None:
    fixed = NodeSpec(name="a", key_seed="AB" * 32)
    assert fixed.key_seed == "ab" * 32  # normalised
    assert fixed.seed_bytes("run-1") == bytes.fromhex("ab" * 32)
    derived = NodeSpec(name="a")
    assert derived.seed_bytes("run-1") == derive_seed("run-1", "a")
    assert derived.seed_bytes("run-1") != derived.seed_bytes("run-2")
    assert derived.seed_bytes("run-1") != NodeSpec(name="b").seed_bytes("run-1")
    assert len(Identity(derived.seed_bytes(7)).public_key) == 32


def test_link_spec_accepts_class_alias_and_field_name() -> None:
    assert LinkSpec(a="x", b="y", link_class="remote").link_class == "remote"
    assert LinkSpec.model_validate({"a": "x", "b": "y", "class": "remote"}).link_class == "remote"
    assert LinkSpec(a="y", b="x").pair == ("x", "y")
    assert LinkSpec(a="y", b="x").model_dump(by_alias=True)["class"] == "lan"


def test_models_are_frozen_and_strict(topo: Topology) -> None:
    with pytest.raises(ValidationError):
        topo.nodes[0].name = "z"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        NodeSpec.model_validate({"name": "a", "colour": "red"})
    with pytest.raises(ValidationError, match="node name"):
        NodeSpec(name="has space")


def test_to_dict_is_the_native_document(topo: Topology) -> None:
    doc = topo.to_dict()
    assert doc["name"] == "model"
    assert doc["nodes"][0] == {"name": "a"}
    assert doc["nodes"][2] == {"name": "c", "multicast": True}
    assert doc["links"][0] == {"a": "a", "b": "b", "class": "bluetooth"}
    assert doc["links"][2] == {"a": "b", "b": "c"}  # lan is the default
    assert "classes" not in doc and "source" not in doc
    assert Topology.from_data(doc).to_dict() == doc


def test_netjson_export_is_readable_by_networkx(topo: Topology) -> None:
    doc = topo.to_netjson()
    assert doc["type"] == "NetworkGraph" and doc["label"] == "model"
    g = nx.node_link_graph(doc, multigraph=True, edges="links")
    assert g.number_of_edges() == 4 and set(g.nodes) == set(topo.node_names)


def test_format_loc() -> None:
    assert format_loc(("links", 3, "class")) == "links[3].class"
    assert format_loc(("classes", "bt", "shape", "loss_pct")) == "classes.bt.shape.loss_pct"
    assert format_loc(()) is None
