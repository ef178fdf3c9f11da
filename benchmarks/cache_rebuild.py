#!/usr/bin/env python3
"""The per-step cache (--cache) on benchmarks/heavy.cu for eight targets:

1. cold, then an unchanged rebuild (the bar: at least 5x faster than cold);
2. one more architecture than the cached build (heavy.cu, and reduce.cu, which uses no CCCL);
3. a host-only flag change (-Xcompiler -O1 -> -O2);
4. an edit to a host-only function: cicc reruns, its PTX is unchanged, every ptxas hits.

Each row: wall time, hits/misses per tool (from FAST_NVCC_LOG), the ratio to that scenario's
cold compile; every object is checked against plain nvcc's (temp names masked).

    python benchmarks/cache_rebuild.py [--json out.json]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    BENCHMARKS,
    EIGHT_TARGETS,
    ROOT,
    fast_nvcc_command,
    fast_nvcc_env,
    find_nvcc,
    machine,
    masked,
    read_log,
    timed,
    today,
    tool_versions,
    write_json,
)

HOST_EDIT = "\nint host_only_helper(int x) { return 3 * x + 1; }\n"
SEVEN_TARGETS = EIGHT_TARGETS[:6] + EIGHT_TARGETS[8:]  # without sm_89


class Runner:
    def __init__(self, nvcc: str, work: Path) -> None:
        self.nvcc = nvcc
        self.work = work
        self.log = work / "log.jsonl"
        self.rows: list[dict] = []
        self.identical = True

    def fast(self, args: list[str], cache: Path) -> tuple[float, dict]:
        self.log.unlink(missing_ok=True)
        env = fast_nvcc_env({"FAST_NVCC_CACHE_DIR": str(cache), "FAST_NVCC_LOG": str(self.log)})
        seconds = timed([*fast_nvcc_command(), "--nvcc", self.nvcc, "--cache", "--", *args, "-o", "fast.o"],
                        cwd=self.work, env=env)  # fmt: skip
        (record,) = read_log(self.log)
        return seconds, record.get("cache", {}).get("tools", {})

    def check(self, args: list[str]) -> None:
        # -t0 changes nvcc's speed, not its output.
        subprocess.run([self.nvcc, "-t0", *args, "-o", "plain.o"], cwd=self.work, check=True, capture_output=True)
        self.identical &= masked(self.work / "plain.o") == masked(self.work / "fast.o")

    def scenario(self, name: str, before: list[str], after: list[str], *, edit=None, source: Path | None = None) -> None:
        cache = self.work / f"cache-{len(self.rows)}"
        if source is not None:
            shutil.copy(source, self.work / source.name)
        cold, _ = self.fast(before, cache)
        if edit:
            edit()
        warm, tools = self.fast(after, cache)
        self.check(after)
        self.rows.append({"scenario": name, "cold": cold, "warm": warm, "tools": tools})
        print(f"{name:48s} cold {cold:6.2f} s  then {warm:6.2f} s  {fmt_tools(tools)}", file=sys.stderr, flush=True)


def fmt_tools(tools: dict) -> str:
    return ", ".join(f"{t} {c['hits']}/{c['hits'] + c['misses']}" for t, c in tools.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--targets", type=int, choices=(2, 8), default=8, help="8: the issue's set; 2: for 2 cores")
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    after = EIGHT_TARGETS if options.targets == 8 else EIGHT_TARGETS[2:6]
    before = SEVEN_TARGETS if options.targets == 8 else EIGHT_TARGETS[2:4]
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-cache-bench-") as tmp:
        work = Path(tmp)
        run = Runner(nvcc, work)
        heavy = ["-c", "heavy.cu", *after]
        run.scenario("unchanged rebuild", heavy, heavy, source=BENCHMARKS / "heavy.cu")
        run.scenario("one more architecture (heavy.cu, CCCL)", ["-c", "heavy.cu", *before], heavy)
        reduce = ROOT / "examples" / "cmake" / "src"
        shutil.copy(reduce / "common.cuh", work / "common.cuh")
        run.scenario("one more architecture (reduce.cu, no CCCL)", ["-c", "reduce.cu", *before],
                     ["-c", "reduce.cu", *after], source=reduce / "reduce.cu")  # fmt: skip
        run.scenario("host-only flag -Xcompiler -O1 -> -O2", [*heavy, "-Xcompiler", "-O1"], [*heavy, "-Xcompiler", "-O2"])

        def edit_host() -> None:
            with open(work / "heavy.cu", "a") as handle:
                handle.write(HOST_EDIT)

        run.scenario("host-only function edited", heavy, heavy, edit=edit_host)
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## The per-step cache: heavy.cu, {len(after) // 2} -gencode targets (reduce.cu where noted)")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}\n")
    print("| scenario | cold s | then s | cold / then | hits / steps per tool |")
    print("|---|---:|---:|---:|---|")
    for row in run.rows:
        print(f"| {row['scenario']} | {row['cold']:.2f} | {row['warm']:.2f} | {row['cold'] / row['warm']:.1f}x "
              f"| {fmt_tools(row['tools'])} |")  # fmt: skip
    print(f"\nevery object identical to plain nvcc's (temp names masked): {'yes' if run.identical else 'NO'}")
    write_json(options.json, {"scenario": "cache", "machine": info, "rows": run.rows, "identical": run.identical})
    return 0 if run.identical else 1


if __name__ == "__main__":
    sys.exit(main())
