"""The architecture holds: packages import one way, no module imports itself through others, and no project
module is imported inside a function to dodge a cycle (docs/architecture.md, "Layers").

* ``lint-imports`` keeps every contract of ``[tool.importlinter]`` in pyproject.toml, and its root packages
  are every package of the project;
* the module import graph (grimp: the same graph import-linter checks, with imports inside functions and
  under ``TYPE_CHECKING``) has no cycle; each cycle found is reported as a chain of module names;
* a function-local import of a project module is allowed only in :data:`LAZY_BOUNDARIES`: a module that loads
  an optional extra (the Docker SDK, pyspark) only when a command runs. Each entry names the modules it may
  import lazily and why, and is checked to be needed and to really guard that extra.

None of these tests skip: import-linter (and its grimp) is a test dependency, networkx a runtime one.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import grimp
import networkx as nx

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("contract", "netem", "node", "orchestrator", "pipeline")

#: importer -> (the project modules it may import inside a function, the optional extra they load, why).
LAZY_BOUNDARIES: dict[str, tuple[frozenset[str], str, str]] = {
    "orchestrator.sessions.lifecycle": (
        frozenset({"orchestrator.backends.docker", "orchestrator.backends.docker_session", "orchestrator.backends.image",
                   "orchestrator.backends.image_reference", "orchestrator.backends.engine",
                   "orchestrator.backends.swarm", "orchestrator.sessions.docker_moving"}),
        "docker",
        "`snekbed up --backend inproc` and `status` of an in-process run work without the docker extra; the "
        "Docker or swarm backend (orchestrator.backends.image imports the SDK) loads when such a run is asked for",
    ),
    "orchestrator.chaos.engine": (
        frozenset({"orchestrator.backends.docker", "orchestrator.chaos.docker_backend", "orchestrator.backends.image",
                   "orchestrator.backends.image_reference", "orchestrator.backends.swarm",
                   "orchestrator.chaos.swarm_backend", "orchestrator.chaos.docker_mobile"}),
        "docker",
        "`snekbed chaos` on the in-process backend works without the docker extra; the Docker chaos backend "
        "(and the image build, which imports the SDK) loads for --backend docker or swarm",
    ),
    "pipeline.cli": (
        frozenset({"pipeline.analysis", "pipeline.rundirs", "pipeline.session"}),
        "pyspark",
        "`snekbed analyze` is listed (and checks its run directories) in every install; Spark loads when it runs",
    ),
}


# ---------------------------------------------------------------- lint-imports


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.exists(), f"lint-imports is not installed next to {sys.executable} (pip install -e '.[test]')"
    out = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, env=_env(), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_import_linter_contracts_are_kept_over_every_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert sorted(config["root_packages"]) == sorted(PACKAGES) == sorted(_project_packages())
    kinds = [c["type"] for c in config["contracts"]]
    assert kinds.count("layers") >= 2 and "forbidden" in kinds
    out = _lint_imports()
    assert re.search(rf"Contracts: {len(kinds)} kept, 0 broken", out), out


def _project_packages() -> list[str]:
    """The top-level packages setuptools installs (pyproject's find include), as found on disk."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    patterns = [p.rstrip("*") for p in include["find"]["include"]]
    return [p for p in patterns if (REPO / p / "__init__.py").exists()]


# ---------------------------------------------------------------- cycles


def import_graph() -> nx.DiGraph:
    """Module -> module it imports directly, over the project's packages.

    A package's ``__init__`` re-exporting its own submodules is not an edge: importing ``netem.plan`` from
    ``netem.userspace`` does not run through ``netem/__init__.py`` in this graph, so re-exports make no
    false cycle.
    """
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.startswith(importer + ".") and _is_package(importer):
                continue
            g.add_edge(importer, imported)
    return g


def _is_package(module: str) -> bool:
    return (REPO.joinpath(*module.split(".")) / "__init__.py").exists()


def cycles(g: nx.DiGraph) -> list[str]:
    """Each cycle as ``a -> b -> ... -> a``: per strongly connected component, the shortest cycle through
    each of its modules (deduplicated), so every module caught in a cycle is named in at least one chain."""
    found: dict[frozenset[tuple[str, str]], str] = {}
    for component in nx.strongly_connected_components(g):
        if len(component) < 2 and not g.has_edge(*(2 * tuple(component))):
            continue
        sub = g.subgraph(component)
        for start in sorted(component):
            best: list[str] | None = None
            for nxt in sorted(sub.successors(start)):
                path = [start] if nxt == start else [start, *nx.shortest_path(sub, nxt, start)[:-1]]
                if best is None or len(path) < len(best):
                    best = path
            assert best is not None
            key = frozenset(zip(best, best[1:] + best[:1]))
            found.setdefault(key, " -> ".join([*best, best[0]]))
    return sorted(found.values())


def test_no_import_cycle_between_project_modules() -> None:
    found = cycles(import_graph())
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(found)


def test_cycle_report_names_each_chain() -> None:
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "c"), ("e", "f")])
    assert cycles(g) == ["a -> b -> c -> a", "c -> d -> c"]


