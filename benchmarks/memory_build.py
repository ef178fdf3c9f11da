#!/usr/bin/env python3
"""Six compiles of benchmarks/heavy.cu (sm_80 + sm_90) started at once inside a memory cgroup:
what a CI runner or `docker --memory` does to a build run with too large a -j.

For each limit (default 1.2 GiB and 1.5 GiB), in a fresh cgroup of that size:

* plain nvcc, the N compiles one after another (the safe way: what MAX_JOBS=1 gives);
* nvcc -t0, all N at once (how many the OOM killer took);
* fast_nvcc, all N at once (the memory budget: docs/memory.md), with FAST_NVCC_LOG.

Every object that was made is compared with plain nvcc's (temp names masked).  Prints walls,
fast_nvcc's wall against the one-after-another nvcc's, the memory waits and OOM kills.  Needs
root (it makes cgroups: benchmarks/memory_cgroup.py).

    python benchmarks/memory_build.py [--limits 1.2,1.5] [--compiles 6] [--cores 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    BENCHMARKS,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    masked,
    read_log,
    today,
    tool_versions,
    write_json,
)
from memory_cgroup import MemoryCgroup

SOURCE = BENCHMARKS / "heavy.cu"
TARGETS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
GIB = 1 << 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--limits", default="1.2,1.5", help="cgroup sizes in GiB, comma-separated")
    parser.add_argument("--compiles", type=int, default=6)
    parser.add_argument("--cores", type=int, default=0, help="run everything under taskset on this many cores")
    parser.add_argument("--skip-t0", action="store_true", help="leave out nvcc -t0 all at once")
    parser.add_argument("--json")
    options = parser.parse_args()

    nvcc = find_nvcc(options.nvcc)
    pin = ["taskset", "-c", f"0-{options.cores - 1}"] if options.cores else []
    results = []
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-memory-bench-") as tmp:
        work = Path(tmp)
        reference = work / "reference.o"
        subprocess.run([nvcc, "-c", str(SOURCE), *TARGETS, "-o", str(reference)], check=True, cwd=work)
        expected = masked(reference)
        for text in options.limits.split(","):
            limit = int(float(text) * GIB)
            row = {"limit_gib": float(text)}
            row["nvcc_serial"] = run_serial(nvcc, pin, limit, work / f"serial-{text}", options.compiles, expected)
            if not options.skip_t0:
                row["nvcc_t0"] = run_at_once([*pin, nvcc, "-t0"], limit, work / f"t0-{text}", options.compiles,
                                             expected, env=None)  # fmt: skip
            log = work / f"fast-{text}.jsonl"
            env = fast_nvcc_env({"FAST_NVCC_LOG": str(log), "FAST_NVCC_CACHE": "0", "FAST_NVCC_HISTORY": "0",
                                 "FAST_NVCC_POOL_DIR": str(work / f"pool-{text}")})  # fmt: skip
            row["fast_nvcc"] = run_at_once([*pin, *fast_nvcc_command(), "--nvcc", nvcc, "--"], limit,
                                           work / f"fast-{text}", options.compiles, expected, env=env)  # fmt: skip
            records = read_log(log) if log.exists() else []
            row["fast_nvcc"]["memory_wait_seconds"] = round(sum(r.get("memory_wait_seconds", 0.0) for r in records), 2)
            steps = [s for r in records for s in r.get("steps", ())]
            row["fast_nvcc"]["memory_stopped_seconds"] = round(sum(s.get("memory_stopped", 0.0) for s in steps), 2)
            row["fast_nvcc"]["evicted"] = sum(1 for s in steps if s.get("memory_evicted"))  # killed by fast_nvcc
            row["fast_nvcc"]["oom_reruns"] = sum(1 for s in steps if s.get("oom_rerun") and not s.get("memory_evicted"))
            row["fast_nvcc"]["step_peaks_mb"] = peaks(records)
            row["ratio_fast_to_serial"] = round(row["fast_nvcc"]["wall"] / row["nvcc_serial"]["wall"], 3)
            results.append(row)
            print_row(row, options.compiles)
    write_json(options.json, {"date": today(), "machine": machine(), "tools": tool_versions(nvcc),
                              "compiles": options.compiles, "cores": options.cores or None, "results": results})  # fmt: skip
    return 0


def run_serial(nvcc: str, pin, limit: int, work: Path, count: int, expected: bytes) -> dict:
    """The N compiles one after another, each in the same cgroup of ``limit`` bytes."""
    work.mkdir()
    with MemoryCgroup(limit) as group:
        started = time.monotonic()
        codes = [
            subprocess.run(group.wrap([*pin, nvcc, "-c", str(SOURCE), *TARGETS, "-o", str(work / f"{i}.o")]),
                           cwd=work, stderr=subprocess.DEVNULL, check=False).returncode
            for i in range(count)
        ]
        wall = time.monotonic() - started
        return outcome(wall, codes, group, work, count, expected)


def run_at_once(command, limit: int, work: Path, count: int, expected: bytes, *, env) -> dict:
    work.mkdir()
    with MemoryCgroup(limit) as group:
        started = time.monotonic()
        procs = [
            subprocess.Popen(group.wrap([*command, "-c", str(SOURCE), *TARGETS, "-o", str(work / f"{i}.o")]),
                             cwd=work, env=env, stderr=subprocess.DEVNULL)
            for i in range(count)
        ]
        codes = [proc.wait() for proc in procs]
        wall = time.monotonic() - started
        return outcome(wall, codes, group, work, count, expected)


def outcome(wall: float, codes, group: MemoryCgroup, work: Path, count: int, expected: bytes) -> dict:
    made = [work / f"{i}.o" for i in range(count) if codes[i] == 0 and (work / f"{i}.o").exists()]
    return {
        "wall": round(wall, 2),
        "finished": len(made),
        "failed": sum(1 for code in codes if code != 0),
        "identical": sum(1 for path in made if masked(path) == expected),
        "oom_kills": group.oom_kills(),
        "peak_mib": group.peak() >> 20,
    }


def peaks(records) -> dict[str, int]:
    found: dict[str, int] = {}
    for record in records:
        for step in record.get("steps", ()):
            if step.get("max_rss_kb"):
                key = f"{step['tool']} {step.get('arch') or ''}".strip()
                found[key] = max(found.get(key, 0), step["max_rss_kb"] * 1024 // 10**6)
    return found


def print_row(row: dict, count: int) -> None:
    print(f"\n{row['limit_gib']} GiB cgroup, {count} compiles of heavy.cu (sm_80 + sm_90):")
    for name in ("nvcc_serial", "nvcc_t0", "fast_nvcc"):
        if name not in row:
            continue
        r = row[name]
        print(f"  {name:12} wall {r['wall']:7.1f} s  finished {r['finished']}/{count}"
              f"  identical {r['identical']}  OOM kills {r['oom_kills']}  cgroup peak {r['peak_mib']} MiB")  # fmt: skip
    fast = row["fast_nvcc"]
    print(f"  fast_nvcc / nvcc one after another: {row['ratio_fast_to_serial']:.2f}x;"
          f" memory waits {fast['memory_wait_seconds']} s; stopped {fast['memory_stopped_seconds']} s;"
          f" steps killed to make room {fast['evicted']}; steps run again after an OOM kill {fast['oom_reruns']}")
    print(f"  step peaks (MB): {fast['step_peaks_mb']}")
    sys.stdout.flush()


if __name__ == "__main__":
    os.chdir(BENCHMARKS)
    sys.exit(main())
