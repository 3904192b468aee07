"""Pure planners: a link shape plus an interface -> the exact commands to run.

Nothing here executes anything. Each planner returns argv lists (``list[list[str]]``)
that a backend later runs with ``Backend.exec(node, argv)`` inside the endpoint's
network namespace, plus the part of the shape the node's own transport must apply
(:class:`LinkPlan.userspace`).

Three shaping backends (chosen per host by :func:`netem.probe.probe`):

``kernel-netem``
    ``tc qdisc replace dev D root handle 1: netem ...`` carries delay/jitter/loss/
    duplicate/corrupt/reorder; the rate goes into a child ``tbf`` (``parent 1:1``)
    whose queue is the bottleneck queue, or into netem's own ``rate``.
``kernel-partial`` (no netem in the kernel)
    ``tbf`` (or ``htb`` + ``pfifo``) for the rate and queue; random loss with an
    iptables ``statistic`` DROP rule on the endpoint's INPUT for traffic FROM the
    peer, with TSO/GSO/GRO off so the rule drops single segments, not 64 KB
    super-packets; delay, jitter, duplicate, corrupt and reorder are left to the
    node's transport (``.userspace``).
``userspace``
    No commands; the node's transport applies the whole shape.

Directions. A :class:`~contract.links.LinkShape` describes one direction and link
classes use it for both. Every plan is for ONE endpoint and must be run at BOTH
ends of a link. On ``kernel-netem`` each endpoint shapes what it sends, so each
direction is shaped once. On ``kernel-partial`` each endpoint shapes the rate of
what it sends and drops ``loss_pct`` of what it RECEIVES from the peer (DROP in the
sender's OUTPUT chain would make ``send()`` fail with EPERM instead of losing the
packet), which again gives each direction its loss exactly once. For an asymmetric
link pass the peer->us loss as ``ingress_loss_pct``.

Idempotence. ``tc qdisc replace`` can be re-run. ``iptables -A`` cannot: an applier
should first run the rule with ``-C`` (see :func:`iptables_check_argv`) and apply it
only when the check fails. :func:`plan_clear` commands fail with "no such
qdisc/device/rule" when there is nothing to clear; appliers treat that as cleared.
Offloads turned off by a plan are left off by :func:`plan_clear` (the previous
state is unknown; off only costs CPU).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from contract.links import LinkShape
from netem.errors import PlanError

__all__ = [
    "FRAME_BYTES",
    "IPTABLES_COMMENT",
    "NETEM_DELAY_LINE_PKTS",
    "KernelPartialPlan",
    "LinkPlan",
    "RateQdisc",
    "ShapingBackend",
    "iptables_check_argv",
    "loss_rule_argv",
    "netem_argv",
    "offloads_off_argv",
    "plan_clear",
    "plan_ingress_ifb",
    "plan_kernel_netem",
    "plan_kernel_partial",
    "plan_link",
    "plan_userspace",
    "rate_argvs",
    "userspace_part",
]

ShapingBackend = Literal["kernel-netem", "kernel-partial", "userspace"]
RateQdisc = Literal["tbf", "htb"]

#: Bytes a full-size packet occupies in a qdisc: 1500 MTU + 14 Ethernet header.
FRAME_BYTES = 1514
#: netem's own queue is the delay line, not the bottleneck: it must never be the
#: thing that drops. 10 000 full-size packets cover 12 ms at 10 Gbit/s.
NETEM_DELAY_LINE_PKTS = 10_000
#: A token bucket must hold at least two full frames; above that, 4 ms of rate.
TBF_BURST_S = 0.004
#: Every iptables rule we add carries this comment, so a human (or a cleaner) can find it.
IPTABLES_COMMENT = "snekbed"

_DEV_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


@dataclass(frozen=True)
class LinkPlan:
    """What one endpoint must do to shape its side of a link.

    ``commands`` run in order; ``undo`` removes them; ``iptables_rules`` are the
    ``-A`` rules among ``commands`` (check them with ``-C`` before adding);
    ``userspace`` is the part of the shape the node's transport applies itself.
    """

    backend: ShapingBackend
    dev: str
    commands: list[list[str]] = field(default_factory=list)
    undo: list[list[str]] = field(default_factory=list)
    userspace: LinkShape = LinkShape()
    iptables_rules: list[list[str]] = field(default_factory=list)


#: plan_kernel_partial returns a LinkPlan; the name says which planner made it.
KernelPartialPlan = LinkPlan


# ---------------------------------------------------------------- formatting / validation


def _num(value: float) -> str:
    """A decimal tc/iptables accept: no exponent, no trailing zeros (1.5, 1000, 0.1)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _check_dev(dev: str, what: str = "dev") -> str:
    if not isinstance(dev, str) or not _DEV_RE.fullmatch(dev) or dev in (".", ".."):
        hint = " (strip the '@ifN' suffix `ip link` prints)" if isinstance(dev, str) and "@" in dev else ""
        raise PlanError(what, dev, f"not a Linux interface name: 1-15 of [A-Za-z0-9_.-]{hint}")
    return dev


