"""Sharing the machine: GNU make's jobserver (pipe and fifo forms) and the machine-wide pool.

Concurrency is counted from FAST_NVCC_LOG: every command step of every process, on one clock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest
from helpers import fast_nvcc_command

from fast_nvcc.machine.pool_files import Request
from fast_nvcc.machine.jobserver import JobserverSlots, jobserver_from_makeflags
from fast_nvcc.machine.slot_choice import slots_from_environment
from fast_nvcc.machine.slots import Admit, Ask, PoolSlots, admit

# What fast_nvcc itself decides: against the first toolchain (conftest).
pytestmark = pytest.mark.one_toolchain

TWO_ARCHS = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]
SLOW_GCC = """#!/bin/sh
case "$*" in
  *-D__CUDA_ARCH__=*-E*) sleep 60 ;;
esac
exec /usr/bin/gcc "$@"
"""


# -- units ---------------------------------------------------------------------------------


def _never() -> int:
    raise AssertionError("asked though it decides nothing here")


@pytest.mark.parametrize(
    "ask, ahead, free, over, extras, may_drain, expected",
    [
        # A free slot for each request ranked before it, and one for itself.
        (Ask.FIRST, 0, 1, 0, _never, _never, Admit.SLOT),
        (Ask.FIRST, 1, 1, 0, lambda: 0, _never, None),  # the one ahead gets it
        # Full: a first step runs over the pool while extra steps run (rule 1), else waits.
        (Ask.FIRST, 0, 0, 0, lambda: 2, _never, Admit.OVER),
        (Ask.FIRST, 0, 0, 0, lambda: 0, _never, None),
        # An extra step leaves a slot to each first step running over the pool ...
        (Ask.EXTRA, 0, 1, 1, _never, lambda: False, None),
        (Ask.EXTRA, 0, 2, 1, _never, _never, Admit.SLOT),
        # ... and runs over it only to drain a compile near its end (rule 3).
        (Ask.EXTRA, 0, 0, 0, _never, lambda: True, Admit.DRAIN),
        # A split step's core: by rank beside first steps, not behind the steps over the pool,
        # and never over the pool itself.
        (Ask.POLE, 0, 1, 3, _never, _never, Admit.SLOT),
        (Ask.POLE, 1, 1, 0, _never, _never, None),
        (Ask.POLE, 0, 0, 0, _never, _never, None),
    ],
)
def test_admit(ask, ahead, free, over, extras, may_drain, expected):
    assert admit(ask, ahead=ahead, free=free, over=over, extras=extras, may_drain=may_drain) is expected


def test_makeflags_without_jobserver():
    assert jobserver_from_makeflags("") is None
    assert jobserver_from_makeflags(" -j4") is None
    assert jobserver_from_makeflags(" -j4 --jobserver-auth=99,98") is None  # not inherited


def test_pipe_jobserver_tokens_round_trip():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"ab")
    client = jobserver_from_makeflags(f" -j3 --jobserver-fds=1,1 --jobserver-auth={read_fd},{write_fd}")
    assert isinstance(client, JobserverSlots) and client.implicit == 1
    assert client.try_acquire() and client.try_acquire() and not client.try_acquire()
    client.release_all()
    assert sorted(os.read(read_fd, 10)) == sorted(b"ab")  # the very bytes make wrote
    # The shared pipe stays blocking for make's other children.
    assert os.get_blocking(read_fd)
    client.close()
    os.close(read_fd)
    os.close(write_fd)


def test_pool_slots_are_exclusive_and_die_with_their_holder(tmp_path):
    first, second, third, fourth = (PoolSlots(str(tmp_path), 2) for _ in range(4))
    assert first.implicit == 0
    assert first.try_acquire() and first.try_acquire()  # its first step, and an extra one
    # The pool is full; while an extra step runs, every compile's first step still runs (over
    # the pool), and no extra step starts while one runs over.
    assert second.try_acquire() and third.try_acquire() and not second.try_acquire()
    first.release()  # the extra one goes first
    assert not second.try_acquire()  # the freed slot: not to an extra step while some run over
    assert fourth.try_acquire()  # but to a first step
    second.release()
    third.release()
    assert not fourth.try_acquire()  # the pool is full again (first and fourth): no overflow
    for slots in (first, second, third, fourth):
        slots.close()
    third = PoolSlots(str(tmp_path), 2)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); from fast_nvcc.machine.slots import PoolSlots;"
         " p = PoolSlots(%r, 2); p.try_acquire(); p.try_acquire(); print('held', flush=True); time.sleep(60)"
         % (str(Path(__file__).parent.parent.parent), str(tmp_path))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    third = PoolSlots(str(tmp_path), 2)
    assert third.try_acquire() and not third.try_acquire()  # over the pool, and no extra step
    holder.kill()  # no chance to clean up
    holder.wait()
    third.release()
    assert third.try_acquire() and third.try_acquire()  # no slot lost, no dead mark counted
    third.close()


def test_environment_picks_the_pool_without_a_jobserver(tmp_path):
    slots = slots_from_environment({"FAST_NVCC_POOL_DIR": str(tmp_path), "FAST_NVCC_POOL_SIZE": "3"}, pool_size=8)
    assert isinstance(slots, PoolSlots) and slots.size == 3 and not slots.poles
    slots.close()
    early = slots_from_environment({"FAST_NVCC_POOL_DIR": str(tmp_path), "FAST_NVCC_SPLIT_EARLY": "1"}, pool_size=8)
    assert isinstance(early, PoolSlots) and early.poles
    early.close()


WAITER = """
import sys, time
sys.path.insert(0, {root!r})
from fast_nvcc.machine.slots import PoolSlots
name, priority, extra, hold = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
pole = sys.argv[5] == "1"
pool = PoolSlots({pool!r}, {size}, saturated=(lambda: True) if pole else None, poles=pole)
for _ in range(extra):  # slots this process already runs steps on
    while not pool.try_acquire(0.0):
        time.sleep(0.01)
print("ready", flush=True)
while not pool.try_acquire(priority, pole=pole):
    time.sleep(0.01)
