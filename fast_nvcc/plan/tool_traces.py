"""nvcc's ``--fdevice-time-trace``, put on the plan's steps; the report's half merges what they wrote.

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
``_NVCC_TRACE_TS_P=0`` so that each tool counts from its own start;
:mod:`fast_nvcc.report.device_trace` moves each tool's events to the time the step really
started when it merges: the steps run in parallel, so one clock offset per command, fixed when
the plan is made, would be wrong.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .dryrun import Kind, Plan, Step, file_key
from .nvcc_args import TRACE_OPTION, iter_options

# The first nvcc seen to keep a trace name ending in .json (13.0 does not; 13.1-13.4 unmeasured).
KEEPS_JSON_SUFFIX = (13, 5)


_VERSION_DEFINE = re.compile(r"-D__CUDACC_VER_(MAJOR|MINOR)__=(\d+)")


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


def merged_trace_path(value: str, args: Sequence[str], *, version: tuple[int, int] = (13, 0)) -> str:
    """Where nvcc writes the merged trace, relative to the working directory (measured): nvcc
    13.0 appends ``.json`` to the name given (``tt.json`` gives ``tt.json.json``), 13.5 only to
    a name that does not end in ``.json`` (case counts: ``tt.JSON.json``); ``-`` means the
    ``-o`` file's name plus ``.json`` (always), or ``trace.json`` without ``-o``."""
    if value != "-":
        keeps = version >= KEEPS_JSON_SUFFIX and value.endswith(".json")
        return value if keeps else value + ".json"
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
    then reads what it finds there: "... not in expected format", exit 255 (docs/benchmarks.md).
    The runner removes them first."""
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
    # The clang traces sit next to the user's objects: the run's clean-up removes them (run/outputs.py).
    temp_paths = plan.temp_paths | {h.path for h in hosts}
    return (plan._replace(steps=tuple(steps), env=env, temp_paths=temp_paths),
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
    return step._replace(argv=argv, text=text, writes=step.writes | writes, reads=step.reads | reads)
