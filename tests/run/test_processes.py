"""The processes of a run's tasks (fast_nvcc.run.processes), with real short commands: output
captured apart or as one, a command that cannot start or dies of a signal reported as sh
reports it, the plan's own redirections, and the kills (after a failure, of optional tasks, to
run a task again) that take everything a step forked and leave nothing running."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from fast_nvcc.graph.tasks import Action
from fast_nvcc.plan.shellwords import Redirect
from fast_nvcc.run.captures import Captures
from fast_nvcc.run.processes import Processes, is_nvcc_capture
from fast_nvcc.run.task_records import StepFailed

from tasks import sh_task

LONG = "sleep 30 & sleep 30; wait"  # a step that runs until it is killed, with a child of its own
BOUND = 10  # seconds to wait for what takes a fraction of one
NVCC_CAPTURE = "/tmp/tmpxft_0000abcd_00000000-13_3ed6fb20_std"  # nvcc's own redirection of a step


@pytest.fixture
def make(tmp_path):
    """Processes of a run in tmp_path; afterwards, not one process of theirs is left."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    made = []

    def make(*, combine: bool = False) -> Processes:
        captures = Captures(str(tmp_path))
        processes = Processes(env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path),
                              combine_output=combine, captures=captures)  # fmt: skip
        made.append((processes, captures))
        return processes

    yield make
    for processes, captures in made:
        processes.kill_after(None)  # what a failed test left running
        processes.close()
        captures.close()
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and _alive(p)]
    assert left == [], [p.cmdline() for p in left]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def spawn(processes: Processes, task, argv=None, **options):
    """Begin ``task`` and run its command to its end."""
    processes.begin(task)
    return processes.spawn(task, list(argv or task.argv), **options)


def read(captures) -> dict[int, bytes]:
    result = {}
    for fd, path in captures:
        with open(path, "rb") as handle:
            result[fd] = handle.read()
    return result


@pytest.mark.parametrize(
    "script, combine, returncode, captured",
    [
        ("echo out; echo err >&2; exit 3", False, 3, {1: b"out\n", 2: b"err\n"}),
        ("echo 1; echo 2 >&2; echo 3", True, 0, {1: b"1\n2\n3\n"}),  # one file: the interleaving kept
        ("echo err >&2", False, 0, {2: b"err\n"}),  # a stream that printed nothing is no capture
        ("true", False, 0, {}),
    ],
)
def test_a_commands_output_is_captured(make, script, combine, returncode, captured):
    spawned = spawn(make(combine=combine), sh_task(0, script))
    assert spawned.returncode == returncode
    assert read(spawned.captures) == captured
    assert spawned.usage.ru_utime >= 0  # the child's own resource usage, from wait4


def test_a_command_runs_with_the_environment_and_directory_given(make, tmp_path):
    (tmp_path / "sub").mkdir()
    processes = make()
    default = spawn(processes, sh_task(0, 'echo "$FAST_NVCC_TEST_VALUE" "$PWD"'))
    env = {**os.environ, "FAST_NVCC_TEST_VALUE": "given"}
    given = spawn(processes, sh_task(1, 'echo "$FAST_NVCC_TEST_VALUE" "$PWD"'), env=env, cwd=str(tmp_path / "sub"))
    assert read(default.captures) == {1: f" {tmp_path}\n".encode()}
    assert read(given.captures) == {1: f"given {tmp_path / 'sub'}\n".encode()}


@pytest.mark.parametrize("missing, returncode, reason", [(True, 127, "not found"), (False, 126, "Permission denied")])
def test_a_command_that_cannot_start_fails_as_sh_reports_it(make, tmp_path, missing, returncode, reason):
    tool = tmp_path / "tool"
    if not missing:
        tool.write_text("#!/bin/sh\n")  # not executable
    with pytest.raises(StepFailed) as failed:
        spawn(make(), sh_task(0, "true"), [str(tool), "-c"])
    assert failed.value.returncode == returncode
    assert failed.value.message == f"sh: 1: {tool}: {reason}\n"


@pytest.mark.parametrize(
    "signum, said",
    [(signal.SIGTERM, b"Terminated\n"), (signal.SIGKILL, b"Killed\n"), (signal.SIGINT, None), (signal.SIGPIPE, None)],
    ids=["TERM", "KILL", "INT", "PIPE"],
)
def test_a_command_that_dies_of_a_signal_is_reported_as_sh_reports_it(make, signum, said):
    # A shell's background job starts with SIGINT ignored, and an ignored signal stays ignored
    # across exec (sh then survives its own kill -INT, as nvcc's would): handled here, so that
    # the step starts with the default action, however the suite was started.
    before = signal.signal(signum, signal.default_int_handler) if signum == signal.SIGINT else None
    try:
        spawned = spawn(make(), sh_task(0, f"kill -{signum.name[3:]} $$"))
    finally:
        if before is not None:
            signal.signal(signum, before)
    assert spawned.returncode == 128 + signum
    assert read(spawned.captures).get(2) == said


@pytest.mark.parametrize(
    "action, target, in_file",
    [
        (Action.EXEC, "out.txt", True),  # the plan's own redirection
        (Action.EXEC, NVCC_CAPTURE + "out", False),  # nvcc's capture: ours
        (Action.SHELL, "out.txt", False),  # sh applies the line's redirections itself
    ],
)
def test_the_plans_redirection_of_stdout_is_kept(make, tmp_path, action, target, in_file):
    task = sh_task(0, "echo out")
    task = task._replace(action=action, step=task.step._replace(redirects=(Redirect(1, target),)))
    spawned = spawn(make(), task)
    assert (tmp_path / "out.txt").exists() is in_file
    assert read(spawned.captures) == ({} if in_file else {1: b"out\n"})


