"""Where one compile's time went: the graph, a table, a Chrome trace, a summary, a JSONL log.

Everything here reads a finished (or failed, or interrupted) run and writes files; nothing here
changes what the compile produces.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from ..errors import FastNvccError
from ..files import replace_atomically, write_atomically
from ..graph.dag import RUNS_TOOL, Action, Dag, critical_path
from ..plan.dryrun import Plan
from ..run.scheduler import Record, State

LOG_SCHEMA_VERSION = 1
RENDERED_FORMATS = ("svg", "png", "pdf")


class ReportError(FastNvccError):
    """A report cannot be written as asked (one line for the user)."""


@dataclass(frozen=True, slots=True)
class StepReport:
    task: int
    index: int
    label: str
    tool: str
    kind: str
    arch: str | None
    action: str
    start: float | None
    end: float | None
    seconds: float
    cpu_seconds: float | None
    max_rss_kb: int | None
    exit_code: int | None
    state: str
    critical: bool
    slot: int | None
    waited: float  # seconds from ready to start: waiting for a slot (or for -j)
    bytes_read: int
    bytes_written: int
    cached: bool | None
    command: tuple[str, ...]
    preds: tuple[int, ...]
    remote: str | None = None  # through sccache: remote, sccache-hit, sccache-local, local-fallback, sccache
    remote_note: str = ""
    over_pool: str | None = None  # started over the machine-wide pool: "first" or "drain"
    memory_waited: float = 0.0  # the part of ``waited`` held back by the memory budget
    memory_stopped: float = 0.0  # seconds stopped while memory ran short (fast_nvcc.machine.pressure)
    memory_evicted: bool = False  # ... then killed to make room for an older step, and run again
    oom_rerun: bool = False  # killed for memory and run again (fast_nvcc.machine.memory)
    guess_failed: str = ""  # a guess of fast_nvcc's that failed here (fast_nvcc.guess.decisions): why
    guess_lost: float = 0.0  # ... and the seconds of work it threw away
    core_timeline: tuple[tuple[float, int], ...] = ()  # a split step: (seconds into the run, cores) at each change

    @property
    def cores(self) -> int:
        """A split step: the most cores its threads held at once (0: not one)."""
        return max((n for _, n in self.core_timeline), default=0)


@dataclass(frozen=True, slots=True)
class RunReport:
    steps: tuple[StepReport, ...]
    wall_seconds: float
    exit_code: int
    jobs: int
    started_at: float = 0.0

    @property
    def serial_seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    @property
    def critical_path_seconds(self) -> float:
        return sum(step.seconds for step in self.steps if step.critical)

    def cache_counts(self) -> dict[str, tuple[int, int]]:
        """Per tool: (hits, misses) of the cacheable steps."""
        counts: dict[str, tuple[int, int]] = {}
        for step in self.steps:
            if step.cached is not None:
                hits, misses = counts.get(step.tool, (0, 0))
                counts[step.tool] = (hits + step.cached, misses + (not step.cached))
        return counts

    def remote_counts(self) -> dict[str, int]:
        """Steps sent to sccache, per outcome."""
        counts: dict[str, int] = {}
        for step in self.steps:
            if step.remote is not None:
                counts[step.remote] = counts.get(step.remote, 0) + 1
        return counts

    @property
    def slot_steps(self) -> list[StepReport]:
        return [s for s in self.steps if s.slot is not None and s.start is not None]

    @property
    def first_step_wait_seconds(self) -> float:
        """How long the compile waited before its first command started (steps count from
        the moment the plan was ready to run)."""
        started = [s.start for s in self.slot_steps]
        return min(started) if started else 0.0

    @property
    def slot_wait_seconds(self) -> float:
        """Ready commands' seconds spent waiting to start, summed."""
        return sum(s.waited for s in self.slot_steps)

    @property
    def memory_wait_seconds(self) -> float:
        """The part of the slot waits spent held back by the memory budget, summed."""
        return sum(s.memory_waited for s in self.slot_steps)

    @property
    def memory_stopped_seconds(self) -> float:
        """Seconds steps spent stopped while memory ran short, summed."""
        return sum(s.memory_stopped for s in self.steps)

    def failed_guesses(self) -> list[StepReport]:
        """The steps where a guess failed, the costliest first."""
        return sorted((s for s in self.steps if s.guess_failed), key=lambda s: -s.guess_lost)

    @property
    def parallelism(self) -> float:
        return self.serial_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


