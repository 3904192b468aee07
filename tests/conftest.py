"""Shared test helpers.

Tests that need Docker, Java or Prometheus call ``need(...)``: on a laptop
without the thing they skip and say why; under CI (tests/ci.py: CI=1, true or yes)
they fail, so CI can never go green by skipping what it was meant to run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.ci import IN_CI, REPO, SHARED, need, need_module
from tests.orchestrator.docker_helpers import STALE_NETWORKS_FILE

__all__ = ["IN_CI", "REPO", "SHARED", "TOPOLOGIES", "docker_available", "java_available", "need", "need_module"]

TOPOLOGIES = SHARED / "topologies" / "pinecone"


def docker_available() -> tuple[bool, str]:
    try:
        import docker

        docker.from_env().ping()
        return True, ""
    except Exception as exc:  # the SDK raises several unrelated types when no engine answers
        return False, f"no Docker engine reachable ({exc.__class__.__name__}: {exc})"


def java_available() -> bool:
    return shutil.which("java") is not None


@pytest.fixture
def shared_dir() -> Path:
    need(SHARED.is_dir(), f"shared/ reference material not found at {SHARED}")
    return SHARED


# The suite runs on three workers on the machine's two cores (pytest -n 3 --dist loadgroup: README, .ci/run): most
# of a Docker test's time is spent waiting on protocol timers and the engine, not computing, so a third worker
# overlaps that waiting with other work (docs/performance.md, "The test suite's time"). Tests that share a heavy
# resource or a piece of state stay on one worker: every Spark test on the worker that holds the session's one JVM,
# the Docker tests on one worker, the multicast tests (the host's one multicast group and port) one after another.
# Modules name their own group (``pytestmark = pytest.mark.xdist_group(...)``) where that is the shared thing:
# ``swarm`` for the tests that change or read the outer engine's swarm membership (test_swarm.py makes it a manager,
# test_cluster.py checks it is as it was, a refusal in test_exit_codes.py needs it in no swarm), beside the Docker
# group (their runs are labelled by run and cluster ids, their subnets planned under one lock); ``image`` for the
# image build tests (a build, a few short containers, no network converging). The rest is spread over all workers.
# Without xdist the marks are inert.
XDIST_GROUPS = ("spark", "docker", "multicast")


# tryfirst: xdist's own hook turns xdist_group marks into the scheduling key; ours must run before it
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    uses = {"spark": {"spark"}, "docker": {"client", "image"}, "multicast": set()}  # fixtures implying the group
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:  # the module named its own
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        for group in XDIST_GROUPS:
            if item.get_closest_marker(group) is not None or fixtures & uses[group]:
                item.add_marker(pytest.mark.xdist_group(group))
                break


# ------------------------------------------------------------------ networks the engine's stale count keeps


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or the only process): a fresh list for this session
        STALE_NETWORKS_FILE.unlink(missing_ok=True)


def _restart_engine() -> str:
    """Restart the local dockerd with the arguments it runs with (systemd's unit when systemd runs it); '' once a
    client answers again, else why not."""
    if shutil.which("systemctl") and subprocess.run(["systemctl", "is-active", "--quiet", "docker"],
                                                    capture_output=True).returncode == 0:
        subprocess.run(["systemctl", "restart", "docker"], timeout=180)
    else:
        pids = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()
        if len(pids) != 1:
            return f"expected one dockerd process, found {len(pids)}"
        argv = Path(f"/proc/{pids[0]}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        os.kill(int(pids[0]), signal.SIGTERM)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pids[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        with open("/tmp/snekbed-dockerd.log", "ab") as log:
            subprocess.Popen([a.decode() for a in argv], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if docker_available()[0]:
            return ""
        time.sleep(1)
    return "the engine did not answer within 90 s of its restart"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Networks that tests found kept by the engine's stale endpoint count (docker_helpers.left_behind): under CI,
    as root, the engine is restarted (the only remedy) and they are removed; the session fails if any is left.
    Elsewhere the command that removes them is printed."""
    if hasattr(session.config, "workerinput") or not STALE_NETWORKS_FILE.exists():
        return
    ids = sorted(set(STALE_NETWORKS_FILE.read_text().split()))
    STALE_NETWORKS_FILE.unlink()
    if not ids:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    if not (IN_CI and os.geteuid() == 0):
        say(f"the Docker engine keeps {len(ids)} network(s) with a stale endpoint count (a Docker 20.10 defect): "
            f"restart it, then: docker network rm {' '.join(i[:12] for i in ids)}")
        return
    why = _restart_engine()
    left = []
    for net_id in ids:
        done = subprocess.run(["docker", "network", "rm", net_id], capture_output=True, text=True, timeout=60)
        if done.returncode != 0 and "No such network" not in done.stderr and "not found" not in done.stderr:
            left.append(f"{net_id[:12]}: {done.stderr.strip()}")
    say(f"restarted the Docker engine{f' ({why})' if why else ''} to remove {len(ids)} network(s) its stale "
        f"endpoint count kept: {len(ids) - len(left)} removed" + (f"; LEFT: {left}" if left else ""))
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
