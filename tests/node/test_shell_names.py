"""Wire constants in the node shell, netem and contract are named, never bare numbers.

A frame type (or link type) compared with a bare integer (``f.type == 3``, ``t in (2, 3)``) or a frame
built from one (``Frame(3, ...)``) hides which type is meant and drifts silently when the numbering does.
The shell uses the enums of ``node.core.types`` (``FrameType``, ``LegacyFrameType``, ``LinkType``) or
names derived from them (``_TRAFFIC = int(FrameType.TRAFFIC)`` where a plain int is wanted on the hot
path). ``contract`` cannot import the core, so its tables spell the numbers once, as data, and
``tests/contract/test_contract_frames.py`` checks them against the enums.

The check reads the source with :mod:`ast`: a comparison with an integer literal on one side (or a
tuple, list or set holding one) and, on another side, a name or attribute called ``type`` or ending in
``type`` (``ftype``, ``frame_type``, ``link_type``); and a ``Frame(...)`` call whose type is an integer
literal. The node core (``node/core``) is the protocol's own codec and is not checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("node", "netem", "contract")


def _shell_files() -> list[Path]:
    return sorted(
        p for pkg in CHECKED for p in (ROOT / pkg).rglob("*.py") if "core" not in p.relative_to(ROOT).parts
    )


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _holds_int(node: ast.AST) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_int(e) for e in node.elts)
    return _is_int(node)


def _is_type_name(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.lower().endswith("type")


def _frame_type_arg(call: ast.Call) -> ast.AST | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name != "Frame":
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "type"), None)


def bare_type_numbers(source: str) -> list[tuple[int, str]]:
    """(line, code) of every frame or link type written as a bare integer in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_holds_int(s) for s in sides) and any(_is_type_name(s) for s in sides):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            arg = _frame_type_arg(node)
            if arg is not None and _is_int(arg):
                found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.parametrize(
    "code",
    ["f.type == 3", "if ftype != 0xE1: pass", "t = frame.type in (2, 3)", "ok = 4 == p.link_type",
     "Frame(3)", "Frame(type=1, hop_limit=2)", "wire.Frame(0)"],
)  # fmt: skip
def test_the_check_finds_bare_type_numbers(code: str) -> None:
    assert bare_type_numbers(code), code


@pytest.mark.parametrize(
    "code",
    ["f.type == _TRAFFIC", "f.type is FrameType.TRAFFIC", "t in (FrameType.BOOTSTRAP, FrameType.TRAFFIC)",
     "Frame(FrameType.KEEPALIVE)", "sock.type != socket.SOCK_SEQPACKET", "len(key) != 32", "kind == 0"],
)  # fmt: skip
def test_the_check_leaves_named_types_and_other_numbers_alone(code: str) -> None:
    assert not bare_type_numbers(code), code


def test_the_shell_names_every_frame_and_link_type() -> None:
    files = _shell_files()
    assert any(p.name == "runtime.py" for p in files) and not any("core" in p.relative_to(ROOT).parts for p in files)
    bad = [f"{p.relative_to(ROOT)}:{line}: {code}" for p in files for line, code in bare_type_numbers(p.read_text())]
    assert not bad, "frame/link types as bare numbers (use node.core.types' enums):\n" + "\n".join(bad)
