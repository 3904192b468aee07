"""Shaping applied to running containers: per link end, from the host, inside the container's netns.

Every command a planner (:func:`netem.plan.plan_link`) returns runs on the host as
``nsenter -t <container pid> -n <argv>``: the container needs no NET_ADMIN, and the
host's tc/iptables/ethtool do the work in the container's network namespace.

* The interface is found by ADDRESS (``ip -o -4 addr show to <ip>/32``), never by
  name: after ``docker network disconnect`` + ``connect`` it comes back under a new
  name and without its qdiscs, so :func:`reapply` simply applies again.
* Idempotent: ``tc qdisc replace``; an iptables rule is added only when ``-C`` says it
  is missing; our rules (comment ``snekbed``) from the same peer that differ from the
  plan (an old device name after a reconnect, another loss rate) are deleted first.
* What was applied is returned as a :class:`ShapingRecord` (backend per link end,
  the dev, the commands, which part of the shape ran where, the probe's findings);
  for a run it is kept in ``runs/<id>/shaping.json`` (:mod:`orchestrator.backends.shaping_runs`)
  so ``snekbed links show`` can print it next to the live state.
* The node's part (delay/jitter on ``kernel-partial``) cannot be changed from here:
  it is in the node's ``--peer``/``--inbound`` URIs (:func:`node_peer_query`).

Everything here takes :class:`Endpoint` lists and works on any containers, e.g. a
test rig; a run's link ends (from the Docker backend) and its record file are
:mod:`orchestrator.backends.shaping_runs`.
"""

from __future__ import annotations

import ipaddress
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from contract.links import LinkShape
from netem.errors import NetemError
from netem.probe import run_command
from netem.plan import IPTABLES_COMMENT, RateQdisc, ShapingBackend, iptables_check_argv, plan_link, userspace_part

__all__ = [
    "BACKENDS",
    "AppliedEndpoint",
    "Endpoint",
    "EndpointState",
    "NsRun",
    "ShapingError",
    "ShapingRecord",
    "ShapingRefused",
    "apply_endpoint",
    "apply_endpoints",
    "clear_endpoint",
    "endpoint_state",
    "find_dev",
    "load_record",
    "node_peer_query",
    "nsenter_run",
    "save_record",
    "where_shaped",
]

#: Runs one argv in the network namespace of a pid; never raises for a failing command.
NsRun = Callable[[int, list[str]], "subprocess.CompletedProcess[str]"]

NSENTER_TIMEOUT_S = 15.0
BACKENDS: tuple[str, ...] = ("kernel-netem", "kernel-partial", "userspace")
_OUR_QDISCS = ("tbf", "htb", "netem")  # root qdiscs a plan installs (Docker leaves noqueue)


class ShapingError(NetemError, RuntimeError):
    """Applying, clearing or inspecting shaping on a running link end failed; the message names where."""


class ShapingRefused(ShapingError):
    """Refused before any link end was touched: the run has no running link ends, this host cannot do the backend
    asked for, or a file of the run cannot be read (the message names it)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a link in running containers: who, where (pid, address) and what shape."""

    link: str  # a label for the link, e.g. its index in the topology
    link_class: str
    shape: LinkShape
    node: str
    pid: int  # the container's init pid on the host (for nsenter)
    ip: str  # this end's address on the link
    peer: str
    peer_ip: str
    container_id: str = ""


# ---------------------------------------------------------------- running commands


