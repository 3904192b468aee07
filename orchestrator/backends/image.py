"""Build the snek node image without a registry: ``snekbed image build``.

The node image is ``compose/Dockerfile`` on top of a base that has Python 3.11:
``python:3.11-slim-bookworm`` where Docker can pull it, otherwise an offline Debian
base made here with debootstrap and ``docker import``. Python packages come from a
wheelhouse built on the host (RUN steps cannot reach PyPI over HTTPS), and the build
context is a temp dir holding only the Dockerfile and that wheelhouse.

Everything is cached. The offline base is tagged by a hash of its package list and
suite; dependency wheels are kept per requirement list; the project wheel per hash of
the project's source files (wheel bytes are not reproducible); and the node image is
tagged ``snekbed-node:<hash12>`` of all of those, so it is rebuilt only when one changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import docker
import docker.errors
import requests

__all__ = ["BASE_IMAGE", "NODE_REPOSITORY", "NODE_ADMIN_PORT", "NODE_METRICS_PORT", "NODE_PEER_PORT",
           "ImageError", "CommandError", "BaseImageError", "WheelhouseError", "ImageBuildError", "ImageInfo",
           "registry_reachable", "resolve_base", "build_offline_base", "build_wheelhouse", "build_node_image",
           "compute_inputs_hash", "build_prometheus_image", "PROMETHEUS_REPOSITORY", "hash_project_sources", "base_inputs_hash", "runtime_dependencies",
           "node_container_options", "default_cache_dir", "image"]

BASE_IMAGE = "python:3.11-slim-bookworm"
NODE_REPOSITORY = "snekbed-node"
BASE_REPOSITORY = "snekbed-base"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "iproute2", "iptables", "ca-certificates", "procps", "ethtool")
_BASE_RECIPE = "minbase-trim-v1"  # bump when the trimming below changes, so cached bases are rebuilt
_TRIM_GLOBS = ("usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "usr/share/lintian/*",
               "var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/log/*",
               "var/cache/debconf/*-old", "etc/resolv.conf", "etc/hostname")

# Ports of `snekbed node` (its CLI owns the real defaults; the Dockerfile labels repeat them).
NODE_ADMIN_PORT = 8080
NODE_METRICS_PORT = 9100
NODE_PEER_PORT = 7000

LABEL_IMAGE = "snekbed.image"
LABEL_INPUTS = "snekbed.inputs"
REGISTRY_CHECK_TIMEOUT_S = 3.0
WHEEL_PLATFORM = f"manylinux2014_{platform.machine()}"  # the image runs on the host's architecture
KEEP_NODE_IMAGES = 3  # per repository, counting the new one; older ones are untagged after a rebuild
PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOCK_DIR = Path(tempfile.gettempdir()) / "snekbed-locks"  # host-wide, so builds with any cache dir take turns
DOCKERFILE = PROJECT_ROOT / "compose" / "Dockerfile"
PROJECT_PACKAGES = ("contract", "node", "orchestrator", "netem", "pipeline")

Progress = Callable[[str], None]


class ImageError(Exception):
    """Base: the node image or one of its inputs could not be made."""


class CommandError(ImageError):
    """A host command (pip, debootstrap, tar) failed; `output` holds what it printed."""

    def __init__(self, argv: list[str], returncode: int, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"{' '.join(argv[:4])} ... exited {returncode}:\n{tail}")
        self.argv, self.returncode, self.output = argv, returncode, output


class BaseImageError(ImageError):
    """The base image could not be found, pulled or built."""


class BaseCommandError(CommandError, BaseImageError):
    """debootstrap or tar failed while building the offline base."""


class WheelhouseError(CommandError):
    """pip failed while building the wheelhouse."""


class ImageBuildError(ImageError):
    """`docker build` of the node image failed; `log` holds the build output."""

    def __init__(self, tag: str, message: str, log: list[str]) -> None:
        super().__init__(f"building {tag} failed: {message.strip()}\n{''.join(log[-15:]).rstrip()}")
        self.tag, self.message, self.log = tag, message, log


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """The result of :func:`build_node_image`."""

    tag: str
    id: str
    base: str
    rebuilt: bool
    inputs_hash: str
    base_reason: str = ""
    size_bytes: int = 0


def _noop(_: str) -> None:
    """The default progress callback."""


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_cache_dir() -> Path:
    """``$SNEKBED_CACHE_DIR``, else ``$XDG_CACHE_HOME/snekbed``, else ``~/.cache/snekbed``."""
    if env := os.environ.get("SNEKBED_CACHE_DIR"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snekbed"


def node_container_options(*, kernel_shaping: bool) -> dict[str, object]:
    """Docker SDK ``containers.run``/``create`` options every node container needs.

    ``init`` always (so SIGTERM stops the node at once); NET_ADMIN only when the kernel
    shaping backend runs tc/iptables inside the container.
    """
    return {"init": True, "cap_add": ["NET_ADMIN"]} if kernel_shaping else {"init": True}


@contextlib.contextmanager
def _file_lock(name: str, lock_dir: Path | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `name` in `lock_dir` (default: host-wide, whatever the cache dir)."""
    with open(_mkdir(lock_dir or LOCK_DIR) / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def _run_streaming(argv: list[str], progress: Progress, error: type[CommandError]) -> str:
    """Run `argv`, passing each output line to `progress`; return the output. Raises `error`.

    The child runs in its own process group (debootstrap and pip start children of their own): when
    anything interrupts us (Ctrl-C, an exception from `progress`), the whole group is terminated
    (SIGTERM, then SIGKILL after GROUP_KILL_GRACE_S) before the exception propagates.
    """
    lines: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, start_new_session=True)
    except OSError as exc:
        raise error(argv, -1, str(exc)) from exc
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            progress(line.rstrip())
        proc.wait()
    except BaseException:
        kill_process_group(proc)
        raise
    finally:
        proc.stdout.close()
    if proc.returncode != 0:
        raise error(argv, proc.returncode, "".join(lines))
    return "".join(lines)


