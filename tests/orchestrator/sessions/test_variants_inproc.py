"""Every variant in whole networks, in process: graph-250 and a 100-node mixed-class mesh converge with every
sampled ping delivered (before and after a root kill), the shipped root-kill and partition scenarios pass, the
frames on the wire are the variant's own, a ``legacy`` node and a ``snek`` node are never linked, and ``snek``
nodes with different knobs share a network. Runs are deterministic for (topology, seed)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio
import trio.testing

from contract.frames import frame_type_name
from node.core.variants import VariantSpec
from orchestrator.backends.inproc import InprocNetwork
from orchestrator.chaos.engine import shipped_scenarios
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import load_scenario
from orchestrator.model.generators import mesh_mixed
from orchestrator.sessions.sim import run_sim_sync
from orchestrator.sessions.sim import config_from_topology
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.conftest import TOPOLOGIES, need

VARIANTS = ("snek", "snek-s0", "legacy")


def _graph250() -> Topology:
    path = TOPOLOGIES / "graph-250.txt"
    need(path.exists(), f"topology {path} missing (SNEKBED_SHARED names shared/ elsewhere)")
    return load_topology(path)


def _assert_delivered(out: dict) -> None:
    assert out["snake_converged_s"] is not None, out
    assert out["pings"]["sent"] > 0 and out["pings"]["delivered"] == out["pings"]["sent"], out
    rk = out["root_kill"]
    assert rk["snake_reconverged_s"] is not None, rk
    assert rk["pings"]["sent"] > 0 and rk["pings"]["delivered"] == rk["pings"]["sent"], rk


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["snek", "tree"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_converges_and_delivers_on_graph_250(variant: str, mode: str, tmp_path: Path) -> None:
    """Every sampled ping delivered, before and after the root kill; a run per ping mode (same schedule)."""
    topo = _graph250()
    rec = tmp_path / "run"
    out = run_sim_sync(config_from_topology(topo, seed=0, pairs=100, kill_root=True, variant=VariantSpec(variant),
                                            record=rec, ping_mode=mode))  # fmt: skip
    _assert_delivered(out)
    assert out["ping_mode"] == mode
    pinged = [json.loads(ln) for ln in (rec / "pings.jsonl").read_text().splitlines()]
    assert pinged and {p["mode"] for p in pinged} == {mode}
    assert out["variant"] == variant and out["variants"] == {variant: len(topo.nodes)}
    meta = json.loads((rec / "meta.json").read_text())
    assert meta["variant"] == variant and "variants" not in meta
    started = [json.loads(ln) for f in (rec / "events").glob("*.jsonl") for ln in f.read_text().splitlines()
               if '"node_started"' in ln]  # fmt: skip
    assert len(started) >= len(topo.nodes) and {e["variant"] for e in started} == {variant}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["snek", "tree"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_converges_and_delivers_on_a_100_node_mixed_mesh(variant: str, mode: str) -> None:
    topo = mesh_mixed(100, seed=1)
    assert {ln.link_class for ln in topo.links} == {"lan", "bluetooth", "remote"}
    out = run_sim_sync(config_from_topology(topo, seed=1, pairs=100, kill_root=True, variant=VariantSpec(variant),
                                            ping_mode=mode))  # fmt: skip
    _assert_delivered(out)
    assert out["ping_mode"] == mode


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("scenario", ["root-kill-x3", "partition-heal"])
def test_each_variant_passes_the_shipped_root_kill_and_partition_scenarios(variant: str, scenario: str) -> None:
    sc = load_scenario(shipped_scenarios()[scenario])
    backend = InprocChaos(mesh_mixed(40, seed=2), seed=2, variant=VariantSpec(variant))
    out = trio.run(lambda: run_scenario(backend, sc, seed=2), clock=trio.testing.MockClock(autojump_threshold=0))
    failed = [(s["index"], s["action"], {k: v["detail"] for k, v in s["invariants"].items() if not v["ok"]})
              for s in out["steps"] if s["verdict"] != "pass"]  # fmt: skip
    assert out["verdict"] == "pass", failed
    assert {sn.spec.name for sn in backend.net.nodes.values()} == {variant}


def _frame_types(variant: str) -> Counter[str]:
    """Frame types sent on a converged 12-node mesh running ``variant`` (wakeup broadcasts off)."""
    topo = mesh_mixed(12, seed=0)
    spec = VariantSpec.parse(f"{variant},wakeup_broadcasts=0")
    net = InprocNetwork(topo.node_names, [(ln.a, ln.b, ln.link_class) for ln in topo.links], seed=0, variant=spec)
    seen: Counter[str] = Counter()

    def on_frame(node, direction, frame, link_class, now) -> None:  # noqa: ANN001
        if direction == "sent":
            seen[frame_type_name(frame.type)] += 1

    net.on_frame = on_frame

    async def run() -> None:
        net.start()
        await net.run_until(60.0)

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    return seen


def test_the_wire_shows_which_variant_runs() -> None:
    """A variant that is silently ignored fails here: snek bootstraps with type 2, legacy with 0xE0-0xE2."""
    snek, legacy = _frame_types("snek"), _frame_types("legacy")
    assert snek["bootstrap"] > 0 and not any(k.startswith("legacy_") for k in snek), snek
    assert legacy["bootstrap"] == 0, legacy
    for kind in ("legacy_bootstrap", "legacy_bootstrap_ack", "legacy_setup"):
        assert legacy[kind] > 0, legacy
    assert set(legacy) <= {"keepalive", "tree_announcement", "traffic", "legacy_bootstrap", "legacy_bootstrap_ack",
                           "legacy_setup", "legacy_teardown"}, legacy  # fmt: skip


def test_legacy_and_snek_nodes_are_never_linked_but_knobs_share_a_network(tmp_path: Path) -> None:
    """Two 6-node islands, legacy and snek, joined by two links that the handshake refuses; the snek island runs
    two knob settings and still converges and delivers as one network."""
    legacy = [f"l{i}" for i in range(6)]
    snek = [f"s{i}" for i in range(6)]
    ring = [(f"{p}{i}", f"{p}{(i + 1) % 6}") for p in "ls" for i in range(6)]
    doc = {
        "name": "islands",
        "nodes": [{"name": n, "variant": "legacy"} for n in legacy]
        + [{"name": n, **({"knobs": {"root_filter": 1}} if i % 2 else {})} for i, n in enumerate(snek)],
        "links": [{"a": a, "b": b} for a, b in ring] + [{"a": "l0", "b": "s0"}, {"a": "l3", "b": "s3"}],
    }
    topo = Topology.from_data(doc)
    rec = tmp_path / "run"
    out = run_sim_sync(config_from_topology(topo, seed=4, pairs=40, record=rec))
    refused = [(r["a"], r["b"], r["reason"]) for r in out["links_refused"]]
    assert refused == [("l0", "s0", "bad_capabilities"), ("l3", "s3", "bad_capabilities")], out["links_refused"]
    assert out["handshake_failures"] == 4  # both ends of both links
    assert out["variants"] == {"legacy": 6, "snek": 3, "snek,root_filter=1": 3}
    assert out["snake_converged_s"] is not None and out["pings"]["delivered"] == out["pings"]["sent"] > 0, out
    meta = json.loads((rec / "meta.json").read_text())
    assert meta["variant"] == "snek"
    assert meta["variants"] == {**{n: "legacy" for n in legacy}, "s1": "snek,root_filter=1",
                                "s3": "snek,root_filter=1", "s5": "snek,root_filter=1"}  # fmt: skip
    failed = [json.loads(ln) for f in (rec / "events").glob("*.jsonl") for ln in f.read_text().splitlines()
              if '"handshake_failed"' in ln]  # fmt: skip
    assert sorted((e["node_name"], e["remote"], e["reason"]) for e in failed) == [
        ("l0", "s0", "bad_capabilities"), ("l3", "s3", "bad_capabilities"),
        ("s0", "l0", "bad_capabilities"), ("s3", "l3", "bad_capabilities")]  # fmt: skip


def test_the_reconvergence_bound_follows_the_knobs() -> None:
    """The checker's bound allows for a slower bootstrap interval or a longer soft-state expiry; legacy's 1 h
    hard state does not stretch it (its paths are torn down, not left to expire)."""
    topo = mesh_mixed(12, seed=0)
    bound = {spec: InprocChaos(topo, variant=VariantSpec.parse(spec)).reconvergence_bound_s(0.0)
             for spec in ("snek", "snek,bootstrap_interval=8", "snek,entry_expiry=30", "legacy")}  # fmt: skip
    assert bound["snek,bootstrap_interval=8"] == pytest.approx(bound["snek"] + 3 * (8 - 5))
    assert bound["snek,entry_expiry=30"] == pytest.approx(bound["snek"] + (30 - 10))
    assert bound["legacy"] == bound["snek"]


def test_up_sets_every_node_variant(tmp_path: Path) -> None:
    """``snekbed up --variant`` (here in process) runs every node on the variant and records it as the run's."""
    topo = Path(__file__).resolve().parents[3] / "compose" / "topologies" / "line-5.yaml"
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "up", str(topo), "--backend", "inproc",
                           "--variant", "legacy", "--runs-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["variant"] == "legacy" and out["variants"] == {"legacy": 5} and out["snake_converged_s"] is not None
    (meta,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/meta.json")]
    assert meta["variant"] == "legacy" and "variants" not in meta
