"""docs/options.md against the code: every option of fast_nvcc's parsers and every FAST_NVCC_*
variable the code reads is named there, and nothing it names is gone from the code.  (It fell
behind once: a removed direct mode and FAST_NVCC_DIRECT still documented, FAST_NVCC_MEMORY
missing, a pool directory `-v` contradicted.)"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from fast_nvcc.cache.cli import build_parser as cache_parser
from fast_nvcc.cli import build_parser
from fast_nvcc.learn.history import build_parser as history_parser
from fast_nvcc.machine.pool_place import pool_directory

ROOT = Path(__file__).resolve().parent.parent
OPTIONS_MD = ROOT / "docs" / "options.md"
VARIABLE = re.compile(r"^FAST_NVCC_[A-Z0-9_]+$")


def section(title: str) -> str:
    """The text of options.md's ``## title`` section."""
    text = OPTIONS_MD.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def first_cells(text: str) -> str:
    """The first column of the section's tables."""
    return "\n".join(line.split("|")[1] for line in text.splitlines() if line.startswith("| "))


def options_named(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", " ".join(re.findall(r"`([^`]*)`", text))))


def variables_read(package: Path) -> set[str]:
    """Every string literal in the package that is a whole FAST_NVCC_* name (what env.get,
    environ[...] and the helpers that take a variable's name are given), except ``__all__``'s."""
    found = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        exported = {id(element) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    for element in ast.walk(node.value)}  # fmt: skip
        found |= {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and isinstance(node.value, str) and VARIABLE.match(node.value) and id(node) not in exported}  # fmt: skip
    return found


def test_every_option_is_documented_and_every_documented_option_exists():
    code = set(build_parser()._option_string_actions)  # argparse has no public list
    documented = options_named(first_cells(section("Options (before `--`)")))
    assert code - documented == set(), "options missing from docs/options.md"
    assert documented - code == set(), "docs/options.md names options the parser no longer has"


@pytest.mark.parametrize(("command", "parser"), [("cache", cache_parser), ("history", history_parser)])
def test_every_subcommand_option_is_documented(command, parser):
    rows = [line for line in section("Subcommands").splitlines() if line.startswith(f"| `fast_nvcc {command} ")]
    documented = options_named(first_cells("\n".join(rows)))
    code = set(parser()._option_string_actions) - {"-h", "--help"}
    assert code == documented


def test_every_analyze_option_is_in_analyze_md_and_every_one_there_exists():
    from fast_nvcc.analysis.cli import build_parser as analyze_parser

    text = (ROOT / "docs" / "analyze.md").read_text()
    start = text.index("\n## Options\n")
    table = first_cells(text[start : text.index("\n## ", start + 1)])
    code = set(analyze_parser()._option_string_actions) - {"-h", "--help"}
    assert code == options_named(table)


def test_every_variable_is_documented_and_every_documented_variable_is_read():
    code = variables_read(ROOT / "fast_nvcc")
    assert {"FAST_NVCC_MEMORY", "FAST_NVCC_POOL_DIR", "FAST_NVCC_NVCC"} <= code  # the scan sees env.get(...)
    table = set(re.findall(r"FAST_NVCC_[A-Z0-9_]+", first_cells(section("Environment"))))
    anywhere = set(re.findall(r"FAST_NVCC_[A-Z0-9_]+", OPTIONS_MD.read_text()))
    assert code - table == set(), "variables the code reads that docs/options.md's table lacks"
    assert anywhere - code == set(), "variables docs/options.md names that the code no longer reads"


def test_the_documented_pool_directory_is_the_one_used(tmp_path):
    """With no XDG_RUNTIME_DIR, the pool goes to /dev/shm (what `-v` prints), as options.md says."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    used = pool_directory({"XDG_RUNTIME_DIR": str(tmp_path / "absent")})
    assert used == f"/dev/shm/fast_nvcc-slots-{os.getuid()}"
    assert "else `/dev/shm/fast_nvcc-slots-$UID`" in section("Environment")
