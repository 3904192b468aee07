"""A host node (``host: true``): a `snekbed node` process on this machine, outside Docker, joins a Docker line.

The test plays the user: it runs `snekbed up` (and later `snekbed chaos`) as a subprocess, reads the
`snekbed node` command the orchestrator prints for the host node, and starts that command itself. The run
must converge with the host node in it, pings must cross between it and a container both ways in snek and
tree mode, a chaos scenario that partitions it off and heals it must pass, and nothing labelled with either
run may be left afterwards.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from contract.dataset import validate_event
from tests.orchestrator.docker_helpers import labelled, left_behind

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
LINE_HOST = REPO / "compose" / "topologies" / "line-host.yaml"
SNEKBED = [sys.executable, "-m", "orchestrator.cli"]

PARTITION = """\
name: host-partition
settle_s: 2
traffic: {rate_per_s: 4, pairs: 4}
steps:
  - {action: wait, until: converged, within_s: 120}
  - {action: partition, groups: [[h], [n01, n02]]}
  - {action: heal, after_s: 3}
  - {action: link_down, link: [n02, h]}
  - {action: link_up, link: [n02, h], after_s: 3}
"""


class Streamed:
    """A subprocess whose stderr is read line by line as it comes (the host node's command is on it)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def host_command(self, timeout_s: float = 300) -> list[str]:
        """The printed `snekbed node ...` line, split as a shell would."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith("snekbed node "):
                    return shlex.split(line)
            assert self.proc.poll() is None, "\n".join(self.lines[-40:])
            time.sleep(0.1)
        raise AssertionError("no `snekbed node` command printed:\n" + "\n".join(self.lines[-40:]))

    def finish(self, timeout_s: float = 600) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout_s)
        self._reader.join(5)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_host_node(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Run the printed command as the user would (``snekbed`` is this interpreter's orchestrator CLI)."""
    assert argv[:2] == ["snekbed", "node"], argv
    return subprocess.Popen([*SNEKBED, *argv[1:]], stdout=subprocess.DEVNULL, stderr=log.open("w"), cwd=REPO)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def snekbed(*args: str, timeout_s: float = 300) -> dict:
    done = subprocess.run([*SNEKBED, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout_s)
    assert done.stdout.strip(), f"no output (exit {done.returncode}):\n{done.stderr[-3000:]}"
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    doc["_exit"] = done.returncode
    return doc


def test_host_node_joins_a_docker_line_pings_both_ways_and_down_leaves_nothing(
        client: object, image: str, run_id: str, tmp_path: Path) -> None:
    runs = ["--runs-dir", str(tmp_path), "--run-id", run_id]
    up = Streamed([*SNEKBED, "up", str(LINE_HOST), "--image", image, "--json", *runs])
    node: subprocess.Popen[bytes] | None = None
    try:
        argv = up.host_command()
        assert "--key-seed" in argv and "--admin" in argv and any(a.startswith("tcp://") for a in argv), argv
        node = start_host_node(argv, tmp_path / "h.log")
        code, out = up.finish()
        assert code == 0, out + "\n".join(up.lines[-40:])
        doc = json.loads(out.strip().splitlines()[-1])
        assert doc["converged"] and doc["nodes"] == 3 and set(doc["host_nodes"]) == {"h"}, doc
        assert labelled(client, f"snekbed.run={run_id}") == (2, 3)  # two containers; control + two link networks
        for mode in ("snek", "tree"):
            for a, b in (("h", "n01"), ("n01", "h")):
                res = snekbed("ping", a, b, "--mode", mode, "--count", "2", "--json", *runs)
                assert res["_exit"] == 0 and res["received"] == 2, res
                assert {p["hops"] for p in res["pings"]} == {3}, res  # n01 - n02 - h: 2 links, reported as 3
        status = snekbed("status", "--json", *runs)
        assert status["snake"] and status["running"] == 3 and not status["unreachable"], status
        rows = {r["name"]: r for r in status["nodes"]}
        assert rows["h"]["container"] == "host" and rows["h"]["key"] == doc["host_nodes"]["h"]["key"]
        assert rows["h"]["peers"] == 1 and rows["n02"]["peers"] == 2, rows
    finally:
        up.kill()
        if node is not None:
            stop(node)
    events = (tmp_path / run_id / "events" / "h.jsonl").read_text().splitlines()
    assert json.loads(events[0])["event"] == "node_started" and json.loads(events[-1])["event"] == "node_stopping"
    assert [validate_event(x, run_id) for x in events] == [None] * len(events)
    down = snekbed("down", "--json", *runs)
    left = left_behind(client, run_id)  # a network the engine's stale count keeps is recorded, not a failure
    assert not left, left
    assert (down["containers_removed"], down["networks_removed"] + down.get("networks_left", 0)) == (2, 3), down


def test_chaos_partitions_a_host_node_off_and_heals_it(client: object, image: str, tmp_path: Path) -> None:
    sc = tmp_path / "partition.yaml"
    sc.write_text(PARTITION)
    run_id = f"t{uuid.uuid4().hex[:7]}"
    chaos = Streamed([*SNEKBED, "chaos", str(sc), "--topology", str(LINE_HOST), "--backend", "docker", "--image",
                      image, "--record", str(tmp_path / "runs" / run_id), "--json"])
    node: subprocess.Popen[bytes] | None = None
    try:
        node = start_host_node(chaos.host_command(), tmp_path / "h.log")
        code, out = chaos.finish(timeout_s=900)
        doc = json.loads(out) if out.strip() else {}
        assert code == 0 and doc["verdict"] == "pass", out[-6000:] + "\n".join(chaos.lines[-40:])
        steps = doc["steps"]
        assert [s["action"] for s in steps] == ["wait", "partition", "heal", "link_down", "link_up"]
        assert steps[1]["components"] == 2 and steps[2]["components"] == 1, steps
        assert steps[1]["detail"] == "1 link(s) cut", steps[1]
        for s in steps[1:]:
            assert all(v["ok"] for v in s["invariants"].values()), s
            # each fault measured on the host node's link itself: a probe sent from this machine (the link's host
            # end) to the container's address on it, not answered while cut, answered once back
            assert s["confirmed"]["ok"] is True and "probe" in s["confirmed"]["how"], s
        pings = [json.loads(x) for x in (tmp_path / "runs" / run_id / "pings.jsonl").read_text().splitlines()]
        to_h = [p for p in pings if p["target"] == "h" and p["received"]]
        from_h = [p for p in pings if p["sender"] == "h" and p["received"]]
        assert to_h and from_h, (len(pings), len(to_h), len(from_h))
    finally:
        chaos.kill()
        if node is not None:
            stop(node)
        from orchestrator.backends.docker import DockerBackend

        DockerBackend(client).down(run_id)  # type: ignore[arg-type]
    left = left_behind(client, run_id)  # a network the engine's stale count keeps is recorded, not a failure
    assert not left, left


def test_chaos_refuses_to_kill_or_pause_a_host_node(tmp_path: Path) -> None:
    """Faults that need a container are refused for a host node before anything starts (exit 2, the step named)."""
    for action in ("kill", "pause"):
        sc = tmp_path / f"{action}.yaml"
        sc.write_text(f"name: host-{action}\nsteps:\n  - {{action: wait, until: converged, within_s: 60}}\n"
                      f"  - {{action: {action}, target: h}}\n")
        done = subprocess.run([*SNEKBED, "chaos", str(sc), "--topology", str(LINE_HOST), "--backend", "docker",
                               "--image", "snekbed-no-such-image:never", "--runs-dir", str(tmp_path / "runs")],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"steps[1] ({action} h): h is a host node" in done.stderr, done.stderr[-2000:]
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
