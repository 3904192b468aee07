"""Loaders: every pinecone edge list, YAML, NetJSON, meshnet-lab and native JSON, round trips."""

from __future__ import annotations

import itertools
import json
import re
import warnings
from pathlib import Path

import networkx as nx
import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.model.generators import grid, mesh_mixed
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import TopologyWarning, load_topology, parse_edge_list, parse_json, parse_yaml
from tests.ci import REPO, SHARED

PINECONE = sorted((SHARED / "topologies" / "pinecone").glob("*.txt"))


def _walk_graph_by_hand(path: Path) -> nx.Graph:
    """The oracle: the reference simulator's reading of a walk file, with networkx."""
    g = nx.Graph()
    for raw in path.read_text().splitlines():
        names = raw.split("#")[0].split()
        g.add_nodes_from(names)
        g.add_edges_from(itertools.pairwise(names))
    return g


def _edges(topo: Topology) -> set[frozenset[str]]:
    return {frozenset((link.a, link.b)) for link in topo.links}


def test_the_shared_pinecone_files_are_there() -> None:
    assert len(PINECONE) >= 8, f"expected the pinecone graphs under {SHARED}"


@pytest.mark.parametrize("path", PINECONE, ids=[p.name for p in PINECONE])
def test_pinecone_edge_list_matches_networkx(path: Path) -> None:
    topo = load_topology(path)
    oracle = _walk_graph_by_hand(path)
    assert topo.name == path.stem
    assert topo.source == str(path)
    assert len(topo.nodes) == oracle.number_of_nodes()
    assert len(topo.links) == oracle.number_of_edges()  # one peering per distinct pair
    assert set(topo.node_names) == set(oracle.nodes)
    assert _edges(topo) == {frozenset(e) for e in oracle.edges}
    assert {link.link_class for link in topo.links} == {"pipe"}
    assert topo.is_connected() == nx.is_connected(oracle)


@pytest.mark.parametrize("path", PINECONE, ids=[p.name for p in PINECONE])
def test_pinecone_edge_list_round_trips_through_json_and_yaml(path: Path, tmp_path: Path) -> None:
    topo = load_topology(path)
    (tmp_path / "t.json").write_text(topo.to_json())
    (tmp_path / "t.yaml").write_text(topo.to_yaml())
    (tmp_path / "t-netjson.json").write_text(json.dumps(topo.to_netjson()))
    for copy in ("t.json", "t.yaml", "t-netjson.json"):
        again = load_topology(tmp_path / copy)
        assert again.to_dict() == topo.to_dict(), copy
        assert again.source == str(tmp_path / copy)


def test_sim_txt_dedupes_repeated_walk_steps() -> None:
    text = (SHARED / "topologies" / "pinecone" / "sim.txt").read_text()
    steps = sum(len(line.split()) - 1 for line in text.splitlines() if line.split())
    topo = parse_edge_list(text, file="sim.txt")
    assert steps == 66 and len(topo.links) == 48 and len(topo.nodes) == 26


def test_sim_txt_repeated_steps_are_skipped_with_one_warning_naming_every_line() -> None:
    path = SHARED / "topologies" / "pinecone" / "sim.txt"
    with pytest.warns(TopologyWarning) as caught:
        load_topology(path)
    (w,) = caught
    message = str(w.message)
    assert message.startswith(f"{path}: 18 repeated links skipped (no peering made): line ")
    assert message.endswith("; and 8 more")  # ten named, the rest counted


def test_edge_list_self_links_and_repeats_are_skipped_like_the_reference_loader(tmp_path: Path) -> None:
    """cmd/pineconesim/main.go: every name on a line is a node; a name that follows itself and a pair
    already linked (either order) make no peering. The file loads; each kind is one warning."""
    path = tmp_path / "walks.txt"
    path.write_text("a b c c\n# comment\nd d\nc b a\nb e\n")
    notes: list[str] = []
    topo = load_topology(path, on_warning=notes.append)
    assert topo.node_names == ["a", "b", "c", "d", "e"]  # d is a node, with no link (as in the reference)
    assert [(link.a, link.b) for link in topo.links] == [("a", "b"), ("b", "c"), ("b", "e")]
    assert notes == [
        f"{path}: 2 self-links skipped (no peering made): line 1 token 4: 'c' follows itself; "
        "line 3 token 2: 'd' follows itself",
        f"{path}: 2 repeated links skipped (no peering made): line 4 token 2: 'c'-'b' (first on line 1); "
        "line 4 token 3: 'b'-'a' (first on line 1)",
    ]
    with pytest.warns(TopologyWarning, match=r"walks\.txt: 2 self-links skipped .*line 1 token 4"):
        assert load_topology(path).to_dict() == topo.to_dict()  # without a callback: the warnings module


