"""A reference node that has just started serves every snek_* series a dashboard queries, except those
docs/interop.md says it does not export, and its labelled counters at 0 for every label value it can count
(docs/interop.md, "Metrics"), spelled as snekbed's node spells them. A real process on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

from node.view import DISCONNECT_REASONS, DROPS
from tests.dashboard_queries import dashboard_selectors, family, missing, samples
from tests.interop.refproc import RefProc

DOC = Path(__file__).resolve().parents[2] / "docs" / "interop.md"
#: the label values the reference node can count (node/pinecone: disconnectReasons in wire.go, adversaryTypes in
#: ping.go), as docs/interop.md lists them
REFERENCE_DISCONNECT_REASONS = frozenset({"admin_removed", "bad_magic", "closed", "connection_reset", "eof",
                                          "io_error", "node_stopping", "read_timeout", "short_length", "write_timeout"})
REFERENCE_DROPS = frozenset((t, "adversary") for t in ("keepalive", "tree_announcement", "bootstrap", "traffic",
                                                        "wakeup_broadcast", "unknown"))  # fmt: skip
#: reasons only the reference node gives (snekbed's node counts a reset connection as io_error)
REFERENCE_ONLY_REASONS = frozenset({"connection_reset"})


def _not_exported() -> set[str]:
    """The series docs/interop.md says the reference node does not export (its "Not exported" paragraph)."""
    text = DOC.read_text()
    paragraph = text[text.index("Not exported, because") :].split("\n\n", 1)[0]
    return set(re.findall(r"`(snek_[a-z_]+)`", paragraph)) - {"snek_dropped_frames_total"}


def _fresh_metrics(binary: Path, workdir: Path) -> str:
    node = RefProc(binary, "fresh", workdir).start()
    try:
        return node.metrics_text()
    finally:
        node.close()


def test_a_fresh_reference_node_serves_every_series_the_dashboards_query(reference_binary: Path,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    absent = _not_exported()
    assert {"snek_internal_errors_total", "snek_shaper_dropped_frames_total"} <= absent, absent
    text = _fresh_metrics(reference_binary, tmp_path)
    names = {name for name, _, _ in samples(text)}
    assert not absent & names, f"docs/interop.md says these are not exported: {sorted(absent & names)}"
    wanted = [s for s in dashboard_selectors() if family(s.name) not in {family(a) for a in absent}]
    assert {"snek_peer_disconnects_total", "snek_dropped_frames_total"} <= {s.name for s in wanted}
    assert not missing(text, wanted), "\n".join(missing(text, wanted))

    disconnects = {labels["reason"]: v for name, labels, v in samples(text) if name == "snek_peer_disconnects_total"}
    assert disconnects == dict.fromkeys(REFERENCE_DISCONNECT_REASONS, 0.0)
    assert REFERENCE_DISCONNECT_REASONS - REFERENCE_ONLY_REASONS <= DISCONNECT_REASONS  # snekbed's words
    drops = {(labels["type"], labels["reason"]): v for name, labels, v in samples(text)
             if name == "snek_dropped_frames_total"}  # fmt: skip
    assert drops == dict.fromkeys(REFERENCE_DROPS, 0.0)
    assert REFERENCE_DROPS <= DROPS
