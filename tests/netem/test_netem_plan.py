"""Planners as data: the exact argv lists for every default class on every backend."""

from __future__ import annotations

import pytest

from contract.links import LinkShape, default_classes
from netem.errors import PlanError
from netem.plan import (
    LinkPlan,
    iptables_check_argv,
    loss_rule_argv,
    netem_argv,
    plan_clear,
    plan_ingress_ifb,
    plan_kernel_netem,
    plan_kernel_partial,
    plan_link,
    plan_userspace,
    rate_argvs,
    userspace_part,
)

DEV, PEER = "eth1", "10.1.0.2"
CLASSES = default_classes()


def tc(*args: str) -> list[str]:
    return ["tc", *args]


def drop_rule(op: str, probability: str) -> list[str]:
    return ["iptables", "-w", op, "INPUT", "-i", DEV, "-s", PEER, "-m", "statistic", "--mode", "random",
            "--probability", probability, "-m", "comment", "--comment", "snekbed", "-j", "DROP"]  # fmt: skip


OFFLOADS_OFF = ["ethtool", "-K", DEV, "tso", "off", "gso", "off", "gro", "off"]
CLEAR_ROOT = tc("qdisc", "del", "dev", DEV, "root")
LAN_TBF = ["rate", "1000mbit", "burst", "500000", "limit", "1514000"]

KERNEL_NETEM: dict[str, list[list[str]]] = {
    "bluetooth": [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "netem", "limit", "10000",
           "delay", "30ms", "5ms", "loss", "2%"),
        tc("qdisc", "replace", "dev", DEV, "parent", "1:1", "handle", "10:", "tbf",
           "rate", "1.5mbit", "burst", "3028", "limit", "30280"),
    ],
    "remote": [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "netem", "limit", "10000",
           "delay", "25ms", "3ms", "loss", "0.2%"),
        tc("qdisc", "replace", "dev", DEV, "parent", "1:1", "handle", "10:", "tbf",
           "rate", "20mbit", "burst", "10000", "limit", "151400"),
    ],
    "lan": [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "netem", "limit", "10000", "delay", "0.1ms"),
        tc("qdisc", "replace", "dev", DEV, "parent", "1:1", "handle", "10:", "tbf", *LAN_TBF),
    ],
    "pipe": [],
    "custom": [],
}  # fmt: skip
KERNEL_NETEM["multicast"] = KERNEL_NETEM["bonjour"] = KERNEL_NETEM["lan"]

KERNEL_PARTIAL_TBF: dict[str, list[list[str]]] = {
    "bluetooth": [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "tbf", "rate", "1.5mbit", "burst", "3028", "limit", "30280"),
        OFFLOADS_OFF,
        drop_rule("-A", "0.02"),
    ],
    "remote": [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "tbf", "rate", "20mbit", "burst", "10000", "limit", "151400"),
        OFFLOADS_OFF,
        drop_rule("-A", "0.002"),
    ],
    "lan": [tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "tbf", *LAN_TBF)],
    "pipe": [],
    "custom": [],
}  # fmt: skip
KERNEL_PARTIAL_TBF["multicast"] = KERNEL_PARTIAL_TBF["bonjour"] = KERNEL_PARTIAL_TBF["lan"]

KERNEL_PARTIAL_HTB_BLUETOOTH = [
    tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "htb", "default", "1"),
    tc("class", "replace", "dev", DEV, "parent", "1:", "classid", "1:1", "htb", "rate", "1.5mbit", "ceil", "1.5mbit",
       "burst", "3028", "cburst", "3028", "quantum", "1514"),
    tc("qdisc", "replace", "dev", DEV, "parent", "1:1", "handle", "10:", "pfifo", "limit", "20"),
    OFFLOADS_OFF,
    drop_rule("-A", "0.02"),
]  # fmt: skip

USERSPACE_PART_OF_PARTIAL = {
    "bluetooth": LinkShape(delay_ms=30, jitter_ms=5),
    "remote": LinkShape(delay_ms=25, jitter_ms=3),
    "lan": LinkShape(delay_ms=0.1),
    "multicast": LinkShape(delay_ms=0.1),
    "bonjour": LinkShape(delay_ms=0.1),
    "pipe": LinkShape(),
    "custom": LinkShape(),
}


