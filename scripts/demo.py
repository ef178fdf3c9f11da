#!/usr/bin/env python3
"""Compile examples/demo/particles.cu with nvcc, nvcc -t0 and fast_nvcc; compare and time them.

Prints fast_nvcc's time as a fraction of each (lower is better: 0.80x is 20% less time), as
README does, and says when other processes were using this process's cores during the runs,
since then the times say more about the machine than about fast_nvcc.

Run it through scripts/demo, which sets up the environment first.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "demo" / "particles.cu"
ARCHS = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]  # fmt: skip
TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
# Other processes using a quarter of our cores on average (half a core on 2) move the times
# by more than the run-to-run spread measured on an idle machine (a few percent).
BUSY_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Timing:
    seconds: float
    others_cpu_seconds: float  # CPU time other processes used on our cores meanwhile

    @property
    def others_cores(self) -> float:
        """The cores other processes kept busy, on average, while this ran."""
        return self.others_cpu_seconds / self.seconds if self.seconds > 0 else 0.0


def busy_cpu_seconds(cpus: frozenset[int]) -> float:
    """CPU seconds spent on ``cpus`` so far by everything (steal counts: another guest had
    the core)."""
    per_cpu = psutil.cpu_times(percpu=True)
    return sum(t.user + t.nice + t.system + t.irq + t.softirq + t.steal
               for i, t in enumerate(per_cpu) if i in cpus)  # fmt: skip


def ours_cpu_seconds() -> float:
    """CPU seconds of this process and its children that have ended (every step of a compile
    is reaped by nvcc or fast_nvcc, which this process reaps)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(command: list[str], cwd: Path, *, cpus: frozenset[int]) -> Timing:
    """Run ``command``; its wall time and what other processes used of ``cpus`` meanwhile."""
    busy, ours, start = busy_cpu_seconds(cpus), ours_cpu_seconds(), time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True)
    seconds = time.perf_counter() - start
    others = (busy_cpu_seconds(cpus) - busy) - (ours_cpu_seconds() - ours)
    return Timing(seconds, max(0.0, others))


def busy_warning(timings: list[Timing], *, cores: int, load_before: float) -> str | None:
    """A warning when other processes had a fair share of the cores, before or during the runs."""
    wall = sum(t.seconds for t in timings)
    others = sum(t.others_cpu_seconds for t in timings) / wall if wall > 0 else 0.0
    if others < BUSY_SHARE * cores and load_before < cores:
        return None
    return (f"warning: this machine was busy: other processes used {others:.1f} of its {cores} cores"
            f" during the runs (load average {load_before:.1f} before them); the times above say more"
            " about the machine than about fast_nvcc: run scripts/demo again when it is idle")


def fast_nvcc_command() -> list[str]:
    script = Path(sys.executable).with_name("fast_nvcc")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fast_nvcc"]


def same_outputs(work: Path) -> tuple[bool, bool]:
    same = TEMP_NAME.sub(b"", (work / "plain.o").read_bytes()) == TEMP_NAME.sub(b"", (work / "fast.o").read_bytes())
    deps_same = (work / "plain.d").read_text().replace("plain.o", "X") == (
        work / "fast.d"
    ).read_text().replace("fast.o", "X")
    return same, deps_same


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from fast_nvcc.machine.cpus import usable_cpus
    from fast_nvcc.plan.toolchain import find_nvcc

    nvcc, cpus = find_nvcc(), usable_cpus()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-demo-") as tmp:
        work = Path(tmp)
        shutil.copy(SOURCE, work / SOURCE.name)
        args = ["-c", SOURCE.name, *ARCHS, "-MD"]
        print(f"nvcc:      {nvcc}  ({len(cpus)} cores)")
        print(f"command:   nvcc {' '.join(args)}\n")
        plain = timed([nvcc, *args, "-o", "plain.o", "-MF", "plain.d"], work, cpus=cpus)
        print(f"nvcc        {plain.seconds:6.2f} s")
        threads = timed([nvcc, *args, "-t0", "-o", "t0.o", "-MF", "t0.d"], work, cpus=cpus)
        print(f"nvcc -t0    {threads.seconds:6.2f} s")
        graph = work / "particles.svg" if shutil.which("dot") else work / "particles.dot"
        options = ["--summary", "--graph", str(graph)]
        fast = timed([*fast_nvcc_command(), *options, "--", *args, "-o", "fast.o", "-MF", "fast.d"], work, cpus=cpus)
        print(f"fast_nvcc   {fast.seconds:6.2f} s   {fast.seconds / threads.seconds:.2f}x of nvcc -t0,"
              f" {fast.seconds / plain.seconds:.2f}x of nvcc (lower is better)")  # fmt: skip
        timings = [plain, threads, fast]
        others = sum(t.others_cpu_seconds for t in timings) / sum(t.seconds for t in timings)
        print(f"machine:    other processes used {others:.1f} of {len(cpus)} cores during the runs")
        warning = busy_warning(timings, cores=len(cpus), load_before=load_before)
        if warning:
            print(warning)
        same, deps_same = same_outputs(work)
        print(f"\nobjects identical (temp names masked): {'yes' if same else 'NO'}")
        print(f"depfiles identical:                    {'yes' if deps_same else 'NO'}")
        kept = ROOT / "out" / graph.name
        kept.parent.mkdir(exist_ok=True)
        shutil.copy(graph, kept)
        print(f"execution graph: {os.path.relpath(kept)}")
        return 0 if same and deps_same else 1


if __name__ == "__main__":
    sys.exit(main())
