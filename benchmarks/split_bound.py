#!/usr/bin/env python3
"""How close to its floor can a split build end?  A fluid model of one build's FAST_NVCC_LOG.

A split build's floor (te_build.py, cutlass_build.py) is max(the steps' cpu / cores, the longest
compile's own path): every core busy to the end.  But a split cicc runs its front end and its
tail in one thread, and so does its ptxas' parse and its last kernel: near the end of a build
of a few long compiles (TE's seven long sources) some of those one-thread parts are left and
the cores cannot all be busy, whatever the scheduler does.  This replays the build's own steps
in a model with no machine in it:

* each compile is a chain: its preprocessing and cudafe++ (one core), then per split step
  (cicc, ptxas) a one-thread part, a part that runs on up to THREADS cores, another one-thread
  part (the log's ``serial_seconds`` split as measured on TE's seven, 2026-11-29 round 28: a
  cicc's front end min(FRONT, 30%) of them and its tail the rest; a ptxas' parse 3/4, its last
  kernels 1/4); an unsplit step is one-thread; its host compile (and the other steps off the
  chain) is one-core work that may run any time after the preprocessing;
* cores are shared as a fluid, instantly: one-thread parts and each parallel part get a core
  (shared out alike where they outnumber the cores), RESERVE cores go to the host compiles (the
  one with the most left first), and the rest to the parallel parts: **alike** (what a first
  build does: its split steps' costs are unknown and they look alike), **to the longest
  remaining path** on the cores each holds (fast_nvcc's rule once costs are learned:
  core_grants.on_cores), or **in an order** (the first compile takes all it can use, then the
  next): the stub probes' seconds' (what a first build sees seconds in), the most work first,
  and the best of every order; the host compiles get what is left;
* the steps take the cpu they took in the build (the log's), at any width.

It prints the build's wall, its floor, and the model's end under each rule (the best order
from every order up to 7 compiles, a sample beyond), each over the floor.  The model leaves out
what the machine adds (a core granted and idle, steps that slow each other, the time a step
waits for its slot), so the measured wall over the model's end under the build's own rule is
that; and the best order's end over the floor is what the best schedule found of these costs
leaves above it (an upper bound of the best possible, in the model).

    python3 benchmarks/split_bound.py FAST_NVCC_LOG.jsonl [--cores 16] [--threads 16]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cutlass_build import analyze_log

FRONT = 11.0  # a split cicc's front end at most (seconds in one thread): 10.3-11.7 s for TE's long two
PARSE = 0.75  # of a split ptxas' one-thread seconds, its parse before its threads start
RESERVES = (0, 1, 2, 3)  # cores held for the host compiles, each tried
REFINE = 20  # the best orders at the coarse step tried again at the fine one
SAMPLE = 2000  # orders tried where there are more than 7 compiles (7! = 5040 are all tried)


@dataclass
class Compile:
    name: str
    chain: list[tuple[bool, float]]  # (parallel?, cpu seconds), in order
    filler: float  # one-core work off the chain (the host compile), after the first part
    probe: float = 0.0  # its urgent stub probe's seconds (cicc's front end alone): what a first build sees
    # the run's state
    part: int = 0
    left: float = 0.0
    filler_left: float = 0.0
    end: float | None = field(default=None)
    filler_end: float = 0.0

    def reset(self) -> None:
        self.part, self.end, self.filler_left, self.filler_end = 0, None, self.filler, 0.0
        self.left = self.chain[0][1]

    @property
    def parallel(self) -> bool:
        return self.end is None and self.chain[self.part][0]

    def path_on(self, cores: float) -> float:
        """Its remaining one-thread seconds plus its remaining parallel work on ``cores``."""
        rest = [(par, self.left if n == 0 else x) for n, (par, x) in enumerate(self.chain[self.part:])]
        return sum(x for par, x in rest if not par) + sum(x for par, x in rest if par) / cores


def compiles_of(records: Sequence[dict]) -> list[Compile]:
    """Each compile of a build's log as the model's chain (one device chain: a compile's other
    architectures' steps are one-core work off it, as its host compile is)."""
    found = []
    for record in records:
        steps = [s for s in record.get("steps", ()) if s.get("state") == "done" and s.get("cpu_seconds")]
        pre = max((s["cpu_seconds"] for s in steps if s.get("kind") == "preprocess"), default=0.0)
        pre += sum(s["cpu_seconds"] for s in steps if s.get("kind") == "cudafe++")
        arch = max((_target(s) for s in steps if s["tool"] in ("cicc", "ptxas")),
                   key=lambda a: sum(s["cpu_seconds"] for s in steps if _target(s) == a), default=None)  # fmt: skip
        chain: list[tuple[bool, float]] = [(False, pre)]
        on_chain = set()
        for step in steps:
            if step["tool"] not in ("cicc", "ptxas") or _target(step) != arch:
                continue
            on_chain.add(id(step))
            cpu, serial = step["cpu_seconds"], step.get("serial_seconds")
            if serial is None or not step.get("cores"):
                chain.append((False, cpu))
                continue
            serial = min(serial, cpu)
            first = min(FRONT, 0.3 * serial) if step["tool"] == "cicc" else PARSE * serial
            chain += [(False, first), (True, cpu - serial), (False, serial - first)]
        filler = sum(s["cpu_seconds"] for s in steps if id(s) not in on_chain
                     and s.get("kind") not in ("preprocess", "cudafe++") and "stub" not in s["tool"])  # fmt: skip
        name = Path((record.get("sources") or ["?"])[0]).name
        probe = max((s["end"] - s["start"] for s in steps if s["tool"] == "cicc stub"), default=0.0)
        found.append(Compile(name, [part for part in chain if part[1] > 0] or [(False, pre)], filler, probe))
    return found


def _target(step: dict) -> str:
    """A step's GPU generation: a cicc's compute_90 and its ptxas' sm_90 are one chain."""
    return (step.get("arch") or "").rpartition("_")[2]


PATHS = "paths"  # the learned rule: cores to the longest remaining path on the cores held (core_grants.on_cores)


def simulate(compiles: Sequence[Compile], *, cores: int, threads: int, policy: Sequence[int] | str | None,
             reserve: int, dt: float = 0.1) -> float:  # fmt: skip
    """When the last compile ends, the cores of its parallel parts shared as ``policy`` says:
    alike (None), in an order (indices into ``compiles``, first served first), or to the
    longest remaining path on the cores each holds (PATHS)."""
    for c in compiles:
        c.reset()
    rank = {} if policy is None or policy == PATHS else {id(compiles[i]): n for n, i in enumerate(policy)}
    now = 0.0
    while any(c.end is None or c.filler_left > 0 for c in compiles):
        running = [c for c in compiles if c.end is None]
        fillers = [c for c in compiles if c.filler_left > 0 and (c.end is not None or c.part > 0)]
        parallel = [c for c in running if c.parallel]
        serial = len(running) - len(parallel)
        held = min(reserve, len(fillers))
        free = cores - serial - held - len(parallel)
        share = {id(c): 1.0 for c in parallel}
        if free > 0 and parallel:
            if policy is None:
                for c in parallel:
                    share[id(c)] = min(threads, 1.0 + free / len(parallel))
            elif policy == PATHS:
                while free >= 0.25 and (wanting := [c for c in parallel if share[id(c)] < threads]):
                    longest = max(wanting, key=lambda c: c.path_on(share[id(c)]))
                    share[id(longest)] += 0.25
                    free -= 0.25
            else:
                for c in sorted(parallel, key=lambda c: rank[id(c)]):
                    extra = min(threads - 1.0, free)
                    share[id(c)] += extra
                    free -= extra
        busy = serial + held + sum(share.values())
        scale = min(1.0, cores / busy) if busy else 1.0  # more one-thread parts than cores: shared
        spare = max(0.0, cores - busy)
        # the host compiles with the most left first, one core each (as the pool ranks them by path)
        cores_for_fillers, gets = held + spare, {}
        for c in sorted(fillers, key=lambda c: -c.filler_left):
            gets[id(c)] = min(1.0, max(0.0, cores_for_fillers)) * scale
            cores_for_fillers -= 1.0
        for c in running:
            rate = share.get(id(c), 1.0) * scale
            c.left -= rate * dt
            while c.left <= 1e-9 and c.end is None:  # the part ended within dt: the next one runs on
                over = -c.left / rate  # (seconds of dt left after the part's end)
                c.part += 1
                if c.part == len(c.chain):
                    c.end = now + dt - over
                else:
                    rate = rate if c.chain[c.part][0] else min(rate, scale)  # a one-thread part: one core
                    c.left = c.chain[c.part][1] - over * rate
        for c in fillers:
            c.filler_left -= gets[id(c)] * dt
            if c.filler_left <= 0:
                c.filler_end = now + dt + c.filler_left / gets[id(c)]
        now += dt
    return max(max(c.end or 0.0, c.filler_end) for c in compiles)


def bounds(compiles: Sequence[Compile], *, cores: int, threads: int, dt: float = 0.1) -> dict:
    """The model's end under each policy, each at its best reserve for the host compiles, and
    the best order found (and that order)."""
    def end(policy: Sequence[int] | str | None) -> float:
        return min(simulate(compiles, cores=cores, threads=threads, policy=policy, reserve=r, dt=dt) for r in RESERVES)

    n = range(len(compiles))
    found = {"alike": end(None), "paths": end(PATHS),
             "probe": end(sorted(n, key=lambda i: -compiles[i].probe)),
             "work": end(sorted(n, key=lambda i: -sum(x for _, x in compiles[i].chain)))}  # fmt: skip
    orders = list(itertools.permutations(n))
    if len(compiles) > 7:
        orders = random.Random(0).sample(orders, SAMPLE)  # (only for small builds: 8! is 40,320)
    # every order at a coarse step, then the best few again at ``dt``
    coarse = sorted((simulate(compiles, cores=cores, threads=threads, policy=order, reserve=reserve, dt=10 * dt),
                     order, reserve) for order in orders for reserve in RESERVES)  # fmt: skip
    best, best_order = min((simulate(compiles, cores=cores, threads=threads, policy=order, reserve=reserve, dt=dt), order)
                           for _, order, reserve in coarse[:REFINE])  # fmt: skip
    return {**found, "ordered": best, "order": [compiles[i].name for i in best_order]}


ROWS = [("alike", "split steps' cores alike (a first build)"),
        ("paths", "to the longest remaining path on the cores held (the learned rule)"),
        ("probe", "in the order of the stub probes' seconds (what a first build sees)"),
        ("work", "most work first (the costs known)"),
        ("ordered", "the best order of the compiles found")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", help="FAST_NVCC_LOG of one build (JSON lines, one per compile)")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--threads", type=int, default=16, help="--split-compile N: the most cores a split step uses")
    parser.add_argument("--dt", type=float, default=0.1, help="the model's time step (seconds)")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in Path(args.log).read_text().splitlines() if line.strip()]
    if not records:
        print(f"split_bound: error: no records in {args.log}", file=sys.stderr)
        return 1
    wall = max(r["run_start"] + r["wall_seconds"] for r in records) - min(r["run_start"] for r in records)
    floor = analyze_log(records, cores=args.cores)["floor_seconds"]
    compiles = compiles_of(records)
    if len(compiles) > 9:
        print("split_bound: error: the model searches the orders of at most 9 compiles", file=sys.stderr)
        return 1
    found = bounds(compiles, cores=args.cores, threads=args.threads, dt=args.dt)
    print(f"{args.log}: {len(compiles)} compiles on {args.cores} cores")
    print("| | seconds | over the floor |\n|---|---:|---:|")
    print(f"| floor (cpu / cores, longest own path) | {floor:.1f} | 1.00 |")
    for key, label in ROWS:
        print(f"| model, {label} | {found[key]:.1f} | {found[key] / floor:.3f} |")
    print(f"| the build, measured | {wall:.1f} | {wall / floor:.3f} |")
    print(f"best order: {', '.join(found['order'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
