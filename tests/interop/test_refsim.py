"""tests/interop/refsim: the same partition and heal on the reference's routers (docs/chaos.md, "What a heal of
many components needs"). Builds the Go program against the reference (GOPATH mode, offline) and runs it on a
6-node tree cut into 3 components: every phase converges, and bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends.reference import DEBIAN_GOPATH, locate_reference, reference_available
from tests.ci import need
from tests.interop.refsim.make_spec import chunk_partition

REFSIM = Path(__file__).parent / "refsim"


@pytest.fixture(scope="module")
def refsim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ok, why = reference_available()
    need(ok, f"the reference cannot be built here: {why}")
    src = locate_reference()
    if src.needs_link:
        pytest.skip("refsim builds against a reference in a GOPATH tree only")
    out = tmp_path_factory.mktemp("refsim")
    gopath = [*map(str, src.gopath), *([str(DEBIAN_GOPATH)] if DEBIAN_GOPATH.is_dir() else [])]
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local",
           "GOPATH": os.pathsep.join(dict.fromkeys(gopath))}
    env.setdefault("GOCACHE", str(out / ".gocache"))
    subprocess.run(["go", "build", "-o", str(out / "refsim"), "."], cwd=REFSIM, env=env, check=True, timeout=300)
    return out / "refsim"


def test_chunk_partition() -> None:
    nodes = ["a", "b", "c", "d", "e", "f"]
    links = [("a", "b"), ("a", "c"), ("b", "d"), ("b", "e"), ("c", "f")]
    chunk, cut, comps = chunk_partition(nodes, links, "a", 2)
    assert chunk == ["a", "b"] and sorted(map(tuple, cut)) == [("a", "c"), ("b", "d"), ("b", "e")]
    assert comps == 4  # {a, b}, {c, f}, {d}, {e}


@pytest.mark.slow
def test_partition_and_heal_converge(refsim: Path, tmp_path: Path) -> None:
    nodes = ["a", "b", "c", "d", "e", "f"]
    links = [["a", "b"], ["a", "c"], ["b", "d"], ["c", "e"], ["c", "f"]]
    spec = {"nodes": nodes, "links": links, "cut": [["a", "c"], ["b", "d"]], "repeat": 1, "seed": 1,
            "horizon_s": 40, "poll_s": 0.2}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([str(refsim), str(tmp_path / "spec.json")], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (rep,) = out["reps"]
    assert out["nodes"] == 6 and out["cut"] == 2 and rep["components"] == 3
    for phase in ("boot_s", "partition_snake_s", "heal_tree_s", "heal_snake_s"):
        assert rep[phase] is not None, (phase, rep)
    assert rep["heal_tree_s"] <= rep["heal_snake_s"]


def test_bad_input_exit_2(refsim: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"nodes": ["a"], "links": [["a", "zz"]]}))
    proc = subprocess.run([str(refsim), str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "links[0]" in proc.stderr and "bad.json" in proc.stderr
