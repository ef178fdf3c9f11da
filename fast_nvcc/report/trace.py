"""--trace: the run as a Chrome trace (chrome://tracing, Perfetto), one lane per slot."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from ..graph.tasks import RUNS_TOOL
from .run_report import RunReport, write_text


class TraceEvent(TypedDict, total=False):
    name: str
    cat: str
    ph: str
    ts: float
    dur: float
    pid: int
    tid: int
    args: dict[str, Any]


def trace_events(report: RunReport, *, pid: int = 1, offset_us: float = 0.0, name: str = "fast_nvcc") -> list[TraceEvent]:
    """Chrome Trace Event Format: one lane (tid) per job slot, in-process steps on lane 0."""
    events: list[TraceEvent] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": name, "first_step_wait_seconds": round(report.first_step_wait_seconds, 6),
                  "slot_wait_seconds": round(report.slot_wait_seconds, 6),
                  "memory_wait_seconds": round(report.memory_wait_seconds, 6)}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "fast_nvcc (in-process)"}},
    ]
    lanes = sorted({s.slot for s in report.steps if s.slot is not None})
    for slot in lanes:
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": slot + 1, "args": {"name": f"slot {slot + 1}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": slot + 1, "args": {"sort_index": slot + 1}})
    remote_lanes = _remote_lanes(report)
    for lane in sorted(set(remote_lanes.values())):
        tid = REMOTE_LANE + lane
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"sccache {lane + 1}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for step in report.steps:
        if step.start is None or step.end is None:
            continue
        events.append(
            {
                "name": step.label,
                "cat": step.kind,
                "ph": "X",
                "ts": offset_us + step.start * 1e6,
                "dur": max(step.seconds * 1e6, 1.0),
                "pid": pid,
                "tid": REMOTE_LANE + remote_lanes[step.task] if step.task in remote_lanes
                else 0 if step.slot is None else step.slot + 1,
                "args": {
                    "remote": step.remote,
                    "exit_code": step.exit_code,
                    "state": step.state,
                    "critical": step.critical,
                    "cpu_seconds": step.cpu_seconds,
                    "max_rss_kb": step.max_rss_kb,
                    "waited_seconds": round(step.waited, 6),
                    "memory_waited_seconds": round(step.memory_waited, 6),
                    "memory_stopped_seconds": round(step.memory_stopped, 6),
                    "memory_evicted": step.memory_evicted,
                    "oom_rerun": step.oom_rerun,
                    "command": shlex.join(step.command),
                },
            }
        )
    return events


REMOTE_LANE = 1000  # the lanes of steps at sccache, which hold no local slot, come after the slots'


def _remote_lanes(report: RunReport) -> dict[int, int]:
    """Steps at sccache without a slot, packed into as few lanes as overlap allows."""
    ends: list[float] = []
    lanes: dict[int, int] = {}
    for step in sorted(report.steps, key=lambda s: s.start or 0.0):
        if step.remote is None or step.slot is not None or step.start is None or step.end is None:
            continue
        free = next((i for i, end in enumerate(ends) if end <= step.start), None)
        if free is None:
            ends.append(step.end)
            free = len(ends) - 1
        ends[free] = step.end
        lanes[step.task] = free
    return lanes


def write_trace(
    report: RunReport, path: str, *, name: str = "fast_nvcc", tool_events: Mapping[int, Sequence[dict]] | None = None
) -> None:
    """``tool_events``: cicc's and ptxas's own spans by plan step (--device-trace), in
    microseconds from the run's start; they nest under their step, on its lane."""
    events = trace_events(report, name=name)
    for step in report.steps:
        if tool_events and step.index in tool_events and step.action in RUNS_TOOL and step.start is not None:
            tid = 0 if step.slot is None else step.slot + 1
            events += [{**event, "pid": 1, "tid": tid} for event in tool_events[step.index]]
    document = {"traceEvents": events, "displayTimeUnit": "ms"}
    write_text(path, json.dumps(document, indent=1))
