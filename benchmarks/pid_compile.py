#!/usr/bin/env python3
"""A source whose module_id carries a process id: benchmarks/pidheavy.cu for sm_80 + sm_90.

fast_nvcc's guess of a cicc's module_id always fails there (cudafe++'s id ends in its own pid).
Compares, in one run on one machine: nvcc -t0 (nvcc's best flags for one compile), fast_nvcc's
first compile (no history: it guesses, and the guess fails) and its second compile (the history
knows: no guess).  Prints median wall times and ratios, how long the failed guesses ran before
they were stopped and how many ciccs ran twice (FAST_NVCC_LOG), and whether the objects equal
nvcc's with the process id in the module_id's names masked (nvcc's own two runs differ there).
Also each variant's cpu (its whole process tree) and the floor it sets: nvcc -t0's cpu over the
cores, the soonest any driver that runs nvcc's tools could end, as a ratio to nvcc -t0's wall
(with fast_nvcc's own cpu added: the floor of the second compile).

    python benchmarks/pid_compile.py [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import (
    BENCHMARKS,
    TEMP_NAME,
    Series,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    ratio_table,
    read_log,
    timed,
    today,
    tool_versions,
    write_json,
)
from peers import cpu_of_children

SOURCE = BENCHMARKS / "pidheavy.cu"
TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
# The writer's process id in the module_id's names; with the fatbinary uncompressed it is the only
# difference between two nvcc runs (with compression, every byte after it differs).
PID = re.compile(rb"(_cu_[0-9a-f]{8}_)[0-9]+")


def masked(path: Path) -> bytes:
    return PID.sub(rb"\1PID", TEMP_NAME.sub(b"tmpxft_XXXXXXXX_XXXXXXXX", path.read_bytes()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    options = parser.parse_args()

    nvcc = find_nvcc(options.nvcc)
    args = ["-c", str(SOURCE), *TARGETS, "-compress-mode=none"]
    keys = {"nvcc -t0": "nvcc", "fast_nvcc, first compile": "first", "fast_nvcc, second compile": "second"}
    names = list(keys)
    series = {name: Series(name) for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    own: dict[str, list[float]] = {name: [] for name in names[1:]}
    ciccs_twice = {name: 0 for name in names[1:]}
    lost = {name: 0.0 for name in names[1:]}
    identical = True
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-bench-") as tmp:
        work = Path(tmp)
        fast = [*fast_nvcc_command(), "--nvcc", nvcc, "--"]
        for run in range(options.runs):
            state = work / f"state{run}"  # fresh for each first compile, kept for its second
            for name in names:
                log = work / f"{run}.{keys[name]}.jsonl"
                command = [nvcc, "-t0", *args] if name.startswith("nvcc") else [*fast, *args]
                env = None if name.startswith("nvcc") else fast_nvcc_env(
                    {"FAST_NVCC_LOG": str(log), "FAST_NVCC_CACHE_DIR": str(state)})  # fmt: skip
                out = work / f"{run}.{keys[name]}.o"
                with cpu_of_children() as spent:
                    seconds = timed([*command, "-o", str(out)], cwd=work, env=env)
                series[name].seconds.append(seconds)
                cpu[name].append(spent())
                records = read_log(log)
                if name in own:
                    own[name].append(sum(r.get("own_cpu_seconds") or 0.0 for r in records))
                for record in records:
                    failed = [s for s in record["steps"] if s.get("guess_failed")]
                    ciccs_twice[name] += sum(1 for s in failed if s["tool"] == "cicc" and s.get("guess_lost", 0) > 0)
                    lost[name] += sum(s.get("guess_lost", 0.0) for s in failed)
                print(f"run {run + 1}: {name:26s} {seconds:7.2f} s", file=sys.stderr, flush=True)
            reference = masked(work / f"{run}.nvcc.o")
            identical &= all(masked(work / f"{run}.{keys[n]}.o") == reference for n in names[1:])
        shutil.rmtree(work, ignore_errors=True)

    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print("\n## A source whose module_id carries a process id: pidheavy.cu, sm_80 + sm_90")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}\n")
    print(ratio_table(list(series.values()), baselines=["nvcc -t0"]))
    for name in names[1:]:
        print(f"{name}: {ciccs_twice[name]} ciccs started twice in {options.runs} runs,"
              f" {lost[name]:.2f} s of failed guesses in all")  # fmt: skip
    print(f"objects identical to nvcc -t0's (temp names and the module_id's pid masked): {'yes' if identical else 'NO'}")
    cores = len(os.sched_getaffinity(0))
    nvcc_cpu, nvcc_wall = statistics.median(cpu["nvcc -t0"]), series["nvcc -t0"].median
    learned_own = statistics.median(own["fast_nvcc, second compile"])
    print("cpu of each variant's process tree (median): "
          + ", ".join(f"{name} {statistics.median(cpu[name]):.2f} s" for name in names))  # fmt: skip
    print(f"floor on {cores} cores: nvcc -t0's cpu / cores = {nvcc_cpu / cores:.2f} s, "
          f"{floor_ratio(nvcc_cpu, cores, nvcc_wall):.2f}x of nvcc -t0's wall; with fast_nvcc's own cpu "
          f"({learned_own:.2f} s a learned compile) {floor_ratio(nvcc_cpu + learned_own, cores, nvcc_wall):.2f}x")  # fmt: skip
    write_json(options.json, {
        "scenario": "pid", "machine": info, "series": {s.name: s.seconds for s in series.values()},
        "cpu": cpu, "own_cpu": own, "cores": cores,
        "ciccs_started_twice": ciccs_twice, "failed_guess_seconds": lost, "identical": identical,
    })  # fmt: skip
    return 0 if identical else 1


def floor_ratio(cpu: float, cores: int, wall: float) -> float:
    """The soonest a compile of ``cpu`` seconds can end on ``cores`` cores, kept full from its
    first second to its last, as a ratio to a ``wall`` (nvcc -t0's)."""
    return cpu / max(1, cores) / wall


if __name__ == "__main__":
    sys.exit(main())
