"""Runs a :class:`~fast_nvcc.graph.tasks.Dag` under a bound: every subprocess of fast_nvcc starts here.

The scheduler knows how to run a graph of tasks, not what the tasks are for:

* At most ``jobs`` commands run at once, and each one beyond the first holds a shared slot
  (make's jobserver or the machine-wide pool, :mod:`fast_nvcc.machine.slots`, which also decides
  which compile of the build gets a free core); in-process steps take no slot
  (:mod:`.admission`).  Among the ready tasks the one with the longest remaining path starts
  first (:mod:`.ready_queue`).
* What a task *does* comes from a :class:`Handler`, chosen by the task's action.  Plain
  commands, nvcc's ``sh -c`` lines and nvcc's in-process steps are here; each feature brings
  its own kind of task from its own module: the split host compile (:mod:`.hostsplit`), the
  module_id check (:mod:`.module_id`), the per-step cache (:mod:`.cache`).  A handler gets a
  :class:`TaskRun`: spawn a command, finish, fail, capture output.
* Each task's stdout and stderr go to files and are forwarded in nvcc's order, task after
  task, as soon as every earlier one has been forwarded; so warnings and errors read exactly
  as nvcc prints them, only a little later.
* On a failure, nvcc would have stopped there: tasks after it in nvcc's order are not started,
  and the running ones are killed (:mod:`.processes`; their partial outputs removed by the
  driver).  Tasks before
  it still run to the end, because nvcc would have run them and their diagnostics come first;
  if one of them fails too, it is the failure nvcc would have reported.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from ..graph.tasks import Action, Dag, HANDLED_BY, Task
from ..machine.slots import Slots
from ..plan.dryrun import Kind, Step
from ..plan.tool_traces import trace_files
from .admission import Admission
from .any_of import AnyOfGroups
from .captures import Captures
from .core_grants import Grants, split_threads
from .early_inputs import EarlyInputs
from .emitter import Emitter
from .processes import Processes, Spawned, is_nvcc_capture
from .ready_queue import ReadyQueue
from .task_records import Record, RunResult, State, StepFailed

if TYPE_CHECKING:
    from ..machine.memory import MemoryBudget
    from ..machine.pressure import PressureGuard


class Internal:
    """nvcc's in-process steps (its dependency filter and rm): fast_nvcc.run.internal_steps."""

    def depfile(self, step: Step) -> bytes | None:  # pragma: no cover - interface
        """Write the dependency file of ``step``; return text meant for stdout, if any."""
        raise NotImplementedError

    def remove(self, step: Step) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


@dataclass(frozen=True, slots=True)
class Handler:
    """What one kind of task does, and whether it runs commands (then it takes a slot)."""

    run: Callable[[TaskRun], None]
    takes_slot: bool = True
    # Tasks that run elsewhere (a build cluster): no local slot, at most this many at once.
    capacity: int | None = None