with open({order!r}, "a") as handle:
    handle.write(name + "\\n")
time.sleep(hold)
pool.close()
"""


def start_waiter(tmp_path, name, priority, *, extra=0, hold=0.3, size=2, pole=False):
    """A process that takes ``extra`` slots, then waits for one more at ``priority`` (for a
    ``pole``: a split step's core, while the build tool is full) and writes ``name`` to the
    order file once it has it."""
    script = WAITER.format(root=str(Path(__file__).parent.parent.parent), pool=str(tmp_path / "pool"), size=size,
                           order=str(tmp_path / "order"))  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script, name, str(priority), str(extra), str(hold), str(int(pole))],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    return proc


def requests_on_board(tmp_path) -> int:
    return sum(1 for n in os.listdir(tmp_path / "pool" / "requests") if n.startswith("r"))


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_pool_grants_by_rank_first_steps_before_extra_ones(tmp_path):
    """Four processes wait on a full pool of two: three for their first step, with remaining
    paths of 5, 50 and 20 s, and one that runs a step already and wants a second for a 1000 s
    path.  Freed slots go to the first steps, longest path first, then to the extra step."""
    holder = PoolSlots(str(tmp_path / "pool"), 2)
    assert holder.try_acquire(0.0)
    extra = start_waiter(tmp_path, "extra", 1000.0, extra=1, hold=0.0)
    waiters = [start_waiter(tmp_path, name, priority) for name, priority in (("w5", 5), ("w50", 50), ("w20", 20))]
    wait_for(lambda: requests_on_board(tmp_path) == 4)
    holder.close()
    for proc in [*waiters, extra]:
        assert proc.wait(timeout=60) == 0
    assert (tmp_path / "order").read_text().split() == ["w50", "w20", "w5", "extra"]


def test_a_split_steps_core_goes_before_first_steps_of_shorter_paths(tmp_path):
    """A full pool of two, the build tool holding compiles back.  Waiting: first steps on paths
    of 5 and 50 s, and a running split step that wants another core on a 20 s path.  Its core
    comes after the first step on the longer path and before the one with slack: rule 1 yields
    to the long pole, and only to it.  (An extra step waits for both: the test above.)"""
    holder = PoolSlots(str(tmp_path / "pool"), 2)
    assert holder.try_acquire(0.0)
    pole = start_waiter(tmp_path, "pole", 20.0, extra=1, pole=True)
    waiters = [start_waiter(tmp_path, name, priority) for name, priority in (("w5", 5), ("w50", 50))]
    wait_for(lambda: requests_on_board(tmp_path) == 3)
    holder.close()
    for proc in [*waiters, pole]:
        assert proc.wait(timeout=60) == 0
    assert (tmp_path / "order").read_text().split() == ["w50", "pole", "w5"]


def test_a_split_steps_core_yields_by_rank_alone(tmp_path):
    """A split step's extra core goes back (``claimed``) when a first step on a longer path
    waits, not for one on a shorter path, and not because first steps run over the pool."""
    pool = str(tmp_path / "pool")
    split = PoolSlots(pool, 4, saturated=lambda: True, poles=True)
    other = PoolSlots(pool, 4, saturated=lambda: True)
    assert split.try_acquire(0.0) and split.try_acquire(20.0, pole=True)
    assert other.try_acquire(5.0) and other.try_acquire(5.0)  # an extra step: the pool is full
    late = PoolSlots(pool, 4, saturated=lambda: True)
    assert late.try_acquire(1.0) and late.over_pool(1) == "first"  # over the pool: an extra runs
    assert not split.claimed(20.0, pole=True)
    assert split.claimed(20.0) == "over"  # an extra step's core would go back
    # The step over the pool and the extra one end, another compile's first step fills the
    # pool: a first step that arrives now waits (no extra step lets it run over).
    late.close()
    other.release()
    filler = PoolSlots(pool, 4, saturated=lambda: True)
    assert filler.try_acquire(1.0) and filler.over_pool(1) is None
    shorter = start_waiter(tmp_path, "shorter", 5.0, size=4)
    wait_for(lambda: requests_on_board(tmp_path) == 1)
    assert not split.claimed(20.0, pole=True)
    assert split.waiter_before(20.0, pole=True) is None
    longer = start_waiter(tmp_path, "longer", 50.0, size=4)
    wait_for(lambda: requests_on_board(tmp_path) == 2)
    assert split.claimed(20.0, pole=True) == "rank"
    # and to whom (FAST_NVCC_LOG's narrowed): the best of the waiters before it, as it posted
    assert split.waiter_before(20.0, pole=True) == Request(50.0, True, longer.pid)
    assert split.waiter_before(60.0, pole=True) is None
    for slots in (split, other, filler):
        slots.close()
    for proc in (shorter, longer):
        assert proc.wait(timeout=60) == 0


def test_a_split_step_widens_past_a_first_step_with_slack_and_not_past_a_longer_one(tmp_path):
    """fast_nvcc.run.core_grants asks the pool as a split step: a running split step on a 20 s
    path whose threads want four cores, on a full pool of three, and a compile waiting for its
    first step.  When a slot comes free, the split step takes it if the waiting compile's path
    is 5 s; on a 50 s path, the compile gets it.  Without FAST_NVCC_SPLIT_EARLY (``poles``), any
    first step goes before the split step's core, as before."""
    from fast_nvcc.run.admission import Admission
    from fast_nvcc.run.core_grants import Grants

    pool = str(tmp_path / "pool")
    for waiting, poles, widened in ((5.0, True, True), (50.0, True, False), (5.0, False, False)):
        (tmp_path / "order").unlink(missing_ok=True)
        slots = PoolSlots(pool, 3, saturated=lambda: True, poles=poles)
        admission = Admission(jobs=8, slots=slots, memory=None)
        assert slots.try_acquire(20.0)  # the split step's own slot, as the runner took it
        admission._commands = 1
        others = [PoolSlots(pool, 3, saturated=lambda: True) for _ in range(2)]
        assert all(other.try_acquire(1.0) for other in others)
        waiter = start_waiter(tmp_path, "compile", waiting, size=3, hold=1.0)
        grants = Grants(admission, pool_directory=str(tmp_path / "cores"), pin=lambda *_: None, cpus=range(4))
        grants.start(7, 4, 20.0)
        wait_for(lambda: requests_on_board(tmp_path) == 1)
        grants.poll(ours_waiting=None, priority_of=lambda _: 20.0)  # full: its request waits too
        assert grants._running[7].width == 1 and requests_on_board(tmp_path) == 2
        others[0].close()
        if not widened:
            wait_for(lambda: (tmp_path / "order").exists())
        grants.poll(ours_waiting=None, priority_of=lambda _: 20.0)
        assert grants._running[7].width == (2 if widened else 1)
        grants.close()
        slots.close()
        assert waiter.wait(timeout=60) == 0
        others[1].close()


def test_a_killed_waiter_blocks_no_one(tmp_path):
    holder = PoolSlots(str(tmp_path / "pool"), 1)
    assert holder.try_acquire(0.0)
    first = start_waiter(tmp_path, "killed", 100.0, size=1)
    wait_for(lambda: requests_on_board(tmp_path) == 1)
    first.kill()  # its request stays on the board, its lock goes with it
    first.wait()
    assert requests_on_board(tmp_path) == 1
    holder.release()
    other = PoolSlots(str(tmp_path / "pool"), 1)
    assert other.try_acquire(1.0)  # the dead request ranks first, and does not count
    assert requests_on_board(tmp_path) == 0
    other.close()
    holder.close()


def test_an_idle_slot_goes_to_a_better_claim(tmp_path):
    """A process whose step just ended keeps its slot for another extra step only when no
    other compile has a better claim on it (here: an extra step on a longer path)."""
    mine = PoolSlots(str(tmp_path / "pool"), 3)
    assert mine.try_acquire(0.0) and mine.try_acquire(0.0)
    assert not mine.outranked(10.0)
    waiter = start_waiter(tmp_path, "long", 100.0, extra=1, size=3)  # runs one step, wants two
    wait_for(lambda: requests_on_board(tmp_path) == 1)
    assert mine.outranked(10.0) and not mine.outranked(1000.0)
    mine.close()
    assert waiter.wait(timeout=30) == 0


def test_a_split_step_keeps_its_extra_core_once_the_steps_over_the_pool_have_room(tmp_path):
    """A compile's first step that finds the pool full while extra steps run starts over the
    pool's size, and keeps its mark until it ends.  While the pool stays full, a split step's
    extra core is claimed back; once a slot is free for the step over the pool, it is not
    (``outranked``, the rule for keeping an idle slot, still says so)."""
    pool = str(tmp_path / "pool")
    split = PoolSlots(pool, 3, saturated=lambda: True)
    other = PoolSlots(pool, 3, saturated=lambda: True)
    late = PoolSlots(pool, 3, saturated=lambda: True)
    assert split.try_acquire(50.0) and other.try_acquire(5.0)
    assert split.try_acquire(50.0)  # the split step's extra core: the pool is full
    assert late.try_acquire(1.0) and late.over_pool(1) == "first"
    assert split.claimed(50.0) == "over" and split.outranked(50.0)
    other.release()  # one slot free: room for the step over the pool
    assert not split.claimed(50.0)
    assert split.outranked(50.0)
    for slots in (split, other, late):
        slots.close()


def test_a_refused_request_says_what_the_pool_served_first(tmp_path):
    """``refusal`` (FAST_NVCC_LOG's refused): the requests ranked before it, the free slots it
    found, and the first steps over the pool it leaves a slot to, as the pool's rule counted
    them when it said no."""
    pool = str(tmp_path / "pool")
    split = PoolSlots(pool, 3, saturated=lambda: True)
    other = PoolSlots(pool, 3, saturated=lambda: True)
    late = PoolSlots(pool, 3, saturated=lambda: True)
    assert split.try_acquire(50.0) and split.try_acquire(50.0) and other.try_acquire(5.0)
    assert late.try_acquire(1.0) and late.over_pool(1) == "first"  # the pool full, an extra runs
    assert split.refusal is None and not split.try_acquire(50.0)
    assert split.refusal == (0, 0, 1)
    other.release()  # one slot free: the step over the pool's, not an extra step's
    assert not split.try_acquire(50.0) and split.refusal == (0, 1, 1)
    late.close()
    split.release()  # its extra step ends; two compiles' first steps fill the pool, no extra runs
    third = PoolSlots(pool, 3, saturated=lambda: True)
    assert other.try_acquire(5.0) and third.try_acquire(5.0)
    waiter = start_waiter(tmp_path, "longer", 80.0, size=3)  # so a first step on a longer path waits
    wait_for(lambda: requests_on_board(tmp_path) == 2)  # (and our refused request)
    assert not split.try_acquire(50.0) and split.refusal == (1, 0, 0)
    for slots in (split, other, third):
        slots.close()
    assert waiter.wait(timeout=60) == 0


def test_a_step_over_the_pool_takes_the_first_slot_that_frees(tmp_path):
    """A compile's first step that started over the full pool takes a slot as one frees, ahead
    of a compile that arrives then: it runs anyway, and a slot counted free while it ran put
    three steps on two cores (a long cicc at 0.66 of a core, docs/benchmarks.md)."""
    first, late, newcomer = (PoolSlots(str(tmp_path), 2) for _ in range(3))
    assert first.try_acquire() and first.try_acquire()  # its first step and an extra one
    assert late.try_acquire() and late.over_pool(1) == "first"
    late.settle()
    assert late.over_pool(1) == "first"  # no slot free yet
    first.release()  # the extra step ends
    late.settle()
    assert late.over_pool(1) is None  # the step holds the freed slot
    assert not newcomer.try_acquire()  # two steps on two slots, no extra step: it waits
    late.release()
    assert newcomer.try_acquire()  # the settled slot goes back like any other
    for slots in (first, late, newcomer):
        slots.close()


def test_pool_lives_outside_tmpdir(tmp_path, monkeypatch):
    from fast_nvcc.machine.pool_place import pool_directory

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert not pool_directory({}).startswith(str(tmp_path))
    assert pool_directory({"XDG_RUNTIME_DIR": str(tmp_path)}) == str(tmp_path / "fast_nvcc-slots")


# -- with nvcc -----------------------------------------------------------------------------


def command_intervals(log: Path, *, short: bool = True) -> list[tuple[float, float]]:
    """When each command ran; ``short=False``: not the short steps (fatbinary, as), which run
    without a slot of the pool by design (docs/scheduling.md)."""
    intervals = []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        for step in record.get("steps", []):
            if not short and step.get("over_pool") == "short":
                continue
            if step["command"] and step["start"] is not None and step["end"] is not None:
                intervals.append((record["run_start"] + step["start"], record["run_start"] + step["end"]))
    return intervals


def peak_concurrency(intervals, slack=0.003) -> int:
    events = sorted([(s + slack, 1) for s, e in intervals] + [(e - slack, -1) for s, e in intervals])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def make_sources(sources: Path, count: int) -> list[str]:
    names = []
    for i in range(count):
        name = f"unit{i}.cu"
        shutil.copy(sources / "warning.cu", sources / name)
        names.append(name)
    return names


def fifo_tokens(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


@pytest.fixture
def fifo(tmp_path):
    """A jobserver fifo as make >= 4.4 creates it, kept open as make keeps it."""
    path = tmp_path / "jobserver.fifo"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    yield path, fd
    os.close(fd)


@pytest.mark.nvcc
def test_make_pipe_jobserver_bounds_every_process(nvcc, sources, tmp_path):
    """make 4.3 passes its pipe to '+' recipes; -j3 means three steps at once, machine-wide."""
    units = make_sources(sources, 4)
    fast = " ".join(fast_nvcc_command(nvcc, []))[: -len(" --")]
    (sources / "Makefile").write_text(
        "all: " + " ".join(u.replace(".cu", ".o") for u in units) + "\n"
        "%.o: %.cu\n"
        f"\t+{fast} -- -c $< -o $@ {' '.join(TWO_ARCHS)}\n"
    )
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "FAST_NVCC_LOG": str(log)}
    proc = subprocess.run(["make", "-j3"], cwd=sources, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "jobserver" not in proc.stderr  # make complains when tokens go missing
    assert all((sources / u.replace(".cu", ".o")).exists() for u in units)
    intervals = command_intervals(log)
    assert peak_concurrency(intervals) == 3  # bounded by -j3, and the tokens were used


@pytest.mark.nvcc
def test_fifo_jobserver_bounds_and_returns_tokens(nvcc, sources, tmp_path, fifo):
    path, keeper = fifo
    os.write(keeper, b"+")  # -j3: two processes hold their implicit slot, one token to share
    units = make_sources(sources, 2)
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "MAKEFLAGS": f" -j3 --jobserver-auth=fifo:{path}", "FAST_NVCC_LOG": str(log)}
    procs = [
        subprocess.Popen(fast_nvcc_command(nvcc, ["-c", u, *TWO_ARCHS, "-o", u + ".o"]), cwd=sources, env=env)
        for u in units
    ]
    assert [p.wait() for p in procs] == [0, 0]
    assert peak_concurrency(command_intervals(log)) <= 3
    assert fifo_tokens(keeper) == 1


@pytest.mark.nvcc
def test_fifo_tokens_come_back_after_a_failure(nvcc, sources, tmp_path, fifo):
    path, keeper = fifo
    os.write(keeper, b"+++")
    env = {**os.environ, "MAKEFLAGS": f" -j4 --jobserver-auth=fifo:{path}"}
    args = ["-c", "syntax_error.cu", *TWO_ARCHS]
    plain = subprocess.run([nvcc, *args], cwd=sources, capture_output=True, check=False)
    proc = subprocess.run(fast_nvcc_command(nvcc, args), cwd=sources, env=env, capture_output=True)
    assert proc.returncode == plain.returncode != 0  # nvcc's own code: 11.8's 1, 2 later
    assert fifo_tokens(keeper) == 3


@pytest.mark.nvcc
def test_fifo_tokens_come_back_after_sigterm(nvcc, sources, tmp_path, fifo):
    path, keeper = fifo
    os.write(keeper, b"+++")
    ccbin = tmp_path / "slow"
    ccbin.mkdir()
    for name in ("gcc", "g++"):
        (ccbin / name).write_text(SLOW_GCC)
        (ccbin / name).chmod(0o755)
    env = {**os.environ, "MAKEFLAGS": f" -j4 --jobserver-auth=fifo:{path}"}
    args = ["-c", "kernel.cu", "-Iinclude", "-ccbin", str(ccbin), *TWO_ARCHS,
            "-gencode", "arch=compute_86,code=sm_86", "-gencode", "arch=compute_90,code=sm_90"]  # fmt: skip
    proc = subprocess.Popen(fast_nvcc_command(nvcc, args, ["-j", "4"]), cwd=sources, env=env)
    try:
        deadline = time.monotonic() + 60
        while fifo_tokens(keeper) > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fifo_tokens(keeper) == 0  # it took every token for its parallel steps
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert fifo_tokens(keeper) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.nvcc
def test_machine_pool_bounds_concurrent_processes(nvcc, sources, tmp_path):
    units = make_sources(sources, 5)
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "FAST_NVCC_LOG": str(log), "FAST_NVCC_POOL_SIZE": "2",
           "FAST_NVCC_POOL_DIR": str(tmp_path / "pool")}  # fmt: skip
    procs = [
        subprocess.Popen(fast_nvcc_command(nvcc, ["-c", u, *TWO_ARCHS, "-o", u + ".o"]), cwd=sources, env=env)
        for u in units
    ]
    assert [p.wait() for p in procs] == [0] * len(units)
    # Two slots; a compile's first step may run over the pool only beside another compile's
    # extra step, and a compile over the pool holds no slot and starts no extra step: at most
    # the two slots' commands plus one for each of the four other compiles.  Short steps
    # (fatbinary, as) take no slot by design: a peak of 7 with them once (2026-11-25).
    assert 2 <= peak_concurrency(command_intervals(log, short=False)) <= 2 + len(units) - 1
    for proc in psutil.Process().children(recursive=True):
        assert "fast_nvcc" not in " ".join(proc.cmdline())