def _check_ip(peer_ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(peer_ip)
    except (ValueError, TypeError):
        raise PlanError("peer_ip", peer_ip, "not an IPv4 or IPv6 address") from None


def _burst_bytes(rate_mbit: float) -> int:
    return max(2 * FRAME_BYTES, math.ceil(rate_mbit * 1e6 / 8 * TBF_BURST_S))


# ---------------------------------------------------------------- argv builders


def netem_argv(dev: str, shape: LinkShape, *, with_rate: bool = False) -> list[str]:
    """The one netem command: ``tc qdisc replace dev D root handle 1: netem limit N ...``.

    With ``with_rate`` the rate goes into netem itself and netem's limit becomes the
    bottleneck queue; otherwise netem's limit is the delay line (NETEM_DELAY_LINE_PKTS)
    and the rate belongs in a child qdisc. Raises PlanError for a bad ``dev``.
    """
    _check_dev(dev)
    rate = with_rate and shape.rate_mbit is not None
    limit = shape.effective_queue_pkts if rate else NETEM_DELAY_LINE_PKTS
    argv = ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem", "limit", str(limit)]
    if shape.delay_ms:
        argv += ["delay", f"{_num(shape.delay_ms)}ms"] + ([f"{_num(shape.jitter_ms)}ms"] if shape.jitter_ms else [])
    if shape.loss_pct:
        argv += ["loss", f"{_num(shape.loss_pct)}%"]
    if shape.duplicate_pct:
        argv += ["duplicate", f"{_num(shape.duplicate_pct)}%"]
    if shape.corrupt_pct:
        argv += ["corrupt", f"{_num(shape.corrupt_pct)}%"]
    if shape.reorder_pct:
        argv += ["reorder", f"{_num(shape.reorder_pct)}%"]
    if rate:
        argv += ["rate", f"{_num(shape.rate_mbit)}mbit"]  # type: ignore[arg-type]
    return argv


def rate_argvs(
    dev: str, shape: LinkShape, *, qdisc: RateQdisc = "tbf", parent: str = "root", handle: str = "1:"
) -> list[list[str]]:
    """Commands that limit ``dev`` to ``shape.rate_mbit`` with ``shape.effective_queue_pkts`` of queue.

    ``tbf``: one qdisc; its ``limit`` is in bytes (queue_pkts full frames), so small
    packets queue more than queue_pkts of them. ``htb``: root htb, one class, a
    ``pfifo limit queue_pkts`` leaf: the queue bound is exact in packets.
    Returns [] when the shape has no rate. Raises PlanError for a bad ``dev``.
    """
    _check_dev(dev)
    if shape.rate_mbit is None:
        return []
    rate = f"{_num(shape.rate_mbit)}mbit"
    burst = str(_burst_bytes(shape.rate_mbit))
    queue_pkts = shape.effective_queue_pkts
    assert queue_pkts is not None
    where = ["root"] if parent == "root" else ["parent", parent]
    if qdisc == "tbf":
        limit = str(queue_pkts * FRAME_BYTES)
        return [["tc", "qdisc", "replace", "dev", dev, *where, "handle", handle, "tbf",
                 "rate", rate, "burst", burst, "limit", limit]]  # fmt: skip
    if qdisc == "htb":
        if parent != "root":
            raise PlanError("parent", parent, "the htb rate tree must be the root qdisc")
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
             "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", str(FRAME_BYTES)],
            ["tc", "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(queue_pkts)],
        ]  # fmt: skip
    raise PlanError("qdisc", qdisc, "rate qdisc must be 'tbf' or 'htb'")


