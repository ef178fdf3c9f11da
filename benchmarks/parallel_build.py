#!/usr/bin/env python3
"""Inside a parallel build: benchmarks/tree (16 CUDA sources of uneven weight x 4 architectures)
built with -jN, each variant from clean:

* CMake + Ninja: plain nvcc; nvcc -t0; fast_nvcc as CMAKE_CUDA_COMPILER_LAUNCHER (machine-wide
  slot pool), twice: with no cost history, then with what the first build learned;
* GNU make: nvcc -t0 --jobserver, and fast_nvcc (a jobserver client), from a Makefile whose
  recipes are marked '+' so that make 4.3 hands them its jobserver pipe.  (CMake's own
  Makefiles do not mark them: under make 4.3, nvcc --jobserver then stops with "GNU Jobserver
  support requested, but an error occurred".)

Prints wall times and ratios against plain nvcc and the best nvcc variant; checks that every
object fast_nvcc built equals nvcc's (temp names masked).

    python benchmarks/parallel_build.py [--jobs N] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    BENCHMARKS,
    Series,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    masked,
    ratio_table,
    timed,
    today,
    tool_versions,
    write_json,
)

TREE = BENCHMARKS / "tree"


def configure(build: Path, *, generator: str, nvcc: str, archs: str, flags: str = "", launcher: str | None = None,
              env=None) -> None:  # fmt: skip
    command = ["cmake", "-S", str(TREE), "-B", str(build), "-G", generator, f"-DCMAKE_CUDA_COMPILER={nvcc}",
               f"-DCMAKE_CUDA_FLAGS={flags}", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]  # fmt: skip
    if launcher:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}")
    subprocess.run(command, check=True, capture_output=True, env=env)


def write_makefile(directory: Path, compiler: list[str], archs: list[str]) -> None:
    """The tree's compiles as a Makefile, with the flags CMake passes for the same architectures."""
    directory.mkdir(parents=True, exist_ok=True)
    gencode = " ".join(f"--generate-code=arch=compute_{a},code=[compute_{a},sm_{a}]" for a in archs)
    sources = sorted((TREE / "src").glob("*.cu"))
    objects = [f"{s.name}.o" for s in sources]
    lines = [f"all: {' '.join(objects)}", "", "clean:", f"\trm -f {' '.join(objects)}", ""]
    for source, obj in zip(sources, objects):
        lines += [f"{obj}: {source}", f"\t+{' '.join(compiler)} -I{TREE / 'src'} {gencode} -x cu -c {source} -o {obj}", ""]
    (directory / "Makefile").write_text("\n".join(lines))


def make(directory: Path, jobs: int, env=None) -> float:
    subprocess.run(["make", "-C", str(directory), "clean"], check=True, capture_output=True, env=env)
    return timed(["make", "-C", str(directory), f"-j{jobs}"], cwd=directory, env=env)


def build(build_dir: Path, jobs: int, env=None) -> float:
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "clean"], check=True, capture_output=True, env=env)
    return timed(["cmake", "--build", str(build_dir), "-j", str(jobs)], cwd=build_dir, env=env)


def objects(build_dir: Path) -> dict[str, bytes]:
    return {p.name: masked(p) for p in build_dir.rglob("*.cu.o")}


def label(name: str) -> str:
    return name.split(",")[0].replace(" ", "_").replace("(", "").replace(")", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--archs", default="75;80;89;90", help="CMAKE_CUDA_ARCHITECTURES (default: 4 of them)")
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    jobs = options.jobs
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-tree-") as tmp:
        work = Path(tmp)
        env = fast_nvcc_env({"FAST_NVCC_CACHE_DIR": str(work / "fast_nvcc-cache"),
                             "FAST_NVCC_POOL_DIR": str(work / "pool")})  # fmt: skip
        launcher = ";".join(fast_nvcc_command())
        archs = options.archs.split(";")
        cmake_setups = {
            "nvcc (ninja)": dict(generator="Ninja"),
            "nvcc -t0 (ninja)": dict(generator="Ninja", flags="-t0"),
            "fast_nvcc (ninja), no history": dict(generator="Ninja", launcher=launcher),
            "fast_nvcc (ninja), learned costs": dict(generator="Ninja", launcher=launcher),
        }
        make_setups = {
            "nvcc -t0 --jobserver (make)": [nvcc, "-t0", "--jobserver"],
            "fast_nvcc (make)": [*fast_nvcc_command(), "--nvcc", nvcc, "--"],
        }
        series = {}
        built = {}
        for name, setup in cmake_setups.items():
            directory = work / label(name)
            if not directory.exists():
                configure(directory, nvcc=nvcc, archs=options.archs, env=env, **setup)
            seconds = build(directory, jobs, env=env)
            series[name] = Series(name, [seconds])
            built[name] = objects(directory)
            print(f"{name:36s} {seconds:7.2f} s", file=sys.stderr, flush=True)
        for name, compiler in make_setups.items():
            directory = work / label(name)
            write_makefile(directory, compiler, archs)
            seconds = make(directory, jobs, env=env)
            series[name] = Series(name, [seconds])
            built[name] = objects(directory)
            print(f"{name:36s} {seconds:7.2f} s", file=sys.stderr, flush=True)
        reference = built["nvcc (ninja)"]
        identical = all(built[n] == reference for n in cmake_setups if n.startswith("fast_nvcc"))
        identical = identical and built["fast_nvcc (make)"] == built["nvcc -t0 --jobserver (make)"]
        assert len(reference) == 16 and len(built["fast_nvcc (make)"]) == 16
    info = {**machine(), **tool_versions(nvcc), "date": today(), "make": _version(["make", "--version"]),
            "ninja": _version(["ninja", "--version"])}  # fmt: skip
    count = len(options.archs.split(";"))
    print(f"\n## Inside a parallel build: benchmarks/tree, 16 sources x {count} architectures, -j{jobs}")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['make']}, "
          f"ninja {info['ninja']}, {info['date']}\n")  # fmt: skip
    baselines = ["nvcc (ninja)", "nvcc -t0 (ninja)", "nvcc -t0 --jobserver (make)"]
    print(ratio_table(list(series.values()), baselines=baselines))
    print(f"\nevery fast_nvcc object identical to nvcc's (temp names masked): {'yes' if identical else 'NO'}")
    write_json(options.json, {"scenario": "parallel-build", "machine": info, "jobs": jobs,
                              "series": {s.name: s.seconds for s in series.values()}, "identical": identical})  # fmt: skip
    return 0 if identical else 1


def _version(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
