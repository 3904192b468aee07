"""Read topology files into :class:`~orchestrator.model.topology.Topology`.

Formats, chosen by suffix (and, for ``.json``, by content):

* ``.yaml`` / ``.yml``: the native format (docs/topology.md).
* ``.txt``: a pinecone simulator edge list. Each non-empty line is a walk; every
  two consecutive names on it are linked. ``#`` starts a comment. Like the
  reference simulator (cmd/pineconesim/main.go), a pair that appears again
  (in either order) makes no second peering and a name that follows itself
  (``a b c c``) makes no self-link; both are skipped with a TopologyWarning
  naming the file and the lines.
* ``.json``: NetJSON ``NetworkGraph`` (``"type": "NetworkGraph"``), meshnet-lab
  JSON (``links`` of ``source``/``target``, ``nodes`` optional), or the native
  document as written by ``Topology.to_json()``.

Formats that cannot name a link class (edge lists, meshnet-lab, NetJSON links
without ``properties.class``) use ``default_class`` ("pipe": no shaping).

Every problem raises TopologyError with the file, the 1-based line (when it can
be known) and the field, e.g. ``mesh.yaml:12: links[3].b: unknown node 'zz'``.
Nothing is created before a file validates.
"""

from __future__ import annotations

import itertools
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from orchestrator.model.mobility_loaders import read_traces
from orchestrator.model.topology import NODE_NAME_RE, Loc, NodeSpec, Topology, TopologyError, format_loc

__all__ = ["TopologyWarning", "load_topology", "load_yaml", "load_json", "load_edge_list", "parse_yaml", "parse_json", "parse_edge_list"]

YAML_SUFFIXES = {".yaml", ".yml"}
JSON_SUFFIXES = {".json", ".netjson"}
EDGE_LIST_SUFFIXES = {".txt", ".edges"}
_NODE_OPTIONS = set(NodeSpec.model_fields) - {"name"}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same results, ~10x faster