def test_every_default_class_is_covered():
    assert set(CLASSES) == set(KERNEL_NETEM) == set(KERNEL_PARTIAL_TBF) == set(USERSPACE_PART_OF_PARTIAL)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_kernel_netem_argv(name):
    assert plan_kernel_netem(DEV, CLASSES[name].shape) == KERNEL_NETEM[name]
    plan = plan_link("kernel-netem", DEV, CLASSES[name].shape, peer_ip=PEER)
    assert plan == LinkPlan("kernel-netem", DEV, KERNEL_NETEM[name], [CLEAR_ROOT] if KERNEL_NETEM[name] else [], LinkShape())


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_kernel_partial_argv_and_userspace_part(name):
    plan = plan_kernel_partial(DEV, CLASSES[name].shape, peer_ip=PEER)
    assert plan.backend == "kernel-partial" and plan.dev == DEV
    assert plan.commands == KERNEL_PARTIAL_TBF[name]
    assert plan.userspace == USERSPACE_PART_OF_PARTIAL[name]
    assert plan.iptables_rules == [c for c in KERNEL_PARTIAL_TBF[name] if c[0] == "iptables"]
    expected_undo = ([CLEAR_ROOT] if CLASSES[name].shape.rate_mbit else []) + [
        drop_rule("-D", c[c.index("--probability") + 1]) for c in plan.iptables_rules
    ]
    assert plan.undo == expected_undo
    assert plan_link("kernel-partial", DEV, CLASSES[name].shape, peer_ip=PEER) == plan


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_userspace_backend_has_no_commands(name):
    shape = CLASSES[name].shape
    assert plan_userspace(shape) == shape
    assert plan_link("userspace", DEV, shape) == LinkPlan("userspace", DEV, [], [], shape)


def test_kernel_partial_htb_has_an_exact_packet_queue():
    plan = plan_kernel_partial(DEV, CLASSES["bluetooth"].shape, peer_ip=PEER, rate_qdisc="htb")
    assert plan.commands == KERNEL_PARTIAL_HTB_BLUETOOTH


def test_netem_rate_inside_netem_uses_the_queue_as_its_limit():
    shape = CLASSES["bluetooth"].shape
    assert plan_kernel_netem(DEV, shape, rate_via="netem") == [
        tc("qdisc", "replace", "dev", DEV, "root", "handle", "1:", "netem", "limit", "20",
           "delay", "30ms", "5ms", "loss", "2%", "rate", "1.5mbit"),
    ]  # fmt: skip


def test_netem_argv_carries_every_impairment():
    shape = LinkShape(delay_ms=10, jitter_ms=2.5, loss_pct=1, duplicate_pct=0.5, corrupt_pct=0.1, reorder_pct=25)
    assert netem_argv("veth0", shape) == [
        "tc", "qdisc", "replace", "dev", "veth0", "root", "handle", "1:", "netem", "limit", "10000",
        "delay", "10ms", "2.5ms", "loss", "1%", "duplicate", "0.5%", "corrupt", "0.1%", "reorder", "25%",
    ]  # fmt: skip


def test_kernel_partial_leaves_what_the_kernel_cannot_do_to_userspace():
    shape = LinkShape(delay_ms=10, jitter_ms=2, loss_pct=1, duplicate_pct=0.5, corrupt_pct=0.1, reorder_pct=25)
    plan = plan_kernel_partial(DEV, shape, peer_ip=PEER)
    assert plan.commands == [OFFLOADS_OFF, drop_rule("-A", "0.01")]  # no rate: no qdisc
    assert plan.userspace == LinkShape(delay_ms=10, jitter_ms=2, duplicate_pct=0.5, corrupt_pct=0.1, reorder_pct=25)
    assert userspace_part(shape, "kernel-netem") == LinkShape()


def test_loss_is_per_direction_at_the_receiver():
    shape = LinkShape(loss_pct=3)
    # symmetric: this endpoint drops 3 % of what it receives from the peer
    assert plan_kernel_partial(DEV, shape, peer_ip=PEER).iptables_rules == [drop_rule("-A", "0.03")]
    # asymmetric: peer->us is lossless, but the peer drops our segments, so offloads still go off here
    plan = plan_kernel_partial(DEV, shape, peer_ip=PEER, ingress_loss_pct=0)
    assert plan.commands == [OFFLOADS_OFF] and plan.iptables_rules == []
    assert plan_kernel_partial(DEV, LinkShape(), peer_ip=PEER, ingress_loss_pct=10).iptables_rules == [
        drop_rule("-A", "0.1")
    ]


