"""Grafana dashboards as code: ``snekbed dashboards build`` (orchestrator/cli/dashboards.py) writes
``dashboards/*.json``.

Built with Grafana's typed SDK (``grafana-foundation-sdk``), never edited by hand: change a panel
here, run ``snekbed dashboards build``, commit both. ``snekbed dashboards build --check`` (and a
test) fails when the committed JSON differs from what this module generates.

Three dashboards, every one with a ``run`` variable (the ``run`` label of every series):

* **overview** (``snekbed-overview``): is the network one tree with one root, how fast is it
  changing, what does it carry and what does it lose.
* **chaos** (``snekbed-chaos``): every fault as an annotation on every panel, the orchestrator's
  view (live nodes, components, converged, time since the last fault, re-convergence) and delivery
  around the faults.
* **node** (``snekbed-node``): one node (``node`` variable): peers by class, routing table, queues,
  drops by reason, ping RTT, shaper, bytes and frames.

Every panel names the question it answers in its description; docs/monitoring.md lists them.
The datasource is the provisioned Prometheus, uid ``snekbed-prometheus`` (compose/grafana).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

__all__ = ["DASHBOARDS", "DEFAULT_DIR", "Target", "build_all", "metric_names", "render", "stale", "substitute",
           "targets"]

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "dashboards"
DATASOURCE = cm.DataSourceRef(type_val="prometheus", uid="snekbed-prometheus")
RUN = 'run="$run"'
RATE = "1m"  # rate windows: >= 4 scrapes at the slowest interval snekbed configures (15 s in compose)


def _q(expr: str, legend: str = "", *, instant: bool = False, fmt: str | None = None) -> pb.Dataquery:
    q = pb.Dataquery().expr(expr).legend_format(legend or "__auto")
    q = q.instant() if instant else q.range()
    if fmt == "table":
        q = q.format(pm.PromQueryFormat.TABLE)
    return q


def _ts(title: str, about: str, *queries: pb.Dataquery, unit: str = "short", w: int = 12, h: int = 8,
        stack: bool = False) -> timeseries.Panel:  # fmt: skip
    p = (timeseries.Panel().title(title).description(about).datasource(DATASOURCE).unit(unit).span(w).height(h)
         .fill_opacity(10).line_width(1).show_points(cm.VisibilityMode.NEVER)
         .legend(cb.VizLegendOptions().show_legend(True).display_mode(cm.LegendDisplayMode.LIST)
                 .placement(cm.LegendPlacement.BOTTOM)))  # fmt: skip
    if stack:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    for i, q in enumerate(queries):
        p = p.with_target(q.ref_id(chr(ord("A") + i)))
    return p


def _stat(title: str, about: str, query: pb.Dataquery, *, unit: str = "short", w: int = 4, h: int = 4,
          decimals: int | None = None) -> stat.Panel:  # fmt: skip
    p = (stat.Panel().title(title).description(about).datasource(DATASOURCE).unit(unit).span(w).height(h)
         .graph_mode(cm.BigValueGraphMode.AREA).with_target(query.ref_id("A")))
    if decimals is not None:
        p = p.decimals(decimals)
    return p


def _run_variable(metric: str = "snek_node_info") -> db.QueryVariable:
    return (db.QueryVariable("run").label("run").datasource(DATASOURCE)
            .query({"query": f"label_values({metric}, run)", "refId": "run"})
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_DESC))


def _dashboard(uid: str, title: str, about: str, tags: list[str]) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).description(about).tags(["snekbed", *tags]).refresh("5s")
            .time("now-30m", "now").timezone("browser").tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .readonly())


def _faults_annotation() -> db.AnnotationQuery:
    """A mark at every fault: the scrape in which the run's fault counter of a kind went up."""
    return (db.AnnotationQuery().name("Faults").datasource(DATASOURCE).enable(True).icon_color("red")
            .target(pb.Dataquery().expr(f'sum by (kind) (changes(snekbed_faults_total{{{RUN}}}[15s])) > 0')
                    .legend_format("{{kind}}").interval("2s").ref_id("faults")))


# ---------------------------------------------------------------- the dashboards


