"""Reference nodes (spec ``pinecone``: the Pinecone reference's router, node/pinecone) in Docker runs, next to
snekbed nodes: mesh-12 with alternating snekbed and reference nodes through the shipped chaos scenarios, an
all-reference mesh-12 through three root kills, and every other fault on reference nodes in a small mixed mesh.
Real engine, real images, run as the CLI (``snekbed chaos S --topology T --backend docker --json``); every
invariant verdict of every step is printed (``pytest -s`` shows them). Waits are the scenarios' own (bounded by
the protocol timers: the chaos checker's re-convergence bound). Nothing labelled with a run may be left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.backends.reference import reference_available
from orchestrator.chaos.engine import shipped_scenarios
from orchestrator.chaos.scenario import INVARIANTS
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from tests.ci import need
from tests.orchestrator.docker_helpers import left_behind

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
#: faults the shipped scenarios do not cover, each on a reference node or a link with a reference end
FAULTS = """\
name: reference-faults
settle_s: 3
traffic: {rate_per_s: 4, pairs: 10}
steps:
  - {action: wait, until: converged, within_s: 120}
  - {action: restart, target: r3}
  - {action: link_change, link: [r1, s2], shaping: {rate_mbit: 5, delay_ms: 8}}
  - {action: adversary, target: r5, drop: {bootstrap: 100}, peer: s8, check: false}
  - {action: wait, s: 11}
  - {action: adversary, target: r5, drop: {bootstrap: 0}, peer: s8}
  - {action: join, node: r7, peers: [s6, r1], variant: pinecone}
  - {action: churn, fraction: 0.3, duration_s: 30, down_s: 6}