def build_report(
    dag: Dag,
    records: Sequence[Record],
    *,
    wall_seconds: float,
    exit_code: int,
    jobs: int,
    sizes: Mapping[int, tuple[int, int]] | None = None,
    started_at: float = 0.0,
) -> RunReport:
    durations = [record.seconds for record in records]
    critical = set(critical_path(as_run(dag, records), durations))
    sizes = sizes or {}
    steps = []
    for task, record in zip(dag.tasks, records):
        if task.optional and record.start is None:
            continue  # dropped before it started: nothing happened
        read, written = sizes.get(task.id, (0, 0))
        steps.append(
            StepReport(
                task=task.id,
                index=task.step.index,
                label=task.label,
                tool=_tool_of(task, record),
                kind=task.step.kind.value,
                arch=task.step.arch,
                action=task.action.value,
                start=record.start,
                end=record.end,
                seconds=record.seconds,
                cpu_seconds=record.cpu_seconds,
                max_rss_kb=record.max_rss_kb,
                exit_code=record.returncode,
                state="dropped" if record.dropped else record.state.value,
                critical=task.id in critical and record.state is not State.SKIPPED,
                slot=record.slot,
                waited=record.waited,
                bytes_read=read,
                bytes_written=written,
                cached=record.cached,
                command=_command_of(task),
                preds=tuple(sorted(dag.preds[task.id])),
                remote=record.remote,
                remote_note=record.remote_note,
                over_pool=record.over_pool,
                memory_waited=record.memory_wait,
                memory_stopped=record.memory_stopped,
                memory_evicted=record.memory_evicted,
                oom_rerun=record.oom_rerun,
                guess_failed=record.guess_failed,
                guess_lost=record.guess_lost,
                core_timeline=tuple(record.core_timeline),
            )
        )
    return RunReport(tuple(steps), wall_seconds, exit_code, jobs, started_at)


def as_run(dag: Dag, records: Sequence[Record]) -> Dag:
    """``dag`` with the waits its ciccs really had (fast_nvcc.guess.module_id): one that ran on a
    predicted module_id started with cudafe++, not after it; one whose own id failed ran
    again after cudafe++ ended.  So a critical path neither counts cudafe++ where the cicc
    did not wait for it, nor leaves it out where the cicc did."""
    preds = [set(p) for p in dag.preds]
    for task, record in zip(dag.tasks, records):
        if task.early is None:
            continue
        writer = task.early[0]
        if task.predicted_module_id is not None and not record.guess_failed:
            preds[task.id].discard(writer)
        elif task.own_module_id and record.guess_failed:
            preds[task.id].add(writer)
    return replace(dag, preds=tuple(frozenset(p) for p in preds))


def _tool_of(task, record) -> str:
    if task.action is Action.CHECK_MODULE_ID:
        return "check module_id"
    if task.action is Action.HOST_FRONT:
        return "cc1plus"
    if task.action is Action.HOST_BACK and record.split:
        return "as"
    if task.action is Action.STUB_PROBE:
        return "cicc stub"
    return task.step.tool


def _command_of(task) -> tuple[str, ...]:
    if task.action is Action.SHELL:
        return ("/bin/sh", "-c", task.step.text)
    if task.action is Action.CHECK_MODULE_ID:
        return task.rerun
    return task.argv or (task.step.text,)


# -- the graph --------------------------------------------------------------------------------


