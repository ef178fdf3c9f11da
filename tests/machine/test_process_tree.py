"""fast_nvcc.machine.process_tree: a process's children from its own /proc files, as psutil
finds them by reading every process of the machine; its parent, name and command line as
psutil reads them; a zombie is not running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from fast_nvcc.machine.process_tree import (
    children,
    children_files,
    command_line,
    identity,
    running,
)


def test_children_are_psutils_and_a_zombie_is_not_running():
    # A parent with two sleeping children and one that exits unreaped (a zombie until it ends).
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "kids = [subprocess.Popen(['sleep', '30']) for _ in range(2)]\n"
        "dead = subprocess.Popen(['true'])\n"
        "print(' '.join(str(k.pid) for k in kids), dead.pid, flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        *sleepers, dead = (int(p) for p in parent.stdout.readline().split())
        deadline = time.monotonic() + 10
        while running(dead) and time.monotonic() < deadline:
            time.sleep(0.02)
        found = children(parent.pid)
        assert sorted(found) == sorted(c.pid for c in psutil.Process(parent.pid).children())
        assert sorted(found) == sorted([*sleepers, dead])
        assert [running(pid) for pid in (*sleepers, dead)] == [True, True, False]
        assert children_files()  # else children() was psutil's, and this compared it with itself
    finally:
        parent.stdin.close()
        for pid in sleepers:
            os.kill(pid, 9)
        parent.wait()
    assert children(parent.pid) is None and not running(parent.pid)


def test_a_trees_rss_is_read_from_its_own_processes_as_psutil_reads_it():
    """fast_nvcc.machine.memory_observation: while memory is tight, what each compile's steps
    hold is their trees' RSS, walked from the trees' roots (not the machine's every process)."""
    from fast_nvcc.machine.memory_observation import ProcessTable

    tree = subprocess.Popen(["sh", "-c", "sleep 30 & (sleep 30 & wait) & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(tree.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        processes = [psutil.Process(tree.pid), *psutil.Process(tree.pid).children(recursive=True)]
        assert len(processes) == 4  # sh, sleep, sh, sleep
        table = ProcessTable.read([tree.pid, 999_999_999])  # and a root that is gone
        assert table.tree(tree.pid, itself=True) == sum(p.memory_info().rss for p in processes)
        assert table.tree(tree.pid, itself=False) == sum(p.memory_info().rss for p in processes[1:])
        assert set(table.rss) == {p.pid for p in processes} | {999_999_999}
        assert table.rss[999_999_999] == 0
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()


def test_a_processs_name_parent_and_command_line_are_psutils(tmp_path):
    """buildtool.find_build_tool walks a compile's ancestors by these; a name with spaces and
    parentheses (the kernel writes it in parentheses in /proc/PID/stat) reads whole."""
    odd = tmp_path / "a (b) c"  # a script: the kernel names its process after the file
    odd.write_text("#!/bin/sh\nsleep \"$1\"\n")
    odd.chmod(0o755)
    child = subprocess.Popen([str(odd), "30"])
    try:
        deadline = time.monotonic() + 10
        expected = ["/bin/sh", str(odd), "30"]  # (while it execs, its name may be there and its arguments not)
        while command_line(child.pid) != expected and time.monotonic() < deadline:
            time.sleep(0.02)
        process = psutil.Process(child.pid)
        assert (identity(child.pid), command_line(child.pid)) == ((process.name(), os.getpid()), process.cmdline())
        assert command_line(child.pid) == expected and identity(os.getpid())[1] == os.getppid()
    finally:
        child.kill()
        child.wait()
    assert (identity(child.pid), command_line(child.pid)) == (None, None)
