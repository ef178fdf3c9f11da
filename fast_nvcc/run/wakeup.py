"""What a run's loop sleeps on: its own steps' ends, and a slot another compile frees.

A compile that waits for a shared slot could only poll the pool's files: a look costs about a
millisecond (the board, a lock per live request, the dispatch), and at a look every 80 ms a
compile that waited most of its life spent 5.0-5.4 s of cpu on it (CUTLASS light + heavy on 2
cores, 2026-11-28: 21 s of fast_nvcc's own in a 190 s build, cpu the steps lacked).  So a
compile that gives a slot back wakes the waiters of the board (SIGURG, which every other
process ignores by default: :meth:`fast_nvcc.machine.pool_files.RequestBoard.wake`), and a
waiting loop sleeps on a pipe that the signal (``signal.set_wakeup_fd``) and its own steps'
ends both write to.  It still looks now and then (the backoff's longest wait), for what no one
signals: a waiter ahead that gave up, a compile killed with its slot.

Signals reach the main thread only: a run on another thread (tests) sleeps on its steps' ends
and the timeout, as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading

WAKE_SIGNAL = signal.SIGURG


def _ignore(signum, frame) -> None:  # a Python handler, so that the signal writes the fd
    return None


class Wakeup:
    """A run's pipe to sleep on, from :meth:`start` to :meth:`close`; started with ``signals``
    (on the main thread), another compile's SIGURG writes to it too."""

    def __init__(self) -> None:
        self._read = self._write = -1
        self.signals = False  # whether another compile's SIGURG wakes it
        self._previous: tuple[int, object] | None = None

    def start(self, *, signals: bool) -> bool:
        """Open the pipe; True where SIGURG wakes it too (not off the main thread)."""
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        if not signals or threading.current_thread() is not threading.main_thread():
            return False
        try:
            fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            return False
        self._previous = (fd, signal.signal(WAKE_SIGNAL, _ignore))
        self.signals = True
        return True

    def poke(self) -> None:
        """Wake the loop now (a step of ours ended); from any thread."""
        with contextlib.suppress(OSError):  # full: it will wake anyway; closed: nothing waits
            os.write(self._write, b"\0")

    def wait(self, timeout: float) -> bool:
        """Sleep until poked, signalled, or ``timeout`` seconds; True: something woke it."""
        with contextlib.suppress(InterruptedError):
            select.select([self._read], [], [], timeout)
        woke = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(self._read, 512):
                woke += chunk
        return bool(woke)

    def close(self) -> None:
        """Put the signal's handling back, and close the pipe (more than once is harmless)."""
        if self._previous is not None:
            fd, handler = self._previous
            self._previous, self.signals = None, False
            if signal.getsignal(WAKE_SIGNAL) is _ignore:
                signal.signal(WAKE_SIGNAL, handler)
            signal.set_wakeup_fd(fd)
        for fd in (self._read, self._write):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read = self._write = -1