"""


@pytest.fixture(scope="module")
def reference_ready(client: object) -> None:
    ok, why = reference_available()
    need(ok, f"the reference node cannot be built here: {why}")


def _variant(topology: Topology, pick: Any, name: str) -> Topology:
    nodes = [n.model_copy(update={"variant": "pinecone"}) if pick(i) else n for i, n in enumerate(topology.nodes)]
    return topology.model_copy(update={"nodes": nodes, "name": name})


def _topology(tmp_path: Path, kind: str) -> Path:
    mesh = load_topology(MESH12)
    # mixed: n02, n04, ..., n12 run the reference (n12 has the highest key for seed 0: the root is one of them)
    topo = _variant(mesh, (lambda i: i % 2 == 1) if kind == "mixed" else (lambda i: True), f"mesh-12-{kind}")
    path = tmp_path / f"{topo.name}.yaml"
    path.write_text(topo.to_yaml())
    return path


def _chaos(scenario: str, topology: Path, image: str, runs: Path, *extra: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", scenario, "--topology", str(topology),
                           "--backend", "docker", "--image", image, "--runs-dir", str(runs), "--json", *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)  # fmt: skip
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    return out, f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def _left(client: object, runs: Path) -> str:
    """What the runs under ``runs`` left on the engine (removed now): every run directory is looked at, so a run whose
    command died before it printed its document is cleaned up too."""
    ids = [p.name for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return "; ".join(filter(None, (left_behind(client, run_id) for run_id in ids)))


def _verdicts(out: dict[str, Any]) -> str:
    """Every step's verdict and every invariant's, one line per step (printed, and the assertions' message)."""
    lines = [f"{out.get('scenario', '?')}: {out.get('verdict')}  traffic {out.get('traffic', {}).get('delivered')}/"
             f"{out.get('traffic', {}).get('sent')}"]
    for s in out.get("steps", []):
        inv = " ".join(f"{k}={'ok' if v['ok'] else 'FAIL'}" for k, v in s.get("invariants", {}).items())
        conf = s.get("confirmed") or {}
        said = f" | confirmed {conf.get('ok')}: {conf.get('how')}" if conf and conf.get("ok") is not True else ""
        lines.append(f"  #{s['index']} {s['action']:<11} {s['verdict']:<5} tree {s.get('tree_converged_s')} snake "
                     f"{s.get('snake_converged_s')} | {inv}{said}")
        lines += [f"      {k}: {v.get('detail')}" for k, v in s.get("invariants", {}).items() if not v["ok"]]
    return "\n".join(lines)


def _check_run(out: dict[str, Any], said: str, references: set[str]) -> None:
    """The run passed with every invariant of every fault step evaluated and ok, and its reference nodes ran the
    reference node (their node_started says so) with what they cannot shape reported."""
    assert out.get("verdict") == "pass", _verdicts(out) + "\n" + said
    for s in out["steps"][1:]:
        if s["action"] == "wait":
            continue
        assert set(s["invariants"]) == set(INVARIANTS) and all(v["ok"] for v in s["invariants"].values()), s
    run_dir = Path(out["run_dir"])
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["versions"]["reference_image"].startswith("snekbed-reference:"), meta["versions"]
    for name in references:
        started = [json.loads(x) for x in (run_dir / "events" / f"{name}.jsonl").read_text().splitlines()
                   if '"node_started"' in x]  # fmt: skip
        assert started and all(e["version"].startswith("pinecone-") for e in started), (name, started)
    ends = {(u["link"], u["node"]) for u in out["shaping_unapplied"]}
    assert ends == {(u["link"], u["node"]) for u in meta["shaping_unapplied"]}
    assert ends and {node for _, node in ends} <= references, ends


def _back_to_back(names: tuple[str, ...], tmp_path: Path) -> str:
    """The shipped scenarios ``names`` as one, in one network: the first whole, then each other's steps after its
    opening wait for convergence (the network is converged by then); its name joins theirs with ``+``."""
    docs = [yaml.safe_load(shipped_scenarios()[n].read_text()) for n in names]
    steps = [*docs[0]["steps"], *(st for d in docs[1:] for st in d["steps"][1:])]
    path = tmp_path / f"{'+'.join(names)}.yaml"
    path.write_text(yaml.safe_dump({**docs[0], "name": "+".join(names), "steps": steps}))
    return str(path)


#: the shipped scenarios on the mixed mesh-12: ``demo`` (a root kill, a partition into halves and its heal: every step
#: of ``partition-heal`` too), then ``flap`` and ``pause-root`` back to back in one network (one bring-up for both)
@pytest.mark.parametrize("scenarios", [("demo",), ("flap", "pause-root")], ids="+".join)
def test_mixed_mesh12_passes_the_shipped_scenario(client: object, image: str, reference_ready: None, tmp_path: Path,
                                                  scenarios: tuple[str, ...]) -> None:  # fmt: skip
    scenario = scenarios[0] if len(scenarios) == 1 else _back_to_back(scenarios, tmp_path)
    try:
        out, said = _chaos(scenario, _topology(tmp_path, "mixed"), image, tmp_path / "runs")
        print(_verdicts(out))
        _check_run(out, said, {f"n{i:02d}" for i in range(2, 13, 2)})
    finally:
        left = _left(client, tmp_path / "runs")
    assert not left, left


def test_all_reference_mesh12_passes_root_kill_x3(client: object, image: str, reference_ready: None,
                                                 tmp_path: Path) -> None:  # fmt: skip
    try:
        out, said = _chaos("root-kill-x3", _topology(tmp_path, "reference"), image, tmp_path / "runs")
        print(_verdicts(out))
        _check_run(out, said, {f"n{i:02d}" for i in range(1, 13)})
        kills = [s for s in out["steps"] if s["action"] == "kill"]
        assert len(kills) == 3 and len({str(s["targets"]) for s in kills}) == 3, kills  # three different roots
    finally:
        left = _left(client, tmp_path / "runs")
    assert not left, left


def test_every_other_fault_works_on_reference_nodes(client: object, image: str, reference_ready: None,
                                                   tmp_path: Path) -> None:  # fmt: skip
    """restart, link_change, adversary, join (of a pinecone node) and churn (kill and restart), on a ring of three
    reference (r) and three snekbed (s) nodes with two chords and a leaf s8 on r5. The link_change asks a delay the
    reference end cannot apply (reported); r5 drops the bootstraps of s8, whose every bootstrap crosses it (11 s:
    two bootstrap intervals), then lets them pass again and the network must be whole."""
    names = ["r1", "s2", "r3", "s4", "r5", "s6"]
    links = [[a, b] for a, b in zip(names, names[1:] + names[:1], strict=True)]
    links += [["r1", "r3"], ["s4", "s6"], ["r5", "s8"]]
    nodes = [{"name": n, **({"variant": "pinecone"} if n[0] == "r" else {})} for n in [*names, "s8"]]
    topo = tmp_path / "ring-6.yaml"
    topo.write_text(Topology.from_data({"name": "ring-6-mixed", "nodes": nodes, "links": links}).to_yaml())
    sc = tmp_path / "faults.yaml"
    sc.write_text(FAULTS)
    try:
        out, said = _chaos(str(sc), topo, image, tmp_path / "runs")
        print(_verdicts(out))
        assert out.get("verdict") == "pass", _verdicts(out) + "\n" + said
        assert [s["action"] for s in out["steps"]] == ["wait", "restart", "link_change", "adversary", "wait",
                                                      "adversary", "join", "churn"]  # fmt: skip
        run_dir = Path(out["run_dir"])
        actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
        kinds = {a["action"] for a in actions}
        assert {"restart", "link_change", "adversary", "join", "kill"} <= kinds, kinds
        unapplied = [a for a in actions if a["action"] == "shaping_unapplied"]
        assert [a["target"] for a in unapplied] == ["r1--s2"], unapplied  # the reference end's delay, said
        assert unapplied[0]["detail"]["unapplied"] == {"delay_ms": 8.0}, unapplied
        shaped = {(e["why"], e["node"]): e for e in out["link_shapes"]}
        if json.loads((run_dir / "meta.json").read_text())["shaping"]["backend"] == "kernel-partial":  # here
            # the rate to both kernels (the old tbf replaced), the delay to the snekbed end's shaper alone
            assert shaped["link_change", "r1"]["kernel"]["rate"].startswith("kernel: tbf"), shaped
            assert shaped["link_change", "r1"]["userspace"] is None, shaped
            assert shaped["link_change", "s2"]["kernel"]["rate"].startswith("kernel: tbf"), shaped
            assert shaped["link_change", "s2"]["userspace"] == {"delay_ms": 8.0}, shaped
            assert ("restart", "r3") in shaped, sorted(shaped)  # its new interfaces shaped again
        events = [json.loads(x) for x in (run_dir / "events" / "r5.jsonl").read_text().splitlines()]
        dropped = [e for e in events if e["event"] == "frame_dropped" and e["reason"] == "adversary"]
        assert dropped and {e["frame_type"] for e in dropped} == {"bootstrap"}, dropped
        started = (run_dir / "events" / "r7.jsonl").read_text()
        assert '"node_started"' in started and '"pinecone-' in started  # the joining node is a reference node
    finally:
        left = _left(client, tmp_path / "runs")
    assert not left, left