# -- whole compiles sharing the pool: real Runners, steps that sleep ----------------------------

COMPILE = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from fast_nvcc.graph.paths import priorities
from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.plan.dryrun import Kind, Step
from fast_nvcc.run.handlers import Internal
from fast_nvcc.run.scheduler import Runner
from fast_nvcc.machine.slots import PoolSlots
seconds, costs, preds = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
if len(sys.argv) > 4:  # start together: when the file is there
    print("ready", flush=True)
    while not os.path.exists(sys.argv[4]):
        time.sleep(0.005)
tasks = []
for i, s in enumerate(seconds):
    step = Step(index=i, text="", kind=Kind.OTHER, tool="sleep", argv=("sleep", str(s)))
    tasks.append(Task(i, step, Action.EXEC, argv=step.argv))
dag = Dag(tuple(tasks), tuple(frozenset(preds.get(str(i), ())) for i in range(len(tasks))))
slots = PoolSlots({pool!r}, {size}, saturated=(lambda: True) if {full} else None)
runner = Runner(dag, env=os.environ, cwd={cwd!r}, workdir={cwd!r}, jobs=len(tasks),
                priorities=priorities(dag, costs), internal=Internal(), slots=slots)
result = runner.run()
slots.close()
print(json.dumps({{"at": result.started_at, "steps": [[r.start, r.end] for r in result.records]}}))
sys.exit(result.returncode)
"""


def run_compiles(tmp_path, compiles, *, size, stagger=0.0, full=False, together=False):
    """Start one process per (seconds, costs[, preds]) compile; each runs its steps as sleeps.
    ``full``: the build tool above runs all the jobs its -j allows (else no tool is found);
    ``together``: the compiles begin at one moment, once every process has started."""
    tmp_path.mkdir(exist_ok=True)
    script = COMPILE.format(root=str(Path(__file__).parent.parent.parent), pool=str(tmp_path / "pool"), size=size,
                            cwd=str(tmp_path), full=full)  # fmt: skip
    go = tmp_path / "go"
    procs = []
    for seconds, costs, *preds in compiles:
        argv = [sys.executable, "-c", script, json.dumps(seconds), json.dumps(costs), json.dumps(preds[0] if preds else {})]
        procs.append(subprocess.Popen([*argv, str(go)] if together else argv, stdout=subprocess.PIPE, text=True))
        time.sleep(stagger)
    if together:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        go.touch()
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        record = json.loads(out)
        results.append([(record["at"] + s, record["at"] + e, record["at"]) for s, e in record["steps"]])
    return results


def test_no_compile_waits_for_its_first_step_while_another_runs_extra_steps(tmp_path):
    """Compiles of three steps each arrive one after another on a pool of two: the first
    ones take extra slots while they are free, and a later one still starts at once."""
    compiles = [([0.6, 0.6, 0.6], [1.0, 1.0, 1.0])] * 4
    results = run_compiles(tmp_path, compiles, size=2, stagger=0.25)
    for p, steps in enumerate(results):
        arrived = steps[0][2]
        first = min(start for start, _, _ in steps)
        for q, others in enumerate(results):
            if q == p:
                continue
            # Moments where q ran two steps at once, inside p's wait (polling every 20 ms, and a loaded CI machine).
            for a in others:
                for b in others:
                    if a < b:
                        lo, hi = max(a[0], b[0], arrived + 0.15), min(a[1], b[1], first - 0.15)
                        assert lo >= hi, f"compile {p} waited while compile {q} ran two steps"


def test_learned_costs_are_no_slower_than_none(tmp_path):
    """One long-pole compile (a short step, then a long one: its critical path) among light
    ones, on a pool of three, scheduled with per-tool guesses (every step alike) and then with
    the true costs.  Knowing the costs may only reorder extra steps towards the longest path:
    the build is not slower (a schedule property, with room for process start-up)."""
    long_pole = ([0.2, 0.4, 0.4, 2.0], {"3": [0]})
    light = ([0.5, 0.5, 0.5], {})
    walls = []
    for learned in (False, True):
        compiles = []
        for seconds, preds in [long_pole, light, light, light]:
            costs = seconds if learned else [1.0] * len(seconds)
            compiles.append((seconds, costs, preds))
        results = run_compiles(tmp_path / str(learned), compiles, size=3)
        starts = [start for steps in results for start, _, _ in steps]
        walls.append(max(end for steps in results for _, end, _ in steps) - min(starts))
    guessed, learned = walls
    assert learned <= guessed * 1.1 + 0.1, walls


def test_started_compiles_ask_by_rank_unless_the_build_tool_holds_compiles_back(tmp_path):
    """A compile that has run nothing asks for its first step (rule 1: r0, before any extra
    step); once it has run one, it asks like an extra step (r1) while the build tool holds no
    compile back, and as before while the tool is full."""
    for full in (False, True):
        pool = PoolSlots(str(tmp_path / f"pool-{full}"), 2, saturated=lambda: full)
        assert not pool.competes() and pool.board.rank_name(5.0, first=pool._first()).startswith("r0-")
        assert pool.try_acquire(5.0)
        pool.release()  # its step ended; the next one is not running yet
        assert pool.competes() is (not full)
        assert pool.board.rank_name(5.0, first=pool._first()).startswith("r1-" if not full else "r0-")
        pool.close()


def test_the_longest_compile_runs_its_steps_side_by_side_once_every_compile_has_started(tmp_path):
    """Pool of two: a long pole (a step, then two long ones that may run side by side) and
    three light chains, all starting at once.  With nothing held back by the build tool, once
    each compile has run a step the long pole's long steps outrank the light ones and run
    together.  (While the tool is full each compile keeps asking as for a first step: the rule
    is checked by rank above; its timing was compared here until a loaded machine let the long
    pole take a second slot first, twice in the suite, 2026-11-25.)"""
    long_pole = ([1.0, 2.0, 2.0], [1.0, 2.0, 2.0], {"1": [0], "2": [0]})
    light = ([0.5] * 4, [0.5] * 4, {"1": [0], "2": [1], "3": [2]})
    results = run_compiles(tmp_path, [long_pole, light, light, light], size=2, full=False, together=True)
    _, a, b = results[0]
    assert min(a[1], b[1]) - max(a[0], b[0]) >= 1.0, results[0]


def test_while_the_build_tool_is_full_the_compiles_nearest_their_end_run_extra_steps(tmp_path, monkeypatch):
    """ninja at its -j starts no compile until one ends: then the DRAIN_COMPILES compiles with
    the least work left may run up to drain_extras steps over a full pool between them, and no
    other compile may; a compile that arrives meanwhile still runs its first step at once.  (Whether
    ninja or make is full is tests/machine/test_buildtool.py's; here the pool is told.)"""
    full = [True]
    pool = str(tmp_path / "pool")
    monkeypatch.setattr(PoolSlots, "NEAREST_RECHECK", 0.0)  # look at every ask, not every 0.1 s
    monkeypatch.setattr(PoolSlots, "DRAIN_COMPILES", 1)  # the nearest one alone, to begin with
    near, far = (PoolSlots(pool, 2, saturated=lambda: full[0]) for _ in range(2))
    near.drain_extras = far.drain_extras = 3  # size // 5 is none for a pool of two
    near.left(5.0)
    far.left(50.0)
    assert near.try_acquire(1.0) and far.try_acquire(100.0)  # the pool is full
    assert not far.try_acquire(100.0)  # a longer path, but far from its end
    assert all(near.try_acquire(1.0) for _ in range(3))
    assert not near.try_acquire(1.0)  # at most drain_extras over the pool
    newcomer = PoolSlots(pool, 2, saturated=lambda: full[0])
    assert newcomer.try_acquire(1.0)  # rule 1 holds: a first step runs over while extras run
    newcomer.close()
    for _ in range(3):
        near.release()
    full[0] = False  # the tool has room for more jobs: it holds nothing back
    assert not near.try_acquire(1.0)
    full[0] = True
    far.left(1.0)  # far's last step: now it is nearest its end
    assert far.try_acquire(100.0) and not near.try_acquire(1.0)
    far.close()
    other = PoolSlots(pool, 2, saturated=lambda: full[0])
    assert other.try_acquire(100.0)  # the pool is full again
    # A dead compile's claim of less work left does not count.
    dying = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); from fast_nvcc.machine.slots import PoolSlots;"
         " p = PoolSlots(%r, 2); p.left(0.1); print('posted', flush=True); time.sleep(60)"
         % (str(Path(__file__).parent.parent.parent), pool)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert dying.stdout.readline().strip() == "posted"
    assert not near.try_acquire(1.0)  # the living one with less left
    dying.kill()
    dying.wait()
    assert near.try_acquire(1.0)
    near.close()
    other.close()
    assert os.listdir(os.path.join(pool, "work")) == []
    # Two nearest compiles may, the third may not; drain_extras bounds them together.
    monkeypatch.setattr(PoolSlots, "DRAIN_COMPILES", 2)
    compiles = [PoolSlots(str(tmp_path / "pool2"), 3, saturated=lambda: True) for _ in range(3)]
    for left, slots in enumerate(compiles):
        slots.drain_extras = 2
        slots.left(float(left))
        assert slots.try_acquire(1.0)  # each one's first step: the pool is full
    first, second, third = compiles
    assert not third.try_acquire(100.0) and first.try_acquire(1.0) and second.try_acquire(1.0)
    assert not first.try_acquire(1.0) and not second.try_acquire(1.0)  # two over the pool in all
    for slots in compiles:
        slots.close()
    # No drain while a compile waits for its first step: that one goes first.
    holder, waiter = (PoolSlots(str(tmp_path / "pool3"), 1, saturated=lambda: True) for _ in range(2))
    holder.drain_extras = 1
    holder.left(1.0)
    assert holder.try_acquire(1.0)
    assert not waiter.try_acquire(1.0)  # the pool is full and no extra step runs: it waits
    assert not holder.try_acquire(1.0)
    waiter.withdraw()
    assert holder.try_acquire(1.0)
    holder.close()
    waiter.close()
    assert [PoolSlots(str(tmp_path / "sizes"), n).drain_extras for n in (2, 4, 5, 16, 64)] == [0, 0, 1, 3, 12]


