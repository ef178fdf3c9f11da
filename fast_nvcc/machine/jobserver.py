"""fast_nvcc as a GNU make jobserver client, inside ``make -jN``: it owns one implicit slot (make
started it) and reads one token from the jobserver for each further step it runs at once, giving
each back as soon as it is idle.  Both forms make uses are understood:

* ``--jobserver-auth=fifo:PATH`` (make >= 4.4): a named pipe anyone can open;
* ``--jobserver-auth=R,W`` (make 4.3, and ``--jobserver-fds=R,W`` before it): two inherited pipe
  descriptors, present only for recipes make treats as recursive (a ``+`` prefix or ``$(MAKE)``).
"""

from __future__ import annotations

import os
import re
import stat
import time

from .slots import Slots

_AUTH = re.compile(r"--jobserver-(?:auth|fds)=(\S+)")


class JobserverSlots(Slots):
    """A GNU make jobserver client.  make hands out tokens first come, first served; the
    priorities apply among the steps of this process (the scheduler's ready queue)."""

    implicit = 1

    def __init__(self, read_fd: int, write_fd: int, *, own_fds: tuple[int, ...], description: str) -> None:
        super().__init__()
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.own_fds = own_fds  # the descriptors this client opened itself
        self.description = description
        self.tokens: list[bytes] = []

    def try_acquire(self, priority: float = 0.0, *, pole: bool = False) -> bool:
        try:
            token = os.read(self.read_fd, 1)
        except BlockingIOError:
            return False
        except OSError:
            return False
        if not token:
            return False
        self.tokens.append(token)
        self.held += 1
        return True

    def _give_back(self) -> None:
        if not self.tokens:
            return
        token = self.tokens.pop()
        self.held -= 1
        while True:
            try:
                os.write(self.write_fd, token)
                return
            except InterruptedError:
                continue
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                return  # make is gone: nobody to give it back to

    def close(self) -> None:
        self.release_all()
        for fd in self.own_fds:
            try:
                os.close(fd)
            except OSError:
                pass


def jobserver_from_makeflags(makeflags: str) -> JobserverSlots | None:
    matches = _AUTH.findall(makeflags)
    if not matches:
        return None
    auth = matches[-1]  # make puts the innermost jobserver last
    if auth.startswith("fifo:"):
        path = auth[len("fifo:") :]
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return JobserverSlots(fd, fd, own_fds=(fd,), description=f"make jobserver fifo {path}")
    read_text, _, write_text = auth.partition(",")
    if not (read_text.lstrip("-").isdigit() and write_text.lstrip("-").isdigit()):
        return None
    read_fd, write_fd = int(read_text), int(write_text)
    if read_fd < 0 or write_fd < 0:
        return None
    try:
        if not (stat.S_ISFIFO(os.fstat(read_fd).st_mode) and stat.S_ISFIFO(os.fstat(write_fd).st_mode)):
            return None
        # A descriptor of our own on the same pipe, so that non-blocking reads do not change
        # the shared file status flags make's other children see.
        own = os.open(f"/proc/self/fd/{read_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # make did not pass the pipe to this (non-recursive) recipe
    return JobserverSlots(own, write_fd, own_fds=(own,), description=f"make jobserver pipe {read_fd},{write_fd}")
