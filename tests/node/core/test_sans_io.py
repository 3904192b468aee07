"""node.core stays sans-IO: no trio, sockets, asyncio or clocks (STYLE.md §1-2, pyproject [tool.importlinter])."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.ci import need

REPO = Path(__file__).parents[3]
CORE = REPO / "node" / "core"
FORBIDDEN = {"trio", "socket", "asyncio", "time"}


def _imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every absolute module name a file imports (``import a.b`` and ``from a.b import c``), with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, node.lineno))
    return found


def test_core_modules_import_no_io_or_clock() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert CORE / "wire.py" in files and CORE / "errors.py" in files
    offences = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in files
        for name, line in _imported_modules(path)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert offences == []


def test_scanner_catches_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nimport time as t\nfrom socket import socket\nfrom .x import y\nimport trio.lowlevel\n")
    names = {n for n, _ in _imported_modules(bad)}
    assert {n.split(".")[0] for n in names} & FORBIDDEN == {"time", "socket", "trio"}


def test_importing_the_codec_loads_no_io_module() -> None:
    code = (
        "import sys; import node.core.wire, node.core.errors, node.core.types, node.core.crypto; "
        "print(','.join(sorted(m for m in ('trio', 'asyncio') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=_env()
    )  # fmt: skip
    assert out.stdout.strip() == ""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_import_linter_contract_is_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    need(found is not None, "lint-imports is not installed (pip install import-linter)")
    cmd = [found]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", out.stdout), out.stdout
