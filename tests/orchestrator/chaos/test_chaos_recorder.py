"""Flight-recorder dumps of a failing chaos step, in process (virtual clock): a planted failure (a node that drops
every Traffic frame it receives, so pings through it are lost) leaves every live node's ring in the run directory,
named in the failing step's record; the dumps are contract lines and pcapng that tshark and the dissector read
with nothing malformed, and they show the dropped frames. Dumping reads only: the run's document is the same with
the recorder off, but for the new keys.

A planted routing bug (test only: the knob ``planted_bug=misroute_after_peer_loss``, node.core.planted, on the hub
of a five-node barbell) is found by the random nemesis, in process and on Docker as ``snekbed chaos --random``
runs it: the run fails at the fault next to the hub, and the dumps show the hub sending a transit ping back out
of the port it came in on and the peer there dropping it (``loop``), in the JSON lines and in tshark."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from contract.dataset import validate_record
from contract.recorder import RECORDER_FIELDS
from orchestrator.backends.docker_observe import AdminClient
from orchestrator.chaos.backend import ChaosBackend
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.flight import REFERENCE_NODE, from_admin
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.nemesis import random_scenario
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import Scenario
from orchestrator.model.generators import ring
from orchestrator.model.topology import Topology
from orchestrator.model.topology_loaders import parse_yaml
from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path
from tests.ci import need
from tests.orchestrator.docker_helpers import left_behind
from tests.orchestrator.planted import PLANTED

REPO = Path(__file__).resolve().parents[3]

RING = ring(6)


def _run(scenario: Scenario, run_dir: Path | None, **kw: Any) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await run_scenario(InprocChaos(RING, seed=1, **kw), scenario, seed=1, run_dir=run_dir)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    for line in text.splitlines():
        assert validate_record(line, RECORDER_FIELDS) is None, (path.name, line)
    return [json.loads(line) for line in text.splitlines()]


def test_a_failing_step_leaves_every_live_nodes_ring_named_in_its_record(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = execute(PLANTED, RING, ChaosOptions(seed=1, record=run_dir))
    wait, planted = out["steps"]
    assert wait["verdict"] == "pass" and "recorder" not in wait
    assert planted["verdict"] == "fail" and not planted["invariants"]["pairs_reachable"]["ok"], planted
    nodes = sorted(RING.node_names)
    assert planted["recorder"] == [f"recorder/1-{n}.{ext}" for n in nodes for ext in ("jsonl", "pcapng")]
    assert "recorder_unavailable" not in planted
    for rel in planted["recorder"]:
        assert (run_dir / rel).is_file() and (run_dir / rel).stat().st_size > 0
    dropped = [x for x in _lines(run_dir / "recorder/1-n03.jsonl") if x["kind"] == "dropped"]
    assert dropped and {x["reason"] for x in dropped} == {"adversary"}
    assert all(x["frame_type"] == "traffic" and x["ping"] in ("ping", "pong") for x in dropped)
    assert dropped[-1]["mono_s"] > out["steps"][1]["at_s"]  # after the fault was planted
    for n in nodes:
        kinds = {x["kind"] for x in _lines(run_dir / f"recorder/1-{n}.jsonl")}
        assert {"received", "sent", "event"} <= kinds, (n, kinds)
    _decodes_with_the_drops(run_dir / "recorder/1-n03.pcapng", len(dropped))


def _decodes_with_the_drops(pcap: Path, n_dropped: int) -> None:
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install -y tshark; scripts/setup.sh does)")
    result = check_capture(pcap)
    assert result.ok and result.malformed == 0 and result.frames > n_dropped, result.to_dict()
    out = subprocess.run([str(tshark), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek && ip.dst == 10.78.2.0/24", "-T", "fields", "-e", "frame.comment",
                          "-e", "snek.type", "-e", "snek.ping.type"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert len(rows) == n_dropped and all(r[0].startswith("dropped (adversary) port ") and r[1] == "0x03"
                                          for r in rows), rows


def _without_recorder_keys(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    for step in doc["steps"]:
        step.pop("recorder", None)
        step.pop("recorder_unavailable", None)
    return doc


def test_dumping_changes_nothing_of_the_run(tmp_path: Path) -> None:
    dumped = _run(PLANTED, tmp_path / "a")
    off = _run(PLANTED, tmp_path / "b", recorder_s=0.0)
    undirected = _run(PLANTED, None)
    assert dumped["verdict"] == "fail" and len(dumped["steps"][1]["recorder"]) == 2 * len(RING.node_names)
    assert _without_recorder_keys(dumped) == _without_recorder_keys(off) == _without_recorder_keys(undirected)
    assert off["steps"][1]["recorder"] == [] and not (tmp_path / "b" / "recorder").exists()
    assert off["steps"][1]["recorder_unavailable"] == [f"{n}: not available: the flight recorder is off"
                                                       for n in sorted(RING.node_names)]  # fmt: skip
    assert undirected["steps"][1]["recorder"] == []
    assert "no directory" in undirected["steps"][1]["recorder_unavailable"][0]


def test_a_node_without_a_recorder_says_why() -> None:
    class Bare(ChaosBackend):  # a backend that implements nothing: the protocol's own answer
        name = "bare"

    got = trio.run(Bare().flight_records, ["n1"])
    assert got == {"n1": "not available: the Bare backend reads no flight recorder"}
    with AdminClient({"n2": "127.0.0.1:9"}, timeout_s=0.5) as admin:  # a Docker run's nodes, one of them Go
        answers = from_admin(admin, ["ref", "n2", "gone"], reference={"ref"})
    assert answers["ref"] == REFERENCE_NODE
    assert answers["n2"].startswith("not available: n2: GET /recorder failed")
    assert answers["gone"].startswith("not available: unknown node 'gone'")


# ---------------------------------------------------------------- a planted routing bug, found by the random nemesis

#: two triangles sharing n03: every path between {n01, n02} and {n04, n05} goes through n03, which runs the planted
#: bug (test only, node.core.planted): once it has lost a peer, it sends transit Traffic back where it came from
BARBELL = """\
name: barbell-5
nodes:
- n01
- n02
- {name: n03, knobs: {planted_bug: misroute_after_peer_loss}}
- n04
- n05
links:
- {a: n01, b: n02}
- {a: n01, b: n03}
- {a: n02, b: n03}
- {a: n03, b: n04}
- {a: n03, b: n05}
- {a: n04, b: n05}
"""
HUB = "n03"
#: ``--random 1 --seed 4`` on BARBELL draws one fault, a kill of the root: n05 (the highest key of seed 4), a peer of
#: the hub, which then misroutes every transit frame, so the pings between n04 and n01/n02 are lost
NEMESIS_SEED = 4


def _barbell(planted: bool = True) -> Topology:
    text = BARBELL if planted else BARBELL.replace("{name: n03, knobs: {planted_bug: misroute_after_peer_loss}}", "n03")
    return parse_yaml(text)


def _found_the_planted_bug(out: dict[str, Any], run_dir: Path) -> None:
    """The run failed at the nemesis's fault, not before, on pairs_reachable alone; the failing step names every
    live node's dumps, which decode in tshark with the dissector (0 malformed) and show the hub sending a transit
    ping back out of the port it came in on, and the peer on that port dropping it as a loop."""
    wait, kill = out["steps"]
    assert out["verdict"] == "fail" and out["failed_steps"] == [1], [(s["action"], s["verdict"]) for s in out["steps"]]
    assert wait["verdict"] == "pass" and "recorder" not in wait  # the bug sleeps until the hub loses a peer
    assert kill["action"] == "kill" and kill["targets"] == ["n05"], kill
    bad = {k for k, v in kill["invariants"].items() if not v["ok"]}
    assert bad == {"pairs_reachable"}, kill["invariants"]  # tree and snake are right: only forwarding is wrong
    live = ["n01", "n02", "n03", "n04"]
    assert kill["recorder"] == [f"recorder/1-{n}.{ext}" for n in live for ext in ("jsonl", "pcapng")], kill
    assert "recorder_unavailable" not in kill, kill["recorder_unavailable"]
    lines = {n: _lines(run_dir / f"recorder/1-{n}.jsonl") for n in live}
    hub = lines[HUB]
    own = hub[0]["node"]
    received = {(x["port"], x["src_key"], x["dst_key"], x["ping"]) for x in hub if x["kind"] == "received"
                and x["frame_type"] == "traffic"}  # fmt: skip
    sent_back = [x for x in hub if x["kind"] == "forwarded" and x["frame_type"] == "traffic" and x["ping"]
                 and own not in (x["src_key"], x["dst_key"])
                 and (x["port"], x["src_key"], x["dst_key"], x["ping"]) in received]  # fmt: skip
    assert sent_back, "the hub's dump shows no transit ping sent back out of the port it came in on"
    flows = {(x["src_key"], x["dst_key"], x["ping"]) for x in sent_back}
    dropped = {n: [x for x in rows if x["kind"] == "dropped" and x["reason"] in ("loop", "watermark")
                   and (x["src_key"], x["dst_key"], x["ping"]) in flows]
               for n, rows in lines.items() if n != HUB}  # fmt: skip
    peer = max(dropped, key=lambda n: len(dropped[n]))
    assert dropped[peer], f"no peer of the hub dropped a ping it sent back: {flows}"
    for n in live:
        result = check_capture(run_dir / f"recorder/1-{n}.pcapng")
        assert result.ok and result.malformed == 0, (n, result.to_dict())
    shown = _tshark_traffic(run_dir / f"recorder/1-{HUB}.pcapng")
    back = {(f"forwarded port {x['port']}", x["src_key"], x["dst_key"]) for x in sent_back}
    assert back & {(c, src, dst) for c, src, dst in shown}, (sorted(back)[:3], shown[:10])
    drops = {(f"dropped ({x['reason']}) port {x['port']}", x["src_key"], x["dst_key"]) for x in dropped[peer]}
    assert drops & set(_tshark_traffic(run_dir / f"recorder/1-{peer}.pcapng")), sorted(drops)[:3]


def _tshark_traffic(pcap: Path) -> list[tuple[str, str, str]]:
    """(what the record was, source key hex, destination key hex) of every Traffic frame tshark shows with the
    dissector: the packet comment up to its first comma (``forwarded port 3``, ``dropped (loop) port 1``)."""
    tshark = shutil.which("tshark")
    need(tshark is not None, "tshark is not installed (apt-get install -y tshark; scripts/setup.sh does)")
    out = subprocess.run([str(tshark), "-r", str(pcap), "-X", f"lua_script:{dissector_path()}", *TSHARK_ARGS,
                          "-Y", "snek.type == 3", "-T", "fields", "-e", "frame.comment", "-e", "snek.src_key",
                          "-e", "snek.dest_key"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    rows = [ln.split("\t") for ln in out.splitlines()]
    return [(r[0].split(",")[0], r[1].replace(":", ""), r[2].replace(":", "")) for r in rows if len(r) == 3]


def test_the_random_nemesis_finds_a_planted_routing_bug_in_process(tmp_path: Path) -> None:
    topo = _barbell()
    sc = random_scenario(topo, 1, NEMESIS_SEED)
    assert [s.action for s in sc.steps] == ["wait", "kill"] and sc.steps[1].target == "root"
    run_dir = tmp_path / "run"
    _found_the_planted_bug(execute(sc, topo, ChaosOptions(seed=NEMESIS_SEED, record=run_dir)), run_dir)
    clean = execute(sc, _barbell(planted=False), ChaosOptions(seed=NEMESIS_SEED))
    assert clean["verdict"] == "pass", clean["steps"][1]["invariants"]  # without the bug, the same run passes


@pytest.mark.docker
@pytest.mark.slow
def test_the_random_nemesis_finds_a_planted_routing_bug_on_docker(client: object, image: str, tmp_path: Path) -> None:
    """``snekbed chaos --random 1 --seed 4 --backend docker`` on the barbell, the hub planted: the same finding,
    the dumps read from each container's admin API."""
    topo = tmp_path / "barbell.yaml"
    topo.write_text(BARBELL)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", "--random", "1", "--seed",
                           str(NEMESIS_SEED), "--topology", str(topo), "--backend", "docker", "--image", image,
                           "--runs-dir", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    out = json.loads(done.stdout) if done.stdout.strip() else {}
    try:
        assert done.returncode == 1 and out, done.stdout[-4000:] + done.stderr[-3000:]
        _found_the_planted_bug(out, Path(out["run_dir"]))
        started = [json.loads(ln) for ln in (Path(out["run_dir"]) / "events" / f"{HUB}.jsonl").read_text().splitlines()
                   if '"node_started"' in ln]  # fmt: skip
        assert [e["variant"] for e in started] == ["snek,planted_bug=misroute_after_peer_loss"], started  # the run says
    finally:
        left = left_behind(client, Path(out["run_dir"]).name) if out.get("run_dir") else ""
    assert not left, left + "\n" + done.stderr[-3000:]
