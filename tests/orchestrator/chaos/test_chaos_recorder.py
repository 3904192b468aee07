"""Flight-recorder dumps of a failing chaos step, in process (virtual clock): a planted failure (a node that drops
every Traffic frame it receives, so pings through it are lost) leaves every live node's ring in the run directory,
named in the failing step's record; the dumps are contract lines and pcapng that tshark and the dissector read
with nothing malformed, and they show the dropped frames. Dumping reads only: the run's document is the same with
the recorder off, but for the new keys."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import trio
import trio.testing

from contract.dataset import validate_record
from contract.recorder import RECORDER_FIELDS
from orchestrator.backends.docker_observe import AdminClient
from orchestrator.chaos.backend import ChaosBackend
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.chaos.flight import REFERENCE_NODE, from_admin
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import Scenario, parse_scenario_yaml
from orchestrator.model.generators import ring
from orchestrator.tools.capture import TSHARK_ARGS, check_capture, dissector_path
from tests.ci import need

RING = ring(6)
#: a node that drops every Traffic frame it receives: pings through it or to it are lost, the step fails
PLANTED = parse_scenario_yaml("""\
name: planted
settle_s: 1
traffic: null
steps:
  - {action: wait, until: converged, within_s: 120}
  - {action: adversary, target: n03, drop: {traffic: 100}}
""")


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
