"""A node that has just started serves, on its real /metrics endpoint, every snek_* series a dashboard
queries, and every labelled counter at 0 for each of its known label values (docs/metrics.md): otherwise
Prometheus's ``rate()`` and ``increase()`` miss a counter's first increment (a series born at 1 has no
earlier sample to rise from). In process, on 127.0.0.1, over HTTP."""

from __future__ import annotations

import httpx
import trio

from node.config import HostPort, NodeConfig
from node.core.crypto import Identity, derive_seed
from node.core.errors import HANDSHAKE_REASONS
from node.lifecycle import NodeProcess
from node.metrics import LINK_CLASSES, FamilySet, NodeSnapshot
from node.view import DISCONNECT_REASONS, DROPS
from tests.dashboard_queries import dashboard_selectors, missing, samples


async def _fresh_metrics() -> str:
    """Start a node on 127.0.0.1 (ephemeral ports, no peers), read its /metrics once, stop it."""
    cfg = NodeConfig(identity=Identity(derive_seed("fresh-metrics", 1)), listen=HostPort("127.0.0.1", 0), admin=None,
                     metrics=HostPort("127.0.0.1", 0), name="fresh")  # fmt: skip
    proc = NodeProcess(cfg)
    async with trio.open_nursery() as nursery:
        info = await nursery.start(proc.run)
        with trio.fail_after(10):
            async with httpx.AsyncClient() as http:
                r = await http.get(f"http://{info['metrics']}/metrics")
        r.raise_for_status()
        proc.request_stop("test")
    return r.text


def _series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name``: sorted labels -> value."""
    return {tuple(sorted(labels.items())): v for n, labels, v in samples(text) if n == name}


async def test_a_fresh_node_serves_every_series_the_dashboards_query() -> None:
    wanted = dashboard_selectors()
    names = {s.name for s in wanted}
    assert {"snek_peer_disconnects_total", "snek_dropped_frames_total", "snek_sent_bytes_total"} <= names, names
    text = await _fresh_metrics()
    assert samples(text), "an empty exposition"
    assert not missing(text, wanted), "\n".join(missing(text, wanted))


async def test_every_labelled_counter_starts_at_zero_for_every_known_label_value() -> None:
    text = await _fresh_metrics()
    disconnects = _series(text, "snek_peer_disconnects_total")
    assert disconnects == {(("reason", r),): 0.0 for r in DISCONNECT_REASONS}
    drops = _series(text, "snek_dropped_frames_total")
    assert drops == {(("reason", r), ("type", t)): 0.0 for t, r in DROPS}
    assert len(drops) > 100 and {"queue_full", "adversary", "bad_magic", "link_loss"} <= {r for _, r in DROPS}
    assert set(_series(text, "snek_handshake_failures_total")) >= {(("reason", r),) for r in HANDSHAKE_REASONS}
    for name in ("snek_sent_bytes_total", "snek_received_bytes_total", "snek_shaper_delayed_frames_total"):
        assert {dict(k)["link_class"] for k in _series(text, name)} == LINK_CLASSES, name
    moved = [(n, labels, v) for n, labels, v in samples(text) if n.startswith("snek_") and n.endswith("_total") and v]
    assert not moved, f"a fresh node without peers counted something: {moved}"


def test_a_nodes_own_link_classes_start_at_zero_too() -> None:
    """A simulated node's links may have a class of the topology's own: its series are pre-set as well."""
    snap = NodeSnapshot(key="00" * 32, name="n1", version="0", variant="snek", variant_spec="snek", root_key="00" * 32,
                        root_sequence=0, is_root=True, depth=0, has_descending=False, table_size=0,
                        link_classes=LINK_CLASSES | {"satellite"})  # fmt: skip
    fams = FamilySet(("node",))
    fams.add(snap, ("n1",))
    sent = {s.labels["link_class"]: s.value for f in fams.collect() if f.name == "snek_sent_bytes" for s in f.samples}
    assert sent == dict.fromkeys(LINK_CLASSES | {"satellite"}, 0.0)
