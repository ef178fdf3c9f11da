"""fast_nvcc as CMAKE_CUDA_COMPILER_LAUNCHER on examples/cmake, with Ninja and with Make."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TOOLCHAINS
from helpers import mask

pytestmark = [pytest.mark.nvcc, pytest.mark.cmake, pytest.mark.side_by_side]  # outputs and rebuilds only: beside other tests (pyproject.toml)

EXAMPLE = Path(__file__).parent.parent / "examples" / "cmake"
GENERATORS = {"ninja": "Ninja", "make": "Unix Makefiles"}


def launcher() -> str:
    """The installed console script, as a user would name it; else python -m fast_nvcc."""
    script = Path(sys.executable).parent / "fast_nvcc"
    return str(script) if script.exists() else f"{sys.executable};-m;fast_nvcc"


def configure(source: Path, build: Path, generator: str, nvcc: str, *, use_launcher: bool) -> None:
    command = [
        "cmake", "-S", str(source), "-B", str(build), "-G", generator,
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
    ]  # fmt: skip
    if use_launcher:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher()}")
    subprocess.run(command, check=True, capture_output=True)


def build(build_dir: Path) -> str:
    proc = subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", "2", "-v"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def objects(build_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(build_dir)): p.read_bytes()
        for p in build_dir.rglob("*.cu.o")
    }




def needs(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_cmake_launcher_build(nvcc, tmp_path, generator):
    # Each generator with one toolchain (Make with the first, Ninja with the second) covers
    # both of each in half of CI's time; with one toolchain, both generators use it.
    if nvcc != TOOLCHAINS[sorted(GENERATORS).index(generator) % len(TOOLCHAINS)]:
        pytest.skip("each generator runs with one toolchain: both are covered")
    needs("cmake")
    needs("ninja" if generator == "ninja" else "make")
    source = tmp_path / "example"
    shutil.copytree(EXAMPLE, source)
    plain, fast = tmp_path / "plain", tmp_path / "fast"
    configure(source, plain, GENERATORS[generator], nvcc, use_launcher=False)
    configure(source, fast, GENERATORS[generator], nvcc, use_launcher=True)
    build(plain)
    log = build(fast)
    assert "fast_nvcc" in log  # the compiles went through the launcher

    expected, got = objects(plain), objects(fast)
    assert sorted(got) == sorted(expected) and len(got) == 5
    for name, data in expected.items():
        assert mask(got[name]) == mask(data), name
    assert (fast / "example").exists()

    # The depfiles work: touching the header rebuilds every object, touching one source
    # rebuilds only its object.
    stamps = {name: (fast / name).stat().st_mtime_ns for name in got}
    time.sleep(1.1)
    (source / "src" / "saxpy.cu").touch()
    build(fast)
    changed = {n for n in got if (fast / n).stat().st_mtime_ns != stamps[n]}
    assert changed == {n for n in got if n.endswith("saxpy.cu.o")}

    stamps = {name: (fast / name).stat().st_mtime_ns for name in got}
    time.sleep(1.1)
    (source / "src" / "common.cuh").touch()
    build(fast)
    changed = {n for n in got if (fast / n).stat().st_mtime_ns != stamps[n]}
    assert changed == set(got)
