"""The machine-wide pool's files (:class:`fast_nvcc.machine.slots.PoolSlots` holds its rules): every
file means something only while its owner holds an ``flock`` on it, so the kernel drops a dead
process's slots and claims with its locks, and the next reader removes what is left.

* ``slot-N``: a slot is an flock on its lock file (:class:`SlotLocks`);
* ``requests/``: the waiters of the machine, each request's name its rank (:class:`RequestBoard`);
* ``work/``: how much work each compile has left, in the name (:class:`WorkLeft`);
* ``scales/``: how far each compile's long steps ran over their estimates (:class:`ScalesTold`);
* ``cores/``: which CPUs split steps' threads are held to (:mod:`fast_nvcc.run.core_grants`);
* ``asks/`` and ``slack/``: the cores split steps wait for, and the running steps that could give
  theirs (:mod:`fast_nvcc.run.yielding`), a :class:`Told` value each;
* ``marks/``: what the slots are used for, one :class:`Claim` each (the rules count them).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import signal
import threading
import time
from collections.abc import Collection
from typing import NamedTuple

from .pool_place import is_live, live  # (a claim's liveness, read by the lean path too)

# Priorities are seconds of remaining path, kept in milliseconds: a rank name holds up to
# about eleven days of it.
_PRIORITY_SPAN = 10**12 - 1


def _millis(seconds: float) -> int:
    """A rank or a told value as the names keep it: whole milliseconds (so a request on the
    board and the same value told under ``asks/`` read back equal)."""
    return min(_PRIORITY_SPAN, int(max(0.0, seconds) * 1000))


class Claim(NamedTuple):
    """A file of the pool that its owner holds an flock on while it means something."""

    path: str
    fd: int

    @classmethod
    def make(cls, path: str) -> Claim:
        # Locked under a name no reader looks at, then shown: a reader that could lock a claim
        # would take its owner for dead.
        hidden = os.path.join(os.path.dirname(path), f".new-{os.getpid()}-{threading.get_ident()}")
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        return cls(path, fd)

    @classmethod
    def post(cls, claim: Claim | None, path: str) -> Claim:
        """``claim`` under the name ``path`` (a new claim where there was none)."""
        if claim is None:
            return cls.make(path)
        if claim.path == path:
            return claim
        try:
            return claim.renamed(path)
        except FileNotFoundError:  # removed by someone who took us for dead
            claim.drop()
            return cls.make(path)

    def renamed(self, path: str) -> Claim:
        os.rename(self.path, path)
        return Claim(path, self.fd)

    def drop(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        os.close(self.fd)


class SlotLocks:
    """The pool's ``size`` slots: a slot is an flock on its lock file ``slot-N``."""

    def __init__(self, directory: str, size: int) -> None:
        self.directory = directory
        self.size = size
        self._fds: dict[int, int] = {}  # slot -> an open descriptor of its lock file

    def lock_free(self, wanted: int, *, skip: Collection[int | None]) -> list[int]:
        """Lock up to ``wanted`` free slots, not those in ``skip`` (held already), starting at a
        random one so that concurrent processes do not all fight over slot 0."""
        locked: list[int] = []
        first = random.randrange(self.size)
        for offset in range(self.size):
            slot = (first + offset) % self.size
            if slot in skip:
                continue
            fd = self._fd(slot)
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    continue
                raise
            locked.append(slot)
            if len(locked) == wanted:
                break
        return locked

    def _fd(self, slot: int) -> int | None:
        fd = self._fds.get(slot)
        if fd is None:
            path = os.path.join(self.directory, f"slot-{slot}")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return None  # a slot file someone else owns: not ours to take
            self._fds[slot] = fd
        return fd

    def unlock(self, slot: int) -> None:
        fcntl.flock(self._fds[slot], fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class Request(NamedTuple):
    """A waiter on the board, as its request's name tells it: its rank (seconds of remaining
    path), whether it asks for a compile's first step (or a split step's core beside them), and
    its process."""

    rank: float
    first: bool
    pid: int

    @classmethod
    def of(cls, name: str) -> Request:
        key, inverse, _since, pid = name.split("-")
        return cls((_PRIORITY_SPAN - int(inverse)) / 1000, key == "r0", int(pid))


class RequestBoard:
    """The waiters of the whole machine: a request's file *name* is its rank, so one listing
    sorts them; this process has at most one request on the board."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._request: Claim | None = None
        self._since = 0  # when this process began to wait, for the rank's third key
        self.wakes = 0  # how many times this process woke the others (:meth:`wake`)

    def rank_name(self, priority: float, *, first: bool) -> str:
        """The rank of a request for a compile's ``first`` step (or a split step's core,
        :class:`fast_nvcc.machine.slots.Ask`) or an extra one."""
        key = 0 if first else 1
        inverse = _PRIORITY_SPAN - _millis(priority)
        return f"r{key}-{inverse:012d}-{self._since:016d}-{os.getpid()}"

    def post(self, priority: float, *, first: bool) -> str:
        """Put (or move) this process's request on the board; return its name."""
        if self._request is None:
            self._since = time.time_ns() // 1000
        name = self.rank_name(priority, first=first)
        if self._request is not None:
            if self._request.path == os.path.join(self.directory, name):
                return name
            try:
                self._request = self._request.renamed(os.path.join(self.directory, name))
            except FileNotFoundError:  # removed by someone who took us for dead: post anew
                self._request.drop()
                self._request = None
        if self._request is None:
            self._request = Claim.make(os.path.join(self.directory, name))
        return name

    def withdraw(self) -> None:
        if self._request is not None:
            self._request.drop()
            self._request = None

    def waiting(self) -> dict[str, float]:
        """The processes with a live request on the board (ours included): pid -> its rank."""
        return {(parts := name.split("-"))[3]: (_PRIORITY_SPAN - int(parts[1])) / 1000 for name in live(self.directory, "r")}

    def wake(self) -> None:
        """A slot came free: wake every other waiter of the board to look (SIGURG, ignored by
        default by any process that does not wait on it: fast_nvcc.run.wakeup)."""
        self.wakes += 1
        for name in self._others():
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(name.rsplit("-", 1)[1]), signal.SIGURG)

    def _others(self) -> list[str]:
        """The live requests of other processes (a request's name ends in its pid)."""
        mine = f"-{os.getpid()}"
        return [name for name in live(self.directory, "r") if not name.endswith(mine)]

    def ahead(self, name: str) -> int:
        """How many live requests of other processes rank before ``name``."""
        return sum(1 for other in live(self.directory, "r") if other < name)

    def best_before(self, name: str) -> Request | None:
        """The best-ranked live request of another process, if it ranks before ``name``."""
        best = min(self._others(), default=None)
        return None if best is None or best >= name else Request.of(best)

    def first_steps_waiting(self) -> bool:
        """Does a compile wait for its first step (or, under FAST_NVCC_SPLIT_EARLY=1, a split
        step for a core: both rank ``r0``)?"""
        return bool(live(self.directory, "r0-"))


