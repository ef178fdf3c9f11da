#!/usr/bin/env python3
"""Small compiles: a trivial one-architecture .cu through plain nvcc, nvcc -t0 and fast_nvcc.

fast_nvcc must never be slower here: what it adds (Python start-up, imports, the extra
`nvcc --dryrun`) is measured separately and printed, next to the medians of many runs.

    python benchmarks/small_compile.py [--runs 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
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

SOURCE = BENCHMARKS / "small.cu"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    args = ["-c", str(SOURCE), "-arch=sm_80"]
    env = fast_nvcc_env()
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-small-") as tmp:
        work = Path(tmp)
        variants = {
            "nvcc": ([nvcc, *args], None),
            "nvcc -t0": ([nvcc, "-t0", *args], None),
            "fast_nvcc": ([*fast_nvcc_command(), "--nvcc", nvcc, "--", *args], env),
        }
        series = {name: Series(name) for name in variants}
        for name, (command, run_env) in variants.items():  # warm the page cache
            timed([*command, "-o", str(work / "warm.o")], cwd=work, env=run_env)
        names = list(variants)
        for run in range(options.runs):
            for name in names[run % 3 :] + names[: run % 3]:
                command, run_env = variants[name]
                out = work / f"{name.replace(' ', '_')}.o"
                series[name].seconds.append(timed([*command, "-o", str(out)], cwd=work, env=run_env))
        identical = masked(work / "nvcc.o") == masked(work / "fast_nvcc.o")
        # What fast_nvcc adds before the first step starts.
        startup = statistics.median(
            timed([*fast_nvcc_command(), "--version"], cwd=work, env=env) for _ in range(options.runs)
        )
        python = statistics.median(timed([sys.executable, "-c", "pass"], cwd=work) for _ in range(options.runs))
        imports = statistics.median(
            timed([sys.executable, "-c", "import fast_nvcc.cli, fast_nvcc.driver"], cwd=work, env=env)
            for _ in range(options.runs)
        )
        dryrun = statistics.median(timed([nvcc, "--dryrun", *args], cwd=work) for _ in range(options.runs))
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## Small compiles: small.cu, one architecture, median of {options.runs} runs")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}\n")
    print(ratio_table(list(series.values()), baselines=names[:2]))
    print(
        f"\nfast_nvcc's own costs (medians): python start {python * 1000:.0f} ms, python + imports "
        f"{imports * 1000:.0f} ms, `fast_nvcc --version` {startup * 1000:.0f} ms, "
        f"`nvcc --dryrun` {dryrun * 1000:.0f} ms"
    )
    print(f"fast_nvcc's object identical to nvcc's (temp names masked): {'yes' if identical else 'NO'}")
    write_json(options.json, {
        "scenario": "small", "machine": info, "series": {s.name: s.seconds for s in series.values()},
        "python_ms": python * 1000, "imports_ms": imports * 1000, "dryrun_ms": dryrun * 1000,
        "identical": identical,
    })  # fmt: skip
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
