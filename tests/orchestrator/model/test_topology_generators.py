"""Generators: sizes, connectivity, names, determinism by seed, and the example files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model import generators as gen
from orchestrator.cli import main
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology

EXAMPLES = Path(__file__).resolve().parents[3] / "compose" / "topologies"


def _pairs(topo: Topology) -> list[tuple[str, str, str]]:
    return sorted((*sorted((link.a, link.b)), link.link_class) for link in topo.links)


def test_node_names_are_zero_padded() -> None:
    assert gen.node_names(3) == ["n01", "n02", "n03"]
    assert gen.node_names(100)[0] == "n001" and gen.node_names(100)[-1] == "n100"
    assert gen.line(12).node_names[-1] == "n12"


@pytest.mark.parametrize(
    ("topo", "n_nodes", "n_links", "oracle"),
    [
        (gen.line(5), 5, 4, nx.path_graph(5)),
        (gen.line(1), 1, 0, nx.path_graph(1)),
        (gen.ring(8), 8, 8, nx.cycle_graph(8)),
        (gen.grid(4, 3), 12, 17, nx.grid_2d_graph(3, 4)),
        (gen.tree(3, 2), 15, 14, nx.balanced_tree(2, 3)),
        (gen.tree(2, 3), 13, 12, nx.balanced_tree(3, 2)),
        (gen.tree(0, 4), 1, 0, nx.empty_graph(1)),
    ],
    ids=["line5", "line1", "ring8", "grid4x3", "tree3x2", "tree2x3", "tree0"],
)
def test_deterministic_shapes(topo: Topology, n_nodes: int, n_links: int, oracle: nx.Graph) -> None:
    assert len(topo.nodes) == n_nodes and len(topo.links) == n_links
    assert topo.is_connected()
    assert nx.is_isomorphic(topo.simple_graph(), oracle)
    assert {link.link_class for link in topo.links} <= {"lan"}


def test_grid_is_row_major() -> None:
    topo = gen.grid(3, 2)
    assert topo.neighbours("n01") == ["n02", "n04"]
    assert topo.neighbours("n05") == ["n02", "n04", "n06"]


def test_link_class_parameter_and_names() -> None:
    topo = gen.ring(4, link_class="bluetooth", name="my-ring")
    assert topo.name == "my-ring"
    assert {link.link_class for link in topo.links} == {"bluetooth"}
    assert gen.random_graph(10, 3, seed=1, link_class="pipe").links[0].link_class == "pipe"
    with pytest.raises(TopologyError, match="unknown link class 'wifi'"):
        gen.line(3, link_class="wifi")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: gen.line(0), "n must be at least 1"),
        (lambda: gen.ring(2), "n must be at least 3"),
        (lambda: gen.grid(0, 3), "w must be at least 1"),
        (lambda: gen.tree(2, 0), "fanout must be at least 1"),
        (lambda: gen.line(2.5), "n must be an integer"),  # type: ignore[arg-type]
        (lambda: gen.random_graph(5, 0, seed=1), "mean degree must be at least 1"),
        (lambda: gen.random_graph(5, 1.5, seed=1), r"probability must be in \(0, 1\]"),
        (lambda: gen.random_graph(5, True, seed=1), "degree_or_p must be"),
        (lambda: gen.mesh_mixed(3), "n must be at least 4"),
    ],
)
def test_bad_sizes(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=fragment):
        call()


def test_random_graph_is_reproducible_and_seed_dependent() -> None:
    a = gen.random_graph(40, 4, seed=11)
    assert a.to_dict() == gen.random_graph(40, 4, seed=11).to_dict()
    assert _pairs(a) != _pairs(gen.random_graph(40, 4, seed=12))
    assert len(a.links) == 80 and a.is_connected()
    b = gen.random_graph(40, 0.2, seed=11)
    assert b.to_dict() == gen.random_graph(40, 0.2, seed=11).to_dict() and b.is_connected()
    full = gen.random_graph(6, 1.0, seed=0)
    assert len(full.links) == 15  # p = 1 is the complete graph
    assert len(gen.random_graph(6, 99, seed=0).links) == 15  # degree capped at complete


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), degree=st.integers(1, 8), seed=st.integers(0, 2**32))
def test_random_graph_properties(n: int, degree: int, seed: int) -> None:
    topo = gen.random_graph(n, degree, seed=seed)
    g = topo.simple_graph()
    assert g.number_of_nodes() == n
    assert nx.is_connected(g)
    assert g.number_of_edges() == len(topo.links)  # no parallel links
    assert len(topo.links) == min(n * (n - 1) // 2, max(n - 1, round(n * degree / 2)))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(4, 40), seed=st.integers(0, 1000), site_size=st.integers(2, 6))
def test_mesh_mixed_properties(n: int, seed: int, site_size: int) -> None:
    topo = gen.mesh_mixed(n, seed, site_size=site_size)
    assert len(topo.nodes) == n and topo.is_connected()
    assert set(Counter(link.link_class for link in topo.links)) == {"lan", "bluetooth", "remote"}
    assert topo.simple_graph().number_of_edges() == len(topo.links)
    assert topo.to_dict() == gen.mesh_mixed(n, seed, site_size=site_size).to_dict()


def test_mesh_mixed_default_is_twelve_nodes_of_three_classes() -> None:
    topo = gen.mesh_mixed(seed=1)
    counts = Counter(link.link_class for link in topo.links)
    assert len(topo.nodes) == 12 and counts == {"lan": 9, "bluetooth": 5, "remote": 3}
    assert _pairs(topo) != _pairs(gen.mesh_mixed(seed=2))


def test_from_graph_renames_nodes() -> None:
    topo = gen.from_graph(nx.petersen_graph(), name="petersen", link_class="remote")
    assert topo.node_names[0] == "n01" and len(topo.links) == 15
    assert nx.is_isomorphic(topo.simple_graph(), nx.petersen_graph())


def test_example_files_match_their_generators() -> None:
    assert load_topology(EXAMPLES / "line-5.yaml").to_dict() == gen.line(5).to_dict()
    assert load_topology(EXAMPLES / "ring-8.yaml").to_dict() == gen.ring(8).to_dict()
    mesh = load_topology(EXAMPLES / "mesh-12.yaml")
    assert _pairs(mesh) == _pairs(gen.mesh_mixed(12, seed=1))
    assert mesh.node("n01").key_seed == "01" * 32
    slow = [i for i, link in enumerate(mesh.links) if link.shaping]
    assert len(slow) == 1 and mesh.link_class_of(slow[0]).shape.delay_ms == 40


def _graph(topo: Topology) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(topo.node_names)
    g.add_edges_from((link.a, link.b) for link in topo.links)
    return g


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 400), degree=st.sampled_from([1.5, 3.0, 6.0, 10.0]), seed=st.integers(0, 10**6))
def test_geometric_is_connected_simple_and_near_its_degree(n: int, degree: float, seed: int) -> None:
    degree = min(degree, n - 1)
    topo = gen.geometric(n, degree, seed)
    g = _graph(topo)
    assert g.number_of_nodes() == n and nx.is_connected(g)
    assert g.number_of_edges() == len(topo.links)  # no duplicate links, no self-links (Topology refuses them)
    assert topo == gen.geometric(n, degree, seed)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 400), degree=st.sampled_from([2, 4, 6, 8]), seed=st.integers(0, 10**6))
def test_preferential_is_connected_with_its_degree_and_hubs(n: int, degree: int, seed: int) -> None:
    topo = gen.preferential(n, degree, seed)
    g = _graph(topo)
    m = min(degree // 2, n - 1)
    assert g.number_of_nodes() == n and nx.is_connected(g)
    # a clique of m + 1, then m links per added node
    assert g.number_of_edges() == m * (m + 1) // 2 + m * (n - m - 1)
    assert topo == gen.preferential(n, degree, seed)


def test_large_generated_graphs_have_the_asked_shape() -> None:
    geo = _graph(gen.geometric(10_000, 6, 1))
    pref = _graph(gen.preferential(10_000, 6, 1))
    for g in (geo, pref):
        assert nx.is_connected(g) and 5.8 < 2 * g.number_of_edges() / g.number_of_nodes() < 6.2
    # preferential attachment makes hubs; the geometric graph's degrees stay near the mean
    assert max(d for _, d in pref.degree) > 100 > 30 > max(d for _, d in geo.degree)
    assert gen.geometric(50, 4, 1) != gen.geometric(50, 4, 2)


@pytest.mark.parametrize("call, fragment", [
    (lambda: gen.geometric(1, 3, 0), "n must be at least 2"),
    (lambda: gen.geometric(10, 0, 0), "mean_degree must be in"),
    (lambda: gen.geometric(10, 12, 0), "mean_degree must be in"),
    (lambda: gen.preferential(10, 1, 0), "mean_degree must be at least 2"),
])  # fmt: skip
def test_large_graph_generators_refuse_impossible_sizes(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=fragment):
        call()


def test_generate_command_writes_a_topology_every_command_loads(tmp_path: Path) -> None:
    for kind, suffix in (("geometric", ".yaml"), ("preferential", ".json"), ("random", ".yaml")):
        out = tmp_path / f"{kind}{suffix}"
        res = CliRunner().invoke(main, ["generate", kind, "--nodes", "300", "--seed", "4", "--link-class", "remote",
                                        "-o", str(out)])  # fmt: skip
        assert res.exit_code == 0, res.output
        loaded = load_topology(out)
        assert len(loaded.node_names) == 300 and {x.link_class for x in loaded.links} == {"remote"}
        assert nx.is_connected(_graph(loaded))
    res = CliRunner().invoke(main, ["generate", "random", "--nodes", "6000"])
    assert res.exit_code != 0 and "use geometric or preferential" in res.output
