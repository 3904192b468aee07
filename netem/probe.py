"""Capability probe: which shaping backend can this host (or container) use?

:func:`probe` runs the real commands once, harmlessly, and reports what worked:

* It makes a throwaway network namespace ``snekbed-probe-<pid>-<tag>`` and, inside
  it, a veth pair; every test runs there, and deleting the namespace (in
  ``finally:``) removes everything. Where namespaces cannot be made (a container
  with NET_ADMIN but not SYS_ADMIN) it falls back to throwaway devices named
  ``snkp<tag>a/b/i`` in the current namespace and deletes them by name.
* The tests are the very commands the planners emit (:mod:`netem.plan`): netem,
  tbf, htb + pfifo, IFB with a u32/mirred ingress redirect, ethtool offloads off.
* The iptables ``statistic`` test appends the planned DROP rule to a NEW chain
  ``SNEKBED-PROBE-<tag>`` that nothing jumps to, so even in the fallback it cannot
  touch traffic or the host's real rules; the chain is flushed and deleted after.

Backend choice: netem -> ``kernel-netem``; (tbf or htb) and iptables statistic ->
``kernel-partial``; otherwise ``userspace``. Never silent: every capability that is
missing gets a line in ``Capabilities.notes`` saying which command failed and how.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from contract.links import LinkShape
from netem.plan import (
    ShapingBackend,
    loss_rule_argv,
    netem_argv,
    offloads_off_argv,
    plan_ingress_ifb,
    rate_argvs,
)

__all__ = ["Capabilities", "RunFn", "choose_backend", "probe", "run_command"]

RunFn = Callable[[list[str]], "subprocess.CompletedProcess[Any]"]

_TIMEOUT_S = 10.0
_PROBE_PEER_IP = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never a real peer


class Capabilities(BaseModel):
    """What the probe found, and the backend it picked. ``summary()`` is the JSON contract."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    netem: bool = False
    tbf: bool = False
    htb: bool = False
    ifb: bool = False
    iptables_statistic: bool = False
    ethtool: bool = False
    backend: ShapingBackend = "userspace"
    notes: tuple[str, ...] = ()

    def summary(self) -> dict[str, bool | str]:
        """The keys ``snekbed netem probe --json`` prints: the five capabilities and the backend."""
        return self.model_dump(include={"netem", "tbf", "htb", "ifb", "iptables_statistic", "backend"})


def choose_backend(*, netem: bool, tbf: bool, htb: bool, iptables_statistic: bool) -> ShapingBackend:
    """netem -> kernel-netem; a rate qdisc plus iptables statistic -> kernel-partial; else userspace."""
    if netem:
        return "kernel-netem"
    if (tbf or htb) and iptables_statistic:
        return "kernel-partial"
    return "userspace"