def loss_rule_argv(dev: str, peer_ip: str, loss_pct: float, *, op: str = "-A") -> list[str]:
    """iptables rule dropping ``loss_pct`` % of what arrives on ``dev`` from ``peer_ip``.

    Uses ip6tables for an IPv6 peer. ``op`` is -A (add), -C (check) or -D (delete).
    Raises PlanError for a bad dev, address, percentage or op.
    """
    _check_dev(dev)
    address = _check_ip(peer_ip)
    if not 0 < loss_pct <= 100:
        raise PlanError("loss_pct", loss_pct, "an iptables loss rule needs 0 < loss_pct <= 100")
    if op not in ("-A", "-C", "-D"):
        raise PlanError("op", op, "expected -A, -C or -D")
    tool = "ip6tables" if address.version == 6 else "iptables"
    return [tool, "-w", op, "INPUT", "-i", dev, "-s", str(address),
            "-m", "statistic", "--mode", "random", "--probability", _num(loss_pct / 100),
            "-m", "comment", "--comment", IPTABLES_COMMENT, "-j", "DROP"]  # fmt: skip


def iptables_check_argv(rule: list[str]) -> list[str]:
    """The ``-C`` (exists?) form of an ``-A`` rule from a plan. Raises PlanError if it is not one."""
    return _swap_op(rule, "-C")


def _swap_op(rule: list[str], op: str) -> list[str]:
    if "-A" not in rule or rule[0] not in ("iptables", "ip6tables"):
        raise PlanError("rule", rule, "not an iptables -A rule")
    out = list(rule)
    out[out.index("-A")] = op
    return out


def offloads_off_argv(dev: str) -> list[str]:
    """Turn off segmentation/receive offloads so loss rules see (and drop) single segments."""
    return ["ethtool", "-K", _check_dev(dev), "tso", "off", "gso", "off", "gro", "off"]


# ---------------------------------------------------------------- planners


def plan_kernel_netem(dev: str, shape: LinkShape, *, rate_via: Literal["tbf", "netem"] = "tbf") -> list[list[str]]:
    """Commands for the ``kernel-netem`` backend on ``dev`` (egress). [] for a no-op shape.

    Rate goes into a child tbf at ``parent 1:1`` (the classic netem recipe) or, with
    ``rate_via="netem"``, into netem's ``rate``. Raises PlanError for a bad ``dev``.
    """
    _check_dev(dev)
    if shape.is_noop:
        return []
    if rate_via not in ("tbf", "netem"):
        raise PlanError("rate_via", rate_via, "expected 'tbf' or 'netem'")
    commands = [netem_argv(dev, shape, with_rate=rate_via == "netem")]
    if rate_via == "tbf":
        commands += rate_argvs(dev, shape, qdisc="tbf", parent="1:1", handle="10:")
    return commands


def userspace_part(shape: LinkShape, backend: ShapingBackend) -> LinkShape:
    """The part of ``shape`` the node's transport applies itself on ``backend``."""
    if backend == "kernel-netem":
        return LinkShape()
    if backend == "kernel-partial":
        return LinkShape(
            delay_ms=shape.delay_ms, jitter_ms=shape.jitter_ms, duplicate_pct=shape.duplicate_pct,
            corrupt_pct=shape.corrupt_pct, reorder_pct=shape.reorder_pct,
        )  # fmt: skip
    if backend == "userspace":
        return shape
    raise PlanError("backend", backend, "expected kernel-netem, kernel-partial or userspace")


def plan_userspace(shape: LinkShape) -> LinkShape:
    """The ``userspace`` backend: no commands, the node's transport applies all of ``shape``."""
    return userspace_part(shape, "userspace")


def plan_kernel_partial(
    dev: str,
    shape: LinkShape,
    *,
    peer_ip: str | None,
    rate_qdisc: RateQdisc = "tbf",
    ingress_loss_pct: float | None = None,
) -> KernelPartialPlan:
    """The ``kernel-partial`` plan for one endpoint whose interface towards the peer is ``dev``.

    Rate/queue on ``dev``'s egress (tbf, or htb+pfifo); ``ingress_loss_pct`` (default:
    ``shape.loss_pct``, a symmetric link) dropped on INPUT from ``peer_ip``; offloads off
    whenever either direction is lossy; delay, jitter, duplicate, corrupt and reorder in
    ``.userspace``. Raises PlanError for a bad dev/address, or a lossy link without ``peer_ip``.
    """
    _check_dev(dev)
    loss_in = shape.loss_pct if ingress_loss_pct is None else ingress_loss_pct
    if not 0 <= loss_in <= 100:
        raise PlanError("ingress_loss_pct", ingress_loss_pct, "must be within 0..100")
    commands = rate_argvs(dev, shape, qdisc=rate_qdisc)
    undo = [["tc", "qdisc", "del", "dev", dev, "root"]] if commands else []
    rules: list[list[str]] = []
    if loss_in or shape.loss_pct:
        commands.append(offloads_off_argv(dev))
    if loss_in:
        if peer_ip is None:
            raise PlanError("peer_ip", peer_ip, f"loss of {_num(loss_in)}% is dropped on INPUT from the peer: give its address")
        rules.append(loss_rule_argv(dev, peer_ip, loss_in))
        commands += rules
        undo += [_swap_op(rule, "-D") for rule in rules]
    return LinkPlan("kernel-partial", dev, commands, undo, userspace_part(shape, "kernel-partial"), rules)


