#!/usr/bin/env python3
"""One heavy compile: benchmarks/heavy.cu (Thrust/CUB) for eight targets.

Compares, in one run on one machine: plain nvcc, nvcc -t0, nvcc -t0 --split-compile 0, and
fast_nvcc, alone and with --split-compile 0 among nvcc's arguments; prints median wall times,
ratios against plain nvcc and against the best nvcc flags, and fast_nvcc's own critical path
(from its step times, FAST_NVCC_LOG).  Each fast_nvcc object is checked against the nvcc object
of the same flags (temp names masked): --split-compile changes cicc's and ptxas's output, so
fast_nvcc never adds it on its own, and with it the fair comparison is nvcc's own split run.

    python benchmarks/heavy_compile.py [--runs 3] [--targets 8|2] [--json out.json]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import (
    BENCHMARKS,
    EIGHT_TARGETS,
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

SOURCE = BENCHMARKS / "heavy.cu"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", type=int, choices=(2, 8), default=8, help="8: the issue's set; 2: a quick check")
    parser.add_argument("--fast-options", default="", help="extra fast_nvcc options, space-separated")
    parser.add_argument("--no-plain", action="store_true", help="leave plain nvcc out (its 4x is known; saves time)")
    parser.add_argument("--logs", help="copy fast_nvcc's FAST_NVCC_LOG files here")
    parser.add_argument("--json")
    options = parser.parse_args()

    nvcc = find_nvcc(options.nvcc)
    targets = EIGHT_TARGETS if options.targets == 8 else EIGHT_TARGETS[2:6]
    args = ["-c", str(SOURCE), *targets]
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-bench-") as tmp:
        work = Path(tmp)
        log = work / "fast_nvcc.jsonl"
        learned_state, first_state = work / "state", work / "first-state"
        fast = [*fast_nvcc_command(), "--nvcc", nvcc, *options.fast_options.split(), "--"]
        variants = {
            "nvcc": ([nvcc, *args], None),
            "nvcc -t0": ([nvcc, "-t0", *args], None),
            "nvcc -t0 --split-compile 0": ([nvcc, "-t0", "--split-compile", "0", *args], None),
            # A first compile: no cost history, no learned .fatbin.c placeholder (a fresh state
            # directory before every run), as on a new machine or a CI runner.
            "fast_nvcc, first compile": (
                [*fast, *args],
                fast_nvcc_env({"FAST_NVCC_LOG": str(work / "first.jsonl"), "FAST_NVCC_CACHE_DIR": str(first_state)}),
            ),
            "fast_nvcc": (
                [*fast, *args],
                fast_nvcc_env({"FAST_NVCC_LOG": str(log), "FAST_NVCC_CACHE_DIR": str(learned_state)}),
            ),
            "fast_nvcc, nvcc args with --split-compile 0": (
                [*fast, "--split-compile", "0", *args],
                fast_nvcc_env({"FAST_NVCC_LOG": str(work / "split.jsonl"), "FAST_NVCC_CACHE_DIR": str(learned_state)}),
            ),
        }
        if options.no_plain:
            del variants["nvcc"]
        series = {name: Series(name) for name in variants}
        names = list(variants)
        # "fast_nvcc" stands for a compile whose build has been seen: an untimed compile of the
        # same source learns its costs first.
        warm_command, warm_env = variants["fast_nvcc"]
        timed([*warm_command, "-o", str(work / "warm-up.o")], cwd=work, env=warm_env)
        log.unlink(missing_ok=True)
        for run in range(options.runs):
            order = names[run % len(names) :] + names[: run % len(names)]
            for name in order:
                command, env = variants[name]
                shutil.rmtree(first_state, ignore_errors=True)
                out = work / f"{name.replace(' ', '_')}.{run}.o"
                seconds = timed([*command, "-o", str(out)], cwd=work, env=env)
                series[name].seconds.append(seconds)
                print(f"run {run + 1}: {name:28s} {seconds:7.2f} s", file=sys.stderr, flush=True)
        runs = range(options.runs)
        reference = "nvcc_-t0" if options.no_plain else "nvcc"  # -t0's object is plain nvcc's
        identical = all(masked(work / f"{reference}.{r}.o") == masked(work / f"{name}.{r}.o")
                        for r in runs for name in ("fast_nvcc", "fast_nvcc,_first_compile"))
        if options.logs:
            Path(options.logs).mkdir(parents=True, exist_ok=True)
            for found in work.glob("*.jsonl"):
                shutil.copy(found, Path(options.logs) / f"heavy-{found.name}")
        # nvcc's own --split-compile output can differ from run to run (measured on 16 cores:
        # two runs, two objects of different sizes); then no comparison with it means anything.
        nvcc_split = {masked(work / f"nvcc_-t0_--split-compile_0.{r}.o") for r in runs}
        ours_split = {masked(work / f"fast_nvcc,_nvcc_args_with_--split-compile_0.{r}.o") for r in runs}
        split_reproducible = len(nvcc_split) == 1
        identical_split = ours_split == nvcc_split if split_reproducible else None
        records = read_log(log)
        first_records = read_log(work / "first.jsonl")
        split_records = read_log(work / "split.jsonl")

    critical = statistics.median(r["critical_path_seconds"] for r in records) if records else float("nan")
    first_critical = statistics.median(r["critical_path_seconds"] for r in first_records) if first_records else float("nan")
    split_runs = sum(any(step["tool"] == "as" for step in r["steps"]) for r in records)
    split_critical = statistics.median(r["critical_path_seconds"] for r in split_records) if split_records else float("nan")
    ours = series["fast_nvcc"]
    ours_split = series["fast_nvcc, nvcc args with --split-compile 0"]
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## One heavy compile: heavy.cu, {len(targets) // 2} -gencode targets")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}\n")
    print(ratio_table(list(series.values()), baselines=[n for n in names if n.startswith("nvcc")]))
    print(f"\nfast_nvcc's critical path (its own step times): {critical:.2f} s;"
          f" fast_nvcc wall / critical path = {ours.median / critical:.2f}")  # fmt: skip
    first = series["fast_nvcc, first compile"]
    print(f"first compile: critical path {first_critical:.2f} s; wall / critical path = "
          f"{first.median / first_critical:.2f}; against the learned compile: {first.median / ours.median:.2f}x")
    print(f"with --split-compile 0: critical path {split_critical:.2f} s; wall / critical path = "
          f"{ours_split.median / split_critical:.2f}; against nvcc -t0 --split-compile 0: "
          f"{ours_split.median / series['nvcc -t0 --split-compile 0'].median:.2f}x")  # fmt: skip
    print(f"host compile split around fatbinary (cc1plus early, as after): {split_runs} of {len(records)} fast_nvcc runs")
    split_verdict = {True: "yes", False: "NO", None: f"n/a, nvcc's own split runs gave {len(nvcc_split)} different objects"}
    print(f"fast_nvcc's object identical to nvcc's in every run (temp names masked): {'yes' if identical else 'NO'}; "
          f"with --split-compile 0, to nvcc -t0 --split-compile 0's: {split_verdict[identical_split]}")
    write_json(options.json, {
        "scenario": "heavy", "machine": info, "targets": len(targets) // 2,
        "series": {s.name: s.seconds for s in series.values()},
        "critical_path_seconds": critical, "first_critical_path_seconds": first_critical, "split_critical_path_seconds": split_critical,
        "identical": identical, "identical_split": identical_split,
    })  # fmt: skip
    return 0 if identical and identical_split is not False else 1


if __name__ == "__main__":
    sys.exit(main())
