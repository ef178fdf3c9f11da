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

from fast_nvcc.slots import JobserverSlots, PoolSlots, jobserver_from_makeflags, slots_from_environment

from helpers import fast_nvcc_command

TWO_ARCHS = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]
SLOW_GCC = """#!/bin/sh
case "$*" in
  *-D__CUDA_ARCH__=*-E*) sleep 60 ;;
esac
exec /usr/bin/gcc "$@"
"""


# -- units ---------------------------------------------------------------------------------


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
    first, second = PoolSlots(str(tmp_path), 2), PoolSlots(str(tmp_path), 2)
    assert first.implicit == 0
    assert first.try_acquire() and first.try_acquire() and not second.try_acquire()
    first.release()
    assert second.try_acquire() and not first.try_acquire()
    first.close()
    second.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); from fast_nvcc.slots import PoolSlots;"
         " p = PoolSlots(%r, 2); p.try_acquire(); p.try_acquire(); print('held', flush=True); time.sleep(60)"
         % (str(Path(__file__).parent.parent), str(tmp_path))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    third = PoolSlots(str(tmp_path), 2)
    assert not third.try_acquire()
    holder.kill()  # no chance to clean up
    holder.wait()
    assert third.try_acquire() and third.try_acquire()  # no slot lost
    third.close()


def test_environment_picks_the_pool_without_a_jobserver(tmp_path):
    slots = slots_from_environment({"FAST_NVCC_POOL_DIR": str(tmp_path), "FAST_NVCC_POOL_SIZE": "3"}, pool_size=8)
    assert isinstance(slots, PoolSlots) and slots.size == 3
    slots.close()


# -- with nvcc -----------------------------------------------------------------------------


def command_intervals(log: Path) -> list[tuple[float, float]]:
    intervals = []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        for step in record.get("steps", []):
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
    proc = subprocess.run(fast_nvcc_command(nvcc, args), cwd=sources, env=env, capture_output=True)
    assert proc.returncode == 2
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
    assert peak_concurrency(command_intervals(log)) == 2
    for proc in psutil.Process().children(recursive=True):
        assert "fast_nvcc" not in " ".join(proc.cmdline())