def test_a_compile_whose_step_overruns_its_estimate_asks_with_a_higher_rank(tmp_path, monkeypatch):
    """A step running far past its estimate (a first build's per-tool guess for a heavy
    source) raises the rank its compile's waiting steps ask the pool with, and the work it
    tells the pool it has left, by the same factor."""
    from fast_nvcc.graph.paths import priorities
    from fast_nvcc.graph.tasks import Action, Dag, Task
    from fast_nvcc.plan.dryrun import Kind, Step
    from fast_nvcc.run.handlers import Internal
    from fast_nvcc.run.ready_queue import ReadyQueue
    from fast_nvcc.run.scheduler import Runner

    class Asking(PoolSlots):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.asked, self.told = [], []

        def try_acquire(self, priority=0.0):
            self.asked.append(priority)
            return super().try_acquire(priority)

        def left(self, seconds):
            self.told.append(seconds)
            super().left(seconds)

    monkeypatch.setattr(ReadyQueue, "OVERRUN_FLOOR", 0.1)
    steps = [Step(index=i, text="", kind=Kind.OTHER, tool="sleep", argv=("sleep", s)) for i, s in enumerate(["1.2", "0"])]
    dag = Dag(tuple(Task(i, s, Action.EXEC, argv=s.argv) for i, s in enumerate(steps)), (frozenset(), frozenset()))
    costs = [0.2, 0.1]  # the long step was expected to take 0.2 s
    # One slot: the long step takes it, the other waits as an extra step until the long one ends.
    slots = Asking(str(tmp_path / "pool"), 1, saturated=lambda: False)
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=2,
                    priorities=priorities(dag, costs), work=costs, internal=Internal(), slots=slots)  # fmt: skip
    assert runner.run().returncode == 0
    slots.close()
    waiting = slots.asked[1:]  # after the long step's own ask
    assert waiting[0] == pytest.approx(0.1, abs=0.03)
    assert max(waiting) > 0.1 * 3  # 1.2 s against 0.2: about six times heavier by the end
    assert slots.told[0] == pytest.approx(0.3) and max(slots.told) > 0.3 * 3
    # Without an overrun nothing changes.
    slots = Asking(str(tmp_path / "pool2"), 1, saturated=lambda: False)
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=2,
                    priorities=priorities(dag, [1.5, 0.1]), work=[1.5, 0.1], internal=Internal(), slots=slots)  # fmt: skip
    assert runner.run().returncode == 0
    slots.close()
    assert slots.asked[1:] and all(p == pytest.approx(0.1) for p in slots.asked[1:])
    assert max(slots.told) == pytest.approx(1.6)


