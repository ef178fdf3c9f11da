#!/usr/bin/env python3
"""The cost of collecting the tools' own traces, and the report they give, on a small build.

Builds the sources of tests/data/templates/ (each for two architectures, several compiles at
once, as ninja would) with plain nvcc, nvcc --fdevice-time-trace, fast_nvcc and
fast_nvcc --device-trace, interleaved; prints the wall times, checks that --device-trace leaves
every object as nvcc makes it, and prints `fast_nvcc analyze`'s device report of the last build.

    python benchmarks/device_trace.py [--runs 3] [-j N] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (
    ROOT,
    Series,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    masked,
    ratio_table,
    today,
    tool_versions,
    write_json,
)

SOURCES = sorted((ROOT / "tests" / "data" / "templates").glob("*.cu"))
TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


def build(commands: list[list[str]], *, cwd: Path, env: dict[str, str], jobs: int) -> float:
    """Run the compiles ``jobs`` at a time; the build's wall time."""

    def run(command: list[str]) -> None:
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr.decode(errors='replace')}")

    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(run, commands))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-device-trace-") as tmp:
        work = Path(tmp)
        log = work / "build.jsonl"
        fast = [*fast_nvcc_command(), "--nvcc", nvcc]
        variants = {
            "nvcc": ([nvcc], [], {}),
            "nvcc --fdevice-time-trace": ([nvcc], ["--fdevice-time-trace", "-"], {}),
            "fast_nvcc": ([*fast, "--"], [], {}),
            "fast_nvcc --device-trace": ([*fast, "--device-trace", "--"], [], {"FAST_NVCC_LOG": str(log)}),
        }
        series = {name: Series(name) for name in variants}
        names = list(variants)
        for run in range(options.runs + 1):  # the first round warms the page cache
            for name in names[run % 4 :] + names[: run % 4]:
                prefix, extra, variables = variants[name]
                folder = work / name.replace(" ", "_").replace("-", "")
                folder.mkdir(exist_ok=True)
                if variables:  # the log of the last --device-trace build only
                    log.unlink(missing_ok=True)
                    log.with_suffix(".device.jsonl").unlink(missing_ok=True)
                commands = [[*prefix, "-c", str(s), "-o", f"{s.stem}.o", *TARGETS, *extra] for s in SOURCES]
                seconds = build(commands, cwd=folder, env=fast_nvcc_env(variables), jobs=options.jobs)
                if run:
                    series[name].seconds.append(seconds)
        identical = all(
            masked(work / "nvcc" / f"{s.stem}.o") == masked(work / "fast_nvcc_devicetrace" / f"{s.stem}.o")
            for s in SOURCES
        )
        report = subprocess.run(
            [*fast_nvcc_command(), "analyze", str(log), "--top", "5", "--what-if-template", "heavy",
             "--format", "markdown"],
            env=fast_nvcc_env(), capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        sidecar = log.with_suffix(".device.jsonl").stat().st_size
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## --device-trace: {len(SOURCES)} sources, 2 architectures, -j {options.jobs}, "
          f"median of {options.runs} builds")  # fmt: skip
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}\n")
    print(ratio_table(list(series.values()), baselines=names[:1]))
    print(f"\nobjects with --device-trace identical to nvcc's (temp names masked): {'yes' if identical else 'NO'}")
    print(f"sidecar of the build log: {sidecar} bytes for {len(SOURCES)} compiles\n")
    print(report)
    write_json(options.json, {"scenario": "device_trace", "machine": info,
                              "series": {s.name: s.seconds for s in series.values()},
                              "identical": identical, "sidecar_bytes": sidecar})  # fmt: skip
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
