"""One exit-code rule for every command (contract.exit_codes; docs/orchestrator.md, "Exit codes"): a malformed
file is exit 2 with a message naming it, whichever command reads it; a refused ``up`` is exit 2 and leaves no run
directory and ``runs/LATEST`` as it was.

Every command runs as its own process (``python -m orchestrator.cli``), as a user or a script runs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contract.exit_codes import BAD_INPUT
from tests.ci import REPO, need
from tests.conftest import docker_available

LINE5 = REPO / "compose" / "topologies" / "line-5.yaml"
BAD_TOPOLOGY = "name: bad\nnodes: [a, b]\nlinks:\n  - {a: a, b: zz}\n"  # line 4, field links[0].b
BAD_SCENARIO = "name: bad\nsteps:\n  - {action: wait, until: converged, within_s: 5}\n  - {action: kil, target: a}\n"


def snekbed(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One malformed file of each kind a command reads, and a runs directory whose latest run is malformed."""
    root = tmp_path_factory.mktemp("bad")
    files = {"topology": root / "topology.yaml", "scenario": root / "scenario.yaml", "pcap": root / "capture.pcapng",
             "key": root / "node.key", "runs": root / "runs", "out": root / "out"}  # fmt: skip
    files["topology"].write_text(BAD_TOPOLOGY)
    files["scenario"].write_text(BAD_SCENARIO)
    files["pcap"].write_text("not a capture\n")
    files["key"].write_text("not a key\n")
    run = files["runs"] / "r1"
    (run / "events").mkdir(parents=True)
    for name in ("meta.json", "topology.json"):
        (run / name).write_text("{not json\n")
    (files["runs"] / "LATEST").write_text("r1\n")
    files["run"], files["meta"], files["topology.json"] = run, run / "meta.json", run / "topology.json"
    return files


#: (command line, the file its message must name, needs a Docker engine); {name} is a file of the ``bad`` fixture
CASES: dict[str, tuple[str, str, bool]] = {
    "sim": ("sim {topology}", "topology", False),
    "up": ("up {topology} --runs-dir {out}/runs", "topology", False),
    "up-inproc": ("up {topology} --backend inproc --runs-dir {out}/runs", "topology", False),
    "compose": ("compose {topology} -o {out}/compose.yml", "topology", False),
    "chaos": ("chaos {scenario}", "scenario", False),
    "chaos-topology": ("chaos root-kill-x3 --topology {topology}", "topology", False),
    "ab": ("ab --a snek --b snek-s0 --scenario {scenario} --out {out}/ab", "scenario", False),
    "ab-topology": ("ab --a snek --b snek-s0 --scenario root-kill-x3 --topology {topology} --out {out}/ab",
                    "topology", False),
    "demo": ("demo --backend inproc --no-analyze --topology {topology} --runs-dir {out}/runs", "topology", False),
    "view": ("view {run} --check", "meta", False),
    "analyze": ("analyze {run} --out {out}/analysis", "meta", False),
    "status": ("status --runs-dir {runs}", "meta", False),
    "ping": ("ping a b --runs-dir {runs}", "meta", False),
    "kill-root": ("kill-root --runs-dir {runs}", "meta", False),
    "down": ("down --runs-dir {runs}", "meta", False),
    "capture": ("capture a --runs-dir {runs}", "meta", False),
    "links-show": ("links show --runs-dir {runs}", "topology.json", True),
    "links-check": ("links check --runs-dir {runs}", "topology.json", True),
    "wireshark-check": ("wireshark check {pcap}", "pcap", False),
    "node": ("node --key-file {key} --listen off --admin off --metrics off", "key", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_file_is_exit_2_naming_it(case: str, bad: dict[str, Path]) -> None:
    line, named, engine = CASES[case]
    if engine:
        need(*docker_available())
    if case == "wireshark-check":
        need(shutil.which("tshark") is not None, "tshark is not installed")
    done = snekbed(*line.format(**bad).split())
    assert done.returncode == BAD_INPUT, (case, done.returncode, done.stderr[-2000:])
    assert str(bad[named]) in done.stderr, (case, done.stderr[-2000:])
    if named == "topology":  # the loader knows the line and the field: every command says them
        assert f"{bad['topology']}:4: links[0].b: unknown node 'zz'" in done.stderr, (case, done.stderr[-2000:])
    if named == "scenario":
        assert f"{bad['scenario']}:4: steps[1].action: unknown action 'kil'" in done.stderr, (case, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, (case, done.stderr[-2000:])
    assert not (bad["out"] / "runs").exists(), case  # nothing was made


def _swarm_inactive() -> tuple[bool, str]:
    ok, why = docker_available()
    if not ok:
        return ok, why
    import docker

    state = (docker.from_env().info().get("Swarm") or {}).get("LocalNodeState", "inactive")
    return state == "inactive", f"this engine's swarm is {state}: the refusal needs an engine in no swarm"


#: ``up`` refused before anything starts: (extra arguments, what the message says)
REFUSED_UP: dict[str, tuple[list[str], str]] = {
    "swarm-without-a-swarm": (["--backend", "swarm"], "--backend swarm needs an engine that is a swarm manager"),
    "monitoring-in-process": (["--backend", "inproc", "--monitoring"], "--monitoring runs Prometheus next to Docker"),
    "bad-run-id": (["--backend", "inproc", "--run-id", "Not/An/Id"], "--run-id 'Not/An/Id'"),
}


@pytest.mark.xdist_group("swarm")  # its swarm case needs the engine in no swarm: never beside test_swarm.py
@pytest.mark.parametrize("case", sorted(REFUSED_UP))
def test_a_refused_up_leaves_no_run_directory_and_latest_as_it_was(case: str, tmp_path: Path) -> None:
    if case == "swarm-without-a-swarm":
        need(*_swarm_inactive())
    extra, said = REFUSED_UP[case]
    runs = tmp_path / "runs"
    (runs / "before").mkdir(parents=True)
    (runs / "before" / "topology.json").write_text("{}\n")
    (runs / "LATEST").write_text("before\n")
    done = snekbed("up", LINE5, "--runs-dir", runs, *extra)
    assert done.returncode == BAD_INPUT, done.stderr[-2000:]
    assert said in done.stderr, done.stderr[-2000:]
    assert "rolled back" not in done.stderr and "roll back" not in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in runs.iterdir()) == ["LATEST", "before"]
    assert (runs / "LATEST").read_text() == "before\n"


@pytest.mark.parametrize("sub", ["show", "clear", "apply"])
def test_links_on_a_swarm_run_say_its_links_are_shaped_in_userspace(sub: str, tmp_path: Path) -> None:
    """A swarm run's tasks carry their shapes in their peer URIs (no qdisc on this host to apply, show or clear):
    ``links show/clear/apply`` say so and point at ``links check``, not "is it up?"."""
    need(*docker_available())
    runs = tmp_path / "runs"
    run = runs / "sw1"
    (run / "events").mkdir(parents=True)
    (run / "topology.json").write_text(json.dumps({"name": "pair", "nodes": ["a", "b"], "links": [["a", "b"]]}))
    (run / "meta.json").write_text(json.dumps({"backend": "swarm", "shaping": {"backend": "userspace"}}))
    (runs / "LATEST").write_text("sw1\n")
    done = snekbed("links", sub, "--runs-dir", runs)
    assert done.returncode == BAD_INPUT, done.stderr[-2000:]
    assert "run 'sw1' is a swarm run" in done.stderr and "snekbed links check --run-id sw1" in done.stderr, done.stderr
    assert "is it up?" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
