"""No module, class or function of the package grows past what a reader takes in at once.

The limits are issue 38's: a file of 500 lines, a class of 250, a function of 80.  A class or a
function spans its node's lines (``end_lineno - lineno + 1``: its decorators left out, its
docstring and comments in); a file counts every line.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_imports import PACKAGE

FILE_LINES = 500
CLASS_LINES = 250
FUNCTION_LINES = 80


def oversized(path: Path, *, root: Path) -> list[str]:
    """``file:line kind name: N lines`` for each part of ``path`` over its limit."""
    text = path.read_text()
    where = path.relative_to(root.parent)
    found = []
    lines = len(text.splitlines())
    if lines > FILE_LINES:
        found.append(f"{where}: file: {lines} lines")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.ClassDef):
            kind, limit = "class", CLASS_LINES
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind, limit = "function", FUNCTION_LINES
        else:
            continue
        span = node.end_lineno - node.lineno + 1
        if span > limit:
            found.append(f"{where}:{node.lineno}: {kind} {node.name}: {span} lines")
    return found


def test_oversized_measures_each_kind(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "fits.py").write_text("def fits():\n" + "    x = 1\n" * (FUNCTION_LINES - 1))
    (package / "big.py").write_text(
        "class Big:\n"
        + "    def long(self):\n"
        + "        x = 1\n" * FUNCTION_LINES  # the method: one line over
        + "    y = 1\n" * (CLASS_LINES - FUNCTION_LINES)  # the class: two over
        + "z = 1\n" * (FILE_LINES - CLASS_LINES - 1)  # the file: one over
    )
    assert oversized(package / "fits.py", root=package) == []
    assert sorted(oversized(package / "big.py", root=package)) == [
        f"pkg/big.py: file: {FILE_LINES + 1} lines",
        f"pkg/big.py:1: class Big: {CLASS_LINES + 2} lines",
        f"pkg/big.py:2: function long: {FUNCTION_LINES + 1} lines",
    ]


def test_no_part_of_the_package_is_oversized():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in oversized(path, root=PACKAGE)]
    assert not found, "over the size limits:\n" + "\n".join(found)
