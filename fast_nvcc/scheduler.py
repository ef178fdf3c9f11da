"""Runs a :class:`~fast_nvcc.graph.Dag` under a bound: every subprocess of fast_nvcc starts here.

The scheduler knows how to run a graph of tasks, not what the tasks are for:

* At most ``jobs`` commands run at once, and each one beyond the first holds a shared slot
  (make's jobserver or the machine-wide pool, :mod:`fast_nvcc.slots`, which also decides
  which compile of the build gets a free core); in-process steps take no slot.  Among the
  ready tasks the one with the longest remaining path starts first.
* What a task *does* comes from a :class:`Handler`, chosen by the task's action.  Plain
  commands, nvcc's ``sh -c`` lines and nvcc's in-process steps are here; each feature brings
  its own kind of task from its own module: the split host compile (:mod:`.hostsplit`), the
  module_id check (:mod:`.module_id`), the per-step cache (:mod:`.cache`).  A handler gets a
  :class:`TaskRun`: spawn a command, finish, fail, capture output.
* Each task's stdout and stderr go to files and are forwarded in nvcc's order, task after
  task, as soon as every earlier one has been forwarded; so warnings and errors read exactly
  as nvcc prints them, only a little later.
* On a failure, nvcc would have stopped there: tasks after it in nvcc's order are not started,
  and the running ones are killed (their partial outputs removed by the driver).  Tasks before
  it still run to the end, because nvcc would have run them and their diagnostics come first;
  if one of them fails too, it is the failure nvcc would have reported.
"""

from __future__ import annotations

import enum
import functools
import heapq
import importlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from .captures import Captures
from .graph import HANDLED_BY, Action, Dag, Task
from .plan import Step
from .slots import Slots
from .watchdog import Watchdog, die_with_parent

if TYPE_CHECKING:
    from .memory import MemoryBudget

KILL_GRACE_SECONDS = 2.0


