"""The topology model: which nodes exist and which links join them.

A :class:`Topology` is plain validated data (pydantic v2, ``extra="forbid"``,
frozen). Its ``.graph()`` gives a networkx ``MultiGraph`` for every graph
question (paths, components, the test oracle). Files are read by
``orchestrator.model.topology_loaders.load_topology`` (YAML, pinecone edge lists,
NetJSON / meshnet-lab JSON); generators live in ``orchestrator.model.generators``.

Link classes come from ``contract.links``: a link names a class (``lan``,
``bluetooth``, ...) and may carry ``shaping`` overrides of the class's
``LinkShape`` fields; a topology may add or override classes in ``classes``.

Every problem is reported as a :class:`TopologyError` naming the file, the line
(when known) and the field as a dotted path such as ``links[3].b``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import (BaseModel, ConfigDict, Field, FiniteFloat, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from contract.links import LinkClass, LinkShape, default_classes, resolve_class
from node.core.crypto import derive_seed
from node.core.variants import VariantSpec

from orchestrator.model.adversary_spec import check_adversary
from orchestrator.model.mobility_spec import (MobilitySpec, MovementSpec, RadioSpec, mobility_problems, tag_problem,
                                             untag)
from orchestrator.model.placement import PlacementSpec, placement_problems

__all__ = [
    "TopologyError",
    "NodeSpec",
    "LinkSpec",
    "Topology",
    "Loc",
    "format_loc",
    "CUSTOM_CLASS",
]

Loc = tuple[str | int, ...]
"""A location inside a topology document: ("links", 3, "b") is ``links[3].b``."""

NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
TOPOLOGY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CUSTOM_CLASS = "custom"
_MAX_LISTED = 12


def format_loc(loc: Iterable[str | int]) -> str | None:
    """("links", 3, "class") -> "links[3].class"; () -> None."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or None


def _listing(names: Iterable[str]) -> str:
    """A short, sorted listing of names for error messages."""
    names = sorted(names)
    if len(names) <= _MAX_LISTED:
        return ", ".join(names)
    return ", ".join(names[:_MAX_LISTED]) + f", ... ({len(names)} in all)"


class TopologyError(ValueError):
    """A topology (file or data) is invalid.

    ``file``, ``line`` (1-based, None when unknown) and ``field`` (a dotted path
    like ``links[3].class``, None for the whole document) say where; ``message``
    says what. ``problems`` holds every problem found (this one first).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        others: Iterable[TopologyError] = (),
    ) -> None:
        self.message, self.file, self.line, self.field = message, file, line, field
        self.problems: tuple[TopologyError, ...] = (self, *others)
        super().__init__(self._render())

    def location(self) -> str:
        """``file:line: field`` with the unknown parts left out."""
        where = self.file or "<topology>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.field}" if self.field else where

    def _render(self) -> str:
        first = f"{self.location()}: {self.message}"
        rest = self.problems[1:]
        if not rest:
            return first
        return "\n".join([first, f"  and {len(rest)} more:", *(f"  {p.location()}: {p.message}" for p in rest)])


class _Problems(ValueError):
    """Raised inside the model validator; carries (loc, message) pairs past pydantic."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        super().__init__(problems[0][1])
        self.problems = problems


