"""Tests for orchestrator.backends.image and the modules it builds on (image_inputs, image_base, image_common):
input hashing (no Docker) and real image builds (Docker).

The Docker tests build from a frozen copy of the project sources, since other people
edit the checkout while the tests run; the offline base is cached across runs by tag.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.backends import docker_plan
from orchestrator.backends import image as img
from orchestrator.backends import image_base as base
from orchestrator.backends import image_common as common
from orchestrator.backends import image_inputs as inputs
from orchestrator.cli import main
from tests.conftest import docker_available, need

#: beside the Docker group, not in it (tests/conftest.py): a build and short containers, no converging network
pytestmark = pytest.mark.xdist_group("image")

# ---------------------------------------------------------------- unit tests (no Docker)

HASH_ARGS = dict(dockerfile=b"FROM x\n", base="snekbed-base:bookworm-0123", base_id="sha256:aa",
                 dependency_wheels={"trio-0.35.0-py3-none-any.whl": "11", "pynacl-1.6.2.whl": "22"},
                 project_source_hash="33")


def test_inputs_hash_is_deterministic_and_ignores_wheel_order() -> None:
    reordered = dict(HASH_ARGS, dependency_wheels=dict(reversed(list(HASH_ARGS["dependency_wheels"].items()))))
    digest = inputs.compute_inputs_hash(**HASH_ARGS)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert inputs.compute_inputs_hash(**reordered) == digest


@pytest.mark.parametrize("field, value", [
    ("dockerfile", b"FROM y\n"),
    ("base", "python:3.11-slim-bookworm"),
    ("base_id", "sha256:bb"),
    ("dependency_wheels", {"trio-0.35.0-py3-none-any.whl": "11", "pynacl-1.6.2.whl": "99"}),
    ("dependency_wheels", {"trio-0.35.0-py3-none-any.whl": "11"}),
    ("project_source_hash", "34"),
])
def test_inputs_hash_changes_with_every_input(field: str, value: object) -> None:
    assert inputs.compute_inputs_hash(**dict(HASH_ARGS, **{field: value})) != inputs.compute_inputs_hash(**HASH_ARGS)


def _fake_project(root: Path) -> Path:
    (root / "node" / "core").mkdir(parents=True)
    (root / "contract").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["trio>=0.25"]\n'
                                         '[project.optional-dependencies]\ndocker = ["docker"]\n')
    (root / "node" / "__init__.py").write_text("")
    (root / "node" / "core" / "wire.py").write_text("X = 1\n")
    (root / "contract" / "classes.yaml").write_text("lan: {}\n")
    return root


def test_source_hash_follows_content_and_skips_caches(tmp_path: Path) -> None:
    root = _fake_project(tmp_path)
    before = inputs.hash_project_sources(root)
    assert [str(p) for p in inputs.project_source_files(root)] == [
        "contract/classes.yaml", "node/__init__.py", "node/core/wire.py", "pyproject.toml"]

    (root / "node" / "__pycache__").mkdir()
    (root / "node" / "__pycache__" / "wire.cpython-311.pyc").write_bytes(b"\0junk")
    (root / "node" / ".wire.py.swp").write_bytes(b"editor")
    (root / "node" / "core" / "wire.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0compiled")  # setup.py's
    (root / "node" / "core" / "_compiled.sha256").write_text("0" * 64)
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("assert True\n")   # not a package of the wheel
    assert inputs.hash_project_sources(root) == before

    (root / "node" / "core" / "wire.py").write_text("X = 2\n")
    changed = inputs.hash_project_sources(root)
    assert changed != before
    (root / "node" / "core" / "wire.py").rename(root / "node" / "core" / "wire2.py")
    assert inputs.hash_project_sources(root) not in (before, changed)


def test_source_files_need_a_pyproject(tmp_path: Path) -> None:
    with pytest.raises(common.ImageError, match=f"no pyproject.toml in {re.escape(str(tmp_path))}"):
        inputs.project_source_files(tmp_path)


def test_runtime_dependencies_are_the_base_list_only() -> None:
    deps = inputs.runtime_dependencies()
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}
    assert {"trio", "pynacl", "prometheus-client", "click"} <= names
    assert not names & {"docker", "pyspark", "pytest", "hypothesis", "pandas", "matplotlib"}


def test_runtime_dependencies_reject_bad_files(tmp_path: Path) -> None:
    with pytest.raises(common.ImageError, match="cannot read"):
        inputs.runtime_dependencies(tmp_path / "missing.toml")
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\ndependencies = "trio"\n')
    with pytest.raises(common.ImageError, match=r"\[project\].dependencies must be a list"):
        inputs.runtime_dependencies(bad)


def test_base_hash_covers_packages_and_suite() -> None:
    digest = base.base_inputs_hash(base.BASE_PACKAGES, "bookworm")
    assert base.base_inputs_hash(reversed(base.BASE_PACKAGES), "bookworm") == digest
    assert base.base_inputs_hash((*base.BASE_PACKAGES, "curl"), "bookworm") != digest
    assert base.base_inputs_hash(base.BASE_PACKAGES, "trixie") != digest


def test_node_container_options_add_net_admin_only_for_kernel_shaping() -> None:
    assert docker_plan.node_container_options(kernel_shaping=False) == {"init": True}
    assert docker_plan.node_container_options(kernel_shaping=True) == {"init": True, "cap_add": ["NET_ADMIN"]}


def test_dockerfile_defaults_and_port_labels_match_the_constants() -> None:
    text = img.DOCKERFILE.read_text()
    assert f"ARG BASE_IMAGE={base.BASE_IMAGE}\n" in text
    for name, port in (("admin", docker_plan.NODE_ADMIN_PORT), ("metrics", docker_plan.NODE_METRICS_PORT),
                       ("peer", docker_plan.NODE_PEER_PORT)):
        assert f'snekbed.port.{name}="{port}"' in text
    assert 'ENTRYPOINT ["snekbed"]' in text and "pip install --no-index" in text


def test_cli_build_help_lists_the_options() -> None:
    result = CliRunner().invoke(main, ["image", "build", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--force", "--base", "--json", "--refresh-wheels"):
        assert option in result.output


# ---------------------------------------------------------------- Docker tests


@pytest.fixture(scope="module")
def docker_client() -> Iterator[object]:
    """A Docker client; skips without an engine, fails instead under CI (tests.ci.need)."""
    import docker

    need(*docker_available())
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="module")
def source_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the project sources, so concurrent edits cannot change the hash mid-test."""
    root = tmp_path_factory.mktemp("snekbed-src")
    for rel in inputs.project_source_files(inputs.PROJECT_ROOT):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(inputs.PROJECT_ROOT / rel, root / rel)
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cache (and lock) dir, so other people's concurrent builds cannot make ours wait.

    Dependency wheels already downloaded into the default cache are copied in, to spare the network.
    """
    cache = tmp_path_factory.mktemp("snekbed-cache")
    for deps in (common.default_cache_dir() / "wheels").glob("deps-*"):
        if (deps / ".complete").exists():
            shutil.copytree(deps, cache / "wheels" / deps.name)
    return cache


@pytest.fixture(scope="module")
def node_image(docker_client: object, source_snapshot: Path, cache_dir: Path) -> img.ImageInfo:
    lines: list[str] = []
    info = img.build_node_image(docker_client, root=source_snapshot, cache_dir=cache_dir, progress=lines.append)
    if info.rebuilt:  # an identical image may already exist from an earlier run
        assert any(line.startswith("Step ") for line in lines), lines[-20:]
    return info


def _run(client: object, image: str, argv: list[str]) -> tuple[int, str]:
    """Run `argv` (entrypoint overridden) in a labelled container; return (exit code, output)."""
    container = client.containers.run(image, entrypoint=argv[:1], command=argv[1:], detach=True, init=True,
                                      labels={"snekbed.run": f"test-image-{uuid.uuid4().hex[:12]}"})
    try:
        code = container.wait(timeout=120)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_built_image_is_tagged_and_labelled(docker_client: object, node_image: img.ImageInfo) -> None:
    assert node_image.tag == f"snekbed-node:{node_image.inputs_hash[:12]}"
    built = docker_client.images.get(node_image.tag)
    assert built.id == node_image.id == docker_client.images.get("snekbed-node:latest").id
    assert built.labels["snekbed.image"] == "node"
    assert built.labels["snekbed.inputs"] == node_image.inputs_hash
    assert built.labels["snekbed.base"] == node_image.base
    assert built.attrs["Config"]["Entrypoint"] == ["snekbed"]
    assert node_image.size_bytes > 50_000_000


@pytest.mark.docker
@pytest.mark.slow
def test_image_runs_the_node_runtime(docker_client: object, node_image: img.ImageInfo) -> None:
    code, out = _run(docker_client, node_image.tag, [
        "python", "-c", "import node.core.crypto, trio, nacl, prometheus_client, sys; "
        "print('ok', sys.version_info[:2], sys.prefix)"])
    assert (code, out.strip()) == (0, "ok (3, 11) /opt/snekbed")

    code, out = _run(docker_client, node_image.tag, ["snekbed", "--version"])
    version = tomllib.loads((inputs.PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
    # the image's wheel is built with setup.py on the host, so the node runs the mypyc-compiled core
    # (docs/compiled-core.md); it imports under the image's own Python and reports itself
    # (and the node image has no Go toolchain, so it says it cannot build reference nodes, and why)
    lines = out.strip().splitlines()
    assert code == 0 and lines[0] == f"snekbed, version {version}" and lines[-1] == "core: compiled (mypyc)", out
    assert lines[1].startswith("reference nodes: not available: "), out

    code, out = _run(docker_client, node_image.tag,
                     ["sh", "-c", "for t in tc iptables ethtool ps; do command -v $t; done"])
    assert code == 0 and len(out.split()) == 4, out


@pytest.mark.docker
@pytest.mark.slow
def test_snekbed_help_in_image(docker_client: object, node_image: img.ImageInfo) -> None:
    # The image has no Docker SDK or Spark: --help still lists every command, and says which are unavailable.
    code, out = _run(docker_client, node_image.tag, ["snekbed", "--help"])
    assert code == 0, out
    assert "Usage: snekbed" in out and "node" in out and "not available in this install" in out


@pytest.mark.docker
@pytest.mark.slow
def test_second_build_is_cached(docker_client: object, node_image: img.ImageInfo, source_snapshot: Path,
                                cache_dir: Path) -> None:
    start = time.monotonic()
    again = img.build_node_image(docker_client, root=source_snapshot, cache_dir=cache_dir)
    elapsed_s = time.monotonic() - start
    assert not again.rebuilt
    assert (again.id, again.tag, again.inputs_hash) == (node_image.id, node_image.tag, node_image.inputs_hash)
    # not rebuilt is the check; this only catches a silent full build (minutes), with room for a loaded host
    assert elapsed_s < 60, f"an up-to-date build took {elapsed_s:.1f} s"


@pytest.mark.docker
@pytest.mark.slow
def test_changed_input_triggers_a_rebuild(docker_client: object, node_image: img.ImageInfo,
                                          source_snapshot: Path, cache_dir: Path, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex[:12]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(img.DOCKERFILE.read_text() + f'LABEL snekbed.test="{marker}"\n')
    repository = f"snekbed-node-test-{marker}"
    changed = None
    try:
        changed = img.build_node_image(docker_client, root=source_snapshot, cache_dir=cache_dir,
                                       dockerfile=dockerfile, repository=repository)
        assert changed.rebuilt
        assert changed.inputs_hash != node_image.inputs_hash
        assert changed.base == node_image.base
        labels = docker_client.images.get(f"{repository}:latest").labels
        assert (labels["snekbed.test"], labels["snekbed.inputs"]) == (marker, changed.inputs_hash)
    finally:
        if changed is not None:
            docker_client.images.remove(changed.id, force=True)


@pytest.mark.docker
def test_cli_show_lists_the_node_image(docker_client: object, node_image: img.ImageInfo) -> None:
    import json

    result = CliRunner().invoke(main, ["image", "show", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    mine = [r for r in rows if r["id"] == node_image.id]
    assert mine and mine[0]["kind"] == "node" and "snekbed-node:latest" in mine[0]["tags"]


@pytest.mark.docker
def test_prune_keeps_the_newest_node_images(docker_client: object) -> None:
    import io
    import tarfile

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        member = tarfile.TarInfo("hello.txt")
        member.size = 2
        tar.addfile(member, io.BytesIO(b"hi"))
    repository = f"snekbed-node-prune-{uuid.uuid4().hex[:12]}"
    ids = []
    try:
        for version in range(4):
            docker_client.api.import_image_from_data(data.getvalue(), repository=repository, tag=f"v{version}",
                                                     changes=["LABEL snekbed.image=node"])
            ids.append(docker_client.images.get(f"{repository}:v{version}").id)
            time.sleep(0.05)
        img.prune_old_images(docker_client, repository, keep_id=ids[-1], keep=2)
        left = {tag for i in docker_client.images.list(name=repository) for tag in i.tags}
        assert left == {f"{repository}:v3", f"{repository}:v2"}
    finally:
        for image_id in dict.fromkeys(ids):
            with contextlib.suppress(Exception):
                docker_client.images.remove(image_id, force=True)


@pytest.mark.docker
def test_registry_check_is_quick_and_restores_the_timeout(docker_client: object) -> None:
    saved = docker_client.api.timeout
    start = time.monotonic()
    reachable = base.registry_reachable(docker_client, timeout_s=2.0)
    assert isinstance(reachable, bool)
    assert time.monotonic() - start < 12  # the 2 s timeout held (an unbounded wait takes a minute or more)
    assert docker_client.api.timeout == saved


@pytest.mark.docker
def test_missing_explicit_base_is_a_clear_error(docker_client: object) -> None:
    name = f"snekbed-no-such-base-{uuid.uuid4().hex[:8]}:nope"
    with pytest.raises(common.BaseImageError, match=f"base image {re.escape(name)} is not present locally"):
        base.resolve_base(docker_client, name)


def test_an_interrupted_build_step_leaves_no_child_running() -> None:
    """Ctrl-C (here: KeyboardInterrupt raised from the progress callback, as it reaches the streaming loop)
    while a step runs: its whole process group (the step and the children it started) is terminated."""
    from orchestrator.backends.image_common import CommandError, group_running, run_streaming

    script = 'sleep 300 & echo "group $$"; sleep 300; wait'  # a child in the background, like debootstrap's
    group: list[int] = []

    def progress(line: str) -> None:
        group.append(int(line.split()[1]))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_streaming(["sh", "-c", script], progress, CommandError)
    (pgid,) = group
    assert group_running(pgid) == []  # none left running (a zombie waits for a reaper: it runs nothing)
