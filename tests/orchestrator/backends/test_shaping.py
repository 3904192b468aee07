"""orchestrator.backends.shaping against the real kernel, in throwaway network namespaces (no Docker needed).

apply_endpoint/clear_endpoint/endpoint_state take a runner ``(pid, argv)``; here it
runs ``ip netns exec <ns> argv`` instead of ``nsenter -t <pid> -n argv``, so the very
same code shapes a veth in a namespace this test created. Root and iproute2/iptables
are needed (skipped with a reason otherwise; failures under CI, see tests/ci.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from contract.links import LinkShape, default_classes
from node.config import parse_inbound, parse_peer_uri
from orchestrator.backends.shaping import (
    Endpoint,
    ShapingError,
    ShapingRecord,
    _our_rules,
    apply_endpoint,
    apply_endpoints,
    clear_endpoint,
    endpoint_state,
    find_dev,
    load_record,
    node_peer_query,
    save_record,
    where_shaped,
)
from orchestrator.backends.shaping_runs import record_path

CLASSES = default_classes()
A_IP, B_IP = "10.99.0.1", "10.99.0.2"


def _runner(netns: str):
    def run(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, check=False)

    return run


@pytest.fixture
def shaped_ns(netns: str):
    """The conftest namespace with va holding A_IP; returns (runner, endpoint factory)."""
    run = _runner(netns)
    assert run(1, ["ip", "addr", "add", f"{A_IP}/30", "dev", "va"]).returncode == 0

    def endpoint(cls: str = "bluetooth", shape: LinkShape | None = None) -> Endpoint:
        return Endpoint("0", cls, shape or CLASSES[cls].shape, "n1", 1, A_IP, "n2", B_IP)

    return run, endpoint


# ---------------------------------------------------------------- real kernel


def test_apply_is_idempotent_and_state_is_in_sync(shaped_ns):
    run, endpoint = shaped_ns
    ep = endpoint()
    first = apply_endpoint(ep, "kernel-partial", run=run)
    assert first.dev == "va" and not first.skipped and not first.removed
    assert first.where == where_shaped(ep.shape, "kernel-partial", "va", B_IP)
    second = apply_endpoint(ep, "kernel-partial", run=run)
    assert [r[2] for r in second.skipped] == ["-A"] and not second.removed  # -C found the rule: not added twice
    listing = run(1, ["iptables", "-w", "-S", "INPUT"]).stdout
    assert len(_our_rules(listing, B_IP)) == 1
    state = endpoint_state(ep, "kernel-partial", run=run)
    assert state.in_sync, state.problems
    assert state.root_qdisc.startswith("qdisc tbf 1: root") and "rate 1500Kbit" in state.root_qdisc


def test_a_renamed_interface_is_found_by_address_and_the_stale_rule_replaced(shaped_ns):
    run, endpoint = shaped_ns
    ep = endpoint()
    apply_endpoint(ep, "kernel-partial", run=run)
    for argv in (["ip", "link", "set", "va", "down"], ["ip", "link", "set", "va", "name", "vrenamed"],
                 ["ip", "link", "set", "vrenamed", "up"], ["tc", "qdisc", "del", "dev", "vrenamed", "root"]):
        assert run(1, argv).returncode == 0, argv  # what a reconnect does: new name, no qdiscs
    assert find_dev(1, A_IP, run=run) == "vrenamed"
    state = endpoint_state(ep, "kernel-partial", run=run)
    assert not state.in_sync
    assert "root qdisc on vrenamed is noqueue, expected tbf" in state.problems
    assert "loss rule for -i vrenamed -s 10.99.0.2 missing" in state.problems
    assert "stale loss rule(s): -i va p=0.02" in state.problems
    again = apply_endpoint(ep, "kernel-partial", run=run)
    assert again.dev == "vrenamed" and len(again.removed) == 1 and "va" in again.removed[0]
    assert endpoint_state(ep, "kernel-partial", run=run).in_sync


def test_a_class_change_replaces_the_loss_rule(shaped_ns):
    run, endpoint = shaped_ns
    apply_endpoint(endpoint("bluetooth"), "kernel-partial", run=run)
    changed = apply_endpoint(endpoint("remote"), "kernel-partial", run=run)
    assert len(changed.removed) == 1 and "0.02" in " ".join(changed.removed[0])
    (rule,) = _our_rules(run(1, ["iptables", "-w", "-S", "INPUT"]).stdout, B_IP)
    assert float(rule[rule.index("--probability") + 1]) == pytest.approx(0.002)  # kernel: 0.00199999986
    assert "rate 20Mbit" in endpoint_state(endpoint("remote"), "kernel-partial", run=run).root_qdisc


def test_clear_removes_everything_and_clearing_twice_is_fine(shaped_ns):
    run, endpoint = shaped_ns
    ep = endpoint()
    apply_endpoint(ep, "kernel-partial", run=run)
    ran = clear_endpoint(ep, run=run)
    assert ran[0] == ["tc", "qdisc", "del", "dev", "va", "root"] and ran[1][:3] == ["iptables", "-w", "-D"]
    assert clear_endpoint(ep, run=run) == []
    state = endpoint_state(ep, "userspace", run=run)  # nothing of ours is left
    assert state.in_sync and not state.loss_rules


def test_htb_rate_qdisc_and_a_lossless_class(shaped_ns):
    run, endpoint = shaped_ns
    ep = endpoint("lan")
    applied = apply_endpoint(ep, "kernel-partial", rate_qdisc="htb", run=run)
    assert applied.where["loss"] == "-" and applied.where["rate"] == "kernel: htb on va egress"
    assert endpoint_state(ep, "kernel-partial", rate_qdisc="htb", run=run).in_sync
    assert not endpoint_state(ep, "kernel-partial", rate_qdisc="tbf", run=run).in_sync


def test_userspace_backend_runs_nothing(shaped_ns):
    run, endpoint = shaped_ns
    applied = apply_endpoint(endpoint(), "userspace", run=run)
    assert applied.commands == [] and applied.removed == []
    assert set(applied.where.values()) == {"node userspace (peer URI)"}
    assert applied.userspace == CLASSES["bluetooth"].shape.model_dump(exclude_defaults=True)


def test_switching_to_a_shape_without_rate_or_loss_removes_the_old_kernel_shaping(shaped_ns):
    run, endpoint = shaped_ns
    apply_endpoint(endpoint(), "kernel-partial", run=run)
    delay_only = endpoint("custom", LinkShape(delay_ms=5))
    switched = apply_endpoint(delay_only, "kernel-partial", run=run)
    assert switched.commands == [] and len(switched.removed) == 2
    assert switched.removed[1] == ["tc", "qdisc", "del", "dev", "va", "root"]
    assert endpoint_state(delay_only, "kernel-partial", run=run).in_sync
    apply_endpoint(endpoint(), "kernel-partial", run=run)
    to_userspace = apply_endpoint(endpoint(), "userspace", run=run)
    assert len(to_userspace.removed) == 2 and endpoint_state(endpoint(), "userspace", run=run).in_sync


def test_kernel_netem_shapes_or_fails_loudly_by_what_the_probe_found(shaped_ns):
    """Where the kernel has netem, kernel-netem applies and is in sync; where it has none, it fails loudly."""
    from netem.probe import probe

    run, endpoint = shaped_ns
    if probe().netem:
        apply_endpoint(endpoint(), "kernel-netem", run=run)
        assert endpoint_state(endpoint(), "kernel-netem", run=run).in_sync
        return
    with pytest.raises(ShapingError, match=r"applying kernel-netem: `tc qdisc replace dev va root handle 1: netem"):
        apply_endpoint(endpoint(), "kernel-netem", run=run)


def test_an_address_on_no_interface_is_a_clear_error(shaped_ns):
    run, endpoint = shaped_ns
    ep = Endpoint("3", "remote", CLASSES["remote"].shape, "n9", 1, "10.99.9.9", "n8", B_IP)
    with pytest.raises(ShapingError, match=r"cannot find the interface holding 10\.99\.9\.9: no interface"):
        apply_endpoint(ep, "kernel-partial", run=run)
    state = endpoint_state(ep, "kernel-partial", run=run)
    assert state.dev is None and not state.in_sync


# ---------------------------------------------------------------- pure parts


def test_a_stopped_container_is_named_as_such():
    with pytest.raises(ShapingError, match=r"container is not running \(pid 0\)"):
        find_dev(0, A_IP)


def test_unknown_backend_is_rejected_before_anything_runs():
    def never(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"ran {argv}")

    ep = Endpoint("0", "remote", CLASSES["remote"].shape, "n1", 1, A_IP, "n2", B_IP)
    with pytest.raises(ShapingError, match="unknown shaping backend 'netem'"):
        apply_endpoint(ep, "netem", run=never)  # type: ignore[arg-type]


IPTABLES_S = """-P INPUT ACCEPT
-A INPUT -s 10.99.0.2/32 -i va -m statistic --mode random --probability 0.02000000002 -m comment --comment snekbed -j DROP
-A INPUT -s 10.99.0.3/32 -i va -m statistic --mode random --probability 0.02000000002 -m comment --comment snekbed -j DROP
-A INPUT -s 10.99.0.2/32 -i va -m comment --comment "someone else" -j DROP
-A INPUT -s 10.99.0.2/32 -j ACCEPT
"""


def test_only_our_rules_from_that_peer_are_ours():
    (rule,) = _our_rules(IPTABLES_S, "10.99.0.2")
    assert rule[:4] == ["-A", "INPUT", "-s", "10.99.0.2/32"] and "--probability" in rule


def test_node_peer_query_is_what_the_node_parses():
    query = node_peer_query("bluetooth", CLASSES["bluetooth"].shape, "kernel-partial")
    assert query == "class=bluetooth&delay_ms=30&jitter_ms=5"
    peer = parse_peer_uri(f"tcp://10.0.0.2:7000?{query}")
    assert peer.link.shape == LinkShape(delay_ms=30, jitter_ms=5)  # no rate, no loss: the kernel does those
    inbound = parse_inbound(f"tcp://10.0.0.1?{node_peer_query('remote', CLASSES['remote'].shape, 'userspace')}")
    assert inbound.link.shape == CLASSES["remote"].shape
    assert node_peer_query("remote", CLASSES["remote"].shape, "kernel-netem") == "class=remote"
    with pytest.raises(ShapingError, match="duplicate_pct cannot be carried"):
        node_peer_query("x", LinkShape(duplicate_pct=1), "userspace")


def test_record_round_trips_and_says_which_fallback_ran(tmp_path: Path):
    ep = Endpoint("0", "remote", CLASSES["remote"].shape, "n1", 1, A_IP, "n2", B_IP)

    def fake_kernel(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
        out = f"5: va    inet {A_IP}/30 scope global va" if argv[:2] == ["ip", "-o"] else ""
        code = 1 if "-C" in argv else 0
        return subprocess.CompletedProcess(argv, code, out, "")

    caps = {"netem": False, "tbf": True, "htb": True, "ifb": True, "iptables_statistic": True,
            "backend": "kernel-partial"}
    record = apply_endpoints([ep], "kernel-partial", run_id="r1", capabilities=caps, run=fake_kernel)
    assert record.fallback == "netem unavailable in this kernel: fallback 'kernel-partial' ran"
    path = record_path("r1", tmp_path)
    assert path == tmp_path / "r1" / "shaping.json"
    save_record(record, path)
    assert load_record(path) == record
    assert json.loads(path.read_text())["endpoints"][0]["where"]["delay"] == "node userspace (peer URI)"
    assert load_record(tmp_path / "none.json") is None
    path.write_text("{")
    with pytest.raises(ShapingError, match="unreadable shaping record"):
        load_record(path)
    assert ShapingRecord(run_id="r", backend="kernel-netem", capabilities={"netem": True},
                         applied_wall_ts=0).fallback is None
