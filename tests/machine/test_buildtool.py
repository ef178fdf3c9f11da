"""Seeing the build tool above a compile: its -j, and whether it runs that many jobs.

The saturation tests run the real ninja and make: two jobs that meet (each waits for the other's
file), one of which asks from inside the build whether its tool is full.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fast_nvcc.machine.buildtool import Saturation, find_build_tool, job_limit

ROOT = Path(__file__).parent.parent.parent

PROBE = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from fast_nvcc.machine.buildtool import Saturation, find_build_tool
deadline = time.monotonic() + 30
while not os.path.exists("held") and time.monotonic() < deadline:
    time.sleep(0.01)
tool = find_build_tool()
answer = {{"kind": tool and tool.kind, "jobs": tool and tool.jobs, "saturated": Saturation(tool)()}}
with open("answer.json", "w") as handle:
    json.dump(answer, handle)
open("probed", "w").close()
"""
# The other job: shows it runs, then waits (at most 30 s) until the probe has looked.
HOLD = "touch held; i=0; while [ ! -e probed ] && [ $$i -lt 3000 ]; do sleep 0.01; i=$$((i+1)); done; touch hold.out"  # $$: a $ in ninja and make


def test_job_limits_as_ninja_and_make_read_them(monkeypatch):
    assert job_limit("ninja", ["ninja", "-j16"]) == 16
    assert job_limit("ninja", ["ninja", "-C", "build", "-j", "8", "all"]) == 8
    assert job_limit("ninja", ["ninja", "-j0"]) is None  # unlimited
    assert job_limit("ninja", ["ninja", "-j4", "-j6"]) == 6  # the last one counts
    cpus = len(os.sched_getaffinity(0))
    assert job_limit("ninja", ["ninja"]) == {1: 2, 2: 3}.get(cpus, cpus + 2)  # ninja's default
    assert job_limit("make", ["make"]) == 1
    assert job_limit("make", ["make", "-j"]) is None
    assert job_limit("make", ["make", "-j", "all"]) is None  # a bare -j, then a target
    assert job_limit("make", ["make", "-j", "4"]) == 4
    assert job_limit("make", ["make", "--jobs=3", "-k"]) == 3


def test_no_build_tool_above_a_plain_process():
    assert find_build_tool() is None or find_build_tool().kind in ("ninja", "make")  # pytest under make/ninja
    assert Saturation(None)() is False


def probe(tmp_path: Path, argv: list[str], build_file: str, text: str) -> dict:
    (tmp_path / "probe.py").write_text(PROBE.format(root=str(ROOT)))
    (tmp_path / build_file).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True, timeout=120, env=env)
    return json.loads((tmp_path / "answer.json").read_text())


NINJA = """rule probe
  command = {python} probe.py && touch probe.out
rule hold
  command = {hold}
build probe.out: probe
build hold.out: hold
"""


@pytest.mark.parametrize("jobs, saturated", [(2, True), (3, False), (0, False)])
def test_ninja_running_as_many_jobs_as_its_j_is_full(tmp_path, jobs, saturated):
    if shutil.which("ninja") is None:
        pytest.skip("ninja is not installed")
    text = NINJA.format(python=sys.executable, hold=HOLD)
    answer = probe(tmp_path, ["ninja", f"-j{jobs}"], "build.ninja", text)
    assert answer == {"kind": "ninja", "jobs": jobs or None, "saturated": saturated}


MAKEFILE = """all: probe.out hold.out
probe.out:
\t{python} probe.py && touch probe.out
hold.out:
\t{hold}
"""


@pytest.mark.parametrize("jobs, saturated", [(2, True), (4, False)])
def test_make_running_as_many_jobs_as_its_j_is_full(tmp_path, jobs, saturated):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    text = MAKEFILE.format(python=sys.executable, hold=HOLD)
    answer = probe(tmp_path, ["make", f"-j{jobs}"], "Makefile", text)
    assert answer == {"kind": "make", "jobs": jobs, "saturated": saturated}
