"""What a catalogue run (orchestrator.experiments.attack.catalogue_scenario) must show, read from its run directory
and the engine's result: shared by the in-process and the Docker test."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.experiments.attack import ATTACKS


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [e for f in sorted((run_dir / "events").glob("*.jsonl")) for e in _jsonl(f)]


def evidence(result: dict[str, Any], infos: list[dict[str, Any]], run_dir: Path) -> dict[str, dict[str, Any]]:
    """Per attack, what the run recorded of its adversaries acting: ``set`` the strategies the actions turned on
    (and ``off`` those that turned them off), ``confirmed`` the drops its on steps confirmed, ``swallowed`` the
    frames its (own) adversaries dropped as adversaries (``frame_dropped`` events), ``rejected`` the honest nodes'
    ``bootstrap_rejected`` events by reason in its window, ``accepted_rate`` bootstraps from its adversaries that
    honest nodes accepted per second in its window over the 20 s before, ``took_root`` the honest nodes that took
    one of its adversaries as their root in its window, and its closing check."""
    steps = {s["index"]: s for s in result["steps"]}
    origin = float(result["time_origin"]["mono_s"])  # actions and events: the engine's clock (Docker: not from 0)
    actions = _jsonl(run_dir / "actions.jsonl")
    events = _events(run_dir)
    keys = {e["node_name"]: e["node"] for e in events if e["event"] == "node_started"}
    out: dict[str, dict[str, Any]] = {}
    for info in infos:
        on, off, check = info["window"]
        t0, t1 = origin + steps[on]["at_s"], origin + steps[check]["at_s"]
        advs = set(info["adversaries"])
        mine = [a for a in actions if a["target"] in advs and t0 <= a["mono_s"] <= t1]
        origins = {keys[n] for n in advs if n in keys}
        accepted = Counter("in" if t0 <= e["mono_s"] < t1 else "before" for e in events
                           if e["event"] == "bootstrap_accepted" and e.get("origin") in origins
                           and t0 - 20 <= e["mono_s"] < t1)  # fmt: skip
        ck = steps[check]
        out[info["name"]] = {
            "set": sorted({a["detail"].get("strategy", "drop") for a in mine
                           if a["action"] == "adversary" and a["detail"].get("strategy") != "none"
                           and a["detail"].get("drop", {}).get("traffic", 1) != 0}),
            "off": sum(1 for a in mine if a["action"] == "kill" or a["detail"].get("strategy") == "none"
                       or a["detail"].get("drop", {}).get("traffic", 1) == 0),
            "on_verdicts": sorted({steps[i]["verdict"] for i in range(on, off)}),
            "confirmed": [steps[i]["confirmed"] for i in range(on, off) if steps[i].get("confirmed")],
            # what its adversaries' strategies did, as each said when it was lifted (an action's ``replaced``)
            "did": [a["detail"]["replaced"] for a in mine if a["action"] == "adversary" and "replaced" in a["detail"]],
            "swallowed": sum(e.get("count", 0) for e in events if e["event"] == "frame_dropped"
                             and e.get("reason") == "adversary" and e["node_name"] in advs),
            "rejected": dict(Counter(e.get("reason") for e in events if e["event"] == "bootstrap_rejected"
                                     and t0 <= e["mono_s"] < t1 and e["node_name"] not in advs)),
            "accepted_rate": (accepted["in"] / max(t1 - t0, 1e-9), accepted["before"] / 20),
            # honest nodes that took one of its adversaries as their root in its window (a usurper's effect)
            "took_root": len({e["node_name"] for e in events if e["event"] == "root_changed"
                              and e.get("root") in origins and e["node_name"] not in advs
                              and t0 <= e["mono_s"] < t1}),
            "check": {"verdict": ck["verdict"], "tree_s": ck.get("tree_converged_s"),
                      "snake_s": ck.get("snake_converged_s"),
                      "failed": sorted(k for k, v in ck.get("invariants", {}).items() if not v.get("ok"))},
            "internal_errors": ck.get("invariants", {}).get("no_internal_errors", {}),
        }  # fmt: skip
    return out


def infos_of(infos: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(i for i in infos if i["name"] == name)


def strategy_of(name: str) -> str:
    return str(ATTACKS[name].step.get("strategy", "drop"))


def assert_acted(ev: dict[str, dict[str, Any]], infos: list[dict[str, Any]], *, inproc: bool = True) -> None:
    """Every attack turned its adversaries on and off, its closing check passed (re-converged, no honest internal
    errors), and its adversaries acted: each lifted strategy by its own count (the lift's ``replaced``), the joined
    ones by their effects and their lift's ``replaced`` too (they turn honest before they are killed: docs/attacks.md,
    "Every attack in one run"). Not on Docker (``inproc`` False): with 4 s windows the replayed announcements were
    not rejected by any honest node (with 6 s windows, 2 were), nor, once, was anything captured to replay."""
    for info in infos:
        name, got = info["name"], ev[info["name"]]
        leaves = 2 if ATTACKS[name].joins else 1  # joined ones turn honest, then are killed
        assert got["set"] == [strategy_of(name)] and got["off"] == leaves * len(info["adversaries"]) > 0, (name, got)
        assert "invalid" not in got["on_verdicts"] and all(c["ok"] for c in got["confirmed"]), (name, got)
        assert got["check"]["verdict"] == "pass" and not got["check"]["failed"], (name, got["check"])
        assert got["check"]["tree_s"] is not None and got["check"]["snake_s"] is not None, (name, got["check"])
        assert got["internal_errors"].get("ok") and got["internal_errors"].get("held"), (name, got)
    for name in ("greyhole", "sybil", "root_takeover", "bootstrap_flood", "announcement_flood", "replay", "forge"):
        did = ev[name]["did"]
        assert [d["strategy"] for d in did] == [strategy_of(name)] * len(infos_of(infos, name)["adversaries"]), did
    # each did what it is for, in its own counts: frames it should have forwarded swallowed, frames made
    assert sum(d["swallowed"] for d in ev["greyhole"]["did"]) > 0, ev["greyhole"]["did"]
    # replay makes nothing until it has captured a frame (an announcement it sends, a bootstrap it receives), and a
    # quiet converged mesh-12 may send it neither in a 4 s window (Docker: captured 0 once): asserted in process
    for name in ("bootstrap_flood", "announcement_flood", "forge") + (("replay",) if inproc else ()):
        assert sum(d["made"] for d in ev[name]["did"]) > 0, (name, ev[name]["did"])
    drop = ev["drop"]["confirmed"]
    assert drop and all("dropped" in c["how"] for c in drop), drop
    # the joined ones' own counts reach the run on both backends (lifted before they are killed); in a 4 s window
    # on Docker they may be small (sybil 0, root_takeover 3 in one run), so how many is asserted in process
    for name in ("sybil", "root_takeover"):
        assert all(type(d["swallowed"]) is int and d["swallowed"] >= 0 for d in ev[name]["did"]), ev[name]["did"]
    if inproc:  # their own joined nodes: the frames they swallowed are theirs alone, in the events and their counts
        assert ev["sybil"]["swallowed"] > 0 and ev["root_takeover"]["swallowed"] > 0, ev
        assert sum(d["swallowed"] for d in ev["sybil"]["did"]) > 0, ev["sybil"]["did"]
        assert sum(d["swallowed"] for d in ev["root_takeover"]["did"]) > 0, ev["root_takeover"]["did"]
    root = ev["root_takeover"]  # honest nodes took the usurper as their root
    assert root["took_root"] > 0, root
    assert ev["drop"]["took_root"] == 0, ev["drop"]  # an honest key's node dropping traffic takes no root
    flood = ev["bootstrap_flood"]["accepted_rate"]
    assert flood[0] >= 3 * flood[1] > 0, flood
    if inproc:
        assert ev["replay"]["rejected"].get("replay", 0) > 0, ev["replay"]
    assert ev["forge"]["rejected"].get("bad_signature", 0) > 0, ev["forge"]
