"""What a rule for split steps' cores could do with a build's own costs (issue 39, round 37): a
replay of a FAST_NVCC_LOG's compiles on the machine's cores, in ticks of 0.05 s.

Each compile is a chain: its cicc and its ptxas, then its fatbinary and the host's ``as``. A split
step (one with ``cores_at``) is a serial front (its threads ran one at a time until its grant first
widened for a second or more, at most its ``serial_seconds``), parallel work (its cpu less its
serial seconds) that up to 16 cores shorten, and a serial tail (the rest of its serial seconds:
what the grant's looks saw its threads run one at a time); another step is its cpu on one core. Its host compile (cc1plus) is one core of its cpu, from when it started in the build,
before that ``as``. Each tick the cores go out one at a time to the best ask:

* ``spread`` (fast_nvcc's rule): a split step holding k cores asks at its compile's work left on
  one core times ``s + (1 - s) / k`` (core_grants.on_cores, s = 0.37), so that the cores spread and
  the paths end together;
* ``longest`` (FAST_NVCC_LONGEST_FIRST=1): the same at k = its 16 threads, however many it holds;

a host compile asks at its own cpu left (and its ``as``). With ``--keep-one`` every running split
step keeps a core, as in fast_nvcc (a running cicc is never stopped). Each rule also runs with
ranks in error: each compile's times ``X ** u``, u uniform in [-1, 1], 8 draws (``--error X``).
Prints each rule's end over the work / cores (the issue's floor where the work binds).

    python benchmarks/split_schedule.py build.jsonl [--cores 16] [--keep-one] [--error 1.5]
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field

TICK = 0.05
SERIAL = 0.37  # split_option.SERIAL_SHARE["cicc"]
THREADS = 16


@dataclass
class Compile:
    name: str
    start: float  # its cicc's start in the build
    chain: list[list[float]]  # [seconds, cores it may use]: 1 for a serial part, THREADS for parallel work
    host: float  # its host compile's cpu
    host_start: float
    done: list[list[float]] = field(default_factory=list)

    def work_left(self) -> float:
        return sum(seconds for seconds, _ in self.chain)


def phases(step: dict) -> list[list[float]]:
    """A step's serial front, parallel work and serial tail, from its grant's cores over time."""
    cpu = step["cpu_seconds"] or step["seconds"]
    if "cores_at" not in step:
        return [[cpu, 1]]
    spans = [(t, cores, following[0]) for (t, cores), following in zip(step["cores_at"], step["cores_at"][1:] + [[step["end"], 0]])]
    wide = [(t, end) for t, cores, end in spans if cores > 1 and end - t >= 1.0]
    if not wide:
        return [[cpu, 1]]
    # Its serial seconds are what the grant's looks saw its threads run one at a time (a step held
    # to one core by its rank is not serial there); the front is what ran before it first widened.
    serial = step.get("serial_seconds") or (wide[0][0] - step["start"]) + (step["end"] - max(end for _, end in wide))
    front = min(wide[0][0] - step["start"], serial)
    return [[front, 1], [max(0.0, cpu - serial), THREADS], [serial - front, 1]]


def compiles(path: str) -> list[Compile]:
    found = []
    with open(path) as log:
        records = [json.loads(line) for line in log if line.strip()]
    for record in records:
        offset = record["run_start"]
        steps = {}
        for step in record["steps"]:
            if step["state"] == "done":
                steps.setdefault(step["tool"], step)
        chain = phases(steps["cicc"]) + phases(steps["ptxas"])
        chain.append([steps["fatbinary"]["seconds"] + steps.get("as", {"seconds": 0.0})["seconds"], 1])
        host = steps.get("cc1plus")
        found.append(Compile(record["sources"][0].rsplit("/", 1)[-1], steps["cicc"]["start"] + offset, chain,
                             host["cpu_seconds"] if host else 0.0, (host["start"] if host else 0.0) + offset))  # fmt: skip
    first = min(c.start for c in found) if found else 0.0
    for c in found:
        c.start, c.host_start = c.start - first, c.host_start - first
    return found


def replay(build: list[Compile], *, cores: int, rule: str, keep_one: bool = False,
           error: dict[str, float] | None = None) -> float:  # fmt: skip
    """When the build ends with ``rule`` deciding each tick's cores."""
    build = [Compile(c.name, c.start, [list(p) for p in c.chain], c.host, c.host_start) for c in build]
    now = 0.0
    while any(c.chain for c in build) or any(c.host > 1e-9 for c in build):
        wants = []  # (compile, "chain" or "host")
        for c in build:
            if c.chain and now >= c.start and not (len(c.chain) == 1 and c.host > 1e-9):
                wants.append((c, "chain"))  # (the last link, as, waits for the host compile)
            if c.host > 1e-9 and now >= c.host_start:
                wants.append((c, "host"))
        held = {(id(c), part): 0 for c, part in wants}

        def ask(c: Compile, part: str, held: dict = held) -> float:
            k = held[id(c), part]
            if part == "host":
                return -1.0 if k else c.host + c.chain[-1][0]
            if k >= c.chain[0][1]:
                return -1.0
            width = THREADS if rule == "longest" else max(1, k)
            return c.work_left() * (error or {}).get(c.name, 1.0) * (SERIAL + (1 - SERIAL) / width)

        if keep_one:
            for c, part in sorted(wants, key=lambda w: -ask(*w)):
                if part == "chain" and c.chain[0][1] > 1 and sum(held.values()) < cores:
                    held[id(c), part] = 1
        while wants and sum(held.values()) < cores:
            best = max(wants, key=lambda w: ask(*w))
            if ask(*best) < 0:
                break
            held[id(best[0]), best[1]] += 1
        for c, part in wants:
            k = held[id(c), part]
            if part == "host":
                c.host -= k * TICK
            elif k:
                c.chain[0][0] -= (k if c.chain[0][1] > 1 else 1) * TICK
                if c.chain[0][0] <= 1e-9:
                    c.chain.pop(0)
        now += TICK
    return now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="a FAST_NVCC_LOG of a split build (one JSON line per compile)")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--keep-one", action="store_true", help="every running split step keeps a core")
    parser.add_argument("--error", type=float, default=1.5, help="the ranks' error, X ** [-1, 1] (default 1.5)")
    options = parser.parse_args(argv)
    build = compiles(options.log)
    work = sum(c.work_left() + c.host for c in build)
    print(f"{len(build)} compiles, {work:.0f} s of work, work / {options.cores} cores {work / options.cores:.1f} s")
    for rule in ("spread", "longest"):
        known = replay(build, cores=options.cores, rule=rule, keep_one=options.keep_one)
        draws = sorted(replay(build, cores=options.cores, rule=rule, keep_one=options.keep_one,
                              error={c.name: options.error ** rnd.uniform(-1, 1) for c in build})
                       for rnd in (random.Random(seed) for seed in range(8)))  # fmt: skip
        floor = work / options.cores
        print(f"{rule:8s} ranks known {known:6.1f} s ({known / floor:.3f}); in error x{options.error}: "
              f"median {draws[4] / floor:.3f}, worst {draws[-1] / floor:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
