"""Makes every process a compile starts die with it, however it dies.

Each step leads its own process group (the scheduler kills a step's whole tree through it), so
neither a kill of fast_nvcc alone (SIGKILL from the OOM killer or a CI time-out) nor a kill of
the build's process group reaches the steps.  Two things make them die anyway:

* every direct child gets ``PR_SET_PDEATHSIG`` = SIGKILL before it execs (:func:`die_with_parent`).
  The kernel sends it when the *thread* that forked the child ends: each step is forked by the
  thread that waits for it, which outlives it;
* the children of the steps (gcc's cc1plus and as, the tools under ``sh -c``) are reached by a
  watchdog: a small process in a session of its own, so a kill of the build's group spares it,
  that reads the steps' process groups from a pipe only fast_nvcc holds.  When the pipe ends
  without a goodbye, fast_nvcc is dead: the watchdog SIGKILLs the groups, waits for them to go,
  and removes what the compile left in the temp directory (:mod:`.leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1
_GOODBYE = b"done"

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: die when ``parent`` (its forking thread) does."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


class Watchdog:
    """fast_nvcc's end of the pipe to its watchdog process."""

    def __init__(self, workdir: str) -> None:
        read_fd, self._fd = os.pipe()
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "fast_nvcc.watchdog", workdir],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path}, start_new_session=True,
            )  # fmt: skip
        except OSError:
            self._proc = None  # the steps still die with fast_nvcc (PDEATHSIG), only theirs may not
        finally:
            os.close(read_fd)

    def watch(self, pgid: int) -> None:
        self._send(b"+%d\n" % pgid)

    def forget(self, pgid: int) -> None:
        self._send(b"-%d\n" % pgid)

    def close(self) -> None:
        """fast_nvcc ends in order: the watchdog leaves without doing anything."""
        self._send(_GOODBYE + b"\n")
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self._proc is not None:
            self._proc.wait()

    def _send(self, line: bytes) -> None:
        # Lines are far shorter than PIPE_BUF, so writes from several threads do not interleave.
        with contextlib.suppress(OSError):
            os.write(self._fd, line)


def watch(workdir: str) -> None:
    """The watchdog process: follow the groups fast_nvcc reports until the pipe ends."""
    groups: set[int] = set()
    ended_in_order = False
    with os.fdopen(0, "rb") as pipe:
        for line in pipe:
            line = line.strip()
            if line == _GOODBYE:
                ended_in_order = True
            elif line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
    if ended_in_order:
        return
    _kill_groups(groups)
    from .leftovers import remove_if_dead

    remove_if_dead(workdir)


def _kill_groups(groups: set[int]) -> None:
    from .scheduler import wait_for_group

    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    # Their members are reaped by init, which may be slow (containers): wait for them to go
    # before the temp files they wrote are removed.
    for pgid in groups:
        wait_for_group(pgid)


if __name__ == "__main__":
    watch(sys.argv[1])
