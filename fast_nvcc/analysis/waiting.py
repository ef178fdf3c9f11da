"""How long the build's compiles waited for slots, whether any starved (one waited for its first
step while another compile ran two or more steps), and which steps ran over the machine-wide
pool and why (docs/scheduling.md), and how long the memory budget held steps back
(docs/memory.md).  From the FAST_NVCC_LOG fields ``first_step_wait_seconds`` /
``slot_wait_seconds`` / ``memory_wait_seconds``, the steps' times, ``over_pool``, ``memory_wait``
and ``oom_rerun``."""

from __future__ import annotations

from collections.abc import Sequence

from .records import Job, OverPool, Waiting


def measure_waiting(jobs: Sequence[Job]) -> Waiting | None:
    timed = [job for job in jobs if job.record is not None and job.record.first_step_wait is not None]
    if not timed:
        return None
    busy = {id(job): _busy_spans(job) for job in timed}
    starved: list[tuple[float, str]] = []
    for job in timed:
        record = job.record
        begin = job.start + job.steps_origin
        end = begin + (record.first_step_wait or 0.0)
        # 20 ms: a waiter polls the pool that often.
        if end - begin <= 0.02:
            continue
        if any(lo < end and begin < hi for other in timed if other is not job for lo, hi in busy[id(other)]):
            starved.append((end - begin, job.name))
    worst = max(timed, key=lambda j: j.record.first_step_wait or 0.0)
    return Waiting(
        compiles=len(timed),
        first_step_seconds=sum(j.record.first_step_wait or 0.0 for j in timed),
        slot_seconds=sum(j.record.slot_wait or 0.0 for j in timed),
        worst_first_step=(worst.record.first_step_wait or 0.0, worst.name),
        starved=tuple(sorted(starved, reverse=True)),
        over_pool=_over_pool(timed),
        memory_seconds=sum(j.record.memory_wait or 0.0 for j in timed),
        memory_steps=sum(1 for j in timed for s in j.record.steps if s.memory_wait > 0),
        memory_compiles=sum(1 for j in timed if any(s.memory_wait > 0 for s in j.record.steps)),
        oom_reruns=sum(1 for j in timed for s in j.record.steps if s.oom_rerun),
        stopped_steps=sum(1 for j in timed for s in j.record.steps if s.memory_stopped > 0),
        stopped_seconds=sum(s.memory_stopped for j in timed for s in j.record.steps),
        yielded_steps=sum(1 for j in timed for s in j.record.steps if s.yielded > 0),
        yielded_seconds=sum(s.yielded for j in timed for s in j.record.steps),
    )


def _over_pool(jobs: Sequence[Job]) -> tuple[tuple[str, OverPool], ...]:
    result = []
    for why in ("first", "drain", "short"):
        steps = [(job.name, s.seconds) for job in jobs for s in job.record.steps if s.over_pool == why]
        if steps:
            result.append((why, OverPool(len(steps), sum(t for _, t in steps), len({n for n, _ in steps}))))
    return tuple(result)


def _busy_spans(job: Job) -> list[tuple[float, float]]:
    """When ``job`` ran two or more commands that hold slots at once, in build time: a short
    step (``over_pool`` "short": a fatbinary, an ``as``) takes none, so it starves no one."""
    origin = job.start + job.steps_origin
    events = []
    for step in job.record.steps:
        if step.command and step.over_pool != "short" and step.start is not None and step.end is not None:
            events += [(origin + step.start, 1), (origin + step.end, -1)]
    events.sort(key=lambda e: (e[0], e[1]))
    spans, level, since = [], 0, 0.0
    for time, delta in events:
        if level >= 2 and level + delta < 2:
            spans.append((since, time))
        if level < 2 <= level + delta:
            since = time
        level += delta
    return spans
