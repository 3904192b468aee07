"""The base of the node image: ``python:3.11-slim-bookworm`` where Docker can pull it, otherwise an offline
Debian base made here with debootstrap and ``docker import``, tagged by a hash of its package list and suite.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import docker
import docker.errors
import requests

from orchestrator.backends.image_common import (
    LABEL_IMAGE,
    LABEL_INPUTS,
    BaseCommandError,
    BaseImageError,
    Progress,
    default_cache_dir,
    ensure_dir,
    file_lock,
    no_progress,
    run_streaming,
)
from orchestrator.backends.image_inputs import hash_fields

__all__ = ["BASE_IMAGE", "BASE_PACKAGES", "DEBIAN_SUITE", "base_inputs_hash", "registry_reachable", "image_exists",
           "offline_base_tag", "build_offline_base", "resolve_base"]

BASE_IMAGE = "python:3.11-slim-bookworm"
BASE_REPOSITORY = "snekbed-base"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "iproute2", "iptables", "ca-certificates", "procps", "ethtool")
_BASE_RECIPE = "minbase-trim-v1"  # bump when the trimming below changes, so cached bases are rebuilt
_TRIM_GLOBS = ("usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "usr/share/lintian/*",
               "var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/log/*",
               "var/cache/debconf/*-old", "etc/resolv.conf", "etc/hostname")
REGISTRY_CHECK_TIMEOUT_S = 3.0


def base_inputs_hash(packages: Iterable[str] = BASE_PACKAGES, suite: str = DEBIAN_SUITE, *,
                     arch: str | None = None) -> str:
    """Hash of what the offline base is made from (package set, suite, arch, recipe)."""
    fields = [("suite", suite), ("arch", arch or platform.machine()), ("recipe", _BASE_RECIPE)]
    return hash_fields("snekbed-base", fields + [("package", name) for name in sorted(set(packages))])


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


def image_exists(client: docker.DockerClient, name: str) -> docker.models.images.Image | None:
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
    progress, packages = progress or no_progress, tuple(sorted(set(packages)))
    tag = offline_base_tag(packages, suite)
    if image_exists(client, tag):
        return tag
    if os.geteuid() != 0:
        raise BaseImageError(f"building the offline base {tag} needs root (debootstrap); run as root or pass --base")
    if shutil.which("debootstrap") is None:
        raise BaseImageError(f"building the offline base {tag} needs debootstrap: apt-get install -y debootstrap")
    cache_dir = cache_dir or default_cache_dir()
    with file_lock(f"base-{tag.rpartition('-')[2]}.lock"):
        if image_exists(client, tag):  # another process built it while we waited
            return tag
        work = Path(tempfile.mkdtemp(prefix="base-", dir=ensure_dir(cache_dir / "tmp")))
        rootfs, tarball = work / "rootfs", work / "rootfs.tar"
        try:
            progress(f"debootstrap {suite} ({len(packages)} packages) into {rootfs}")
            run_streaming(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite,
                            str(rootfs), mirror or os.environ.get("SNEKBED_DEBIAN_MIRROR", DEBIAN_MIRROR)],
                           progress, BaseCommandError)
            _unmount_below(rootfs)
            for pattern in _TRIM_GLOBS:
                for path in rootfs.glob(pattern):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            progress(f"docker import {tag}")
            run_streaming(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
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
        if not image_exists(client, tag):
            raise BaseImageError(f"docker import reported success but {tag} does not exist")
    return tag


def resolve_base(client: docker.DockerClient, base: str | None = None, *, cache_dir: Path | None = None,
                 progress: Progress | None = None) -> tuple[str, str]:
    """Pick the base image; return ``(tag, reason)``.

    An explicit `base` must exist locally or be pullable. Otherwise BASE_IMAGE is used
    if present or pullable, else the offline base is built (or reused). Raises BaseImageError.
    """
    progress = progress or no_progress
    if base is not None:
        if image_exists(client, base):
            return base, f"--base {base} (present locally)"
        try:
            client.images.pull(base)
        except docker.errors.APIError as exc:
            raise BaseImageError(f"base image {base} is not present locally and cannot be pulled: "
                                 f"{exc.explanation or exc}") from exc
        return base, f"--base {base} (pulled)"
    if image_exists(client, BASE_IMAGE):
        return BASE_IMAGE, f"{BASE_IMAGE} present locally"
    if registry_reachable(client, BASE_IMAGE):
        progress(f"pulling {BASE_IMAGE}")
        try:
            client.images.pull(BASE_IMAGE)
            return BASE_IMAGE, f"registry reachable: pulled {BASE_IMAGE}"
        except docker.errors.APIError as exc:
            progress(f"pull of {BASE_IMAGE} failed ({exc.explanation or exc}); building the offline base")
    verb = "using cached offline base" if image_exists(client, offline_base_tag()) else "built offline base"
    tag = build_offline_base(client, cache_dir=cache_dir, progress=progress)
    return tag, f"registry unreachable: {verb} {tag}"
