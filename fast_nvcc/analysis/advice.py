"""What to change: the compiles that set the build's floor, how their time splits between cicc,
ptxas and the host side, and what nvcc's ``--split-compile`` (``fast_nvcc --split``) or splitting
the source would give the floor, with the settings to use.

A compile *sets the floor* when it takes longer than the build's cpu share (its work / the
cores): however the rest is scheduled, the build cannot end before it does.  Where no compile
does, the build is work-bound and split only adds work.  The work counts what the cores did: a
fast_nvcc compile's steps' cpu seconds summed (they run side by side, and a split step holds
several cores), another job's time; the cores are fast_nvcc's job bound in the log (the usable
cores unless its ``-j`` set another), not the build tool's ``-j``, which would put the floor too
low where it runs more jobs than cores (docs/benchmarks.md).

The split model (docs/analyze.md): a step of ``c`` cpu seconds, split onto ``k`` cores, takes
``c * (s + (1 - s) * (1 + o) / k)`` and costs ``c * (1 + o * (1 - s))`` cpu seconds; ``s`` is its
serial share (cicc's front end), ``o`` the extra work of the split.  The defaults were measured
on TransformerEngine's ``cast/cast_grouped.cu`` split (docs/benchmarks.md).  Where the log holds
split steps of a tool, the seconds their threads ran one at a time over their cpu give its ``s``
instead ("learned"; :func:`step_serial_share`).  The share differs from source to source (TE's
cast_grouped.cu split to 0.40 of its wall, an attention library's kernel file to 0.69), so
where the logs hold split steps of the compile's own source, in any build they hold (an exact
build's log appended with a split one), those give its ``s`` (:func:`source_serial_shares`),
and the table says which compiles were not measured split yet.  A compile's device chain (its longest cicc + ptxas of one architecture) shrinks;
the host side (preprocessing, cudafe++, host compile) does not, and bounds it below.

The split floor is a floor: where the logs hold a split build, the advice also expects the
advised build as far above it as that build ended above its own (:func:`schedule_overrun`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from ..plan.split_option import SERIAL_SHARE, measured_share, split_file
from .records import Advice, CompileRecord, Job, PoleAdvice, Step

SPLIT_OVERHEAD = 0.10  # o: the split's extra work, a share of the parallel part
HOST_KINDS = ("preprocess", "cudafe++", "host-compile")
MOST_POLES = 10
WORTH = 0.03  # split is advised only where it lowers the floor by this share at least


def _shortens(pole: PoleAdvice) -> bool:
    return pole.split_seconds is not None and not pole.already_split and pole.split_seconds < pole.seconds


def advise(jobs: Sequence[Job], *, cores: int, wall: float,
           measured: Iterable[tuple[str, str, float, int, float | None]] = (),
           split_builds: Sequence[Sequence[Job]] = ()) -> Advice:  # fmt: skip
    """``measured``: each source's own split steps, from every build of the logs
    (:func:`source_serial_shares`); ``split_builds``: the jobs of each build of the logs that ran
    split steps (:func:`schedule_overrun`)."""
    floor, total, own = _floor(jobs, cores=cores)
    share = total / max(1, cores)
    serial = _serial_shares(jobs)
    s = {tool: value for tool, value, _ in serial}
    by_source: dict[str, dict[str, tuple[float, int, float | None]]] = {}
    for source, tool, value, steps, cpu_ratio in measured:
        by_source.setdefault(source, {})[tool] = (value, steps, cpu_ratio)
    poles = sorted((job for job in jobs if own[id(job)] > share), key=lambda job: -own[id(job)])[:MOST_POLES]
    advised, extras = [], {}
    for job in poles:
        pole, cpu = _pole(job, own[id(job)], cores=cores, serial=s, own=by_source)
        advised.append(pole)
        extras[id(job)] = cpu
    # Split only the compiles that would still end after the floor the split gives: the rest
    # end before it anyway, and their split would only add work.
    split_of = {id(j): p.split_seconds for j, p in zip(poles, advised)}
    split_floor, chosen = None, {id(j) for j, p in zip(poles, advised) if _shortens(p)}
    while chosen:
        seconds = [split_of[id(job)] if id(job) in chosen else own[id(job)] for job in jobs]
        candidate = max(max(seconds), (total + sum(extras[c] for c in chosen)) / max(1, cores))
        needed = {id(j) for j, p in zip(poles, advised) if id(j) in chosen and own[id(j)] > candidate}
        if needed == chosen:
            split_floor = candidate
            break
        chosen = needed
    if split_floor is not None and split_floor > floor * (1 - WORTH):
        split_floor, chosen = None, set()
    advised = [replace(p, chosen=id(j) in chosen) for j, p in zip(poles, advised)]
    extra = sum(extras[c] for c in chosen)
    halves = None
    if poles:
        rest = max((own[id(job)] for job in jobs if job is not poles[0]), default=0.0)
        halves = max(own[id(poles[0])] / 2, rest, share)
    late = None
    last = max(jobs, key=lambda job: job.end) if jobs else None
    if poles and last is poles[0] and poles[0].start > 0.1 * wall:
        late = poles[0].start
    longest = max(own.values(), default=0.0)
    chosen_poles = tuple(advised)
    overrun = schedule_overrun(split_builds, cores=cores)
    return Advice(cores, total, share, floor, chosen_poles, split_floor, extra, serial, halves, late, longest, overrun)


def build_floor(jobs: Sequence[Job], *, cores: int) -> float:
    """No order of a build's work ends sooner: the longest compile's own path, or its work over
    the cores (:func:`own_seconds`, :func:`_work`), as :func:`advise` counts it."""
    return _floor(jobs, cores=cores)[0]


def _floor(jobs: Sequence[Job], *, cores: int) -> tuple[float, float, dict[int, float]]:
    """(:func:`build_floor`, the work summed, each job's own path by ``id``)."""
    total = sum(_work(job) for job in jobs)
    own = {id(job): own_seconds(job, cores=cores) for job in jobs}
    return max(max(own.values(), default=0.0), total / max(1, cores)), total, own


def schedule_overrun(builds: Iterable[Sequence[Job]], *, cores: int) -> tuple[float, int] | None:
    """How far split builds ended above their floor: the median of their walls over their floors
    (:func:`build_floor`), and how many builds; None where there are none.

    The split floor is what no schedule beats; a split build ends above it by what its schedule
    leaves: cores idle while split threads run their serial parts and at the build's end, and
    fast_nvcc's own cpu.  FlashAttention's advised builds (16 cores, 2026-11-29, rounds 23-28 of
    docs/benchmarks.md) ended 1.037-1.052 of their floors, and their walls came 1.035-1.063 of the
    predicted floor at the exact build's speed; the floor times the first advised build's overrun
    came 0.99-1.02 of the second's.  The overrun is the schedule's, measured on this machine's
    builds: the cores given to analyze apply to each."""
    ratios = []
    for jobs in builds:
        if not jobs:
            continue
        floor = build_floor(jobs, cores=cores)
        wall = max(job.end for job in jobs) - min(job.start for job in jobs)
        if floor > 0:
            ratios.append(wall / floor)
    return (_median(ratios), len(ratios)) if ratios else None


def own_seconds(job: Job, *, cores: int) -> float:
    """A compile's time were nothing to hold it back: its elapsed time less what its critical
    path (the steps the run marked ``critical``) spent ready but waiting to start, stopped (for a
    split step, for memory), and, a split step, on fewer cores than its threads could use (its
    serial seconds and the rest spread on ``cores``: :func:`step_floor`).  Where every core is
    busy, steps wait and stop for longer paths, and a compile's elapsed time is the wall: taken as
    the floor, FlashAttention's advised build (2026-11-29, 16 cores) "took 1.00 x its floor",
    186.7 s, set by a compile stopped 54.5 s and waiting 19.3 s whose own path was 112.9 s,
    while its cpu work / 16 cores was 178.0 s.  A job without such steps: its elapsed time."""
    if job.record is None:
        return job.seconds
    held = [s.wait + s.seconds - step_floor(s, cores=cores) for s in job.record.steps if s.critical and s.state != "skipped"]
    return max(0.0, job.seconds - sum(held)) if held else job.seconds


def step_floor(step: Step, *, cores: int) -> float:
    """The shortest a step could have run: a split step measured long enough for its threads to
    be seen (split_option.MEASURED_SECONDS), its seconds of one thread at a time plus the rest of
    its cpu on ``cores``; any other step, its seconds running (not stopped)."""
    share = None
    if step.cores > 0 and step.serial_seconds is not None and step.cpu_seconds:
        share = measured_share(step.serial_seconds, step.cpu_seconds, seconds=step.seconds)
    if share is None:
        return step.running
    serial = share * step.cpu_seconds
    return min(step.running, serial + (step.cpu_seconds - serial) / max(1, cores))


def _work(job: Job) -> float:
    """What a job kept the cores busy for: a fast_nvcc compile's needed steps' cpu seconds
    summed, else the job's time.  Not the steps' elapsed times: steps that shared a core (more
    ready than cores, or the short steps that run over the pool) each count the whole time they
    shared, and on a small build that put the floor above the measured wall (issue 41)."""
    if job.record is None or not job.record.steps:
        return job.seconds
    steps = (s for s in job.record.steps if s.needed)
    return sum(s.seconds if s.cpu_seconds is None else s.cpu_seconds for s in steps)


def split_step(cpu: float, *, serial: float, cores: int) -> tuple[float, float]:
    """A step of ``cpu`` seconds split onto ``cores``: (its wall, its cpu)."""
    k = max(1, cores)
    return (cpu * (serial + (1 - serial) * (1 + SPLIT_OVERHEAD) / k),
            cpu * (1 + SPLIT_OVERHEAD * (1 - serial)))  # fmt: skip


def step_serial_share(step: Step) -> float | None:
    """A split step's serial share: the seconds its threads ran one at a time over its cpu, as
    the run measured them (FAST_NVCC_LOG's ``serial_seconds``, which the cost history learns
    too).  From a log without them, the share that fits its wall and cpu on the most cores it
    held, which reads a step the build held to fewer cores than its threads wanted as a serial
    one: FlashAttention's split ciccs, held to 1.2-1.3 cores on average (at most 2-5) in a full
    build, measured 0.67-0.70 one thread at a time, where that fit said 0.75-0.80, and their split
    ptxas 0.04-0.09 where it said 0.43-0.72 (docs/analyze.md)."""
    if step.cores < 1 or not step.cpu_seconds:
        return None
    if step.serial_seconds is not None:  # (None from a step too short for the looks to see)
        return measured_share(step.serial_seconds, step.cpu_seconds, seconds=step.seconds)
    return serial_share(step.seconds, step.cpu_seconds, cores=step.cores)


def serial_share(wall: float, cpu: float, *, cores: int) -> float | None:
    """The serial share ``s`` that makes a split step of this wall and cpu on ``cores`` fit the
    model; None where nothing fits (a step that never got a second core)."""
    if cores < 2 or wall <= 0 or cpu <= 0:
        return None
    # wall / cpu = (s + (1 - s)(1 + o) / k) / (1 + o (1 - s)): a fixed point in s, solved by
    # bisection (the right side grows with s).
    ratio, o, k = wall / cpu, SPLIT_OVERHEAD, cores
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if (mid + (1 - mid) * (1 + o) / k) / (1 + o * (1 - mid)) < ratio:
            lo = mid
        else:
            hi = mid
    return lo if 0.0 < lo < 1.0 else None


def source_serial_shares(records: Iterable[CompileRecord]) -> tuple[tuple[str, str, float, int, float | None], ...]:
    """What each source's own split steps measured: (source, tool, serial share, split steps,
    cpu ratio), the median share of the tool's split steps of that source over every record
    given, and the median of their cpu over the cpu of the same step unsplit (same source, tool
    and architecture, in another build of the logs; None where none ran unsplit).  The ratio is
    what the split cost, contention included: FlashAttention's split ciccs spent 1.08-1.18 of
    their unsplit cpu where the model's fixed overhead, at their serial shares, says 1.00-1.02
    (docs/benchmarks.md, round 7)."""
    found: dict[tuple[str, str], list[float]] = {}
    split_cpu: dict[tuple[str, str, str], list[float]] = {}
    whole_cpu: dict[tuple[str, str, str], list[float]] = {}
    for record in records:
        if not record.sources:
            continue
        for step in record.steps:
            if step.tool not in SERIAL_SHARE or not step.cpu_seconds:
                continue
            key = (record.sources[0], step.tool, step.arch or "")
            if step.cores > 0:
                split_cpu.setdefault(key, []).append(step.cpu_seconds)
                share = step_serial_share(step)
                if share is not None:
                    found.setdefault(key[:2], []).append(share)
            elif step.state == "done":  # ran to its end, once or after a failed guess (one record)
                whole_cpu.setdefault(key, []).append(step.cpu_seconds)
    ratios: dict[tuple[str, str], list[float]] = {}
    for key, spent in split_cpu.items():
        if key in whole_cpu:
            ratios.setdefault(key[:2], []).append(_median(spent) / _median(whole_cpu[key]))
    return tuple((source, tool, _median(shares), len(shares),
                  _median(ratios[source, tool]) if (source, tool) in ratios else None)
                 for (source, tool), shares in sorted(found.items()))  # fmt: skip


def _median(values: Sequence[float]) -> float:
    """The middle value (of two, the upper), as the build's own shares have always been read."""
    return sorted(values)[len(values) // 2]


def _serial_shares(jobs: Sequence[Job]) -> tuple[tuple[str, float, str], ...]:
    found = []
    for tool, default in SERIAL_SHARE.items():
        learned = [
            share for job in jobs if job.record is not None for step in job.record.steps
            if step.tool == tool and (share := step_serial_share(step)) is not None
        ]  # fmt: skip
        if learned:
            steps = f"{len(learned)} split step{'s' if len(learned) != 1 else ''}"
            found.append((tool, _median(learned), f"learned from {steps}"))
        else:
            found.append((tool, default, "measured (TE cast_grouped.cu, 2026-11-25)"))
    return tuple(found)


def _pole(job: Job, seconds: float, *, cores: int, serial: dict[str, float],
          own: Mapping[str, Mapping[str, tuple[float, int, float | None]]]) -> tuple[PoleAdvice, float]:  # fmt: skip
    """One compile of ``seconds`` (:func:`own_seconds`), and the cpu seconds its split would add:
    modelled with its own source's serial shares and cpu ratios where its split steps were
    measured, else with the build's.  Its steps count their time running, not stopped."""
    source = _source_name(job)
    if job.record is None:
        return PoleAdvice(job.name, source, job.start, seconds, 0.0, 0.0, 0.0, None, elapsed=job.seconds), 0.0
    steps = [s for s in job.record.steps if s.state != "skipped"]
    chains: dict[str, list[Step]] = {}
    for step in steps:
        if step.tool in ("cicc", "ptxas"):  # compute_90's cicc feeds sm_90's ptxas
            chains.setdefault((step.arch or "").split("_", 1)[-1], []).append(step)
    host = sum(s.running for s in steps if s.kind in HOST_KINDS)
    if not chains:
        return PoleAdvice(job.name, source, job.start, seconds, 0.0, 0.0, host, seconds, elapsed=job.seconds), 0.0
    arch = max(chains, key=lambda a: sum(s.running for s in chains[a]))
    chain = chains[arch]
    cicc = sum(s.running for s in chain if s.tool == "cicc")
    ptxas = sum(s.running for s in chain if s.tool == "ptxas")
    if any(s.cores > 0 for s in steps if s.tool in ("cicc", "ptxas")):
        return PoleAdvice(job.name, source, job.start, seconds, cicc, ptxas, host, seconds, already_split=True,
                          elapsed=job.seconds), 0.0
    mine = own.get(job.record.sources[0], {}) if job.record.sources else {}
    shares = {**serial, **{tool: value for tool, (value, _, _) in mine.items()}}
    cpu_ratios = {tool: ratio for tool, (_, _, ratio) in mine.items() if ratio is not None}
    count = sum(n for _, n, _ in mine.values())
    measured = f"{count} split step{'s' if count != 1 else ''}" if mine else ""
    new_chain, extra, on_chain = 0.0, 0.0, {id(s) for s in chain}
    for step in steps:  # every architecture's steps get split, not only the longest chain's
        if step.tool in shares:
            cpu = max(step.running, step.cpu_seconds or 0.0)
            wall, spent = split_step(cpu, serial=shares[step.tool], cores=cores)
            if step.tool in cpu_ratios:
                spent = cpu * cpu_ratios[step.tool]  # what its own split cost, measured
            extra += spent - cpu
            if id(step) in on_chain:
                new_chain += wall
    split = max(seconds - (cicc + ptxas) + new_chain, host)
    return PoleAdvice(job.name, source, job.start, seconds, cicc, ptxas, host, split, measured=measured,
                      elapsed=job.seconds), extra


def _source_name(job: Job) -> str:
    """The file name of a job's source: from its log record, else from its object
    (``.../cast_grouped.cu.o`` → cast_grouped.cu)."""
    if job.record is not None and job.record.sources:
        return os.path.basename(job.record.sources[0])
    base = os.path.basename(job.name.split(", ")[0])
    for suffix in (".o", ".obj"):
        if base.endswith(suffix) and base[: -len(suffix)].endswith((".cu", ".CU")):
            return base[: -len(suffix)]
    return base


def split_file_text(v: Advice) -> str:
    """``--write-split``'s file: the sources split would shorten, one a line, under a ``#``
    header that says what wrote it and the floor it predicts (``--split-sources @FILE``)."""
    wrote = "written by fast_nvcc analyze --write-split"
    if v.split_floor is None:
        return split_file((), [f"{wrote}: no split advised (floor {v.floor:.1f} s); as"
                               " --split-sources @FILE this splits no compile"])  # fmt: skip
    return split_file(v.sources, [
        f"{wrote}: split these {v.threads} ways, floor {v.floor:.1f} s -> {v.split_floor:.1f} s"
        f" ({v.split_floor / v.floor:.2f} of now)"
        + ("" if v.expected is None else f", expect about {v.expected:.1f} s"),
        f"use: fast_nvcc --split {v.threads} --split-sources @FILE"
        f" (or FAST_NVCC_SPLIT={v.threads} FAST_NVCC_SPLIT_SOURCES=@FILE)",
    ])  # fmt: skip
