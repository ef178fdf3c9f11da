"""What a compile keeps in the temp directory, and removing what dead compiles left there.

A compile that is SIGKILLed (the OOM killer, a CI time-out) cannot clean up: its work directory
(``fast_nvcc-XXXXXXXX``) and the temp files of nvcc's plan (``tmpxft_<pid>_...``) stay behind.
So each work directory holds an owner file that its compile keeps an ``flock`` on for its whole
life; the kernel drops the lock when the process dies, however it dies.  Before making its own,
each compile removes the work directories nobody holds, with the temp files their owner file
names.  Nothing else is touched: a directory without an owner file (another program's, or a
compile killed in the instant between making its directory and locking it) stays, and so do a
dead compile's temp files while a live process has the pid in their name (the pid was reused:
they may be that process's, a plain nvcc's).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import NamedTuple

from ..machine.process_tree import running

PREFIX = "fast_nvcc-"
OWNER = ".owner"
_PID_DIGITS = slice(len("tmpxft_"), len("tmpxft_00000000"))


class Workdir(NamedTuple):
    """A compile's private directory; ``lock_fd`` holds the owner file's flock."""

    path: str
    lock_fd: int

    def release(self) -> None:
        """After the directory is gone: drop the lock."""
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def make_workdir(temp_tag: str, temp_dirs: Iterable[str], directory: str | None = None) -> Workdir:
    """A new work directory in ``directory`` (the temp directory), locked, naming the plan's temp
    files (``temp_tag``, the ``tmpxft_<pid>_<n>`` of this compile, in ``temp_dirs``) for whoever
    cleans up after it."""
    path = tempfile.mkdtemp(prefix=PREFIX, dir=directory)
    # Locked and written under a name no cleaner opens, then shown: a cleaner that could open
    # the owner file before its lock would take the compile for dead and remove its directory
    # (docs/benchmarks.md: the work directory's owner file).
    unseen = os.path.join(path, OWNER + ".new")
    fd = os.open(unseen, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    text = "".join(f"{line}\n" for line in (temp_tag, *sorted(set(temp_dirs))))
    os.write(fd, text.encode("utf-8", "surrogateescape"))
    os.rename(unseen, os.path.join(path, OWNER))
    return Workdir(path, fd)


def remove_dead(directory: str | None = None) -> None:
    """Remove what dead compiles left in ``directory`` (the temp directory)."""
    directory = directory or tempfile.gettempdir()
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(PREFIX)]
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                remove_if_dead(entry.path)


def remove_if_dead(workdir: str) -> bool:
    """Remove ``workdir`` and its temp files if its owner is gone; True when removed."""
    try:
        fd = os.open(os.path.join(workdir, OWNER), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False  # not ours, or its owner is just making it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # a live compile (or another process cleaning it up right now)
            raise
        with open(fd, "rb", closefd=False) as handle:
            lines = handle.read().decode("utf-8", "surrogateescape").splitlines()
        tag, dirs = (lines[0], lines[1:]) if lines else ("", [])
        if tag:
            if running(int(tag[_PID_DIGITS], 16)):  # (a zombie has given up everything already)
                return False  # its pid lives again: its temp files may be another's now
            pattern = glob.escape(tag[: _PID_DIGITS.stop]) + "_*"
            for path in (p for d in dirs for p in glob.glob(os.path.join(glob.escape(d), pattern))):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                    os.remove(path)
        shutil.rmtree(workdir, ignore_errors=True)
        return True
    finally:
        os.close(fd)

