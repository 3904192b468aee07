"""Replay without a browser: a recorded run rebuilt at any instant agrees with what the run's own observer measured;
faults from actions cut, pause and add; bad input is named; the app answers errors as JSON and loads nothing remote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import networkx as nx
import pytest

from orchestrator.sessions.sim import run_sim_sync
from orchestrator.sessions.sim import config_from_topology
from orchestrator.model.topology_loaders import load_topology
from orchestrator.tools.view.app import build_app, page_html
from orchestrator.tools.view.layout import MARGIN, SIZE, layout
from orchestrator.tools.view.timeline import Timeline, TimelineError

REPO = Path(__file__).resolve().parents[3]
MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """mesh-12 in process (virtual clock) with a root kill, recorded."""
    run = tmp_path_factory.mktemp("view") / "run"
    cfg = config_from_topology(load_topology(MESH12), seed=3, pairs=20, kill_root=True, record=run)
    out = run_sim_sync(cfg)
    return run, out


def test_replayed_verdict_agrees_with_the_runs_own_observer(recorded: tuple[Path, dict]) -> None:
    run, out = recorded
    tl = Timeline.from_run(run)
    assert tl.skipped_count == 0 and len(tl.graph.nodes) == 12
    series = tl.series()
    t0 = tl.t_start
    first_tree = next(p["t"] for p in series if p["tree"])
    first_snake = next(p["t"] for p in series if p["snake"])
    assert first_tree - t0 == pytest.approx(out["tree_converged_s"], abs=1e-3)
    assert first_snake - t0 == pytest.approx(out["snake_converged_s"], abs=1e-3)
    (kill,) = [f for f in tl.faults if f.action == "kill_root"]
    after = [p for p in series if p["t"] >= kill.t]
    assert after[0]["t"] == pytest.approx(kill.t) and not after[0]["tree"] and after[0]["live"] == 11
    tree2 = next(p["t"] for p in after if p["tree"])
    snake2 = next(p["t"] for p in after if p["snake"])
    assert tree2 - kill.t == pytest.approx(out["root_kill"]["tree_reconverged_s"], abs=1e-3)
    assert snake2 - kill.t == pytest.approx(out["root_kill"]["snake_reconverged_s"], abs=1e-3)


def test_the_root_before_and_after_the_kill(recorded: tuple[Path, dict]) -> None:
    run, out = recorded
    tl = Timeline.from_run(run)
    keys = json.loads((run / "meta.json").read_text())["nodes"]
    old = max(keys, key=keys.get)
    new = max((n for n in keys if n != old), key=keys.get)
    (kill,) = [f for f in tl.faults if f.action == "kill_root"]
    assert kill.target == old == out["root_kill"]["killed_name"]
    before = tl.at(kill.t - 0.01)
    assert before["roots"] == [old] and before["tree"] and before["snake"] and before["live"] == 12
    assert before["nodes"][old]["status"] == "up" and before["nodes"][old]["parent"] is None
    during = tl.at(kill.t + 1e-4)
    assert during["nodes"][old]["status"] == "dead" and during["live"] == 11
    settled = next(p["t"] for p in tl.series() if p["t"] > kill.t and p["snake"])
    end = tl.at(settled + 0.01)
    assert end["roots"] == [new] and end["snake"]
    # every live node's parent chain leads to the new root: the tree overlay is a tree
    parents = {n: s["parent"] for n, s in end["nodes"].items() if s["status"] == "up"}
    for n in parents:
        seen, cur = set(), n
        while parents[cur] is not None:
            assert cur not in seen
            seen.add(cur)
            cur = parents[cur]
        assert cur == new
    detail = tl.node_detail(new, settled + 0.01)
    assert detail["root"] == new and detail["peers"] and detail["counters"]["sent_bytes"] > 0


def _event(run_id: str, node: str, key: str, t: float, event: str, **fields: object) -> str:
    return json.dumps({"v": 1, "event": event, "run_id": run_id, "node": key, "node_name": node, "mono_s": t,
                       "wall_ts": 1.7e9 + t, **fields})


def _synthetic(tmp: Path) -> Path:
    """a-b-c-d in a line, e joins later on d; b is paused, the line is partitioned between b and c, then healed."""
    run = tmp / "synthetic"
    (run / "events").mkdir(parents=True)
    keys = {n: f"{i:x}" * 64 for i, n in zip(range(1, 6), "abcde")}  # e has the highest key
    rid = "syn1"
    (run / "meta.json").write_text(json.dumps({"run_id": rid, "backend": "inproc", "nodes": keys}))
    links = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
    (run / "topology.json").write_text(json.dumps({"name": "line", "nodes": [{"name": n} for n in keys],
                                                   "links": [{"a": a, "b": b, "class": "lan"} for a, b in links]}))
    top, ev = keys["d"], {n: [] for n in keys}
    for n in "abcd":
        ev[n].append(_event(rid, n, keys[n], 0.0, "node_started", listen=[], variant="snek", version="t"))
        if n != "d":
            ev[n].append(_event(rid, n, keys[n], 1.0, "root_changed", root=top, root_seq=1, prev_root=keys[n]))
    lower = {"b": "a", "c": "b", "d": "c"}
    for n, d in lower.items():
        ev[n].append(_event(rid, n, keys[n], 2.0, "descending_changed", descending=keys[d], prev=None))
    # after the partition at 10, a and b elect b; after the heal at 20, d again
    ev["a"].append(_event(rid, "a", keys["a"], 11.0, "root_changed", root=keys["b"], root_seq=1, prev_root=top))
    ev["b"].append(_event(rid, "b", keys["b"], 10.5, "root_changed", root=keys["b"], root_seq=1, prev_root=top))
    ev["a"].append(_event(rid, "a", keys["a"], 21.0, "root_changed", root=top, root_seq=2, prev_root=keys["b"]))
    ev["b"].append(_event(rid, "b", keys["b"], 21.0, "root_changed", root=top, root_seq=2, prev_root=keys["b"]))
    ev["e"].append(_event(rid, "e", keys["e"], 15.0, "node_started", listen=[], variant="snek", version="t"))
    for n in "abcd":
        ev[n].append(_event(rid, n, keys[n], 15.5, "root_changed", root=keys["e"], root_seq=1, prev_root=top))
    for n, lines in ev.items():
        (run / "events" / f"{n}.jsonl").write_text("".join(x + "\n" for x in lines))
    actions = [(5.0, "pause", "b", None), (6.0, "resume", "b", None),
               (10.0, "partition", None, {"groups": [["a", "b"], ["c", "d", "e"]]}), (15.0, "join", "e", None),
               (15.0, "join", "d--e", None), (20.0, "heal", None, None), (30.0, "kill", "c", None)]
    (run / "actions.jsonl").write_text("".join(json.dumps({"run_id": rid, "mono_s": t, "wall_ts": 1.7e9 + t,
                                                           "action": a, "target": tg, "detail": d}) + "\n"
                                               for t, a, tg, d in actions))
    (run / "pings.jsonl").write_text("")
    return run


def test_faults_from_actions_pause_cut_join_and_kill(tmp_path: Path) -> None:
    tl = Timeline.from_run(_synthetic(tmp_path))
    assert [f.action for f in tl.faults] == ["pause", "resume", "partition", "join", "join", "heal", "kill"]
    f3 = tl.at(3.0)
    assert f3["tree"] and f3["roots"] == ["d"] and f3["nodes"]["e"]["status"] == "absent"
    assert f3["links"] == ["up", "up", "up", "absent"]  # d--e joins at 15
    paused = tl.at(5.5)
    assert paused["nodes"]["b"]["status"] == "paused" and paused["live"] == 3 and paused["components"] == 2
    assert paused["links"][:2] == ["down", "down"]
    cut = tl.at(12.0)
    assert cut["links"][1] == "cut" and cut["components"] == 2 and cut["roots"] == ["b", "d"] and cut["tree"]
    assert [cut["nodes"][n]["component"] for n in "abcde"] == [0, 0, 1, 1, None]  # a tie: the lower names first
    joined = tl.at(16.0)
    assert joined["nodes"]["e"]["status"] == "up" and joined["links"][3] == "up"
    # everyone took e's root at 15.5, but a and b are cut off from e: the tree is wrong there
    assert joined["roots"] == ["e"] and not joined["tree"] and joined["wrong_root"] == ["a", "b"]
    healed = tl.at(25.0)
    assert healed["links"][1] == "up" and healed["components"] == 1
    killed = tl.at(31.0)
    assert killed["nodes"]["c"]["status"] == "dead" and killed["components"] == 2
    comps = [(p["t"], p["components"]) for p in tl.series()]
    assert (10.0, 2) in comps and (20.0, 1) in comps and (30.0, 2) in comps


def test_a_bad_line_is_skipped_and_named_and_bad_files_name_the_field(tmp_path: Path) -> None:
    run = _synthetic(tmp_path)
    with open(run / "events" / "a.jsonl", "a") as f:
        f.write('{"v": 1, "event": "root_changed"}\nnot json\n')
    tl = Timeline.from_run(run)
    assert tl.skipped_count == 2
    assert re.match(r".*events/a\.jsonl:\d+: missing_field: .*'run_id'", tl.skipped[0]), tl.skipped
    assert re.match(r".*events/a\.jsonl:\d+: not_json", tl.skipped[1]), tl.skipped
    (run / "meta.json").write_text(json.dumps({"run_id": "syn1", "nodes": ["a"]}))
    with pytest.raises(TimelineError, match=r"meta\.json: field 'nodes'"):
        Timeline.from_run(run)
    (run / "meta.json").unlink()
    with pytest.raises(TimelineError, match=r"meta\.json: missing"):
        Timeline.from_run(run)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "view", str(run), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "meta.json: missing" in done.stderr, done.stderr


def test_view_check_prints_what_the_page_would_show(recorded: tuple[Path, dict]) -> None:
    run, out = recorded
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "view", str(run), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    keys = json.loads((run / "meta.json").read_text())["nodes"]
    new = max((n for n in keys if n != out["root_kill"]["killed_name"]), key=keys.get)
    assert doc["nodes"] == 12 and doc["roots_at_end"] == [new] and doc["skipped"] == 0
    assert [f["action"] for f in doc["faults"]] == ["kill_root"]


async def test_the_app_answers_errors_as_json_and_ships_everything_it_loads(recorded: tuple[Path, dict]) -> None:
    tl = Timeline.from_run(recorded[0])
    transport = httpx.ASGITransport(app=build_app(tl))
    async with httpx.AsyncClient(transport=transport, base_url="http://view") as http:
        assert (await http.get("/api/frame?t=nope")).json() == {"error": "t='nope': expected seconds (a number)"}
        assert (await http.get("/api/frame?t=inf")).status_code == 400
        assert (await http.get("/api/node/zz")).status_code == 404
        graph = (await http.get("/api/graph")).json()
        assert graph["mode"] == "replay" and len(graph["nodes"]) == 12 and len(graph["links"]) == len(tl.graph.links)
        assert (await http.get("/api/summary")).json()["faults"][0]["action"] == "kill_root"
        assert (await http.get("/")).headers["content-type"].startswith("text/html")
    # no CDN: the only URL in the page is the SVG namespace
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page_html()))
    assert urls == {"http://www.w3.org/2000/svg"}, urls


def test_layout_is_deterministic_inside_the_box_and_keeps_components_apart() -> None:
    g = nx.disjoint_union(nx.cycle_graph(30), nx.path_graph(10))
    g = nx.relabel_nodes(g, {i: f"n{i}" for i in g})
    a, b = layout(g), layout(g)
    assert a == b and set(a) == set(g)
    assert all(MARGIN - 1e-6 <= v <= SIZE - MARGIN + 1e-6 for p in a.values() for v in p)
    box = [[min(a[f"n{i}"][k] for i in r) for k in (0, 1)] + [max(a[f"n{i}"][k] for i in r) for k in (0, 1)]
           for r in (range(30), range(30, 40))]
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = box
    assert ax1 < bx0 or bx1 < ax0 or ay1 < by0 or by1 < ay0, box  # the two components' boxes do not overlap
