"""LAN discovery across the two implementations: a snekbed node and a reference node (node/pinecone), each in a
network namespace of its own, joined by a veth pair and told nothing of each other, find each other with the
multicast beacons (PROTOCOL.md Appendix A), peer once, as a multicast link on both sides, and answer each other's
pings. The reference's multicast package skips the loopback interface (it wants a global unicast IPv4 address), so
this needs namespaces, and root. Each namespace also has a management veth to this one, where its admin API
listens; nothing multicasts in this namespace (other tests' multicast on ``lo`` never hears these beacons).

About 10 s. It replaces ``scripts/interop/run.py --lan``, which ran the same check with a program of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ci import need
from tests.interop.refproc import RefProc
from tests.node.nodeproc import NodeProc, holds, wait_until

pytestmark = pytest.mark.slow

LAN = ("192.168.77.1/24", "192.168.77.2/24")  # inside the namespaces only


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


class _Where:
    """A namespace for one node: its name, its LAN interface, the address its admin API listens on."""

    def __init__(self, ns: str, lan: str, admin_ip: str) -> None:
        self.ns, self.lan, self.admin_ip = ns, lan, admin_ip

    def argv(self, argv: list[str]) -> list[str]:
        argv = list(argv)
        argv[argv.index("--admin") + 1] = f"{self.admin_ip}:0"
        return ["ip", "netns", "exec", self.ns, *argv, "--multicast", self.lan]


class SnekIn(NodeProc):
    def __init__(self, where: _Where, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.where = where

    def argv(self) -> list[str]:
        return self.where.argv(super().argv())


class RefIn(RefProc):
    def __init__(self, where: _Where, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.where = where

    def argv(self) -> list[str]:
        return self.where.argv(super().argv())


@pytest.fixture
def two_namespaces() -> Iterator[tuple[_Where, _Where]]:
    need(os.geteuid() == 0 and shutil.which("ip") is not None, "network namespaces need root and iproute2")
    tag = f"snl{os.getpid() % 100000}"
    base = (os.getpid() % 32) * 8  # two /30 management links in 192.0.2.0/24 (TEST-NET-1)
    made: list[str] = []
    try:
        wheres = []
        for i, ns in enumerate((f"{tag}s", f"{tag}r")):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            host_dev, ns_dev, net = f"{tag}m{i}", f"{tag}n{i}", base + 4 * i
            _ip("link", "add", host_dev, "type", "veth", "peer", "name", ns_dev, "netns", ns)
            _ip("addr", "add", f"192.0.2.{net + 1}/30", "dev", host_dev)
            _ip("link", "set", host_dev, "up")
            _ip("-n", ns, "addr", "add", f"192.0.2.{net + 2}/30", "dev", ns_dev)
            _ip("-n", ns, "link", "set", ns_dev, "up")
            wheres.append(_Where(ns, f"{tag}l{i}", f"192.0.2.{net + 2}"))
        s, r = wheres
        _ip("link", "add", s.lan, "netns", s.ns, "type", "veth", "peer", "name", r.lan, "netns", r.ns)
        for where, addr in zip(wheres, LAN, strict=True):
            _ip("-n", where.ns, "addr", "add", addr, "dev", where.lan)
            _ip("-n", where.ns, "link", "set", where.lan, "up")
        yield s, r
    finally:
        for ns in made:  # the veth pairs go with them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_snekbed_node_and_a_reference_node_find_each_other_on_a_lan(
        reference_binary: Path, two_namespaces: tuple[_Where, _Where], tmp_path: Path) -> None:  # fmt: skip
    s_ns, r_ns = two_namespaces
    snek = SnekIn(s_ns, "snek", tmp_path, tag="lan").start()
    ref = RefIn(r_ns, reference_binary, "ref", tmp_path, tag="lan").start()
    try:
        def peered() -> bool:
            return bool(snek.state()["peers"]) and bool(ref.state()["peers"])

        wait_until(peered, 20, what="each node discovered the other")
        for n, other in ((snek, ref), (ref, snek)):
            peers = n.state()["peers"]
            assert [p["key"] for p in peers] == [other.key.hex()], (n.name, peers)
            assert peers[0]["class"] == "multicast" and peers[0]["link_class"] == "multicast", (n.name, peers)
        up = [e for e in snek.events() if e["event"] == "peer_up"]
        assert [e["link_class"] for e in up] == ["multicast"], up
        # SNEK routes once the other's announcement came; then every ping answers, either way
        wait_until(lambda: snek.ping(ref.key, "snek", timeout_s=2)["received"] == 1, 10, what="a ping to ref")
        wait_until(lambda: ref.ping(snek.key, "snek", timeout_s=2)["received"] == 1, 10, what="a ping to snek")
        for n, other in ((snek, ref), (ref, snek)):
            for mode in ("snek", "tree"):
                got = n.ping(other.key, mode, count=3, timeout_s=3)
                assert got["received"] == 3, (n.name, mode, got)
        # beacons keep coming (every 2 s on both sides): a key already peered is not dialled again
        holds(lambda: len(snek.state()["peers"]) == len(ref.state()["peers"]) == 1, 5, what="one peering each")
    finally:
        for n in (ref, snek):
            n.terminate()
