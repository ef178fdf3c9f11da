"""What a task does: the interface between the scheduler and the kinds of task.

The scheduler (:mod:`.scheduler`) knows when a task may run, not what it does.  That comes from
a :class:`Handler`, chosen by the task's action: plain commands, nvcc's ``sh -c`` lines and
nvcc's in-process steps are here; each feature brings its own kind of task from its own module,
named in :data:`fast_nvcc.graph.tasks.HANDLED_BY` and imported only when a graph has such tasks
(the split host compile, the module_id check, the per-step cache, sccache).

A handler runs on a thread of its own and gets a :class:`TaskRun`: spawn a command, capture
output, finish or fail.  A feature that watches running tasks (:func:`feature_watches`) and a
handler that looks at other tasks see the run through :class:`RunView`, never the scheduler
itself.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ..graph.tasks import Action, Dag, HANDLED_BY, Task
from ..plan.dryrun import Step
from .processes import Processes, Spawned, is_nvcc_capture
from .task_records import Record, State


class Internal:
    """nvcc's in-process steps (its dependency filter and rm): fast_nvcc.run.internal_steps."""

    def depfile(self, step: Step) -> bytes | None:  # pragma: no cover - interface
        """Write the dependency file of ``step``; return text meant for stdout, if any."""
        raise NotImplementedError

    def remove(self, step: Step) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class RunView(Protocol):
    """What a handler or a feature's watch may see of the run and ask of it."""

    dag: Dag

    def record(self, task_id: int) -> Record:
        """What has happened to ``task_id`` so far."""

    def running(self, task_id: int) -> bool:
        """Does ``task_id`` run now (started, its end not handled yet)?"""

    def step_pids(self) -> dict[int, int]:
        """Task -> the pid of its live command."""

    def redo(self, task_id: int, as_task: Task, *, why: str, half_written: Sequence[str] = ()) -> None:
        """Run ``task_id`` as ``as_task`` instead: a guess proved wrong (on the loop's thread).
        ``half_written``: files (relative to the working directory) a stopped run may have left
        half written, removed before it runs again."""


class Handler(NamedTuple):
    """What one kind of task does, and whether it runs commands (then it takes a slot)."""

    run: Callable[[TaskRun], None]
    takes_slot: bool = True
    # Tasks that run elsewhere (a build cluster): no local slot, at most this many at once.
    capacity: int | None = None


class RunContext(NamedTuple):
    """What every task of one run shares with its handler."""

    view: RunView
    env: Mapping[str, str]
    cwd: str
    workdir: str
    state_dir: str | None  # where features keep what they learn (host_split's placeholders)
    shared: dict[Any, Any]  # state one task leaves another (a host compile's front for its back)
    processes: Processes
    now: Callable[[], float]  # seconds since the run started
    # The state a task's end gives it (fast_nvcc.run.outcomes.state_at_end): None while it runs again.
    state_at_end: Callable[[Task, int], State | None]