PEER = """
import sys, time
sys.path.insert(0, {root!r})
from fast_nvcc.machine.slots import PoolSlots
pool = PoolSlots({pool!r}, 1)
pool.tell_scale(float(sys.argv[1]))
print("told", flush=True)
time.sleep(60)
"""


def start_peer(pool: Path, scale: float) -> subprocess.Popen:
    """A compile elsewhere on the machine whose long steps ran ``scale`` times their estimates."""
    script = PEER.format(root=str(Path(__file__).parent.parent.parent), pool=str(pool))
    proc = subprocess.Popen([sys.executable, "-c", script, str(scale)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "told"
    return proc


def test_peers_tell_how_far_their_steps_ran_over_and_the_median_counts(tmp_path):
    pool = PoolSlots(str(tmp_path / "pool"), 1)
    assert pool.peer_scale() is None
    pool.tell_scale(50.0)  # its own word is not a peer's
    assert pool.peer_scale() is None
    peers = [start_peer(tmp_path / "pool", scale) for scale in (4.0, 1.0, 2.5)]
    assert pool.peer_scale() == 2.5
    peers[0].kill()  # a dead compile's word no longer counts
    peers[0].wait()
    assert pool.peer_scale() in (1.0, 2.5)
    for proc in peers[1:]:
        proc.kill()
        proc.wait()
    assert pool.peer_scale() is None
    pool.close()


def test_a_compile_that_has_shown_nothing_asks_with_its_peers_scale(tmp_path, monkeypatch):
    """While none of its long steps has started, a compile ranks its waiting steps by the
    median of how far its peers' long steps ran over (a first build: every estimate a guess);
    once one has started, by its own.  Made-up costs on one slot: a 0.6 s step guessed at 3 s
    runs, and a step guessed at 1 s waits behind it."""
    from fast_nvcc.graph.paths import priorities
    from fast_nvcc.graph.tasks import Action, Dag, Task
    from fast_nvcc.plan.dryrun import Kind, Step
    from fast_nvcc.run.handlers import Internal
    from fast_nvcc.run.ready_queue import ReadyQueue
    from fast_nvcc.run.scheduler import Runner

    class Asking(PoolSlots):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.asked = []

        def try_acquire(self, priority=0.0):
            self.asked.append(priority)
            return super().try_acquire(priority)

    steps = [Step(index=i, text="", kind=Kind.OTHER, tool="sleep", argv=("sleep", s)) for i, s in enumerate(["0.6", "0"])]
    dag = Dag(tuple(Task(i, s, Action.EXEC, argv=s.argv) for i, s in enumerate(steps)), (frozenset(), frozenset()))
    costs = [3.0, 1.0]
    asked = {}
    # floor 5 s: no step is long enough to show anything; floor 2 s: the running one shows
    for floor, told in ((5.0, None), (5.0, 4.0), (2.0, 4.0)):
        monkeypatch.setattr(ReadyQueue, "OVERRUN_FLOOR", floor)
        pool = tmp_path / f"pool-{floor}-{told}"
        peer = start_peer(pool, told) if told else None
        slots = Asking(str(pool), 1, saturated=lambda: False)
        runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=2,
                        priorities=priorities(dag, costs), work=costs, internal=Internal(), slots=slots)  # fmt: skip
        assert runner.run().returncode == 0
        slots.close()
        if peer is not None:
            peer.kill()
            peer.wait()
        asked[floor, told] = max(slots.asked[1:])  # the waiting step's asks
    assert asked[5.0, None] == pytest.approx(1.0)
    assert asked[5.0, 4.0] == pytest.approx(4.0)  # its guess times its peers' 4
    assert asked[2.0, 4.0] == pytest.approx(1.0)  # its own long step ran within its guess


def test_the_log_says_which_steps_ran_over_the_pool_and_why(tmp_path):
    """FAST_NVCC_LOG's over_pool, from a real Runner on a real pool: a step started by rule 3
    (drain) and one started by rule 1 (a first step while another compile drains)."""
    from fast_nvcc.graph.paths import priorities
    from fast_nvcc.graph.tasks import Action, Dag, Task
    from fast_nvcc.plan.dryrun import Kind, Step
    from fast_nvcc.run.handlers import Internal
    from fast_nvcc.run.scheduler import Runner

    def runner(slots, seconds):
        steps = [Step(index=i, text="", kind=Kind.OTHER, tool="sleep", argv=("sleep", s)) for i, s in enumerate(seconds)]
        dag = Dag(tuple(Task(i, s, Action.EXEC, argv=s.argv) for i, s in enumerate(steps)), (frozenset(),) * len(steps))
        costs = [0.5] * len(steps)
        return Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=len(steps),
                      priorities=priorities(dag, costs), work=costs, internal=Internal(), slots=slots)  # fmt: skip

    pool = str(tmp_path / "pool")
    slots = PoolSlots(pool, 1, saturated=lambda: True)
    slots.drain_extras = 1
    records = runner(slots, ["0.3", "0.3"]).run().records
    slots.close()
    assert sorted(r.over_pool or "" for r in records) == ["", "drain"]
    # Another compile holds the pool's one slot and drains: a newcomer's first step runs over.
    other = PoolSlots(pool, 1, saturated=lambda: True)
    other.drain_extras = 1
    other.left(0.1)
    assert other.try_acquire(1.0) and other.try_acquire(1.0)  # its slot, then a drain
    newcomer = PoolSlots(pool, 1, saturated=lambda: False)
    records = runner(newcomer, ["0.2"]).run().records
    newcomer.close()
    other.close()
    assert [r.over_pool for r in records] == ["first"]


