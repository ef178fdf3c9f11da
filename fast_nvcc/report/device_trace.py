"""The device tools' own time traces, read back after the run: merged into the document nvcc
writes for ``--fdevice-time-trace``, and placed on fast_nvcc's trace and log.

The tools ran with the options :mod:`fast_nvcc.plan.tool_traces` put on the plan, each counting
from its own start; :func:`merge_trace` moves each tool's events to the time its step really
started (the steps ran in parallel, so one clock offset per command would be wrong).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..graph.tasks import Action, Dag
from ..plan.dryrun import Kind, Plan, Step
from ..plan.tool_traces import HostTrace, ToolTrace, ToolTraces, merged_trace_path, nvcc_version
from ..run.task_records import RunResult

# What nvcc calls each step in its trace (process_name), by kind; "{cc}" is the host compiler.
_PHASE_NAMES: Mapping[Kind, str] = {
    Kind.PREPROCESS: "{cc} (preprocessing {n})",
    Kind.CUDAFE: "cudafe++",
    Kind.CICC: "cicc",
    Kind.PTXAS: "ptxas",
    Kind.FATBINARY: "fatbinary",
    Kind.NVLINK: "nvlink",
    Kind.HOST_COMPILE: "{cc} (compiling)",
    Kind.LINK: "{cc} (linking)",
}


def read_host_trace(trace: HostTrace, spans: Mapping[int, tuple[int, int]]) -> list[dict[str, Any]]:
    """clang's spans, moved to where the step ran; clang's "Total ..." summaries left out."""
    span = spans.get(trace.step)
    if span is None:
        return []
    return [{**e, "ts": e["ts"] + span[0]} for e in read_tool_trace(trace.path)
            if e.get("ph") == "X" and "ts" in e and not str(e.get("name", "")).startswith("Total ")]  # fmt: skip


def read_tool_trace(path: str) -> list[dict[str, Any]]:
    """The events of one tool trace file; none when the tool failed before writing it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return []
    events = document.get("traceEvents") if isinstance(document, dict) else document
    return [e for e in events or () if isinstance(e, dict)]


def phase_name(step: Step, *, preprocess_number: int) -> str:
    template = _PHASE_NAMES.get(step.kind, step.tool)
    return template.format(cc=os.path.basename(step.argv[0]) if step.argv else "", n=preprocess_number)


def merge_trace(
    plan: Plan,
    traces: ToolTraces,
    spans: Mapping[int, tuple[int, int]],
    *,
    sources: Mapping[int, str],
    input_files: Sequence[str],
) -> dict[str, Any]:
    """The document nvcc writes: ``spans`` are each step's (start, end) in microseconds since
    the compile started; ``sources`` the input file (as given) each step works for."""
    host_arch = _host_arch(plan)
    tool_steps = {i for trace in traces.files for i in (trace.cicc, *trace.ptxas)}
    events: list[dict[str, Any]] = [{}]
    order = 0
    for step in plan.steps:
        if step.kind in (Kind.REMOVE, Kind.DEPFILE) or step.index not in spans:
            continue
        pid = traces.pids[step.index]
        # nvcc numbers the host's preprocessing 4 and each architecture's 1.
        name = phase_name(step, preprocess_number=1 if step.arch else 4)
        if step.index not in tool_steps:
            start, end = spans[step.index]
            events.append({"args": {"detail": name}, "dur": end - start, "name": name, "ph": "X",
                           "pid": pid, "ts": start, "tid": 0})  # fmt: skip
        order += 1
        events.append({"args": {"sort_index": order}, "name": "process_sort_index", "ph": "M", "pid": pid})
        events.append({"args": {"name": name}, "cat": "", "name": "process_name", "ph": "M", "pid": pid})
        label = os.path.basename(sources.get(step.index, "")) or sources.get(step.index, "")
        arch = _thread_arch(step, host_arch)
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"{label} [{arch}]" if arch else label}})  # fmt: skip
    for trace in traces.files:
        events += shift_tool_events(read_tool_trace(trace.path), trace, traces.pids, spans)
    archs = [s.arch for s in plan.steps if s.kind is Kind.CICC and s.arch]
    other = {
        "inputFiles": list(input_files),
        "targetArchs": list(reversed(list(dict.fromkeys(archs)))),  # nvcc lists them last first
        "numThreads": -1,
        "splitCompile": -1,
        "isNVRTC": 0,
    }
    return {"otherData": other, "traceEvents": events}


