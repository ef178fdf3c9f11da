#!/usr/bin/env python3
"""Run every benchmark in turn and gather their tables in one markdown file.

    python benchmarks/run_all.py --out DIR [--heavy-runs 2] [--small-runs 15] [--only NAME ...]

Each benchmark's table goes to DIR/NAME.md and its JSON to DIR/NAME.json; DIR/all.md has all of
them.  Everything runs on this machine, one benchmark at a time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--heavy-runs", type=int, default=2)
    parser.add_argument("--small-runs", type=int, default=15)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--quick", action="store_true", help="fewer targets, for a 2-core machine")
    options = parser.parse_args()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    quick = options.quick
    benchmarks = {
        "small": ["small_compile.py", "--runs", str(options.small_runs)],
        "heavy": ["heavy_compile.py", "--runs", str(options.heavy_runs), *(["--targets", "2"] if quick else [])],
        "cache": ["cache_rebuild.py", *(["--repeat", "1"] if quick else [])],
        "parallel": ["parallel_build.py", *(["--archs", "75;80"] if quick else [])],
        "device": ["device_trace.py", *(["--runs", "1"] if quick else [])],
    }
    status = 0
    tables = []
    for name, command in benchmarks.items():
        if options.only and name not in options.only:
            continue
        start = time.monotonic()
        proc = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:], "--json", str(out / f"{name}.json")],
                              capture_output=True, text=True)  # fmt: skip
        (out / f"{name}.md").write_text(proc.stdout)
        (out / f"{name}.log").write_text(proc.stderr)
        print(f"{name}: exit {proc.returncode} in {time.monotonic() - start:.0f} s", flush=True)
        print(proc.stdout, flush=True)
        if proc.returncode:
            print(proc.stderr[-3000:], flush=True)
            status = 1
        tables.append(proc.stdout)
    (out / "all.md").write_text("\n".join(tables))
    return status


if __name__ == "__main__":
    sys.exit(main())