def test_a_split_steps_ask_and_the_lowest_slack_of_another_compile_are_on_the_pool(tmp_path):
    """The two boards of yielding.py: the best rank a split step waits for a core at (its own
    compile's too), and the lowest rank another compile could give a core from (not its own);
    a compile that tells nothing, or has ended, counts for nothing."""
    from fast_nvcc.machine.pool_files import Told

    pool = PoolSlots(str(tmp_path / "pool"), 2)
    assert pool.yield_to() == (None, None)
    pool.tell_slack(5.0)  # its own slack is not another's
    pool.ask_core(80.0)  # a split step no running step stops for (a ptxas: yielding.STOPS_FOR)
    assert pool.yield_to() == (None, None)
    pool.ask_core(80.0, stop=80.0)
    assert pool.yield_to() == (80.0, None)
    other_ask = Told(str(tmp_path / "pool" / "asks"), "a-", owner=os.getpid() + 1)
    other_stop = Told(str(tmp_path / "pool" / "asks"), "s-", owner=os.getpid() + 1)
    other_slack = Told(str(tmp_path / "pool" / "slack"), "k-", owner=os.getpid() + 1)
    other_ask.tell(120.0)
    other_stop.tell(120.0)
    other_slack.tell(30.0)
    assert pool.yield_to() == (120.0, 30.0)
    # An extra step leaves the free slot to a split step that asks above it, as to a waiter.
    assert pool.try_acquire(0.0)  # this compile's first step: one slot left
    assert not pool.try_acquire(100.0)
    assert pool.try_acquire(130.0)
    pool.release()
    other_ask.tell(None)  # it got its core
    other_stop.tell(None)
    assert pool.yield_to() == (80.0, 30.0)
    assert not pool.try_acquire(50.0)  # its own compile's split step asks above it too
    # ... but its split step's core, asked at 75 s since its rank fell as it ran, is not kept
    # from it by its own last ask at 80 s (a split step's ask of another compile still is).
    assert pool.try_acquire(75.0, pole=True)
    pool.release()
    other_ask.tell(90.0)
    assert not pool.try_acquire(75.0, pole=True)
    other_ask.tell(None)
    assert pool.try_acquire(90.0)
    pool.release_all()
    pool.ask_core(None)
    assert pool.yield_to() == (None, None)  # no ask: the slack is not even read
    pool.close()
    other_slack.close()
    assert not os.listdir(tmp_path / "pool" / "asks") and not os.listdir(tmp_path / "pool" / "slack")