class TaskRun:
    """What a handler may do while its task runs (on the task's own thread)."""

    def __init__(self, runner: Runner, task: Task) -> None:
        self.runner = runner
        self.task = task
        self.record = runner.records[task.id]

    @property
    def env(self) -> Mapping[str, str]:
        return self.runner.env

    def done(self, task_id: int) -> bool:
        """Has task ``task_id`` of this run ended well (an optional one: and done its job)?"""
        record = self.runner.records[task_id]
        return record.state is State.DONE and not record.dropped

    @property
    def cwd(self) -> str:
        return self.runner.cwd

    @property
    def workdir(self) -> str:
        return self.runner.workdir

    @property
    def state_dir(self) -> str | None:
        return self.runner.state_dir

    @property
    def shared(self) -> dict[Any, Any]:
        """State one task leaves another of the same run (a host compile's front for its back)."""
        return self.runner.shared

    def spawn(self, argv: Sequence[str], *, tag: str = "", env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Spawned | None:  # fmt: skip
        """Run one command, its output captured to files; None when the task was killed first."""
        return self.runner.processes.spawn(self.task, list(argv), tag=tag, env=env, cwd=cwd)

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
        path = self.runner.processes.capture_path(self.task, fd)
        with open(path, "ab") as handle:
            handle.write(data)
        if (fd, path) not in self.record.captures:
            self.record.captures.append((fd, path))

    def fail(self, message: str, returncode: int) -> None:
        self.capture(2, message.encode("utf-8", "surrogateescape"))
        self.finish(returncode)

    def finish(self, returncode: int) -> None:
        self.record.end = self.runner._now()
        self.record.returncode = returncode
        if self.task.id in self.runner._redo:
            return  # it runs again (Runner.redo): it neither failed nor is done
        # A step the OOM killer took runs again (fast_nvcc.machine.memory), so it must never show as
        # failed, not even for the moment before the loop requeues it.
        if returncode != 0 and self.runner._killed_for_memory(self.task, returncode):
            return
        self.record.state = State.DONE if returncode == 0 else State.FAILED


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


def feature_handlers(dag: Dag) -> dict[Action, Handler]:
    """The handlers of the features whose kinds of task ``dag`` has (graph.HANDLED_BY)."""
    found: dict[Action, Handler] = {}
    for module in _feature_modules(dag):
        found.update(importlib.import_module(module).HANDLERS)
    return found


def feature_watches(dag: Dag, *, cwd: str) -> list[Any]:
    """What those features watch while their tasks run (a module's ``watches(dag, cwd=)``):
    objects whose ``poll(runner)`` the loop calls every few tens of milliseconds."""
    found: list[Any] = []
    for module in _feature_modules(dag):
        make = getattr(importlib.import_module(module), "watches", None)
        if make is not None:
            found += make(dag, cwd=cwd)
    return found


def _feature_modules(dag: Dag) -> list[str]:
    return sorted({HANDLED_BY[t.action] for t in dag.tasks if t.action in HANDLED_BY})


BASIC_HANDLERS: Mapping[Action, Handler] = {
    Action.EXEC: Handler(run_command),
    Action.SHELL: Handler(run_shell),
}


class Runner:
    """The event loop of one run: tasks become ready as their predecessors end, start as the
    ready queue (:mod:`.ready_queue`) and the slots (:mod:`.admission`) allow, run a handler on
    a thread of their own (their commands: :mod:`.processes`), and end through one queue of
    events, in whatever order they finish; their output is forwarded in nvcc's order."""

    def __init__(
        self,
        dag: Dag,
        *,
        env: Mapping[str, str],
        cwd: str,
        workdir: str,
        jobs: int,
        priorities: Sequence[float],
        internal: Internal,
        work: Sequence[float] | None = None,
        handlers: Mapping[Action, Handler] | None = None,
        messages: Sequence[tuple[int, str]] = (),
        combine_output: bool = False,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        on_event: Callable[[str, Task, Record], None] | None = None,
        slots: Slots | None = None,
        memory: MemoryBudget | None = None,
        state_dir: str | None = None,
    ) -> None:
        self.dag = dag
        # The tasks as they run now: a task run again after a failed guess is run as printed.
        self.tasks = list(dag.tasks)
        self.env = dict(env)
        self.cwd = cwd
        self.workdir = workdir
        self.jobs = max(1, jobs)
        self.handlers = {**feature_handlers(dag), **BASIC_HANDLERS, **internal_handlers(internal), **(handlers or {})}
        self.messages = messages
        self.combine_output = combine_output
        self.stdout = stdout
        self.stderr = stderr
        self.on_event = on_event
        self.slots = slots or Slots()
        self.state_dir = state_dir  # where features keep what they learn (hostsplit's placeholders)
        self.shared: dict[Any, Any] = {}
        self.records = [Record(task.id) for task in dag.tasks]
        self._events: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
        self._t0 = 0.0
        self._threads: list[threading.Thread] = []
        self.captures = Captures(workdir)  # in memory: a full $TMPDIR must not swallow them
        # An optional task ranks below everything and counts as no work (it only uses idle cores).
        optional = [t.id for t in dag.tasks if t.optional]
        priorities, work = list(priorities), None if work is None else list(work)
        for task_id in optional:
            priorities[task_id] = 0.0
            if work is not None:
                work[task_id] = 0.0
        self.ready = ReadyQueue(priorities, work=work)
        self.memory = memory
        self.admission = Admission(jobs=self.jobs, slots=self.slots, memory=memory)
        self.processes = Processes(
            env=self.env, cwd=cwd, workdir=workdir, combine_output=combine_output, captures=self.captures
        )
        self.early = EarlyInputs(dag, cwd=cwd)
        self.watches = feature_watches(dag, cwd=cwd)
        # Steps told -split-compile N run on as many cores as the slots grant them (core_grants).
        self._split = {t.id: n for t in dag.tasks if not t.optional and (n := split_threads(t.step.argv))}
        self.grants: Grants | None = None
        self._grants_polled = -1.0
        if self._split:
            from ..machine.slots import pool_directory

            self.grants = Grants(self.admission, pool_directory=getattr(self.slots, "directory", None)
                                 or pool_directory(self.env), pin=self.processes.pin, now=self._now)  # fmt: skip
        self._redo: dict[int, tuple[Task, str]] = {}  # running tasks to run again, and why

    def close(self) -> None:
        """Free the captured output, once nothing reads the records' captures any more."""
        self.captures.close()

    # -- the main loop ---------------------------------------------------------------------

    def run(self) -> RunResult:
        self._t0 = time.monotonic()
        self._started_at = time.time()
        tasks = self.tasks
        succs = self.dag.succs
        # A task with an any_of group waits for its other predecessors and one of the group.
        waiting = self._waiting = [len(p - t.any_of) + bool(t.any_of) for t, p in zip(tasks, self.dag.preds)]
        groups = AnyOfGroups(tasks, running=self.processes.runs)
        ready = self.ready
        for task in tasks:
            if not waiting[task.id]:
                self._make_ready(task)
        if ready.work_left is not None:
            self.slots.left(ready.work_left)
        emitter = Emitter(tasks, self.records, self.messages, stdout=self.stdout, stderr=self.stderr)
        failed: int | None = None  # task id of the earliest failure in nvcc's order
        guard = self._guard()
        try:
            while True:
                if ready.rescale(self.records, now=self._now(), slots=self.slots):
                    self.slots.left(ready.work_left)
                if self.early:
                    for task_id in self.early.poll(self.processes.step_pids()):
                        waiting[task_id] -= 1
                        if not waiting[task_id]:
                            self._make_ready(tasks[task_id])
                for watch in self.watches:
                    watch.poll(self)
                blocked = False  # a ready command waits for a shared slot or for memory
                waits = False  # ... or for any slot, -j's included
                while ready:
                    task = tasks[ready.first()]
                    if failed is not None and task.order > tasks[failed].order:
                        ready.pop()
                        continue
                    handler = self._handler(task)
                    if self.admission.at_capacity(task, handler.capacity):
                        blocked = waits = True
                        break
                    short = self._short(task, handler)
                    if handler.takes_slot and not self.admission.reserve(task, ready.priority(task.id), now=self._now(),
                                                                         short=short):  # fmt: skip
                        if task.optional:  # no idle slot for it now: it would only delay others
                            ready.pop()
                            self.records[task.id].dropped = True
                            continue
                        blocked, waits = self.admission.free, True
                        self._start_short(failed)  # they need no shared slot
                        break
                    ready.pop()
                    self._start(task)
                if self.processes.runs_optional and (waits or self.slots.outranked(0.0)):
                    self.processes.kill_optional()  # a real step (ours or a peer's) wants its slot
                if not blocked:
                    self.slots.withdraw()  # nothing of ours waits: others may go first
                    if self.memory is not None:
                        self.memory.withdraw()
                self.admission.release_idle()
                if self.grants and self._now() - self._grants_polled >= self.GRANTS_POLL:
                    self._grants_polled = self._now()
                    self.grants.poll(ours_waiting=waits and self.admission.refused == "slot",
                                     priority_of=self.ready.priority)  # fmt: skip
                if not self.processes.running:
                    if not ready:
                        break
                    time.sleep(0.01)  # nothing of ours runs: wait for the pool to free a slot
                    continue
                watching = self.early or any(self.watches)  # files appear while steps run
                timeout = 0.02 if blocked else 0.05 if watching else self.GRANTS_POLL if self.grants else 0.5
                event = self._next_event(timeout=timeout)
                if event is None:
                    continue
                task_id, error = event
                killed = self.processes.end(task_id)
                record = self.records[task_id]
                handler = self._handler(tasks[task_id])
                if self.grants is not None:
                    grant = self.grants.end(task_id)
                    if grant is not None:
                        self.processes.pin(task_id, None)
                        record.core_timeline += grant.timeline  # (a run again after a failed guess adds its own)
                self.admission.end(
                    tasks[task_id], record.slot, takes_slot=handler.takes_slot, capacity=handler.capacity
                )
                if self.memory is not None:
                    # a peak worth telling peers (a stub probe's is not its cicc's)
                    ran = record.state is State.DONE and not record.cached and not tasks[task_id].optional
                    self.memory.release(task_id, rss_kb=record.max_rss_kb if ran else None)
                if error is not None:
                    raise error
                if task_id in self._redo:
                    as_task, why = self._redo.pop(task_id)
                    if not killed:
                        self._run_again(as_task, why)
                        continue
                if record.oom_rerun and record.state is State.SKIPPED and not killed:
                    # Killed for memory: again, ahead of all (fast_nvcc.machine.memory).
                    record.captures.clear()
                    record.start = record.end = None
                    record.memory_stopped = 0.0  # of the run that counts
                    record.ready = self._now()
                    ready.push_first(tasks[task_id])
                    continue
                if tasks[task_id].optional and (killed or record.state is not State.DONE):
                    record.state, record.dropped = State.DONE, True  # it never fails the run
                elif killed:
                    record.state = State.KILLED
                if record.state is State.DONE:
                    if ready.work_left is not None:
                        ready.finished(task_id)
                        self.slots.left(ready.work_left)
                        if not record.cached:
                            ready.overran(self.dag, task_id, record.seconds)
                    for succ in self.early.writer_ended(task_id):  # tasks run again, waiting for it
                        waiting[succ] -= 1
                        if not waiting[succ]:
                            self._make_ready(tasks[succ])
                    for succ in succs[task_id]:
                        if self.early.released(task_id, succ):
                            continue  # it started on the file it needed from this task
                        if task_id in tasks[succ].any_of:
                            # An optional task that did not help serves nobody.
                            if not (groups.optional_dropped if record.dropped else groups.member_done)(task_id, succ):
                                continue
                            self._drop_optional(tasks[succ].any_of)  # their job is done
                        elif record.dropped:
                            continue
                        waiting[succ] -= 1
                        if not waiting[succ]:
                            self._make_ready(tasks[succ])
                else:
                    if failed is None or tasks[task_id].order < tasks[failed].order:
                        failed = task_id
                        self.processes.kill_after(tasks[failed].order)
                self._notify("end", tasks[task_id], record)
                emitter.forward(upto=None if failed is None else tasks[failed].order)
        except BaseException:
            self.processes.kill_after(None)
            raise
        finally:
            if guard is not None:
                guard.close()
            self._join()
            if self.grants is not None:
                self.grants.close()
            self.slots.release_all()
            self.processes.close()
        emitter.forward(upto=None if failed is None else tasks[failed].order, final=failed is None)
        returncode = 0
        if failed is not None:
            returncode = self.records[failed].returncode or 1
        return RunResult(
            returncode=returncode,
            records=tuple(self.records),
            failed_task=failed,
            wall_seconds=time.monotonic() - self._t0,
            started_at=self._started_at,
        )

    def redo(self, task_id: int, as_task: Task, *, why: str) -> None:
        """Run ``task_id`` as ``as_task`` instead: a guess of ours proved wrong
        (fast_nvcc.guess.module_id).  A running one is stopped, its slot given back, and run again;
        one that has not started yet is changed before it starts.  Either waits for what
        ``as_task`` needs (its early file).  (On the loop's thread.)"""
        record = self.records[task_id]
        if self.processes.runs(task_id):
            self._redo[task_id] = (as_task, why)
            self.processes.cancel(task_id)
        elif record.start is None:
            record.guess_failed = why
            queued = self.ready.remove(task_id)
            self._wait_for_early(as_task)
            if queued and not self._waiting[task_id]:
                self._make_ready(as_task)

    def _run_again(self, task: Task, why: str) -> None:
        for path in trace_files(self.tasks[task.id].step.argv):  # what the stopped run half wrote
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.cwd, path))
        record = self.records[task.id]
        record.guess_failed = why
        record.guess_lost += record.seconds
        record.captures.clear()
        record.start = record.end = record.returncode = None
        record.cpu_seconds = record.max_rss_kb = None
        record.memory_stopped = 0.0
        record.state = State.SKIPPED
        self._wait_for_early(task)
        if not self._waiting[task.id]:
            self._make_ready(task)

    def _wait_for_early(self, task: Task) -> None:
        """``task`` replaces its old self and waits for its early file, unless that is final."""
        self.tasks[task.id] = task
        if task.early is None:
            return
        writer_done = self.records[task.early[0]].state is State.DONE
        if not self.early.wait_again(task, writer_done=writer_done):
            self._waiting[task.id] += 1  # released by the early inputs, once its file is written

    def _start_short(self, failed: int | None) -> None:
        """Start the ready short steps behind a step that waits for a shared slot."""
        tasks = self.tasks
        for task_id in self.ready.ids()[1:]:
            task = tasks[task_id]
            if failed is not None and task.order > tasks[failed].order:
                continue
            handler = self._handler(task)
            if not self._short(task, handler) or self.admission.at_capacity(task, handler.capacity):
                continue
            if not self.admission.reserve(task, self.ready.priority(task_id), now=self._now(), short=True):
                return  # no local slot (-j) left
            self.ready.remove(task_id)
            self._start(task)

    def _drop_optional(self, task_ids: frozenset[int]) -> None:
        """Stop or drop the optional tasks among ``task_ids`` that have not ended."""
        for task_id in task_ids:
            if self.tasks[task_id].optional and self.records[task_id].end is None:
                self.records[task_id].dropped = True
                self.ready.remove(task_id)
                self.processes.kill_optional(task_id)

    def _make_ready(self, task: Task) -> None:
        if task.optional and self.records[task.id].dropped:
            return
        self.records[task.id].ready = self._now()
        self.ready.push(task)

    def _handler(self, task: Task) -> Handler:
        return self.handlers[task.action]

    # How often split steps' grants are looked at (core_grants): a listing and a few locks.
    GRANTS_POLL = 0.1

    # Steps expected to take less than this run without a shared slot (Admission.reserve).
    SHORT_SECONDS = 0.5

    def _short(self, task: Task, handler: Handler) -> bool:
        work = self.ready.work
        return (work is not None and self.slots.short_steps_free and handler.takes_slot and not task.optional
                and handler.capacity is None
                and task.step.kind in (Kind.FATBINARY, Kind.HOST_COMPILE, Kind.PTXAS, Kind.NVLINK)
                and work[task.id] < self.SHORT_SECONDS)  # fmt: skip

    def _guard(self) -> PressureGuard | None:
        """Steps are stopped rather than lost when memory runs short (fast_nvcc.machine.pressure)."""
        if self.memory is None:
            return None
        from ..machine.pressure import PressureGuard

        stopped_at: dict[int, float] = {}

        def on_change(what: str, task_id: int) -> None:
            if what == "stop":
                stopped_at[task_id] = self._now()
            elif task_id in stopped_at:
                self.records[task_id].memory_stopped += self._now() - stopped_at.pop(task_id)
            if what == "evict":
                self.records[task_id].memory_evicted = True

        return PressureGuard(self.memory, signal_step=self.processes.signal_step, on_change=on_change,
                             step_pids=self.processes.step_pids).start()  # fmt: skip

    def _killed_for_memory(self, task: Task, returncode: int) -> bool:
        """Was ``task`` (on its own thread, ending) killed by the kernel for memory, and does it
        get one more run?  Then it is marked to run again."""
        if self.memory is None or self.processes.killed(task.id):
            return False
        record = self.records[task.id]
        again = self.memory.out_of_memory(task.id, returncode, rss_kb=record.max_rss_kb)
        record.oom_rerun = record.oom_rerun or again  # a second kill keeps the mark of the first
        return again

    def _next_event(self, *, timeout: float) -> tuple[int, BaseException | None] | None:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _notify(self, what: str, task: Task, record: Record) -> None:
        if self.on_event is not None:
            self.on_event(what, task, record)

    # -- starting and stopping tasks ---------------------------------------------------------

    def _start(self, task: Task) -> None:
        record = self.records[task.id]
        handler = self._handler(task)
        record.slot, record.over_pool = self.admission.start(
            task, takes_slot=handler.takes_slot, capacity=handler.capacity, short=self._short(task, handler)
        )
        if record.slot is not None and self.memory is not None:
            record.memory_wait = self.memory.waited(task.id)
        record.start = self._now()
        if self.grants is not None and task.id in self._split and handler.takes_slot and handler.capacity is None:
            self.processes.pin(task.id, self.grants.start(task.id, self._split[task.id], self.ready.priority(task.id)))
        self.processes.begin(task)
        self._notify("start", task, record)
        thread = threading.Thread(target=self._work, args=(task,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self, task: Task) -> None:
        error: BaseException | None = None
        run = TaskRun(self, task)
        try:
            self._handler(task).run(run)
        except StepFailed as exc:
            run.fail(exc.message, exc.returncode)
        except OSError as exc:
            # fast_nvcc's own file work failed (a full disk): say what and where, once.
            where = f"{exc.filename}: " if exc.filename else ""
            run.fail(f"fast_nvcc: error: {task.step.tool}: {where}{exc.strerror or exc}\n", 1)
        except BaseException as exc:  # pragma: no cover - a bug in fast_nvcc itself
            error = exc
        self._events.put((task.id, error))

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _now(self) -> float:
        return time.monotonic() - self._t0