def overview() -> db.Dashboard:
    d = _dashboard("snekbed-overview", "snekbed: overview",
                   "One run's SNEK network at a glance: one tree, one root, what changes and what gets through.",
                   ["overview"]).with_variable(_run_variable()).annotation(_faults_annotation())
    d = d.with_row(db.Row("The tree"))
    d = d.with_panel(_stat("Nodes scraped", "How many nodes answer Prometheus right now?",
                           _q(f'sum(up{{job="snek-nodes",{RUN}}})', instant=True)))
    d = d.with_panel(_stat("Distinct roots", "How many roots do the nodes believe in? 1 when the network is one "
                           "converged tree (one per component during a partition).",
                           _q(f"count(count by (key) (snek_root_info{{{RUN}}}))", instant=True)))
    d = d.with_panel(_stat("Nodes that are root", "How many nodes consider themselves the root?",
                           _q(f"sum(snek_is_root{{{RUN}}})", instant=True)))
    d = d.with_panel(_stat("Routing table entries", "How much SNEK state does the whole network hold?",
                           _q(f"sum(snek_routing_table_entries{{{RUN}}})", instant=True)))
    d = d.with_panel(_stat("Handshake failures", "How many peerings were refused (bad version, capabilities...)?",
                           _q(f"sum(snek_handshake_failures_total{{{RUN}}})", instant=True)))
    d = d.with_panel(_stat("Internal errors", "Did any node catch a bug at a peer boundary? Should stay 0.",
                           _q(f"sum(snek_internal_errors_total{{{RUN}}})", instant=True)))
    d = d.with_panel(_ts("Distinct roots", "How many roots the nodes follow over time; a kill of the root shows "
                         "as a step while the tree re-forms.",
                         _q(f"count(count by (key) (snek_root_info{{{RUN}}}))", "roots")))
    d = d.with_panel(_ts("Root and parent changes", "How often do nodes change root or parent (per minute)? "
                         "Above zero after a fault, back to zero once re-converged.",
                         _q(f"sum(increase(snek_root_changes_total{{{RUN}}}[{RATE}]))", "root changes"),
                         _q(f"sum(increase(snek_parent_changes_total{{{RUN}}}[{RATE}]))", "parent changes")))
    d = d.with_panel(_ts("Tree depth", "How deep is the tree (hops from the root), deepest and on average?",
                         _q(f"max(snek_tree_depth{{{RUN}}})", "max"), _q(f"avg(snek_tree_depth{{{RUN}}})", "mean")))
    d = d.with_panel(_ts("Peers by link class", "How many peerings are up, by link class (counted at both ends)?",
                         _q(f"sum by (link_class) (snek_peers{{{RUN}}})", "{{link_class}}"), stack=True))
    d = d.with_row(db.Row("Traffic"))
    d = d.with_panel(_ts("Frames sent by type", "What do the nodes spend the links on (frames per second)?",
                         _q(f"sum by (type) (rate(snek_sent_frames_total{{{RUN}}}[{RATE}]))", "{{type}}"),
                         unit="pps", stack=True))
    d = d.with_panel(_ts("Bytes sent by link class", "How much does each link class carry?",
                         _q(f"sum by (link_class) (rate(snek_sent_bytes_total{{{RUN}}}[{RATE}]))", "{{link_class}}"),
                         unit="Bps", stack=True))
    d = d.with_panel(_ts("Ping delivery", "What share of pings gets an answer, per routing mode?",
                         _q(f'sum by (mode) (rate(snek_pings_total{{{RUN},result="received"}}[{RATE}])) / '
                            f"sum by (mode) (rate(snek_pings_total{{{RUN}}}[{RATE}]))", "{{mode}}"),
                         unit="percentunit"))
    d = d.with_panel(_ts("Ping round-trip time", "How long do answered pings take (95th percentile and median)?",
                         _q("histogram_quantile(0.95, sum by (le, mode) "
                            f"(rate(snek_ping_rtt_seconds_bucket{{{RUN}}}[{RATE}])))", "p95 {{mode}}"),
                         _q("histogram_quantile(0.5, sum by (le, mode) "
                            f"(rate(snek_ping_rtt_seconds_bucket{{{RUN}}}[{RATE}])))", "p50 {{mode}}"),
                         unit="s"))
    d = d.with_panel(_ts("Bootstraps", "How much SNEK maintenance runs (per second): sent, accepted, rejected?",
                         _q(f"sum(rate(snek_bootstraps_sent_total{{{RUN}}}[{RATE}]))", "sent"),
                         _q(f"sum(rate(snek_bootstraps_accepted_total{{{RUN}}}[{RATE}]))", "accepted"),
                         _q(f"sum by (reason) (rate(snek_bootstraps_rejected_total{{{RUN}}}[{RATE}]))",
                            "rejected {{reason}}"), unit="ops"))
    d = d.with_panel(_ts("Frames dropped by reason", "Where is traffic lost (frames per second, all nodes)? "
                         "0 while nothing is dropped.",
                         _q(f"sum by (reason) (rate(snek_dropped_frames_total{{{RUN}}}[{RATE}])) or on() vector(0)",
                            "{{reason}}"), unit="pps"))
    d = d.with_panel(_ts("Peer disconnects by reason", "Why do peerings end (per minute)? 0 while none ends.",
                         _q(f"sum by (reason) (increase(snek_peer_disconnects_total{{{RUN}}}[{RATE}])) or on() vector(0)",
                            "{{reason}}")))
    d = d.with_panel(_ts("Queued frames", "Is any peer queue backing up, by queue (all nodes)?",
                         _q(f"sum by (queue) (snek_queued_frames{{{RUN}}})", "{{queue}}")))
    return d


