"""Stopping a step's processes: each step leads a process group (``setpgid(0, 0)`` in the
child), and a kill reaches the group and every descendant that left it.

Lean on purpose: the watchdog process (:mod:`.watchdog`) imports it when fast_nvcc has died,
so it imports nothing of fast_nvcc and psutil only where it is needed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

KILL_GRACE_SECONDS = 2.0


def kill_trees(pids: Sequence[int]) -> None:
    """SIGTERM each step's process group and its descendants, then SIGKILL what is left
    after a grace.

    Each pid leads a process group of its own; the group catches a child forked
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
    _send(pids, procs, signal.SIGCONT)  # a step stopped for memory (fast_nvcc.machine.pressure) must see it
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
