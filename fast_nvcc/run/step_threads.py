"""What a running step's threads do, and where they run: the threads of its process tree that
run or wait for a core (a split step's grant follows them, :mod:`.core_grants`), and the CPUs
they are held to.  Read from ``/proc`` ten times a second for each split step, so the walk reads
the tree's own files."""

from __future__ import annotations

import contextlib
import os

from ..machine.process_tree import children_files, state


def runnable_threads(pid: int) -> int | None:
    """How many threads of the process tree ``pid`` leads run or wait for a core now (state R);
    None when it has ended."""
    threads = _tree_threads(pid)
    if threads is None:
        return None
    return sum(1 for process, tid in threads if state(f"/proc/{process}/task/{tid}/stat") == b"R")


def hold(pid: int, cpus: frozenset[int]) -> None:
    """Hold every thread of the process tree ``pid`` leads to ``cpus``.  Threads made while
    this runs keep the affinity of the thread that made them: the caller holds again a moment
    later."""
    for _, tid in _tree_threads(pid) or ():
        with contextlib.suppress(OSError, ValueError):
            if os.sched_getaffinity(int(tid)) != cpus:
                os.sched_setaffinity(int(tid), cpus)


def _tree_threads(pid: int) -> list[tuple[int, str]] | None:
    """(process, thread id) of every thread of the process tree ``pid`` leads; None when it has
    ended.  Each thread's ``children`` file names the processes it forked, so the walk reads the
    tree's own files, not every process of the machine as psutil's children() does (this runs
    for each split step ten times a second); psutil where the kernel has no such files."""
    if not children_files():
        return _tree_threads_psutil(pid)
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        process = todo.pop()
        try:
            threads = os.listdir(f"/proc/{process}/task")
        except OSError:
            if process == pid:
                return None
            continue
        for tid in threads:
            found.append((process, tid))
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{process}/task/{tid}/children", "rb") as handle:
                    todo += [int(child) for child in handle.read().split()]
    return found


def _tree_threads_psutil(pid: int) -> list[tuple[int, str]] | None:
    import psutil

    try:
        leader = psutil.Process(pid)
        processes = [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return None
    found = []
    for process in processes:
        try:
            found += [(process.pid, tid) for tid in os.listdir(f"/proc/{process.pid}/task")]
        except OSError:
            continue
    return found
