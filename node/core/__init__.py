"""The sans-IO protocol core, compiled by mypyc where the install could, pure Python otherwise.

``pip install`` (setup.py) compiles every other module of this package with mypyc into C extensions that
sit next to the ``.py`` files; Python imports an extension in preference to its source. This module is
never compiled: it runs first on any ``import node.core.<module>`` and decides, once per process, which
core the process runs (docs/compiled-core.md):

* the compiled core when its extensions are there and were built from the ``.py`` files as they are now
  (the build records a digest of them in ``_compiled.sha256``);
* the pure-Python core when there are none (``SNEKBED_PURE=1`` at install, no mypyc or no C compiler),
  when ``SNEKBED_PURE_CORE=1`` is set (for comparisons), or when a ``.py`` file changed since the build
  (a warning says to reinstall): an import hook then loads the ``.py`` files.

Both run the same code with the same results; :func:`implementation` says which one this process runs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "DIGEST_FILE", "PURE_CORE_ENV", "SHARED_LIBRARY", "STALE", "implementation", "source_digest"]

#: set to 1 (or true/yes/on) to run the pure-Python core although the compiled one is installed
PURE_CORE_ENV = "SNEKBED_PURE_CORE"
#: the compiled modules' shared library (setup.py's GROUP); each module's own extension is a shim loading it
SHARED_LIBRARY = "_compiled__mypyc"
#: written by the build next to the extensions: :func:`source_digest` of the sources they were compiled from
DIGEST_FILE = "_compiled.sha256"

_HERE = Path(__file__).resolve().parent


def source_digest(directory: Path = _HERE) -> str:
    """SHA-256 over the name and bytes of every module of the core that mypyc compiles (all but this one).

    setup.py computes the same at build time.
    """
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.py")):
        if path.name != "__init__.py":
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the core's modules from their ``.py`` files, whatever extensions sit beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__:
            return None
        source = _HERE / f"{name}.py"
        return importlib.util.spec_from_file_location(fullname, source) if source.is_file() else None


def _installed() -> bool:
    return any((_HERE / (SHARED_LIBRARY + suffix)).is_file() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _stale() -> bool:
    """Compiled extensions are installed, but not from the ``.py`` files as they are now."""
    if not _installed():
        return False
    try:
        built_from = (_HERE / DIGEST_FILE).read_text().strip()
    except OSError:
        built_from = "(no digest)"
    return built_from != source_digest()


def _choose() -> bool:
    """True for the compiled core; otherwise install the import hook (when extensions are there) and say why."""
    if not _installed():
        return False
    if STALE:
        warnings.warn(f"node/core was compiled from other sources than its .py files now ({DIGEST_FILE} differs): "
                      "running the pure-Python core; reinstall (pip install -e .) to compile it again",
                      RuntimeWarning, stacklevel=2)  # fmt: skip
    elif os.environ.get(PURE_CORE_ENV, "").strip().lower() not in ("1", "true", "yes", "on"):
        return True
    sys.meta_path.insert(0, _SourceFinder())
    return False


#: compiled extensions are installed but were built from other sources (``pip install -e .`` compiles again)
STALE = _stale()
#: whether this process runs the compiled core (decided once, when node.core is first imported)
COMPILED = _choose()


def implementation() -> str:
    """``"compiled (mypyc)"`` or ``"pure Python"``: the core this process runs."""
    return "compiled (mypyc)" if COMPILED else "pure Python"
