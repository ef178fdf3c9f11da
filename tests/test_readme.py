"""README's commands run as written: every ```sh block, in README's order, in one copy of
examples/cmake (the project README says they run in), with ```make blocks written to the
Makefile they show.  A block README marks with ``<!-- not run by tests/test_readme.py: WHY -->``
(setting up this checkout, installing into the Python environment, torch, TransformerEngine)
is left out; there are few and each says why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SKIP = re.compile(r"<!-- not run by tests/test_readme\.py: (?P<why>[^>]+\S) -->")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    body: str
    line: int
    skipped: str  # why the test leaves it out ("" if it runs)


def read_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` with their language and the skip marker on the line above."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = SKIP.fullmatch(before.strip())
        blocks.append(Block(match["lang"], match["body"], text.count("\n", 0, match.start()) + 1,
                            marker["why"] if marker else ""))  # fmt: skip
    return blocks


def test_the_blocks_are_read_with_their_markers():
    text = "a\n<!-- not run by tests/test_readme.py: needs torch -->\n```sh\npip x\n```\n\n```make\nall:\n```\n"
    assert read_blocks(text) == [Block("sh", "pip x\n", 3, "needs torch"), Block("make", "all:\n", 7, "")]


def test_few_blocks_are_left_out_and_each_says_why():
    blocks = [b for b in read_blocks(README.read_text()) if b.lang in ("sh", "make")]
    left_out = [b for b in blocks if b.skipped]
    assert len(left_out) <= 6, [b.line for b in left_out]
    assert all(len(b.skipped) > 10 for b in left_out)
    assert len(blocks) - len(left_out) >= 6


@pytest.mark.nvcc
@pytest.mark.cmake
@pytest.mark.side_by_side  # the commands' exit codes and outputs only: beside other tests (pyproject.toml)
def test_readmes_commands_run_as_written(tmp_path):
    for tool in ("nvcc", "cmake", "ninja", "make", "ccache"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: README's commands use it")
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "cmake", project)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "CCACHE_DIR": str(tmp_path / "ccache")}  # fmt: skip
    ran = []
    for block in read_blocks(README.read_text()):
        if block.skipped or block.lang not in ("sh", "make"):
            continue
        if block.lang == "make":
            assert block.body.startswith("# Makefile\n"), f"README.md:{block.line}: a make block names its file"
            (project / "Makefile").write_text(block.body)
            continue
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.body], cwd=project, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, f"README.md:{block.line} failed:\n{block.body}\n{proc.stdout}\n{proc.stderr}"
        ran.append((block.body, proc.stdout + proc.stderr))
    commands = "".join(body for body, _ in ran)
    for expected in ("cmake --build", "make -j", "fast_nvcc analyze", "fast_nvcc history", "ccache"):
        assert expected in commands
    # README: "Did fast_nvcc run? With --summary each compile prints an account".
    cmake_output = next(output for body, output in ran if "fast_nvcc;--summary" in body)
    assert re.search(r"^fast_nvcc: saxpy\.cu -> \S+/saxpy\.cu\.o .*\(exit 0\)$", cmake_output, re.MULTILINE), cmake_output
    assert (project / "costs.json").exists() and (project / "saxpy.o").exists()
