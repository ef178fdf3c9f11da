"""nvcc's ``--fdevice-time-trace``, run in the graph; and the per-tool traces of every compile.

``--fdevice-time-trace`` is not in ``nvcc --dryrun``'s plan.  ``nvcc -v`` shows what nvcc
really runs (nvcc 13.0; docs/device-trace.md): cicc gets
``--device-time-trace T --use-trace-pid P --trace-env _NVCC_TRACE_TS_P`` with
``_NVCC_TRACE_TS_P`` in its environment (the milliseconds since nvcc started, which cicc adds to
its own clock), and the ptxas that reads cicc's PTX gets
``--fdevice-time-trace T --use-trace-pid Q --ftrace-phase-after=LibNVVM``: it reads T, places
its events after cicc's "LibNVVM" span and rewrites T.  One T per architecture.  At the end nvcc
writes ``{"otherData": ..., "traceEvents": [{}, <one span and three names per step>, <each T>]}``
to ``F.json`` (``-`` means the ``-o`` file's name plus ``.json``, else ``trace.json``).

fast_nvcc adds the same options to the plan's cicc and ptxas (:func:`add_tool_traces`), with
``_NVCC_TRACE_TS_P=0`` so that each tool counts from its own start, and moves each tool's
events to the time the step really started when it merges (:func:`merge_trace`): the steps run
in parallel, so one clock offset per command, fixed when the plan is made, would be wrong.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..plan.dryrun import Kind, Plan, Step, file_key

# The first nvcc seen to keep a trace name ending in .json (13.0 does not; 13.1-13.4 unmeasured).
KEEPS_JSON_SUFFIX = (13, 5)
_VERSION_DEFINE = re.compile(r"-D__CUDACC_VER_(MAJOR|MINOR)__=(\d+)")
TRACE_OPTION = "--fdevice-time-trace"  # nvcc_args' canonical name; -fdevice-time-trace too
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


@dataclass(frozen=True, slots=True)
class ToolTrace:
    """One architecture's trace file: cicc writes it, the ptxas steps add to it."""

    path: str
    cicc: int  # plan step index
    ptxas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HostTrace:
    """A clang host compile's own -ftime-trace: clang 14 writes it next to the object."""

    path: str
    step: int  # plan step index


@dataclass(frozen=True, slots=True)
class ToolTraces:
    files: tuple[ToolTrace, ...]
    pids: Mapping[int, int]  # plan step index -> the trace's pid for that step
    host: tuple[HostTrace, ...] = ()


def requested_trace(args: Sequence[str]) -> str | None:
    """The value of the last --fdevice-time-trace (nvcc takes the last), or None."""
    from ..plan.nvcc_args import iter_options

    value = None
    for option in iter_options(args):
        if option.name == TRACE_OPTION:
            value = option.value
    return value


def merged_trace_path(value: str, args: Sequence[str], *, version: tuple[int, int] = (13, 0)) -> str:
    """Where nvcc writes the merged trace, relative to the working directory (measured): nvcc
    13.0 appends ``.json`` to the name given (``tt.json`` gives ``tt.json.json``), 13.5 only to
    a name that does not end in ``.json`` (case counts: ``tt.JSON.json``); ``-`` means the
    ``-o`` file's name plus ``.json`` (always), or ``trace.json`` without ``-o``."""
    if value != "-":
        keeps = version >= KEEPS_JSON_SUFFIX and value.endswith(".json")
        return value if keeps else value + ".json"
    from ..plan.nvcc_args import iter_options

    output = None
    for option in iter_options(args):
        if option.name == "--output-file":
            output = option.value
    return (output + ".json") if output else "trace.json"


def nvcc_version(plan: Plan) -> tuple[int, int]:
    """nvcc's version, from the macros its plan defines for the preprocessor."""
    found: dict[str, int] = {}
    for step in plan.steps:
        for word in step.argv:
            match = _VERSION_DEFINE.fullmatch(word)
            if match:
                found[match.group(1)] = int(match.group(2))
        if len(found) == 2:
            return found["MAJOR"], found["MINOR"]
    return (0, 0)


def pid_of(step: Step) -> int:
    """A distinct trace pid per step (nvcc numbers its own; the numbers carry no meaning)."""
    return step.index + 3


