"""Confirmed faults and slow against stuck, in process (virtual clock): every fault step records ``confirmed``; a
backend planted with a fault it silently does not do (test-only switches) comes out ``invalid`` with exit 3, not
pass; a planted stall comes out ``stuck``, a late convergence ``slow``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import trio
import trio.testing

from orchestrator.chaos.backend import PLANT_ENV
from orchestrator.chaos.checker import Reconvergence, evaluate
from orchestrator.chaos.inproc_backend import InprocChaos
from orchestrator.chaos.nemesis import random_scenario
from orchestrator.chaos.runner import run_scenario
from orchestrator.chaos.scenario import Scenario, parse_scenario_yaml
from orchestrator.model.generators import preferential, ring
from orchestrator.model.topology import Topology
from tests.ci import REPO

RING = ring(8)


def _run(topology: Topology | None, scenario: Scenario, seed: int = 0, **kw: Any) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await run_scenario(InprocChaos(topology, seed=seed, **kw), scenario, seed=seed)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _scenario(steps: str, name: str = "t") -> Scenario:
    return parse_scenario_yaml(f"name: {name}\nsettle_s: 1\ntraffic: null\nsteps:\n{steps}")


EVERY_FAULT = """\
  - {action: wait, until: converged, within_s: 120}
  - {action: kill, target: n03}
  - {action: restart, target: n03}
  - {action: pause, target: n05, for_s: 8}
  - {action: partition, groups: [[n01, n02, n03, n04], [rest]]}
  - {action: heal}
  - {action: link_down, link: [n01, n02]}
  - {action: link_up, link: [n01, n02]}
  - {action: flap, link: [n02, n03], period_s: 1, count: 2}
  - {action: link_change, link: [n04, n05], class: bluetooth}
  - {action: remove_node, target: n07}
  - {action: adversary, target: n06, drop: {bootstrap: 100}, check: false}
