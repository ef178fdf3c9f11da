"""Permission to run steps, shared with everything else building on the machine.

Inside ``make -jN`` fast_nvcc is a GNU make jobserver client: it owns one implicit slot (make
started it) and reads one token from the jobserver for each further step it runs at once, giving
each back as soon as it is idle.  Both forms make uses are understood:

* ``--jobserver-auth=fifo:PATH`` (make >= 4.4): a named pipe anyone can open;
* ``--jobserver-auth=R,W`` (make 4.3, and ``--jobserver-fds=R,W`` before it): two inherited pipe
  descriptors, present only for recipes make treats as recursive (a ``+`` prefix or ``$(MAKE)``).

Without a jobserver (ninja, a shell loop, several IDE builds), all fast_nvcc processes of the user
share one machine-wide pool of slots: a directory of lock files, one per usable CPU, each slot an
``flock`` held on one of them.  The kernel drops a dead process's locks, so a killed compile never
loses a slot, and a process that holds no slot is the only one that ever waits for one, so the
pool cannot deadlock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import stat
import tempfile
import time
from collections.abc import Mapping

_AUTH = re.compile(r"--jobserver-(?:auth|fds)=(\S+)")


class Slots:
    """No sharing: just the local bound."""

    implicit = 1  # slots held without asking
    description = "no shared slots"

    def __init__(self) -> None:
        self.held = 0  # extra slots currently held

    def try_acquire(self) -> bool:
        self.held += 1
        return True

    def release(self) -> None:
        self.held -= 1

    def release_all(self) -> None:
        while self.held:
            self.release()

    def close(self) -> None:
        self.release_all()


class JobserverSlots(Slots):
    """A GNU make jobserver client."""

    implicit = 1

    def __init__(self, read_fd: int, write_fd: int, *, own_fds: tuple[int, ...], description: str) -> None:
        super().__init__()
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.own_fds = own_fds  # the descriptors this client opened itself
        self.description = description
        self.tokens: list[bytes] = []

    def try_acquire(self) -> bool:
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

    def release(self) -> None:
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


class PoolSlots(Slots):
    """The machine-wide pool: ``size`` lock files; a slot is an flock on one of them."""

    implicit = 0

    def __init__(self, directory: str, size: int) -> None:
        super().__init__()
        self.directory = directory
        self.size = max(1, size)
        self.fds: list[int] = []
        self.description = f"machine-wide pool of {self.size} slots in {directory}"
        os.makedirs(directory, mode=0o700, exist_ok=True)

    def try_acquire(self) -> bool:
        # Start at a random slot so that concurrent processes do not all fight over slot 0.
        first = random.randrange(self.size)
        for offset in range(self.size):
            path = os.path.join(self.directory, f"slot-{(first + offset) % self.size}")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                continue  # a slot file someone else owns: not ours to take
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    continue
                raise
            self.fds.append(fd)
            self.held += 1
            return True
        return False

    def release(self) -> None:
        if self.fds:
            os.close(self.fds.pop())  # closing the descriptor drops the lock
            self.held -= 1


class MemoryGate:
    """Holds back a step when the machine's available memory would not fit it.

    Consulted only while another step of this compile runs, so a compile always makes progress.
    """

    RESERVE_FRACTION = 0.05

    def __init__(self, estimate) -> None:
        self.estimate = estimate  # task -> bytes it is expected to need at its peak
        self._sampled = 0.0
        self._available = 0
        self._total = 0

    def allows(self, task) -> bool:
        now = time.monotonic()
        if now - self._sampled > 0.1:
            import psutil

            memory = psutil.virtual_memory()
            self._available, self._total = memory.available, memory.total
            self._sampled = now
        return self._available - self.estimate(task) > self._total * self.RESERVE_FRACTION

    def taken(self, task) -> None:
        """A step just started: count its memory as gone until the next sample."""
        self._available -= self.estimate(task)


def slots_from_environment(env: Mapping[str, str], *, pool_size: int) -> Slots:
    """The jobserver of MAKEFLAGS if there is a usable one, else the machine-wide pool."""
    jobserver = jobserver_from_makeflags(env.get("MAKEFLAGS", ""))
    if jobserver is not None:
        return jobserver
    if env.get("FAST_NVCC_POOL", "1") == "0":
        return Slots()
    size = env.get("FAST_NVCC_POOL_SIZE", "")
    try:
        return PoolSlots(pool_directory(env), int(size) if size.isdigit() and int(size) > 0 else pool_size)
    except OSError as exc:
        unshared = Slots()
        unshared.description = f"no shared slots (pool directory unusable: {exc.strerror or exc})"
        return unshared


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


def pool_directory(env: Mapping[str, str]) -> str:
    if env.get("FAST_NVCC_POOL_DIR"):
        return env["FAST_NVCC_POOL_DIR"]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "fast_nvcc-slots")
    return os.path.join(tempfile.gettempdir(), f"fast_nvcc-slots-{os.getuid()}")