def test_a_clean_edge_list_warns_nothing(tmp_path: Path) -> None:
    path = tmp_path / "clean.txt"
    path.write_text("a b c\nc d\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_topology(path).links) == 3


def test_the_sim_cli_prints_the_warning_on_stderr_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "walks.txt"
    path.write_text("a b c c\nc a\n")
    res = CliRunner().invoke(main, ["sim", str(path), "--json", "--pairs", "3"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["links"] == 3
    assert f"warning: {path}: 1 self-link skipped (no peering made): line 1 token 4: 'c' follows itself" in res.stderr


def test_edge_list_comments_blank_lines_single_names_and_default_class() -> None:
    text = "# a comment\n\na b c   # trailing comment\n\nc a\nb a\nlonely\n"
    topo = parse_edge_list(text, file="x.txt", default_class="lan")
    assert topo.node_names == ["a", "b", "c", "lonely"]
    assert [(link.a, link.b) for link in topo.links] == [("a", "b"), ("b", "c"), ("c", "a")]
    assert {link.link_class for link in topo.links} == {"lan"}
    assert topo.components() == [{"a", "b", "c"}, {"lonely"}]


def test_native_json_round_trip_keeps_everything() -> None:
    topo = Topology.from_data(
        {
            "name": "rt",
            "nodes": [
                {"name": "a", "key_seed": "ab" * 32, "variant": "legacy", "multicast": True, "admin_port": 7000},
                "b",
                "c",
            ],
            "links": [
                {"a": "a", "b": "b", "class": "bluetooth"},
                {"a": "a", "b": "b", "class": "bluetooth"},  # parallel links stay distinct
                {"a": "b", "b": "c", "class": "custom", "shaping": {"delay_ms": 5, "loss_pct": 1.5}},
            ],
            "classes": {"bluetooth": {"shape": {"loss_pct": 4}}},
        }
    )
    again = parse_json(topo.to_json(), file="rt.json")
    assert again.to_dict() == topo.to_dict()
    assert again.to_dict() == topo.to_dict()
    assert len(again.links) == 3 and again.graph().number_of_edges() == 3
    assert again.link_class_of(0).shape.loss_pct == 4
    assert again.link_class_of(2).shape.delay_ms == 5


def test_generated_topologies_round_trip_through_yaml() -> None:
    for topo in (grid(4, 3, link_class="remote"), mesh_mixed(12, seed=3)):
        again = parse_yaml(topo.to_yaml(), file="g.yaml")
        assert again.to_dict() == topo.to_dict()


def test_yaml_keeps_names_yaml_would_read_as_numbers() -> None:
    text = "name: 0042\nnodes: [010, 1, 'yes', 2.5]\nlinks:\n  - [010, 1]\n  - {a: 1, b: 2.5}\n"
    topo = parse_yaml(text, file="n.yaml")
    assert topo.name == "0042"
    assert topo.node_names == ["010", "1", "yes", "2.5"]
    assert [(link.a, link.b) for link in topo.links] == [("010", "1"), ("1", "2.5")]


def test_yaml_name_defaults_to_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "my topo!.yaml"
    path.write_text("nodes: [a, b]\nlinks: [[a, b]]\n")
    assert load_topology(path).name == "my-topo"


def test_netjson_networkgraph() -> None:
    doc = {
        "type": "NetworkGraph",
        "protocol": "olsr",
        "version": "0.8",
        "metric": "etx",
        "label": "city-mesh",
        "nodes": [
            {"id": "10.0.0.1", "label": "gw", "properties": {"variant": "legacy", "hostname": "gw.local"}},
            {"id": "10.0.0.2"},
            {"id": "10.0.0.3", "local_addresses": ["10.0.1.3"]},
        ],
        "links": [
            {"source": "10.0.0.1", "target": "10.0.0.2", "cost": 1.0},
            {
                "source": "10.0.0.2",
                "target": "10.0.0.3",
                "cost": 2.5,
                "properties": {"class": "remote", "shaping": {"delay_ms": 40}},
            },
        ],
    }
    topo = parse_json(json.dumps(doc, indent=1), file="city.json")
    assert topo.name == "city-mesh"
    assert topo.node_names == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert topo.node("10.0.0.1").variant == "legacy"
    assert [link.link_class for link in topo.links] == ["pipe", "remote"]
    assert topo.link_class_of(1).shape.delay_ms == 40
    # networkx reads the same document as the same graph (STYLE.md section 10)
    reference = nx.node_link_graph(doc, multigraph=False, edges="links")
    assert nx.utils.edges_equal(topo.simple_graph().edges, reference.edges)


def test_meshnet_lab_json_with_integer_ids_and_implicit_nodes() -> None:
    doc = {
        "links": [
            {"source": 0, "target": 1},
            {"source": 1, "target": 2, "class": "bluetooth"},
            {"source": 2, "target": 0},
        ]
    }
    topo = parse_json(json.dumps(doc), file="/x/meshnet.json", default_class="lan")
    assert topo.name == "meshnet"
    assert topo.node_names == ["0", "1", "2"]
    assert [link.link_class for link in topo.links] == ["lan", "bluetooth", "lan"]
    with_nodes = parse_json(json.dumps({"nodes": [{"id": "z"}], **doc}), file="m.json")
    assert with_nodes.node_names == ["z", "0", "1", "2"]
    assert with_nodes.components() == [{"0", "1", "2"}, {"z"}]


def test_docs_yaml_example_loads() -> None:
    block = re.search(r"```yaml\n(.*?)```", (REPO / "docs" / "topology.md").read_text(), re.S)
    assert block is not None
    topo = parse_yaml(block.group(1), file="docs/topology.md")
    assert topo.name == "demo" and len(topo.links) == 4
    assert topo.link_class_of(1).shape.loss_pct == 3  # the bluetooth override
    assert topo.link_class_of(3).shape.rate_mbit == 5  # custom shaping


@pytest.mark.parametrize("suffix", [".yml", ".yaml"])
def test_yaml_suffixes(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"t{suffix}"
    path.write_text("name: t\nnodes: [a]\n")
    assert load_topology(path).node_names == ["a"]


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"unknown topology format '\.toml'"):
        load_topology(tmp_path / "t.toml")
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path / "absent.yaml")
    assert info.value.file == str(tmp_path / "absent.yaml")
    assert "cannot read the file" in str(info.value)
