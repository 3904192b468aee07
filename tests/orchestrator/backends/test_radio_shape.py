"""Loss over distance (docs/mobility.md, "Radios and hysteresis"): the one shape function both backends use
(radio_links.radio_shape), and how DockerRadioLinks applies it: ``POST /peers/shape`` with the port of that radio
peering on both ends (the listener's found in its /state), after the up, again as the distance loss changes, the
port looked up again after a reconnect. The admin APIs are a fake here (the real ones: tests/node/
test_admin_shape_port.py; the whole of it on Docker: tests/orchestrator/chaos/test_chaos_mobility_docker.py)."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
import trio

from contract.links import LinkShape, resolve_class
from orchestrator.backends.docker_mobility import DockerRadioLinks, _Op, _Peering
from orchestrator.backends.docker_net import plan_addresses
from orchestrator.backends.docker_observe import AdminError
from orchestrator.backends.inproc_mobility import RadioLinks
from orchestrator.backends.radio_links import radio_shape
from orchestrator.model.mobility import Static
from orchestrator.model.mobility_spec import World
from orchestrator.model.radio_graph import Radio
from orchestrator.model.topology import Topology


def test_the_distance_loss_adds_to_the_class_loss_as_independent_losses() -> None:
    bt, lan = resolve_class("bluetooth"), resolve_class("lan")
    assert radio_shape(bt, 0) == bt.shape and radio_shape(lan, 0) == lan.shape
    # bluetooth loses 2 % of its own: with 10 % by distance, 1 - 0.98 * 0.90 = 11.8 %; the rest of its shape kept
    assert radio_shape(bt, 10) == LinkShape.model_validate({**bt.shape.model_dump(), "loss_pct": 11.8})
    assert radio_shape(lan, 8).model_dump(exclude_defaults=True) == {"delay_ms": 0.1, "loss_pct": 8.0,
                                                                      "rate_mbit": 1000.0}  # fmt: skip
    assert radio_shape(bt, 100).loss_pct == 100.0


def test_the_in_process_links_are_shaped_by_the_same_function() -> None:
    lan = resolve_class("lan")
    radio = Radio("lan", 25.0, "lan", loss_start_fraction=0.2, loss_edge_pct=10.0)
    links = RadioLinks.__new__(RadioLinks)  # only _options is used: no network needed
    links.classes = {"lan": lan}
    schedule = links._options(radio, 8)["shaper"](random.Random(0))  # a LinkShaper's bound schedule
    assert schedule.__self__.shape == radio_shape(lan, 8)


class FakeAdmin:
    """Each node's peerings as its admin API lists them; POST /peers, /peers/shape and GET /state as a node answers."""

    def __init__(self, keys: dict[str, str], ips: dict[str, str]) -> None:
        self.keys, self.ips = keys, ips
        self.peers: dict[str, dict[int, dict[str, Any]]] = {n: {} for n in keys}
        self.shapes: list[tuple[str, dict[str, Any]]] = []

    def post(self, node: str, path: str, body: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        if path == "/peers":
            host = body["uri"].removeprefix("tcp://").split(":")[0]
            other = next(n for n, ip in self.ips.items() if ip == host)
            port = self._add(node, other, body["uri"])
            self._add(other, node, f"tcp://{self.ips[node]}:4{len(self.peers[other])}123")
            return {"status": "connected", "port": port, "key": self.keys[other]}
        assert path == "/peers/shape"
        self.shapes.append((node, body))
        got = self.peers[node].get(body["port"])
        if got is None or (body["peer"] is not None and got["key"] != body["peer"]):
            raise AdminError(f"{node}: POST /peers/shape answered 404")
        got["shape"] = LinkShape(**{k: v for k, v in body["shaping"].items() if v is not None}).model_dump(
            exclude_defaults=True)
        return {"ports": [body["port"]], "shapes": {str(body["port"]): got["shape"]}}

    def _add(self, node: str, other: str, remote: str) -> int:
        port = max(self.peers[node], default=10) + 1
        self.peers[node][port] = {"port": port, "key": self.keys[other], "remote": remote, "shape": {}}
        return port

    def delete(self, node: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any] | None:
        """As the node answers (AdminClient.delete: None for 404, and for 409 when a condition did not hold)."""
        port = int(path.rsplit("/", 1)[1])
        there = self.peers[node].get(port)
        if there is None or any(there[k] != v for k, v in (params or {}).items()):
            return None
        del self.peers[node][port]
        return {"port": there["port"], "key": there["key"], "status": "closed"}

    def state(self, node: str) -> dict[str, Any]:
        return {"peers": list(self.peers[node].values())}

    def states(self, names: list[str]) -> dict[str, dict[str, Any]]:
        return {n: self.state(n) for n in names}


@pytest.fixture
def moving() -> tuple[DockerRadioLinks, FakeAdmin]:
    topo = Topology.model_validate({
        "name": "two", "radios": {"lan": {"range_m": 25, "class": "lan", "loss": {"edge_pct": 10, "start_fraction": 0.2}}},
        "nodes": [{"name": "a", "position": [0, 0]}, {"name": "b", "position": [8, 0]}]})  # fmt: skip
    plan = plan_addresses(topo, "r1", pool="10.213.0.0/16")
    radio = Radio("lan", 25.0, "lan", loss_start_fraction=0.2, loss_edge_pct=10.0)
    world = World({"a": Static((0.0, 0.0)), "b": Static((8.0, 0.0))}, (radio,), tick_s=1.0, duration_s=10.0)
    admin = FakeAdmin({"a": "aa" * 32, "b": "bb" * 32}, plan.radios["lan"].members)
    links = DockerRadioLinks(world, {"lan": resolve_class("lan")}, None, topology=topo, plan=plan,
                             admin=admin)  # type: ignore[arg-type]  # fmt: skip
    return links, admin


def _carry_out(links: DockerRadioLinks) -> list[str]:
    """The changes asked for so far, carried out as DockerRadioLinks.run does (each pair's in order)."""
    ops, links._ops = links._ops, []
    trio.run(links.carry_out, ops, trio.CapacityLimiter(4))
    assert not links.failures and not links.reshape_failures, links.failures + links.reshape_failures
    return [op.kind for op in ops]


def test_docker_reshapes_that_radio_peering_on_both_ends(moving: tuple[DockerRadioLinks, FakeAdmin]) -> None:
    links, admin = moving
    links.start()
    # 8 m apart: 10 % * (8 - 5) / (25 - 5) = 1.5, 2 % in whole percent; the URI has the class's shape, so the
    # distance's loss follows the up, on the dialer's port for it and the listener's (its peering from a's address)
    assert _carry_out(links) == ["up", "shape"]
    a_port, b_port = next(iter(admin.peers["a"])), next(iter(admin.peers["b"]))
    whole = {**radio_shape(resolve_class("lan"), 2).model_dump()}
    assert admin.shapes == [("a", {"port": a_port, "peer": "bb" * 32, "class": None, "shaping": whole}),
                            ("b", {"port": b_port, "peer": "aa" * 32, "class": None, "shaping": whole})]
    assert {n: [p["shape"] for p in admin.peers[n].values()] for n in "ab"} == {
        "a": [{"delay_ms": 0.1, "loss_pct": 2.0, "rate_mbit": 1000.0}], "b": [{"delay_ms": 0.1, "loss_pct": 2.0,
                                                                              "rate_mbit": 1000.0}]}  # fmt: skip
    # b walks to 20 m: 7.8 %, 8 % in whole percent; and the listener's peering came back on another port meanwhile
    # (a reconnect): its old port is refused and the new one read from its /state
    admin.peers["b"] = {77: {**admin.peers["b"][b_port], "port": 77}}
    links.replace("b", Static((20.0, 0.0)))
    links.move_now()
    assert _carry_out(links) == ["shape"]
    assert [(n, b["port"]) for n, b in admin.shapes[2:]] == [("a", a_port), ("b", b_port), ("b", 77)]
    assert admin.peers["b"][77]["shape"]["loss_pct"] == admin.peers["a"][a_port]["shape"]["loss_pct"] == 8.0
    # a step that does not change the whole percent asks for nothing
    links.replace("b", Static((20.1, 0.0)))
    links.move_now()
    assert links._ops == []
    peered = links.peered_now(["a", "b"])
    assert peered == {("a", "b", "lan"): {"a": 8.0, "b": 8.0}}
    r = links.report()["reshapes"]
    assert (r["asked"], r["done"], r["failed"]) == (2, 2, 0) and "unapplied" not in links.report()


def test_a_reshape_with_no_listener_end_fails_and_says_why(moving: tuple[DockerRadioLinks, FakeAdmin],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    links, admin = moving
    monkeypatch.setattr("orchestrator.backends.docker_mobility.LISTENER_WAIT_S", 0.0)
    links.start()
    ops, links._ops = links._ops, []
    assert links._do(ops[0])  # the up
    admin.peers["b"].clear()  # the listener lists no peering from a's address
    assert not links._do(ops[1])
    assert links.reshape_failures == ["reshape a->b (lan, +2 %): b: no peering of this link in its /state"]
    assert links.report()["reshapes"]["failed"] == 1


def test_the_movers_time_of_a_tick_on_the_wall_clock_is_the_ticks_own(moving: tuple[DockerRadioLinks, FakeAdmin],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Every read of the wall clock is later than the one before: start (and resume) read it once, so the ticks
    move the nodes to where they are at k * tick_s as in process (a b at 8 m from a, 2 % of loss: 1.5 rounded,
    would be 1 % a microsecond later on a node walking away), not at k * tick_s plus the gap between two reads."""
    links, _ = moving
    clock = iter(range(10**6))
    monkeypatch.setattr(links, "now", lambda: 1000.0 + next(clock) * 1e-6)
    links.start()
    assert links.since == links._origin and links.mover_time(links.since) == 0.0
    assert links.halt()
    stood = links.mover_time(links.now())  # the movers' time stands still while halted
    assert links.resume(5.0)
    assert links.mover_time(links.since) == pytest.approx(stood, abs=1e-9)  # not a read (1e-6 s) later


def test_a_down_closes_the_peering_the_dialer_lists_for_the_link_not_the_port_the_up_answered(
        moving: tuple[DockerRadioLinks, FakeAdmin]) -> None:  # fmt: skip
    """Once a radio peering ended (the listener paused past the peer timeout), its port goes to the next peering,
    here another node's fixed link: the down (a resumed node's renew, a kill's) must leave that one alone."""
    links, admin = moving
    links.start()
    ops, links._ops = links._ops, []
    assert links._do(ops[0])  # the up: a's port 11 dialled b's segment address
    (up,) = links.peerings_made.values()
    assert up.port == 11
    admin.peers["a"].clear()  # b timed out: a's peering ended, and a's fixed link to c took port 11
    admin.peers["a"][11] = {"port": 11, "key": "cc" * 32, "remote": "tcp://10.0.0.9:7000", "shape": {}}
    assert links.renew("b") == 1
    down, again, *_ = links._ops
    assert (down.kind, again.kind) == ("down", "up") and links._do(down)
    assert 11 in admin.peers["a"] and links.report()["already_closed"] == 1  # the fixed link stays
    assert links._do(again) and up.port == 11 and again.peering.port == 12  # made again on a fresh port


def test_a_pairs_changes_keep_their_order_and_a_slow_one_holds_up_no_other_pair(
        moving: tuple[DockerRadioLinks, FakeAdmin], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A tick's changes start at once, whatever an earlier tick's still does: a pair's down whose node is slow to
    answer holds up that pair's next change (its order is kept) and no other pair's."""
    links, _ = moving
    gate, seen = threading.Event(), []

    def do(op: _Op) -> bool:
        if op.peering.dialer == "s":
            assert gate.wait(30), "the slow change was never let through"
        seen.append((op.peering.dialer, op.kind))
        return True

    monkeypatch.setattr(links, "_do", do)

    def op(kind: str, dialer: str) -> _Op:
        return _Op(kind, _Peering(dialer, "z", f"tcp://10.9.0.1:7000?class=lan&from={dialer}", "lan"), links.now())

    async def main() -> None:
        limiter = trio.CapacityLimiter(4)
        async with trio.open_nursery() as nursery:
            links._queue([op("down", "s")], nursery, limiter)  # one tick: s's down, slow
            links._queue([op("up", "s"), op("up", "a")], nursery, limiter)  # the next tick's
            with trio.fail_after(30):
                while ("a", "up") not in seen:
                    await trio.sleep(0.01)
            assert seen == [("a", "up")] and links.busy  # a's up done while s's down still waits
            gate.set()
        assert seen == [("a", "up"), ("s", "down"), ("s", "up")] and not links.busy

    trio.run(main)
    assert len(links.delays["up"]) == 2 and len(links.delays["down"]) == 1
    assert all(wait >= 0 and call >= 0 and back >= 0 for kind in ("up", "down") for wait, call, back in
               links.stages[kind])  # fmt: skip


def test_changes_still_queued_when_the_run_ends_are_not_counted_in_flight(
        moving: tuple[DockerRadioLinks, FakeAdmin], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    links, _ = moving
    entered, gate, seen = threading.Event(), threading.Event(), []

    def do(op: _Op) -> bool:
        entered.set()
        assert gate.wait(30), "never let through"
        seen.append(op.kind)
        return True

    monkeypatch.setattr(links, "_do", do)
    peering = _Peering("a", "b", "tcp://10.9.0.1:7000?class=lan", "lan")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            links._queue([_Op(kind, peering, links.now()) for kind in ("down", "up", "down")], nursery,
                         trio.CapacityLimiter(4))  # fmt: skip
            with trio.fail_after(30):
                while not entered.is_set():
                    await trio.sleep(0.01)
            assert links.busy
            nursery.cancel_scope.cancel()  # the run ends while the down is being carried out
            gate.set()

    trio.run(main)
    assert seen == ["down"] and not links.busy and not links._pairs  # the up and the last down never asked