def chaos() -> db.Dashboard:
    d = _dashboard("snekbed-chaos", "snekbed: chaos",
                   "A chaos run on its timeline: every fault marked, the network's state and its recovery around it.",
                   ["chaos"]).with_variable(_run_variable("snekbed_live_nodes")).annotation(_faults_annotation())
    d = d.with_panel(_stat("Live nodes", "How many nodes are running and not paused (the orchestrator's count)?",
                           _q(f"snekbed_live_nodes{{{RUN}}}", instant=True)))
    d = d.with_panel(_stat("Components", "In how many pieces is the live network? 2 during a two-way partition.",
                           _q(f"snekbed_components{{{RUN}}}", instant=True)))
    d = d.with_panel(_stat("Snake converged", "Has every component converged, tree and snake (1 = yes)?",
                           _q(f'snekbed_converged{{{RUN},kind="snake"}}', instant=True)))
    d = d.with_panel(_stat("Since last fault", "How long ago was the last fault injected?",
                           _q(f"snekbed_since_last_fault_seconds{{{RUN}}}", instant=True), unit="s", decimals=0))
    d = d.with_panel(_stat("Last re-convergence", "How long did the network take to re-converge (snake) after "
                           "the last fault episode?",
                           _q(f'snekbed_reconvergence_seconds{{{RUN},kind="snake"}}', instant=True), unit="s",
                           decimals=1))
    d = d.with_panel(_stat("Faults", "How many faults were injected so far?",
                           _q(f"sum(snekbed_faults_total{{{RUN}}})", instant=True)))
    d = d.with_panel(_ts("Live nodes and components", "How many nodes are up, and in how many pieces?",
                         _q(f"snekbed_live_nodes{{{RUN}}}", "live nodes"),
                         _q(f"snekbed_components{{{RUN}}}", "components")))
    d = d.with_panel(_ts("Converged", "When was the whole network converged (1), as the observer decides?",
                         _q(f"snekbed_converged{{{RUN}}}", "{{kind}}")))
    d = d.with_panel(_ts("Delivery around faults", "What share of the run's background pings were answered, per "
                         "mode? Dips at faults, recovers with convergence.",
                         _q(f'sum by (mode) (rate(snekbed_pings_total{{{RUN},result="received"}}[30s])) / '
                            f"sum by (mode) (rate(snekbed_pings_total{{{RUN}}}[30s]))", "{{mode}}"),
                         unit="percentunit"))
    d = d.with_panel(_ts("Re-convergence time", "How long did the last episode take to re-converge, tree and snake?",
                         _q(f"snekbed_reconvergence_seconds{{{RUN}}}", "{{kind}}"), unit="s"))
    d = d.with_panel(_ts("Distinct roots", "How many roots do the nodes follow? One per component once converged.",
                         _q(f"count(count by (key) (snek_root_info{{{RUN}}}))", "roots")))
    d = d.with_panel(_ts("Root changes", "How many nodes changed root (per minute)? The wave after a root kill.",
                         _q(f"sum(increase(snek_root_changes_total{{{RUN}}}[{RATE}]))", "root changes")))
    d = d.with_panel(_ts("Faults by kind", "Which faults were injected (per minute)?",
                         _q(f"sum by (kind) (increase(snekbed_faults_total{{{RUN}}}[{RATE}]))", "{{kind}}"),
                         stack=True))
    d = d.with_panel(_ts("Frames dropped by reason", "What did the network lose while it re-converged "
                         "(frames per second)? 0 while nothing is dropped.",
                         _q(f"sum by (reason) (rate(snek_dropped_frames_total{{{RUN}}}[{RATE}])) or on() vector(0)",
                            "{{reason}}"), unit="pps"))
    return d