def plan_ingress_ifb(
    dev: str,
    ifb: str,
    shape: LinkShape,
    *,
    backend: Literal["kernel-netem", "kernel-partial"] = "kernel-partial",
    rate_qdisc: RateQdisc = "tbf",
) -> list[list[str]]:
    """Shape what ARRIVES on ``dev`` by redirecting it through the IFB device ``ifb``.

    For when the sending end cannot be shaped (no NET_ADMIN there, or shaping from the
    host side of a veth). Creates ``ifb`` (it must not exist yet: use a per-run name),
    redirects all of ``dev``'s ingress to it with a u32 match-all + mirred (matchall is
    not in every kernel), then shapes ``ifb``'s egress: the full netem plan on
    ``kernel-netem``; only rate/queue on ``kernel-partial`` (loss stays on INPUT, which
    sees packets after the IFB round trip; delay stays in userspace). Undo with
    ``plan_clear(dev, ifb=ifb)``. Raises PlanError for bad names or backend.
    """
    _check_dev(dev)
    _check_dev(ifb, "ifb")
    if ifb == dev:
        raise PlanError("ifb", ifb, "the IFB device must differ from dev")
    if backend == "kernel-netem":
        shaping = plan_kernel_netem(ifb, shape)
    elif backend == "kernel-partial":
        shaping = rate_argvs(ifb, shape, qdisc=rate_qdisc)
    else:
        raise PlanError("backend", backend, "ingress shaping needs kernel-netem or kernel-partial")
    if not shaping:
        return []
    return [
        ["ip", "link", "add", ifb, "type", "ifb"],
        ["ip", "link", "set", "dev", ifb, "up"],
        ["tc", "qdisc", "replace", "dev", dev, "handle", "ffff:", "ingress"],
        ["tc", "filter", "replace", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "1",
         "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb],
        *shaping,
    ]  # fmt: skip


def plan_clear(dev: str, *, ifb: str | None = None, iptables_rules: Iterable[list[str]] = ()) -> list[list[str]]:
    """Undo shaping on ``dev``: root qdisc, and the ingress redirect + ``ifb`` if given,
    and the ``-A`` ``iptables_rules`` a plan added (as ``-D``). Raises PlanError for bad input.
    """
    _check_dev(dev)
    commands = [["tc", "qdisc", "del", "dev", dev, "root"]]
    if ifb is not None:
        _check_dev(ifb, "ifb")
        commands += [["tc", "qdisc", "del", "dev", dev, "ingress"], ["ip", "link", "del", "dev", ifb]]
    commands += [_swap_op(rule, "-D") for rule in iptables_rules]
    return commands


def plan_link(
    backend: ShapingBackend,
    dev: str,
    shape: LinkShape,
    *,
    peer_ip: str | None = None,
    rate_qdisc: RateQdisc = "tbf",
) -> LinkPlan:
    """One endpoint's plan on any backend, so a run can record which backend shaped each link.

    Raises PlanError for a bad dev/address/backend (see the per-backend planners).
    """
    _check_dev(dev)
    if backend == "kernel-netem":
        commands = plan_kernel_netem(dev, shape)
        return LinkPlan(backend, dev, commands, plan_clear(dev) if commands else [], LinkShape())
    if backend == "kernel-partial":
        return plan_kernel_partial(dev, shape, peer_ip=peer_ip, rate_qdisc=rate_qdisc)
    if backend == "userspace":
        return LinkPlan(backend, dev, [], [], plan_userspace(shape))
    raise PlanError("backend", backend, "expected kernel-netem, kernel-partial or userspace")
