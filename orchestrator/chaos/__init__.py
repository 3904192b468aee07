"""Chaos: scenario files, the checker, target roles, the runner and its backends (in process, Docker).

``snekbed chaos`` is :mod:`orchestrator.cli.chaos`; docs/chaos.md is the user's guide.
"""
