"""What the view's sources hand the page, without a browser: live pings from an in-process network's own routers
(delivered and lost, at the time replay would draw them, the run's own observer still fed), the live app's
``/api/pings``, and a failing chaos step's flight-recorder dumps placed on the replay's timeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from orchestrator.backends.inproc import InprocNetwork, SimNode
from orchestrator.chaos.engine import ChaosOptions, execute
from orchestrator.model.generators import ring
from orchestrator.tools.view.app import LiveHub, build_app, build_live_app
from orchestrator.tools.view.frames import GraphInfo
from orchestrator.tools.view.live import RECENT_PINGS, InprocLive
from orchestrator.tools.view.recorder import MAX_DROPS
from orchestrator.tools.view.timeline import Timeline
from tests.orchestrator.planted import PLANTED

RING = ring(6)


def test_live_pings_of_an_in_process_network_as_replay_draws_them() -> None:
    nodes, links = ["a", "b", "c"], [("a", "b", "lan"), ("b", "c", "lan")]
    net = InprocNetwork(nodes, links, seed=1, link_delay_ms=5.0)
    seen: list[str] = []

    def observer(node: SimNode, kind: str, fields: dict[str, Any], now: float) -> None:
        seen.append(kind)

    net.on_event = observer  # the run's own observer, set before the page's source
    live = InprocLive(net, GraphInfo("line-3", nodes, {n: sn.key.hex() for n, sn in net.nodes.items()}, links), "t")

    async def main() -> tuple[dict[str, Any], float, float]:
        net.start()
        await net.run_until(10.0)
        sent_ok = net.now
        assert net.start_ping("a", "c", "snek", 5.0)
        await net.run_until(net.now + 1.0)
        net.kill("c")
        sent_lost = net.now
        assert net.start_ping("a", "c", "snek", 2.0)
        await net.run_until(net.now + 3.0)
        return await live.frame(), sent_ok, sent_lost

    frame, sent_ok, sent_lost = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert "ping_result" in seen and "root_changed" in seen  # the observer still sees every event
    assert frame["pings_n"] == 2 and frame["pings_ok"] == 1
    (i0, t0, ok0), (i1, t1, ok1) = frame["pings_recent"]
    assert (i0, ok0, i1, ok1) == (0, True, 1, False)
    assert t0 == pytest.approx(sent_ok, abs=1e-3)  # a delivered ping: at the time it was sent
    assert t1 == pytest.approx(sent_lost + 2.0, abs=1e-3)  # a lost one: when its timeout expired
    assert live.pings_since(1) == [[1, t1, False]]


def test_live_app_answers_pings_since_and_a_frame_repeats_only_the_recent_ones() -> None:
    net = InprocNetwork(["a", "b"], [("a", "b", "lan")], seed=1)
    live = InprocLive(net, GraphInfo("pair", ["a", "b"], {n: sn.key.hex() for n, sn in net.nodes.items()},
                                     [("a", "b", "lan")]), "t")
    for i in range(RECENT_PINGS + 50):
        live.pings.add(float(i), i % 3 != 0)

    async def main() -> tuple[dict[str, Any], dict[str, Any], httpx.Response]:
        hub = LiveHub(live, 0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            app = build_live_app(hub)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://view") as client:
                frame = (await client.get("/api/frame")).json()
                since = (await client.get("/api/pings", params={"since": 240})).json()
                bad = await client.get("/api/pings", params={"since": "x"})
            nursery.cancel_scope.cancel()
        return frame, since, bad

    frame, since, bad = trio.run(main)
    assert frame["pings_n"] == RECENT_PINGS + 50 and frame["pings_ok"] == sum(i % 3 != 0 for i in range(250))
    assert [p[0] for p in frame["pings_recent"]] == list(range(50, 250))
    assert since["pings"] == [[i, float(i), i % 3 != 0] for i in range(240, 250)]
    assert bad.status_code == 400 and "since='x'" in bad.json()["error"]


def test_a_failing_steps_dumps_are_on_the_replays_timeline_at_that_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    out = execute(PLANTED, RING, ChaosOptions(seed=1, record=run))
    failed = out["steps"][1]
    assert failed["verdict"] == "fail" and failed["recorder"]
    (run / "recorder" / "1-n01.jsonl").open("a").write('{"v": 1, "kind": "sent"}\n')  # a bad line is named
    tl = Timeline.from_run(run)
    assert tl.skipped_count == 1 and tl.skipped[0].startswith(f"{run / 'recorder' / '1-n01.jsonl'}:")
    (dump,) = tl.summary()["dumps"]
    step = next(json.loads(x) for x in (run / "actions.jsonl").read_text().splitlines()
                if json.loads(x)["action"] == "step" and json.loads(x)["detail"]["index"] == 1)
    assert dump["step"] == 1 and dump["action"] == "adversary" and dump["step_t"] == step["mono_s"]
    assert dump["step_t"] == pytest.approx(failed["at_s"], abs=1e-6)
    assert dump["t"] == pytest.approx(failed["end_s"], abs=1e-3)  # read out at the step's verdict
    assert dump["t_from"] < dump["step_t"] < dump["t"] <= tl.t_end
    names = sorted(RING.node_names)
    assert [n["name"] for n in dump["nodes"]] == names
    assert [f for n in dump["nodes"] for f in (n["file"], n["pcapng"])] == failed["recorder"]
    n03 = next(n for n in dump["nodes"] if n["name"] == "n03")
    assert set(n03["drops"]) == {"adversary"} and n03["kinds"]["dropped"] == n03["drops"]["adversary"] > 0
    assert len(n03["dropped"]) == min(MAX_DROPS, n03["drops"]["adversary"])
    assert all(d["frame_type"] == "traffic" and d["ping"] in ("ping", "pong") for d in n03["dropped"])
    assert dump["dropped"] == n03["drops"]["adversary"]  # only the adversary dropped anything

    async def summary() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(tl)), base_url="http://v") as c:
            return (await c.get("/api/summary")).json()

    assert trio.run(summary)["dumps"] == tl.summary()["dumps"]