"""


def test_every_fault_step_is_confirmed_and_says_how() -> None:
    out = _run(RING, _scenario(EVERY_FAULT), seed=1)
    faults = [s for s in out["steps"] if s["action"] != "wait"]
    for s in faults:
        c = s["confirmed"]
        assert c["ok"] is True, (s["index"], s["action"], c)
        assert c["latency_s"] is not None and c["latency_s"] >= 0 and c["how"], c
    by = {s["action"]: s["confirmed"]["how"] for s in faults}
    assert "former peer(s) dropped the peering" in by["kill"] and "wrote no frame" in by["kill"]
    assert "peered with" in by["restart"] and "a probe from" in by["restart"]
    assert "resume n05" in by["pause"]  # the pause confirmed while paused, and the node back after it
    assert by["pause"].count("former peer(s) dropped the peering") == 1
    assert "cut link(s)" in by["partition"] and "inside the sides still peered and carrying" in by["partition"]
    assert "peered at both ends again" in by["heal"]
    assert "rtt" in by["link_change"] and "FAILED" not in by["link_change"]
    assert "dropped" in by["adversary"]
    assert out["verdict"] == "pass" and out["invalid_steps"] == []


def test_a_pause_is_confirmed_by_its_peers_after_the_keepalive_deadline() -> None:
    out = _run(RING, _scenario(EVERY_FAULT), seed=1)
    pause = next(s for s in out["steps"] if s["action"] == "pause")
    assert 5.0 <= pause["confirmed"]["latency_s"] <= 6.0  # the 5 s peer timeout, read every 0.5 s


def test_a_paused_node_is_resumed_only_once_its_silence_was_measured() -> None:
    """A pause shorter than its silence takes to measure (here 0.5 s against the 1 s without a frame a pause this
    short is judged on; on a loaded Docker host a 10 s pause of the root ended before its peers were read to have
    dropped it) ends once the silence is confirmed, never while it is read: else the reading sees the node answer
    again and the step is judged invalid for a fault that did happen."""
    out = _run(RING, _scenario("  - {action: wait, until: converged, within_s: 60}\n"
                               "  - {action: pause, target: n05, for_s: 0.5}\n"), seed=1)
    pause = out["steps"][1]
    assert pause["verdict"] == "pass" and pause["confirmed"]["ok"] is True, pause["confirmed"]
    assert "n05 answers nothing, it wrote no frame in" in pause["confirmed"]["how"], pause["confirmed"]
    assert "resume n05" in pause["confirmed"]["how"], pause["confirmed"]


@pytest.mark.parametrize(("plant", "steps", "action"), [
    ("ignore_partition", "  - {action: partition, groups: [[n01, n02, n03, n04], [rest]]}\n", "partition"),
    ("pause_noop", "  - {action: pause, target: n02, for_s: 10}\n", "pause"),
    ("link_change_noop", "  - {action: link_change, link: [n01, n02], class: bluetooth}\n", "link_change"),
])  # fmt: skip
def test_a_fault_the_backend_silently_skips_makes_the_step_and_the_run_invalid(plant: str, steps: str,
                                                                              action: str) -> None:  # fmt: skip
    sc = _scenario("  - {action: wait, until: converged, within_s: 120}\n" + steps)
    honest = _run(RING, sc, seed=2)
    assert honest["verdict"] == "pass", honest
    out = _run(RING, sc, seed=2, planted_bug=plant)
    step = next(s for s in out["steps"] if s["action"] == action)
    assert step["verdict"] == "invalid", step
    assert step["confirmed"]["ok"] is False and "not confirmed within" in step["confirmed"]["how"]
    assert step["invalid"].startswith("fault not confirmed")
    assert out["verdict"] == "invalid" and out["invalid_steps"] == [step["index"]]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "chaos", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600, env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize(("plant", "step", "why"), [
    ("ignore_partition", "  - {action: partition, by: halves}\n", "cut link(s) still peered"),
    ("pause_noop", "  - {action: pause, target: n02, for_s: 10}\n", "not confirmed within"),
    ("link_change_noop", "  - {action: link_change, link: [n01, n02], class: bluetooth}\n", "not confirmed within"),
])  # fmt: skip
def test_snekbed_chaos_exits_3_for_an_unconfirmed_fault(tmp_path: Path, plant: str, step: str, why: str) -> None:
    topo = tmp_path / "ring.yaml"
    topo.write_text(json.dumps(RING.to_record()))
    sc = tmp_path / "fault.yaml"
    sc.write_text("name: fault\nsettle_s: 1\ntraffic: null\nsteps:\n"
                  "  - {action: wait, until: converged, within_s: 120}\n" + step)  # fmt: skip
    if plant == "ignore_partition":  # the same file without the plant: exit 0 (the others: the in-process test)
        ok = _cli(str(sc), "--topology", str(topo), "--json")
        assert ok.returncode == 0, ok.stderr
    bad = _cli(str(sc), "--topology", str(topo), "--json", env={PLANT_ENV: plant})
    assert bad.returncode == 3, bad.stderr
    doc = json.loads(bad.stdout)
    assert doc["verdict"] == "invalid" and doc["invalid_steps"] == [1]
    assert why in doc["steps"][1]["invalid"], doc["steps"][1]


# -- slow against stuck ------------------------------------------------------------------------------


def test_the_checker_tells_slow_from_stuck() -> None:
    within = Reconvergence(4.0, 12.0, 50.0, 150.0)
    slow = Reconvergence(4.0, 61.3, 59.0, 177.0)
    stuck = Reconvergence(4.0, None, 59.0, 177.0)
    assert (within.pace, slow.pace, stuck.pace) == ("within", "slow", "stuck")
    r = evaluate(_graph(), {}, reconvergence=slow)["reconverged_within_bound"]
    assert not r.ok and r.detail.startswith("slow: re-converged 61.30 s after the fault")
    r = evaluate(_graph(), {}, reconvergence=stuck)["reconverged_within_bound"]
    assert not r.ok and r.detail.startswith("stuck: not re-converged within 177.0 s")
    r = evaluate(_graph(), {}, reconvergence=Reconvergence(4.0, None, 59.0))["reconverged_within_bound"]
    assert r.detail == "tree 4.00 s, snake not converged, bound 59.0 s"  # not watched past the bound: as before


def _graph() -> nx.Graph:
    return nx.Graph()


def test_a_planted_stall_comes_out_stuck() -> None:
    sc = _scenario("  - {action: kill, target: n03}\n")
    out = _run(RING, sc, seed=3, planted_bug="stall")  # the highest key never accepts a bootstrap
    step = out["steps"][0]
    assert step["verdict"] == "fail" and step["confirmed"]["ok"] is True
    rc = step["reconvergence"]
    assert rc["pace"] == "stuck" and rc["took_s"] is None and rc["horizon_s"] == pytest.approx(3 * rc["bound_s"], 0.01)
    assert step["invariants"]["reconverged_within_bound"]["detail"].startswith("stuck:")
    assert out["stuck_steps"] == [0] and out["slow_steps"] == [] and out["verdict"] == "fail"


class _TightBound(InprocChaos):
    """A backend whose re-convergence bound is far too tight: every convergence after a fault comes late."""

    def reconvergence_bound_s(self, margin_s: float) -> float:
        return 4.0


def test_a_convergence_after_its_bound_is_slow_with_the_time_it_took() -> None:
    sc = _scenario("  - {action: wait, until: converged, within_s: 120}\n  - {action: kill, target: root}\n")

    async def main() -> dict[str, Any]:
        return await run_scenario(_TightBound(RING, seed=4), sc, seed=4)

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    step = out["steps"][1]
    rc = step["reconvergence"]
    assert rc["pace"] == "slow" and rc["took_s"] > rc["bound_s"] == 4.0 and rc["horizon_s"] == 12.0
    assert rc["took_s"] == pytest.approx(max(step["tree_converged_s"], step["snake_converged_s"]), abs=1e-3)
    inv = step["invariants"]
    assert not inv["reconverged_within_bound"]["ok"]
    assert inv["reconverged_within_bound"]["detail"].startswith(f"slow: re-converged {rc['took_s']:.2f} s after")
    assert out["slow_steps"] == [1] and out["stuck_steps"] == [] and step["verdict"] == "fail"


#: a 600-node AS-like graph: `snekbed generate preferential --nodes 600 --mean-degree 2 --seed 1` (a tree of 407
#: leaves around a few hubs, diameter 16): a partition leaves the rest in a hundred or more components
AS_600 = preferential(600, 2, 1)


def _random_prefix(steps: int) -> Scenario:
    """The first ``steps`` steps of `snekbed chaos --random 30 --seed 1` on AS_600 (its wait, a restart, the first
    partition and its heal): replayed with the same seed, they run as in the 30-fault run."""
    full = random_scenario(AS_600, 30, 1)
    return Scenario.model_validate({**full.model_dump(), "steps": [st.model_dump() for st in full.steps[:steps]]})


@pytest.mark.slow
def test_a_heal_of_many_components_on_a_600_node_as_like_graph_is_slow_with_the_time_it_took() -> None:
    """The partition cuts 156 nodes off and leaves 162 components; the heal merges them, the tree within a few
    seconds and the snake 88.8 s after the fault, past its 64.0 s bound but within three: slow, failing its bound
    alone (about 20 s of wall time)."""
    out = _run(AS_600, _random_prefix(4), seed=1)
    part, heal = out["steps"][2], out["steps"][3]
    assert part["action"] == "partition" and part["components"] >= 100, part["components"]
    rc = heal["reconvergence"]
    assert heal["action"] == "heal" and rc["pace"] == "slow", heal
    assert rc["bound_s"] < rc["took_s"] < rc["horizon_s"] == pytest.approx(3 * rc["bound_s"], 0.01), rc
    bad = {k: v["detail"] for k, v in heal["invariants"].items() if not v["ok"]}
    assert list(bad) == ["reconverged_within_bound"] and bad["reconverged_within_bound"].startswith("slow:"), bad
    assert heal["tree_converged_s"] < 15.0 < heal["snake_converged_s"] == pytest.approx(rc["took_s"], abs=1e-3)
    assert out["slow_steps"] == [3] and out["stuck_steps"] == [] and out["failed_steps"] == [3]


@pytest.mark.slow
def test_a_planted_stall_on_a_600_node_as_like_graph_is_stuck() -> None:
    """The same graph with the highest key never accepting a bootstrap (test-only switch): the snake cannot close,
    and a kill's step is watched for three bounds and found stuck (about 20 s of wall time)."""
    sc = _scenario("  - {action: kill, target: n499}\n")
    out = _run(AS_600, sc, seed=1, planted_bug="stall")
    step = out["steps"][0]
    rc = step["reconvergence"]
    assert rc["pace"] == "stuck" and rc["took_s"] is None and rc["horizon_s"] == pytest.approx(3 * rc["bound_s"], 0.01)
    assert step["invariants"]["reconverged_within_bound"]["detail"].startswith("stuck: not re-converged within")
    assert not step["invariants"]["snake_ordered"]["ok"] and step["confirmed"]["ok"] is True
    assert out["stuck_steps"] == [0] and out["slow_steps"] == [] and out["verdict"] == "fail"