def check_graph_path(path: str) -> None:
    """Fail before compiling when --graph asks for a rendering nobody can make."""
    ext = _extension(path)
    if ext == "dot" or ext == "gv":
        return
    if ext not in RENDERED_FORMATS:
        raise ReportError(f"--graph {path}: use .dot, .gv, {', '.join('.' + f for f in RENDERED_FORMATS)}")
    import shutil

    if shutil.which("dot") is None:
        raise ReportError(
            f"--graph {path} needs Graphviz's 'dot' program (e.g. apt install graphviz); "
            "a .dot file needs nothing"
        )


def graph_source(report: RunReport, *, title: str = "") -> str:
    import graphviz

    dot = graphviz.Digraph("fast_nvcc", graph_attr={"rankdir": "LR", "label": title, "labelloc": "t"})
    dot.attr("node", shape="box", style="rounded,filled", fillcolor="white", fontname="Helvetica")
    for step in report.steps:
        label = step.label
        if step.state in ("done", "failed"):
            label += f"\n{step.seconds:.2f} s"
        attrs = {"label": label}
        if step.critical:
            attrs.update(color="red", penwidth="2.5", fillcolor="#ffe6e6")
        if step.state == "failed":
            attrs.update(fillcolor="#ff9999")
        elif step.state in ("skipped", "killed"):
            attrs.update(style="rounded,dashed", fontcolor="gray40")
        dot.node(str(step.task), **attrs)
    critical = {s.task for s in report.steps if s.critical}
    for step in report.steps:
        for pred in step.preds:
            on_path = pred in critical and step.task in critical
            dot.edge(str(pred), str(step.task), **({"color": "red", "penwidth": "2.5"} if on_path else {}))
    return dot.source


def write_graph(report: RunReport, path: str, *, title: str = "") -> None:
    source = graph_source(report, title=title)
    ext = _extension(path)
    if ext in ("dot", "gv"):
        _write_text(path, source)
        return
    import graphviz

    data = graphviz.Source(source).pipe(format=ext)
    write_atomically(path, data)


# -- the table ---------------------------------------------------------------------------------

TABLE_COLUMNS = (
    "index", "task", "tool", "arch", "state", "start", "end", "seconds", "cpu_seconds",
    "max_rss_kb", "exit_code", "critical", "bytes_read", "bytes_written", "slot", "wait_seconds", "cache", "command", "remote",
)  # fmt: skip


def write_table(report: RunReport, path: str) -> None:
    rows = []
    for step in sorted(report.steps, key=lambda s: (s.index, s.task)):
        rows.append(
            {
                "index": step.index,
                "task": step.task,
                "tool": step.tool,
                "arch": step.arch or "",
                "state": step.state,
                "start": _fmt(step.start),
                "end": _fmt(step.end),
                "seconds": f"{step.seconds:.6f}",
                "cpu_seconds": _fmt(step.cpu_seconds),
                "max_rss_kb": "" if step.max_rss_kb is None else step.max_rss_kb,
                "exit_code": "" if step.exit_code is None else step.exit_code,
                "critical": int(step.critical),
                "bytes_read": step.bytes_read,
                "bytes_written": step.bytes_written,
                "slot": "" if step.slot is None else step.slot,
                "wait_seconds": f"{step.waited:.6f}" if step.start is not None else "",
                "cache": {None: "", True: "hit", False: "miss"}[step.cached],
                "command": shlex.join(step.command),
                "remote": step.remote or "",
            }
        )

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=TABLE_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    replace_atomically(path, write)


# -- the trace ---------------------------------------------------------------------------------


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
    _write_text(path, json.dumps(document, indent=1))


# -- the summary and the plan listing ----------------------------------------------------------