def node() -> db.Dashboard:
    sel = f'{RUN},node="$node"'
    node_var = (db.QueryVariable("node").label("node").datasource(DATASOURCE)
                .query({"query": 'label_values(snek_node_info{run="$run"}, node)', "refId": "node"})
                .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC))
    d = _dashboard("snekbed-node", "snekbed: node", "One node of a run, in detail: its peers, its routing state, "
                   "its queues and what it drops.", ["node"])
    d = d.with_variable(_run_variable()).with_variable(node_var).annotation(_faults_annotation())
    d = d.with_panel(_stat("Is root", "Is this node the root of its tree (1)?",
                           _q(f"snek_is_root{{{sel}}}", instant=True)))
    d = d.with_panel(_stat("Tree depth", "How many hops is it from the root?",
                           _q(f"snek_tree_depth{{{sel}}}", instant=True)))
    d = d.with_panel(_stat("Peers", "How many peers does it have?", _q(f"sum(snek_peers{{{sel}}})", instant=True)))
    d = d.with_panel(_stat("Routing table", "How many SNEK routing entries does it hold?",
                           _q(f"snek_routing_table_entries{{{sel}}}", instant=True)))
    d = d.with_panel(_stat("Descending neighbour", "Does it have a descending SNEK neighbour (1)?",
                           _q(f"snek_descending_present{{{sel}}}", instant=True)))
    d = d.with_panel(_stat("Internal errors", "Bugs caught at its peer boundaries (should stay 0).",
                           _q(f"snek_internal_errors_total{{{sel}}}", instant=True)))
    d = d.with_panel(table.Panel().title("Identity").description("Which key, variant and version does it run?")
                     .datasource(DATASOURCE).span(24).height(4)
                     .with_target(_q(f"snek_node_info{{{sel}}}", instant=True, fmt="table").ref_id("A")))
    d = d.with_panel(_ts("Peers by link class", "Its peerings, by link class.",
                         _q(f"snek_peers{{{sel}}}", "{{link_class}}"), stack=True))
    d = d.with_panel(_ts("Routing table entries", "Its SNEK routing state over time.",
                         _q(f"snek_routing_table_entries{{{sel}}}", "entries")))
    d = d.with_panel(_ts("Queued frames", "Is a queue to its peers backing up?",
                         _q(f"snek_queued_frames{{{sel}}}", "{{queue}}")))
    d = d.with_panel(_ts("Drops by reason", "What does it drop, and why (frames per second)? 0 while nothing is "
                         "dropped.",
                         _q(f"sum by (type, reason) (rate(snek_dropped_frames_total{{{sel}}}[{RATE}])) or on() "
                            "vector(0)", "{{type}} {{reason}}"), unit="pps"))
    d = d.with_panel(_ts("Ping round-trip time", "How long do its pings take (95th percentile, median)?",
                         _q("histogram_quantile(0.95, sum by (le, mode) "
                            f"(rate(snek_ping_rtt_seconds_bucket{{{sel}}}[{RATE}])))", "p95 {{mode}}"),
                         _q("histogram_quantile(0.5, sum by (le, mode) "
                            f"(rate(snek_ping_rtt_seconds_bucket{{{sel}}}[{RATE}])))", "p50 {{mode}}"), unit="s"))
    d = d.with_panel(_ts("Bytes by link class", "What it sends (+) and receives (-), by link class.",
                         _q(f"sum by (link_class) (rate(snek_sent_bytes_total{{{sel}}}[{RATE}]))", "sent {{link_class}}"),
                         _q(f"-sum by (link_class) (rate(snek_received_bytes_total{{{sel}}}[{RATE}]))",
                            "received {{link_class}}"), unit="Bps"))
    d = d.with_panel(_ts("Frames by type", "What it sends, by frame type (frames per second).",
                         _q(f"sum by (type) (rate(snek_sent_frames_total{{{sel}}}[{RATE}]))", "{{type}}"),
                         unit="pps", stack=True))
    d = d.with_panel(_ts("Userspace shaper", "What its link shaper holds back and drops (frames per second).",
                         _q(f"sum(rate(snek_shaper_delayed_frames_total{{{sel}}}[{RATE}]))", "delayed"),
                         _q(f"sum by (reason) (rate(snek_shaper_dropped_frames_total{{{sel}}}[{RATE}]))",
                            "dropped ({{reason}})"), unit="pps"))
    return d


DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {"overview": overview, "chaos": chaos, "node": node}


def render(name: str) -> str:
    """The JSON text of dashboard ``name``, byte-stable (sorted keys, two-space indent, final newline)."""
    return json.dumps(DASHBOARDS[name]().build(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def _path(out: Path, name: str) -> Path:
    return out / f"snekbed-{name}.json"


def build_all(out: Path = DEFAULT_DIR) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in DASHBOARDS:
        path = _path(out, name)
        path.write_text(render(name))
        paths.append(path)
    return paths


def stale(out: Path = DEFAULT_DIR) -> list[str]:
    """Why the committed JSON in ``out`` is not what this module generates (empty when it is)."""
    why = []
    for name in DASHBOARDS:
        path = _path(out, name)
        if not path.exists():
            why.append(f"{path}: missing")
        elif path.read_text() != render(name):
            why.append(f"{path}: differs from the generated dashboard")
    expected = {_path(out, n).name for n in DASHBOARDS}
    for extra in sorted(p.name for p in out.glob("*.json") if p.name not in expected):
        why.append(f"{out / extra}: not generated by orchestrator/tools/dashboards.py (remove it)")
    return why


# ---------------------------------------------------------------- reading dashboards (for checks and tests)


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str  # panel title, or "annotation: NAME"
    expr: str
    instant: bool


def targets(doc: dict[str, Any]) -> Iterator[Target]:
    """Every query of a dashboard document: each panel's targets and each annotation's."""
    title = doc.get("title", "")
    for panel in doc.get("panels", []):
        for sub in [panel, *panel.get("panels", [])]:
            for t in sub.get("targets") or []:
                if t.get("expr"):
                    yield Target(title, sub.get("title", ""), t["expr"], bool(t.get("instant")))
    for a in (doc.get("annotations") or {}).get("list", []):
        t = a.get("target") or {}
        if t.get("expr"):
            yield Target(title, f"annotation: {a.get('name', '')}", t["expr"], False)


def substitute(expr: str, variables: dict[str, str], interval_s: float = 2.0) -> str:
    """``expr`` with ``$var`` / ``${var}`` and Grafana's ``$__interval`` / ``$__rate_interval`` filled in."""
    out = expr.replace("$__rate_interval", f"{4 * interval_s:g}s").replace("$__interval", f"{interval_s:g}s")
    for k, v in variables.items():
        out = out.replace("${" + k + "}", v).replace("$" + k, v)
    return out


_FUNCS = {"sum", "count", "max", "min", "avg", "rate", "increase", "changes", "histogram_quantile", "by", "on",
          "vector", "or", "and", "unless", "le", "without", "topk", "bottomk", "abs", "time", "label_values"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (identifiers followed by ``{`` or standing alone, not functions)."""
    no_labels = re.sub(r"\{[^}]*\}", "{}", expr)
    no_groups = re.sub(r"\b(by|on|without)\s*\([^)]*\)", "", no_labels)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?=\{|\[|\)|$|\s)", no_groups))
    return {n for n in names if n not in _FUNCS and not n.isdigit() and "_" in n}