@pytest.mark.parametrize(
    "target, ours",
    [(NVCC_CAPTURE + "out", True), (NVCC_CAPTURE + "err", True), ("deps.d", False),
     ("/tmp/tmpxft_0000abcd_00000000-13_kernel.ii", False)],
)  # fmt: skip
def test_nvccs_own_captures_are_told_from_the_plans_files(target, ours):
    assert is_nvcc_capture(target) is ours


class Running:
    """Tasks whose commands run in threads of their own, as the scheduler runs them."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.pool = ThreadPoolExecutor(4)
        self.spawned = {}

    def start(self, task, script: str = LONG):
        self.spawned[task.id] = self.pool.submit(spawn, self.processes, task, ["sh", "-c", script])
        deadline = time.monotonic() + BOUND
        while task.id not in self.processes.step_pids():
            assert time.monotonic() < deadline, f"task {task.id} did not start"
            time.sleep(0.005)
        return self.processes.step_pids()[task.id]

    def result(self, task_id: int):
        return self.spawned[task_id].result(timeout=BOUND)


@pytest.fixture
def running(make):
    run = Running(make())
    yield run
    run.processes.kill_after(None)
    run.pool.shutdown()


def forked_both(pid: int) -> list[psutil.Process]:
    """LONG's two sleeps, once both run (until then sh may be between its fork and exec)."""
    deadline = time.monotonic() + BOUND
    while len(forked := [p for p in psutil.Process(pid).children() if p.name() == "sleep"]) < 2:
        assert time.monotonic() < deadline, "LONG did not fork its sleeps"
        time.sleep(0.005)
    return forked


def test_a_failure_kills_the_tasks_after_it_in_nvccs_order_and_what_they_forked(running):
    processes = running.processes
    first, second = sh_task(0, LONG), sh_task(1, LONG)
    running.start(first)
    forked = forked_both(running.start(second))
    processes.kill_after(first.order)
    spawned = running.result(second.id)
    assert spawned.returncode == -signal.SIGTERM and spawned.captures == []  # no sh message: ours
    assert not any(_alive(p) for p in forked)
    assert processes.killed(second.id) and not processes.killed(first.id)
    assert list(processes.step_pids()) == [first.id]
    assert processes.end(second.id) is True
    processes.kill_after(None)
    assert running.result(first.id).returncode == -signal.SIGTERM
    assert processes.end(first.id) is True
    assert not processes.running


def test_a_task_killed_before_its_command_started_starts_none(make):
    processes = make()
    task = sh_task(0, "echo never")
    processes.begin(task)
    assert processes.runs(task.id) and processes.step_pids() == {}
    processes.kill_after(None)
    assert processes.spawn(task, list(task.argv)) is None
    assert processes.end(task.id) is True and not processes.runs(task.id)


def test_a_cancelled_task_ends_as_usual_and_is_not_counted_as_killed(running):
    processes = running.processes
    task = sh_task(0, LONG)
    running.start(task)
    processes.cancel(task.id)
    assert running.result(task.id).returncode == -signal.SIGTERM
    assert not processes.killed(task.id)
    assert processes.end(task.id) is False


def test_kill_idle_only_kills_only_the_tasks_on_idle_cores(running):
    processes = running.processes
    probe, step = sh_task(0, LONG)._replace(optional=True), sh_task(1, LONG)
    urgent = sh_task(2, LONG)._replace(optional=True, urgent=True)
    running.start(probe)
    running.start(step)
    running.start(urgent)
    assert processes.runs_idle_only
    processes.kill_idle_only()
    assert running.result(probe.id).returncode == -signal.SIGTERM
    assert not processes.runs_idle_only
    assert processes.killed(probe.id) and not processes.killed(step.id) and not processes.killed(urgent.id)
    processes.kill_optional(urgent.id)  # its help came too late
    assert running.result(urgent.id).returncode == -signal.SIGTERM
    assert list(processes.step_pids()) == [step.id]


def test_a_running_step_can_be_stopped_and_continued(running):
    processes = running.processes
    task = sh_task(0, LONG)
    pid = running.start(task)
    forked_both(pid)
    assert processes.signal_step(task.id, signal.SIGSTOP)
    _wait_for_status(pid, psutil.STATUS_STOPPED)
    assert processes.signal_step(task.id, signal.SIGCONT)
    _wait_for_status(pid, psutil.STATUS_SLEEPING)
    assert not processes.signal_step(7, signal.SIGCONT)  # no such task running
    processes.kill_after(None)
    running.result(task.id)
    assert not processes.signal_step(task.id, signal.SIGCONT)  # killed: no live command


def _wait_for_status(pid: int, status: str) -> None:
    deadline = time.monotonic() + BOUND
    while psutil.Process(pid).status() != status:
        assert time.monotonic() < deadline, status
        time.sleep(0.005)


def test_a_pinned_tasks_commands_run_on_its_cpus(make):
    processes = make()
    task = sh_task(0, "grep Cpus_allowed_list /proc/self/status")
    processes.begin(task)
    processes.pin(task.id, frozenset({0}))
    spawned = processes.spawn(task, list(task.argv))
    assert read(spawned.captures) == {1: b"Cpus_allowed_list:\t0\n"}
    processes.pin(task.id, None)
    spawned = processes.spawn(task, list(task.argv), tag=".again")
    assert read(spawned.captures) == {1: b"Cpus_allowed_list:\t" + _ranges(os.sched_getaffinity(0)) + b"\n"}


def _ranges(cpus) -> bytes:
    """/proc's spelling of a CPU set: 0-3,6."""
    cpus, parts, start = sorted(cpus), [], None
    for i, cpu in enumerate(cpus):
        start = cpu if start is None else start
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            parts.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(parts).encode()