def trace_files(argv) -> list[str]:
    """The trace files a cicc of :func:`add_tool_traces` writes (``--device-time-trace PATH``).
    A run stopped to be run again may leave one half-written, and the ptxas after the new run
    then reads what it finds there: "... not in expected format", exit 255 (once in the suite,
    2026-11-25).  The runner removes them first."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--device-time-trace"]


def add_tool_traces(plan: Plan, *, directory: str, cwd: str, host: bool = False) -> tuple[Plan, ToolTraces]:
    """The plan with nvcc's trace options on each cicc and on the ptxas steps that read its
    PTX, each architecture's trace file in ``directory`` (its own, so the architectures run in
    parallel), and what the merge needs to know.  ``host``: also clang's -ftime-trace on a
    clang host compile."""
    steps = list(plan.steps)
    env = dict(plan.env)
    files = []
    pids = {step.index: pid_of(step) for step in plan.steps}
    for step in plan.steps:
        if step.kind is not Kind.CICC:
            continue
        ptx = _option_value(step.argv, "-o")
        if ptx is None:
            continue
        path = os.path.join(directory, f"device-trace-{step.index}")
        key = file_key(path, cwd=cwd)
        pid = pids[step.index]
        variable = f"_NVCC_TRACE_TS_{pid}"
        env[variable] = "0"
        words = ("--device-time-trace", path, "--use-trace-pid", str(pid), "--trace-env", variable)
        steps[step.index] = _with_words(step, words, at_end=True, writes={key})
        readers = []
        ptx_key = file_key(ptx, cwd=cwd)
        for other in plan.steps[step.index + 1 :]:
            if other.kind is Kind.PTXAS and ptx_key in other.reads:
                words = (TRACE_OPTION, path, "--use-trace-pid", str(pids[other.index]),
                         "--ftrace-phase-after=LibNVVM")  # fmt: skip
                steps[other.index] = _with_words(other, words, at_end=False, writes={key}, reads={key})
                readers.append(other.index)
        files.append(ToolTrace(path, step.index, tuple(readers)))
    hosts = []
    for step in plan.steps if host else ():
        path = _host_trace_path(step, cwd=cwd)
        if path is not None:
            # Granularity 0: every instantiation, so that the counts are exact (clang's default
            # leaves out spans under 500 us).
            words = ("-ftime-trace", "-ftime-trace-granularity=0")
            steps[step.index] = _with_words(steps[step.index], words, at_end=False, writes={file_key(path, cwd=cwd)})
            hosts.append(HostTrace(path, step.index))
    # The clang traces sit next to the user's objects: the driver's clean-up removes them.
    temp_paths = plan.temp_paths | {h.path for h in hosts}
    return (replace(plan, steps=tuple(steps), env=env, temp_paths=temp_paths),
            ToolTraces(tuple(files), pids, tuple(hosts)))  # fmt: skip


def _host_trace_path(step: Step, *, cwd: str) -> str | None:
    """Where clang -ftime-trace will write this host compile's trace (clang 14 has no
    -ftime-trace=PATH: ``-o dir/k.o`` gives ``dir/k.json``), or None: not a clang compile, or a
    file of that name exists, which the trace would overwrite."""
    if step.kind is not Kind.HOST_COMPILE or "clang" not in os.path.basename(step.argv[0]):
        return None
    output = _option_value(step.argv, "-o")
    if output is None:
        return None
    path = os.path.normpath(os.path.join(cwd, os.path.splitext(output)[0] + ".json"))
    return None if os.path.lexists(path) else path


def read_host_trace(trace: HostTrace, spans: Mapping[int, tuple[int, int]]) -> list[dict[str, Any]]:
    """clang's spans, moved to where the step ran; clang's "Total ..." summaries left out."""
    span = spans.get(trace.step)
    if span is None:
        return []
    return [{**e, "ts": e["ts"] + span[0]} for e in read_tool_trace(trace.path)
            if e.get("ph") == "X" and "ts" in e and not str(e.get("name", "")).startswith("Total ")]  # fmt: skip


def _option_value(argv: Sequence[str], option: str) -> str | None:
    for previous, word in zip(argv, argv[1:]):
        if previous == option:
            return word
    return None


def _with_words(step: Step, words: Sequence[str], *, at_end: bool, writes, reads=frozenset()) -> Step:
    import shlex

    quoted = " ".join(shlex.quote(w) for w in words)
    if at_end:
        argv = (*step.argv, *words)
        text = f"{step.text.rstrip()} {quoted}"
    else:
        argv = (step.argv[0], *words, *step.argv[1:])
        first, _, rest = step.text.partition(" ")
        text = f"{first} {quoted} {rest}"
    return replace(step, argv=argv, text=text, writes=step.writes | writes, reads=step.reads | reads)


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


# -- one tool's trace, summed up for the build log ----------------------------------------------

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