def format_summary(report: RunReport, *, what: str = "") -> str:
    ran = [s for s in report.steps if s.state in ("done", "failed") and s.action != "check-module-id"]
    longest = sorted(ran, key=lambda s: s.seconds, reverse=True)[:3]
    head = f"fast_nvcc: {what} (exit {report.exit_code})" if what else f"fast_nvcc: exit {report.exit_code}"
    lines = [
        head,
        f"  wall {report.wall_seconds:.2f} s | steps {report.serial_seconds:.2f} s"
        f" | critical path {report.critical_path_seconds:.2f} s"
        f" | parallelism {report.parallelism:.1f} of {report.jobs} jobs",
        "  longest: " + "; ".join(f"{s.label} {s.seconds:.2f} s" for s in longest),
    ]
    if report.slot_steps:
        lines.append(
            f"  waited for slots: {report.first_step_wait_seconds:.2f} s before the first step,"
            f" {report.slot_wait_seconds:.2f} s in all ({sum(s.waited > 0.05 for s in report.slot_steps)}"
            f" of {len(report.slot_steps)} commands waited)"
        )
    held = [s for s in report.slot_steps if s.memory_waited > 0]
    if held:
        lines.append(f"  waited for memory: {report.memory_wait_seconds:.2f} s in all ({len(held)} commands held back"
                     " by the memory budget)")  # fmt: skip
    stopped = [s for s in report.steps if s.memory_stopped > 0]
    if stopped:
        lines.append(f"  stopped while memory ran short: {report.memory_stopped_seconds:.2f} s in all"
                     f" ({len(stopped)} commands)")  # fmt: skip
    reruns = [s.label for s in report.steps if s.oom_rerun]
    if reruns:
        lines.append("  killed for memory, run again: " + ", ".join(reruns))
    counts = report.cache_counts()
    if counts:
        hits = sum(h for h, _ in counts.values())
        misses = sum(m for _, m in counts.values())
        detail = ", ".join(f"{tool} {h}/{h + m}" for tool, (h, m) in counts.items())
        lines.append(f"  cache: {hits} hits, {misses} misses ({detail} hit)")
    remote = report.remote_counts()
    if remote:
        sent = [s for s in report.steps if s.remote is not None]
        waited = max(s.waited for s in sent)
        detail = ", ".join(f"{what} {n}" for what, n in sorted(remote.items()))
        lines.append(f"  sccache: {len(sent)} steps ({detail}); longest wait to start {waited:.2f} s")
    split = [s for s in report.steps if s.cores]
    if split:
        lines.append("  split steps: " + ", ".join(
            f"{s.label} {s.seconds:.2f} s on up to {s.cores} core{'s' if s.cores != 1 else ''}"
            + (f" ({s.cpu_seconds:.2f} s cpu)" if s.cpu_seconds is not None else "") for s in split))  # fmt: skip
    failed = report.failed_guesses()
    if failed:
        lost = sum(s.guess_lost for s in failed)
        twice = [f"{_guess_what(s)} ran twice {s.guess_lost:.2f} s ({s.guess_failed})" for s in failed if s.guess_lost]
        before = [s for s in failed if not s.guess_lost]
        if before:
            twice.append(", ".join(_guess_what(s) for s in before) + f" ran as printed from the start ({before[0].guess_failed})")
        lines.append(f"  failed guesses: {lost:.2f} s of work thrown away: " + "; ".join(twice))
    return "\n".join(lines) + "\n"


def _guess_what(step: StepReport) -> str:
    """What a failed guess was made for."""
    if step.action == "host-back":
        return "host compile"
    return f"cicc {step.arch}" if step.arch else "cicc"


def write_plan_listing(plan: Plan, path: str) -> None:
    """The plan as nvcc would run it: its variables, then each command expanded, one argument
    per line."""
    lines = ["# nvcc's variables, set in the environment of every command"]
    lines += [f"{name}={value}" for name, value in plan.assignments]
    for step in plan.steps:
        lines.append("")
        lines.append(f"# {step.label}")
        if step.needs_shell or not step.argv:
            lines.append(step.text)
            continue
        lines.extend(shlex.quote(word) for word in step.argv)
        lines.extend(f"{'' if r.fd == 1 else r.fd}{'>>' if r.append else '>'} {shlex.quote(r.target)}" for r in step.redirects)
    _write_text(path, "\n".join(lines) + "\n")


