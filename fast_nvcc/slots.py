"""Permission to run steps, shared with everything else building on the machine.

Inside ``make -jN`` fast_nvcc is a GNU make jobserver client: it owns one implicit slot (make
started it) and reads one token from the jobserver for each further step it runs at once, giving
each back as soon as it is idle.  Both forms make uses are understood:

* ``--jobserver-auth=fifo:PATH`` (make >= 4.4): a named pipe anyone can open;
* ``--jobserver-auth=R,W`` (make 4.3, and ``--jobserver-fds=R,W`` before it): two inherited pipe
  descriptors, present only for recipes make treats as recursive (a ``+`` prefix or ``$(MAKE)``).

Without a jobserver (ninja, a shell loop, several IDE builds), all fast_nvcc processes of the
user share one build-wide schedule (:class:`PoolSlots`, docs/scheduling.md): a machine-wide pool
of slots, one per usable CPU, on which no compile waits for its first step while another runs
extra steps, and a free slot goes to the ready step with the longest remaining path of the whole
build.  Every file of the pool means something only while its owner holds an ``flock`` on it, so
a killed compile never loses a slot nor leaves a claim.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import random
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .buildtool import Saturation

_AUTH = re.compile(r"--jobserver-(?:auth|fds)=(\S+)")


class Slots:
    """No sharing: just the local bound."""

    implicit = 1  # slots held without asking
    description = "no shared slots"

    def __init__(self) -> None:
        self.held = 0  # extra slots currently held

    def try_acquire(self, priority: float = 0.0) -> bool:
        """One more slot for a step whose remaining path through its compile is ``priority``
        seconds; False: not now (ask again)."""
        self.held += 1
        return True

    def outranked(self, priority: float) -> bool:
        """Would a step of another compile have a better claim on an idle slot of ours than an
        extra step of ``priority``?  (Only the pool can tell; make's tokens are first come.)"""
        return False

    def withdraw(self) -> None:
        """This process waits for no slot now."""

    def over_pool(self, commands: int) -> str | None:
        """With ``commands`` steps of this process running, does the newest run over the
        machine-wide pool, and why: "first" (a compile's step while others run extra ones, rule
        1) or "drain" (the compile nearest its end, rule 3)?  None: within the pool's N."""
        return None

    def left(self, seconds: float) -> None:
        """This compile has about ``seconds`` of steps left to run (learned costs or defaults)."""

    def release(self) -> None:
        self.held -= 1

    def release_all(self) -> None:
        while self.held:
            self.release()
        self.withdraw()

    def close(self) -> None:
        self.release_all()


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

    def try_acquire(self, priority: float = 0.0) -> bool:
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
    """The machine-wide pool, shared by every fast_nvcc process of the user: ``size`` lock
    files (a slot is an ``flock`` on one), a board of ranked requests, and markers of what the
    slots are used for.

    * **A compile's first step never waits for another compile's extra steps.**  When no slot
      is free it may run *over* the pool, as long as fewer compiles run over it than there are
      extra steps in flight (each extra step leaves a marker), and no extra step starts again
      until the pool is back under its size.  So at most ``size`` commands run at once, plus at
      most one first step per extra step that was running when its compile arrived.
    * **A free slot goes to the best-ranked waiter of the whole machine.**  A process that wants
      a slot posts a request whose file *name* is its rank, so one directory listing sorts every
      waiter, and holds an ``flock`` on it, so the request of a dead process is seen as such (and
      removed) by the next reader.  The rank, best first: a compile that runs nothing before one
      that wants an extra step; then the longer remaining path through its own compile (learned
      costs, or per-tool defaults); then the earlier request.  A process takes a free slot only
      when fewer live requests rank ahead of it than there are free slots.
    * **While the build tool holds compiles back, the compile nearest its end finishes first.**
      When ninja (or make without a jobserver) runs as many jobs as its ``-j`` allows, it starts
      no further compile until one ends.  Then the DRAIN_COMPILES compiles with the least work
      left (each posts it under ``work/``) may run extra steps over the pool, ``size // 5`` of
      them on the machine in all and none while a compile waits for its first step, so that
      they end sooner and the tool starts the next ones (a long pole it held back, perhaps).

    No daemon: waiters poll (a listing and a few non-blocking locks), and the kernel drops a dead
    process's locks, so a killed compile loses no slot and leaves no claim.
    """

    implicit = 0
    DRAIN_COMPILES = 2  # how many of the compiles nearest their end may run steps over the pool
    DRAIN_SHARE = 5  # those compiles may run size // DRAIN_SHARE steps over the pool in all
    NEAREST_RECHECK = 0.1  # seconds: who is nearest its end is a listing and a few locks

    def __init__(self, directory: str, size: int, *, saturated: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self.directory = directory
        self.board = os.path.join(directory, "requests")
        self.marks = os.path.join(directory, "marks")
        self.work = os.path.join(directory, "work")
        self.size = max(1, size)
        # At most a fifth more commands than cores: 3 on 16 cores, none below 5 cores, where a
        # full ninja usually holds nothing back and over-subscribing costs more (2 cores,
        # 2 CUTLASS compiles at -j2, 2026-11-23: 3 extras made the build 9-16% slower).
        self.drain_extras = self.size // self.DRAIN_SHARE
        self.description = f"machine-wide pool of {self.size} slots in {directory}"
        os.makedirs(self.board, mode=0o700, exist_ok=True)
        os.makedirs(self.marks, mode=0o700, exist_ok=True)
        os.makedirs(self.work, mode=0o700, exist_ok=True)
        self._saturated = saturated  # is the build tool above us full? (looked up when needed)
        self._left: _Claim | None = None
        self._nearest, self._nearest_checked = False, -1.0
        self._slot_fds: dict[int, int] = {}  # slot -> an open descriptor of its lock file
        self._holds: list[_Hold] = []
        self._request: _Claim | None = None
        self._since = 0  # when this process began to wait, for the rank's third key

    # -- the board -----------------------------------------------------------------------

    def _rank_name(self, priority: float) -> str:
        first = 0 if self.held == 0 else 1
        inverse = max(0, _PRIORITY_SPAN - int(max(0.0, priority) * 1000))
        return f"r{first}-{inverse:012d}-{self._since:016d}-{os.getpid()}"

    def _post(self, priority: float) -> str:
        """Put (or move) this process's request on the board; return its name."""
        if self._request is None:
            self._since = time.time_ns() // 1000
        name = self._rank_name(priority)
        if self._request is not None:
            if self._request.path == os.path.join(self.board, name):
                return name
            try:
                self._request = self._request.renamed(os.path.join(self.board, name))
            except FileNotFoundError:  # removed by someone who took us for dead: post anew
                self._request.drop()
                self._request = None
        if self._request is None:
            self._request = _Claim.make(os.path.join(self.board, name))
        return name

    def withdraw(self) -> None:
        if self._request is not None:
            self._request.drop()
            self._request = None

    def left(self, seconds: float) -> None:
        name = os.path.join(self.work, f"w-{min(_PRIORITY_SPAN, int(max(0.0, seconds) * 1000)):012d}-{os.getpid()}")
        self._nearest_checked = -1.0  # look again at the next ask
        if self._left is None:
            self._left = _Claim.make(name)
        elif self._left.path != name:
            try:
                self._left = self._left.renamed(name)
            except FileNotFoundError:  # removed by someone who took us for dead
                self._left.drop()
                self._left = _Claim.make(name)

    def _nearest_end(self) -> bool:
        """Is this compile one of the DRAIN_COMPILES with the least work left on the machine?"""
        if self._left is None:
            return False
        return os.path.basename(self._left.path) in _live(self.work, "w-")[: self.DRAIN_COMPILES]

    def _may_drain(self) -> bool:
        if not self.drain_extras:
            return False
        now = time.monotonic()
        if now - self._nearest_checked >= self.NEAREST_RECHECK:
            self._nearest_checked, self._nearest = now, self._nearest_end()
        if not self._nearest:
            return False
        if self._saturated is None:
            self._saturated = Saturation.of_this_process()
        if not self._saturated():
            return False
        if _live(self.board, "r0-"):
            return False  # a compile waits for its first step: it goes first (rule 1)
        # A fifth of the pool for the whole machine, not for each compile: as "nearest its end"
        # passes from compile to compile, drains of a fifth each kept 25-31 commands running on
        # 16 cores for the first 40 s of a first CUTLASS build (2026-11-23), each cicc slower.
        return len(_live(self.marks, "extra-drain-")) < self.drain_extras

    def _ahead(self, name: str) -> int:
        """How many live requests of other processes rank before ``name``."""
        return sum(1 for other in _live(self.board, "r") if other < name)

    # -- slots ---------------------------------------------------------------------------

    def try_acquire(self, priority: float = 0.0) -> bool:
        name = self._post(priority)
        first = self.held == 0
        overflowing = _live(self.marks, "over-")
        # Those ahead get theirs first; an extra step also waits until no compile runs over.
        wanted = self._ahead(name) + 1 + (0 if first else len(overflowing))
        locked = self._lock_free(wanted)
        if len(locked) >= wanted:
            for slot in locked[1:]:
                self._unlock(slot)
            mark = None if first else self._mark("extra")
            self._take(_Hold(slot=locked[0], mark=mark))
            return True
        for slot in locked:
            self._unlock(slot)
        # However many compiles arrive while extra steps run: tying the overflow to the count of
        # extras left compiles waiting 1.5-1.8 s at ninja -j32 on 16 cores (2026-11-22).
        if first and _live(self.marks, "extra-"):
            self._take(_Hold(slot=None, mark=self._mark("over")))
            return True
        if not first and self._may_drain():
            self._take(_Hold(slot=None, mark=self._mark("extra-drain")))
            return True
        return False

    def over_pool(self, commands: int) -> str | None:
        if commands <= sum(1 for h in self._holds if h.slot is not None):
            return None
        kinds = [h.mark.path for h in self._holds if h.slot is None and h.mark is not None]
        return "drain" if any("extra-drain-" in k for k in kinds) else "first"

    def _take(self, hold: _Hold) -> None:
        self._holds.append(hold)
        self.held += 1
        self.withdraw()

    def _mark(self, what: str) -> _Claim:
        return _Claim.make(os.path.join(self.marks, f"{what}-{os.getpid()}-{next(_SERIALS)}"))

    def outranked(self, priority: float) -> bool:
        mine = self._rank_name(priority)
        suffix = f"-{os.getpid()}"
        if any(other < mine for other in _live(self.board, "r") if not other.endswith(suffix)):
            return True
        return bool(_live(self.marks, "over-"))  # the pool is over its size: no extra step

    def _lock_free(self, wanted: int) -> list[int]:
        """Lock up to ``wanted`` free slots, starting at a random one so that concurrent
        processes do not all fight over slot 0."""
        locked: list[int] = []
        mine = {h.slot for h in self._holds}
        first = random.randrange(self.size)
        for offset in range(self.size):
            slot = (first + offset) % self.size
            if slot in mine:
                continue
            fd = self._slot_fd(slot)
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

    def _slot_fd(self, slot: int) -> int | None:
        fd = self._slot_fds.get(slot)
        if fd is None:
            path = os.path.join(self.directory, f"slot-{slot}")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return None  # a slot file someone else owns: not ours to take
            self._slot_fds[slot] = fd
        return fd

    def _unlock(self, slot: int) -> None:
        fcntl.flock(self._slot_fds[slot], fcntl.LOCK_UN)

    def release(self) -> None:
        """Give back one slot: an extra one first, then one over the pool, then the first."""
        if not self._holds:
            return
        hold = max(self._holds, key=lambda h: (h.mark is not None and "extra-" in h.mark.path, h.slot is None))
        self._holds.remove(hold)
        if hold.slot is not None:
            self._unlock(hold.slot)
        if hold.mark is not None:
            hold.mark.drop()
        self.held -= 1

    def close(self) -> None:
        self.release_all()
        if self._left is not None:
            self._left.drop()
            self._left = None
        for fd in self._slot_fds.values():
            os.close(fd)
        self._slot_fds.clear()


@dataclass(frozen=True, slots=True)
class _Claim:
    """A file of the pool that its owner holds an flock on while it means something."""

    path: str
    fd: int

    @classmethod
    def make(cls, path: str) -> _Claim:
        # Locked under a name no reader looks at, then shown: a reader that could lock a claim
        # would take its owner for dead.
        hidden = os.path.join(os.path.dirname(path), f".new-{os.getpid()}-{threading.get_ident()}")
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(hidden, path)
        return cls(path, fd)

    def renamed(self, path: str) -> _Claim:
        os.rename(self.path, path)
        return _Claim(path, self.fd)

    def drop(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        os.close(self.fd)


@dataclass(frozen=True, slots=True)
class _Hold:
    slot: int | None  # None: running over the pool
    mark: _Claim | None  # "extra-...", "extra-drain-..." or "over-...", for the others to count


def _live(directory: str, prefix: str) -> list[str]:
    """The names of live claims in ``directory`` starting with ``prefix``, sorted."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith(prefix))
    except OSError:
        return []
    return [n for n in names if _is_live(os.path.join(directory, n))]


_SERIALS = itertools.count(1)  # mark names, unique in the process even with several pools in it

# Priorities are seconds of remaining path, kept in milliseconds: a rank name holds up to
# about eleven days of it.
_PRIORITY_SPAN = 10**12 - 1


def _is_live(path: str) -> bool:
    """Its owner holds an flock on it; a claim we can lock belongs to a dead process (and
    goes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # gone meanwhile (granted or withdrawn)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        with contextlib.suppress(OSError):
            os.remove(path)
        return False
    finally:
        os.close(fd)


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
    """One place per user and machine, whatever ``$TMPDIR`` a build sets (a build that points
    TMPDIR at a private directory must still share the machine's cores): FAST_NVCC_POOL_DIR,
    else the user's runtime directory, else /dev/shm, else /tmp (never $TMPDIR)."""
    if env.get("FAST_NVCC_POOL_DIR"):
        return env["FAST_NVCC_POOL_DIR"]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "fast_nvcc-slots")
    for base in ("/dev/shm", "/tmp"):
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return os.path.join(base, f"fast_nvcc-slots-{os.getuid()}")
    return os.path.join(os.path.expanduser("~"), ".cache", "fast_nvcc", "slots")
