"""Bad topology files fail with the file, the line and the field, before anything is created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.model import topology_loaders
from orchestrator.model.topology import Topology, TopologyError
from orchestrator.model.topology_loaders import load_topology

GOOD_HEAD = """\
name: t
nodes:
  - a
  - b
  - name: c
    variant: legacy
links:
  - {a: a, b: b}
"""


# Every parser this PyYAML has (a build without libyaml has only the pure-Python one): nothing to skip.
_PARSERS = ["libyaml", "pure-python"] if yaml.__with_libyaml__ else ["pure-python"]


@pytest.fixture(autouse=True, params=_PARSERS)
def yaml_loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every case with both PyYAML parsers: line numbers must not depend on which one is installed."""
    if request.param == "libyaml":
        monkeypatch.setattr(topology_loaders, "_LOADER", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(topology_loaders, "_LOADER", yaml.SafeLoader)


def _fail(tmp_path: Path, name: str, text: str) -> TopologyError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    return info.value


def _line_with(text: str, fragment: str) -> int:
    (line,) = [i for i, s in enumerate(text.splitlines(), 1) if fragment in s]
    return line


def _first_line(err: TopologyError) -> str:
    return str(err).splitlines()[0]


# -- the four cases from the issue ------------------------------------------------------------------


def test_unknown_node_in_a_link(tmp_path: Path) -> None:
    err = _fail(tmp_path, "topo.yaml", GOOD_HEAD + "  - {a: b, b: c}\n  - {a: c, b: zz}\n")
    path = str(tmp_path / "topo.yaml")
    assert (err.file, err.line, err.field) == (path, 10, "links[2].b")
    assert str(err) == f"{path}:10: links[2].b: unknown node 'zz' (known: a, b, c)"


def test_unknown_link_class(tmp_path: Path) -> None:
    text = GOOD_HEAD + "  - a: b\n    b: c\n    class: wifi\n"
    err = _fail(tmp_path, "topo.yaml", text)
    assert (err.line, err.field) == (11, "links[1].class")
    assert _first_line(err) == (
        f"{tmp_path / 'topo.yaml'}:11: links[1].class: unknown link class 'wifi' "
        "(known: bluetooth, bonjour, custom, lan, multicast, pipe, remote)"
    )


def test_duplicate_node_name(tmp_path: Path) -> None:
    text = GOOD_HEAD.replace("  - b\n", "  - b\n  - {name: a, multicast: true}\n")
    err = _fail(tmp_path, "dup.yaml", text)
    assert (err.line, err.field) == (5, "nodes[2].name")
    assert (
        _first_line(err)
        == f"{tmp_path / 'dup.yaml'}:5: nodes[2].name: duplicate node name 'a' (first defined at nodes[0])"
    )


def test_yaml_syntax_error(tmp_path: Path) -> None:
    text = GOOD_HEAD + "  - {a: b, b: c\n  - {a: a, b: c}\n"
    err = _fail(tmp_path, "syntax.yaml", text)
    assert err.file == str(tmp_path / "syntax.yaml")
    assert err.line == 10 and err.field is None
    assert "YAML syntax error" in str(err) and "flow mapping from line 9" in str(err)


def test_yaml_bad_indentation_names_the_line(tmp_path: Path) -> None:
    err = _fail(tmp_path, "indent.yaml", "name: t\nnodes:\n  - a\n bad: 1\n")
    assert err.line == 4 and "YAML syntax error" in err.message


# -- more YAML problems -------------------------------------------------------------------------


def test_every_cross_check_problem_is_reported(tmp_path: Path) -> None:
    text = GOOD_HEAD + (
        "  - {a: b, b: zz}\n"  # 9
        "  - {a: a, b: a}\n"  # 10
        "  - {a: a, b: c, class: custom}\n"  # 11
        "  - {a: a, b: c, shaping: {delay_ms: 1, jitter_ms: 5}}\n"  # 12
        "  - {a: a, b: c, shaping: {colour: red}}\n"  # 13
    )
    err = _fail(tmp_path, "many.yaml", text)
    got = [(p.line, p.field) for p in err.problems]
    assert got == [
        (9, "links[1].b"),
        (10, "links[2].b"),
        (11, "links[3].shaping"),
        (12, "links[4].shaping"),
        (13, "links[5].shaping.colour"),
    ]
    assert "self-link" in err.problems[1].message
    assert "class 'custom' needs 'shaping'" in err.problems[2].message
    assert "jitter_ms (5) exceeds delay_ms (1)" in err.problems[3].message
    assert "unknown shaping field 'colour'" in err.problems[4].message
    assert "and 4 more:" in str(err)


def test_field_errors_name_the_field_and_line(tmp_path: Path) -> None:
    err = _fail(
        tmp_path, "f.yaml", GOOD_HEAD.replace("variant: legacy", "variant: sneky") + "  - {a: a, b: c, colour: red}\n"
    )
    assert [(p.line, p.field) for p in err.problems] == [(6, "nodes[2].variant"), (9, "links[1].colour")]
    assert err.problems[0].message == "unknown variant 'sneky' (known: legacy, pinecone, snek, snek-s0)"
    assert err.problems[1].message == "unknown field"


@pytest.mark.parametrize(
    ("node", "fragment"),
    [
        ("{name: -bad}", "node name '-bad' must be"),
        ("{name: " + "x" * 41 + "}", "must be 1-40 characters"),
        ("{name: ok, key_seed: abcd}", "key_seed must be 32 bytes"),
        ("{name: ok, key_seed: " + "zz" * 32 + "}", "key_seed must be hexadecimal"),
        ("{name: ok, admin_port: 70000}", "less than or equal to 65535"),
    ],
)
def test_bad_node_options(tmp_path: Path, node: str, fragment: str) -> None:
    err = _fail(tmp_path, "n.yaml", f"name: t\nnodes:\n  - a\n  - {node}\n")
    assert err.line == 4 and err.field is not None and err.field.startswith("nodes[1].")
    assert fragment in err.message


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    err = _fail(tmp_path, "k.yaml", "name: t\nnodes: [a]\nlinks: []\nnodes: [b]\n")
    assert (err.line, err.field) == (4, "nodes")
    assert err.message == "duplicate key 'nodes' (first at line 2)"


def test_bad_class_override(tmp_path: Path) -> None:
    text = "name: t\nnodes: [a, b]\nclasses:\n  bluetooth:\n    shape: {loss_pct: 500}\n  slow: {link_type: remote}\n"
    err = _fail(tmp_path, "c.yaml", text)
    assert [(p.line, p.field) for p in err.problems] == [
        (5, "classes.bluetooth.shape.loss_pct"),
        (6, "classes.slow.source"),
    ]


def test_not_a_mapping_and_empty(tmp_path: Path) -> None:
    assert "must be a mapping" in _fail(tmp_path, "l.yaml", "- a\n- b\n").message
    assert "empty YAML document" in _fail(tmp_path, "e.yaml", "# nothing\n").message
    assert _fail(tmp_path, "z.yaml", "name: t\nnodes: []\n").message == "a topology needs at least one node"


# -- JSON -----------------------------------------------------------------------------------------


def test_bad_json_syntax(tmp_path: Path) -> None:
    err = _fail(tmp_path, "bad.json", '{"links": [\n  {"source": 1, "target": 2},\n  {"source": 2 "target": 3}\n]}\n')
    assert (err.file, err.line, err.field) == (str(tmp_path / "bad.json"), 3, None)
    assert err.message == "JSON syntax error at column 16: Expecting ',' delimiter"


def test_netjson_errors_use_netjson_paths_and_lines(tmp_path: Path) -> None:
    doc = {
        "type": "NetworkGraph",
        "nodes": [{"id": "a"}, {"id": "b", "properties": {"variant": "x"}}],
        "links": [{"source": "a", "target": "b", "cost": 1}],
    }
    text = json.dumps(doc, indent=2)
    err = _fail(tmp_path, "v.json", text)
    assert err.field == "nodes[1].properties.variant"
    assert err.line == _line_with(text, '"variant"')
    doc["nodes"][1] = {"id": "b"}
    doc["links"].append({"source": "a", "target": "q", "cost": 1, "properties": {"class": "nope"}})
    text = json.dumps(doc, indent=2)
    err = _fail(tmp_path, "r.json", text)
    assert [(p.field, p.line) for p in err.problems] == [
        ("links[1].target", _line_with(text, '"target": "q"')),
        ("links[1].properties.class", _line_with(text, '"class": "nope"')),
    ]
    assert err.message == "unknown node 'q' (known: a, b)"


def test_netjson_other_types_and_missing_parts(tmp_path: Path) -> None:
    err = _fail(tmp_path, "col.json", '{"type": "NetworkCollection", "collection": []}')
    assert err.field == "type" and "only NetworkGraph" in err.message
    err = _fail(tmp_path, "nolinks.json", '{"type": "NetworkGraph", "nodes": [{"id": "a"}]}')
    assert err.field == "links" and err.message == "'links' is missing"
    err = _fail(tmp_path, "noid.json", '{"type": "NetworkGraph", "nodes": [{"label": "a"}], "links": []}')
    assert err.field == "nodes[0].id" and "missing" in err.message


def test_meshnet_tc_strings_are_refused(tmp_path: Path) -> None:
    doc = '{"links": [\n {"source": "a", "target": "b",\n  "source_tc": "netem delay 10ms"}\n]}'
    err = _fail(tmp_path, "m.json", doc)
    assert (err.line, err.field) == (3, "links[0].source_tc")
    assert "raw tc strings are not supported" in err.message


def test_native_json_validation_error_names_path(tmp_path: Path) -> None:
    err = _fail(tmp_path, "n.json", '{"name": "t",\n "nodes": [{"name": "a"}, {"name": "a"}]}')
    assert (err.line, err.field) == (2, "nodes[1].name")


# -- edge lists and data ----------------------------------------------------------------------------


def test_edge_list_bad_name_and_empty(tmp_path: Path) -> None:
    err = _fail(tmp_path, "e.txt", "a b c\n# fine\nd e! f\n")
    assert (err.line, err.field) == (3, "token 2")
    assert err.message.startswith("bad node name 'e!'")
    err = _fail(tmp_path, "empty.txt", "# only a comment\n\n")
    assert err.message.startswith("no nodes")


def test_edge_list_bad_default_class(tmp_path: Path) -> None:
    path = tmp_path / "g.txt"
    path.write_text("a b\nb c\n")
    with pytest.raises(TopologyError) as info:
        load_topology(path, default_class="wifi")
    assert (info.value.line, info.value.field) == (1, "links[0].class")


def test_from_data_without_a_file() -> None:
    with pytest.raises(TopologyError) as info:
        Topology.from_data({"name": "t", "nodes": ["a"], "links": [["a", "b"]]})
    err = info.value
    assert (err.file, err.line, err.field) == (None, None, "links[0].b")
    assert str(err) == "<topology>: links[0].b: unknown node 'b' (known: a)"


def test_long_known_lists_are_truncated() -> None:
    nodes = [f"n{i:03d}" for i in range(100)]
    with pytest.raises(TopologyError, match=r"known: n000, n001, .*n011, \.\.\. \(100 in all\)"):
        Topology.from_data({"name": "t", "nodes": nodes, "links": [["n000", "zz"]]})
