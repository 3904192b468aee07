"""Shared by the Docker backend and compose tests: the node image they run, and label counts.

The image is built from the working tree (cached by input hash, so usually a no-op);
``SNEKBED_TEST_IMAGE`` names a ready image instead (e.g. one built from a known-good tree
while others edit a shared checkout).
"""

from __future__ import annotations

import os


def build_test_image(client: object) -> str:
    """Build (or reuse) the node image for the tests; return its tag. Also tags snekbed-node:latest."""
    from orchestrator.image import build_node_image

    if tag := os.environ.get("SNEKBED_TEST_IMAGE"):
        return tag
    return build_node_image(client).tag  # type: ignore[arg-type]


def labelled(client: object, label: str) -> tuple[int, int]:
    """(containers, networks) carrying ``label`` (``key=value`` or ``key``)."""
    api = client.api  # type: ignore[attr-defined]
    return (len(api.containers(all=True, filters={"label": label})), len(api.networks(filters={"label": label})))