class _Unmeasured(InprocChaos):
    """The same backend with its confirmations switched off."""

    measures_faults = False


def test_the_confirmations_leave_an_in_process_run_as_it_was() -> None:
    """Every reading is a passive call on the event heap: with or without them, the same history and document
    (for steps that check: one that does not waits for its confirmation, here the adversary, left out)."""
    sc = _scenario(EVERY_FAULT.rsplit("  - {action: adversary", 1)[0])

    async def main(backend: InprocChaos) -> dict[str, Any]:
        return await run_scenario(backend, sc, seed=5)

    mock = trio.testing.MockClock
    measured = trio.run(main, InprocChaos(RING, seed=5), clock=mock(autojump_threshold=0))
    plain = trio.run(main, _Unmeasured(RING, seed=5), clock=mock(autojump_threshold=0))
    assert all(s["confirmed"]["ok"] is None for s in plain["steps"] if "confirmed" in s)
    for doc in (measured, plain):
        for s in doc["steps"]:
            s.pop("confirmed", None)
    assert measured == plain


def test_an_adversary_with_nothing_to_drop_is_not_measured_rather_than_invalid() -> None:
    """No traffic flows (no background pings, no checker pings: check false), so an adversary dropping traffic has
    nothing to drop: its drop counter cannot move, and the run is not invalid for it; dropping bootstraps, which
    arrive every few seconds, is confirmed."""
    out = _run(RING, _scenario("""\
  - {action: wait, until: converged, within_s: 120}
  - {action: adversary, target: n04, drop: {traffic: 100}, check: false}
  - {action: adversary, target: n05, drop: {bootstrap: 100}, check: false}
"""), seed=2)
    idle, busy = out["steps"][1]["confirmed"], out["steps"][2]["confirmed"]
    assert idle["ok"] is None and "nothing to drop" in idle["how"] and "traffic" in idle["how"], idle
    assert busy["ok"] is True and "dropped" in busy["how"], busy
    assert out["verdict"] != "invalid", out["verdict"]


