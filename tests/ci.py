"""What "in CI" means, defined once for the whole suite.

``CI`` set to ``1``, ``true`` or ``yes`` (any case) means CI; anything else, or unset, does not.
Under CI a test that needs Docker, Java, pyspark, Prometheus or the reference material never
skips or xfails: ``need(...)`` turns the missing component into a failure that names it.
The reference material (``shared/``) is found next to the checkout, or where
``SNEKBED_SHARED`` points (a git worktree lives elsewhere).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

CI_VALUES = ("1", "true", "yes")
REPO = Path(__file__).resolve().parents[1]


def in_ci(value: str | None) -> bool:
    """True when an environment value of ``CI`` means CI."""
    return (value or "").strip().lower() in CI_VALUES


IN_CI = in_ci(os.environ.get("CI"))
SHARED = Path(os.environ.get("SNEKBED_SHARED") or REPO.parent / "shared")


def need(ok: bool, why: str) -> None:
    """Skip (laptop) or fail (CI) when a required component is missing."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"CI={os.environ.get('CI')} and a required component is missing: {why}")
    pytest.skip(why)


def need_module(name: str, why: str) -> ModuleType:
    """Import an optional module, or ``need`` it (skip on a laptop, fail in CI): importorskip that never skips in CI."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        need(False, f"{why} ({exc.__class__.__name__}: {exc})")
        raise  # unreachable: need() raised
