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
(with fast_nvcc's own cpu added: the floor of the second compile), and a tighter one where
steps run whole: the soonest any order of the learned compile's own steps, at the seconds each
took there, could end on these cores (:func:`whole_step_floor`).

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
    cores = len(os.sched_getaffinity(0))
    whole_steps: list[tuple[float, float]] = []  # a learned compile: (its run's wall, the best order's)
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
                if keys[name] == "second" and len(records) == 1:
                    best = whole_step_floor(records[0]["steps"], cores=cores)
                    if best is not None:
                        whole_steps.append((records[0]["wall_seconds"], best))
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
    nvcc_cpu, nvcc_wall = statistics.median(cpu["nvcc -t0"]), series["nvcc -t0"].median
    learned_own = statistics.median(own["fast_nvcc, second compile"])
    print("cpu of each variant's process tree (median): "
          + ", ".join(f"{name} {statistics.median(cpu[name]):.2f} s" for name in names))  # fmt: skip
    print(f"floor on {cores} cores: nvcc -t0's cpu / cores = {nvcc_cpu / cores:.2f} s, "
          f"{floor_ratio(nvcc_cpu, cores, nvcc_wall):.2f}x of nvcc -t0's wall; with fast_nvcc's own cpu "
          f"({learned_own:.2f} s a learned compile) {floor_ratio(nvcc_cpu + learned_own, cores, nvcc_wall):.2f}x")  # fmt: skip
    if whole_steps:
        ran, best = statistics.median(w for w, _ in whole_steps), statistics.median(b for _, b in whole_steps)
        print(f"steps run whole, learned compile: its steps ended in {ran:.2f} s (median; fast_nvcc's run, "
              f"from its first step), the best order of the same steps on {cores} cores {best:.2f} s "
              f"({floor_ratio(best, 1, nvcc_wall):.2f}x of nvcc -t0's wall)")  # fmt: skip
    write_json(options.json, {
        "scenario": "pid", "machine": info, "series": {s.name: s.seconds for s in series.values()},
        "cpu": cpu, "own_cpu": own, "cores": cores,
        "whole_steps": whole_steps, "ciccs_started_twice": ciccs_twice, "failed_guess_seconds": lost, "identical": identical,
    })  # fmt: skip
    return 0 if identical else 1


# The steps of pidheavy.cu's learned compile (tool, arch) and those each waits for to end; the
# host compile's assembly takes the fatbinary.
AFTER: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {
    ("gcc -E", None): [], ("gcc -E", "compute_80"): [], ("gcc -E", "compute_90"): [],
    ("cudafe++", None): [("gcc -E", None)],
    ("cc1plus", None): [("cudafe++", None)],
    ("cicc", "compute_80"): [("gcc -E", "compute_80")], ("cicc", "compute_90"): [("gcc -E", "compute_90")],
    ("ptxas", "sm_80"): [("cicc", "compute_80")], ("ptxas", "sm_90"): [("cicc", "compute_90")],
    ("fatbinary", None): [("ptxas", "sm_80"), ("ptxas", "sm_90")],
    ("as", None): [("cc1plus", None), ("fatbinary", None)],
}  # fmt: skip
# ... and those it waits for to start: a cicc starts once cudafe++ has, since the learned
# module_id is written as cudafe++ is spawned (fast_nvcc.guess.module_id).
BESIDE = {("cicc", "compute_80"): [("cudafe++", None)], ("cicc", "compute_90"): [("cudafe++", None)]}


def whole_step_floor(steps: list[dict], *, cores: int) -> float | None:
    """The soonest the learned compile's tool steps, each taking the seconds it took in
    ``steps`` (a FAST_NVCC_LOG record's), could all end on ``cores`` cores if each runs whole
    on one core, in the best order (every order searched, a step starting on the core that
    frees first; orders that cannot beat the best so far are cut).  None where the steps are
    not the ones AFTER names."""
    cost = {(s["tool"], s["arch"]): s["seconds"] for s in steps if s.get("command") and s["state"] == "done"}
    if set(cost) != set(AFTER):
        return None
    best = [sum(cost.values())]

    def search(free: list[float], started: dict, left: float) -> None:
        if len(started) == len(AFTER):
            best[0] = min(best[0], max(end for _, end in started.values()))
            return
        now = min(free)
        core = free.index(now)
        for step, needs in AFTER.items():
            beside = BESIDE.get(step, [])
            if step in started or any(n not in started for n in (*needs, *beside)):
                continue
            ready = max([now, *(started[n][1] for n in needs), *(started[n][0] for n in beside)])
            end = ready + cost[step]
            after = [*free[:core], end, *free[core + 1:]]
            if max(max(after), (sum(after) + left - cost[step]) / cores) < best[0]:
                started[step] = (ready, end)
                search(after, started, left - cost[step])
                del started[step]

    search([0.0] * cores, {}, sum(cost.values()))
    return best[0]


def floor_ratio(cpu: float, cores: int, wall: float) -> float:
    """The soonest a compile of ``cpu`` seconds can end on ``cores`` cores, kept full from its
    first second to its last, as a ratio to a ``wall`` (nvcc -t0's)."""
    return cpu / max(1, cores) / wall


if __name__ == "__main__":
    sys.exit(main())
