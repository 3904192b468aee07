"""Build the snek node image without a registry (``snekbed image build``), and the Prometheus image.

The node image is ``compose/Dockerfile`` on top of a base that has Python 3.11
(:mod:`orchestrator.backends.image_base`: ``python:3.11-slim-bookworm`` where Docker can pull
it, otherwise an offline Debian base made here with debootstrap and ``docker import``). Python
packages come from a wheelhouse built on the host (:mod:`orchestrator.backends.image_inputs`),
and the build context is a temp dir holding only the Dockerfile and that wheelhouse.

Everything is cached. The offline base is tagged by a hash of its package list and
suite; dependency wheels are kept per requirement list; the project wheel per hash of
the project's source files (wheel bytes are not reproducible); and the node image is
tagged ``snekbed-node:<hash12>`` of all of those, so it is rebuilt only when one changes.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from orchestrator.backends.image_base import build_offline_base, image_exists, resolve_base
from orchestrator.backends.image_common import (
    LABEL_IMAGE,
    LABEL_INPUTS,
    ImageBuildError,
    ImageError,
    Progress,
    default_cache_dir,
    ensure_dir,
    file_lock,
    no_progress,
)
from orchestrator.backends.image_inputs import (
    PROJECT_ROOT,
    WHEEL_PLATFORM,
    build_project_wheel,
    cached_wheels,
    compute_inputs_hash,
    copy_project_sources,
    download_dependency_wheels,
    hash_fields,
    hash_project_sources,
    runtime_dependencies,
    sha256_file,
)

__all__ = ["NODE_REPOSITORY", "PROMETHEUS_REPOSITORY", "DOCKERFILE", "ImageInfo", "build_node_image",
           "build_prometheus_image", "list_images"]

NODE_REPOSITORY = "snekbed-node"
KEEP_NODE_IMAGES = 3  # per repository, counting the new one; older ones are untagged after a rebuild
DOCKERFILE = PROJECT_ROOT / "compose" / "Dockerfile"


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
    progress, cache_dir, dockerfile = progress or no_progress, cache_dir or default_cache_dir(), dockerfile or DOCKERFILE
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
        deps_key = hash_fields("deps", [("platform", WHEEL_PLATFORM), *(("req", r) for r in sorted(requirements))])
        with file_lock("wheels.lock", ensure_dir(cache_dir / "wheels")):
            dep_wheels = cached_wheels(cache_dir / "wheels" / f"deps-{deps_key[:16]}", refresh=refresh_wheels,
                                        fill=lambda d: download_dependency_wheels(d, requirements, progress=progress))
            project_wheels = cached_wheels(cache_dir / "wheels" / f"project-{source_hash[:16]}", refresh=force,
                                            fill=lambda d: build_project_wheel(d, snapshot, progress=progress))
        inputs_hash = compute_inputs_hash(dockerfile=dockerfile_bytes, base=base_tag,
                                          base_id=client.images.get(base_tag).id,
                                          dependency_wheels={w.name: sha256_file(w) for w in dep_wheels},
                                          project_source_hash=source_hash)
        tag = f"{repository}:{inputs_hash[:12]}"
        stack.enter_context(file_lock(f"node-{inputs_hash[:2]}.lock"))  # builds of the same inputs take turns
        built = image_exists(client, tag)
        rebuilt = force or built is None or built.labels.get(LABEL_INPUTS) != inputs_hash
        if rebuilt:
            context = ensure_dir(Path(ctx) / "context")
            (context / "Dockerfile").write_bytes(dockerfile_bytes)
            for sub, wheels in (("deps", dep_wheels), ("project", project_wheels)):
                for wheel in wheels:
                    shutil.copy2(wheel, ensure_dir(context / "wheels" / sub) / wheel.name)
            # only snekbed.inputs is added here: every label is one more (slow) layer commit
            built = client.images.get(docker_build(client, context, tag=tag, base=base_tag, nocache=force,
                                                   progress=progress, labels={LABEL_INPUTS: inputs_hash}))
            prune_old_images(client, repository, keep_id=built.id)
        assert built is not None
        built.tag(repository, "latest")
        return ImageInfo(tag=tag, id=built.id, base=base_tag, rebuilt=rebuilt, inputs_hash=inputs_hash,
                         base_reason=reason, size_bytes=int(built.attrs.get("Size", 0)))


def _created_key(attrs: Mapping[str, object]) -> tuple[str, str]:
    """Sort key for an image's RFC 3339 ``Created`` (Docker trims trailing zeros of the nanoseconds)."""
    head, _, frac = str(attrs.get("Created", "")).rstrip("Z").partition(".")
    return head, frac.ljust(9, "0")