def test_a_split_step_waiting_on_the_board_and_asking_counts_once(tmp_path):
    """A split step refused a core waits on the board and posts its ask: an extra step of
    another compile counted it twice, and with two slots free left both to it (one idled until
    the next look).  Counted once, the extra step takes the second free slot."""
    from fast_nvcc.machine.pool_files import Claim, RequestBoard, Told

    pool = PoolSlots(str(tmp_path / "pool"), 3)
    assert pool.try_acquire(0.0)  # this compile's first step: two slots left
    other = os.getpid() + 1
    board = RequestBoard(str(tmp_path / "pool" / "requests"))
    name = board.rank_name(90.1237, first=False).rsplit("-", 1)[0] + f"-{other}"
    waiter = Claim.make(str(tmp_path / "pool" / "requests" / name))  # the other compile's split step
    ask = Told(str(tmp_path / "pool" / "asks"), "a-", owner=other)
    ask.tell(90.1237)  # not a whole millisecond: both names keep 90.123
    assert pool.try_acquire(50.0)  # one ahead (the split step) of two free
    assert not pool.try_acquire(50.0)  # one ahead of the one free
    pool.release()
    # Waiting on the board for another step (at 60 s) while its split step asks: two ahead.
    waiter = waiter.renamed(str(tmp_path / "pool" / "requests" / (board.rank_name(60.0, first=False).rsplit("-", 1)[0] + f"-{other}")))
    assert not pool.try_acquire(50.0)
    waiter.drop()  # an ask alone (its compile not on the board): still one ahead
    assert pool.try_acquire(50.0) and not pool.try_acquire(50.0)
    ask.tell(None)
    assert pool.try_acquire(50.0)  # nobody ahead: the last slot
    pool.release_all()
    ask.close()
    pool.close()


def test_slots_given_back_together_wake_the_waiters_once(tmp_path):
    """A split step's end gives back its cores at once (Admission.release_idle): the waiters of
    the board are woken once, to see every slot freed, not once per slot (16 rounds of SIGURG to
    every waiter, each a look at the pool, when a 16-core split step ended)."""
    from fast_nvcc.machine.pool_files import Claim, RequestBoard

    pool = PoolSlots(str(tmp_path / "pool"), 4)
    assert all(pool.try_acquire(10.0) for _ in range(3))
    board = RequestBoard(str(tmp_path / "pool" / "requests"))
    name = board.rank_name(5.0, first=False).rsplit("-", 1)[0] + f"-{os.getpid() + 1}"
    waiter = Claim.make(str(tmp_path / "pool" / "requests" / name))  # another compile waits
    pool.release(3)
    assert pool.held == 0 and pool.board.wakes == 1
    assert len(pool.locks.lock_free(4, skip=())) == 4  # all four free again
    pool.release(1)  # none held: nothing to give back, nobody woken
    assert pool.board.wakes == 1
    waiter.drop()
    pool.close()
