"""Build snekbed's reference node: ``node/pinecone``, a Go program on the Pinecone reference's public API.

The reference (github.com/matrix-org/pinecone) is third-party code that snekbed never copies; it is built
from a copy the user supplies, offline, in GOPATH mode (``GO111MODULE=off``) against Debian's Go packages
(:data:`APT_LINE`). Where the copy is, first match wins:

1. the ``pinecone_src`` argument (the ``--pinecone-src DIR`` option of the tools that use this module);
2. the environment variable ``SNEKBED_PINECONE_SRC``;
3. ``../shared/reference`` beside the repository (:data:`DEFAULT_REFERENCE`).

``DIR`` is either a GOPATH tree whose ``src/github.com/matrix-org/pinecone`` holds the reference (what
``../shared/reference`` is: its README lists the dependencies it carries), or a checkout of the reference
itself (``DIR/router/router.go``); a bare checkout takes github.com/Arceliar/phony from the default tree, or
from ``SNEKBED_GOPATH`` (more GOPATH entries, ``os.pathsep``-separated). ``/usr/share/gocode`` (Debian's
packages) is always searched last.

The binary is cached in ``out_dir`` under a name made of a hash of everything it is built from: the Go
sources of every non-standard package it imports (``go list -deps``, ours included) and ``go version``. A
second build of the same sources returns the same file at once. :func:`build_go_program` builds another Go
program of ours on the reference's public API the same way (tests/interop/golden, the golden wire vectors).

    python -m orchestrator.backends.reference [--pinecone-src DIR] [--out DIR]    # prints the binary's path

Imports only the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "APT_LINE",
    "DEFAULT_REFERENCE",
    "PINECONE_SRC_ENV",
    "PROGRAM_DIR",
    "ReferenceSource",
    "ReferenceUnavailable",
    "build_go_program",
    "build_reference_node",
    "default_pinecone_src",
    "locate_reference",
    "main",
    "reference_available",
]

REPO = Path(__file__).resolve().parents[2]
#: the Go program (package main) this module builds
PROGRAM_DIR = REPO / "node" / "pinecone"
#: where the reference is by default: ``../shared/reference`` beside the repository
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"
PINECONE_SRC_ENV = "SNEKBED_PINECONE_SRC"
GOPATH_ENV = "SNEKBED_GOPATH"
DEBIAN_GOPATH = Path("/usr/share/gocode")
#: Debian's Go toolchain and the reference's dependencies it packages (the rest is in the reference's tree)
APT_PACKAGES = ("golang-go", "golang-golang-x-net-dev", "golang-golang-x-sys-dev",
                "golang-github-gorilla-websocket-dev", "golang-go.uber-atomic-dev")  # fmt: skip
APT_LINE = "apt-get install -y --no-install-recommends " + " ".join(APT_PACKAGES)

_IMPORT = Path("github.com", "matrix-org", "pinecone")
_DEPS = {  # import path -> what provides it
    Path("github.com", "Arceliar", "phony"): "the reference's tree (../shared/reference) or SNEKBED_GOPATH",
    Path("go.uber.org", "atomic"): "golang-go.uber-atomic-dev",
    Path("github.com", "gorilla", "websocket"): "golang-github-gorilla-websocket-dev",
    Path("golang.org", "x", "sys", "unix"): "golang-golang-x-sys-dev",
    Path("golang.org", "x", "net", "ipv6"): "golang-golang-x-net-dev",
}
_BUILD_TIMEOUT_S = 600


class ReferenceUnavailable(RuntimeError):
    """The reference node cannot be built here; the message says why and what would fix it."""


@dataclass(frozen=True, slots=True)
class ReferenceSource:
    """Where the reference is: the checkout, the GOPATH entries to build with, and whether the checkout needs a
    ``src/github.com/matrix-org/pinecone`` link in a GOPATH of its own (a bare checkout)."""

    pinecone: Path
    gopath: tuple[Path, ...]
    needs_link: bool


def default_pinecone_src() -> Path:
    """``$SNEKBED_PINECONE_SRC`` when set, else ../shared/reference beside the repository."""
    env = os.environ.get(PINECONE_SRC_ENV, "").strip()
    return Path(env) if env else DEFAULT_REFERENCE


def _is_gopath_tree(p: Path) -> bool:
    return (p / "src" / _IMPORT / "router" / "router.go").is_file()


def locate_reference(pinecone_src: str | os.PathLike[str] | None = None) -> ReferenceSource:
    """Find the reference and its dependencies. Raises ReferenceUnavailable saying what is missing."""
    given = Path(pinecone_src) if pinecone_src is not None else default_pinecone_src()
    p = given.expanduser().resolve()
    extra = [Path(x).resolve() for x in os.environ.get(GOPATH_ENV, "").split(os.pathsep) if x.strip()]
    if _is_gopath_tree(p):
        src = ReferenceSource(p / "src" / _IMPORT, (p, *extra), needs_link=False)
    elif (p / "router" / "router.go").is_file():
        root = p.parents[3] if len(p.parents) > 3 else None
        if root is not None and p == root / "src" / _IMPORT:  # a checkout inside a GOPATH tree
            src = ReferenceSource(p, (root, *extra), needs_link=False)
        else:
            fallback = [DEFAULT_REFERENCE.resolve()] if _is_gopath_tree(DEFAULT_REFERENCE) else []
            src = ReferenceSource(p, (*extra, *fallback), needs_link=True)
    else:
        where = "--pinecone-src" if pinecone_src is not None else (
            PINECONE_SRC_ENV if os.environ.get(PINECONE_SRC_ENV, "").strip() else "the default")
        raise ReferenceUnavailable(
            f"{given} ({where}) is neither a checkout of github.com/matrix-org/pinecone (no router/router.go) nor a "
            f"GOPATH tree holding one (no src/github.com/matrix-org/pinecone); give one with --pinecone-src DIR or "
            f"{PINECONE_SRC_ENV}")
    gopath = (*src.gopath, *([DEBIAN_GOPATH] if DEBIAN_GOPATH.is_dir() else []))
    src = ReferenceSource(src.pinecone, tuple(dict.fromkeys(gopath)), src.needs_link)
    missing = [f"{dep.as_posix()} ({how})" for dep, how in _DEPS.items()
               if not any((g / "src" / dep).is_dir() for g in src.gopath)]  # fmt: skip
    if missing:
        raise ReferenceUnavailable(f"the reference's dependencies are missing from GOPATH "
                                   f"{os.pathsep.join(map(str, src.gopath))}: {', '.join(missing)}; "
                                   f"Debian: {APT_LINE}")
    return src


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ReferenceUnavailable(f"`go` is not installed (Debian: {APT_LINE})")
    return go


def reference_available(pinecone_src: str | os.PathLike[str] | None = None) -> tuple[bool, str]:
    """(True, what will be used) when the reference node can be built here, else (False, why not)."""
    try:
        go = _go()
        src = locate_reference(pinecone_src)
        version = subprocess.run([go, "version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except ReferenceUnavailable as exc:
        return False, str(exc)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`go version` failed: {exc}"
    if not version:
        return False, "`go version` printed nothing"
    return True, f"{version}; the reference at {src.pinecone}"


def _env(src: ReferenceSource, out_dir: Path, link_root: Path | None) -> dict[str, str]:
    gopath = ([link_root] if link_root is not None else []) + list(src.gopath)
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local",
           "GOPATH": os.pathsep.join(map(str, gopath))}
    if not os.environ.get("GOCACHE"):
        env["GOCACHE"] = str(out_dir / ".gocache")
    return env


def _link_root(src: ReferenceSource, out_dir: Path) -> Path | None:
    """A GOPATH of its own for a bare checkout: src/github.com/matrix-org/pinecone -> the checkout."""
    if not src.needs_link:
        return None
    root = out_dir / f".gopath-{hashlib.sha256(str(src.pinecone).encode()).hexdigest()[:12]}"
    link = root / "src" / _IMPORT
    if not (link.is_symlink() and link.resolve() == src.pinecone):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".pinecone-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(src.pinecone, target_is_directory=True)
        os.replace(tmp, link)
    return root


def _run(cmd: list[str], env: dict[str, str], what: str, cwd: Path = PROGRAM_DIR) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReferenceUnavailable(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        raise ReferenceUnavailable(f"{what} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-4000:]}")
    return proc.stdout


def _reference_version(src: ReferenceSource, packages: list[tuple[str, Path, list[str]]]) -> str:
    """The reference's git commit when it is a checkout, else ``src-`` and a hash of its Go sources."""
    git = shutil.which("git")
    if git is not None:
        try:
            proc = subprocess.run([git, "-C", str(src.pinecone), "rev-parse", "--short=12", "HEAD"],
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
            top = subprocess.run([git, "-C", str(src.pinecone), "rev-parse", "--show-toplevel"],
                                 capture_output=True, text=True, timeout=30)  # fmt: skip
            if proc.returncode == 0 and top.returncode == 0 and Path(top.stdout.strip()).resolve() == src.pinecone:
                return proc.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    h = hashlib.sha256()
    for path, d, files in packages:
        if path.startswith(_IMPORT.as_posix()):
            for f in files:
                h.update(f"{path}/{f}\0".encode() + (d / f).read_bytes())
    return "src-" + h.hexdigest()[:12]


def build_reference_node(out_dir: str | os.PathLike[str], pinecone_src: str | os.PathLike[str] | None = None) -> Path:
    """Build node/pinecone against the reference (see the module doc for where it is looked for) into ``out_dir``;
    return the binary. Cached by a hash of its sources and ``go version``. Raises ReferenceUnavailable."""
    go = _go()
    src = locate_reference(pinecone_src)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = _env(src, out, _link_root(src, out))
    version = _run([go, "version"], env, "go version").strip()
    listing = _run([go, "list", "-deps", "-f",
                    '{{if not .Standard}}{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles " "}}{{end}}', "."],
                   env, "go list")  # fmt: skip
    packages = []
    for line in filter(None, listing.splitlines()):
        path, d, files = line.split("\t")
        packages.append((path, Path(d), sorted(files.split())))
    h = hashlib.sha256(f"{version}\0CGO_ENABLED=0\0".encode())
    for path, d, files in sorted(packages, key=lambda x: x[0]):
        if path.startswith("_"):  # our own package, named by its directory in GOPATH mode
            path = "snekbed/node/pinecone"
        for f in files:
            h.update(f"{path}/{f}\0".encode())
            h.update((d / f).read_bytes())
    binary = out / f"pinecone-node-{h.hexdigest()[:16]}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    ref = _reference_version(src, packages)
    tmp = out / f".pinecone-node-{os.getpid()}.tmp"
    _run([go, "build", "-trimpath", "-ldflags", f"-X main.referenceVersion={ref}", "-o", str(tmp), "."],
         env, "go build")  # fmt: skip
    os.replace(tmp, binary)
    return binary


def build_go_program(src_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                     pinecone_src: str | os.PathLike[str] | None = None) -> Path:
    """Build another Go ``package main`` of ours on the reference's public API (``src_dir``, e.g.
    tests/interop/golden) as :func:`build_reference_node` builds node/pinecone: offline, GOPATH mode, the same
    reference and dependencies. The binary, ``out_dir/<dir name>-<hash>``, is cached by a hash of every
    non-standard Go source it is built from and ``go version``. Raises ReferenceUnavailable."""
    go = _go()
    src = locate_reference(pinecone_src)
    program = Path(src_dir).resolve()
    if not any(program.glob("*.go")):
        raise ReferenceUnavailable(f"{program} holds no Go source")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = _env(src, out, _link_root(src, out))
    version = _run([go, "version"], env, "go version", program).strip()
    listing = _run([go, "list", "-deps", "-f",
                    '{{if not .Standard}}{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles " "}}{{end}}', "."],
                   env, "go list", program)  # fmt: skip
    h = hashlib.sha256(f"{version}\0CGO_ENABLED=0\0".encode())
    for line in sorted(filter(None, listing.splitlines())):
        path, d, files = line.split("\t")
        if path.startswith("_"):  # our own package, named by its directory in GOPATH mode
            path = f"snekbed/{program.name}"
        for f in sorted(files.split()):
            h.update(f"{path}/{f}\0".encode())
            h.update((Path(d) / f).read_bytes())
    binary = out / f"{program.name}-{h.hexdigest()[:16]}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    tmp = out / f".{program.name}-{os.getpid()}.tmp"
    _run([go, "build", "-trimpath", "-o", str(tmp), "."], env, "go build", program)
    os.replace(tmp, binary)
    return binary


def main(argv: list[str] | None = None) -> int:
    """Build the reference node and print its path (exit 0), or say why it cannot be built (exit 1)."""
    p = argparse.ArgumentParser(prog="python -m orchestrator.backends.reference", description=main.__doc__)
    p.add_argument("--pinecone-src", type=Path, default=None,
                   help=f"the reference: a checkout or a GOPATH tree [${PINECONE_SRC_ENV}, else {DEFAULT_REFERENCE}]")
    p.add_argument("--out", type=Path, default=REPO / "build" / "reference-node", help="where the binary goes")
    a = p.parse_args(argv)
    try:
        print(build_reference_node(a.out, a.pinecone_src))
    except ReferenceUnavailable as exc:
        print(f"cannot build the reference node: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