class NodeSpec(BaseModel):
    """One overlay node. ``name`` doubles as the container hostname."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    name: str
    key_seed: str | None = Field(None, description="hex of a 32-byte ed25519 seed; None = derived from run seed + name")
    variant: str | None = Field(None, description="protocol variant spec (snek, snek-s0, legacy, with ,knob=value "
                                "pairs); None = the run's --variant (docs/variants.md)")
    knobs: dict[str, str | bool | int | float] = Field(default_factory=dict, description="variant knobs for this node")
    multicast: bool = False
    admin_port: int | None = Field(None, ge=1, le=65535)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    host: bool = Field(False, description="runs outside Docker (`snekbed node` started by the user on the Docker "
                       "host); the Docker backend prints its command and observes it (docs/topology.md)")
    admin: str | None = Field(None, description="host nodes: the admin API address HOST:PORT its process serves "
                              "[default: 127.0.0.1 and a free port]")
    listen: str | None = Field(None, description="host nodes: HOST:PORT it accepts peers on (needed when another "
                               "host node dials it) [default: no listener; it dials its container peers]")
    placement: list[str] = Field(default_factory=list, description="swarm backend: placement constraints of the "
                                 "node's service, e.g. node.labels.site==a (docs/orchestrator.md); others ignore them")
    on_host: str | None = Field(None, description="swarm backend: the host it runs on; written `host: h2` "
                                "(docs/multi-host.md, Placement); others ignore it")
    position: tuple[FiniteFloat, FiniteFloat] | None = Field(None, description="[x, y] in metres (docs/mobility.md)")
    mobility: MobilitySpec | None = Field(None, description="how the node moves: a model and its parameters "
                                          "(docs/mobility.md)")
    adversary: str | None = Field(None, description="adversarial from its start: a `snekbed node --adversary` spec, "
                                  "e.g. greyhole:forward=0.5 or drop:bootstrap=100 (docs/attacks.md)")

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        """A bare name in a node list (``- a``) means ``{name: a}``."""
        if isinstance(data, str) or (isinstance(data, int) and not isinstance(data, bool)):
            return {"name": str(data)}
        if isinstance(data, dict) and isinstance(data.get("host"), str) and "on_host" not in data:
            data = {k: v for k, v in data.items() if k != "host"} | {"on_host": data["host"]}  # host: h2 pins it
        return data

    @field_validator("name")
    @classmethod
    def _name_is_hostname(cls, v: str) -> str:
        if not NODE_NAME_RE.match(v):
            raise ValueError(
                f"node name {v!r} must be 1-40 characters of A-Z a-z 0-9 _ . - starting with a letter or digit "
                "(it becomes a container hostname)"
            )
        return v

    @field_validator("admin", "listen")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is None:
            return None
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT with a port 1-65535, got {v!r}")
        return v

    @field_validator("variant")
    @classmethod
    def _variant_is_known(cls, v: str | None) -> str | None:
        return None if v is None else str(VariantSpec.parse(v))  # VariantError is a ValueError: pydantic reports it

    @field_validator("knobs")
    @classmethod
    def _knobs_are_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        VariantSpec.of("snek", v)  # raises VariantError (a ValueError) naming the bad knob
        return v

    @field_validator("adversary")
    @classmethod
    def _adversary_ok(cls, v: str | None, info: ValidationInfo) -> str | None:
        return None if v is None else check_adversary(v, info.data.get("variant"))  # the flag's parser and message

    def variant_spec(self, default: VariantSpec | None = None) -> VariantSpec:
        """The variant this node runs: its own ``variant`` and ``knobs`` on top of the run's ``default``."""
        base = VariantSpec.parse(self.variant) if self.variant is not None else (default or VariantSpec())
        return base.with_knobs(self.knobs) if self.knobs else base

    @field_validator("key_seed")
    @classmethod
    def _seed_is_32_bytes_hex(cls, v: str | None) -> str | None:
        if v is None:
            return None
        try:
            raw = bytes.fromhex(v)
        except ValueError:
            raise ValueError(f"key_seed must be hexadecimal, got {v!r}") from None
        if len(raw) != 32:
            raise ValueError(f"key_seed must be 32 bytes (64 hex digits), got {len(raw)} bytes")
        return raw.hex()

    def seed_bytes(self, run_seed: str | int | bytes) -> bytes:
        """The node's 32-byte key seed: ``key_seed`` if set, else derived from (run_seed, name)."""
        if self.key_seed is not None:
            return bytes.fromhex(self.key_seed)
        return derive_seed(run_seed, self.name)


