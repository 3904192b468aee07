"""Fixtures and helpers for tests that need the real kernel tools (network namespaces, tc, iptables).

Tests that run ip/tc/iptables need root and iproute2. They skip with a reason when
those are missing, except under CI (tests/ci.py), where a missing tool is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.ci import need


def require_kernel_tools(*tools: str) -> None:
    """Skip (or, under CI, fail) unless we are root and ``ip`` plus ``tools`` are on PATH."""
    need(os.geteuid() == 0, f"needs root (euid {os.geteuid()}) to create network namespaces")
    missing = [t for t in ("ip", *tools) if shutil.which(t) is None]
    need(not missing, f"needs {', '.join(missing)} (apt-get install iproute2 iptables ethtool)")


@pytest.fixture
def netns() -> Iterator[str]:
    """A throwaway network namespace with a veth pair ``va``/``vb`` (both up), deleted afterwards."""
    require_kernel_tools("tc", "iptables")
    name = f"snekbed-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for argv in (["ip", "link", "add", "va", "type", "veth", "peer", "name", "vb"],
                     ["ip", "link", "set", "va", "up"], ["ip", "link", "set", "vb", "up"]):
            subprocess.run(["ip", "netns", "exec", name, *argv], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def kernel_tools() -> None:
    """Skip (or fail under CI) unless root with ip, tc and iptables."""
    require_kernel_tools("tc", "iptables")


@pytest.fixture
def nsrun(netns: str) -> Callable[[list[str]], subprocess.CompletedProcess[str]]:
    """Run an argv inside the ``netns`` fixture's namespace, capturing text output."""

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, check=False)

    return run