def shift_tool_events(
    events: Sequence[dict[str, Any]],
    trace: ToolTrace,
    pids: Mapping[int, int],
    spans: Mapping[int, tuple[int, int]],
) -> list[dict[str, Any]]:
    """cicc counted from its own start (``_NVCC_TRACE_TS_P=0``) and each ptxas from the end of
    cicc's LibNVVM span: move each tool's events to where its step really ran."""
    shifts: dict[int, int] = {}
    cicc_span = spans.get(trace.cicc)
    if cicc_span is not None:
        shifts[pids[trace.cicc]] = cicc_span[0]
    for index in trace.ptxas:
        pid = pids[index]
        first = min((e["ts"] for e in events if e.get("pid") == pid and "ts" in e), default=None)
        if first is not None and index in spans:
            shifts[pid] = spans[index][0] - first
    shifted = []
    for event in events:
        offset = shifts.get(event.get("pid"))
        if offset and "ts" in event:
            event = {**event, "ts": event["ts"] + offset}
        shifted.append(event)
    return shifted


def _host_arch(plan: Plan) -> str | None:
    """nvcc labels cudafe++ and the host compile with the last architecture it compiled for."""
    archs = [s.arch for s in plan.steps if s.kind is Kind.CICC and s.arch]
    return archs[-1] if archs else None


def _thread_arch(step: Step, host_arch: str | None) -> str | None:
    if step.kind in (Kind.CICC, Kind.PTXAS):
        return step.arch
    if step.kind is Kind.PREPROCESS:
        return step.arch
    if step.kind in (Kind.CUDAFE, Kind.HOST_COMPILE):
        return host_arch
    return None


def write_json(path: str, document: Mapping[str, Any]) -> None:
    from ..files import write_atomically

    write_atomically(path, json.dumps(document, separators=(",", ":")).encode("utf-8"))


# cicc's and ptxas's spans that split a compile into front end, optimiser and code generation.
PHASES = {
    "CUDA C++ Front-End": "front_end",
    "NVVM Optimizer": "optimizer",
    "NVVM CodeGen": "codegen",
    "Total PTXAS Time": "ptxas",
    # clang -ftime-trace (the host compile under -ccbin clang++)
    "Frontend": "front_end",
    "OptModule": "optimizer",
    "Backend": "codegen",
}


_TEMPLATE_EVENTS = ("Instantiating Template Function", "Instantiating Template Class")


_CLANG_TEMPLATE_EVENTS = ("InstantiateFunction", "InstantiateClass")


_HEADER_EVENTS = ("Processing Header File", "Source")


_PHASE_OF_FUNCTION = {"NVVM Optimizer": "optimize", "NVVM CodeGen": "codegen", "OptModule": "optimize"}


def template_name(detail: str, *, clang: bool = False) -> str:
    """cicc's detail is 'NAME [NAME<ARGS>(PARAMS)]': the template, then the instantiation;
    clang's is the instantiation alone, 'NAME<ARGS>'."""
    if clang:
        return detail.split("<", 1)[0] if not detail.startswith("operator") else detail
    return detail.split(" [", 1)[0]


