"""Capability probe: for real on this host, in the no-namespace fallback, and with a fake host."""

from __future__ import annotations

import os
import subprocess

import pytest

from netem.probe import Capabilities, choose_backend, probe, run_command

# ---------------------------------------------------------------- a fake host


class FakeHost:
    """Answers probe commands like a host whose kernel has the given features."""

    def __init__(self, *, missing: set[str] = frozenset(), netns: bool = True, ip: bool = True,  # type: ignore[assignment]
                 raise_on: str | None = None) -> None:  # fmt: skip
        self.missing, self.netns, self.ip, self.raise_on = missing, netns, ip, raise_on
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        cmd = argv[4:] if argv[:3] == ["ip", "netns", "exec"] else argv
        text = " ".join(cmd)
        if self.raise_on and self.raise_on in text:
            raise PermissionError(13, "Permission denied")
        if not self.ip and cmd[0] == "ip":
            return subprocess.CompletedProcess(argv, 127, "", "ip: command not found")
        if cmd[:3] == ["ip", "netns", "add"] and not self.netns:
            return subprocess.CompletedProcess(argv, 1, "", "mount --make-shared /run/netns failed: Operation not permitted")
        for feature, needle in (("netem", " netem "), ("tbf", " tbf "), ("htb", " htb "), ("ifb", "type ifb"),
                                ("statistic", "-m statistic"), ("ethtool", "ethtool")):  # fmt: skip
            if feature in self.missing and needle in f" {text} ":
                return subprocess.CompletedProcess(argv, 2, "", f"Error: {feature} is not supported here.\nmore")
        return subprocess.CompletedProcess(argv, 0, "", "")


def assert_harmless(calls: list[list[str]]) -> None:
    """Only throwaway devices and the probe's own chain are ever touched."""
    for argv in calls:
        cmd = argv[4:] if argv[:3] == ["ip", "netns", "exec"] else argv
        if cmd[0] in ("iptables", "ip6tables"):
            chain = cmd[cmd.index("-w") + 2]
            assert chain.startswith("SNEKBED-PROBE-"), argv
        if cmd[:3] == ["ip", "link", "add"] or cmd[:3] == ["ip", "link", "del"]:
            name = cmd[3] if cmd[3] != "dev" else cmd[4]
            assert name.startswith("snkp") and len(name) <= 15, argv
        if cmd[0] == "tc" or cmd[0] == "ethtool":
            dev = cmd[cmd.index("dev") + 1] if "dev" in cmd else cmd[2]
            assert dev.startswith("snkp"), argv


def test_fake_host_with_netem_picks_kernel_netem_and_cleans_up():
    host = FakeHost()
    caps = probe(host, euid=0)
    assert caps == Capabilities(netem=True, tbf=True, htb=True, ifb=True, iptables_statistic=True, ethtool=True,
                                backend="kernel-netem", notes=())  # fmt: skip
    ns = host.calls[1][3]
    assert host.calls[1] == ["ip", "netns", "add", ns] and ns.startswith(f"snekbed-probe-{os.getpid()}-")
    assert host.calls[-1] == ["ip", "netns", "del", ns]
    assert all(c[:4] == ["ip", "netns", "exec", ns] for c in host.calls[2:-1])
    assert_harmless(host.calls)


def test_fake_host_without_netem_is_kernel_partial_and_says_why():
    caps = probe(FakeHost(missing={"netem"}), euid=0)
    assert caps.summary() == {"netem": False, "tbf": True, "htb": True, "ifb": True, "iptables_statistic": True,
                              "backend": "kernel-partial"}  # fmt: skip
    assert any(n.startswith("netem: `tc qdisc replace dev snkp") and "Error: netem is not supported here." in n
               for n in caps.notes)  # fmt: skip
    assert any("delay/jitter" in n for n in caps.notes)


def test_fake_host_without_statistic_or_rate_qdiscs_falls_back_to_userspace():
    assert probe(FakeHost(missing={"netem", "statistic"}), euid=0).backend == "userspace"
    caps = probe(FakeHost(missing={"netem", "tbf", "htb"}), euid=0)
    assert caps.backend == "userspace" and caps.ifb  # IFB redirect works; nothing to shape with, though
    assert any("no usable kernel shaping" in n for n in caps.notes)


def test_fake_host_without_ethtool_warns_about_super_packets():
    caps = probe(FakeHost(missing={"netem", "ethtool"}), euid=0)
    assert caps.backend == "kernel-partial" and not caps.ethtool
    assert any("super-packets" in n for n in caps.notes)


