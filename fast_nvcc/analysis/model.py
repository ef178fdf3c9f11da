"""The model: ``analyze`` turns a build's jobs into the wall time, the bound of
docs/analyze.md, the concurrency profile, the long poles, the what-if and the phase totals."""

from __future__ import annotations

import bisect
import fnmatch
import heapq
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from .advice import advise
from .bound import wall_bound
from .device import sum_device_costs
from .failed_guesses import sum_failed_guesses
from .idle import held_spans, idle_cores
from .records import (
    BOOKKEEPING_TOOLS,
    Analysis,
    AnalysisError,
    Build,
    CompileRecord,
    Job,
    LongPole,
    PhaseTotal,
    ProfileRow,
    Step,
    WhatIf,
    WhatIfRule,
)
from .waiting import measure_waiting


def analyze(
    build: Build,
    *,
    slots: int | None = None,
    top: int = 10,
    interval: float | None = None,
    what_if: Sequence[WhatIfRule] = (),
    what_if_templates: Sequence[str] = (),
) -> Analysis:
    jobs = build.jobs
    if not jobs:
        raise AnalysisError("the build holds no jobs")
    starts = sorted(job.start for job in jobs)
    ends = sorted(job.end for job in jobs)
    wall = ends[-1] - starts[0]
    durations = [job.seconds for job in jobs]
    peak = max_concurrency(starts, ends)
    used_slots = slots or max(1, peak)
    step = interval or nice_interval(wall)
    if wall / step > 100_000:
        raise AnalysisError(f"--interval {step:g} gives {wall / step:.0f} rows; take a larger one")
    device = sum_device_costs(build, slots=used_slots, what_if=what_if_templates)
    if what_if_templates and device is None:
        raise AnalysisError(
            "--what-if-template needs compiles run with --device-trace (FAST_NVCC_DEVICE_TRACE=1) "
            "and their FAST_NVCC_LOG"
        )
    what_if_result = (
        apply_what_if(jobs, what_if, slots=used_slots, build_dir=build.build_dir)
        if what_if
        else None
    )
    cores = slots or _pool(build) or used_slots
    return Analysis(
        build=build,
        slots=used_slots,
        slots_given=slots is not None,
        max_concurrency=peak,
        wall=wall,
        job_seconds=sum(durations),
        bound=wall_bound(durations, slots=used_slots),
        interval=step,
        profile=with_cores(tuple(sample_profile(starts, ends, interval=step)), jobs, origin=starts[0],
                           end=ends[-1], interval=step),
        long_poles=tuple(find_long_poles(jobs, slots=used_slots, top=top)),
        what_if=what_if_result,
        phases=sum_phases(build.records, by_arch=False),
        arch_phases=sum_phases(build.records, by_arch=True),
        waiting=measure_waiting(jobs),
        device=device,
        top=top,
        failed_guesses=sum_failed_guesses(jobs),
        advice=advise(jobs, cores=cores, wall=wall, measured=build.split_shares, split_builds=build.split_builds),
        idle=idle_cores(jobs, cores=cores, origin=starts[0], end=ends[-1]),
    )


def _pool(build: Build) -> int | None:
    """The cores fast_nvcc ran the build's steps on: its job bound in the log (by default the
    usable cores, the size of its machine-wide pool)."""
    return max((r.pool for r in build.records if r.pool), default=None)


def max_concurrency(starts: Sequence[float], ends: Sequence[float]) -> int:
    """The most jobs running at once; ``starts`` and ``ends`` sorted.  A job that ends when
    another starts does not overlap it (ninja starts the next job in the freed slot)."""
    peak = 0
    for index, start in enumerate(starts):
        # Jobs started up to this one (ties included), less those ended by now.
        running = bisect.bisect_right(starts, start, lo=index) - bisect.bisect_right(ends, start)
        peak = max(peak, running)
    return peak


def nice_interval(wall: float, rows: int = 20) -> float:
    """The smallest 1, 2 or 5 times a power of ten that gives at most ``rows`` rows."""
    if wall <= 0:
        return 1.0
    raw = wall / rows
    power = 10.0 ** math.floor(math.log10(raw))
    return min(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def sample_profile(
    starts: Sequence[float], ends: Sequence[float], *, interval: float
) -> Iterator[ProfileRow]:
    """Jobs running at t = 0, interval, 2 * interval, ... (from the first start), and the mean
    number running until the next instant.  ``starts`` and ``ends`` sorted.

    The busy time up to T is sum(min(end, T)) - sum(min(start, T)); with prefix sums over the
    sorted times each instant costs two bisections, whatever the number of jobs.
    """
    origin, last = starts[0], ends[-1]
    start_sums = _prefix_sums(starts)
    end_sums = _prefix_sums(ends)

    def running(t: float) -> int:
        return bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)

    def busy(t: float) -> float:
        started, ended = bisect.bisect_right(starts, t), bisect.bisect_right(ends, t)
        return (end_sums[ended] + t * (len(ends) - ended)) - (
            start_sums[started] + t * (len(starts) - started)
        )

    count = max(1, math.ceil((last - origin) / interval - 1e-9))
    for row in range(count):
        t = origin + row * interval
        until = min(t + interval, last)
        mean = (busy(until) - busy(t)) / (until - t) if until > t else float(running(t))
        yield ProfileRow(t - origin, running(t), mean)