GROUP_KILL_GRACE_S = 5.0


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after GROUP_KILL_GRACE_S; reap ``proc``."""
    for sig, wait_s in ((signal.SIGTERM, GROUP_KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + (wait_s or 0.0)
        while group_running(proc.pid) and time.monotonic() < deadline:  # the leader is gone; its children?
            time.sleep(0.05)
        if not group_running(proc.pid):
            return


def group_running(pgid: int) -> list[int]:
    """Pids of the processes in group ``pgid`` that still run (zombies waiting for a reaper do not)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


# ---------------------------------------------------------------- input hashing


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes. Raises OSError."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _hash_fields(kind: str, fields: Iterable[tuple[str, str]]) -> str:
    digest = hashlib.sha256(kind.encode() + b"\0")
    for key, value in fields:
        digest.update(f"{key}\0{value}\n".encode())
    return digest.hexdigest()


def base_inputs_hash(packages: Iterable[str] = BASE_PACKAGES, suite: str = DEBIAN_SUITE, *,
                     arch: str | None = None) -> str:
    """Hash of what the offline base is made from (package set, suite, arch, recipe)."""
    fields = [("suite", suite), ("arch", arch or platform.machine()), ("recipe", _BASE_RECIPE)]
    return _hash_fields("snekbed-base", fields + [("package", name) for name in sorted(set(packages))])


def compute_inputs_hash(*, dockerfile: bytes, base: str, base_id: str,
                        dependency_wheels: Mapping[str, str], project_source_hash: str) -> str:
    """Hash of every input of the node image; the image is rebuilt when it changes.

    `dependency_wheels` maps wheel file name -> sha256; order does not matter.
    """
    fields = [("dockerfile", hashlib.sha256(dockerfile).hexdigest()), ("base", base), ("base_id", base_id),
              ("project", project_source_hash)]
    fields += [(f"wheel:{name}", digest) for name, digest in sorted(dependency_wheels.items())]
    return _hash_fields("snekbed-node", fields)


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
        shutil.copy2(root / rel, _mkdir((dest / rel).parent) / rel.name)


