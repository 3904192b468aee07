"""What goes into the node image, and its identity: the project's source files and runtime dependencies as a
wheelhouse (built on the host: RUN steps cannot reach PyPI over HTTPS), and the hashes that say when an image
or a cached wheel directory is out of date. No Docker here.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from orchestrator.backends.image_common import (
    ImageError,
    Progress,
    WheelhouseError,
    ensure_dir,
    no_progress,
    run_streaming,
)

__all__ = ["PROJECT_ROOT", "WHEEL_PLATFORM", "sha256_file", "hash_fields", "compute_inputs_hash",
           "project_source_files", "copy_project_sources", "hash_project_sources", "runtime_dependencies",
           "download_dependency_wheels", "build_project_wheel", "build_wheelhouse", "cached_wheels"]

WHEEL_PLATFORM = f"manylinux2014_{platform.machine()}"  # the image runs on the host's architecture
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("contract", "node", "orchestrator", "netem", "pipeline")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes. Raises OSError."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def hash_fields(kind: str, fields: Iterable[tuple[str, str]]) -> str:
    digest = hashlib.sha256(kind.encode() + b"\0")
    for key, value in fields:
        digest.update(f"{key}\0{value}\n".encode())
    return digest.hexdigest()


def compute_inputs_hash(*, dockerfile: bytes, base: str, base_id: str,
                        dependency_wheels: Mapping[str, str], project_source_hash: str) -> str:
    """Hash of every input of the node image; the image is rebuilt when it changes.

    `dependency_wheels` maps wheel file name -> sha256; order does not matter.
    """
    fields = [("dockerfile", hashlib.sha256(dockerfile).hexdigest()), ("base", base), ("base_id", base_id),
              ("project", project_source_hash)]
    fields += [(f"wheel:{name}", digest) for name, digest in sorted(dependency_wheels.items())]
    return hash_fields("snekbed-node", fields)


def project_source_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """Files that go into the project wheel, relative to `root`, sorted.

    pyproject.toml, setup.py (it compiles the protocol core with mypyc, so the wheel and the image
    carry the compiled core: docs/compiled-core.md) and README.md where present, plus everything under
    the packages, except caches, hidden files and build outputs (a compiled core's extensions and
    digest in an editable checkout). Raises ImageError if `root` has no pyproject.toml.
    """
    if not (root / "pyproject.toml").is_file():
        raise ImageError(f"no pyproject.toml in {root}: snekbed image build needs the project source tree")
    files = [Path(name) for name in ("pyproject.toml", "setup.py", "README.md") if (root / name).is_file()]
    for package in PROJECT_PACKAGES:
        for path in (root / package).rglob("*"):
            rel = path.relative_to(root)
            hidden = any(part.startswith(".") or part == "__pycache__" for part in rel.parts)
            built = path.suffix in (".pyc", ".pyo", ".so", ".pyd") or path.name == "_compiled.sha256"
            if not hidden and path.is_file() and not built:
                files.append(rel)
    return sorted(files)


def copy_project_sources(root: Path, dest: Path) -> None:
    """Copy the :func:`project_source_files` of `root` into `dest`. Raises ImageError, OSError."""
    for rel in project_source_files(root):
        shutil.copy2(root / rel, ensure_dir((dest / rel).parent) / rel.name)


def hash_project_sources(root: Path = PROJECT_ROOT) -> str:
    """Hash of the project's source files (names and contents), and of whether the build is asked for the
    pure-Python core (``SNEKBED_PURE``: the same sources make another wheel). Raises ImageError."""
    pure = os.environ.get("SNEKBED_PURE", "").strip().lower() not in ("", "0", "no", "false", "off")
    return hash_fields("snekbed-src", [*((str(rel), sha256_file(root / rel)) for rel in project_source_files(root)),
                                        ("core", "pure" if pure else "compiled")])


def runtime_dependencies(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """The base ``[project].dependencies`` (no extras): what the node needs at run time.

    Raises ImageError if the file is missing or has no such list.
    """
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ImageError(f"cannot read {pyproject}: {exc}") from exc
    deps = data.get("project", {}).get("dependencies")
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ImageError(f"{pyproject}: [project].dependencies must be a list of strings")
    return list(deps)


def download_dependency_wheels(dest: Path, requirements: Iterable[str], *,
                               progress: Progress | None = None) -> list[Path]:
    """Download binary cp311 wheels of `requirements` (and their deps) into `dest`. Raises WheelhouseError."""
    progress = progress or no_progress
    progress(f"downloading dependency wheels into {dest}")
    argv = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", "3.11",
            "--implementation", "cp", "--abi", "cp311", "--platform", WHEEL_PLATFORM, "-d", str(ensure_dir(dest)),
            *requirements]
    run_streaming(argv, progress, WheelhouseError)
    return sorted(dest.glob("*.whl"))


def build_project_wheel(dest: Path, root: Path = PROJECT_ROOT, *, progress: Progress | None = None) -> Path:
    """``pip wheel --no-deps`` of a copy of the project's source files into `dest`.

    Building from a copy keeps build/ and egg-info out of the shared checkout.
    Raises ImageError, WheelhouseError.
    """
    progress = progress or no_progress
    progress(f"building the snekbed wheel into {dest}")
    with tempfile.TemporaryDirectory(prefix="snekbed-src-") as tmp:
        copy_project_sources(root, Path(tmp))
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(ensure_dir(dest)), tmp]
        run_streaming(argv, progress, WheelhouseError)
    wheels = sorted(dest.glob("snekbed-*.whl"))
    if not wheels:
        raise WheelhouseError(argv, 0, f"pip wheel wrote no snekbed wheel into {dest}")
    return wheels[-1]


def build_wheelhouse(dest: Path, *, root: Path = PROJECT_ROOT, progress: Progress | None = None) -> list[Path]:
    """Build the node's wheelhouse in `dest`: ``deps/`` (runtime deps) and ``project/``.

    Only the base ``[project].dependencies`` are included, not the docker, pipeline or
    test extras. Returns every wheel written. Raises ImageError, WheelhouseError.
    """
    deps = download_dependency_wheels(dest / "deps", runtime_dependencies(root / "pyproject.toml"), progress=progress)
    return [*deps, build_project_wheel(dest / "project", root, progress=progress)]


def cached_wheels(dest: Path, fill: Callable[[Path], object], *, refresh: bool, keep: int = 5) -> list[Path]:
    """The wheels in `dest`, made once by `fill(dest)` (again if `refresh`); the newest `keep`
    sibling dirs of the same kind are kept. Raises what `fill` raises."""
    if refresh or not (dest / ".complete").exists():
        shutil.rmtree(dest, ignore_errors=True)
        fill(dest)
        (dest / ".complete").touch()
        kind = dest.name.partition("-")[0]
        for old in sorted(dest.parent.glob(f"{kind}-*"), key=lambda p: p.stat().st_mtime)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return sorted(dest.glob("*.whl"))
