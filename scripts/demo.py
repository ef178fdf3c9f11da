#!/usr/bin/env python3
"""Compile examples/demo/particles.cu with plain nvcc and with fast_nvcc; compare and time them.

Run it through scripts/demo, which sets up the environment first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "demo" / "particles.cu"
ARCHS = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]  # fmt: skip
TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True)
    return time.perf_counter() - start


def main() -> int:
    from fast_nvcc.plan.toolchain import find_nvcc

    nvcc = find_nvcc()
    fast_nvcc = shutil.which("fast_nvcc") or "fast_nvcc"
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-demo-") as tmp:
        work = Path(tmp)
        shutil.copy(SOURCE, work / SOURCE.name)
        args = ["-c", SOURCE.name, *ARCHS, "-MD"]
        print(f"nvcc:      {nvcc}")
        print(f"command:   nvcc {' '.join(args)}\n")
        plain = timed([nvcc, *args, "-o", "plain.o", "-MF", "plain.d"], work)
        print(f"plain nvcc  {plain:6.2f} s")
        graph = work / "particles.svg" if shutil.which("dot") else work / "particles.dot"
        fast = timed(
            [fast_nvcc, "--summary", "--graph", str(graph), "--", *args, "-o", "fast.o", "-MF", "fast.d"],
            work,
        )
        print(f"fast_nvcc   {fast:6.2f} s   ({plain / fast:.2f}x)")
        same = TEMP_NAME.sub(b"", (work / "plain.o").read_bytes()) == TEMP_NAME.sub(
            b"", (work / "fast.o").read_bytes()
        )
        deps_same = (work / "plain.d").read_text().replace("plain.o", "X") == (
            work / "fast.d"
        ).read_text().replace("fast.o", "X")
        print(f"\nobjects identical (temp names masked): {'yes' if same else 'NO'}")
        print(f"depfiles identical:                    {'yes' if deps_same else 'NO'}")
        kept = ROOT / "out" / graph.name
        kept.parent.mkdir(exist_ok=True)
        shutil.copy(graph, kept)
        print(f"execution graph: {os.path.relpath(kept)}")
        return 0 if same and deps_same else 1


if __name__ == "__main__":
    sys.exit(main())