def prune_old_images(client: docker.DockerClient, repository: str, *, keep_id: str,
                     keep: int = KEEP_NODE_IMAGES, kind: str = "node") -> None:
    """Untag all but the newest `keep` images of `repository` labelled ``snekbed.image=<kind>``; images a container
    uses stay."""
    older = sorted((i for i in client.images.list(name=repository, filters={"label": f"{LABEL_IMAGE}={kind}"})
                    if i.id != keep_id), key=lambda i: _created_key(i.attrs), reverse=True)[keep - 1:]
    for old in older:
        for tag in old.tags:
            with contextlib.suppress(docker.errors.APIError):  # in use by a container: keep it
                client.images.remove(tag)


def docker_build(client: docker.DockerClient, context: Path, *, tag: str, base: str, nocache: bool,
                 progress: Progress | None = None, labels: Mapping[str, str] | None = None) -> str:
    """Build `context` (its Dockerfile takes ``BASE_IMAGE``) with the classic builder; return the image id. Raises
    ImageBuildError with the build's log."""
    log: list[str] = []
    image_id = ""
    try:
        for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True, nocache=nocache,
                                      buildargs={"BASE_IMAGE": base}, labels=dict(labels or {})):
            if "error" in chunk:
                raise ImageBuildError(tag, str(chunk["error"]), log)
            if text := chunk.get("stream"):
                log.append(text)
                for line in filter(str.strip, text.splitlines()):
                    if progress is not None:
                        progress(line)
            image_id = (chunk.get("aux") or {}).get("ID", image_id)
    except docker.errors.APIError as exc:
        raise ImageBuildError(tag, str(exc.explanation or exc), log) from exc
    if not image_id:
        raise ImageBuildError(tag, "the build finished without reporting an image id", log)
    return image_id


def list_images(client: docker.DockerClient) -> list[dict[str, Any]]:
    """The snekbed node, base and Prometheus images on this engine (tagged ones), newest kind and date first:
    ``kind``, ``tags``, ``id``, ``created``, ``size_bytes``, ``inputs_hash``, ``base``."""
    rows = [{"kind": i.labels.get(LABEL_IMAGE, "?"), "tags": sorted(i.tags), "id": i.id,
             "created": i.attrs.get("Created", ""), "size_bytes": int(i.attrs.get("Size", 0)),
             "inputs_hash": i.labels.get(LABEL_INPUTS, ""), "base": i.labels.get("snekbed.base", "")}
            for i in client.images.list(filters={"label": LABEL_IMAGE}) if i.tags]
    rows.sort(key=lambda r: (r["kind"], r["created"]), reverse=True)
    return rows


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
    progress = progress or no_progress
    base = build_offline_base(client, cache_dir=cache_dir, progress=progress, mirror=mirror,
                              packages=PROMETHEUS_PACKAGES)
    inputs = hash_fields("prometheus", [("base", base), ("dockerfile", _PROMETHEUS_DOCKERFILE)])
    tag = f"{PROMETHEUS_REPOSITORY}:{inputs[:12]}"
    if image_exists(client, tag) is None:
        progress(f"building {tag} on {base}")
        text = _PROMETHEUS_DOCKERFILE.format(base=base, inputs=inputs)
        with tempfile.TemporaryDirectory(prefix="prom-") as ctx:
            (Path(ctx) / "Dockerfile").write_text(text)
            try:
                client.images.build(path=ctx, tag=tag, rm=True, forcerm=True)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                raise ImageBuildError(tag, str(exc), []) from exc
    client.api.tag(tag, PROMETHEUS_REPOSITORY, "latest")
    return tag