def run_command(argv: list[str], *, timeout_s: float = _TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` capturing text output, with a timeout; never raises for a failing command.

    A missing program gives returncode 127 and a timeout 124, as a shell would.
    """
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout_s:g} s")


class _Runner:
    """Runs probe commands (optionally inside the namespace) and remembers why they failed."""

    def __init__(self, run: RunFn, prefix: Sequence[str] = ()) -> None:
        self.run, self.prefix = run, list(prefix)

    def __call__(self, argv: list[str]) -> tuple[bool, str]:
        full = [*self.prefix, *argv]
        try:
            done = self.run(full)
        except FileNotFoundError:
            return False, f"{full[0]}: command not found"
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if done.returncode == 0:
            return True, ""
        err = done.stderr if isinstance(done.stderr, str) else (done.stderr or b"").decode(errors="replace")
        first = next((line.strip() for line in err.splitlines() if line.strip()), "")
        return False, f"exit {done.returncode}" + (f": {first}" if first else "")

    def all_ok(self, commands: Sequence[list[str]]) -> tuple[bool, str]:
        for argv in commands:
            ok, why = self(argv)
            if not ok:
                return False, f"`{' '.join(argv)}` failed ({why})"
        return True, ""


_CAPABILITY_NAMES = ("netem", "tbf", "htb", "ifb", "iptables_statistic", "ethtool")


def probe(run: RunFn = run_command, *, euid: int | None = None) -> Capabilities:
    """Test this host's shaping capabilities for real and pick a backend.

    ``run`` executes one argv and returns a CompletedProcess (inject a fake in tests);
    ``euid`` defaults to ``os.geteuid()``. Not root, or no ``ip``: everything False and
    backend "userspace", with notes saying why. Never raises for a missing feature;
    cleanup runs in ``finally:``.
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return Capabilities(notes=(f"not root (euid {euid}): kernel shaping needs root with NET_ADMIN; "
                                   "links are shaped in userspace",))  # fmt: skip
    host = _Runner(run)
    ok, why = host(["ip", "-V"])
    if not ok:
        return Capabilities(notes=(f"iproute2 `ip` is not usable ({why}): install iproute2; links are shaped in userspace",))
    trial = _Trial(run, host)
    try:
        if not trial.make_interface():
            return Capabilities(notes=tuple(trial.notes))
        trial.run_checks()
    finally:
        trial.cleanup()
    return _verdict(trial.found, trial.notes)


class _Trial:
    """One probe's throwaway namespace (or devices), what it found and its notes.

    Made in a namespace ``snekbed-probe-<pid>-<tag>`` when one can be added, else with devices
    ``snkp<tag>a/b/i`` in the current namespace; :meth:`cleanup` removes whichever it made.
    """

    def __init__(self, run: RunFn, host: _Runner) -> None:
        self.host = host
        self.notes: list[str] = []
        self.found: dict[str, bool] = {}
        tag = secrets.token_hex(3)
        self.ns = f"snekbed-probe-{os.getpid()}-{tag}"
        self.dev, self.peer, self.ifb, self.chain = f"snkp{tag}a", f"snkp{tag}b", f"snkp{tag}i", f"SNEKBED-PROBE-{tag}"
        self.in_ns, why = host(["ip", "netns", "add", self.ns])
        if not self.in_ns:
            self.notes.append(f"no throwaway network namespace ({why}); probed with devices "
                              f"{self.dev}/{self.peer}/{self.ifb} in the current namespace")  # fmt: skip
        self.x = _Runner(run, ["ip", "netns", "exec", self.ns] if self.in_ns else [])
        self.made_chain = False

    def make_interface(self) -> bool:
        """The veth pair every check runs on; False (with a note) when it cannot be made."""
        dev = self.dev
        ok, why = self.x.all_ok([["ip", "link", "add", dev, "type", "veth", "peer", "name", self.peer],
                                 ["ip", "link", "set", "dev", dev, "up"]])  # fmt: skip
        if not ok:
            self.notes.append(f"could not create a test interface: {why}")
        return ok

    def check(self, name: str, commands: list[list[str]], undo: list[list[str]]) -> None:
        """Run ``commands`` (found[name]: whether all worked), then ``undo`` whatever happened."""
        self.found[name], why = self.x.all_ok(commands)
        if not self.found[name]:
            self.notes.append(f"{name}: {why}")
        for argv in undo:
            self.x(argv)

    def run_checks(self) -> None:
        """The planners' own commands, one capability after another."""
        dev, ifb, chain = self.dev, self.ifb, self.chain
        clear_root = [["tc", "qdisc", "del", "dev", dev, "root"]]
        rated = LinkShape(rate_mbit=1, queue_limit_pkts=20)
        self.check("netem", [netem_argv(dev, LinkShape(delay_ms=1))], clear_root)
        self.check("tbf", rate_argvs(dev, rated, qdisc="tbf"), clear_root)
        self.check("htb", rate_argvs(dev, rated, qdisc="htb"), clear_root)
        redirect = plan_ingress_ifb(dev, ifb, rated)[:4]  # create ifb, up, ingress qdisc, u32 mirred redirect
        self.check("ifb", redirect, [["tc", "qdisc", "del", "dev", dev, "ingress"], ["ip", "link", "del", "dev", ifb]])
        self.made_chain, why = self.x(["iptables", "-w", "-N", chain])
        rule = loss_rule_argv(dev, _PROBE_PEER_IP, 50.0)
        rule[rule.index("INPUT")] = chain  # an unreferenced chain: the rule can never see a packet
        if self.made_chain:
            self.check("iptables_statistic", [rule], [])
        else:
            self.found["iptables_statistic"] = False
            self.notes.append(f"iptables_statistic: `iptables -w -N {chain}` failed ({why})")
        self.check("ethtool", [offloads_off_argv(dev)], [])

    def cleanup(self) -> None:
        """Remove the chain, then the namespace (or the devices), noting a namespace that would not go."""
        x = self.x
        if self.made_chain:
            x(["iptables", "-w", "-F", self.chain])
            x(["iptables", "-w", "-X", self.chain])
        if self.in_ns:
            ok, why = self.host(["ip", "netns", "del", self.ns])
            if not ok:
                self.notes.append(f"cleanup: could not delete namespace {self.ns} ({why}); "
                                  f"remove it with `ip netns del {self.ns}`")  # fmt: skip
        else:
            x(["ip", "link", "del", "dev", self.ifb])
            x(["ip", "link", "del", "dev", self.dev])  # takes its veth peer with it


def _verdict(found: dict[str, bool], notes: list[str]) -> Capabilities:
    """The capabilities found (a missing one is False), the backend they allow, and the notes saying so."""
    caps = {k: found.get(k, False) for k in _CAPABILITY_NAMES}
    backend = choose_backend(netem=caps["netem"], tbf=caps["tbf"], htb=caps["htb"],
                             iptables_statistic=caps["iptables_statistic"])  # fmt: skip
    if backend == "kernel-partial":
        notes.append("no netem: rate/queue in the kernel (tbf/htb), loss via iptables statistic on INPUT, "
                     "delay/jitter/duplicate/corrupt/reorder in the node's transport")  # fmt: skip
        if not caps["ethtool"]:
            notes.append("ethtool unusable: loss rules will drop whole GSO/GRO super-packets, not segments; "
                         "install ethtool")  # fmt: skip
    elif backend == "userspace":
        notes.append("no usable kernel shaping: the node's transport applies every link shape")
    return Capabilities(**caps, backend=backend, notes=tuple(notes))
