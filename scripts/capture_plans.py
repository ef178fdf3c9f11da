#!/usr/bin/env python3
"""Capture ``nvcc --dryrun`` transcripts of tests/data/src as unit-test fixtures.

Each fixture is tests/data/plans/NAME.txt: a JSON header line (the arguments, the working
directory and nvcc's version) followed by the dryrun's stderr, verbatim.

    python scripts/capture_plans.py [--nvcc PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "data" / "src"
PLANS = ROOT / "tests" / "data" / "plans"

GENCODE_3 = [
    "-gencode", "arch=compute_75,code=sm_75",
    "-gencode", "arch=compute_80,code=sm_80",
    "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
]  # fmt: skip

CASES: dict[str, list[str]] = {
    "compile_1arch": ["-c", "kernel.cu", "-Iinclude", "-arch=sm_80", "-o", "kernel.o"],
    "compile_3arch_md": [
        "-c", "kernel.cu", "-Iinclude", *GENCODE_3, "-MD", "-MT", "kernel.o", "-MF", "kernel.o.d",
        "-o", "kernel.o",
    ],  # fmt: skip
    "compile_3arch": ["-c", "kernel.cu", "-Iinclude", *GENCODE_3, "-o", "kernel.o"],
    "link_executable": ["kernel.cu", "main.cu", "-Iinclude", "-arch=sm_80", "-o", "app"],
    "library": ["-lib", "kernel.cu", "-Iinclude", "-arch=sm_80", "-o", "libkernel.a"],
    "fatbin": ["-fatbin", "kernel.cu", "-Iinclude", "-arch=sm_80", "-gencode", "arch=compute_90,code=compute_90"],
    "threads": ["-t", "2", "-c", "kernel.cu", "-Iinclude", "-gencode", "arch=compute_80,code=sm_80",
                "-gencode", "arch=compute_90,code=sm_90"],  # fmt: skip
    "dlink": ["-dlink", "rdc_a.o", "rdc_b.o", "-arch=sm_80", "-o", "dlink.o"],
    "deps_stdout": ["-M", "kernel.cu", "-Iinclude"],
    "two_sources_mmd": ["-c", "kernel.cu", "main.cu", "-Iinclude", "-arch=sm_80", "-MMD"],
    "ptx_check": ["-ptx", "kernel.cu", "-Iinclude", "-arch=sm_90", "-o", "kernel.ptx"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc", default=shutil.which("nvcc"))
    options = parser.parse_args()
    version = subprocess.run([options.nvcc, "--version"], capture_output=True, text=True, check=True)
    release = version.stdout.strip().splitlines()[-1]
    PLANS.mkdir(parents=True, exist_ok=True)
    for name, args in CASES.items():
        proc = subprocess.run(
            [options.nvcc, "--dryrun", *args], cwd=SOURCES, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(f"{name}: nvcc --dryrun failed:\n{proc.stderr}", file=sys.stderr)
            return 1
        header = {"args": args, "cwd": str(SOURCES), "nvcc": release, "tmpdir": os.environ.get("TMPDIR", "/tmp")}
        (PLANS / f"{name}.txt").write_text(json.dumps(header) + "\n" + proc.stderr)
        print(f"wrote {name}.txt")
    write_older_nvcc_shape()
    return 0


def write_older_nvcc_shape() -> None:
    """nvcc before 12.8 compiled the device side first and let the first cicc generate the
    module_id, which cudafe++ then read (the shape PyTorch's fast_nvcc handled).  Derived from
    the 13.0 plan of compile_3arch by moving the host steps after the device ones."""
    header, body = (PLANS / "compile_3arch.txt").read_text().split("\n", 1)
    lines = body.splitlines(keepends=True)
    settings = [l for l in lines if not l.startswith('#$ gcc') and "=" in l.split()[1] and
                not l.startswith(('#$ cudafe++', '#$ "$CICC_PATH', '#$ ptxas', '#$ fatbinary', '#$ rm'))]
    commands = [l for l in lines if l not in settings]
    host_e, cudafe, *device, fatbinary, rm, host_c = commands
    device[1] = device[1].replace(" --module_id_file_name", " --gen_module_id_file --module_id_file_name")
    cudafe = cudafe.replace(" --gen_module_id_file", "")
    reordered = settings + device + [fatbinary, rm, host_e, cudafe, host_c]
    meta = json.loads(header)
    meta["note"] = "derived from compile_3arch: the shape of nvcc before 12.8"
    (PLANS / "older_nvcc_module_id.txt").write_text(json.dumps(meta) + "\n" + "".join(reordered))
    print("wrote older_nvcc_module_id.txt")


if __name__ == "__main__":
    sys.exit(main())