def test_lossy_partial_plan_needs_the_peer_address():
    with pytest.raises(PlanError, match=r"peer_ip=None: loss of 2% is dropped on INPUT from the peer"):
        plan_kernel_partial(DEV, CLASSES["bluetooth"].shape, peer_ip=None)
    assert plan_kernel_partial(DEV, CLASSES["lan"].shape, peer_ip=None).commands == KERNEL_PARTIAL_TBF["lan"]


def test_ipv6_peer_uses_ip6tables():
    rule = loss_rule_argv(DEV, "fd00::2", 2)
    assert rule[0] == "ip6tables" and rule[rule.index("-s") + 1] == "fd00::2"
    assert iptables_check_argv(rule)[2] == "-C"


def test_ingress_ifb_partial_and_netem():
    shape = CLASSES["remote"].shape
    redirect = [
        ["ip", "link", "add", "ifb0", "type", "ifb"],
        ["ip", "link", "set", "dev", "ifb0", "up"],
        tc("qdisc", "replace", "dev", DEV, "handle", "ffff:", "ingress"),
        tc("filter", "replace", "dev", DEV, "parent", "ffff:", "protocol", "all", "prio", "1", "u32", "match", "u32",
           "0", "0", "action", "mirred", "egress", "redirect", "dev", "ifb0"),
    ]  # fmt: skip
    assert plan_ingress_ifb(DEV, "ifb0", shape) == redirect + [
        tc("qdisc", "replace", "dev", "ifb0", "root", "handle", "1:", "tbf", "rate", "20mbit", "burst", "10000",
           "limit", "151400"),
    ]  # fmt: skip
    assert plan_ingress_ifb(DEV, "ifb0", shape, backend="kernel-netem") == redirect + [
        [a if a != DEV else "ifb0" for a in argv] for argv in KERNEL_NETEM["remote"]
    ]
    assert plan_ingress_ifb(DEV, "ifb0", LinkShape(delay_ms=5)) == []  # nothing for the kernel to do


def test_plan_clear_undoes_root_ingress_ifb_and_rules():
    rules = plan_kernel_partial(DEV, CLASSES["bluetooth"].shape, peer_ip=PEER).iptables_rules
    assert plan_clear(DEV, ifb="ifb0", iptables_rules=rules) == [
        CLEAR_ROOT,
        tc("qdisc", "del", "dev", DEV, "ingress"),
        ["ip", "link", "del", "dev", "ifb0"],
        drop_rule("-D", "0.02"),
    ]
    assert plan_clear(DEV) == [CLEAR_ROOT]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plan_kernel_netem("eth0@if12", LinkShape(delay_ms=1)), r"dev='eth0@if12'.*strip the '@ifN' suffix"),
        (lambda: plan_kernel_netem("a-very-long-interface", LinkShape()), r"dev='a-very-long-interface'"),
        (lambda: plan_kernel_netem("eth0; rm -rf /", LinkShape()), r"not a Linux interface name"),
        (lambda: plan_kernel_partial(DEV, LinkShape(loss_pct=1), peer_ip="10.0.0"), r"peer_ip='10.0.0'"),
        (lambda: plan_ingress_ifb(DEV, DEV, LinkShape(rate_mbit=1)), r"ifb='eth1': the IFB device must differ"),
        (lambda: plan_link("tc", DEV, LinkShape()), r"backend='tc'"),  # type: ignore[arg-type]
        (lambda: rate_argvs(DEV, LinkShape(rate_mbit=1), qdisc="cake"), r"qdisc='cake'"),  # type: ignore[arg-type]
        (lambda: iptables_check_argv(["tc", "qdisc"]), r"not an iptables -A rule"),
    ],
)
def test_bad_input_raises_plan_error_naming_what(call, message):
    with pytest.raises(PlanError, match=message) as info:
        call()
    assert isinstance(info.value, ValueError)


def test_numbers_never_use_exponents():
    argv = netem_argv(DEV, LinkShape(delay_ms=0.00001, jitter_ms=0.000005, loss_pct=0.0001))
    assert "1e" not in " ".join(argv) and "delay" in argv