class _DeafAdversary(InprocChaos):
    """A backend that reports an adversary it never configures (its node drops nothing)."""

    async def adversary(self, name: str, drop: dict[str, float], peer: str | None) -> None:
        await self.sleep(0)


ONE_PEER = """\
  - {action: wait, until: converged, within_s: 120}
  - {action: adversary, target: n05, drop: {bootstrap: 100}, peer: n04, check: false}
  - {action: adversary, target: n03, drop: {bootstrap: 100}, peer: n07, check: false}
  - {action: adversary, target: n03, drop: {bootstrap: 100}, check: false}
  - {action: adversary, target: n02, drop: {bootstrap: 100}, check: false}
  - {action: adversary, target: n02, drop: {traffic: 100}, peer: n01, check: false}
"""


def test_an_adversary_limited_to_one_peer_is_judged_on_that_peers_frames_of_its_kinds() -> None:
    """Bootstraps reach n03 from both its neighbours every few seconds (step 3 drops them), none from n07, which is
    no neighbour of it: dropping n07's is not measured, not invalid (judged on every peer's frames, it was). n02
    keeps dropping every peer's bootstraps by default when it is told to drop n01's traffic: those drops do not
    confirm the traffic (nothing flows), which is not measured (judged on every kind, it was confirmed)."""
    out = _run(RING, _scenario(ONE_PEER), seed=2)
    c = [s.get("confirmed") for s in out["steps"]]
    assert c[1]["ok"] is True and "frame(s) of bootstrap from n04" in c[1]["how"], c[1]
    assert c[2]["ok"] is None and "no frame(s) of bootstrap from n07 reached n03" in c[2]["how"], c[2]
    assert c[3]["ok"] is True and "dropped" in c[3]["how"], c[3]
    assert c[4]["ok"] is True, c[4]
    assert c[5]["ok"] is None and "no frame(s) of traffic from n01 reached n02" in c[5]["how"], c[5]
    assert out["verdict"] == "pass" and out["invalid_steps"] == [], out["invalid_steps"]


