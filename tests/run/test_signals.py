"""Interrupting fast_nvcc: no stray processes, no temp files, no half-written outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from helpers import fast_nvcc_command

pytestmark = [pytest.mark.nvcc, pytest.mark.one_toolchain]  # fast_nvcc's own decisions (conftest)

SLOW_COMPILER = """#!/bin/sh
# The real gcc, after a long pause in the steps fast_nvcc runs in parallel.
case "$*" in
  *-D__CUDA_ARCH__=*-E*) sleep 60 ;;
esac
exec /usr/bin/gcc "$@"
"""


def slow_ccbin(tmp_path: Path) -> Path:
    directory = tmp_path / "slow-ccbin"
    directory.mkdir()
    for name in ("gcc", "g++"):
        path = directory / name
        path.write_text(SLOW_COMPILER)
        path.chmod(0o755)
    return directory


def descendants(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def sleeping(procs: list[psutil.Process]) -> int:
    count = 0
    for proc in procs:
        try:
            count += proc.name() == "sleep"
        except psutil.NoSuchProcess:
            pass  # a short-lived step came and went
    return count


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_interrupt_cleans_up(nvcc, sources, tmp_path, signum):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    args = [
        "-c", "kernel.cu", "-Iinclude", "-ccbin", str(slow_ccbin(tmp_path)), "-MD",
        "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
    ]  # fmt: skip
    proc = subprocess.Popen(
        fast_nvcc_command(nvcc, args, ["-j", "4"]),
        cwd=sources,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    seen: list[psutil.Process] = []
    while time.monotonic() < deadline:
        seen = descendants(parent)
        if sleeping(seen) >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the slow steps never started")
    proc.send_signal(signum)
    proc.communicate(timeout=30)
    assert proc.returncode == -signum  # it dies of the signal, as nvcc would
    gone, alive = psutil.wait_procs(seen, timeout=5)
    assert not alive, f"stray processes: {alive}"
    assert list(tmpdir.iterdir()) == []
    assert not (sources / "kernel.o").exists()
