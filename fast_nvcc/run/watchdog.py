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

import os
import sys

# The watchdog process starts with every compile, so it starts lean: no site (-S), fast_nvcc's
# own sys.path, and nothing imported at the top of this module beyond os and sys.
_BOOT = (
    "import sys; sys.path[:0] = sys.argv[1].split('\\n'); "
    "from fast_nvcc.run.watchdog import watch; watch(sys.argv[2])"
)
_GOODBYE = b"done"
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9  # signal.SIGKILL, on every Linux
_prctl = None  # libc's prctl, loaded by the first Watchdog (in the parent: never after a fork)


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: die when ``parent`` (its forking thread) does."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), _SIGKILL)


def _load_prctl() -> None:
    global _prctl
    if _prctl is None:
        import ctypes

        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # not Linux: the watchdog alone
            pass


class Watchdog:
    """fast_nvcc's end of the pipe to its watchdog process."""

    def __init__(self, workdir: str) -> None:
        import subprocess

        _load_prctl()
        read_fd, self._fd = os.pipe()
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-S", "-E", "-c", _BOOT, "\n".join(sys.path), workdir],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
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
        try:
            os.close(self._fd)
        except OSError:
            pass
        if self._proc is not None:
            self._proc.wait()

    def _send(self, line: bytes) -> None:
        # Lines are far shorter than PIPE_BUF, so writes from several threads do not interleave.
        try:
            os.write(self._fd, line)
        except OSError:
            pass  # the watchdog is gone: the steps still die with fast_nvcc (PDEATHSIG)


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
    from .process_groups import wait_for_group  # here: the watchdog starts lean (see _BOOT)

    for pgid in groups:
        try:
            os.killpg(pgid, _SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Their members are reaped by init, which may be slow (containers): wait for them to go
    # before the temp files they wrote are removed.
    for pgid in groups:
        wait_for_group(pgid)