def summarize_tool_events(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What analyze needs of one tool's trace, in microseconds: the phases, and per template
    [time, instantiations], per header the time, per function the time to optimise and to
    generate code (cicc's OptFunction inside its optimiser or code generator, ptxas's
    "Optimizing compilation unit").

    Spans nest; a template instantiated inside an instantiation of the same template (Chain<N>
    inside Chain<N+1>), or a header inside itself, counts its time once, at the outermost span,
    and every instantiation counts in the count."""
    spans = sorted(
        (e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    phases: dict[str, int] = {}
    templates: dict[str, list[int]] = {}
    headers: dict[str, int] = {}
    functions: dict[str, dict[str, int]] = {"optimize": {}, "codegen": {}}
    stack: list[tuple[int, str, str]] = []  # (end, name, key) of the spans enclosing this one
    for event in spans:
        start, dur, name = event["ts"], event["dur"], event.get("name", "")
        while stack and stack[-1][0] <= start and not (dur == 0 and stack[-1][0] == start):
            stack.pop()
        args = event.get("args") or {}
        detail = str(args.get("detail", args.get("name", "")))
        key = ""
        if name in PHASES:
            phases[PHASES[name]] = phases.get(PHASES[name], 0) + dur
        elif name in _TEMPLATE_EVENTS or name in _CLANG_TEMPLATE_EVENTS:
            key = template_name(detail, clang=name in _CLANG_TEMPLATE_EVENTS)
            entry = templates.setdefault(key, [0, 0])
            entry[1] += 1
            if not any(k == key and (n in _TEMPLATE_EVENTS or n in _CLANG_TEMPLATE_EVENTS) for _, n, k in stack):
                entry[0] += dur
        elif name in _HEADER_EVENTS:
            key = detail
            if not any(k == key and n == name for _, n, k in stack):
                headers[key] = headers.get(key, 0) + dur
        elif name == "OptFunction":
            key = detail
            phase = next((_PHASE_OF_FUNCTION[n] for _, n, _ in reversed(stack) if n in _PHASE_OF_FUNCTION), None)
            if phase and not any(k == key and n == name for _, n, k in stack):
                functions[phase][key] = functions[phase].get(key, 0) + dur
        elif name == "Optimizing compilation unit" and detail:
            key = detail
            functions["codegen"][key] = functions["codegen"].get(key, 0) + dur
        stack.append((start + dur, name, key))
    return {"phases": phases, "templates": templates, "headers": headers, **functions}


def sidecar_path(log: str) -> str:
    """Where the build log's device traces go: next to it, so the log's lines stay short."""
    root, _ = os.path.splitext(os.path.abspath(log))
    return root + ".device.jsonl"


def sidecar_line(record_id: str, plan: Plan, tool_events: Mapping[int, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    steps = []
    for index in sorted(tool_events):
        step = plan.steps[index]
        steps.append({"index": index, "tool": step.tool, "arch": step.arch,
                      **summarize_tool_events(tool_events[index])})  # fmt: skip
    return {"version": 1, "id": record_id, "steps": steps}


# -- after a run: the tools' files read and placed ---------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectedTraces:
    merged: dict  # the document nvcc writes for --fdevice-time-trace
    tool_events: dict[int, list[dict]]  # plan step index -> its tool's events, run-relative µs


def collect_traces(plan: Plan, dag: Dag, result: RunResult, traces: ToolTraces, *, sources: Sequence[str],
                   owners: Mapping[int, str], cwd: str, started: float) -> CollectedTraces:  # fmt: skip
    """Read the tools' trace files (before the work directory goes) and place their events."""
    spans: dict[int, tuple[int, int]] = {}
    for task, record in zip(dag.tasks, result.records):
        if task.action is Action.CHECK_MODULE_ID or record.start is None or record.end is None:
            continue
        start, end = round(record.start * 1e6), round(record.end * 1e6)
        known = spans.get(task.step.index)
        spans[task.step.index] = (min(start, known[0]), max(end, known[1])) if known else (start, end)
    given = {os.path.join(cwd, s): s for s in sources}
    by_step = {index: given.get(path, path) for index, path in owners.items()}
    # nvcc counts from its own start; fast_nvcc's run from the Runner's.
    offset = round((result.started_at - started) * 1e6)
    nvcc_spans = {i: (s + offset, e + offset) for i, (s, e) in spans.items()}
    merged = merge_trace(plan, traces, nvcc_spans, sources=by_step, input_files=list(given.values()))
    tool_events: dict[int, list[dict]] = {}
    for trace in traces.files:
        for event in shift_tool_events(read_tool_trace(trace.path), trace, traces.pids, spans):
            step = next((i for i in (trace.cicc, *trace.ptxas) if traces.pids[i] == event.get("pid")), None)
            if step is not None and event.get("ph") == "X":
                tool_events.setdefault(step, []).append(event)
    for host in traces.host:
        tool_events[host.step] = read_host_trace(host, spans)
    return CollectedTraces(merged, tool_events)


def write_merged_trace(collected: CollectedTraces, path: str, cwd: str, returncode: int) -> int:
    """nvcc's own --fdevice-time-trace file; one that cannot be written fails as nvcc's does."""
    try:
        write_json(os.path.join(cwd, path), collected.merged)
    except OSError:
        sys.stderr.write(f"nvcc fatal   : Failed to open trace file '{path}'\n")
        sys.stderr.flush()
        return returncode or 1
    return returncode


def finish_traces(plan: Plan, dag: Dag, result: RunResult, traces: ToolTraces, *, requested: str | None,
                  effective: Sequence[str], sources: Sequence[str], owners: Mapping[int, str], cwd: str,
                  started: float) -> tuple[int, CollectedTraces]:  # fmt: skip
    """The tools' traces collected, and nvcc's own --fdevice-time-trace file written where it was
    ``requested``; the exit code, which a trace file that cannot be written makes 1."""
    collected = collect_traces(plan, dag, result, traces, sources=sources, owners=owners, cwd=cwd, started=started)
    returncode = result.returncode
    if requested is not None:
        path = merged_trace_path(requested, effective, version=nvcc_version(plan))
        returncode = write_merged_trace(collected, path, cwd, returncode)
    return returncode, collected