def hash_project_sources(root: Path = PROJECT_ROOT) -> str:
    """Hash of the project's source files (names and contents), and of whether the build is asked for the
    pure-Python core (``SNEKBED_PURE``: the same sources make another wheel). Raises ImageError."""
    pure = os.environ.get("SNEKBED_PURE", "").strip().lower() not in ("", "0", "no", "false", "off")
    return _hash_fields("snekbed-src", [*((str(rel), sha256_file(root / rel)) for rel in project_source_files(root)),
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


# ---------------------------------------------------------------- base image


def registry_reachable(client: docker.DockerClient, image: str = BASE_IMAGE, *,
                       timeout_s: float = REGISTRY_CHECK_TIMEOUT_S) -> bool:
    """Whether the engine can reach the registry holding `image` (a manifest lookup, no pull).

    Never raises for engine or registry errors; gives up after `timeout_s`.
    """
    saved, client.api.timeout = client.api.timeout, timeout_s
    try:
        client.api.inspect_distribution(image)
        return True
    except (docker.errors.DockerException, requests.RequestException):
        return False
    finally:
        client.api.timeout = saved


def _image_exists(client: docker.DockerClient, name: str) -> docker.models.images.Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def _unmount_below(root: Path) -> None:
    """Lazily unmount anything a failed debootstrap left mounted under `root`."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as mounts:
        targets = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def offline_base_tag(packages: Iterable[str] = BASE_PACKAGES, suite: str = DEBIAN_SUITE) -> str:
    """``snekbed-base:<suite>-<hash12>``: the tag :func:`build_offline_base` gives these inputs."""
    return f"{BASE_REPOSITORY}:{suite}-{base_inputs_hash(packages, suite)[:12]}"


def build_offline_base(client: docker.DockerClient, *, cache_dir: Path | None = None,
                       progress: Progress | None = None, mirror: str | None = None,
                       packages: Iterable[str] = BASE_PACKAGES, suite: str = DEBIAN_SUITE) -> str:
    """Build (once) a trimmed Debian `suite` base with python3 and the shaping tools; return its tag.

    The tag is :func:`offline_base_tag`; nothing is built if it exists. The mirror
    defaults to ``$SNEKBED_DEBIAN_MIRROR`` or deb.debian.org (plain HTTP).

    Raises BaseImageError if not root or debootstrap is missing; BaseCommandError if
    debootstrap or tar fails.
    """
    progress, packages = progress or _noop, tuple(sorted(set(packages)))
    tag = offline_base_tag(packages, suite)
    if _image_exists(client, tag):
        return tag
    if os.geteuid() != 0:
        raise BaseImageError(f"building the offline base {tag} needs root (debootstrap); run as root or pass --base")
    if shutil.which("debootstrap") is None:
        raise BaseImageError(f"building the offline base {tag} needs debootstrap: apt-get install -y debootstrap")
    cache_dir = cache_dir or default_cache_dir()
    with _file_lock(f"base-{tag.rpartition('-')[2]}.lock"):
        if _image_exists(client, tag):  # another process built it while we waited
            return tag
        work = Path(tempfile.mkdtemp(prefix="base-", dir=_mkdir(cache_dir / "tmp")))
        rootfs, tarball = work / "rootfs", work / "rootfs.tar"
        try:
            progress(f"debootstrap {suite} ({len(packages)} packages) into {rootfs}")
            _run_streaming(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite,
                            str(rootfs), mirror or os.environ.get("SNEKBED_DEBIAN_MIRROR", DEBIAN_MIRROR)],
                           progress, BaseCommandError)
            _unmount_below(rootfs)
            for pattern in _TRIM_GLOBS:
                for path in rootfs.glob(pattern):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            progress(f"docker import {tag}")
            _run_streaming(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
                           progress, BaseCommandError)
            changes = ["ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]',
                       "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                       f"LABEL {LABEL_IMAGE}=base {LABEL_INPUTS}={base_inputs_hash(packages, suite)}"]
            repository, _, version = tag.partition(":")
            try:
                client.api.import_image_from_file(str(tarball), repository=repository, tag=version, changes=changes)
            except docker.errors.APIError as exc:
                raise BaseImageError(f"docker import of {tag} failed: {exc}") from exc
        finally:
            _unmount_below(rootfs)
            shutil.rmtree(work, ignore_errors=True)
        if not _image_exists(client, tag):
            raise BaseImageError(f"docker import reported success but {tag} does not exist")
    return tag


def resolve_base(client: docker.DockerClient, base: str | None = None, *, cache_dir: Path | None = None,
                 progress: Progress | None = None) -> tuple[str, str]:
    """Pick the base image; return ``(tag, reason)``.

    An explicit `base` must exist locally or be pullable. Otherwise BASE_IMAGE is used
    if present or pullable, else the offline base is built (or reused). Raises BaseImageError.
    """
    progress = progress or _noop
    if base is not None:
        if _image_exists(client, base):
            return base, f"--base {base} (present locally)"
        try:
            client.images.pull(base)
        except docker.errors.APIError as exc:
            raise BaseImageError(f"base image {base} is not present locally and cannot be pulled: "
                                 f"{exc.explanation or exc}") from exc
        return base, f"--base {base} (pulled)"
    if _image_exists(client, BASE_IMAGE):
        return BASE_IMAGE, f"{BASE_IMAGE} present locally"
    if registry_reachable(client, BASE_IMAGE):
        progress(f"pulling {BASE_IMAGE}")
        try:
            client.images.pull(BASE_IMAGE)
            return BASE_IMAGE, f"registry reachable: pulled {BASE_IMAGE}"
        except docker.errors.APIError as exc:
            progress(f"pull of {BASE_IMAGE} failed ({exc.explanation or exc}); building the offline base")
    verb = "using cached offline base" if _image_exists(client, offline_base_tag()) else "built offline base"
    tag = build_offline_base(client, cache_dir=cache_dir, progress=progress)
    return tag, f"registry unreachable: {verb} {tag}"


# ---------------------------------------------------------------- Prometheus

PROMETHEUS_REPOSITORY = "snekbed-prometheus"
PROMETHEUS_PACKAGES = ("prometheus", "ca-certificates")
_PROMETHEUS_DOCKERFILE = """\
FROM {base}
LABEL org.opencontainers.image.title="snekbed-prometheus" \\
      org.opencontainers.image.description="Prometheus from Debian's package, for snekbed runs (no registry needed)" \\
      snekbed.image="prometheus" \\
      snekbed.base="{base}" \\
      snekbed.inputs="{inputs}"
RUN mkdir -p /prometheus /etc/snekbed
EXPOSE 9090
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/snekbed/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
"""


def build_prometheus_image(client: docker.DockerClient, *, cache_dir: Path | None = None,
                           progress: Progress | None = None, mirror: str | None = None) -> str:
    """``snekbed-prometheus:<hash12>`` (and ``:latest``): Debian's ``prometheus`` on the offline base; its tag.

    No registry involved: debootstrap installs the package from the Debian mirror, ``docker import``
    makes the base, and a one-step build adds the entrypoint and labels. Cached by the same input hash
    as the base. Raises BaseImageError / ImageBuildError.
    """
    progress = progress or _noop
    base = build_offline_base(client, cache_dir=cache_dir, progress=progress, mirror=mirror,
                              packages=PROMETHEUS_PACKAGES)
    inputs = _hash_fields("prometheus", [("base", base), ("dockerfile", _PROMETHEUS_DOCKERFILE)])
    tag = f"{PROMETHEUS_REPOSITORY}:{inputs[:12]}"
    if _image_exists(client, tag) is None:
        progress(f"building {tag} on {base}")
        text = _PROMETHEUS_DOCKERFILE.format(base=base, inputs=inputs)
        with tempfile.TemporaryDirectory(prefix="prom-") as ctx:
            (Path(ctx) / "Dockerfile").write_text(text)
            try:
                client.images.build(path=ctx, tag=tag, rm=True, forcerm=True)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                raise ImageBuildError(f"building {tag} failed: {exc}") from exc
    client.api.tag(tag, PROMETHEUS_REPOSITORY, "latest")
    return tag


# ---------------------------------------------------------------- wheelhouse


def download_dependency_wheels(dest: Path, requirements: Iterable[str], *,
                               progress: Progress | None = None) -> list[Path]:
    """Download binary cp311 wheels of `requirements` (and their deps) into `dest`. Raises WheelhouseError."""
    progress = progress or _noop
    progress(f"downloading dependency wheels into {dest}")
    argv = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", "3.11",
            "--implementation", "cp", "--abi", "cp311", "--platform", WHEEL_PLATFORM, "-d", str(_mkdir(dest)),
            *requirements]
    _run_streaming(argv, progress, WheelhouseError)
    return sorted(dest.glob("*.whl"))


def build_project_wheel(dest: Path, root: Path = PROJECT_ROOT, *, progress: Progress | None = None) -> Path:
    """``pip wheel --no-deps`` of a copy of the project's source files into `dest`.

    Building from a copy keeps build/ and egg-info out of the shared checkout.
    Raises ImageError, WheelhouseError.
    """
    progress = progress or _noop
    progress(f"building the snekbed wheel into {dest}")
    with tempfile.TemporaryDirectory(prefix="snekbed-src-") as tmp:
        copy_project_sources(root, Path(tmp))
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(_mkdir(dest)), tmp]
        _run_streaming(argv, progress, WheelhouseError)
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


def _cached_wheels(dest: Path, fill: Callable[[Path], object], *, refresh: bool, keep: int = 5) -> list[Path]:
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


# ---------------------------------------------------------------- node image


def build_node_image(client: docker.DockerClient, *, base: str | None = None, force: bool = False,
                     refresh_wheels: bool = False, cache_dir: Path | None = None,
                     progress: Progress | None = None, dockerfile: Path | None = None,
                     repository: str = NODE_REPOSITORY, root: Path = PROJECT_ROOT) -> ImageInfo:
    """Build ``<repository>:<hash12>`` (also tagged ``:latest``) unless it is up to date.

    The hash covers the Dockerfile, the base tag and id, the dependency wheels' sha256
    and the project source files under `root`. `force` rebuilds without Docker's layer
    cache and rebuilds the project wheel; `refresh_wheels` re-downloads dependency
    wheels. Build output goes line by line to `progress`. After a rebuild, older images
    of `repository` beyond KEEP_NODE_IMAGES are untagged unless a container uses them.
    Raises BaseImageError, WheelhouseError, ImageBuildError (all ImageError).
    """
    progress, cache_dir, dockerfile = progress or _noop, cache_dir or default_cache_dir(), dockerfile or DOCKERFILE
    if not dockerfile.is_file():
        raise ImageError(f"the Dockerfile {dockerfile} does not exist")
    dockerfile_bytes = dockerfile.read_bytes()
    with contextlib.ExitStack() as stack:
        ctx = stack.enter_context(tempfile.TemporaryDirectory(prefix="snekbed-ctx-"))
        base_tag, reason = resolve_base(client, base, cache_dir=cache_dir, progress=progress)
        snapshot = Path(ctx) / "src"
        copy_project_sources(root, snapshot)  # the hash and the wheel see the same files
        source_hash = hash_project_sources(snapshot)
        requirements = runtime_dependencies(snapshot / "pyproject.toml")
        deps_key = _hash_fields("deps", [("platform", WHEEL_PLATFORM), *(("req", r) for r in sorted(requirements))])
        with _file_lock("wheels.lock", _mkdir(cache_dir / "wheels")):
            dep_wheels = _cached_wheels(cache_dir / "wheels" / f"deps-{deps_key[:16]}", refresh=refresh_wheels,
                                        fill=lambda d: download_dependency_wheels(d, requirements, progress=progress))
            project_wheels = _cached_wheels(cache_dir / "wheels" / f"project-{source_hash[:16]}", refresh=force,
                                            fill=lambda d: build_project_wheel(d, snapshot, progress=progress))
        inputs_hash = compute_inputs_hash(dockerfile=dockerfile_bytes, base=base_tag,
                                          base_id=client.images.get(base_tag).id,
                                          dependency_wheels={w.name: sha256_file(w) for w in dep_wheels},
                                          project_source_hash=source_hash)
        tag = f"{repository}:{inputs_hash[:12]}"
        stack.enter_context(_file_lock(f"node-{inputs_hash[:2]}.lock"))  # builds of the same inputs take turns
        built = _image_exists(client, tag)
        rebuilt = force or built is None or built.labels.get(LABEL_INPUTS) != inputs_hash
        if rebuilt:
            context = _mkdir(Path(ctx) / "context")
            (context / "Dockerfile").write_bytes(dockerfile_bytes)
            for sub, wheels in (("deps", dep_wheels), ("project", project_wheels)):
                for wheel in wheels:
                    shutil.copy2(wheel, _mkdir(context / "wheels" / sub) / wheel.name)
            built = client.images.get(_docker_build(client, context, tag=tag, base=base_tag,
                                                    inputs_hash=inputs_hash, nocache=force, progress=progress))
            _prune_old_images(client, repository, keep_id=built.id)
        assert built is not None
        built.tag(repository, "latest")
        return ImageInfo(tag=tag, id=built.id, base=base_tag, rebuilt=rebuilt, inputs_hash=inputs_hash,
                         base_reason=reason, size_bytes=int(built.attrs.get("Size", 0)))


def _created_key(attrs: Mapping[str, object]) -> tuple[str, str]:
    """Sort key for an image's RFC 3339 ``Created`` (Docker trims trailing zeros of the nanoseconds)."""
    head, _, frac = str(attrs.get("Created", "")).rstrip("Z").partition(".")
    return head, frac.ljust(9, "0")


def _prune_old_images(client: docker.DockerClient, repository: str, *, keep_id: str,
                      keep: int = KEEP_NODE_IMAGES) -> None:
    """Untag all but the newest `keep` node images of `repository`; images a container uses stay."""
    older = sorted((i for i in client.images.list(name=repository, filters={"label": f"{LABEL_IMAGE}=node"})
                    if i.id != keep_id), key=lambda i: _created_key(i.attrs), reverse=True)[keep - 1:]
    for old in older:
        for tag in old.tags:
            with contextlib.suppress(docker.errors.APIError):  # in use by a container: keep it
                client.images.remove(tag)


def _docker_build(client: docker.DockerClient, context: Path, *, tag: str, base: str, inputs_hash: str,
                  nocache: bool, progress: Progress) -> str:
    """Build `context` with the classic builder; return the image id. Raises ImageBuildError."""
    log: list[str] = []
    image_id = ""
    try:  # only snekbed.inputs is added here: every label is one more (slow) layer commit
        for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True, nocache=nocache,
                                      buildargs={"BASE_IMAGE": base}, labels={LABEL_INPUTS: inputs_hash}):
            if "error" in chunk:
                raise ImageBuildError(tag, str(chunk["error"]), log)
            if text := chunk.get("stream"):
                log.append(text)
                for line in filter(str.strip, text.splitlines()):
                    progress(line)
            image_id = (chunk.get("aux") or {}).get("ID", image_id)
    except docker.errors.APIError as exc:
        raise ImageBuildError(tag, str(exc.explanation or exc), log) from exc
    if not image_id:
        raise ImageBuildError(tag, "the build finished without reporting an image id", log)
    return image_id


# ---------------------------------------------------------------- CLI


def _docker_client() -> docker.DockerClient:
    """docker.from_env(), pinged. Raises click.ClickException if the engine is unreachable."""
    try:
        client = docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        raise click.ClickException(f"cannot reach the Docker engine: {exc}") from exc


@click.group()
def image() -> None:
    """Build and inspect the snek node image (works without a registry)."""


@image.command()
@click.option("--force", is_flag=True, help="Rebuild even if the image is up to date (no layer cache).")
@click.option("--base", "base_image", metavar="IMAGE", help=f"Base image with python3.11 [default: {BASE_IMAGE}, "
              "or an offline Debian base when the registry is unreachable].")
@click.option("--refresh-wheels", is_flag=True, help="Re-download the dependency wheels from PyPI.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def build(force: bool, base_image: str | None, refresh_wheels: bool, as_json: bool) -> None:
    """Build snekbed-node:<hash> (and :latest) if any input changed."""
    from rich.console import Console

    console = Console(stderr=True)
    client = _docker_client()
    with console.status("preparing the node image") as status:
        def progress(line: str) -> None:
            status.update(f"[dim]{line[:console.width - 4]}")
            if line.startswith(("Step ", "debootstrap ", "docker import", "downloading ", "building ", "pulling ")):
                console.print(line, style="dim", highlight=False, markup=False, no_wrap=True, overflow="ellipsis")

        try:
            info = build_node_image(client, base=base_image, force=force, refresh_wheels=refresh_wheels,
                                    progress=progress)
        except ImageError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(asdict(info), indent=2))
        return
    state = "[green]rebuilt[/]" if info.rebuilt else "[cyan]up to date[/]"
    console.print(f"[bold]{info.tag}[/] (also {info.tag.split(':')[0]}:latest) {state}  "
                  f"{info.id[:19]}  {info.size_bytes / 1e6:.0f} MB", highlight=False, soft_wrap=True)
    console.print(f"base: {info.base} ({info.base_reason})", highlight=False, soft_wrap=True)


@image.command("prometheus")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def prometheus_image(as_json: bool) -> None:
    """Build snekbed-prometheus:<hash> (and :latest) from Debian's package, without a registry."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("preparing the Prometheus image") as status:
        try:
            tag = build_prometheus_image(_docker_client(), progress=lambda line: status.update(f"[dim]{line[:70]}"))
        except ImageError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"tag": tag, "latest": f"{PROMETHEUS_REPOSITORY}:latest"}))
    else:
        console.print(f"[bold]{tag}[/] (also {PROMETHEUS_REPOSITORY}:latest)", highlight=False)


@image.command()
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON on stdout.")
def show(as_json: bool) -> None:
    """List the snekbed node and base images on this engine."""
    from rich.console import Console
    from rich.table import Table

    rows = [{"kind": i.labels.get(LABEL_IMAGE, "?"), "tags": sorted(i.tags), "id": i.id,
             "created": i.attrs.get("Created", ""), "size_bytes": int(i.attrs.get("Size", 0)),
             "inputs_hash": i.labels.get(LABEL_INPUTS, ""), "base": i.labels.get("snekbed.base", "")}
            for i in _docker_client().images.list(filters={"label": LABEL_IMAGE}) if i.tags]
    rows.sort(key=lambda r: (r["kind"], r["created"]), reverse=True)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("kind", "id", "created", "size")
    table.add_column("tags", overflow="fold")
    table.add_column("base", overflow="fold")
    for r in rows:
        table.add_row(str(r["kind"]), str(r["id"])[7:19], str(r["created"])[:16].replace("T", " "),
                      f"{int(r['size_bytes']) / 1e6:.0f} MB", "\n".join(r["tags"]), str(r["base"]))
    Console().print(table)
    Console(stderr=True).print(f"[dim]wheel cache: {default_cache_dir() / 'wheels'}", highlight=False)
