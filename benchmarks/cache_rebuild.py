#!/usr/bin/env python3
"""The per-step cache (--cache), on a medium source
(benchmarks/tree/src/unit02_reduce_medium.cu: a Thrust reduction and its one header) for two
targets, or heavy.cu (--source heavy) for eight:

1. cold, then an unchanged rebuild: every step a hit;
2. the header touched without a change to its content: every step a hit;
3. the header changed (a host-only function added): cicc reruns, its PTX is the same, so every
   ptxas hits;
4. one more architecture (examples/cmake/src/reduce.cu, which uses no CCCL; with CCCL every
   step misses: its namespace names the architectures).

Each scenario starts from an empty cache directory that knows the split host compile's
placeholder (learned once per machine and fatbinary, fast_nvcc/hostsplit.py), as any cache
directory does after its first compile, and no step costs (history.sqlite, which decides the
order of the steps); so does the compile without --cache it is compared with.

Each row: wall time, how the compile was served (hits/misses per tool, from
FAST_NVCC_LOG), the ratio to that scenario's cold compile; plain nvcc and `nvcc --dryrun` are
timed in the same run; every object is checked against plain nvcc's (temp names masked).
fast_nvcc runs with Python's bytecode cache allowed, as an installed package has it.

    python benchmarks/cache_rebuild.py [--source medium|heavy] [--targets 2|8] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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

HOST_EDIT = "\ninline int host_only_helper(int x) { return 3 * x + 1; }\n"
TREE = BENCHMARKS / "tree" / "src"
SOURCES = {
    "medium": (TREE / "unit02_reduce_medium.cu", TREE / "reduce_medium.cuh"),
    "heavy": (BENCHMARKS / "heavy.cu", None),
}


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
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        seconds = timed([*fast_nvcc_command(), "--nvcc", self.nvcc, "--cache", "--", *args, "-o", "fast.o"],
                        cwd=self.work, env=env)  # fmt: skip
        (record,) = read_log(self.log)
        return seconds, record.get("cache", {})

    def check(self, args: list[str]) -> None:
        # -t0 changes nvcc's speed, not its output.
        subprocess.run([self.nvcc, "-t0", *args, "-o", "plain.o"], cwd=self.work, check=True, capture_output=True)
        self.identical &= masked(self.work / "plain.o") == masked(self.work / "fast.o")

    def uncached(self, args: list[str]) -> float:
        """fast_nvcc without --cache: what a cold --cache compile must not be slower than.  Its
        state directory, like each scenario's, knows the placeholder and no step costs."""
        state = self.work / "state-uncached"
        shutil.copytree(self.work / "cache-teach" / "fatbin-templates", state / "fatbin-templates")
        env = fast_nvcc_env({"FAST_NVCC_CACHE_DIR": str(state)})
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return timed([*fast_nvcc_command(), "--nvcc", self.nvcc, "--", *args, "-o", "fast.o"], cwd=self.work, env=env)

    def teach(self) -> None:
        """One small compile, so that the split host compile's placeholder is known."""
        for name in ("saxpy.cu", "common.cuh"):
            shutil.copy(ROOT / "examples" / "cmake" / "src" / name, self.work / name)
        self.fast(["-c", "saxpy.cu", "-arch=sm_80"], self.work / "cache-teach")

    def scenario(self, name: str, before: list[str], after: list[str], *, edit=None, repeat: int = 1) -> None:
        cache = self.work / f"cache-{len(self.rows)}"
        shutil.copytree(self.work / "cache-teach" / "fatbin-templates", cache / "fatbin-templates")
        cold, _ = self.fast(before, cache)
        if edit:
            edit()
        runs = []
        for _ in range(repeat):
            runs.append(self.fast(after, cache))
        warm = statistics.median(s for s, _ in runs)
        served = runs[-1][1]
        self.check(after)
        self.rows.append({"scenario": name, "cold": cold, "warm": warm, "served": served})
        print(f"{name:52s} cold {cold:6.2f} s  then {warm:6.2f} s  {fmt_served(served)}", file=sys.stderr, flush=True)


