"""Output as a trace: ``--trace``, the build as a Chrome trace, one lane per job slot."""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .output import write_atomically, write_text
from .records import BOOKKEEPING_TOOLS, Build, Job, Step

if TYPE_CHECKING:
    from ..report.trace import TraceEvent


def assign_slots(jobs: Sequence[Job]) -> list[int]:
    """A slot (lane) per job, greedily by start time: the lowest slot free by then, so the
    lanes number the most jobs that ran at once, as in ninjatracing's ``Threads.alloc``."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].start, -jobs[i].end))
    busy: list[tuple[float, int]] = []  # (end, slot)
    free: list[int] = []
    slots = [0] * len(jobs)
    for index in order:
        job = jobs[index]
        while busy and busy[0][0] <= job.start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        slot = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (job.end, slot))
        slots[index] = slot
    return slots


def assign_step_lanes(steps: Sequence[Step]) -> list[int]:
    """Lanes for one compile's steps, which overlap: lane 0 nests inside the job's span on the
    job's own lane, the others get lanes of their own below it."""
    ends: list[float] = []
    lanes = []
    for step in steps:
        start = step.start or 0.0
        lane = next((i for i, end in enumerate(ends) if end <= start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = step.end or start
        lanes.append(lane)
    return lanes


def trace_events(build: Build, *, pid: int = 1, name: str = "build") -> list[TraceEvent]:
    """Chrome Trace Event Format: one lane (tid) per job slot; a joined compile's fast_nvcc steps
    nest inside its job on the same lane, and those that overlap go to lanes just below."""
    jobs = build.jobs
    slots = assign_slots(jobs)
    slot_count = max(slots, default=-1) + 1
    steps = {
        index: sorted((s for s in job.record.steps if _ran(s)), key=lambda s: s.start or 0.0)
        for index, job in enumerate(jobs)
        if job.record is not None
    }
    lanes = {index: assign_step_lanes(ran) for index, ran in steps.items()}
    extra = max((max(lane, default=0) for lane in lanes.values()), default=0)

    def tid_of(slot: int, lane: int) -> int:
        return slot + 1 if lane == 0 else slot_count + 1 + slot * extra + lane - 1

    def sort_index(slot: int, lane: int) -> int:  # each slot's step lanes right below it
        return slot * (extra + 1) + lane

    events: list[TraceEvent] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
    ]
    used = {(slots[i], lane) for i, lanes_of_job in lanes.items() for lane in lanes_of_job}
    for slot, lane in sorted(used | {(slot, 0) for slot in range(slot_count)}):
        label = f"slot {slot + 1}" if lane == 0 else f"slot {slot + 1} steps {lane + 1}"
        events += _lane_names(pid, tid_of(slot, lane), label, sort_index(slot, lane))
    for index, job in enumerate(jobs):
        # Whole microseconds, so that a step clamped to its job's span nests exactly.
        ts, end = round(job.start * 1e6), round(job.end * 1e6)
        args: dict[str, Any] = {"outputs": list(job.outputs)}
        if job.record is not None:
            args.update(wall_seconds=job.record.wall_seconds, exit_code=job.record.exit_code)
        events.append(_span(job.name, "job", ts, end, pid, slots[index] + 1, args))
        origin = ts + round(job.steps_origin * 1e6)
        for step, lane in zip(steps.get(index, ()), lanes.get(index, ())):
            step_ts = min(max(origin + round((step.start or 0.0) * 1e6), ts), end)
            step_end = min(max(origin + round((step.end or 0.0) * 1e6), step_ts), end)
            label = f"{step.tool} {step.arch}" if step.arch else step.tool
            args = {"job": job.name, "state": step.state, "cpu_seconds": step.cpu_seconds}
            events.append(
                _span(label, step.kind, step_ts, step_end, pid, tid_of(slots[index], lane), args)
            )
    return events


def _span(
    name: str, cat: str, ts: int, end: int, pid: int, tid: int, args: dict[str, Any]
) -> TraceEvent:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": end - ts,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _lane_names(pid: int, tid: int, label: str, sort_index: int) -> list[TraceEvent]:
    return [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}},
        {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": sort_index},
        },
    ]


def _ran(step: Step) -> bool:
    return step.start is not None and step.end is not None and step.tool not in BOOKKEEPING_TOOLS


def write_trace(build: Build, path: str) -> None:
    name = f"ninja: {build.build_dir}" if build.build_dir else "fast_nvcc compiles"
    document = {"traceEvents": trace_events(build, name=name), "displayTimeUnit": "ms"}
    text = json.dumps(document, separators=(",", ":"))
    write_atomically(path, lambda tmp: write_text(tmp, text))
