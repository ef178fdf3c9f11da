"""One run's report: each task's step, times, cpu, memory and outcome, and the critical path,
built from the Runner's records.  The files one invocation writes (graph, table, trace,
summary, log) are each made from it by a module of its own; nothing here changes what the
compile produces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..errors import FastNvccError
from ..files import write_atomically
from ..graph.paths import critical_path
from ..graph.tasks import Action, Dag
from ..run.task_records import Narrowed, Record, Refused, State


class ReportError(FastNvccError):
    """A report cannot be written as asked (one line for the user)."""


class StepReport(NamedTuple):
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
    nice: int = 0  # started at a lower CPU priority, its compile with slack (fast_nvcc.run.niceness)
    memory_waited: float = 0.0  # the part of ``waited`` held back by the memory budget
    memory_stopped: float = 0.0  # seconds stopped while memory ran short (fast_nvcc.machine.pressure)
    memory_evicted: bool = False  # ... then killed to make room for an older step, and run again
    yielded: float = 0.0  # seconds stopped to give its core to a split step (fast_nvcc.run.yielding)
    stops: tuple[tuple[float, float], ...] = ()  # (from, to) of each stop, seconds into the run
    # each time it went on after a stop for a split step: (when, why, its rank, the best ask, the build's end)
    went_on: tuple[tuple[float, str, float, float | None, float | None], ...] = ()
    oom_rerun: bool = False  # killed for memory and run again (fast_nvcc.machine.memory)
    guess_failed: str = ""  # a guess of fast_nvcc's that failed here (fast_nvcc.guess.decisions): why
    guess_lost: float = 0.0  # ... and the seconds of work it threw away
    core_timeline: tuple[tuple[float, int], ...] = ()  # a split step: (seconds into the run, cores) at each change
    serial_seconds: float = 0.0  # ... and how long its threads ran one at a time
    cores_idle: float = 0.0  # ... and the core-seconds the kernel saw its cores idle
    narrowed: tuple[Narrowed, ...] = ()  # ... and when and why it gave cores back
    refused: tuple[Refused, ...] = ()  # ... and why it found no core it wanted
    longest: bool = False  # ... and whether it asked on a core per thread (core_grants.Grant.longest)

    @property
    def cores(self) -> int:
        """A split step: the most cores its threads held at once (0: not one)."""
        return max((n for _, n in self.core_timeline), default=0)


class RunReport(NamedTuple):
    steps: tuple[StepReport, ...]
    wall_seconds: float
    exit_code: int
    jobs: int
    started_at: float = 0.0
    # Optional tasks dropped before they started (a stub probe with no idle core): (task, label).
    # Not steps (nothing ran), but other steps' ``preds`` still name them.
    dropped: tuple[tuple[int, str], ...] = ()

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
    steps, dropped = [], []
    for task, record in zip(dag.tasks, records):
        if task.optional and record.start is None:
            dropped.append((task.id, task.label))  # dropped before it started: nothing happened
            continue
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
                nice=record.nice,
                memory_waited=record.memory_wait,
                memory_stopped=record.memory_stopped,
                memory_evicted=record.memory_evicted,
                yielded=record.yielded,
                stops=tuple(record.stops),
                went_on=tuple(record.went_on),
                oom_rerun=record.oom_rerun,
                guess_failed=record.guess_failed,
                guess_lost=record.guess_lost,
                core_timeline=tuple(record.core_timeline),
                serial_seconds=record.serial_seconds,
                cores_idle=record.cores_idle,
                narrowed=tuple(record.narrowed),
                refused=tuple(record.refused),
                longest=record.longest,
            )
        )
    return RunReport(tuple(steps), wall_seconds, exit_code, jobs, started_at, tuple(dropped))


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
    return dag._replace(preds=tuple(frozenset(p) for p in preds))


def _tool_of(task, record) -> str:
    if task.action is Action.CHECK_MODULE_ID:
        return "check module_id"
    if task.action is Action.HOST_FRONT:
        return "cc1plus"
    if task.action is Action.HOST_BACK and record.split:
        return "as"
    if task.action is Action.STUB_PROBE:
        return "cicc stub"
    if task.action is Action.LEARNED_STUB:
        return "learned stub"
    return task.step.tool


def _command_of(task) -> tuple[str, ...]:
    if task.action is Action.SHELL:
        return ("/bin/sh", "-c", task.step.text)
    if task.action is Action.CHECK_MODULE_ID:
        return task.rerun
    return task.argv or (task.step.text,)


def write_text(path: str, text: str) -> None:
    write_atomically(path, text.encode("utf-8"))
