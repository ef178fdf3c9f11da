"""A process's children, parent, name and command line, read from its own files under /proc.

psutil's ``Process.children()`` finds them by reading every process of the machine (each one's
parent): about 12 µs a process, so 0.8 ms on this 2-core machine with 66 processes and several
milliseconds on a 16-core build machine with hundreds, and each compile asks for the build
tool's children twice a second (:mod:`.buildtool`).  Linux lists each thread's children in
``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN): a few reads, whatever the machine runs.
psutil where the kernel has no such files.  A compile's way to its build tool (its ancestors'
names and command lines) and a work directory's owner (alive?) are read here too: importing
psutil for them was 9-16 ms of every compile's 0.14 s of own cpu (docs/benchmarks.md,
2026-12-01)."""

from __future__ import annotations

import contextlib
import functools
import os
import threading


@functools.cache
def children_files() -> bool:
    """Does this kernel have /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)?"""
    return os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")


def children(pid: int) -> list[int] | None:
    """The processes ``pid`` forked that have not been reaped (zombies too); None when ``pid``
    itself is gone."""
    if not children_files():
        import psutil

        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return None
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: list[int] = []
    for tid in threads:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
            found += [int(child) for child in handle.read().split()]
    return found


def identity(pid: int) -> tuple[str, int] | None:
    """The command name of ``pid`` (the kernel keeps 15 characters of it) and its parent (0:
    none), from one read of its stat file; None when it is gone."""
    fields = _stat(pid)
    return None if fields is None else (fields[0], int(fields[1].split()[1]))


def command_line(pid: int) -> list[str] | None:
    """The arguments ``pid`` runs with; None when it is gone (or a zombie, which has none)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return None
    return [os.fsdecode(word) for word in words[:-1]] or None


def _stat(pid: int) -> tuple[str, str] | None:
    """``/proc/PID/stat`` as (the command name, what follows it); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The name is in parentheses and may hold spaces and parentheses itself.
    return os.fsdecode(stat[stat.find(b"(") + 1 : stat.rfind(b")")]), os.fsdecode(stat[stat.rfind(b")") + 1 :])


def running(pid: int) -> bool:
    """Is ``pid`` a live process, not a zombie its parent has yet to reap?"""
    return state(f"/proc/{pid}/stat") not in (b"Z", b"X", b"")


def state(stat_path: str) -> bytes:
    """The state letter of a process or thread (``/proc/PID/stat``, ``/proc/PID/task/TID/stat``):
    R running or waiting for a core, S, D, Z, ...; b"" where it is gone."""
    try:
        with open(stat_path, "rb") as handle:
            stat = handle.read()
    except OSError:
        return b""
    # The state follows the command name, which may hold spaces and parentheses.
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