class State(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"  # stopped by fast_nvcc after another step failed or on a signal
    SKIPPED = "skipped"  # never started


@dataclass(slots=True)
class Record:
    """What happened to one task."""

    task_id: int
    state: State = State.SKIPPED
    start: float | None = None  # seconds since the run started
    end: float | None = None
    ready: float | None = None  # when its inputs were all there; start - ready is its wait
    returncode: int | None = None
    cpu_seconds: float | None = None
    max_rss_kb: int | None = None
    reran: bool = False  # a module_id check that had to rerun cicc
    split: bool = False  # a host compile's back task that only had to assemble
    split_note: str = ""  # a host compile's back task: why it compiled as printed instead
    cached: bool | None = None  # True: a cache hit; False: a cacheable step that missed
    remote: str | None = None  # sent to sccache: what became of it (remote.Outcome)
    remote_note: str = ""  # why it ran here after all
    slot: int | None = None
    over_pool: str | None = None  # started over the machine-wide pool: "first" or "drain"
    memory_wait: float = 0.0  # seconds of its wait spent held back by the memory budget
    oom_rerun: bool = False  # killed for memory (fast_nvcc.memory) and run again alone
    # Captured output: (fd, path) in the order to forward them.
    captures: list[tuple[int, str]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return self.end - self.start

    @property
    def waited(self) -> float:
        """Seconds between being ready and starting: waiting for a slot (or for -j)."""
        if self.start is None or self.ready is None:
            return 0.0
        return max(0.0, self.start - self.ready)


@dataclass(frozen=True, slots=True)
class RunResult:
    returncode: int
    records: tuple[Record, ...]
    failed_task: int | None
    wall_seconds: float
    started_at: float = 0.0  # Unix time the records' start and end offsets count from


class Internal:
    """nvcc's in-process steps (its dependency filter and rm), given by the driver."""

    def depfile(self, step: Step) -> bytes | None:  # pragma: no cover - interface
        """Write the dependency file of ``step``; return text meant for stdout, if any."""
        raise NotImplementedError

    def remove(self, step: Step) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class StepFailed(Exception):
    """A task failed the way nvcc would report it."""

    def __init__(self, message: str, returncode: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode


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


@dataclass(frozen=True, slots=True)
class Spawned:
    returncode: int
    captures: list[tuple[int, str]]
    usage: Any  # the child's resource usage, from wait4


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
        """Has task ``task_id`` of this run ended well?"""
        return self.runner.records[task_id].state is State.DONE

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
        return self.runner._spawn(self.task, list(argv), tag=tag, env=env, cwd=cwd)

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
        path = self.runner._capture_path(self.task, fd)
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
        # -- memory budget hook (fast_nvcc.memory): a step the OOM killer took runs again,
        # so it must never show as failed, not even for the moment before the loop requeues it.
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
        if _is_nvcc_capture(redirect.target) and os.path.exists(redirect.target):
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
    for module in sorted({HANDLED_BY[t.action] for t in dag.tasks if t.action in HANDLED_BY}):
        found.update(importlib.import_module(module).HANDLERS)
    return found


BASIC_HANDLERS: Mapping[Action, Handler] = {
    Action.EXEC: Handler(run_command),
    Action.SHELL: Handler(run_shell),
}


@dataclass(slots=True)
class _Running:
    task: Task
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False


class Runner:
    # A step that runs far past its estimate says its whole compile is heavier than guessed: on a
    # first build the estimates are per-tool defaults, and one template-heavy source's cicc takes
    # 96 s against the default's 8 (CUTLASS's 53_hopper_gemm_permute, 16 cores, 2026-11-23).
    # The compile's waiting steps then ask the pool with their ranks times how much heavier
    # (its host side no longer waits behind lighter compiles' device steps), and the work it has
    # left is told times that too (it is not the compile nearest its end).  Only steps expected
    # to take OVERRUN_FLOOR seconds or more count: short steps' times are mostly noise.
    OVERRUN_FLOOR = 2.0
    RESCALE_EVERY = 0.25  # seconds

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
        self.env = dict(env)
        self.cwd = cwd
        self.workdir = workdir
        self.jobs = max(1, jobs)
        self.priorities = priorities
        self.work = work  # each task's expected seconds: what is left is told to the slots
        self.handlers = {**feature_handlers(dag), **BASIC_HANDLERS, **internal_handlers(internal), **(handlers or {})}
        self.messages = messages
        self.combine_output = combine_output
        self.stdout = stdout
        self.stderr = stderr
        self.on_event = on_event
        self.slots = slots or Slots()
        self.memory = memory
        self.state_dir = state_dir  # where features keep what they learn (hostsplit's placeholders)
        self.shared: dict[Any, Any] = {}
        self._commands = 0  # slot-taking tasks running now
        self._elsewhere: dict[Action, int] = {}  # running tasks of handlers with a capacity
        self.records = [Record(task.id) for task in dag.tasks]
        self._events: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
        self._running: dict[int, _Running] = {}
        self._lock = threading.Lock()
        self._t0 = 0.0
        self._threads: list[threading.Thread] = []
        self._free_slots: list[int] = []
        self.captures = Captures(workdir)  # in memory: a full $TMPDIR must not swallow them
        self._watchdog: Watchdog | None = None  # started with the first command
        self._scale = 1.0  # how many times heavier this compile is than its estimates
        self._scaled_at = 0.0

    def close(self) -> None:
        """Free the captured output, once nothing reads the records' captures any more."""
        self.captures.close()

    # -- the main loop ---------------------------------------------------------------------

    def run(self) -> RunResult:
        self._t0 = time.monotonic()
        self._started_at = time.time()
        tasks = self.dag.tasks
        succs = self.dag.succs
        # A task with an any_of group waits for its other predecessors and one of the group.
        waiting = [len(p - t.any_of) + bool(t.any_of) for t, p in zip(tasks, self.dag.preds)]
        settled: set[int] = set()  # tasks whose any_of group is done
        ready: list[tuple[float, tuple[int, int], int]] = []
        for task in tasks:
            if not waiting[task.id]:
                self._make_ready(ready, task)
        self._free_slots = list(range(self.jobs - 1, -1, -1))
        left = sum(self.work) if self.work is not None else 0.0
        if self.work is not None:
            self.slots.left(left)
        emitter = _Emitter(self, self.messages)
        failed: int | None = None  # task id of the earliest failure in nvcc's order
        try:
            while True:
                if self.work is not None and self._rescale():
                    self.slots.left(left * self._scale)
                blocked = False  # a ready command waits for a shared slot or for memory
                while ready:
                    _, _, task_id = ready[0]
                    task = tasks[task_id]
                    if failed is not None and task.order > tasks[failed].order:
                        heapq.heappop(ready)
                        continue
                    handler = self._handler(task)
                    if handler.capacity is not None and self._elsewhere.get(task.action, 0) >= handler.capacity:
                        blocked = True
                        break
                    if handler.takes_slot and not self._reserve_slot(task):
                        blocked = bool(self._free_slots)
                        break
                    heapq.heappop(ready)
                    self._start(task)
                if not blocked:
                    self.slots.withdraw()  # nothing of ours waits: others may go first
                    if self.memory is not None:  # -- memory budget hook
                        self.memory.withdraw()
                self._release_idle_slots()
                if not self._running:
                    if not ready:
                        break
                    time.sleep(0.01)  # nothing of ours runs: wait for the pool to free a slot
                    continue
                event = self._next_event(timeout=0.02 if blocked else 0.5)
                if event is None:
                    continue
                task_id, error = event
                run = self._running.pop(task_id)
                record = self.records[task_id]
                if record.slot is not None:
                    self._free_slots.append(record.slot)
                    if self._handler(tasks[task_id]).takes_slot:
                        self._commands -= 1
                if self._handler(tasks[task_id]).capacity is not None:
                    self._elsewhere[tasks[task_id].action] -= 1
                if self.memory is not None:  # -- memory budget hook
                    ran = record.state is State.DONE and not record.cached  # a peak worth telling peers
                    self.memory.release(task_id, rss_kb=record.max_rss_kb if ran else None)
                if error is not None:
                    raise error
                if record.oom_rerun and record.state is State.SKIPPED and not run.killed:
                    # -- memory budget hook: killed for memory; again, ahead of all, alone.
                    record.captures.clear()
                    record.start = record.end = None
                    record.ready = self._now()
                    heapq.heappush(ready, (float("-inf"), tasks[task_id].order, task_id))
                    continue
                if run.killed:
                    record.state = State.KILLED
                elif record.state is State.DONE:
                    if self.work is not None:
                        left -= self.work[task_id]
                        self.slots.left(left * self._scale)
                    for succ in succs[task_id]:
                        if task_id in tasks[succ].any_of:
                            if succ in settled:
                                continue
                            settled.add(succ)
                        waiting[succ] -= 1
                        if not waiting[succ]:
                            self._make_ready(ready, tasks[succ])
                else:
                    if failed is None or tasks[task_id].order < tasks[failed].order:
                        failed = task_id
                        self._kill_after(tasks[failed].order)
                self._notify("end", tasks[task_id], record)
                emitter.forward(upto=None if failed is None else tasks[failed].order)
        except BaseException:
            self._kill_after(None)
            raise
        finally:
            self._join()
            self.slots.release_all()
            if self._watchdog is not None:
                self._watchdog.close()
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

    def _make_ready(self, ready: list, task: Task) -> None:
        self.records[task.id].ready = self._now()
        heapq.heappush(ready, (-self.priorities[task.id], task.order, task.id))

    def _handler(self, task: Task) -> Handler:
        return self.handlers[task.action]

    def _rescale(self) -> bool:
        """Look again (every RESCALE_EVERY seconds) at how far this compile's long steps ran
        past their estimates; True when the scale rose."""
        now = self._now()
        if now - self._scaled_at < self.RESCALE_EVERY:
            return False
        self._scaled_at = now
        assert self.work is not None
        scale = self._scale
        for record in self.records:
            expected = self.work[record.task_id]
            if record.start is None or expected < self.OVERRUN_FLOOR or record.slot is None:
                continue
            took = (record.end if record.end is not None else now) - record.start
            scale = max(scale, took / expected)
        if scale <= self._scale * 1.05:  # not worth a rename on the board
            return False
        self._scale = scale
        return True

    def _reserve_slot(self, task: Task) -> bool:
        """May ``task`` start now?  Within -j, with a shared slot (the implicit one, one held and
        idle, or one newly granted by the jobserver or the pool), and with memory to spare."""
        if not self._free_slots:
            return False
        priority = self.priorities[task.id] * self._scale
        if self._commands < self.slots.implicit + self.slots.held:
            # An idle slot of ours: keep it, unless this would be an extra step of this compile
            # and the pool has a better claim waiting (it is released below and asked for anew).
            if self._commands and self.slots.outranked(priority):
                return False
        elif not self.slots.try_acquire(priority):
            return False
        # -- memory budget hook (fast_nvcc.memory): after the slot, so that a step held back
        # for memory gives its slot back (_release_idle_slots) to one that fits.
        return self.memory is None or self.memory.reserve(task.id, now=self._now())

    def _killed_for_memory(self, task: Task, returncode: int) -> bool:
        """-- memory budget hook: was ``task`` (on its own thread, ending) killed by the kernel
        for memory, and does it get one more run?  Then it is marked to run again."""
        if self.memory is None or self._running[task.id].killed:
            return False
        record = self.records[task.id]
        again = self.memory.out_of_memory(task.id, returncode, rss_kb=record.max_rss_kb)
        record.oom_rerun = record.oom_rerun or again  # a second kill keeps the mark of the first
        return again

    def _release_idle_slots(self) -> None:
        """Give back shared slots no running step uses, so other compiles can have them."""
        while self.slots.held > max(0, self._commands - self.slots.implicit):
            self.slots.release()

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
        record.slot = self._free_slots.pop() if self._handler(task).takes_slot else None
        if self._handler(task).capacity is not None:
            self._elsewhere[task.action] = self._elsewhere.get(task.action, 0) + 1
        if record.slot is not None:
            self._commands += 1
            record.over_pool = self.slots.over_pool(self._commands - self.slots.implicit)
            if self.memory is not None:  # -- memory budget hook
                record.memory_wait = self.memory.waited(task.id)
        record.start = self._now()
        self._running[task.id] = _Running(task)
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

    def _spawn(
        self, task: Task, argv: list[str], *, tag: str = "", env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Spawned | None:
        out_path = self._capture_path(task, 1, tag)
        err_path = out_path if self.combine_output else self._capture_path(task, 2, tag)
        redirects = {r.fd: r for r in task.step.redirects if not _is_nvcc_capture(r.target)}
        if task.action is Action.SHELL:
            redirects = {}  # sh applies the line's own redirections
        with open(out_path, "wb") as out, _maybe_open(err_path, out_path) as err:
            stdout = _open_redirect(redirects.get(1), self.cwd) or out
            stderr = _open_redirect(redirects.get(2), self.cwd) or (
                subprocess.STDOUT if err is None else err
            )
            try:
                with self._lock:
                    run = self._running[task.id]
                    if run.killed:
                        return None
                    # Each step leads its own process group, so a kill reaches the
                    # processes it is forking right then (gcc's cc1plus), which a walk
                    # of its children can miss.  The steps die with fast_nvcc however it
                    # dies (fast_nvcc/watchdog.py): this thread forks and reaps the child.
                    if self._watchdog is None:
                        self._watchdog = Watchdog(self.workdir)
                    try:
                        run.proc = subprocess.Popen(
                            argv,
                            stdin=subprocess.DEVNULL,
                            stdout=stdout,
                            stderr=stderr,
                            env=self.env if env is None else env,
                            cwd=cwd or self.cwd,
                            process_group=0,
                            preexec_fn=functools.partial(die_with_parent, os.getpid()),
                        )
                    except OSError as exc:
                        # A command that cannot start fails the way sh, which nvcc runs it
                        # with, reports it.  Only here: any other missing file is not a
                        # missing command (a vanished work directory once read as one).
                        missing = isinstance(exc, FileNotFoundError)
                        reason = "not found" if missing else exc.strerror
                        raise StepFailed(f"sh: 1: {exc.filename or argv[0]}: {reason}\n",
                                         127 if missing else 126) from None  # fmt: skip
                    self._watchdog.watch(run.proc.pid)
                _, status, usage = os.wait4(run.proc.pid, 0)
                run.proc.returncode = os.waitstatus_to_exitcode(status)
                if os.WIFSIGNALED(status) and not run.killed:
                    # sh's own stderr, which is nvcc's, not the line's redirection
                    run.proc.returncode = _report_as_sh(status, out if err is None else err)
                if run.killed:
                    # Its outputs are removed once the runner ends: nothing may still be
                    # writing them then.
                    wait_for_group(run.proc.pid)
                self._watchdog.forget(run.proc.pid)
            finally:
                for handle in (stdout, stderr):
                    if handle not in (out, err, subprocess.STDOUT):
                        handle.close()
        captures = [(1, out_path)]
        if err_path != out_path:
            captures.append((2, err_path))
        captures = [(fd, path) for fd, path in captures if not self.captures.discard_if_empty(path)]
        return Spawned(run.proc.returncode, captures, usage)

    def _kill_after(self, order: tuple[int, int] | None) -> None:
        """Kill running tasks that come after ``order`` in nvcc's order (all when None)."""
        victims = []
        with self._lock:
            for run in self._running.values():
                if order is None or run.task.order > order:
                    run.killed = True
                    if run.proc is not None:
                        victims.append(run.proc.pid)
        kill_trees(victims)

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _capture_path(self, task: Task, fd: int, tag: str = "") -> str:
        return self.captures.path(f"{task.id}{tag}.{fd}")

    def _now(self) -> float:
        return time.monotonic() - self._t0


def kill_trees(pids: Sequence[int]) -> None:
    """SIGTERM each step's process group and its descendants, then SIGKILL what is left
    after a grace.

    Each pid leads a process group (``process_group=0``); the group catches a child forked
    while the tree is walked, the walk catches a descendant that left the group. The
    processes are not waited for here: each direct child is reaped by the thread that
    started it, which needs its exit status and resource usage.
    """
    if not pids:
        return
    import psutil

    procs: list[psutil.Process] = []
    for pid in pids:
        try:
            parent = psutil.Process(pid)
            procs.extend(parent.children(recursive=True))
            procs.append(parent)
        except psutil.NoSuchProcess:
            continue
    _send(pids, procs, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if _alive(p)]
        if procs:
            time.sleep(0.02)
    _send(pids, procs, signal.SIGKILL)


def _send(pgids: Sequence[int], procs, signum: int) -> None:
    import psutil

    _signal_groups(pgids, signum)
    for proc in procs:
        try:
            proc.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def wait_for_group(pgid: int, grace: float = KILL_GRACE_SECONDS) -> None:
    """Wait until no live process is left in group ``pgid`` (its leader already reaped),
    SIGKILLing the group once ``grace`` has passed. Zombies do not count: an init that
    reaps slowly (as in containers) would hold them for seconds."""
    deadline = time.monotonic() + grace
    killed = False
    while _group_alive(pgid):
        now = time.monotonic()
        if now >= deadline:
            if killed:
                return
            _signal_groups([pgid], signal.SIGKILL)
            killed = True
            deadline = now + grace
        time.sleep(0.01)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def _signal_groups(pgids: Sequence[int], signum: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _Emitter:
    """Forwards captured output in nvcc's order."""

    def __init__(self, runner: Runner, messages: Sequence[tuple[int, str]]) -> None:
        self.runner = runner
        self.order = sorted(runner.dag.tasks, key=lambda t: t.order)
        self.cursor = 0
        self.messages = sorted(messages, key=lambda m: m[0])
        self.message_cursor = 0
        self.broken = False
        self.stopped = False  # a failure was forwarded: nvcc prints nothing after it

    def forward(self, *, upto: tuple[int, int] | None, final: bool = False) -> None:
        records = self.runner.records
        while self.cursor < len(self.order) and not self.stopped:
            task = self.order[self.cursor]
            if upto is not None and task.order > upto:
                return
            record = records[task.id]
            if record.state not in (State.DONE, State.FAILED) or not (final or self._settled(task)):
                return
            self._messages_before(task.step.index)
            if not self._superseded(task):
                for fd, path in record.captures:
                    self._write(fd, path)
            self.cursor += 1
            # A step's state is set in its own thread before the main loop handles its end, so
            # a failure earlier in nvcc's order than the one being handled can show up here
            # first (cudafe++ and cicc report one error within milliseconds): it is the
            # compile's failure, and nothing after it is nvcc's.
            self.stopped = record.state is State.FAILED
        if final:
            self._messages_before(None)

    def _settled(self, task: Task) -> bool:
        """Whether a speculative cicc's output can be judged yet: once its module_id check has
        run, which may rerun cicc and print the same warnings anew (only the rerun's count).
        A failed cicc fails as it would have with nvcc's module_id: its output stands."""
        check = task.speculative_of
        if check is None or self.runner.records[task.id].state is State.FAILED:
            return True
        return self.runner.records[check].state is not State.SKIPPED

    def _superseded(self, task: Task) -> bool:
        check = task.speculative_of
        return check is not None and self.runner.records[check].reran

    def _messages_before(self, index: int | None) -> None:
        while self.message_cursor < len(self.messages):
            at, text = self.messages[self.message_cursor]
            if index is not None and at > index:
                return
            self._write_bytes(2, text.encode("utf-8", "surrogateescape"))
            self.message_cursor += 1

    def _write(self, fd: int, path: str) -> None:
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    self._write_bytes(fd, chunk)
        except FileNotFoundError:
            pass

    def _write_bytes(self, fd: int, data: bytes) -> None:
        if self.broken or not data:
            return
        stream = self.runner.stdout if fd == 1 else self.runner.stderr
        try:
            if stream is not None:
                stream.write(data)
                stream.flush()
            else:
                _write_all(fd, data)
        except BrokenPipeError:
            self.broken = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]



def _report_as_sh(status: int, stderr: BinaryIO) -> int:
    """nvcc runs every step through ``sh -c``, so a step that dies of a signal (a crash, the
    OOM killer) is reported by the shell: dash prints the signal's name, " (core dumped)"
    where it dumped, except for SIGINT and SIGPIPE, and exits with 128 + the signal, which
    nvcc passes on (``Aborted``, 134; ``Segmentation fault``, 139; measured with a -ccbin that
    kills itself)."""
    signum = os.WTERMSIG(status)
    if signum not in (signal.SIGINT, signal.SIGPIPE):
        text = signal.strsignal(signum) or f"Unknown signal {signum}"
        if os.WCOREDUMP(status):
            text += " (core dumped)"
        stderr.write(f"{text}\n".encode())
        stderr.flush()
    return 128 + signum


def _is_nvcc_capture(target: str) -> bool:
    return "tmpxft_" in os.path.basename(target) and target.endswith(("_stdout", "_stderr"))


def _open_redirect(redirect, cwd: str):
    if redirect is None:
        return None
    mode = "ab" if redirect.append else "wb"
    return open(os.path.join(cwd, redirect.target), mode)


class _maybe_open:
    """Open ``path`` for writing unless it is ``same_as`` (stderr joined to stdout)."""

    def __init__(self, path: str, same_as: str) -> None:
        self.path = path
        self.handle = None if path == same_as else open(path, "wb")

    def __enter__(self):
        return self.handle

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.close()
