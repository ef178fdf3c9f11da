"""The memory budget's files, in a directory every compile under one limit shares (docs/memory.md):

* ``c-<pid>-<n>-<bytes>``: a running step's claim, flocked like the slot pool's files, so a
  killed compile's claims go with it;
* ``w-<since>-<pid>-<n>``: a compile waiting for memory (the earliest goes first; ``since`` 0 for
  a step run again after the kernel killed it);
* ``p-<pid>-<n>``: the step of that claim is stopped while memory runs short (:mod:`.pressure`);
* ``peak-<tool>~<arch>~<bytes>`` and ``live-...``: what each kind of step reached (:class:`PeerPeaks`);
* ``lock``: the check and the claim are one step for the whole machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import os
import re
import threading
import time
from collections.abc import Sequence

from .headroom import UNLIMITED, Cgroup, read_level, read_machine
from .pool_files import Claim, is_live

_SERIALS = itertools.count(1)


class BudgetFiles:
    """One compile's view of the directory: its claims, its waiter, its stop markers, the lock."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)  # under the pool's, which is the user's
        self.waiter: Claim | None = None
        self._serial = next(_SERIALS)  # tells this budget's waiter from another's of the process
        self._thread_lock = threading.Lock()  # flock does not exclude our own threads
        self._lock_fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def names(self) -> list[str]:
        return _names(self.directory)

    def claim(self, size: int) -> Claim:
        return Claim.make(os.path.join(self.directory, f"c-{os.getpid()}-{next(_SERIALS)}-{size}"))

    def raised(self, claim: Claim, size: int) -> Claim:
        """``claim`` renamed to claim ``size`` bytes (readers see one name or the other)."""
        return claim.renamed(os.path.join(self.directory, f"c-{claim_key(claim.path)}-{size}"))

    def stop_marker(self, claim: Claim) -> Claim:
        return Claim.make(os.path.join(self.directory, f"p-{claim_key(claim.path)}"))

    def is_live_claim(self, key: str) -> bool:
        """Does the claim of key ``<pid>-<n>`` still hold (its step runs)?"""
        return any(claim_key(n) == key and is_live(os.path.join(self.directory, n)) for n in self.names())

    def stopped_among(self, names: Sequence[str]) -> bool:
        """Is a step of any compile stopped for memory, by the directory's ``names``?"""
        return any(n.startswith("p-") and is_live(os.path.join(self.directory, n)) for n in names)

    def someone_ahead(self, names: Sequence[str]) -> bool:
        """A live waiter of another compile ranks before ours (or we have none)."""
        waiters = [n for n in names if n.startswith("w-")]
        if not waiters:
            return False
        mine = os.path.basename(self.waiter.path) if self.waiter is not None else None
        for name in sorted(waiters):
            if mine is not None and name >= mine:
                return False
            if is_live(os.path.join(self.directory, name)):
                return True
        return False

    def live_claims(self, names: Sequence[str], mine: Sequence[Claim]) -> list[tuple[int, int]]:
        """(pid, bytes) of every claim whose step still runs."""
        own = {os.path.basename(claim.path) for claim in mine}
        live = []
        for name in names:
            pid, size = parse_claim(name)
            if pid and (name in own or is_live(os.path.join(self.directory, name))):
                live.append((pid, size))
        return live

    def post_waiter(self, *, first: bool) -> None:
        if self.waiter is not None and (not first or "-0000000000000000-" in self.waiter.path):
            return
        since = 0 if first else time.time_ns() // 1000  # a step run again goes first
        name = os.path.join(self.directory, f"w-{since:016d}-{os.getpid()}-{self._serial}")
        if self.waiter is None:
            self.waiter = Claim.make(name)
        else:
            try:
                self.waiter = self.waiter.renamed(name)
            except FileNotFoundError:
                self.waiter.drop()
                self.waiter = Claim.make(name)

    def withdraw(self) -> None:
        """Nothing of ours waits for memory now: others go first."""
        if self.waiter is not None:
            self.waiter.drop()
            self.waiter = None

    @contextlib.contextmanager
    def locked(self):
        # The check and the claim are one step for the whole machine: two compiles that both
        # found room for one step must not both take it.
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.withdraw()
        os.close(self._lock_fd)