class Told:
    """One value per compile on the machine, as far as each has told: a claim per compile under
    its directory, the value in the name (milliseconds, zero-padded), so one listing sorts the
    compiles by it.  ``owner`` names this compile (its pid)."""

    def __init__(self, directory: str, prefix: str, *, owner: int | None = None) -> None:
        self.directory = directory
        self.prefix = prefix
        self.owner = os.getpid() if owner is None else owner
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._claim: Claim | None = None

    def tell(self, value: float | None) -> None:
        """This compile's value now; None: it has none (its claim goes)."""
        if value is None:
            self.close()
            return
        name = f"{self.prefix}{_millis(value):012d}-{self.owner}"
        self._claim = Claim.post(self._claim, os.path.join(self.directory, name))

    def names(self) -> list[str]:
        """Every live compile's claim, the lowest value first."""
        return live(self.directory, self.prefix)

    def values(self, *, others: bool = False) -> list[float]:
        """Every live compile's value (``others``: but this one's), lowest first."""
        return [value for value, _ in self.told(others=others)]

    def told(self, *, others: bool = False) -> list[tuple[float, str]]:
        """Every live compile's value and its owner's pid (``others``: but this one's), lowest first."""
        mine = str(self.owner)
        found = [(int(n[len(self.prefix) :].split("-")[0]) / 1000, n.rsplit("-", 1)[1]) for n in self.names()]
        return [(value, owner) for value, owner in found if not (others and owner == mine)]

    def close(self) -> None:
        if self._claim is not None:
            self._claim.drop()
            self._claim = None


class WorkLeft(Told):
    """How much work each compile on the machine has left (seconds), under ``work/``."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, "w-")

    def nearest(self, compiles: int) -> bool:
        """Is this compile one of the ``compiles`` with the least work left on the machine?"""
        if self._claim is None:
            return False
        return os.path.basename(self._claim.path) in self.names()[:compiles]


class ScalesTold(Told):
    """How many times their estimates each compile's long steps ran, under ``scales/``."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, "s-")

    def median_of_peers(self) -> float | None:
        """The median of what the other compiles told; None where none did."""
        told = self.values(others=True)
        return told[len(told) // 2] if told else None
