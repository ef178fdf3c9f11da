"""The package's import graph has no circles, and its folders keep the stages' order.

Built with ast from the source, so it sees every import a reader sees: `import x`, `from . import
x`, `from .x import y`, at module level or inside a function (an import moved into a function to
dodge a circle is still a circle), and under `if TYPE_CHECKING:` too (a circle a type checker
follows is one a reader follows).  A module's parent packages, which Python imports first, are
not counted as its imports: they would make every package whose `__init__` imports a submodule a
circle of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fast_nvcc"

# The folders in the order a compile's data meets them (docs/development.md): each imports only
# those before it.  BASE (under every folder) holds what any stage may use; the modules at the top
# of the package (cli, driver, passthrough, __main__) string the stages together and are
# imported by none of them.
STAGES = ("plan", "graph", "machine", "run", "guess", "learn", "cache", "remote", "report", "analysis")
BASE = ("", "errors", "files", "arguments", "settings")  # "": the package itself (its __version__)


def module_name(path: Path, *, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, *, root: Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports."""
    name = module_name(path, root=root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            # `from . import x` imports the module x when x is one, else the name x from the package.
            targets = [
                f"{base_name}.{alias.name}" if f"{base_name}.{alias.name}" in modules else base_name
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def build_import_graph(root: Path) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root=root) for path in paths}
    return {
        module_name(path, root=root): imported_modules(path, root=root, modules=modules)
        for path in paths
    }


def find_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def describe(circle: list[str], graph: dict[str, set[str]]) -> str:
    members = set(circle)
    arrows = [
        f"{source} -> {target}" for source in circle for target in sorted(graph[source] & members)
    ]
    return ", ".join(arrows)


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_find_circles(graph, expected):
    assert find_circles(graph) == expected


def test_imports_count_every_form(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .. import late\n")
    (package / "early.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .sub import helper\n"
        "import pkg.plain\n"
        "if TYPE_CHECKING:\n    from . import typed\n"
        "def f():\n    from .late import g\n"
    )
    for name in ("late", "plain", "typed"):
        (package / f"{name}.py").write_text("")
    (package / "sub" / "helper.py").write_text("from ..early import f\n")
    graph = build_import_graph(package)
    assert graph["pkg.early"] == {"pkg.sub.helper", "pkg.plain", "pkg.typed", "pkg.late"}
    assert graph["pkg.sub"] == {"pkg.late"}
    assert graph["pkg.sub.helper"] == {"pkg.early"}
    assert find_circles(graph) == [["pkg.early", "pkg.sub.helper"]]


def test_package_has_no_import_circles():
    graph = build_import_graph(PACKAGE)
    circles = [describe(circle, graph) for circle in find_circles(graph)]
    assert not circles, "import circles: " + " | ".join(circles)


def stage_of(module: str) -> str:
    """``fast_nvcc.run.scheduler`` -> ``run``; ``fast_nvcc.cli`` -> ``cli``; ``fast_nvcc`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_up(graph: dict[str, set[str]]) -> list[str]:
    """The imports that break the order: a folder's of a later folder or of the top, a base
    module's of anything but the base."""
    found = []
    for module, targets in sorted(graph.items()):
        here = stage_of(module)
        if here not in STAGES and here not in BASE:
            continue  # the top imports what it strings together
        for target in sorted(targets):
            there = stage_of(target)
            if there in BASE:
                continue
            if here in BASE or there not in STAGES or STAGES.index(there) > STAGES.index(here):
                found.append(f"{module} -> {target}")
    return found


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"p.plan.a": {"p.files"}, "p.run.b": {"p.plan.a", "p.run.c"}, "p.driver": {"p.report.d"}}, []),
        ({"p.plan.a": {"p.run.b"}}, ["p.plan.a -> p.run.b"]),
        ({"p.analysis.cli": {"p.cli"}}, ["p.analysis.cli -> p.cli"]),
        ({"p.files": {"p.plan.a"}}, ["p.files -> p.plan.a"]),
    ],
)
def test_imports_up(graph, expected):
    assert imports_up(graph) == expected


def test_every_folder_is_a_stage():
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert folders == set(STAGES)


def test_no_folder_imports_a_later_stage():
    wrong = imports_up(build_import_graph(PACKAGE))
    assert not wrong, "imports against the stages' order: " + ", ".join(wrong)


def test_only_the_driver_runs_the_scheduler():
    """Features plug in through run.handlers (Handler, TaskRun, RunView), never the Runner itself."""
    graph = build_import_graph(PACKAGE)
    users = sorted(module for module, imported in graph.items() if "fast_nvcc.run.scheduler" in imported)
    assert users == ["fast_nvcc.driver"]
