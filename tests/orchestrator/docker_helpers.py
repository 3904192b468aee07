"""Shared by the Docker backend and compose tests: the node image they run, and label counts.

The image is built from the working tree (cached by input hash, so usually a no-op);
``SNEKBED_TEST_IMAGE`` names a ready image instead (e.g. one built from a known-good tree
while others edit a shared checkout).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.docker_net import STALE_COUNT


def build_test_image(client: object) -> str:
    """Build (or reuse) the node image for the tests; return its tag. Also tags snekbed-node:latest."""
    from orchestrator.backends.image import build_node_image

    if tag := os.environ.get("SNEKBED_TEST_IMAGE"):
        return tag
    return build_node_image(client).tag  # type: ignore[arg-type]


def labelled(client: object, label: str) -> tuple[int, int]:
    """(containers, networks) carrying ``label`` (``key=value`` or ``key``)."""
    api = client.api  # type: ignore[attr-defined]
    return (len(api.containers(all=True, filters={"label": label})), len(api.networks(filters={"label": label})))


#: Networks the engine would not remove although none is attached (docker_net: a stale endpoint count, a Docker 20.10
#: defect only an engine restart clears), one id per line, from every xdist worker: tests/conftest.py restarts the
#: engine at the end of a CI session and removes them, and fails the session if that does not work.
STALE_NETWORKS_FILE = Path(os.environ.get("TMPDIR", "/tmp")) / "snekbed-tests-stale-networks.txt"


def left_behind(client: object, run_id: str) -> str:
    """'' when nothing labelled ``snekbed.run=<run_id>`` is left; else what was left, described (each network with
    the containers the engine still lists on it, and what a removal then reported), after removing it: a failing
    test leaves nothing behind either. Tests call it in ``finally`` and assert on it after the ``try`` block, so a
    leftover never hides the failure that caused it.

    The one thing it lets pass is a network that a fresh removal still cannot remove while the engine lists nothing
    on it and says it "has active endpoints" (``remove_networks`` names that a stale count): that is the engine's
    defect, not a leftover of the code under test. Its id goes to STALE_NETWORKS_FILE for the session's end."""
    label = f"snekbed.run={run_id}"
    api = client.api  # type: ignore[attr-defined]
    containers = api.containers(all=True, filters={"label": label})
    networks = api.networks(filters={"label": label})
    if not containers and not networks:
        return ""
    found = [f"container {'/'.join(c.get('Names') or [c['Id'][:12]])} ({c.get('State')})" for c in containers]
    for net in networks:
        attached = sorted((api.inspect_network(net["Id"]).get("Containers") or {}).values(), key=str)
        found.append(f"network {net['Name']} with {[a.get('Name') for a in attached]} attached")
    report = DockerBackend(client).down(run_id)  # type: ignore[arg-type]
    stale = [n for n in api.networks(filters={"label": label}) if any(
        STALE_COUNT in e and n["Name"] in e for e in report.errors)]  # fmt: skip
    if containers or len(stale) != report.networks_left or len(stale) != len(networks):
        return (f"left behind by run {run_id}: {'; '.join(found)}; removing them then left "
                f"{report.containers_left} container(s) and {report.networks_left} network(s), errors: {report.errors}")
    with STALE_NETWORKS_FILE.open("a") as f:
        f.writelines(f"{n['Id']}\n" for n in stale)
    warnings.warn(f"run {run_id}: the engine kept {len(stale)} network(s) with a stale endpoint count "
                  f"({', '.join(n['Name'] for n in stale)}); removed at the end of the session", stacklevel=2)
    return ""