def test_package_reexports_make_no_edge() -> None:
    g = import_graph()
    assert "netem.plan" in g and not g.has_edge("netem", "netem.plan")  # netem/__init__ re-exports netem.plan


# ---------------------------------------------------------------- function-local imports


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    """The absolute names an import statement imports (for ``from X import a``: ``X.a`` when it is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        as_path = REPO.joinpath(*sub.split("."))
        out.append(sub if as_path.with_suffix(".py").exists() or (as_path / "__init__.py").exists() else base)
    return out


def _imports(tree: ast.AST, *, local: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements inside a function or lambda (``local``), or run at import time (not ``local``: outside
    every function and every ``if TYPE_CHECKING:``)."""

    def walk(node: ast.AST, inside: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if not local and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # not run at import time
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside == local:
                yield child
            yield from walk(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    yield from walk(tree, False)


def _project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def function_local_imports() -> dict[str, set[str]]:
    """Module -> the project modules it imports inside a function."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in _imports(tree, local=True):
                for name in _resolve(module, node, path):
                    if _project(name):
                        found.setdefault(module, set()).add(name)
    return found


def test_no_function_local_import_of_a_project_module() -> None:
    offences = []
    for module, names in sorted(function_local_imports().items()):
        allowed = LAZY_BOUNDARIES.get(module, (frozenset(), "", ""))[0]
        offences += [f"{module} imports {name} inside a function" for name in sorted(names - allowed)]
    assert not offences, "\n".join(offences)


def _loads_at_import(module: str, seen: set[str] | None = None) -> set[str]:
    """Every top-level name imported when ``module`` is imported: its module-level imports, and theirs for
    project modules (what a lazy import of ``module`` really defers)."""
    seen = set() if seen is None else seen
    if module in seen:
        return set()
    seen.add(module)
    base = REPO.joinpath(*module.split("."))
    path = base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8")), local=False):
        for name in _resolve(module, node, path):
            out.add(name.split(".")[0])
            if _project(name):
                out |= _loads_at_import(name, seen)
    return out


def test_every_lazy_boundary_is_needed_and_guards_its_extra() -> None:
    local = function_local_imports()
    for module, (targets, extra, why) in LAZY_BOUNDARIES.items():
        assert why and targets <= local.get(module, set()), f"{module}: stale entry, it no longer imports lazily"
        for target in targets:
            assert extra in _loads_at_import(target), f"{module}: {target} does not load {extra} (so no reason)"


# ---------------------------------------------------------------- sizes, the command line, the diagram

#: a module longer than this, or a function longer than :data:`MAX_FUNCTION_LINES`, hides its design
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: every folder of the repository that holds our Python (tests too: a test module is read as often as code)
SOURCE_FOLDERS = (*PACKAGES, "tests", "benchmarks", "scripts")
#: generated code, exempt from the size rules (none today: the dashboards are generated as JSON, not Python)
GENERATED: frozenset[str] = frozenset()


def oversized(root: Path = REPO) -> list[str]:
    """``path: N lines`` for each module over the limit, ``path:line name(): N lines`` for each function."""
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in GENERATED:
                continue
            text = path.read_text(encoding="utf-8")
            if (n := text.count("\n")) > MAX_MODULE_LINES:
                found.append(f"{rel}: {n} lines (module, at most {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(text, filename=rel)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{rel}:{node.lineno} {node.name}(): {length} lines (function, at most "
                                     f"{MAX_FUNCTION_LINES})")
    return found


def test_no_module_over_600_lines_and_no_function_over_80() -> None:
    found = oversized()
    assert not found, f"{len(found)} offender(s):\n" + "\n".join(found)


def test_the_size_rule_finds_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "tests" / "long.py").write_text(f"def f():\n{body}\n" + "\n" * MAX_MODULE_LINES)
    assert oversized(tmp_path) == [f"tests/long.py: {MAX_MODULE_LINES + MAX_FUNCTION_LINES + 1} lines (module, at "
                                   f"most {MAX_MODULE_LINES})",
                                   f"tests/long.py:1 f(): {MAX_FUNCTION_LINES + 1} lines (function, at most "
                                   f"{MAX_FUNCTION_LINES})"]


def is_cli_module(module: str) -> bool:
    """A command-line module: ``orchestrator.cli`` and below, or any module named ``cli`` or ``*_cli``."""
    leaf = module.rsplit(".", 1)[-1]
    return module == "orchestrator.cli" or module.startswith("orchestrator.cli.") or leaf == "cli" or \
        leaf.endswith("_cli")


#: modules of the command line that its other modules share (click options, printing): imported inside it only
CLI_SHARED = frozenset({"orchestrator.cli.options", "orchestrator.cli.render"})
#: the command-line entry point (``snekbed``, ``python -m orchestrator.cli``): the one importer of commands
ENTRY_POINT = frozenset({"orchestrator.cli", "orchestrator.cli.__main__"})


def cli_imports(g: nx.DiGraph) -> list[str]:
    """``importer -> cli module`` for every import of a command-line module that is not allowed: only the command
    line's own modules may import its shared helpers; nothing imports a command (the entry point finds them by name,
    with importlib, so that edge is not in the graph)."""
    bad = []
    for importer, imported in sorted(g.edges):
        if not is_cli_module(imported) or imported == importer:
            continue
        if importer in ENTRY_POINT or (is_cli_module(importer) and imported in CLI_SHARED):
            continue
        bad.append(f"{importer} -> {imported}")
    return bad


def test_no_module_imports_a_command_line_module() -> None:
    bad = cli_imports(import_graph())
    assert not bad, "modules importing a command-line module:\n" + "\n".join(bad)


def test_the_cli_rule_catches_a_library_importing_a_command() -> None:
    g = nx.DiGraph([("orchestrator.experiments.ab", "orchestrator.cli.chaos"), ("orchestrator.cli.up",
                    "orchestrator.cli.options"), ("orchestrator.sessions.sim", "orchestrator.cli.options"),
                    ("node.cli", "node.runtime")])  # fmt: skip
    assert cli_imports(g) == ["orchestrator.experiments.ab -> orchestrator.cli.chaos",
                              "orchestrator.sessions.sim -> orchestrator.cli.options"]


def test_the_architecture_page_shows_the_import_graph() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "architecture.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert page.lstrip().startswith("# Architecture") and page.index("```mermaid") < page.index("\n## ")


#: the in-process network's own mechanics (its event heap, frame constant, links); only its module touches them
INPROC_PRIVATE = re.compile(r"\b_heap\b|\b_FRAME\b|\bnet\._\w+")


def test_only_the_in_process_network_touches_its_private_mechanics() -> None:
    """Chaos, sessions and tools drive InprocNetwork through its public methods (hold, release, drop_peerings,
    reshape, flush, ...): nothing outside orchestrator/backends/inproc.py reads its heap or private names."""
    found = []
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        if path == REPO / "orchestrator" / "backends" / "inproc.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if INPROC_PRIVATE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_name_the_architecture_page_gives_in_full_exists() -> None:
    """``node.core.forward.transit_key`` and the like, in docs/architecture.md, name a real module and attribute."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for name in sorted(set(re.findall(r"`((?:contract|netem|node|orchestrator|pipeline)(?:\.\w+)+)", page))):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            base = REPO.joinpath(*parts[:i])
            if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
                break
        module = ".".join(parts[:i])
        source = REPO.joinpath(*parts[:i])
        path = source / "__init__.py" if (source / "__init__.py").exists() else source.with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        defined |= {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        defined |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        if any(attr not in defined for attr in parts[i:]):
            missing.append(f"{name} (module {module})")
    assert not missing, "docs/architecture.md names what the code does not have:\n" + "\n".join(missing)
