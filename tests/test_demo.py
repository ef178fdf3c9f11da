"""scripts/demo: what it prints is what README prints (fast_nvcc's time as a fraction of
nvcc -t0's and nvcc's, lower is better), and it says when other processes had the cores."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
demo = sys.modules["demo"] = importlib.util.module_from_spec(SPEC)  # (dataclasses look it up there)
SPEC.loader.exec_module(demo)


def test_another_process_on_our_cores_is_seen(tmp_path):
    """A process spinning on one of our cores while the demo times a command that sleeps: the
    demo counts about a core of others' time (more if the machine is busy anyway), and warns."""
    cpu = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        timing = demo.timed(["sleep", "1.5"], tmp_path, cpus=frozenset({cpu}))
    finally:
        spinner.kill()
        spinner.wait()
    assert timing.others_cores > 0.6, timing
    assert "this machine was busy" in demo.busy_warning([timing], cores=1, load_before=0.0)


@pytest.mark.parametrize(("others", "load", "busy"), [(0.1, 0.3, False), (0.6, 0.3, True), (0.1, 2.5, True)])
def test_the_warning_counts_others_against_the_cores(others, load, busy):
    timing = demo.Timing(10.0, others * 10.0)
    assert (demo.busy_warning([timing], cores=2, load_before=load) is not None) is busy


@pytest.mark.nvcc
@pytest.mark.side_by_side  # the printed form and the objects, not the times: beside other tests (pyproject.toml)
def test_the_demo_prints_what_readme_prints(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py")], capture_output=True, text=True,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines, number = proc.stdout.splitlines(), re.compile(r"\d+(\.\d+)?")
    fast = next(line for line in lines if line.startswith("fast_nvcc "))
    assert "x of nvcc -t0," in fast and "x of nvcc (lower is better)" in fast, fast
    assert any(line.startswith("nvcc -t0 ") for line in lines)
    assert any(line.startswith("machine:    other processes used ") for line in lines)
    assert "objects identical (temp names masked): yes" in proc.stdout
    # README's sample is the demo's output, numbers aside.
    readme = (ROOT / "README.md").read_text()
    sample = readme[readme.index("\n```\nnvcc ") + 5 :].split("```", 1)[0]
    def shape(line: str) -> str:
        return " ".join(number.sub("N", line).split())

    assert [line for line in sample.splitlines() if shape(line) not in {shape(printed) for printed in lines}] == []


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs an nvcc on PATH")
def test_the_demos_set_up_leaves_pypis_cuda_out_where_an_nvcc_is_found(tmp_path):
    """scripts/demo's set-up, in a fresh virtual environment: fast_nvcc and its dependencies,
    not the 346 MB of PyPI's CUDA toolchain the demo never uses when nvcc is on PATH, and it says
    what it installed and why."""
    venv = tmp_path / "venv"
    env = {**os.environ, "FAST_NVCC_SETUP": "demo", "FAST_NVCC_VENV": str(venv), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "-c", "set -euo pipefail; source scripts/setup-env; python -c 'import fast_nvcc'"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not PyPI's CUDA toolchain: an nvcc is already here" in proc.stderr
    assert list(venv.glob("lib/python*/site-packages/psutil")) and not list(venv.glob("lib/python*/site-packages/nvidia"))
