"""Runs a :class:`~fast_nvcc.graph.Dag`: every subprocess of fast_nvcc starts here.

* At most ``jobs`` commands run at once (in-process steps take no slot); among the ready ones
  the one with the longest remaining path starts first.
* Each step's stdout and stderr go to files and are forwarded in nvcc's order, step after step,
  as soon as every earlier step has been forwarded; so warnings and errors read exactly as nvcc
  prints them, only a little later.
* On a failure, nvcc would have stopped there: steps after it in nvcc's order are not started,
  and the running ones are killed (their partial outputs removed).  Steps before it still run
  to the end, because nvcc would have run them and their diagnostics come first; if one of
  them fails too, it is the failure nvcc would have reported.
"""

from __future__ import annotations

import contextlib
import enum
import heapq
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from . import hostsplit
from .files import read_bytes, write_atomically
from .graph import Action, Dag, Task
from .plan import Step
from .slots import MemoryGate, Slots

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
    returncode: int | None = None
    cpu_seconds: float | None = None
    max_rss_kb: int | None = None
    reran: bool = False  # a module_id check that had to rerun cicc
    split: bool = False  # a host compile's back task that only had to assemble
    split_note: str = ""  # a host compile's back task: why it compiled as printed instead
    cached: bool | None = None  # True: a cache hit; False: a cacheable step that missed
    slot: int | None = None
    # Captured output: (fd, path) in the order to forward them.
    captures: list[tuple[int, str]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class RunResult:
    returncode: int
    records: tuple[Record, ...]
    failed_task: int | None
    wall_seconds: float
    started_at: float = 0.0  # Unix time the records' start and end offsets count from


class Internal:
    """The in-process steps: nvcc's dependency filter and rm, given by the driver."""

    def depfile(self, step: Step) -> bytes | None:  # pragma: no cover - interface
        """Write the dependency file of ``step``; return text meant for stdout, if any."""
        raise NotImplementedError

    def remove(self, step: Step) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class StepFailed(Exception):
    """An in-process step failed the way nvcc would report it."""

    def __init__(self, message: str, returncode: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode


class CacheHook:
    """The per-step cache, as the scheduler sees it (given by the driver with --cache)."""

    def fetch(self, task: Task) -> tuple[bool, list[tuple[int, bytes]] | None]:  # pragma: no cover
        """(cacheable, captures of a hit or None); a hit has restored the outputs."""
        raise NotImplementedError

    def store(self, task: Task, captures: list[tuple[int, bytes]]) -> None:  # pragma: no cover
        raise NotImplementedError


@dataclass(slots=True)
class _Front:
    """What a split host compile's front task leaves its back task."""

    placeholder: str
    assembly: str
    driver: hostsplit.DriverPlan
    captures: list[tuple[int, str]]


def _use(record: Record, usage) -> None:
    record.cpu_seconds = (record.cpu_seconds or 0.0) + usage.ru_utime + usage.ru_stime
    record.max_rss_kb = max(record.max_rss_kb or 0, usage.ru_maxrss)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


@dataclass(slots=True)
class _Running:
    task: Task
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False


class Runner:
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
        messages: Sequence[tuple[int, str]] = (),
        combine_output: bool = False,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        on_event: Callable[[str, Task, Record], None] | None = None,
        slots: Slots | None = None,
        memory: MemoryGate | None = None,
        cache: CacheHook | None = None,
        state_dir: str | None = None,
    ) -> None:
        self.dag = dag
        self.env = dict(env)
        self.cwd = cwd
        self.workdir = workdir
        self.jobs = max(1, jobs)
        self.priorities = priorities
        self.internal = internal
        self.messages = messages
        self.combine_output = combine_output
        self.stdout = stdout
        self.stderr = stderr
        self.on_event = on_event
        self.slots = slots or Slots()
        self.memory = memory
        self.cache = cache
        self.state_dir = state_dir  # where split host compiles learn their placeholders
        self._fronts: dict[int, _Front | str] = {}  # a front's work, or why there is none
        self._commands = 0  # commands (slot-taking tasks) running now
        self.records = [Record(task.id) for task in dag.tasks]
        self._events: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
        self._running: dict[int, _Running] = {}
        self._lock = threading.Lock()
        self._t0 = 0.0
        self._threads: list[threading.Thread] = []
        self._free_slots: list[int] = []

    # -- the main loop ---------------------------------------------------------------------

    def run(self) -> RunResult:
        self._t0 = time.monotonic()
        self._started_at = time.time()
        tasks = self.dag.tasks
        succs = self.dag.succs
        waiting = [len(p) for p in self.dag.preds]
        ready: list[tuple[float, tuple[int, int], int]] = []
        for task in tasks:
            if not waiting[task.id]:
                heapq.heappush(ready, self._rank(task))
        self._free_slots = list(range(self.jobs - 1, -1, -1))
        emitter = _Emitter(self, self.messages)
        failed: int | None = None  # task id of the earliest failure in nvcc's order
        try:
            while True:
                blocked = False  # a ready step waits for a shared slot or for memory
                while ready:
                    _, _, task_id = ready[0]
                    task = tasks[task_id]
                    if failed is not None and task.order > tasks[failed].order:
                        heapq.heappop(ready)
                        continue
                    if _takes_slot(task) and not self._reserve_slot(task):
                        blocked = bool(self._free_slots)
                        break
                    heapq.heappop(ready)
                    self._start(task)
                self._release_idle_slots()
                if not self._running:
                    if not ready:
                        break
                    time.sleep(0.02)  # nothing of ours runs: wait for the pool to free a slot
                    continue
                event = self._next_event(timeout=0.05 if blocked else 0.5)
                if event is None:
                    continue
                task_id, error = event
                run = self._running.pop(task_id)
                record = self.records[task_id]
                if record.slot is not None:
                    self._free_slots.append(record.slot)
                    self._commands -= 1
                if error is not None:
                    raise error
                if run.killed:
                    record.state = State.KILLED
                elif record.state is State.DONE:
                    for succ in succs[task_id]:
                        waiting[succ] -= 1
                        if not waiting[succ]:
                            heapq.heappush(ready, self._rank(tasks[succ]))
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

    def _reserve_slot(self, task: Task) -> bool:
        """May ``task`` start now?  Within -j, with a shared slot (the implicit one, one held,
        or one newly taken from the jobserver or the pool), and with memory to spare."""
        if not self._free_slots:
            return False
        if self._commands >= self.slots.implicit + self.slots.held and not self.slots.try_acquire():
            return False
        if self.memory is not None and self._commands and not self.memory.allows(task):
            return False
        return True

    def _release_idle_slots(self) -> None:
        """Give back shared slots no running step uses, so other compiles can have them."""
        while self.slots.held > max(0, self._commands - self.slots.implicit):
            self.slots.release()

    def _rank(self, task: Task) -> tuple[float, tuple[int, int], int]:
        return (-self.priorities[task.id], task.order, task.id)

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
        if _takes_slot(task):
            record.slot = self._free_slots.pop()
            self._commands += 1
            if self.memory is not None:
                self.memory.taken(task)
        record.start = self._now()
        self._running[task.id] = _Running(task)
        self._notify("start", task, record)
        thread = threading.Thread(target=self._work, args=(task,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self, task: Task) -> None:
        error: BaseException | None = None
        record = self.records[task.id]
        try:
            if task.action is Action.EXEC:
                if self.cache is None or not self._from_cache(task, record):
                    self._exec(task, list(task.argv), record)
                    if record.cached is False and record.state is State.DONE:
                        self.cache.store(task, [(fd, read_bytes(path)) for fd, path in record.captures])
            elif task.action is Action.SHELL:
                self._exec(task, ["/bin/sh", "-c", task.step.text], record)
                self._collect_nvcc_captures(task, record)
            elif task.action is Action.DEPFILE:
                text = self.internal.depfile(task.step)
                if text:
                    path = self._capture_path(task, 1)
                    with open(path, "wb") as handle:
                        handle.write(text)
                    record.captures.append((1, path))
                self._finish(record, 0)
            elif task.action is Action.REMOVE:
                self.internal.remove(task.step)
                self._finish(record, 0)
            elif task.action is Action.CHECK_MODULE_ID:
                self._check_module_id(task, record)
            elif task.action is Action.HOST_FRONT:
                self._host_front(task, record)
            elif task.action is Action.HOST_BACK:
                self._host_back(task, record)
        except StepFailed as exc:
            self._fail_with(task, record, exc.message, exc.returncode)
        except OSError as exc:
            # A command that cannot start fails the way sh, which nvcc runs it with, reports it.
            missing = isinstance(exc, FileNotFoundError)
            reason = "not found" if missing else exc.strerror
            name = exc.filename or task.step.tool
            self._fail_with(task, record, f"sh: 1: {name}: {reason}\n", 127 if missing else 126)
        except BaseException as exc:  # pragma: no cover - a bug in fast_nvcc itself
            error = exc
        self._events.put((task.id, error))

    def _exec(self, task: Task, argv: list[str], record: Record) -> None:
        returncode, captures, usage = self._spawn(task, argv)
        if returncode is None:
            self._finish(record, -signal.SIGTERM)
            return
        _use(record, usage)
        record.captures.extend(captures)
        self._finish(record, returncode)

    def _spawn(
        self, task: Task, argv: list[str], *, tag: str = "", env: Mapping[str, str] | None = None
    ) -> tuple[int | None, list[tuple[int, str]], object]:
        """Run one command of ``task``, its output captured to files: (exit code, captures,
        resource usage); the exit code is None when the task was killed before it started."""
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
                        return None, [], None
                    # Each step leads its own process group, so a kill reaches the
                    # processes it is forking right then (gcc's cc1plus), which a walk
                    # of its children can miss.
                    run.proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=stdout,
                        stderr=stderr,
                        env=self.env if env is None else env,
                        cwd=self.cwd,
                        process_group=0,
                    )
                _, status, usage = os.wait4(run.proc.pid, 0)
                run.proc.returncode = os.waitstatus_to_exitcode(status)
                if run.killed:
                    # Its outputs are removed once the runner ends: nothing may still be
                    # writing them then.
                    wait_for_group(run.proc.pid)
            finally:
                for handle in (stdout, stderr):
                    if handle not in (out, err, subprocess.STDOUT):
                        handle.close()
        captures = [(1, out_path)]
        if err_path != out_path:
            captures.append((2, err_path))
        return run.proc.returncode, captures, usage

    def _host_front(self, task: Task, record: Record) -> None:
        """cc1plus of a split host compile, on a placeholder .fatbin.c; its output is kept
        for the back task, which alone knows whether the split holds."""
        assert task.fatbin is not None
        self._fronts[task.id] = "nothing learned yet for this fatbinary"
        template = self._template(task)
        placeholder = hostsplit.read_template(template) if template else None
        if placeholder is None:
            self._finish(record, 0)
            return
        write_atomically(task.fatbin[0], placeholder.encode("utf-8", "surrogateescape"))
        assembly = os.path.join(self.workdir, f"host.{task.step.index}.s")
        driver = hostsplit.driver_plan(task.argv, env=self.env, cwd=self.cwd, assembly=assembly)
        if driver is None:
            self._fronts[task.id] = "its -### is not cc1plus then as"
            self._finish(record, 0)
            return
        returncode, captures, usage = self._spawn(task, list(driver.cc1), tag="cc1", env=driver.env)
        if returncode is None:
            self._finish(record, -signal.SIGTERM)
            return
        _use(record, usage)
        if returncode == 0:
            self._fronts[task.id] = _Front(placeholder, assembly, driver, captures)
        else:
            self._fronts[task.id] = f"cc1plus failed (exit {returncode})"
        self._finish(record, 0)

    def _host_back(self, task: Task, record: Record) -> None:
        """as on the assembly with the real data, or the host compile as nvcc printed it."""
        assert task.fatbin is not None and task.front is not None
        real_path, private = task.fatbin
        front = self._fronts.get(task.front)
        try:
            real = read_bytes(private).decode("utf-8", "surrogateescape")
        except FileNotFoundError:  # fatbinary made none: nor may the placeholder stay
            with contextlib.suppress(FileNotFoundError):
                os.remove(real_path)
            record.split_note = "fatbinary wrote no .fatbin.c"
            self._exec(task, list(task.argv), record)
            return
        os.replace(private, real_path)  # the real file where nvcc has it, for the fallback too
        fatbin = hostsplit.parse(real)
        template = self._template(task)
        if template and fatbin is not None:
            hostsplit.learn(template, fatbin)
        if isinstance(front, _Front):
            assembly = None
            if fatbin is not None:
                assembly = hostsplit.patch(read_bytes(front.assembly).decode("utf-8", "surrogateescape"), front.placeholder, fatbin)
            if assembly is None:
                front = "its .fatbin.c does not match the learned placeholder (learned anew)"
            else:
                write_atomically(front.assembly, assembly.encode("utf-8", "surrogateescape"))
                returncode, captures, usage = self._spawn(task, list(front.driver.assembler), tag="as", env=front.driver.env)
                if returncode is None:
                    self._finish(record, -signal.SIGTERM)
                    return
                if returncode == 0:
                    _use(record, usage)
                    record.split = True
                    record.captures.extend(front.captures + captures)
                    self._finish(record, 0)
                    return
                front = f"as failed (exit {returncode})"
        record.split_note = front or "its front did not run"
        self._exec(task, list(task.argv), record)

    def _template(self, task: Task) -> str | None:
        if not self.state_dir:
            return None
        return hostsplit.template_path(self.state_dir, task.fatbinary, path=self.env.get("PATH"))

    def _from_cache(self, task: Task, record: Record) -> bool:
        """Replay a cache hit: outputs restored, captured output written back; True on a hit."""
        cacheable, captures = self.cache.fetch(task)
        if not cacheable:
            return False
        if captures is None:
            record.cached = False
            return False
        record.cached = True
        for fd, data in captures:
            path = self._capture_path(task, fd)
            with open(path, "wb") as handle:
                handle.write(data)
            record.captures.append((fd, path))
        self._finish(record, 0)
        return True

    def _check_module_id(self, task: Task, record: Record) -> None:
        assert task.module_ids is not None
        nvcc_id, ours = task.module_ids
        with open(nvcc_id, "rb") as a, open(ours, "rb") as b:
            same = a.read() == b.read()
        if same:
            self._finish(record, 0)
            return
        # Different module_id: the speculative cicc's outputs are wrong; redo it as nvcc would.
        record.reran = True
        self._exec(task, list(task.rerun), record)

    def _collect_nvcc_captures(self, task: Task, record: Record) -> None:
        """Under nvcc -t the plan redirects each command's output to temp files, which nvcc
        prints afterwards; the faithful mode runs the line as printed, so do the same."""
        for redirect in task.step.redirects:
            if _is_nvcc_capture(redirect.target) and os.path.exists(redirect.target):
                record.captures.append((redirect.fd, redirect.target))

    def _fail_with(self, task: Task, record: Record, message: str, returncode: int) -> None:
        path = self._capture_path(task, 2)
        with open(path, "ab") as handle:
            handle.write(message.encode("utf-8", "surrogateescape"))
        record.captures.append((2, path))
        self._finish(record, returncode)

    def _finish(self, record: Record, returncode: int) -> None:
        record.end = self._now()
        record.returncode = returncode
        record.state = State.DONE if returncode == 0 else State.FAILED

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
        return os.path.join(self.workdir, f"{task.id}{tag}.{fd}")

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

    def forward(self, *, upto: tuple[int, int] | None, final: bool = False) -> None:
        records = self.runner.records
        while self.cursor < len(self.order):
            task = self.order[self.cursor]
            if upto is not None and task.order > upto:
                return
            record = records[task.id]
            if record.state not in (State.DONE, State.FAILED):
                return
            self._messages_before(task.step.index)
            if not self._superseded(task):
                for fd, path in record.captures:
                    self._write(fd, path)
            self.cursor += 1
        if final:
            self._messages_before(None)

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


def _takes_slot(task: Task) -> bool:
    return task.action in (Action.EXEC, Action.SHELL, Action.HOST_FRONT, Action.HOST_BACK)


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