def test_not_root_runs_nothing():
    host = FakeHost()
    caps = probe(host, euid=1000)
    assert host.calls == []
    assert caps.summary() == {"netem": False, "tbf": False, "htb": False, "ifb": False, "iptables_statistic": False,
                              "backend": "userspace"}  # fmt: skip
    assert caps.notes[0].startswith("not root (euid 1000)")


def test_no_iproute2():
    host = FakeHost(ip=False)
    caps = probe(host, euid=0)
    assert host.calls == [["ip", "-V"]] and caps.backend == "userspace"
    assert "iproute2 `ip` is not usable (exit 127: ip: command not found)" in caps.notes[0]


def test_no_namespaces_falls_back_to_throwaway_devices_and_a_private_chain():
    host = FakeHost(netns=False, missing={"netem"})
    caps = probe(host, euid=0)
    assert caps.backend == "kernel-partial"
    assert "current namespace" in caps.notes[0]
    assert not any(c[:3] == ["ip", "netns", "exec"] for c in host.calls)
    tail = host.calls[-4:]
    assert tail[0][:3] == ["iptables", "-w", "-F"] and tail[1][:3] == ["iptables", "-w", "-X"]
    assert tail[2][:3] == ["ip", "link", "del"] and tail[3][:3] == ["ip", "link", "del"]
    assert_harmless(host.calls)


def test_exceptions_from_run_are_reported_and_cleanup_still_runs():
    host = FakeHost(raise_on="htb")
    caps = probe(host, euid=0)
    assert not caps.htb and caps.tbf
    assert any("htb" in n and "PermissionError" in n for n in caps.notes)
    assert host.calls[-1][:3] == ["ip", "netns", "del"]


def test_choose_backend_table():
    assert choose_backend(netem=True, tbf=False, htb=False, iptables_statistic=False) == "kernel-netem"
    assert choose_backend(netem=False, tbf=False, htb=True, iptables_statistic=True) == "kernel-partial"
    assert choose_backend(netem=False, tbf=True, htb=False, iptables_statistic=False) == "userspace"


def test_run_command_reports_missing_programs_as_127():
    done = run_command(["snekbed-no-such-program-xyz"])
    assert done.returncode == 127 and "not found" in done.stderr


# ---------------------------------------------------------------- the real thing


def test_real_probe_on_this_host(kernel_tools):
    # What the probe ran, recorded: comparing the host's whole state before and after would also see the Docker
    # tests on the other xdist worker (their networks' rules, the namespaces of their own probes).
    calls: list[list[str]] = []

    def recording(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return run_command(argv)

    caps = probe(recording)
    made = [argv[3] for argv in calls if argv[:3] == ["ip", "netns", "add"]]
    assert len(made) == 1, calls  # it worked in a namespace of its own
    on_host = [argv for argv in calls if argv[:4] != ["ip", "netns", "exec", made[0]]]
    # on the host: only reading the ip version and adding, then deleting, its namespace (no rule, chain or link)
    assert on_host == [["ip", "-V"], ["ip", "netns", "add", made[0]], ["ip", "netns", "del", made[0]]], on_host
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert made[0] not in netns  # and that namespace, with everything in it, is gone
    assert caps.tbf and caps.htb and caps.ifb and caps.iptables_statistic, caps.notes
    if caps.netem:
        assert caps.backend == "kernel-netem"
    else:
        # this machine: the kernel has no netem. The note proves the kernel refused it,
        # not tc rejecting a malformed command.
        assert caps.backend == "kernel-partial"
        assert any("Specified qdisc kind is unknown" in n for n in caps.notes), caps.notes


def test_real_probe_without_namespaces_uses_the_current_one_and_cleans_it(netns: str, nsrun):
    def run_in_outer(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if argv[:3] == ["ip", "netns", "add"]:  # as in a container with NET_ADMIN but no SYS_ADMIN
            return subprocess.CompletedProcess(argv, 1, "", "mount --make-shared /run/netns failed: Operation not permitted")
        return run_command(["ip", "netns", "exec", netns, *argv])

    reference = probe()
    caps = probe(run_in_outer)
    assert caps.summary() == reference.summary()
    assert "current namespace" in caps.notes[0]
    links = nsrun(["ip", "-o", "link"]).stdout
    assert "snkp" not in links and "va" in links
    assert "SNEKBED" not in nsrun(["iptables", "-w", "-S"]).stdout


def test_probe_is_cheap(kernel_tools):
    # cheap in commands, not in seconds (iptables -w waits on the xtables lock, which Docker holds while it makes
    # networks for the other xdist worker): one namespace, one veth pair, a few qdiscs, one chain
    calls: list[list[str]] = []
    probe(lambda argv: calls.append(list(argv)) or run_command(argv))
    assert 5 <= len(calls) <= 30, calls
