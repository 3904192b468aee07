"""The run-dataset contract: the JSON lines' rules (:mod:`contract.lines`, re-exported here) and the
``meta.json`` / ``topology.json`` models.

A run directory holds ``meta.json``, ``topology.json``, ``events/*.jsonl``,
``actions.jsonl`` and ``pings.jsonl``. The lines' fields, event types and validators live in
:mod:`contract.lines` (plain Python: a node imports that module and never loads pydantic); every
name of it is importable from here as well. Human-readable version: ``docs/run-dataset.md``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic import Field as PField

from contract.lines import __all__ as _LINES_ALL
from contract.lines import (
    ACTION_FIELDS,
    ACTIONS,
    COMMON_FIELDS,
    DIRECTIONS,
    DISRUPTIVE_ACTIONS,
    EVENT_FIELDS,
    EVENT_TYPES,
    Field,
    FIELD_KINDS,
    META_BACKENDS,
    META_CLOCKS,
    META_FIELDS,
    PING_FIELDS,
    PING_MODES,
    Reason,
    RUN_FILES,
    SCHEMA_VERSION,
    validate_event,
    validate_record,
    _HEX_KEY,
)

__all__ = [
    *_LINES_ALL,  # the lines' rules, re-exported
    "RunMeta",
    "AbMeta",
    "AB_ARMS",
    "MetaLink",
    "TopologyFile",
    "TopologyNode",
    "TopologyLink",
    "class_mix",
]


# --------------------------------------------------------------------------- meta.json / topology.json models
# pydantic (a core dependency, no Spark) so that a recorder can build and dump
# them, and pipeline.rundirs can validate what it reads with errors naming the field.



def _check_hex(value: str) -> str:
    if not _HEX_KEY.fullmatch(value):
        raise ValueError(f"{value!r} is not 64 lowercase hex digits")
    return value


class MetaLink(BaseModel):
    """One link in meta.json: endpoints, link class and how it is shaped."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    a: str
    b: str
    link_class: str = PField(alias="class")
    shaping_backend: str | None = None


AB_ARMS = ("a", "b", "mixed")


class AbMeta(BaseModel):
    """meta.json ``ab``: the run is arm ``arm`` of A/B experiment ``experiment`` for ``seed``.

    ``a`` and ``b`` are the canonical variant spec texts of the two arms (the same in every run of the
    experiment); the pipeline pairs the arms' runs by ``seed`` (pipeline.jobs.ab). Arm ``mixed`` (``snekbed ab
    --mixed``) ran A's and B's nodes together; its spec text is ``A+B``."""

    model_config = ConfigDict(extra="allow")
    experiment: str = PField(min_length=1)
    arm: Literal["a", "b", "mixed"]
    seed: int
    a: str = PField(min_length=1)
    b: str = PField(min_length=1)

    @property
    def spec(self) -> str:
        """The spec text of this run's arm."""
        return self.a if self.arm == "a" else self.b if self.arm == "b" else f"{self.a}+{self.b}"


class RunMeta(BaseModel):
    """meta.json. Unknown keys are kept (forward compatible).

    ``variant`` is the run's canonical variant spec text (``snek``, ``snek,root_filter=1``);
    ``variants`` names the nodes that ran another spec; ``ab`` marks one arm of an A/B experiment.
    """

    model_config = ConfigDict(extra="allow")
    run_id: str = PField(min_length=1)
    backend: Literal["inproc", "docker", "compose"]
    variant: str
    topology: str
    seed: int | None = None
    clock: Literal["virtual", "real"]
    link_delay_ms: float | None = None
    boot_spread_s: float | None = None
    nodes: dict[str, str]
    links: list[MetaLink]
    versions: dict[str, str] = PField(default_factory=dict)
    started_wall_ts: float
    observer: dict[str, Any] = PField(default_factory=dict)
    variants: dict[str, str] | None = None
    ab: AbMeta | None = None

    @field_validator("nodes")
    @classmethod
    def _keys_are_hex(cls, nodes: dict[str, str]) -> dict[str, str]:
        for key in nodes.values():
            _check_hex(key)
        return nodes


class TopologyNode(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class TopologyLink(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    a: str
    b: str
    link_class: str = PField(alias="class")


class TopologyFile(BaseModel):
    """topology.json: the topology the run was started with."""

    model_config = ConfigDict(extra="allow")
    name: str
    nodes: list[TopologyNode]
    links: list[TopologyLink]


def class_mix(classes: list[str] | tuple[str, ...]) -> str:
    """Canonical name of a mix of link classes: sorted distinct classes joined by '+'; '' if none."""
    return "+".join(sorted(set(classes)))