def nsenter_run(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (host binaries) in the network namespace of ``pid``. Never raises for a failing command:
    a missing program gives returncode 127, a timeout 124."""
    return run_command(["nsenter", "-t", str(pid), "-n", *argv], timeout_s=NSENTER_TIMEOUT_S)


def _must(run: NsRun, ep: Endpoint, argv: list[str], doing: str) -> str:
    done = run(ep.pid, argv)
    if done.returncode != 0:
        raise ShapingError(f"link {ep.link} at {ep.node} ({ep.ip}, pid {ep.pid}): {doing}: `{shlex.join(argv)}` "
                           f"exited {done.returncode}: {(done.stderr or done.stdout).strip() or 'no output'}")
    return done.stdout


def find_dev(pid: int, ip: str, *, run: NsRun = nsenter_run) -> str:
    """The interface holding ``ip`` in the network namespace of ``pid``.

    Raises ShapingError when no interface has it (container stopped, network disconnected).
    """
    if pid <= 0:
        raise ShapingError(f"cannot find the interface holding {ip}: its container is not running (pid {pid})")
    done = run(pid, ["ip", "-o", "-4", "addr", "show", "to", f"{ip}/32"])
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) < 2:
        why = (done.stderr or "").strip() or "no interface has this address"
        raise ShapingError(f"pid {pid}: cannot find the interface holding {ip}: {why}")
    return fields[1].split("@", 1)[0]


# ---------------------------------------------------------------- records


class AppliedEndpoint(BaseModel):
    """What was done at one link end."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    link: str
    link_class: str
    node: str
    peer: str
    ip: str
    peer_ip: str
    dev: str
    backend: ShapingBackend
    shape: dict[str, Any]
    userspace: dict[str, Any]  # the part the node applies (from its peer URI), non-default fields
    where: dict[str, str]  # rate / loss / delay / jitter -> where that part runs
    commands: list[list[str]]  # run (or found already in place)
    skipped: list[list[str]] = []  # iptables rules already present (-C succeeded)
    removed: list[list[str]] = []  # stale snekbed rules from this peer that were deleted first


class ShapingRecord(BaseModel):
    """One ``apply`` over a set of link ends: the backend, what the probe found, and every end."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    backend: ShapingBackend
    capabilities: dict[str, Any]  # netem.probe.Capabilities.summary() (+ ethtool)
    notes: list[str] = []
    applied_wall_ts: float
    endpoints: list[AppliedEndpoint] = []

    def for_link(self, link: str) -> list[AppliedEndpoint]:
        return [e for e in self.endpoints if e.link == link]

    @property
    def fallback(self) -> str | None:
        """A sentence saying netem was unavailable and which fallback ran, or None when netem ran."""
        if self.capabilities.get("netem"):
            return None
        return f"netem unavailable in this kernel: fallback {self.backend!r} ran"


def save_record(record: ShapingRecord, path: Path) -> None:
    """Write ``record`` as JSON (atomically). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_record(path: Path) -> ShapingRecord | None:
    """The record at ``path``, or None when there is none. Raises ShapingRefused when it is unreadable."""
    try:
        return ShapingRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ShapingRefused(f"{path}: unreadable shaping record ({exc})") from exc


# ---------------------------------------------------------------- pure helpers


def where_shaped(shape: LinkShape, backend: ShapingBackend, dev: str, peer_ip: str, *,
                 rate_qdisc: str = "tbf") -> dict[str, str]:
    """Which part of ``shape`` runs where on ``backend`` (rate, loss, delay, jitter; "-" when not asked)."""
    out: dict[str, str] = {}
    if backend == "kernel-netem":
        kernel = f"kernel: netem on {dev} egress"
        out = {"rate": f"kernel: tbf under netem on {dev} egress", "loss": kernel, "delay": kernel, "jitter": kernel}
    elif backend == "kernel-partial":
        out = {"rate": f"kernel: {rate_qdisc} on {dev} egress",
               "loss": f"kernel: iptables statistic DROP on INPUT -i {dev} -s {peer_ip}",
               "delay": "node userspace (peer URI)", "jitter": "node userspace (peer URI)"}  # fmt: skip
    else:
        out = dict.fromkeys(("rate", "loss", "delay", "jitter"), "node userspace (peer URI)")
    asked = {"rate": shape.rate_mbit, "loss": shape.loss_pct, "delay": shape.delay_ms, "jitter": shape.jitter_ms}
    return {k: (v if asked[k] else "-") for k, v in out.items()}


def node_peer_query(link_class: str, shape: LinkShape, backend: ShapingBackend) -> str:
    """The query of a node's ``--peer``/``--inbound`` URI carrying the userspace part of ``shape`` on ``backend``.

    ``class=<name>&delay_ms=..&jitter_ms=..`` (only non-zero fields). Raises ShapingError when
    the userspace part has fields a URI cannot carry (duplicate/corrupt/reorder).
    """
    part = userspace_part(shape, backend)
    bad = [f for f in ("duplicate_pct", "corrupt_pct", "reorder_pct") if getattr(part, f)]
    if bad:
        raise ShapingError(f"link class {link_class!r}: {', '.join(bad)} cannot be carried by a peer URI")
    params = [f"class={link_class}"]
    for name in ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit", "queue_limit_pkts"):
        value = getattr(part, name)
        if value:
            params.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
    return "&".join(params)


def _our_rules(listing: str, peer_ip: str) -> list[list[str]]:
    """The ``-A INPUT ...`` lines of ``iptables -S INPUT`` that carry our comment and come from ``peer_ip``."""
    out: list[list[str]] = []
    want = ipaddress.ip_address(peer_ip)
    for line in listing.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if words[:2] != ["-A", "INPUT"] or "--comment" not in words or "-s" not in words:
            continue
        comment = words[words.index("--comment") + 1] if words.index("--comment") + 1 < len(words) else ""
        source = words[words.index("-s") + 1].split("/", 1)[0] if words.index("-s") + 1 < len(words) else ""
        try:
            same = ipaddress.ip_address(source) == want
        except ValueError:
            same = False
        if comment == IPTABLES_COMMENT and same:
            out.append(words)
    return out


def _rule_key(words: Sequence[str]) -> tuple[str, float]:
    """(dev, probability) of a loss rule in either planner (-A ...) or ``iptables -S`` form."""
    dev = words[words.index("-i") + 1] if "-i" in words else ""
    prob = float(words[words.index("--probability") + 1]) if "--probability" in words else -1.0
    return dev, round(prob, 6)  # the kernel keeps a 32-bit fraction: 0.02 lists as 0.02000000002


def _tool(peer_ip: str) -> str:
    return "ip6tables" if ipaddress.ip_address(peer_ip).version == 6 else "iptables"


# ---------------------------------------------------------------- one endpoint


def apply_endpoint(ep: Endpoint, backend: ShapingBackend, *, rate_qdisc: RateQdisc = "tbf",
                   run: NsRun = nsenter_run) -> AppliedEndpoint:
    """Apply ``backend``'s kernel part of ``ep.shape`` at ``ep`` (found by address); idempotent.

    Stale snekbed loss rules from ``ep.peer_ip`` (another dev or rate) are deleted first,
    and a tbf/htb/netem root qdisc the plan does not replace (the class or backend
    changed); planned rules are added only when ``-C`` says they are missing. Raises
    ShapingError naming the command that failed, PlanError for a bad address.
    """
    if backend not in BACKENDS:
        raise ShapingError(f"link {ep.link}: unknown shaping backend {backend!r} "
                           f"(expected one of {', '.join(BACKENDS)})")
    dev = find_dev(ep.pid, ep.ip, run=run)
    plan = plan_link(backend, dev, ep.shape, peer_ip=ep.peer_ip, rate_qdisc=rate_qdisc)
    planned = {_rule_key(r) for r in plan.iptables_rules}
    removed: list[list[str]] = []
    tool = _tool(ep.peer_ip)
    for words in _our_rules(_must(run, ep, [tool, "-w", "-S", "INPUT"], "listing rules"), ep.peer_ip):
        if _rule_key(words) not in planned:
            argv = [tool, "-w", "-D", *words[1:]]
            _must(run, ep, argv, "deleting a stale loss rule")
            removed.append(argv)
    sets_root = any(argv[:3] == ["tc", "qdisc", "replace"] and "root" in argv for argv in plan.commands)
    if not sets_root and _root_qdisc(run, ep, dev)[0] in _OUR_QDISCS:  # an earlier class or backend's rate limit
        argv = ["tc", "qdisc", "del", "dev", dev, "root"]
        _must(run, ep, argv, "deleting a stale root qdisc")
        removed.append(argv)
    rules = [tuple(r) for r in plan.iptables_rules]
    skipped: list[list[str]] = []
    for argv in plan.commands:
        if tuple(argv) in rules and run(ep.pid, iptables_check_argv(argv)).returncode == 0:
            skipped.append(argv)
            continue
        _must(run, ep, argv, f"applying {backend}")
    return AppliedEndpoint(
        link=ep.link, link_class=ep.link_class, node=ep.node, peer=ep.peer, ip=ep.ip, peer_ip=ep.peer_ip, dev=dev,
        backend=backend, shape=ep.shape.model_dump(exclude_defaults=True),
        userspace=plan.userspace.model_dump(exclude_defaults=True),
        where=where_shaped(ep.shape, backend, dev, ep.peer_ip, rate_qdisc=rate_qdisc),
        commands=plan.commands, skipped=skipped, removed=removed,
    )  # fmt: skip


def clear_endpoint(ep: Endpoint, *, run: NsRun = nsenter_run) -> list[list[str]]:
    """Remove the root qdisc of ``ep``'s interface and every snekbed rule from ``ep.peer_ip``; return what ran.

    "Nothing to clear" is not an error. Offloads stay off (see netem.plan). Raises
    ShapingError when the interface cannot be found or a command fails.
    """
    dev = find_dev(ep.pid, ep.ip, run=run)
    ran: list[list[str]] = []
    if _root_qdisc(run, ep, dev)[0] in _OUR_QDISCS:
        argv = ["tc", "qdisc", "del", "dev", dev, "root"]
        _must(run, ep, argv, "clearing the root qdisc")
        ran.append(argv)
    tool = _tool(ep.peer_ip)
    for words in _our_rules(_must(run, ep, [tool, "-w", "-S", "INPUT"], "listing rules"), ep.peer_ip):
        argv = [tool, "-w", "-D", *words[1:]]
        _must(run, ep, argv, "deleting a loss rule")
        ran.append(argv)
    return ran


def _root_qdisc(run: NsRun, ep: Endpoint, dev: str) -> tuple[str, str]:
    """(kind, the whole line) of ``dev``'s root qdisc; ("", "") when it has none we can see."""
    for line in _must(run, ep, ["tc", "qdisc", "show", "dev", dev], "listing qdiscs").splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "qdisc" and "root" in words:
            return words[1], line.strip()
    return "", ""


class EndpointState(BaseModel):
    """What is live at one link end right now, and whether it matches the plan for ``backend``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    link: str
    link_class: str
    node: str
    backend: ShapingBackend  # what the state was compared with
    dev: str | None  # None: the address is on no interface (stopped / disconnected)
    root_qdisc: str
    loss_rules: list[str]
    in_sync: bool
    problems: list[str] = []


def endpoint_state(ep: Endpoint, backend: ShapingBackend, *, rate_qdisc: RateQdisc = "tbf",
                   run: NsRun = nsenter_run) -> EndpointState:
    """Inspect ``ep`` (never changes anything): its current dev, root qdisc and loss rules vs the plan.

    Never raises for a missing interface (``dev=None``, not in sync); raises ShapingError
    when tc/iptables cannot be run there at all.
    """
    try:
        dev = find_dev(ep.pid, ep.ip, run=run)
    except ShapingError as exc:
        return EndpointState(link=ep.link, link_class=ep.link_class, node=ep.node, backend=backend, dev=None,
                             root_qdisc="", loss_rules=[], in_sync=False,
                             problems=[str(exc)])
    kind, line = _root_qdisc(run, ep, dev)
    listing = _must(run, ep, [_tool(ep.peer_ip), "-w", "-S", "INPUT"], "listing rules")
    rules = _our_rules(listing, ep.peer_ip)
    plan = plan_link(backend, dev, ep.shape, peer_ip=ep.peer_ip, rate_qdisc=rate_qdisc)
    problems: list[str] = []
    want_qdisc = ""
    if backend == "kernel-partial" and ep.shape.rate_mbit is not None:
        want_qdisc = rate_qdisc
    elif backend == "kernel-netem" and not ep.shape.is_noop:
        want_qdisc = "netem"
    if want_qdisc and kind != want_qdisc:
        problems.append(f"root qdisc on {dev} is {kind or 'none'}, expected {want_qdisc}")
    elif not want_qdisc and kind in _OUR_QDISCS:
        problems.append(f"root qdisc on {dev} is {kind}, expected none")
    want_rules = {_rule_key(r) for r in plan.iptables_rules}
    have_rules = {_rule_key(w) for w in rules}
    if want_rules - have_rules:
        problems.append(f"loss rule for -i {dev} -s {ep.peer_ip} missing")
    if have_rules - want_rules:
        stale = ", ".join(f"-i {d} p={p:g}" for d, p in sorted(have_rules - want_rules))
        problems.append(f"stale loss rule(s): {stale}")
    return EndpointState(link=ep.link, link_class=ep.link_class, node=ep.node, backend=backend, dev=dev,
                         root_qdisc=line, loss_rules=[shlex.join(w) for w in rules],
                         in_sync=not problems, problems=problems)


# ---------------------------------------------------------------- many endpoints


def apply_endpoints(endpoints: Iterable[Endpoint], backend: ShapingBackend, *, run_id: str,
                    capabilities: dict[str, Any] | None = None, notes: Iterable[str] = (),
                    rate_qdisc: RateQdisc = "tbf", run: NsRun = nsenter_run) -> ShapingRecord:
    """Apply at every endpoint (no-op shapes are recorded too); return the record. Raises ShapingError."""
    applied = [apply_endpoint(ep, backend, rate_qdisc=rate_qdisc, run=run) for ep in endpoints]
    return ShapingRecord(run_id=run_id, backend=backend, capabilities=dict(capabilities or {}), notes=list(notes),
                         applied_wall_ts=round(time.time(), 6), endpoints=applied)
