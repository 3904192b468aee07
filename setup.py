"""Build snekbed, with the sans-IO protocol core (node/core) compiled by mypyc where possible.

Everything else is in pyproject.toml; this file only adds the compiled core (docs/compiled-core.md):

* ``pip install .`` and ``pip install -e .`` compile every module of ``node/core`` (except its
  ``__init__``, which picks the core at import) into C extensions next to the ``.py`` files, which
  Python imports in preference to them.
* ``SNEKBED_PURE=1`` at install time skips that: a pure-Python install.
* Without mypyc, without a C compiler, or when compiling fails, the build says so on stderr and installs
  the pure-Python core: the same behaviour, only slower.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CORE = "node/core"
#: interpreted on purpose: it chooses between the compiled and the pure core when node.core is imported
NOT_COMPILED = {"__init__.py"}
#: the shared library holding the compiled modules (the per-module extensions are shims that load it);
#: node/core/__init__.py looks for it as SHARED_LIBRARY
GROUP = "node.core._compiled"
#: node/core/__init__.py's DIGEST_FILE: which sources the extensions were compiled from
DIGEST_FILE = "_compiled.sha256"


def _say(msg: str) -> None:
    print(f"snekbed build: {msg}", file=sys.stderr)


#: setup.py commands that build extensions; the others (egg_info, dist_info, sdist: pip asks for metadata
#: twice before it builds) need no mypyc run, which takes a while
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist_egg"}


def _building() -> bool:
    return any(arg in BUILD_COMMANDS for arg in sys.argv[1:])


def _pure_requested() -> bool:
    return os.environ.get("SNEKBED_PURE", "").strip().lower() not in ("", "0", "no", "false", "off")


def core_sources() -> list[str]:
    """The modules of node/core that mypyc compiles, relative to the project root, sorted."""
    return sorted(f"{CORE}/{p.name}" for p in (ROOT / CORE).glob("*.py") if p.name not in NOT_COMPILED)


def source_digest() -> str:
    """node.core.source_digest() of the sources in this tree (the same bytes, hashed the same way)."""
    h = hashlib.sha256()
    for rel in core_sources():
        path = ROOT / rel
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def remove_compiled(directory: Path) -> None:
    """Delete a compiled core (extensions, digest) from ``directory`` (a node/core), so it cannot be imported."""
    modules = {Path(p).stem for p in core_sources()} | {GROUP.rpartition(".")[2] + "__mypyc"}
    for path in directory.iterdir():
        if path.name == DIGEST_FILE or (path.suffix in (".so", ".pyd") and path.name.split(".")[0] in modules):
            path.unlink()


def compiled_core() -> list[Extension]:
    """mypyc's extensions for node/core, or [] for the pure-Python core (and why, on stderr).

    Going pure also removes a compiled core left in the source tree by an earlier (editable) build.
    """
    extensions = _mypycify()
    if not extensions:
        remove_compiled(ROOT / CORE)
    return extensions


def _mypycify() -> list[Extension]:
    if _pure_requested():
        _say("SNEKBED_PURE is set: installing the pure-Python core")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        _say(f"mypyc is not available ({exc}): installing the pure-Python core")
        return []
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc names modules by their path relative to the current directory
    try:
        return mypycify(["--ignore-missing-imports", *core_sources()], opt_level="3", group_name=GROUP)
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error it cannot compile
        _say(f"mypyc could not compile node/core ({exc!r}): installing the pure-Python core")
        return []
    finally:
        os.chdir(cwd)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure-Python core when the C compiler is missing or fails.

    The compiled modules are all or nothing: after a failure every extension built so far is removed, since
    a shim without its shared library (or the reverse) would not import.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # CCompilerError, DistutilsExecError, DistutilsPlatformError, OSError ...
            _say(f"compiling node/core failed ({exc}): installing the pure-Python core")
            self._discard()
        if not self.extensions:
            return
        # Record what was compiled, next to the shared library (in build/ and, in place, in the tree).
        digest = source_digest() + "\n"
        targets = {Path(self.build_lib) / CORE}
        if self.inplace:
            targets.add(ROOT / CORE)
        for directory in targets:
            if directory.is_dir():
                (directory / DIGEST_FILE).write_text(digest)

    def _discard(self) -> None:
        for directory in (Path(self.build_lib) / CORE, ROOT / CORE):
            if directory.is_dir():
                remove_compiled(directory)
        self.extensions: list[Extension] = []
        self.distribution.ext_modules = []


setup(ext_modules=compiled_core() if _building() else [], cmdclass={"build_ext": OptionalBuildExt})
