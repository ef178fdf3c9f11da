"""Every Sphinx-style reference to the package names something that exists.

The package was restructured into stage folders once, and references to the old flat modules
stayed behind; a reference read as text is checked by nothing else.  A reference is
``:role:`target``` with an optional leading ``~``.  The target of a ``:mod:`` is a module:
``fast_nvcc.a.b`` absolute, ``.x`` a module or subpackage of the package of the file it is in,
``..x`` of the package above.  The target of a ``:class:``, ``:func:``, ``:meth:``, ``:attr:``
or ``:exc:`` is checked where it is qualified the same ways (``fast_nvcc.`` or a leading dot):
its longest module prefix exists, the next name is defined there, and a name after a class is
one of its members.  Unqualified targets (``:class:`Task```) are not checked: they name whatever
the text beside them means.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from test_imports import PACKAGE, module_name

ROOT = PACKAGE.parent
REFERENCE = re.compile(r":(mod|class|func|meth|attr|exc):`~?([.\w]+)`")


def package_modules(root: Path) -> dict[str, Path]:
    return {module_name(path, root=root): path for path in sorted(root.rglob("*.py"))}


def absolute(target: str, *, package: str | None) -> str:
    """``target`` with its leading dots resolved against ``package`` (None: outside it)."""
    dots = len(target) - len(target.lstrip("."))
    if not dots:
        return target
    if package is None:
        return ""
    base = package.split(".")
    base = base[: len(base) - (dots - 1)]
    return ".".join(base) + "." + target[dots:] if base else ""


def defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module's or class's body binds, with their nodes (under if/try/with too)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).partition(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "handlers", "finalbody"):
                for part in getattr(node, block, []):
                    names.update(defined_names(part.body if isinstance(part, ast.ExceptHandler) else [part]))
    return names


def members(cls: ast.ClassDef) -> set[str]:
    """A class's own names: its body's, and the attributes its methods set on ``self``."""
    found = set(defined_names(cls.body))
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                if target.value.id == "self":
                    found.add(target.attr)
    return found


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def resolves(role: str, target: str, *, modules: dict[str, Path]) -> bool:
    if role == "mod":
        return target in modules
    module = target
    while module and module not in modules:
        module = module.rpartition(".")[0]
    if not module or module == target:
        return False
    names = target[len(module) + 1 :].split(".")
    node = defined_names(parsed(modules[module]).body).get(names[0])
    for name in names[1:]:
        if not isinstance(node, ast.ClassDef) or name not in members(node):
            return False
        node = defined_names(node.body).get(name)
    return node is not None or len(names) > 1


def broken_references(path: Path, *, modules: dict[str, Path], root: Path) -> list[str]:
    """``file:line: :role:`target``` for each reference in ``path`` that names nothing."""
    if path.suffix == ".py" and path.is_relative_to(root):
        name = module_name(path, root=root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    else:
        package = None
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        for role, target in REFERENCE.findall(line):
            qualified = target.startswith((".", root.name + "."))
            if role != "mod" and not qualified:
                continue
            if not resolves(role, absolute(target, package=package), modules=modules):
                found.append(f"{path.relative_to(root.parent)}:{number}: :{role}:`{target}`")
    return found


def test_absolute():
    assert absolute("fast_nvcc.plan", package="fast_nvcc.run") == "fast_nvcc.plan"
    assert absolute(".slots", package="fast_nvcc.machine") == "fast_nvcc.machine.slots"
    assert absolute("..plan.dryrun", package="fast_nvcc.run") == "fast_nvcc.plan.dryrun"
    assert absolute("...x", package="fast_nvcc.run") == ""
    assert absolute(".x", package=None) == ""


def test_broken_references_every_form(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""See :mod:`.sub` and :mod:`.gone`."""\n')
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "tool.py").write_text(
        "class Tool:\n"
        "    kind: str = ''\n"
        "    def __init__(self):\n        self.ready = True\n"
        "    def run(self): ...\n"
        "def helper(): ...\n"
    )
    (package / "sub" / "user.py").write_text(
        "# :mod:`.tool`, :mod:`~pkg.sub.tool`, :mod:`..sub`, :mod:`.user_old`, :mod:`pkg.tool`\n"
        "# :class:`.tool.Tool`, :meth:`pkg.sub.tool.Tool.run`, :attr:`.tool.Tool.ready`\n"
        "# :attr:`.tool.Tool.kind`, :func:`~.tool.helper`, :class:`Unqualified`\n"
        "# :meth:`.tool.Tool.walk`, :func:`.tool.gone`, :class:`.Tool`, :func:`.tool.helper.x`\n"
    )
    modules = package_modules(package)
    found = [
        line
        for path in sorted(package.rglob("*.py"))
        for line in broken_references(path, modules=modules, root=package)
    ]
    assert found == [
        "pkg/__init__.py:1: :mod:`.gone`",
        "pkg/sub/user.py:1: :mod:`.user_old`",
        "pkg/sub/user.py:1: :mod:`pkg.tool`",
        "pkg/sub/user.py:4: :meth:`.tool.Tool.walk`",
        "pkg/sub/user.py:4: :func:`.tool.gone`",
        "pkg/sub/user.py:4: :class:`.Tool`",
        "pkg/sub/user.py:4: :func:`.tool.helper.x`",
    ]


def test_references_name_what_exists():
    modules = package_modules(PACKAGE)
    sources = [*sorted(PACKAGE.rglob("*.py")), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [line for path in sources for line in broken_references(path, modules=modules, root=PACKAGE)]
    assert not broken, "references to nothing:\n" + "\n".join(broken)