# -- the build log (FAST_NVCC_LOG) -------------------------------------------------------------


def log_record(
    *,
    nvcc: str,
    args: Sequence[str],
    cwd: str,
    sources: Sequence[str],
    outputs: Sequence[str],
    exit_code: int,
    wall_seconds: float,
    started: float,
    mode: str,
    reason: str | None = None,
    report: RunReport | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "version": LOG_SCHEMA_VERSION,
        "time": started,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cwd": cwd,
        "nvcc": nvcc,
        "args": list(args),
        "sources": list(sources),
        "outputs": list(outputs),
        "exit_code": exit_code,
        "wall_seconds": round(wall_seconds, 6),
        "mode": mode,
    }
    if reason:
        record["reason"] = reason
    if report is not None:
        record["jobs"] = report.jobs
        record["run_start"] = report.started_at
        record["critical_path_seconds"] = round(report.critical_path_seconds, 6)
        record["first_step_wait_seconds"] = round(report.first_step_wait_seconds, 6)
        record["slot_wait_seconds"] = round(report.slot_wait_seconds, 6)
        record["memory_wait_seconds"] = round(report.memory_wait_seconds, 6)
        record["memory_stopped_seconds"] = round(report.memory_stopped_seconds, 6)
        counts = report.cache_counts()
        if counts:
            record["cache"] = {
                "hits": sum(h for h, _ in counts.values()),
                "misses": sum(m for _, m in counts.values()),
                "tools": {tool: {"hits": h, "misses": m} for tool, (h, m) in counts.items()},
            }
        remote = report.remote_counts()
        if remote:
            sent = [s for s in report.steps if s.remote is not None]
            record["remote"] = {
                "launcher": "sccache",
                "outcomes": remote,
                "seconds": round(sum(s.seconds for s in sent), 6),
                "waited_seconds": round(sum(s.waited for s in sent), 6),
            }
        failed = report.failed_guesses()
        if failed:
            record["failed_guesses"] = {"steps": len(failed), "lost_seconds": round(sum(s.guess_lost for s in failed), 6)}
        record["steps"] = [
            {
                "index": s.index,
                "tool": s.tool,
                "kind": s.kind,
                "arch": s.arch,
                "start": _round(s.start),
                "end": _round(s.end),
                "seconds": round(s.seconds, 6),
                "cpu_seconds": _round(s.cpu_seconds),
                "max_rss_kb": s.max_rss_kb,
                "exit_code": s.exit_code,
                "state": s.state,
                "critical": s.critical,
                "wait": _round(s.waited if s.start is not None else None),
                "command": s.action in RUNS_TOOL,
                "cached": s.cached,
                **({"remote": s.remote} if s.remote is not None else {}),
                **({"remote_note": s.remote_note} if s.remote_note else {}),
                **({"over_pool": s.over_pool} if s.over_pool else {}),
                **({"memory_wait": round(s.memory_waited, 6)} if s.memory_waited else {}),
                **({"memory_stopped": round(s.memory_stopped, 6)} if s.memory_stopped else {}),
                **({"memory_evicted": True} if s.memory_evicted else {}),
                **({"oom_rerun": True} if s.oom_rerun else {}),
                **({"guess_failed": s.guess_failed, "guess_lost": round(s.guess_lost, 6)} if s.guess_failed else {}),
                **({"cores": s.cores, "cores_at": [[round(t, 6), n] for t, n in s.core_timeline]} if s.cores else {}),
            }
            for s in report.steps
        ]
    return record


def append_log(path: str, record: Mapping[str, Any]) -> None:
    """Append one JSON line.  One write(2) of the whole line on an O_APPEND descriptor, under an
    exclusive lock: lines from concurrent compiles never interleave or get lost."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# -- helpers -----------------------------------------------------------------------------------


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower()


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _write_text(path: str, text: str) -> None:
    write_atomically(path, text.encode("utf-8"))