def load_topology(path: str | Path, *, default_class: str = "pipe",
                  on_warning: Callable[[str], None] | None = None) -> Topology:
    """Read ``path`` as YAML, JSON or a pinecone edge list (by suffix).

    What the file has that is skipped (TopologyWarning) goes to ``on_warning`` (the CLIs print it
    on stderr) or, without one, through :mod:`warnings`. Raises TopologyError (unreadable file,
    unknown suffix, syntax or validation problems).
    """
    if on_warning is None:
        return _load_topology(Path(path), default_class)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TopologyWarning)
        topo = _load_topology(Path(path), default_class)
    for w in caught:
        if issubclass(w.category, TopologyWarning):
            on_warning(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return topo


def _load_topology(path: Path, default_class: str) -> Topology:
    suffix = path.suffix.lower()
    if suffix in YAML_SUFFIXES:
        return load_yaml(path)
    if suffix in JSON_SUFFIXES:
        return load_json(path, default_class=default_class)
    if suffix in EDGE_LIST_SUFFIXES:
        return load_edge_list(path, default_class=default_class)
    known = ", ".join(sorted(YAML_SUFFIXES | JSON_SUFFIXES | EDGE_LIST_SUFFIXES))
    raise TopologyError(f"unknown topology format {suffix or '(no suffix)'!r}; expected one of {known}", file=str(path))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read the file: {exc.strerror or exc}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise TopologyError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from exc


def _default_name(path: Path | str | None) -> str:
    """A valid topology name from a file stem ("grid4-0049.txt" -> "grid4-0049")."""
    stem = Path(path).stem if path else ""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-_.")[:64]
    return name or "topology"


# -- YAML -----------------------------------------------------------------------------------------


def load_yaml(path: str | Path) -> Topology:
    """Read a native YAML topology file. Raises TopologyError."""
    path = Path(path)
    return parse_yaml(_read(path), file=str(path))


def parse_yaml(text: str, *, file: str | None = None) -> Topology:
    """Validate YAML ``text`` (native format); ``file`` is only used in messages. Raises TopologyError."""
    data, lines = _compose(text, file=file, what="YAML")
    if not isinstance(data, dict):
        raise TopologyError(
            f"the document must be a mapping with 'nodes' and 'links', got {type(data).__name__}", file=file, line=1
        )
    data.setdefault("name", _default_name(file))
    return _with_traces(Topology.from_data(data, file=file, lines=lines), lines)


def _with_traces(topo: Topology, lines: dict[Loc, int]) -> Topology:
    """``topo``, once the ns-2 traces its nodes replay have been read and found sound (TopologyError if not)."""
    read_traces(topo, lines)
    return topo


def _compose(text: str, *, file: str | None, what: str) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML (or JSON, a YAML subset) into data plus a location -> line table.

    Names (``name``, ``nodes[i].name``, ``links[i].a/.b``) that YAML would read as
    numbers or booleans keep their text: ``010`` stays "010", not 8.
    Raises TopologyError for syntax errors, an empty document and duplicate keys.
    """
    loader = _LOADER(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise TopologyError(f"empty {what} document", file=file, line=1)
        lines: dict[Loc, int] = {}
        raw: dict[Loc, ScalarNode] = {}
        _walk(root, (), lines, raw, file=file, stack=set())
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        column = f" at column {mark.column + 1}" if mark else ""
        context = f" ({exc.context} from line {exc.context_mark.line + 1})" if exc.context and exc.context_mark else ""
        raise TopologyError(
            f"{what} syntax error{column}: {exc.problem}{context}",
            file=file,
            line=mark.line + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"{what} error: {exc}", file=file) from None
    finally:
        loader.dispose()
    _restore_names(data, raw)
    return data, lines


def _walk(
    node: Node, loc: Loc, lines: dict[Loc, int], raw: dict[Loc, ScalarNode], *, file: str | None, stack: set[int]
) -> None:
    """Record the line of every mapping key and sequence item; reject duplicate keys."""
    if id(node) in stack:  # a recursive alias: construction will deal with it
        return
    stack.add(id(node))
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in seen:
                raise TopologyError(
                    f"duplicate key {key!r} (first at line {seen[key]})",
                    file=file,
                    line=line,
                    field=format_loc((*loc, key)),
                )
            seen[key] = line
            lines[(*loc, key)] = line
            _walk(value_node, (*loc, key), lines, raw, file=file, stack=stack)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*loc, i)] = item.start_mark.line + 1
            _walk(item, (*loc, i), lines, raw, file=file, stack=stack)
    elif isinstance(node, ScalarNode) and not node.style:  # plain: None (PyYAML) or "" (libyaml)
        raw[loc] = node
    stack.discard(id(node))


def _is_name_loc(loc: Loc) -> bool:
    match loc:
        case ("name",) | ("nodes", int()) | ("nodes", int(), "name"):
            return True
        case ("links", int(), "a" | "b") | ("links", int(), 0 | 1):
            return True
    return False


def _restore_names(data: Any, raw: dict[Loc, ScalarNode]) -> None:
    """Put back the source text of plain scalars in name positions that YAML typed as non-strings."""
    for loc, node in raw.items():
        if not _is_name_loc(loc) or node.tag == "tag:yaml.org,2002:null":
            continue
        parent = data
        try:
            for part in loc[:-1]:
                parent = parent[part]
            if not isinstance(parent[loc[-1]], str):
                parent[loc[-1]] = node.value
        except (KeyError, IndexError, TypeError):
            continue


# -- JSON -----------------------------------------------------------------------------------------


def load_json(path: str | Path, *, default_class: str = "pipe") -> Topology:
    """Read NetJSON NetworkGraph, meshnet-lab or native JSON. Raises TopologyError."""
    path = Path(path)
    return parse_json(_read(path), file=str(path), default_class=default_class)


def parse_json(text: str, *, file: str | None = None, default_class: str = "pipe") -> Topology:
    """Validate JSON ``text``, sniffing the dialect from its content. Raises TopologyError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"JSON syntax error at column {exc.colno}: {exc.msg}", file=file, line=exc.lineno) from None
    try:
        _, lines = _compose(text, file=file, what="JSON")
    except TopologyError as exc:
        if exc.message.startswith("duplicate key"):
            raise
        lines = {}  # valid JSON that PyYAML cannot read: fields, but no lines
    if not isinstance(data, dict):
        raise TopologyError(f"the document must be a JSON object, got {type(data).__name__}", file=file, line=1)
    if "type" in data:
        if data["type"] != "NetworkGraph":
            raise TopologyError(
                f"unsupported NetJSON type {data['type']!r} (only NetworkGraph)",
                file=file,
                line=lines.get(("type",)),
                field="type",
            )
        native, loc_map = _from_netjson(data, file=file, lines=lines, default_class=default_class)
        return Topology.from_data(native, file=file, lines=lines, loc_map=loc_map)
    if "name" not in data and "links" in data:
        native, loc_map = _from_meshnet(data, file=file, lines=lines, default_class=default_class)
        return Topology.from_data(native, file=file, lines=lines, loc_map=loc_map)
    data.setdefault("name", _default_name(file))
    return _with_traces(Topology.from_data(data, file=file, lines=lines), lines)