def test_an_adversary_that_drops_nothing_from_its_peer_is_invalid() -> None:
    """The same step on a backend that never configures the adversary: bootstraps from n04 reach n05 and none is
    dropped, so the step is invalid and says how many came."""
    sc = _scenario(ONE_PEER.split("  - {action: adversary, target: n03", 1)[0])

    async def main() -> dict[str, Any]:
        return await run_scenario(_DeafAdversary(RING, seed=2), sc, seed=2)

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    step = out["steps"][1]
    assert step["verdict"] == "invalid" and step["confirmed"]["ok"] is False, step
    assert "dropped none of the" in step["invalid"] and "frame(s) of bootstrap from n04" in step["invalid"]
    assert out["verdict"] == "invalid" and out["invalid_steps"] == [1]


class _Mute(InprocChaos):
    """A node whose state reading does not answer (a busy host's admin API): on every other reading, or always."""

    def __init__(self, *args: Any, always: bool, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.always, self.readings = always, 0

    async def states(self) -> dict[str, Any]:
        got = await super().states()
        self.readings += 1
        if self.always or self.readings % 2:
            got.pop("n05", None)
        return got


MUTE = """\
  - {action: wait, until: converged, within_s: 120}
  - {action: partition, groups: [[n05], [rest]]}
  - {action: heal}
"""


@pytest.mark.parametrize("always", [False, True], ids=["answers-when-read-again", "never-answers"])
def test_a_live_node_that_does_not_answer_is_read_again_and_never_judged_without(always: bool) -> None:
    """Judged without n05, the partition that isolates it would show one component and pass. Read again it is
    judged as usual; never answering, the step is invalid and names it."""

    async def main() -> dict[str, Any]:
        return await run_scenario(_Mute(RING, seed=3, always=always), _scenario(MUTE), seed=3)

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    cut, healed = out["steps"][1], out["steps"][2]
    if not always:
        assert out["verdict"] == "pass" and cut["components"] == 2 and healed["components"] == 1, out["steps"]
        assert "unread" not in cut and "unread" not in healed
        return
    for step in (cut, healed):
        assert step["verdict"] == "invalid" and step["unread"] == ["n05"], step
    assert cut["invalid"] == "1 live node(s) did not answer the checker: n05", cut
    assert healed["invalid"].startswith("fault not confirmed: heal"), healed  # n05's peers are not read either
    assert cut["components"] == 1 and out["verdict"] == "invalid" and out["invalid_steps"] == [1, 2], out
