"""Kernel fixtures (network namespaces) for the netem tests."""

from tests.netns_fixtures import kernel_tools, netns, nsrun  # noqa: F401  (pytest finds fixtures imported here)