class PeerPeaks:
    """What each tool and architecture reached on the machine, for compiles that have none
    learned, one file a kind each: ``peak-<tool>~<arch>~<bytes>``, the last peak of a step that
    ended (six compiles of a first build learn from the first one's cudafe++), and
    ``live-<tool>~<arch>~<bytes>``, the most a running step of the kind holds (posted by
    :meth:`MemoryBudget.observe`, removed when a step of the kind ends)."""

    READ_EVERY = 1.0  # seconds

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._files: dict[str, dict[tuple[str, str], int]] = {"peak": {}, "live": {}}
        self._read = -1.0

    def read(self) -> dict[tuple[str, str], int]:
        """Kind -> the larger of its last ended peak and what a running step holds."""
        self._refresh()
        ended, live = self._files["peak"], self._files["live"]
        return {kind: max(ended.get(kind, 0), live.get(kind, 0)) for kind in {*ended, *live}}

    def ended(self, kind: tuple[str, str]) -> bool:
        """Has a step of ``kind`` ended, so that its peak is known?"""
        self._refresh()
        return kind in self._files["peak"]

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read < self.READ_EVERY:
            return
        self._read = now
        files: dict[str, dict[tuple[str, str], int]] = {"peak": {}, "live": {}}
        for name in _names(self.directory):
            what, _, rest = name.partition("-")
            tool, _, rest = rest.partition("~")
            arch, _, size = rest.rpartition("~")
            if what in files and size.isdigit():
                files[what][(tool, arch)] = int(size)
        self._files = files

    def post(self, kind: tuple[str, str], size: int, *, live: bool = False) -> None:
        """A step of ``kind`` ended at ``size`` bytes (its kind's live file goes: the steps still
        running post again), or, ``live``, a running one holds that much (unless another
        compile's running step already posted more)."""
        tool, arch = (re.sub(r"[^\w.+-]", "_", part) for part in kind)
        what = "live" if live else "peak"
        stale = (f"{what}-{tool}~{arch}~", *(() if live else (f"live-{tool}~{arch}~",)))
        path = os.path.join(self.directory, f"{what}-{tool}~{arch}~{size}")
        with contextlib.suppress(OSError):
            names = [name for name in _names(self.directory) if name.startswith(stale)]
            posted = [int(tail) for name in names if (tail := name.rpartition("~")[2]).isdigit()]
            if live and any(other >= size for other in posted):
                return
            for name in names:
                if name != os.path.basename(path):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(self.directory, name))
            with open(path, "w"):
                pass
            self._files[what][(tool, arch)] = size
            if not live:
                self._files["live"].pop((tool, arch), None)


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def parse_claim(name: str) -> tuple[int, int]:
    """(pid, bytes) of a claim's name ``c-<pid>-<n>-<bytes>``; (0, 0) for anything else."""
    if not name.startswith("c-"):
        return 0, 0
    parts = name.split("-")
    if len(parts) != 4 or not (parts[1].isdigit() and parts[3].isdigit()):
        return 0, 0
    return int(parts[1]), int(parts[3])


def claim_key(path: str) -> str | None:
    """``<pid>-<n>`` of a claim ``c-<pid>-<n>-<bytes>``; None for any other file."""
    name = os.path.basename(path)
    return "-".join(name.split("-")[1:3]) if parse_claim(name)[0] else None


def budget_directory(pool_directory: str, cgroups: Sequence[Cgroup]) -> str:
    """Where the compiles that share a limit keep their claims: one directory per innermost
    limited cgroup (two containers' claims do not count against each other), or ``machine``."""
    total = read_machine()[0]
    for cgroup in cgroups:
        level = read_level(cgroup)
        if level is not None and level.limit < min(total, UNLIMITED):
            key = hashlib.sha1(os.path.realpath(cgroup.path).encode()).hexdigest()[:12]
            return os.path.join(pool_directory, "memory", f"cgroup-{key}")
    return os.path.join(pool_directory, "memory", "machine")