class LinkSpec(BaseModel):
    """One peering between nodes ``a`` and ``b``; several links may join the same pair."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )

    a: str
    b: str
    link_class: str = Field("lan", alias="class")
    shaping: dict[str, Any] | None = Field(None, description="LinkShape fields overriding the class's shape")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """``[a, b]`` or ``[a, b, class]`` in a link list means ``{a: .., b: .., class: ..}``."""
        if isinstance(data, list | tuple) and len(data) in (2, 3):
            return dict(zip(("a", "b", "class"), data, strict=False))
        return data

    @property
    def pair(self) -> tuple[str, str]:
        """The endpoints in sorted order (an undirected link's identity, less its index)."""
        return (self.a, self.b) if self.a <= self.b else (self.b, self.a)


class Topology(BaseModel):
    """A named set of nodes and links, with optional link-class overrides.

    Construct it from data with :meth:`from_data` (raises TopologyError) or
    directly (raises pydantic.ValidationError).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    nodes: list[NodeSpec]
    links: list[LinkSpec] = []
    classes: dict[str, dict[str, Any]] = Field(default_factory=dict, description="link classes added or overridden")
    radios: dict[str, RadioSpec] = Field(default_factory=dict, description="radio technologies that link nodes in "
                                         "range (docs/mobility.md)")
    movement: MovementSpec | None = Field(None, description="the tick and duration of the movement, and groups")
    placement: PlacementSpec | None = Field(None, description="swarm backend: spread the nodes over the hosts, keep "
                                            "link classes on one host (docs/multi-host.md, Placement)")
    source: str | None = Field(None, exclude=True, description="where it was loaded from (not serialised)")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not TOPOLOGY_NAME_RE.match(v):
            raise ValueError(
                f"topology name {v!r} must be 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit"
            )
        return v

    @model_validator(mode="after")
    def _cross_check(self) -> Topology:
        problems = _cross_problems(self)
        if problems:
            raise _Problems(problems)
        return self

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_data(
        cls,
        data: Any,
        *,
        file: str | None = None,
        lines: Mapping[Loc, int] | None = None,
        loc_map: Callable[[Loc], Loc] | None = None,
    ) -> Topology:
        """Validate ``data`` (a dict in the native format) into a Topology.

        ``lines`` maps locations to 1-based line numbers for the messages;
        ``loc_map(loc) -> loc`` translates a native location into the source
        document's (used by the NetJSON loader). Raises TopologyError.
        """
        try:
            topo = cls.model_validate(data)
        except ValidationError as exc:
            raise _to_topology_error(exc, file=file, lines=lines or {}, loc_map=loc_map) from None
        return topo.model_copy(update={"source": file}) if file is not None else topo

    # -- graph views ----------------------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        """Node names in declaration order."""
        return [n.name for n in self.nodes]

    @property
    def pins(self) -> dict[str, str]:
        """Node -> the swarm host it is pinned to (``host: h2``)."""
        return {n.name: n.on_host for n in self.nodes if n.on_host is not None}

    def node(self, name: str) -> NodeSpec:
        """The NodeSpec called ``name``; raises ValueError for an unknown name."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise ValueError(f"topology {self.name!r} has no node {name!r}")

    def graph(self) -> nx.MultiGraph:
        """Nodes (attributes: the NodeSpec fields) and links (key = link index; attributes ``class``, ``shaping``)."""
        g = nx.MultiGraph(name=self.name)
        for n in self.nodes:
            g.add_node(n.name, **n.model_dump(exclude={"name"}))
        for i, link in enumerate(self.links):
            g.add_edge(link.a, link.b, key=i, index=i, **{"class": link.link_class, "shaping": link.shaping})
        return g

    def simple_graph(self) -> nx.Graph:
        """The graph with parallel links merged; edge attribute ``links`` lists their indices."""
        g = nx.Graph(name=self.name)
        for n in self.nodes:
            g.add_node(n.name, **n.model_dump(exclude={"name"}))
        for i, link in enumerate(self.links):
            if g.has_edge(link.a, link.b):
                g.edges[link.a, link.b]["links"].append(i)
            else:
                g.add_edge(link.a, link.b, links=[i], **{"class": link.link_class})
        return g

    def neighbours(self, name: str) -> list[str]:
        """Distinct neighbours of ``name``, sorted; raises ValueError for an unknown node."""
        self.node(name)
        out = {link.b if link.a == name else link.a for link in self.links if name in (link.a, link.b)}
        return sorted(out)

    def components(self) -> list[set[str]]:
        """Connected components, largest first (ties: by smallest name)."""
        comps = [set(c) for c in nx.connected_components(self.simple_graph())]
        return sorted(comps, key=lambda c: (-len(c), min(c)))

    def is_connected(self) -> bool:
        """True when every node can reach every other (an empty topology is not connected)."""
        return bool(self.nodes) and len(self.components()) == 1

    # -- link classes ---------------------------------------------------------------------------

    def link_class_of(self, index: int) -> LinkClass:
        """The effective netem LinkClass of ``links[index]``: its class with ``shaping`` applied.

        Raises IndexError for a bad index; the class itself was validated at load.
        """
        link = self.links[index]
        cls = resolve_class(link.link_class, self.classes or None)
        if not link.shaping:
            return cls
        shape = type(cls.shape).model_validate({**cls.shape.model_dump(), **link.shaping})
        return type(cls).model_validate({**cls.model_dump(), "shape": shape.model_dump()})

    # -- serialisation --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The native document (what YAML/JSON files hold), defaults left out for nodes and links."""
        return {
            "name": self.name,
            "nodes": [n.model_dump(mode="json", exclude_defaults=True) for n in self.nodes],
            "links": [link.model_dump(mode="json", by_alias=True, exclude_defaults=True) for link in self.links],
            **({"classes": self.classes} if self.classes else {}),
            **({"radios": {k: r.model_dump(mode="json", exclude_defaults=True) for k, r in self.radios.items()}}
               if self.radios else {}),
            **({"movement": self.movement.model_dump(mode="json", exclude_defaults=True)} if self.movement else {}),
            **({"placement": self.placement.model_dump(mode="json")} if self.placement is not None else {}),
        }

    def variants(self, default: VariantSpec | None = None) -> dict[str, VariantSpec]:
        """Every node's protocol variant: its own, else ``default`` (plain ``snek`` when None)."""
        return {n.name: n.variant_spec(default) for n in self.nodes}

    def with_variant(self, default: VariantSpec) -> Topology:
        """This topology with ``default`` written into every node that does not name its own variant
        (each node's ``variant`` then holds its whole spec, knobs included)."""
        nodes = [n.model_copy(update={"variant": str(n.variant_spec(default)), "knobs": {}}) for n in self.nodes]
        return self.model_copy(update={"nodes": nodes})

    def to_record(self) -> dict[str, Any]:
        """The document a run directory keeps as ``topology.json`` (docs/run-dataset.md): the
        native document with every link's class spelled out, defaults included."""
        doc = self.to_dict()
        doc["links"] = [{**d, "class": link.link_class} for d, link in zip(doc["links"], self.links, strict=True)]
        return doc

    def to_json(self, indent: int | None = 2) -> str:
        """The native document as JSON (loadable by load_topology from a .json file)."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_yaml(self) -> str:
        """The native document as YAML (loadable by load_topology from a .yaml file).

        Nodes without options are written as bare names, links as one flow mapping per line.
        """
        import yaml

        doc = self.to_dict()
        doc["nodes"] = [n["name"] if list(n) == ["name"] else n for n in doc["nodes"]]
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(doc, Dumper=dumper, sort_keys=False, default_flow_style=None, width=120)

    def to_netjson(self) -> dict[str, Any]:
        """A NetJSON NetworkGraph; node options and link class/shaping go into ``properties``."""
        return {
            "type": "NetworkGraph",
            "protocol": "snek",
            "version": "1",
            "metric": "hop",
            "label": self.name,
            "nodes": [
                {
                    "id": n.name,
                    **(
                        {"properties": p}
                        if (p := n.model_dump(mode="json", exclude={"name"}, exclude_defaults=True))
                        else {}
                    ),
                }
                for n in self.nodes
            ],
            "links": [
                {
                    "source": link.a,
                    "target": link.b,
                    "cost": 1.0,
                    "properties": {"class": link.link_class, **({"shaping": link.shaping} if link.shaping else {})},
                }
                for link in self.links
            ],
        }


def _cross_problems(topo: Topology) -> list[tuple[Loc, str]]:
    """Everything a single field cannot check: names, references, classes, shaping."""
    problems: list[tuple[Loc, str]] = []
    if not topo.nodes:
        problems.append((("nodes",), "a topology needs at least one node"))
    first_at: dict[str, int] = {}
    for i, n in enumerate(topo.nodes):
        if n.name in first_at:
            problems.append(
                (("nodes", i, "name"), f"duplicate node name {n.name!r} (first defined at nodes[{first_at[n.name]}])")
            )
        else:
            first_at[n.name] = i

    hosts = {n.name: n for n in topo.nodes if n.host}
    for i, n in enumerate(topo.nodes):
        if not n.host:
            for what in ("admin", "listen"):
                if getattr(n, what) is not None:
                    problems.append((("nodes", i, what), f"{what!r} is for host nodes (host: true); a container's "
                                     "addresses are planned"))
        elif n.multicast:
            problems.append((("nodes", i, "multicast"), "a host node cannot join the containers' multicast LAN "
                             "segment"))
    for i, link in enumerate(topo.links):
        if link.a in hosts and link.b in hosts:
            listener = hosts[max(link.a, link.b)]
            if listener.listen is None:
                where = topo.node_names.index(listener.name)
                problems.append(((("nodes", where, "listen")), f"host node {listener.name!r} needs 'listen' "
                                 f"(HOST:PORT): host node {min(link.a, link.b)!r} dials it (links[{i}])"))
    known_classes = set(default_classes()) | set(topo.classes)
    problems += placement_problems(topo.node_names, topo.pins, [(ln.a, ln.b, ln.link_class) for ln in topo.links],
                                   topo.placement, known_classes)
    for name in topo.classes:
        problems += _class_problems(name, topo.classes)
    shape_fields = _shape_fields()

    for i, link in enumerate(topo.links):
        for end in ("a", "b"):
            who = getattr(link, end)
            if who not in first_at:
                problems.append((("links", i, end), f"unknown node {who!r} (known: {_listing(first_at)})"))
        if link.a == link.b:
            problems.append((("links", i, "b"), f"self-link: both ends are {link.a!r}"))
        if link.link_class not in known_classes:
            problems.append(
                (("links", i, "class"), f"unknown link class {link.link_class!r} (known: {_listing(known_classes)})")
            )
            continue
        if link.link_class == CUSTOM_CLASS and not link.shaping:
            problems.append(
                (("links", i, "shaping"), "class 'custom' needs 'shaping' (e.g. {delay_ms: 20, loss_pct: 1})")
            )
        if link.shaping:
            problems += _shaping_problems(topo, i, shape_fields)
    return problems + mobility_problems(topo.nodes, topo.radios, topo.movement, known_classes)


def _shape_fields() -> set[str]:
    return set(LinkShape.model_fields)


def _class_problems(name: str, overrides: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    """Validate one entry of ``classes`` through netem's own resolver."""
    try:
        resolve_class(name, overrides)
    except (ValueError, TypeError, KeyError) as exc:
        cause = exc if isinstance(exc, ValidationError) else exc.__cause__
        if isinstance(cause, ValidationError):
            return [(("classes", name, *err["loc"]), _pydantic_message(err)) for err in cause.errors()]
        return [(("classes", name), getattr(exc, "reason", None) or str(exc))]
    return []


def _shaping_problems(topo: Topology, i: int, shape_fields: set[str]) -> list[tuple[Loc, str]]:
    link = topo.links[i]
    assert link.shaping is not None
    unknown = sorted(set(link.shaping) - shape_fields)
    if unknown:
        return [
            (("links", i, "shaping", k), f"unknown shaping field {k!r} (allowed: {_listing(shape_fields)})")
            for k in unknown
        ]
    try:
        base = resolve_class(link.link_class, topo.classes or None)
    except (ValueError, KeyError):
        return []  # the class itself is broken: reported under classes.<name>
    try:
        LinkShape.model_validate({**base.shape.model_dump(), **link.shaping})
    except ValidationError as exc:
        return [(("links", i, "shaping", *err["loc"]), _pydantic_message(err)) for err in exc.errors()]
    return []


def _pydantic_message(err: Mapping[str, Any]) -> str:
    """A readable message for one pydantic error dict."""
    kind, msg = err.get("type", ""), str(err.get("msg", ""))
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "value_error" and "error" in err.get("ctx", {}):
        return str(err["ctx"]["error"])
    if "input" in err and kind not in ("model_type", "dict_type", "list_type"):
        return f"{msg} (got {err['input']!r})"
    return msg


def _to_topology_error(
    exc: ValidationError, *, file: str | None, lines: Mapping[Loc, int], loc_map: Callable[[Loc], Loc] | None
) -> TopologyError:
    """Turn pydantic's errors (and our cross-check problems) into one TopologyError."""
    found: list[tuple[Loc, str]] = []
    for err in exc.errors():
        error = err.get("ctx", {}).get("error")
        if isinstance(error, _Problems):
            found += error.problems
        elif (tagged := tag_problem(err)) is not None:
            found.append(tagged)
        else:
            found.append((untag(tuple(err["loc"])), _pydantic_message(err)))
    made: list[TopologyError] = []
    for loc, message in found:
        src_loc = tuple(loc_map(loc)) if loc_map else loc
        made.append(TopologyError(message, file=file, line=_line_of(src_loc, lines), field=format_loc(src_loc)))
    first, *rest = made
    return TopologyError(first.message, file=first.file, line=first.line, field=first.field, others=rest)


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    """The line of ``loc`` or of its nearest enclosing location that has one."""
    for cut in range(len(loc), -1, -1):
        if (line := lines.get(loc[:cut])) is not None:
            return line
    return None

