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

    def hold(spans: list[tuple[float, float, int]], used: float, tool: str) -> None:
        nonlocal held, cpu, tail
        seconds = sum((b - a) * n for a, b, n in spans)
        held, cpu = held + seconds, cpu + used
        tail += sum((b - max(a, tail_from)) * n for a, b, n in spans if b > tail_from)
        unused[tool] = unused.get(tool, 0.0) + seconds - used

    for job in jobs:
        if job.record is None:
            hold([(job.start, job.end, 1)], job.seconds, "jobs without a log")
            continue
        base = job.start + job.steps_origin
        for s in job.record.steps:
            if s.start is None or s.end is None or not s.command or s.tool in BOOKKEEPING_TOOLS:
                continue
            hold(held_spans(s, base + s.start, base + s.end), s.cpu_seconds or 0.0, s.tool)
    ranked = tuple(sorted(unused.items(), key=lambda item: -item[1]))
    return IdleCores(cores, end - origin, held, cpu, tail, ranked)