def fmt_served(cache: dict) -> str:
    return ", ".join(f"{t} {c['hits']}/{c['hits'] + c['misses']}" for t, c in cache.get("tools", {}).items())


def time_plain(nvcc: str, work: Path, args: list[str]) -> tuple[float, float]:
    plain = timed([nvcc, *args, "-o", "plain.o"], cwd=work)
    dryruns = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([nvcc, "--dryrun", *args, "-o", "plain.o"], cwd=work, capture_output=True, check=True)
        dryruns.append(time.perf_counter() - start)
    return plain, statistics.median(dryruns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc")
    parser.add_argument("--source", choices=sorted(SOURCES), default="medium")
    parser.add_argument("--targets", type=int, choices=(2, 8), default=2, help="2: sm_80, sm_86; 8: the issue's set")
    parser.add_argument("--repeat", type=int, default=3, help="rebuilds timed per scenario (median)")
    parser.add_argument("--json")
    options = parser.parse_args()
    nvcc = find_nvcc(options.nvcc)
    after = EIGHT_TARGETS if options.targets == 8 else EIGHT_TARGETS[2:6]
    before = EIGHT_TARGETS[:6] + EIGHT_TARGETS[8:] if options.targets == 8 else EIGHT_TARGETS[2:4]
    source, header = SOURCES[options.source]
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-cache-bench-") as tmp:
        work = Path(tmp)
        shutil.copy(source, work / source.name)
        if header is not None:
            shutil.copy(header, work / header.name)
        compile_args = ["-c", source.name, *after]
        plain, dryrun = time_plain(nvcc, work, compile_args)
        print(f"plain nvcc {plain:.2f} s, nvcc --dryrun {dryrun:.3f} s", file=sys.stderr, flush=True)
        run = Runner(nvcc, work)
        run.teach()
        uncached = run.uncached(compile_args)
        print(f"fast_nvcc without --cache {uncached:.2f} s", file=sys.stderr, flush=True)
        run.scenario("unchanged rebuild", compile_args, compile_args, repeat=options.repeat)
        if header is not None:
            touched = work / header.name

            def touch() -> None:
                os.utime(touched)

            run.scenario("header touched, content unchanged", compile_args, compile_args, edit=touch,
                         repeat=options.repeat)  # fmt: skip

            def edit_host() -> None:
                with open(touched, "a") as handle:
                    handle.write(HOST_EDIT)

            run.scenario("header changed (host-only function added)", compile_args, compile_args, edit=edit_host)
        reduce = ROOT / "examples" / "cmake" / "src"
        shutil.copy(reduce / "common.cuh", work / "common.cuh")
        shutil.copy(reduce / "reduce.cu", work / "reduce.cu")
        time.sleep(0.1)
        run.scenario("one more architecture (reduce.cu, no CCCL)", ["-c", "reduce.cu", *before],
                     ["-c", "reduce.cu", *after])  # fmt: skip
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## The cache: {source.name}, {len(after) // 2} -gencode targets (reduce.cu where noted)")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['date']}")
    print(f"plain nvcc: {plain:.2f} s; fast_nvcc without --cache: {uncached:.2f} s; nvcc --dryrun: {dryrun:.3f} s"
          "\n")  # fmt: skip
    print("| scenario | cold s | then s | cold / then | served by |")
    print("|---|---:|---:|---:|---|")
    for row in run.rows:
        print(f"| {row['scenario']} | {row['cold']:.2f} | {row['warm']:.2f} | {row['cold'] / row['warm']:.1f}x "
              f"| {fmt_served(row['served'])} |")  # fmt: skip
    print(f"\nevery object identical to plain nvcc's (temp names masked): {'yes' if run.identical else 'NO'}")
    write_json(options.json, {"scenario": "cache", "machine": info, "plain": plain, "uncached": uncached, "dryrun": dryrun,
                              "rows": run.rows, "identical": run.identical})  # fmt: skip
    return 0 if run.identical else 1


if __name__ == "__main__":
    sys.exit(main())
