"""fast_nvcc runs on every Python its package says it runs on (setup.cfg's ``python_requires``), and
so do its tests, benchmarks and scripts: vermin reads their source for the standard library's
features and the versions that added them.  Python 3.10 lacks ``Popen(process_group=)`` (3.11),
which once made every compile there end in an internal error."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _oldest_python() -> str:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    declared = setup["options"]["python_requires"].strip()
    match = re.fullmatch(r">=\s*(3\.\d+)", declared)
    assert match, f"python_requires {declared!r}: expected '>=3.N'"
    return match.group(1)


def test_no_code_needs_a_newer_python_than_the_package_declares():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "vermin"), "--no-tips", "--violations", f"--target={_oldest_python()}-",
         "fast_nvcc_entry.py", "fast_nvcc", "tests", "benchmarks", "scripts"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
