"""The commands of a run's tasks: each started in a process group of its own, its output
captured to files, and reaped (exit status and resource usage) by the thread that started it;
and stopped, with everything it forked, when the run fails or is interrupted.

Every step dies with fast_nvcc however fast_nvcc dies (:mod:`.watchdog`); how a group is
stopped is :mod:`.process_groups`'s.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO, NamedTuple

from ..graph.tasks import Action, Task
from .captures import Captures
from .step_threads import hold
from .process_groups import kill_trees, wait_for_group
from .task_records import StepFailed
from .watchdog import Watchdog, die_with_parent


class Spawned(NamedTuple):
    """How a command ended: its exit code, its captured output files and its resource usage."""

    returncode: int
    captures: list[tuple[int, str]]
    usage: Any  # the child's resource usage, from wait4


class _Running:
    """A task that runs now, and the process of its command once it has one."""

    __slots__ = ("cancelled", "killed", "proc", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False
        self.cancelled = False  # stopped to be run again (a guess proved wrong), not a failure


class Processes:
    """The running tasks of one run and the processes of their commands."""

    def __init__(
        self, *, env: Mapping[str, str], cwd: str, workdir: str, combine_output: bool, captures: Captures
    ) -> None:
        self.env = env
        self.cwd = cwd
        self.workdir = workdir
        self.combine_output = combine_output
        self.captures = captures
        self._running: dict[int, _Running] = {}
        self._pins: dict[int, frozenset[int]] = {}  # split steps: the CPUs their threads may use
        self._nices: dict[int, int] = {}  # steps of a compile with slack (niceness.py)
        self._lock = threading.Lock()
        self._watchdog: Watchdog | None = None  # started with the first command

    @property
    def running(self) -> bool:
        """Does a task of the run still run?"""
        return bool(self._running)

    def begin(self, task: Task) -> None:
        self._running[task.id] = _Running(task)

    def killed(self, task_id: int) -> bool:
        """Did fast_nvcc itself kill this running task?"""
        return self._running[task_id].killed

    def end(self, task_id: int) -> bool:
        """The task's thread is done; was it killed?"""
        self._nices.pop(task_id, None)
        return self._running.pop(task_id).killed

    def nice(self, task_id: int, nice: int) -> None:
        """Start the commands of ``task_id`` at CPU priority ``nice`` (fast_nvcc.run.niceness)."""
        if nice:
            self._nices[task_id] = nice
        else:
            self._nices.pop(task_id, None)

    def spawn(
        self, task: Task, argv: list[str], *, tag: str = "", env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Spawned | None:
        """Run one command of ``task``, its output captured to files; None when the task was
        killed first."""
        out_path = self.capture_path(task, 1, tag)
        err_path = out_path if self.combine_output else self.capture_path(task, 2, tag)
        redirects = {r.fd: r for r in task.step.redirects if not is_nvcc_capture(r.target)}
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
                    if run.killed or run.cancelled:
                        return None
                    # Each step leads its own process group, so a kill reaches the
                    # processes it is forking right then (gcc's cc1plus), which a walk
                    # of its children can miss.  The steps die with fast_nvcc however it
                    # dies (fast_nvcc/run/watchdog.py): this thread forks and reaps the child.
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
                            preexec_fn=functools.partial(_in_child, os.getpid(), self._pins.get(task.id),
                                                         self._nices.get(task.id, 0)),
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
                if os.WIFSIGNALED(status) and not (run.killed or run.cancelled):
                    # sh's own stderr, which is nvcc's, not the line's redirection
                    run.proc.returncode = _report_as_sh(status, out if err is None else err)
                if run.killed or run.cancelled:
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

    def pin(self, task_id: int, cpus: frozenset[int] | None) -> None:
        """Hold the threads of ``task_id``'s commands to ``cpus`` (fast_nvcc.run.core_grants), those
        it runs now and those it starts later; None: no more holding."""
        with self._lock:
            if cpus is None:
                self._pins.pop(task_id, None)
                return
            self._pins[task_id] = cpus
            run = self._running.get(task_id)
            pid = run.proc.pid if run is not None and run.proc is not None and run.proc.returncode is None else None
        if pid is not None:
            hold(pid, cpus)

    def runs(self, task_id: int) -> bool:
        """Does ``task_id`` run (its end not handled yet)?"""
        return task_id in self._running

    @property
    def runs_idle_only(self) -> bool:
        """Does a task that only uses idle cores (graph.Task.idle_only) run now?"""
        return any(run.task.idle_only and not run.killed for run in list(self._running.values()))

    def kill_idle_only(self) -> None:
        """Kill the running tasks that only use idle cores."""
        self._kill(lambda run: run.task.idle_only and not run.killed)

    def kill_optional(self, task_id: int) -> None:
        """Kill the running optional task ``task_id`` (its help is no longer needed)."""
        self._kill(lambda run: run.task.optional and not run.killed and run.task.id == task_id)

    def cancel(self, task_id: int) -> None:
        """Stop a running task's command to run the task again: its thread ends as usual, and
        the task is not counted as killed."""
        with self._lock:
            run = self._running.get(task_id)
            if run is None or run.killed:
                return
            run.cancelled = True
            victims = [run.proc.pid] if run.proc is not None else []
        kill_trees(victims)

    def kill_after(self, order: tuple[int, int, int] | None) -> None:
        """Kill running tasks that come after ``order`` in nvcc's order (all when None)."""
        self._kill(lambda run: order is None or run.task.order > order)

    def _kill(self, which: Callable[[_Running], bool]) -> None:
        """Mark the running tasks ``which`` picks as killed, and kill their process trees."""
        victims = []
        with self._lock:
            for run in self._running.values():
                if which(run):
                    run.killed = True
                    if run.proc is not None:
                        victims.append(run.proc.pid)
        kill_trees(victims)

    def step_pids(self) -> dict[int, int]:
        """Task -> the pid of its live command (the leader of its process group)."""
        with self._lock:
            return {task_id: run.proc.pid for task_id, run in self._running.items()
                    if run.proc is not None and run.proc.returncode is None and not run.killed}  # fmt: skip

    def signal_step(self, task_id: int, signum: int) -> bool:
        """Send ``signum`` to a running task's process group (fast_nvcc.machine.pressure stops and
        continues steps); False when it has no live command now."""
        with self._lock:
            run = self._running.get(task_id)
            if run is None or run.killed or run.proc is None or run.proc.returncode is not None:
                return False
            try:
                os.killpg(run.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                return False
            return True

    def capture_path(self, task: Task, fd: int, tag: str = "") -> str:
        return self.captures.path(f"{task.id}{tag}.{fd}")

    def close(self) -> None:
        """The run has ended in order: the watchdog leaves without doing anything."""
        if self._watchdog is not None:
            self._watchdog.close()


def _in_child(parent: int, cpus: frozenset[int] | None, nice: int) -> None:
    """Between fork and exec: die with fast_nvcc; lead a process group of its own (Popen's
    ``process_group=0``, which Python 3.10 lacks); a split step's threads on its cores; a step
    of a compile with slack at a lower priority."""
    die_with_parent(parent)
    os.setpgid(0, 0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    if nice:
        os.nice(nice)


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


def is_nvcc_capture(target: str) -> bool:
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
