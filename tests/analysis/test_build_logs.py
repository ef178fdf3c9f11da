"""A build's logs as a user makes them (issue 41): README's two lines, a relative FAST_NVCC_LOG
under a build tool that runs compiles in another directory, and a log appended across a rebuild
read build by build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TOOLCHAINS

from fast_nvcc import analysis
from fast_nvcc.analysis import load_build

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "cmake"
REPO = Path(__file__).parent.parent.parent


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the FAST_NVCC_ variables a developer may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


# -- where a relative FAST_NVCC_LOG goes ----------------------------------------------------------

# What fast_nvcc's command line does with the variable, run as the compile a build tool starts.
RESOLVE = f"{sys.executable} -c 'from fast_nvcc.report.log_path import resolve_log_path as r; print(r(\"log.jsonl\"))'"


@pytest.mark.parametrize(
    "command, inline, where",
    [
        ("FAST_NVCC_LOG=log.jsonl ninja -C build", "", "."),  # ninja moved itself into build/
        ("FAST_NVCC_LOG=log.jsonl ninja -j 1 -C build", "", "."),
        ("cd build && FAST_NVCC_LOG=log.jsonl ninja", "", "build"),  # the user stood in build/
        # the outermost holder moved itself: its directory now counts (/proc has no other)
        ("FAST_NVCC_LOG=log.jsonl sh -c 'cd build && ninja'", "", "build"),
        # set for the compile alone, no ancestor holds it: the compile's own directory
        ("ninja -C build", "FAST_NVCC_LOG=log.jsonl ", "build/sub"),
    ],
)
def test_a_relative_log_is_placed_where_the_build_started(tmp_path, command, inline, where):
    if shutil.which("ninja") is None:
        pytest.skip("ninja is not installed")
    (tmp_path / "build" / "sub").mkdir(parents=True)
    # The compile runs in build/sub, as CMake's Makefiles run each target's compiles.
    (tmp_path / "build" / "build.ninja").write_text(
        f"rule resolve\n  command = cd sub && {inline}{RESOLVE} > ../$out\nbuild out.txt: resolve\n"
    )
    proc = subprocess.run(
        ["sh", "-c", command],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = (tmp_path / "build" / "out.txt").read_text().strip()
    assert printed == str((tmp_path / where / "log.jsonl").resolve())


def test_an_absolute_log_stays_where_it_is(tmp_path):
    from fast_nvcc.report.log_path import resolve_log_path

    assert resolve_log_path(str(tmp_path / "a.jsonl")) == str(tmp_path / "a.jsonl")


def test_analyze_says_where_a_missing_relative_log_is(tmp_path, capsys, monkeypatch):
    build = tmp_path / "build"
    build.mkdir()
    (build / ".ninja_log").write_text("# ninja log v5\n0\t1000\t1\ta.o\tabc\n")
    (build / "build.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert analysis.main(["build/", "build.jsonl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "fast_nvcc: error: build.jsonl: No such file or directory (but build/build.jsonl is:"
    )
    assert len(err.splitlines()) == 1
    assert analysis.main(["build/", "other.jsonl"]) == 2
    assert capsys.readouterr().err == "fast_nvcc: error: other.jsonl: No such file or directory\n"


# -- README's lines on a real build, rebuilt once ----------------------------------------------------


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    """examples/cmake with fast_nvcc as CMake's launcher, built by README's line from the
    directory above ``build/``, then built again after touching reduce.cu: that directory."""
    if not TOOLCHAINS:
        pytest.skip("no nvcc found")
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    top = tmp_path_factory.mktemp("readme")
    shutil.copytree(EXAMPLE, top / "example")
    launcher = f"{sys.executable};-m;fast_nvcc"
    subprocess.run(
        ["cmake", "-S", "example", "-B", "build", "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={TOOLCHAINS[0]}",
         f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"],
        cwd=top, env=clean_env(), check=True, capture_output=True,
    )  # fmt: skip
    for _ in range(2):
        proc = subprocess.run(
            ["sh", "-c", "FAST_NVCC_LOG=build.jsonl cmake --build build"],  # README, as written
            cwd=top, env=clean_env(), capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        os.utime(top / "example" / "src" / "reduce.cu")
    return top


@pytest.mark.nvcc
@pytest.mark.cmake
def test_readmes_two_lines_work_as_written(rebuilt):
    assert (rebuilt / "build.jsonl").is_file() and not (rebuilt / "build" / "build.jsonl").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "fast_nvcc", "analyze", "build/", "build.jsonl"],
        cwd=rebuilt, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fast_nvcc analyze: build/.ninja_log (ninja log v")
    first = proc.stdout.splitlines()[0]
    assert "build 2 of 2, started " in first and ") joined with build.jsonl" in first


@pytest.mark.nvcc
@pytest.mark.cmake
def test_each_build_of_an_appended_log_joins_its_own_records(rebuilt):
    records = [json.loads(line) for line in (rebuilt / "build.jsonl").read_text().splitlines()]
    assert len(records) == 6 and records[-1]["sources"][0].endswith("reduce.cu")
    paths = [str(rebuilt / "build"), str(rebuilt / "build.jsonl")]
    first, second = load_build(paths, build=1), load_build(paths, build=2)
    assert (first.index, first.count) == (1, 2)
    # Every compile of the first build joins its own record, reduce.cu's too, not its rebuild's.
    assert sorted(job.record.time for job in first.jobs if job.record) == sorted(
        r["time"] for r in records[:5]
    )
    assert first.unjoined == 1
    assert [job.record.time for job in second.jobs if job.record] == [records[5]["time"]]
    assert second.unjoined == 5
