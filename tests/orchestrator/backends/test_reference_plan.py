"""The spec ``pinecone`` (the Pinecone reference itself) without an engine: the registry entry and its knobs, the
refusals of everything that would run it on snekbed's router (``snekbed node``, the in-process commands), and the
Docker plan of a mixed topology (the reference node's command line, derived as snekbed's, and the shaping its
ends cannot apply)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from node.core.variants import VariantError, VariantSpec
from orchestrator import cli
from orchestrator.backends.docker import require_reference_image
from orchestrator.backends.docker_net import DockerBackendError, plan_addresses
from orchestrator.backends.docker_plan import (
    NODE_EVENTS_DIR,
    implementation_of,
    plan_host_launches,
    plan_launches,
    unapplied_shaping,
)
from orchestrator.model.hosting import IN_PROCESS_REFUSAL, in_process_refusal
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import load_topology
from orchestrator.tools.compose import ComposeError, compose_document

REPO = Path(__file__).resolve().parents[3]
MESH = REPO / "compose" / "topologies" / "mesh-12.yaml"


def _mixed() -> Topology:
    mesh = load_topology(MESH)
    nodes = [n.model_copy(update={"variant": "pinecone"}) if i % 2 else n for i, n in enumerate(mesh.nodes)]
    return mesh.model_copy(update={"nodes": nodes})


def test_pinecone_is_a_spec_of_the_reference_implementation() -> None:
    spec = VariantSpec.parse("pinecone,hop_limiting=1,bootstrap_interval=5")
    assert str(spec) == "pinecone,hop_limiting=1" and spec.implementation == "reference"
    assert str(spec.as_protocol()) == "snek,hop_limiting=1" and VariantSpec.parse("legacy").as_protocol().name == "legacy"
    assert spec.peering_refusal(VariantSpec()) is None  # the reference's capabilities: it peers with snek nodes
    for fixed in ("entry_expiry=20", "root_filter=1", "bootstrap_interval=2"):
        with pytest.raises(VariantError, match="a constant of the reference"):
            VariantSpec.parse(f"pinecone,{fixed}")
    with pytest.raises(VariantError, match="not a variant of snekbed's router"):
        spec.router_options()
    assert VariantSpec.parse("snek").implementation == "snekbed"


def test_snekbed_node_refuses_pinecone_with_exit_2() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "node", "--variant", "pinecone", "--admin", "off"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "the Pinecone reference implementation" in done.stderr, done.stderr


def test_in_process_commands_refuse_reference_nodes_with_exit_2(tmp_path: Path) -> None:
    topo = tmp_path / "mixed.yaml"
    topo.write_text(_mixed().to_yaml())
    runner = CliRunner()
    runs = tmp_path / "runs"
    for args in (["sim", str(topo)], ["sim", str(MESH), "--variant", "pinecone"],
                 ["up", str(topo), "--backend", "inproc", "--runs-dir", str(runs)],
                 ["chaos", "demo", "--topology", str(topo)],
                 ["chaos", "demo", "--topology", str(MESH), "--variant", "pinecone,hop_limiting=1"],
                 ["ab", "--a", "snek", "--b", "pinecone", "--scenario", "demo", "--topology", str(MESH), "--seeds", "1",
                  "--out", str(tmp_path / "ab")]):  # fmt: skip
        res = runner.invoke(cli.main, args)
        assert res.exit_code == 2 and IN_PROCESS_REFUSAL in res.output, (args, res.output)
    assert not runs.exists() and not (tmp_path / "ab").exists()  # refused before anything was made


def test_a_join_step_of_pinecone_is_refused_in_process(tmp_path: Path) -> None:
    sc = tmp_path / "join.yaml"
    sc.write_text("name: j\nsteps:\n  - {action: wait, until: converged, within_s: 60}\n"
                  "  - {action: join, node: x, peers: [n01], variant: pinecone}\n")  # fmt: skip
    res = CliRunner().invoke(cli.main, ["chaos", str(sc), "--topology", str(MESH)])
    assert res.exit_code == 2 and "node x runs pinecone" in res.output and IN_PROCESS_REFUSAL in res.output, res.output


def test_hosting_names_the_nodes_and_lets_real_time_backends_host_them() -> None:
    specs = _mixed().variants()
    why = in_process_refusal(specs)
    assert why is not None and why.startswith("nodes n02, n04, n06, n08, n10, n12 run pinecone")
    assert in_process_refusal(specs, "docker") is None and in_process_refusal(specs, "swarm") is None
    assert in_process_refusal(load_topology(MESH).variants()) is None


def test_the_reference_node_gets_snekbeds_options_less_the_command_and_the_shaping() -> None:
    topo = _mixed()
    plan = plan_addresses(topo, "r1", pool="10.213.0.0/16")
    launches = plan_launches(topo, plan, run_id="r1", seed=7, shaping_backend="kernel-partial")
    ref, snk = launches["n02"], launches["n01"]
    assert (ref.implementation, ref.program, snk.implementation, snk.program) == (
        "reference", "pinecone-node", "snekbed", "snekbed")
    assert snk.args[0] == "node" and ref.args[0] == "--listen"
    # the same options, derived the same way (key seed, events, names, redial cap), bar the variant and the URIs
    for flag in ("--listen", "--admin", "--metrics", "--run-id", "--backoff-max-s"):
        assert ref.args[ref.args.index(flag) + 1] == snk.args[snk.args.index(flag) + 1]
    assert ref.args[ref.args.index("--events") + 1] == f"{NODE_EVENTS_DIR}/n02.jsonl"
    assert ref.args[ref.args.index("--key-seed") + 1] == topo.node("n02").seed_bytes(7).hex()
    assert ref.args[ref.args.index("--variant") + 1] == "snek"
    uris = [ref.args[i + 1] for i, a in enumerate(ref.args) if a in ("--peer", "--inbound")]
    assert uris and all(u.split("?", 1)[1].startswith("class=") and "&" not in u for u in uris), uris
    assert any("delay_ms=" in a for a in snk.args)  # snekbed's end still delays what it sends
    assert implementation_of(topo.node("n02")) == "reference" and implementation_of(topo.node("n01")) == "snekbed"


def test_unapplied_shaping_names_each_reference_end_and_what_it_misses() -> None:
    topo = _mixed()
    partial = unapplied_shaping(topo, "kernel-partial")
    ends = {(u["link"], u["node"]) for u in partial}
    refs = {n.name for n in topo.nodes if n.variant == "pinecone"}
    expected = {(i, end) for i, ln in enumerate(topo.links) for end in (ln.a, ln.b) if end in refs}
    assert ends == expected and all(set(u["unapplied"]) <= {"delay_ms", "jitter_ms"} for u in partial)
    bt = next(u for u in partial if u["class"] == "bluetooth")
    assert bt["unapplied"] == {"delay_ms": 30.0, "jitter_ms": 5.0} and "no userspace shaper" in bt["why"]
    assert unapplied_shaping(topo, "kernel-netem") == []
    user = unapplied_shaping(topo, "userspace")
    assert {"rate_mbit", "loss_pct"} <= set(next(u for u in user if u["class"] == "bluetooth")["unapplied"])
    assert unapplied_shaping(load_topology(MESH), "userspace") == []


def test_reference_nodes_need_an_image_and_cannot_be_host_nodes(tmp_path: Path) -> None:
    topo = _mixed()
    with pytest.raises(DockerBackendError, match="no reference image"):
        require_reference_image(topo, None)
    require_reference_image(topo, "snekbed-reference:x")
    require_reference_image(load_topology(MESH), None)
    host = Topology.from_data({"name": "h", "nodes": [{"name": "a", "host": True, "variant": "pinecone"}, "b"],
                               "links": [["a", "b"]]})  # fmt: skip
    plan = plan_addresses(host, "r2", pool="10.213.0.0/16")
    with pytest.raises(DockerBackendError, match="host node a runs pinecone"):
        plan_host_launches(host, plan, run_id="r2", seed=0, events_dir=tmp_path, admin={"a": "127.0.0.1:1"})


def test_version_says_whether_reference_nodes_can_run_here_and_why_not(tmp_path: Path) -> None:
    here = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)  # fmt: skip
    line = next(x for x in here.stdout.splitlines() if x.startswith("reference nodes: "))
    assert here.returncode == 0 and line.startswith(("reference nodes: available (", "reference nodes: not available: "))
    missing = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"], capture_output=True, text=True,
                             cwd=REPO, timeout=60, env={**os.environ, "SNEKBED_PINECONE_SRC": str(tmp_path)})  # fmt: skip
    assert f"reference nodes: not available: {tmp_path} (SNEKBED_PINECONE_SRC) is neither" in missing.stdout


def test_compose_files_refuse_reference_nodes() -> None:
    with pytest.raises(ComposeError, match=r"spec pinecone.*use `snekbed up`.*n02, n04"):
        compose_document(_mixed())
