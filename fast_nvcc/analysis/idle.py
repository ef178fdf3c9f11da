"""Where a build's cores sat idle: its time above the floor, in core-seconds.

A build of ``wall`` seconds on ``cores`` cores had wall × cores core-seconds; its steps' cpu used
some of them.  The rest were idle in one of two ways, and they call for different changes:

* **no step held them**: before the first steps start, in a tail where one compile's chain runs
  alone (TE's seven, round 31: a split ptxas's last partition in one thread for 10-20 s), and
  while compiles wait for ninja or for each other.  Only another order of the work fills those.
* **a step held them and left them idle**: a split step's granted cores that its threads did
  not use (a split cicc 0.94-0.96 of its grant, TE's seven, round 38), a step waiting on its
  output.  The grant's rules decide these.

A step holds one core while it runs and none while it is stopped, a split step the cores of its
``cores_at``; a job without a FAST_NVCC_LOG record one core, used all along.

Where a core was held by no step while a step stood ready (its ``wait`` before it started, less
what the memory budget held it back; a stop to give its core to a split step), the scheduler
left work waiting beside a core nothing ran on, which split steps' cores are meant never to do
(core_grants: "cores follow use"): ``waited_free`` counts those core-seconds, each waiting step
matched with one free core.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import BOOKKEEPING_TOOLS, TAIL, IdleCores, Job, Step


def held_spans(step: Step, start: float, end: float) -> list[tuple[float, float, int]]:
    """The cores ``step`` held from ``start`` to ``end``, as (from, to, cores) spans: a split
    step's by its ``cores_at``, any other step's one, none while it was stopped (its ``stops``)."""
    if not step.cores_at and not step.stops:
        return [(start, end, 1)] if end > start else []
    changes = [(max(start, when), cores) for when, cores in step.cores_at if when < end] or [(start, 1)]
    for since, until in step.stops:  # no core while stopped, the cores it held again after
        held = next((c for when, c in reversed(changes) if when <= since), 1)
        changes = sorted([*((w, c) for w, c in changes if not since <= w < until), (since, 0), (until, held)])
    return [(when, nxt, cores) for (when, cores), (nxt, _) in zip(changes, [*changes[1:], (end, 0)]) if nxt > when]


def idle_cores(jobs: Sequence[Job], *, cores: int, origin: float, end: float) -> IdleCores | None:
    """The build's idle core-seconds from ``origin`` to ``end`` on ``cores`` cores; None where no
    job has a FAST_NVCC_LOG record (nothing tells what the cores did)."""
    if cores < 1 or end <= origin or not any(job.record is not None for job in jobs):
        return None
    tail_from = end - TAIL * (end - origin)
    held = cpu = tail = 0.0
    unused: dict[str, float] = {}
    granted_unused, granted_idle = 0.0, None  # split steps' (held - cpu), and the kernel's idle of their cores
    changes: list[tuple[float, int, int]] = []  # (when, change of cores held, change of steps waiting)

    def hold(spans: list[tuple[float, float, int]], used: float, tool: str) -> float:
        nonlocal held, cpu, tail
        changes.extend(c for a, b, n in spans for c in ((a, n, 0), (b, -n, 0)))
        seconds = sum((b - a) * n for a, b, n in spans)
        held, cpu = held + seconds, cpu + used
        tail += sum((b - max(a, tail_from)) * n for a, b, n in spans if b > tail_from)
        unused[tool] = unused.get(tool, 0.0) + seconds - used
        return seconds

    for job in jobs:
        if job.record is None:
            hold([(job.start, job.end, 1)], job.seconds, "jobs without a log")
            continue
        base = job.start + job.steps_origin
        for s in job.record.steps:
            if s.start is None or s.end is None or not s.command or s.tool in BOOKKEEPING_TOOLS:
                continue
            seconds = hold(held_spans(s, base + s.start, base + s.end), s.cpu_seconds or 0.0, s.tool)
            if s.cores_idle is not None:
                granted_unused += max(0.0, seconds - (s.cpu_seconds or 0.0))
                granted_idle = (granted_idle or 0.0) + s.cores_idle
            for a, b in waiting_spans(s):
                changes.extend(((base + a, 0, 1), (base + b, 0, -1)))
    ranked = tuple(sorted(unused.items(), key=lambda item: -item[1]))
    return IdleCores(cores, end - origin, held, cpu, tail, ranked, waited_free(changes, cores), granted_unused, granted_idle)


def waiting_spans(step: Step) -> list[tuple[float, float]]:
    """When ``step`` stood ready and ran not: before it started (its wait, less the memory
    budget's part, taken as its last: the budget holds a step back once its turn has come) and
    while it was stopped for a split step (a stop for memory is not counted)."""
    assert step.start is not None
    ready = step.start - step.wait
    spans = [(ready, step.start - step.memory_wait)] if step.wait > step.memory_wait else []
    return spans + (list(step.stops) if step.yielded > 0 and not step.cores_at else [])


def waited_free(changes: list[tuple[float, int, int]], cores: int) -> float:
    """Core-seconds in which a step waited while a core was held by no step: the sum over time
    of min(steps waiting, cores no step held)."""
    total, held, waiting, last = 0.0, 0, 0, None
    for when, d_held, d_waiting in sorted(changes):
        if last is not None:
            total += (when - last) * min(waiting, max(0, cores - held))
        held, waiting, last = held + d_held, waiting + d_waiting, when
    return total