def _need_list(data: dict[str, Any], key: str, *, file: str | None, lines: dict[Loc, int], required: bool) -> list[Any]:
    value = data.get(key, None if required else [])
    if not isinstance(value, list):
        problem = "is missing" if value is None else f"must be a list, got {type(value).__name__}"
        raise TopologyError(f"'{key}' {problem}", file=file, line=lines.get((key,)), field=key)
    return value


def _need_dict(item: Any, loc: Loc, *, file: str | None, lines: dict[Loc, int]) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TopologyError(
            f"must be an object, got {type(item).__name__}", file=file, line=lines.get(loc), field=format_loc(loc)
        )
    return item


def _id(item: dict[str, Any], key: str, loc: Loc, *, file: str | None, lines: dict[Loc, int]) -> str:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int):
        got = "missing" if value is None else f"got {value!r}"
        raise TopologyError(
            f"must be a string or an integer ({got})",
            file=file,
            line=lines.get((*loc, key), lines.get(loc)),
            field=format_loc((*loc, key)),
        )
    return str(value)


def _from_netjson(
    data: dict[str, Any], *, file: str | None, lines: dict[Loc, int], default_class: str
) -> tuple[dict[str, Any], Callable[[Loc], Loc]]:
    """NetJSON NetworkGraph -> native document, plus a native -> NetJSON location map.

    Node ``properties`` may hold NodeSpec options (key_seed, variant, ...); link
    ``properties`` may hold ``class`` and ``shaping``. Other properties, ``cost``
    and ``label`` are NetJSON's own and are not used.
    """
    nodes_in = _need_list(data, "nodes", file=file, lines=lines, required=True)
    links_in = _need_list(data, "links", file=file, lines=lines, required=True)
    nodes = []
    for i, item in enumerate(nodes_in):
        item = _need_dict(item, ("nodes", i), file=file, lines=lines)
        props = item.get("properties") or {}
        props = props if isinstance(props, dict) else {}
        nodes.append(
            {
                "name": _id(item, "id", ("nodes", i), file=file, lines=lines),
                **{k: v for k, v in props.items() if k in _NODE_OPTIONS},
            }
        )
    links = []
    for i, item in enumerate(links_in):
        item = _need_dict(item, ("links", i), file=file, lines=lines)
        props = item.get("properties") or {}
        props = props if isinstance(props, dict) else {}
        link = {
            "a": _id(item, "source", ("links", i), file=file, lines=lines),
            "b": _id(item, "target", ("links", i), file=file, lines=lines),
            "class": props.get("class", default_class),
        }
        if props.get("shaping") is not None:
            link["shaping"] = props["shaping"]
        links.append(link)
    label = data.get("label")
    name = (
        label
        if isinstance(label, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", label)
        else _default_name(file)
    )
    return {"name": name, "nodes": nodes, "links": links}, _netjson_loc


def _netjson_loc(loc: Loc) -> Loc:
    """Where a native location lives in the NetJSON document."""
    match loc:
        case ("nodes", int() as i, "name", *_):
            return ("nodes", i, "id")
        case ("nodes", int() as i, str() as field, *rest):
            return ("nodes", i, "properties", field, *rest)
        case ("links", int() as i, "a", *_):
            return ("links", i, "source")
        case ("links", int() as i, "b", *_):
            return ("links", i, "target")
        case ("links", int() as i, str() as field, *rest):
            return ("links", i, "properties", field, *rest)
    return loc


def _from_meshnet(
    data: dict[str, Any], *, file: str | None, lines: dict[Loc, int], default_class: str
) -> tuple[dict[str, Any], Callable[[Loc], Loc]]:
    """meshnet-lab JSON -> native document (node ids may be integers; ``nodes`` is optional).

    Links may carry our ``class`` and ``shaping``; meshnet-lab's raw ``source_tc`` /
    ``target_tc`` tc strings are refused rather than silently dropped.
    """
    links_in = _need_list(data, "links", file=file, lines=lines, required=True)
    nodes_in = _need_list(data, "nodes", file=file, lines=lines, required=False)
    names: dict[str, None] = {}
    for i, item in enumerate(nodes_in):
        names[
            _id(_need_dict(item, ("nodes", i), file=file, lines=lines), "id", ("nodes", i), file=file, lines=lines)
        ] = None
    links = []
    for i, item in enumerate(links_in):
        item = _need_dict(item, ("links", i), file=file, lines=lines)
        for tc_key in ("source_tc", "target_tc", "tc"):
            if tc_key in item:
                raise TopologyError(
                    "raw tc strings are not supported; give the link a 'class' and/or 'shaping' "
                    "(delay_ms, loss_pct, rate_mbit, ...)",
                    file=file,
                    line=lines.get(("links", i, tc_key)),
                    field=format_loc(("links", i, tc_key)),
                )
        a = _id(item, "source", ("links", i), file=file, lines=lines)
        b = _id(item, "target", ("links", i), file=file, lines=lines)
        names.setdefault(a)
        names.setdefault(b)
        link: dict[str, Any] = {"a": a, "b": b, "class": item.get("class", default_class)}
        if item.get("shaping") is not None:
            link["shaping"] = item["shaping"]
        links.append(link)
    native = {"name": _default_name(file), "nodes": [{"name": n} for n in names], "links": links}
    explicit = len(nodes_in)

    def loc_map(loc: Loc) -> Loc:
        match loc:
            case ("nodes", int() as i, *_) if i < explicit:
                return ("nodes", i, "id")
            case ("nodes", int(), *_):
                return ("links",)  # a node known only from the links
            case ("links", int() as i, "a", *_):
                return ("links", i, "source")
            case ("links", int() as i, "b", *_):
                return ("links", i, "target")
        return loc

    return native, loc_map


# -- pinecone edge lists ----------------------------------------------------------------------------

_SKIPPED_SHOWN = 10


class TopologyWarning(UserWarning):
    """Something in a topology file was skipped, as the reference's loader skips it (the file still loads)."""


def _skipped_sentence(file: str | None, what: str, skipped: list[str]) -> str:
    shown = "; ".join(skipped[:_SKIPPED_SHOWN])
    more = f"; and {len(skipped) - _SKIPPED_SHOWN} more" if len(skipped) > _SKIPPED_SHOWN else ""
    plural = "s" if len(skipped) > 1 else ""
    return f"{file or '<text>'}: {len(skipped)} {what}{plural} skipped (no peering made): {shown}{more}"



def load_edge_list(path: str | Path, *, default_class: str = "pipe") -> Topology:
    """Read a pinecone simulator edge list (one walk per line). Raises TopologyError."""
    path = Path(path)
    return parse_edge_list(_read(path), file=str(path), default_class=default_class)


def parse_edge_list(
    text: str, *, file: str | None = None, default_class: str = "pipe", name: str | None = None
) -> Topology:
    """Parse edge-list ``text``: one peering per distinct pair, every link of class ``default_class``.

    Errors name the line and the token (``token 3``); validation errors name the
    line where the node or link first appeared. Raises TopologyError.

    As the reference simulator's loader does, a self-link (a name that follows itself,
    ``a b c c``) and a pair already linked (in either order) make no peering; the names
    are still nodes. Each kind is skipped with one TopologyWarning naming the file and
    every line (and, for a repeat, the line of the peering that was made).
    """
    nodes: dict[str, int] = {}  # name -> index
    pairs: dict[frozenset[str], int] = {}  # pair -> line of its peering
    self_links: list[str] = []
    repeated: list[str] = []
    links: list[dict[str, Any]] = []
    lines: dict[Loc, int] = {}
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        tokens = raw_line.split("#", 1)[0].split()
        for k, token in enumerate(tokens, 1):
            if not NODE_NAME_RE.match(token):
                raise TopologyError(
                    f"bad node name {token!r}: use 1-40 characters of A-Z a-z 0-9 _ . - "
                    "starting with a letter or digit",
                    file=file,
                    line=lineno,
                    field=f"token {k}",
                )
            if token not in nodes:
                lines[("nodes", len(nodes))] = lineno
                nodes[token] = len(nodes)
        for k, (a, b) in enumerate(itertools.pairwise(tokens), 2):
            if a == b:  # the reference makes the node, never the peering
                self_links.append(f"line {lineno} token {k}: {a!r} follows itself")
                continue
            if (pair := frozenset((a, b))) in pairs:
                repeated.append(f"line {lineno} token {k}: {a!r}-{b!r} (first on line {pairs[pair]})")
                continue
            pairs[pair] = lineno
            lines[("links", len(links))] = lineno
            links.append({"a": a, "b": b, "class": default_class})
    if not nodes:
        raise TopologyError("no nodes: every line is empty or a comment", file=file, line=None)
    for what, skipped in (("self-link", self_links), ("repeated link", repeated)):
        if skipped:
            warnings.warn(TopologyWarning(_skipped_sentence(file, what, skipped)), stacklevel=2)
    data = {"name": name or _default_name(file), "nodes": [{"name": n} for n in nodes], "links": links}
    return Topology.from_data(data, file=file, lines=lines)