def with_cores(profile: Sequence[ProfileRow], jobs: Sequence[Job], *, origin: float, end: float,
               interval: float) -> tuple[ProfileRow, ...]:  # fmt: skip
    """``profile`` with the cores busy on average in each row's span: each fast_nvcc step's cpu
    seconds spread over its run (:func:`_cpu_spans`), a job without a log one core while it
    runs.  Unchanged where no job has a fast_nvcc log."""
    if not any(job.record is not None for job in jobs):
        return tuple(profile)
    busy = [0.0] * len(profile)

    def spread(start: float, stop: float, cpu: float) -> None:
        if stop <= start:
            return
        rate = cpu / (stop - start)
        for row in range(max(0, int((start - origin) / interval)), min(len(busy), int((stop - origin) / interval) + 1)):
            low, high = max(start, origin + row * interval), min(stop, origin + (row + 1) * interval)
            if high > low:
                busy[row] += rate * (high - low)

    for job in jobs:
        if job.record is None:
            spread(job.start, job.end, job.seconds)
            continue
        base = job.start + job.steps_origin
        for s in job.record.steps:
            if s.start is None or s.end is None or not s.cpu_seconds:
                continue
            for start, stop, cpu in _cpu_spans(s, s.start, s.end, s.cpu_seconds):
                spread(base + start, base + stop, cpu)
    spans = [min(origin + (i + 1) * interval, end) - (origin + i * interval) for i in range(len(profile))]
    return tuple(replace(row, cores=busy[i] / spans[i] if spans[i] > 0 else 0.0) for i, row in enumerate(profile))


def _cpu_spans(step: Step, start: float, end: float, cpu: float) -> list[tuple[float, float, float]]:
    """A step's ``cpu`` seconds over its run from ``start`` to ``end``, as (from, to, cpu) spans:
    spread over the cores it held in each (:func:`.idle.held_spans`)."""
    spans = held_spans(step, start, end)
    held = sum((nxt - when) * cores for when, nxt, cores in spans)
    if held <= 0:
        return [(start, end, cpu)]
    return [(when, nxt, cpu * (nxt - when) * cores / held) for when, nxt, cores in spans]


def _prefix_sums(values: Sequence[float]) -> list[float]:
    sums = [0.0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums


def find_long_poles(jobs: Sequence[Job], *, slots: int, top: int) -> Iterator[LongPole]:
    """The ``top`` longest jobs, each with the floor of the wall time were it to take 0 s: the
    next-longest job or the rest's share of the slots, whichever is larger."""
    longest = heapq.nlargest(max(top, 2), jobs, key=lambda job: job.seconds)
    total = sum(job.seconds for job in jobs)
    first = longest[0].seconds
    second = longest[1].seconds if len(longest) > 1 else 0.0
    for rank, job in enumerate(longest[:top]):
        others_longest = second if rank == 0 else first
        yield LongPole(job, max(others_longest, (total - job.seconds) / slots))


def apply_what_if(
    jobs: Sequence[Job], rules: Sequence[WhatIfRule], *, slots: int, build_dir: str | None = None
) -> WhatIf:
    """The bound with the jobs that match a rule at that rule's duration (the last matching rule
    wins), on the same slots."""
    matchers = [(os.path.isabs(rule.pattern), _matcher(rule.pattern)) for rule in rules]
    matched = [0] * len(rules)
    durations = []
    for job in jobs:
        seconds = job.seconds
        for index, (absolute, matches) in enumerate(matchers):
            if any(
                matches(path)
                for path in (_absolute_outputs(job, build_dir) if absolute else job.outputs)
            ):
                matched[index] += 1
                seconds = rules[index].seconds
        durations.append(seconds)
    return WhatIf(tuple(zip(rules, matched)), sum(durations), wall_bound(durations, slots=slots))


def _matcher(pattern: str):
    """A glob on the output path relative to the build directory, which may also match after
    any '/' ('activation/*' matches 'CMakeFiles/te.dir/activation/gelu.cu.o'); an absolute
    pattern is matched against absolute paths."""
    if os.path.isabs(pattern):
        regex = re.compile(fnmatch.translate(pattern))
    else:
        regex = re.compile(f"{fnmatch.translate(pattern)}|{fnmatch.translate('*/' + pattern)}")
    return lambda path: regex.match(path) is not None


def _absolute_outputs(job: Job, build_dir: str | None) -> Iterable[str]:
    if build_dir is None:
        return job.record.outputs if job.record is not None else job.outputs
    return (os.path.normpath(os.path.join(build_dir, output)) for output in job.outputs)


def sum_phases(records: Iterable[CompileRecord], *, by_arch: bool) -> tuple[PhaseTotal, ...]:
    """Step seconds summed per phase (the step's kind), or per phase and architecture (steps
    with an architecture only), largest first."""
    totals: dict[tuple[str, str | None], list[float]] = {}
    for record in records:
        for step in record.steps:
            if step.tool in BOOKKEEPING_TOOLS or step.state == "skipped":
                continue
            if by_arch and step.arch is None:
                continue
            # steps through sccache are a phase of their own per outcome: "cicc (remote)"
            kind = f"{step.kind} ({step.remote})" if step.remote else step.kind
            total = totals.setdefault((kind, step.arch if by_arch else None), [0.0, 0.0, 0])
            total[0] += step.seconds
            total[1] += step.cpu_seconds or 0.0
            total[2] += 1
    phases = (
        PhaseTotal(kind, arch, s, cpu, int(n)) for (kind, arch), (s, cpu, n) in totals.items()
    )
    return tuple(sorted(phases, key=lambda p: (-p.seconds, p.kind, p.arch or "")))