class TaskRun:
    """What a handler may do while its task runs (on the task's own thread)."""

    def __init__(self, context: RunContext, task: Task) -> None:
        self.context = context
        self.task = task
        self.record = context.view.record(task.id)

    @property
    def dag(self) -> Dag:
        return self.context.view.dag

    @property
    def env(self) -> Mapping[str, str]:
        return self.context.env

    @property
    def cwd(self) -> str:
        return self.context.cwd

    @property
    def workdir(self) -> str:
        return self.context.workdir

    @property
    def state_dir(self) -> str | None:
        return self.context.state_dir

    @property
    def shared(self) -> dict[Any, Any]:
        return self.context.shared

    def record_of(self, task_id: int) -> Record:
        """What has happened to another task of the run."""
        return self.context.view.record(task_id)

    def done(self, task_id: int) -> bool:
        """Has task ``task_id`` of this run ended well (an optional one: and done its job)?"""
        record = self.record_of(task_id)
        return record.state is State.DONE and not record.dropped

    def spawn(self, argv: Sequence[str], *, tag: str = "", env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Spawned | None:  # fmt: skip
        """Run one command, its output captured to files; None when the task was killed first."""
        return self.context.processes.spawn(self.task, list(argv), tag=tag, env=env, cwd=cwd)

    def exec(self, argv: Sequence[str]) -> None:
        """Run one command as the whole task: its exit code is the task's."""
        spawned = self.spawn(argv)
        if spawned is None:
            self.finish(-signal.SIGTERM)
            return
        self.account(spawned)
        self.record.captures.extend(spawned.captures)
        self.finish(spawned.returncode)

    def account(self, spawned: Spawned) -> None:
        """Add a command's CPU time and peak memory to the task's."""
        usage = spawned.usage
        self.record.cpu_seconds = (self.record.cpu_seconds or 0.0) + usage.ru_utime + usage.ru_stime
        self.record.max_rss_kb = max(self.record.max_rss_kb or 0, usage.ru_maxrss)

    def capture(self, fd: int, data: bytes) -> None:
        """Output the task prints without a command (a cache hit's replay, a message)."""
        path = self.context.processes.capture_path(self.task, fd)
        with open(path, "ab") as handle:
            handle.write(data)
        if (fd, path) not in self.record.captures:
            self.record.captures.append((fd, path))

    def fail(self, message: str, returncode: int) -> None:
        self.capture(2, message.encode("utf-8", "surrogateescape"))
        self.finish(returncode)

    def finish(self, returncode: int) -> None:
        self.record.end = self.context.now()
        self.record.returncode = returncode
        state = self.context.state_at_end(self.task, returncode)
        if state is not None:
            self.record.state = state


def run_command(run: TaskRun) -> None:
    run.exec(run.task.argv)


def run_shell(run: TaskRun) -> None:
    """A plan line through ``sh -c``, as nvcc runs it (the faithful mode).  Under nvcc -t the
    line redirects its output to temp files that nvcc prints afterwards: forward those too."""
    run.exec(["/bin/sh", "-c", run.task.step.text])
    for redirect in run.task.step.redirects:
        if is_nvcc_capture(redirect.target) and os.path.exists(redirect.target):
            run.record.captures.append((redirect.fd, redirect.target))


def internal_handlers(internal: Internal) -> dict[Action, Handler]:
    def depfile(run: TaskRun) -> None:
        text = internal.depfile(run.task.step)
        if text:
            run.capture(1, text)
        run.finish(0)

    def remove(run: TaskRun) -> None:
        internal.remove(run.task.step)
        run.finish(0)

    return {Action.DEPFILE: Handler(depfile, takes_slot=False), Action.REMOVE: Handler(remove, takes_slot=False)}


BASIC_HANDLERS: Mapping[Action, Handler] = {
    Action.EXEC: Handler(run_command),
    Action.SHELL: Handler(run_shell),
}


def all_handlers(dag: Dag, internal: Internal, given: Mapping[Action, Handler] | None = None) -> dict[Action, Handler]:
    """Every handler ``dag``'s tasks need: the features' (those ``given`` win), the basic ones."""
    return {**feature_handlers(dag), **BASIC_HANDLERS, **internal_handlers(internal), **(given or {})}


def feature_handlers(dag: Dag) -> dict[Action, Handler]:
    """The handlers of the features whose kinds of task ``dag`` has (:data:`fast_nvcc.graph.tasks.HANDLED_BY`)."""
    found: dict[Action, Handler] = {}
    for module in _feature_modules(dag):
        found.update(importlib.import_module(module).HANDLERS)
    return found


def feature_watches(dag: Dag, *, cwd: str) -> list[Any]:
    """What those features watch while their tasks run (a module's ``watches(dag, cwd=)``):
    objects whose ``poll(view)`` (a :class:`RunView`) the loop calls every turn, and every few
    tens of milliseconds while one's ``urgent(view)`` says a look may find something."""
    found: list[Any] = []
    for module in _feature_modules(dag):
        make = getattr(importlib.import_module(module), "watches", None)
        if make is not None:
            found += make(dag, cwd=cwd)
    return found


def _feature_modules(dag: Dag) -> list[str]:
    return sorted({HANDLED_BY[t.action] for t in dag.tasks if t.action in HANDLED_BY})
