"""The compiled core (mypyc, docs/compiled-core.md) and the pure-Python one behave the same.

The rest of tests/node/core runs on whichever core this process imported (the compiled one after a
``pip install`` that could compile it). These tests run both, in child processes: the in-process sim
must print the same JSON but for its wall time, and the wire-vector tests must pass on each. They need
the compiled core: on a laptop without it they skip, in CI they fail (tests.ci.need), since CI's install
compiles it. ``SNEKBED_PURE_CORE=1`` and a changed source must select the pure core, compiled or not.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import node.core
import node.core.router
import node.core.wire
from tests.ci import REPO, SHARED, need

MESH12 = REPO / "compose" / "topologies" / "mesh-12.yaml"
GRAPH250 = SHARED / "topologies" / "pinecone" / "graph-250.txt"
WALL_KEYS = {"wall_s"}  # the only keys a run's JSON may differ in: how long it took
_PROBE = "import node.core, node.core.router; print(node.core.implementation(), node.core.router.__file__)"
#: the wire-vector tests (the reference's byte vectors, pinecone-wire-vectors.json, and the codec's own rules)
WIRE_TESTS = [f"tests/node/core/test_wire_{part}.py" for part in ("fields", "signed", "frames", "legacy")]


def _env(pure: bool, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != node.core.PURE_CORE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    if pure:
        env[node.core.PURE_CORE_ENV] = "1"
    return env | extra


def _run(argv: list[str], pure: bool, timeout: float = 600, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=_env(pure))  # fmt: skip


def _need_compiled() -> None:
    need(node.core.COMPILED, "the compiled core is not installed here (pip install -e . compiles it when mypyc and a "
                             "C compiler are available; SNEKBED_PURE=1 skips it)")  # fmt: skip


def _is_extension(path: str | None) -> bool:
    return bool(path) and any(str(path).endswith(suffix) for suffix in EXTENSION_SUFFIXES)


def test_implementation_names_the_modules_this_process_imported() -> None:
    for module in (node.core.router, node.core.wire):
        assert _is_extension(module.__file__) is node.core.COMPILED, module.__file__
    assert node.core.implementation() == ("compiled (mypyc)" if node.core.COMPILED else "pure Python")


def test_pure_core_env_imports_the_py_files() -> None:
    out = _run(["-c", _PROBE], pure=True)
    assert out.returncode == 0, out.stderr
    kind, path = out.stdout.strip().rsplit(" ", 1)
    assert kind == "pure Python" and path.endswith("node/core/router.py")


def test_cli_version_names_the_core() -> None:
    for pure in (False, True):
        probe = _run(["-c", _PROBE], pure=pure)
        core = probe.stdout.strip().rsplit(" ", 1)[0]
        assert core in ("pure Python", "compiled (mypyc)") and (core == "pure Python" or not pure), probe.stdout
        out = _run(["-m", "orchestrator.cli", "--version"], pure=pure)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().endswith(f"\ncore: {core}"), out.stdout


def test_a_source_changed_since_the_build_runs_the_pure_core(tmp_path: Path) -> None:
    """Stale extensions (an editable install whose .py files moved on) are never imported."""
    _need_compiled()
    shutil.copytree(REPO / "node", tmp_path / "node", ignore=shutil.ignore_patterns("__pycache__"))
    probe = [sys.executable, "-c", _PROBE]
    env = _env(False, PYTHONPATH=str(tmp_path))
    fresh = subprocess.run(probe, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert fresh.returncode == 0 and fresh.stdout.startswith("compiled (mypyc) "), fresh.stdout + fresh.stderr
    wire = tmp_path / "node" / "core" / "wire.py"
    wire.write_text(wire.read_text() + "\n# edited after the build\n")
    stale = subprocess.run(probe, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert stale.returncode == 0, stale.stderr
    assert stale.stdout.strip() == f"pure Python {tmp_path / 'node' / 'core' / 'router.py'}"
    assert "compiled from other sources" in stale.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    pytest.param([str(MESH12)], id="mesh-12"),
    pytest.param([str(GRAPH250), "--kill-root"], id="graph-250-kill-root"),
])  # fmt: skip
def test_sim_json_is_identical_on_both_cores(argv: list[str]) -> None:
    _need_compiled()
    need(Path(argv[0]).is_file(), f"topology {argv[0]} not found")
    runs = {}
    for pure in (False, True):
        out = _run(["-m", "orchestrator.cli", "sim", *argv, "--seed", "0", "--json"], pure=pure)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[pure] = json.loads(out.stdout)
    compiled, pure_run = ({k: v for k, v in r.items() if k not in WALL_KEYS} for r in (runs[False], runs[True]))
    assert compiled == pure_run
    assert set(runs[False]) - set(compiled) == WALL_KEYS  # the key it skipped is there (a rename would hide it)


@pytest.mark.slow
def test_wire_vectors_pass_on_both_cores() -> None:
    """The wire-vector tests (:data:`WIRE_TESTS`), run in a child process on each core."""
    _need_compiled()
    need((SHARED / "spec" / "pinecone-wire-vectors.json").is_file(), "shared/spec/pinecone-wire-vectors.json not found")
    for pure in (False, True):
        probe = _run(["-c", _PROBE], pure=pure)
        assert probe.stdout.startswith("pure Python" if pure else "compiled (mypyc)"), probe.stdout + probe.stderr
        out = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *WIRE_TESTS], pure=pure)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
        assert " passed" in out.stdout and " skipped" not in out.stdout, out.stdout[-1000:]


@pytest.mark.slow
def test_every_core_test_passes_on_the_pure_core_too() -> None:
    """The suite runs tests/node/core on the compiled core (the install's); here all of it runs once more in a
    child process on the pure-Python core (SNEKBED_PURE_CORE=1), so the fallback is never untested."""
    _need_compiled()
    out = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests/node/core",
                f"--ignore={Path(__file__).relative_to(REPO)}"], pure=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    tail = out.stdout.strip().splitlines()[-1]
    assert " passed" in tail and "skipped" not in tail and "failed" not in tail, tail
    assert int(tail.split(" passed")[0].split()[-1]) >= 300, tail  # the whole directory ran, not a stray file


def _dataclass_inits() -> list[tuple[str, ast.ClassDef, ast.FunctionDef]]:
    found = []
    for path in sorted((REPO / "node" / "core").glob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if isinstance(cls, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
                init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
                if init is not None:
                    found.append((f"{path.name}:{cls.name}", cls, init))
    return found


def test_written_out_dataclass_inits_match_their_fields() -> None:
    """Dataclasses whose __init__ is written out (so that mypyc compiles it) take exactly their fields: same
    names, order, annotations and defaults, and set each one."""
    inits = _dataclass_inits()
    assert {name for name, _, _ in inits} >= {"types.py:Frame", "state.py:Output", "snek.py:Entry"}
    for name, cls, init in inits:
        fields = [(f.target.id, ast.unparse(f.annotation), f.value and ast.unparse(f.value))  # type: ignore[union-attr]
                  for f in cls.body if isinstance(f, ast.AnnAssign)]  # fmt: skip
        args = init.args.args[1:]
        defaults = [None] * (len(args) - len(init.args.defaults)) + [ast.unparse(d) for d in init.args.defaults]
        params = [(a.arg, ast.unparse(a.annotation), d) for a, d in zip(args, defaults)]  # type: ignore[arg-type]
        assert params == fields, name
        body = ast.unparse(init)
        for field, _, _ in fields:
            assert f"self.{field} = {field}" in body or f"object.__setattr__(self, '{field}', {field})" in body, (name, field)
