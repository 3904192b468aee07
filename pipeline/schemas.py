"""Explicit Spark schemas for every table the pipeline reads or writes.

Input tables are derived from ``contract.dataset`` (so the Spark side and
the plain-Python side cannot drift); result tables are written out here in
full. Kinds map to Spark types as: int -> LongType, float -> DoubleType,
bool -> BooleanType, str/hex/json -> StringType, [int] -> ArrayType(LongType),
[str] -> ArrayType(StringType). See ``docs/run-dataset.md``.

Every ingested row keeps its provenance: ``file`` (path of the input file) and
``line_no`` (1-based line number in that file).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from contract.dataset import ACTION_FIELDS, COMMON_FIELDS, DISRUPTIVE_ACTIONS, EVENT_FIELDS, PING_FIELDS, Field
from contract.mobility import MOBILITY_FIELDS

__all__ = [
    "spark_type",
    "fields_schema",
    "LINES_SCHEMA",
    "EVENTS_SCHEMA",
    "ACTIONS_SCHEMA",
    "PINGS_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RUNS_SCHEMA",
    "NODES_SCHEMA",
    "LINKS_SCHEMA",
    "LINE_COUNTS_SCHEMA",
    "EPISODES_SCHEMA",
    "CONVERGENCE_SCHEMA",
    "PINGS_ENRICHED_SCHEMA",
    "DELIVERY_SCHEMA",
    "DELIVERY_TIMELINE_SCHEMA",
    "DELIVERY_EPISODE_SCHEMA",
    "CHURN_NODE_SCHEMA",
    "OVERHEAD_NODE_SCHEMA",
    "OVERHEAD_CLASS_SCHEMA",
    "CHURN_SCHEMA",
    "RUN_SUMMARY_SCHEMA",
    "RECONCILIATION_SCHEMA",
    "EPISODE_ACTIONS",
    "AB_META_SCHEMA",
    "AB_RUNS_SCHEMA",
    "AB_SCHEMA",
    "MOBILITY_SCHEMA",
    "MOBILITY_TIMELINE_SCHEMA",
    "MOBILITY_RUNS_SCHEMA",
]

#: Actions that open an episode (pipeline.jobs.episodes): the contract's disruptive actions, plus
#: ``restart`` (a node coming back with a fresh state has to converge too). Here because the A/B
#: tables have a re-convergence column per kind. Not ``radio`` (the episodes a radio link change opens in a run
#: whose nodes move): no action, and no column of its own (the mobility tables have its figures).
EPISODE_ACTIONS: tuple[str, ...] = (*DISRUPTIVE_ACTIONS, "restart")

_KIND_TYPES: dict[str, DataType] = {
    "int": LongType(),
    "float": DoubleType(),
    "bool": BooleanType(),
    "str": StringType(),
    "hex": StringType(),
    "json": StringType(),
    "[int]": ArrayType(LongType(), containsNull=False),
    "[str]": ArrayType(StringType(), containsNull=False),
}


def spark_type(kind: str) -> DataType:
    """Spark type of a contract field kind. Raises KeyError for an unknown kind."""
    return _KIND_TYPES[kind]


def fields_schema(fields: tuple[Field, ...]) -> list[StructField]:
    """StructFields for contract fields (all nullable: nullability is checked at ingest)."""
    return [StructField(f.name, spark_type(f.kind), True) for f in fields]


def _s(*cols: tuple[str, DataType]) -> list[StructField]:
    return [StructField(name, dtype, True) for name, dtype in cols]


S, D, L, B = StringType(), DoubleType(), LongType(), BooleanType()
_PROVENANCE = _s(("file", S), ("line_no", L))

#: What ``line_reads.read_lines`` returns: one row per physical input line.
LINES_SCHEMA = StructType(_s(("run_id", S), ("file", S), ("line_no", L), ("line", S)))

#: Node event logs, flat: common fields, then every per-event field (null when
#: the event has no such field), then provenance. Partitioned by run_id.
EVENTS_SCHEMA = StructType(fields_schema(COMMON_FIELDS) + fields_schema(EVENT_FIELDS) + _PROVENANCE)

ACTIONS_SCHEMA = StructType(fields_schema(ACTION_FIELDS) + _PROVENANCE)
PINGS_SCHEMA = StructType(fields_schema(PING_FIELDS) + _PROVENANCE)

#: Lines that did not meet the contract. ``source`` is events|actions|pings,
#: ``reason`` a ``contract.Reason`` code, ``message`` says which field and why.
QUARANTINE_SCHEMA = StructType(
    _s(("run_id", S), ("source", S), ("file", S), ("line_no", L), ("reason", S), ("message", S), ("line", S))
)

#: One row per run, from meta.json (+ derived class_mix and run_dir).
RUNS_SCHEMA = StructType(
    _s(
        ("run_id", S), ("backend", S), ("variant", S), ("topology", S), ("seed", L), ("clock", S),
        ("link_delay_ms", D), ("started_wall_ts", D),
    )
    + [
        StructField("nodes", MapType(S, S), True),
        StructField("versions", MapType(S, S), True),
    ]
    + _s(("observer", S), ("class_mix", S), ("n_nodes", L), ("n_links", L), ("run_dir", S))
)

#: Node names and keys of a run (meta.json ``nodes``, checked against topology.json).
NODES_SCHEMA = StructType(_s(("run_id", S), ("name", S), ("key", S)))

#: Links of a run (topology.json ``links`` joined with meta.json's shaping backend).
LINKS_SCHEMA = StructType(_s(("run_id", S), ("a", S), ("b", S), ("link_class", S), ("shaping_backend", S)))

#: Physical lines per input file, counted before any parsing (reconciliation input side).
LINE_COUNTS_SCHEMA = StructType(_s(("run_id", S), ("source", S), ("file", S), ("lines", L)))

#: Expected converged state per episode and live node (jobs.episodes).
EPISODES_SCHEMA = StructType(
    _s(
        ("run_id", S), ("episode", L), ("t0_s", D), ("t1_s", D), ("action", S), ("target", S),
        ("node", S), ("component", L), ("expected_root", S), ("expected_descending", S),
    )
)

#: One row per episode: run start (action 'start') and each disruptive action.
CONVERGENCE_SCHEMA = StructType(
    _s(
        ("run_id", S), ("episode", L), ("action", S), ("target", S), ("t0_s", D), ("t0_rel_s", D),
        ("live_nodes", L), ("components", L), ("tree_converged_s", D), ("snake_converged_s", D),
        ("tree_settled_s", D), ("snake_settled_s", D),
    )
)

PINGS_ENRICHED_SCHEMA = StructType(
    _s(
        ("run_id", S), ("sender", S), ("target", S), ("mode", S), ("sent_mono_s", D), ("sent_rel_s", D),
        ("episode", L), ("received", B), ("rtt_ms", D), ("hops", L), ("shortest_links", L), ("path_links", L),
        ("stretch", D), ("class_mix", S), ("since_disruption_s", D), ("since_bucket", S),
    )
)

DELIVERY_SCHEMA = StructType(
    _s(
        ("run_id", S), ("mode", S), ("class_mix", S), ("shortest_links", L), ("since_bucket", S),
        ("sent", L), ("received", L), ("delivery_ratio", D), ("stretch_mean", D), ("stretch_median", D),
        ("stretch_p95", D), ("stretch_max", D), ("rtt_median_ms", D),
    )
)

#: Delivery per episode (the in-process observer reports pings per phase).
DELIVERY_EPISODE_SCHEMA = StructType(
    _s(
        ("run_id", S), ("episode", L), ("sent", L), ("received", L), ("delivery_ratio", D), ("stretch_mean", D),
        ("stretch_median", D), ("stretch_p95", D), ("stretch_max", D), ("rtt_median_ms", D),
    )
)

DELIVERY_TIMELINE_SCHEMA = StructType(
    _s(("run_id", S), ("mode", S), ("t_bin_s", D), ("sent", L), ("received", L), ("delivery_ratio", D))
)

OVERHEAD_NODE_SCHEMA = StructType(
    _s(
        ("run_id", S), ("node", S), ("node_name", S), ("direction", S), ("frame_type", S), ("link_class", S),
        ("frames", L), ("bytes", L), ("covered_s", D), ("frames_per_s", D), ("bytes_per_s", D),
    )
)

OVERHEAD_CLASS_SCHEMA = StructType(
    _s(
        ("run_id", S), ("link_class", S), ("frame_type", S), ("direction", S), ("nodes", L),
        ("frames", L), ("bytes", L), ("frames_per_node_s", D), ("bytes_per_node_s", D),
    )
)

CHURN_SCHEMA = StructType(
    _s(
        ("run_id", S), ("t_bin_s", D), ("root_changes", L), ("parent_changes", L),
        ("nodes_changing", L),
    )
)

CHURN_NODE_SCHEMA = StructType(
    _s(("run_id", S), ("node", S), ("node_name", S), ("root_changes", L), ("parent_changes", L))
)

RUN_SUMMARY_SCHEMA = StructType(
    _s(
        ("run_id", S), ("backend", S), ("variant", S), ("topology", S), ("class_mix", S), ("clock", S),
        ("n_nodes", L), ("seed", L), ("start_tree_s", D), ("start_snake_s", D), ("disruption_tree_max_s", D),
        ("disruption_snake_max_s", D), ("episodes_unconverged", L), ("pings_sent", L),
        ("delivery_ratio", D), ("stretch_median", D), ("control_bytes_per_node_s", D),
        ("control_frames_per_node_s", D), ("root_changes_per_node", D), ("parent_changes_per_node", D),
    )
)

RECONCILIATION_SCHEMA = StructType(
    _s(("run_id", S), ("source", S), ("file", S), ("lines", L), ("parsed", L), ("quarantined", L), ("ok", B))
)

#: The A/B runs (meta.json ``ab``, pipeline.rundirs.ab_meta): the arm's spec, the per-node specs (JSON) and
#: the internal errors meta.json ``observer.internal_errors`` reports (null when it has none).
AB_META_SCHEMA = StructType(
    _s(("run_id", S), ("experiment", S), ("arm", S), ("seed", L), ("spec", S), ("a", S), ("b", S), ("variants", S),
       ("observer_internal_errors", L))
)

#: One row per A/B run and its metrics (pipeline.jobs.ab.ab_runs); ``reconv_<tree|snake>_<kind>_s``
#: per episode kind (action), null where the run has no such episode or one never converged; ``censored``: JSON
#: {metric: seconds watched} of the time metrics left null because an episode never converged.
AB_RUNS_SCHEMA = StructType(
    _s(("run_id", S), ("experiment", S), ("arm", S), ("seed", L), ("spec", S), ("variants", S),
       ("start_tree_s", D), ("start_snake_s", D))
    + _s(*[(f"reconv_{kind}_{action}_s", D) for action in EPISODE_ACTIONS for kind in ("tree", "snake")])
    + _s(("episodes_unconverged", L), ("pings_disrupted", L), ("delivery_disrupted", D), ("delivery_ratio", D),
         ("pings_connected", L), ("delivery_connected", D), ("stretch_median", D), ("control_bytes_per_node_s", D),
         ("internal_errors", L), ("censored", S))
)

#: One row per A/B experiment and metric: both arms' spread over the paired seeds, the paired
#: difference b - a with its 95 % interval, and the verdict (pipeline.jobs.ab.paired).
AB_SCHEMA = StructType(
    _s(
        ("experiment", S), ("metric", S), ("better_when", S), ("a_spec", S), ("b_spec", S), ("n_pairs", L),
        ("a_median", D), ("a_p25", D), ("a_p75", D), ("b_median", D), ("b_p25", D), ("b_p75", D),
        ("diff", D), ("ci_low", D), ("ci_high", D), ("p_value", D), ("significant", B), ("better", S),
        ("n_censored", L), ("n_dropped", L),
    )
)

#: ``mobility.jsonl`` of the runs whose nodes move (contract.mobility; read on the driver: pipeline.mobility_reads).
MOBILITY_SCHEMA = StructType(fields_schema(MOBILITY_FIELDS) + _PROVENANCE)

#: Per run and time bin (s since the run start, the report's clock): radio link changes, the radio links up at the
#: bin's end, and the background and checker pings sent in the bin by whether their pair was connected when the ping
#: was recorded (pings.jsonl ``shortest_links`` not null) (pipeline.jobs.mobility).
MOBILITY_TIMELINE_SCHEMA = StructType(
    _s(("run_id", S), ("t_bin_s", D), ("link_ups", L), ("link_downs", L), ("radio_links", L),
       ("connected_sent", L), ("connected_received", L), ("connected_delivery", D), ("disconnected_sent", L),
       ("disconnected_received", L))
)

#: Per run whose nodes move: how many moved, how fast (their paths between position lines over the time they were
#: recorded moving), how often radio links changed, delivery among connected pairs, the stretch of the delivered
#: pings, control overhead per node-second, and its radio episodes (action 'radio' of the convergence table): how
#: many, the share whose tree / snake converged before the next episode, the median time of those that did
#: (pipeline.jobs.mobility).
MOBILITY_RUNS_SCHEMA = StructType(
    _s(("run_id", S), ("nodes", L), ("moved_s", D), ("mean_speed_mps", D), ("link_ups", L), ("link_downs", L),
       ("changes_per_s", D), ("connected_sent", L), ("connected_received", L), ("connected_delivery", D),
       ("disconnected_sent", L), ("disconnected_received", L), ("bad_lines", L), ("stretch_mean", D),
       ("stretch_median", D), ("control_frames_per_node_s", D), ("control_bytes_per_node_s", D),
       ("radio_episodes", L), ("radio_tree_converged_share", D), ("radio_snake_converged_share", D),
       ("radio_tree_median_s", D), ("radio_snake_median_s", D))
)
