"""The series the Grafana dashboards query, read off the PromQL in dashboards/*.json, and a check that an
exposition (a node's ``/metrics``) serves each of them.

A selector is a metric name with its optional ``{label="value"}`` / ``{label=~"re"}`` (``!=``, ``!~``)
matchers. Function names (a word before ``(``), grouping clauses (``by (...)``, ``on(...)``...), range
durations (``[1m]``), numbers and operators are not selectors; ``label_values(SELECTOR, label)`` (a
template variable's query) stands for its selector. Matchers on the labels Prometheus adds from the scrape
target (``run``, ``node``...; docs/monitoring.md) are left out: a node does not serve them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["DASHBOARDS", "TARGET_LABELS", "Selector", "dashboard_selectors", "family", "missing", "samples",
           "selectors"]

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards"
#: labels Prometheus adds to a node's series from its scrape target, not served by the node
TARGET_LABELS = frozenset({"instance", "job", "run", "node", "node_key"})

_STRING = r'"(?:[^"\\]|\\.)*"'
_MATCHER = re.compile(rf"\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*({_STRING})\s*,?")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_LABEL_VALUES = re.compile(r"\blabel_values\(\s*([^,()]*(?:\{[^}]*\})?)\s*(?:,\s*\w+\s*)?\)")
_TOKEN = re.compile(rf"([a-zA-Z_:][\w:]*)\s*(\{{(?:[^}}\"]|{_STRING})*\}})?|\{{(?:[^}}\"]|{_STRING})*\}}|\[[^\]]*\]"
                    rf"|{_STRING}|\d[\w.]*|\S")  # a selector, a bare {...}, a range, a string, a number, anything else
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})


@dataclass(frozen=True)
class Selector:
    """One metric name and its matchers ``(label, op, value)``; ``where`` names the dashboard and query."""

    name: str
    matchers: tuple[tuple[str, str, str], ...]
    where: str

    def promql(self) -> str:
        """The selector as PromQL again: ``name{label="value",...}``."""
        return self.name + "{" + ",".join(f"{k}{op}{json.dumps(v)}" for k, op, v in self.matchers) + "}"

    @property
    def is_counter(self) -> bool:
        """A counter's sample (or a histogram's bucket, count or sum), by the naming convention."""
        return re.search(r"_(total|bucket|count|sum)$", self.name) is not None

    def matches(self, labels: Mapping[str, str]) -> bool:
        for label, op, value in self.matchers:
            got = labels.get(label, "")
            ok = {"=": got == value, "!=": got != value, "=~": re.fullmatch(value, got) is not None,
                  "!~": re.fullmatch(value, got) is None}[op]  # fmt: skip
            if not ok:
                return False
        return True


def selectors(expr: str, where: str = "") -> list[Selector]:
    """Every selector of PromQL ``expr``. Raises ValueError for a matcher it cannot read."""
    expr = _LABEL_VALUES.sub(r"\1", _GROUPING.sub(" ", expr))
    out = []
    for m in _TOKEN.finditer(expr):
        name, braces = m.group(1), m.group(2)
        if name is None or name.lower() in _KEYWORDS or expr[m.end():].lstrip().startswith("("):
            if m.group(0).startswith("{"):
                raise ValueError(f"{where}: a selector without a metric name: {m.group(0)}")
            continue
        out.append(Selector(name, _matchers(braces or "{}", where), where))
    return out


def _matchers(braces: str, where: str) -> tuple[tuple[str, str, str], ...]:
    inner, out, i = braces[1:-1], [], 0
    while inner[i:].strip():
        m = _MATCHER.match(inner, i)
        if m is None:
            raise ValueError(f"{where}: cannot read the matchers {braces}")
        out.append((m.group(1), m.group(2), json.loads(m.group(3))))
        i = m.end()
    return tuple(out)


def _queries(doc: object) -> Iterator[str]:
    """Every PromQL string of a dashboard: panel targets' ``expr`` and template variables' ``query``."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"]
            elif key == "query" and isinstance(value, str) and "(" in value:
                yield value
            else:
                yield from _queries(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from _queries(item)


def dashboard_selectors(prefix: str = "snek_") -> list[Selector]:
    """The selectors of every dashboard whose metric name starts with ``prefix``, target labels left out."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for i, expr in enumerate(_queries(json.loads(path.read_text()))):
            for s in selectors(expr, f"{path.name} query {i}: {expr}"):
                if s.name.startswith(prefix):
                    kept = tuple(m for m in s.matchers if m[0] not in TARGET_LABELS)
                    out.append(Selector(s.name, kept, s.where))
    return out


def family(name: str) -> str:
    """The family a sample or selector name belongs to: without ``_total`` (counters) or ``_bucket``,
    ``_count``, ``_sum`` (histograms)."""
    return re.sub(r"_(total|bucket|count|sum)$", "", name)


def samples(exposition: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition, as ``(name, labels, value)``."""
    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(exposition)
            for s in fam.samples]  # fmt: skip


def missing(exposition: str, wanted: list[Selector]) -> list[str]:
    """The selectors of ``wanted`` that no sample of ``exposition`` matches, each with where it is queried."""
    have = samples(exposition)
    return [f"{s.name}{{{', '.join(f'{k}{op}{v!r}' for k, op, v in s.matchers)}}} ({s.where})" for s in wanted
            if not any(name == s.name and s.matches(labels) for name, labels, _ in have)]  # fmt: skip
