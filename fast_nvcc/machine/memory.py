"""A memory budget shared by every compile on the machine: a step starts only when its expected
peak fits in what the machine and this process's memory cgroup have left (docs/memory.md).

* **The limit** is the smallest of the machine's memory and every memory cgroup this process
  sits in (v1 ``memory.limit_in_bytes``, v2 ``memory.max``; a container's ``--memory`` is one
  of these), and what is *free* is the smallest of the machine's ``MemAvailable`` and, for each
  limited cgroup, its limit minus its usage.  A v1 cgroup's usage counts page cache: the
  inactive file pages, which the kernel reclaims before it kills anything, are not counted
  (what ``docker stats`` does).
* **Claims.** Each running step claims its expected peak with a file of the pool directory
  (``memory/c-<pid>-<n>-<bytes>``), flocked like the slot pool's files, so a killed compile's
  claims go with it.  A step starts when its peak, plus what the running steps are still
  expected to add, plus a small reserve, fits in what is free.  What the running steps will
  still add is their claims; only when that does not fit are their process trees' RSS read
  (one pass over the process table at most every ``SCAN_EVERY``, shared with the live
  correction below) and each compile's claim counted less what its steps already hold (that
  part is in the usage already); a tree above its claim counts nothing more.
* **Progress.** A step that does not fit posts a waiter (``memory/w-<since>-<pid>-<n>``); while
  any waits, no later compile starts a step, so a big step is not starved by small ones.  When
  no step of any compile holds a claim, the earliest waiter starts whatever its size: one step
  at a time is how plain nvcc runs, and a budget must not do worse.
* **Peaks** come from the driver (history's ``rss_kb`` per source, tool and arch); a step with
  no learned peak takes the last peak a peer posted for its tool and architecture
  (``memory/peak-<tool>~<arch>~<bytes>``, written as steps end), else, until a step of its
  kind has ended, ``GUESS_MARGIN`` times the per-tool default.
* **Corrected live** (:meth:`MemoryBudget.observe`, from :mod:`.pressure`'s thread while memory
  is tight): a running step that holds more than its kind's posted peak posts what it holds,
  and every claim is raised to what its step holds and, for a step on a guess, to its kind's
  peak.  So a first build's sm_90a ciccs, admitted on a guess, tell the budget they grow to
  3-5 GB while they run, not only when they end.
* **Killed anyway.** A step that the kernel kills (SIGKILL, exit 137, or a failure while the
  cgroup's ``oom_kill`` count rose) runs again once, ahead of every other waiter, when a peak
  of 1.25 times what it held at its death fits (a step that can never fit runs once nothing
  else holds a claim, as any too-big step does).  An earlier version waited for nothing of
  ours to hold a claim: in a CUTLASS build at -j32 in 31.5 GiB on 16 cores, three sm_90a
  ciccs killed on a first build then ran one after another on an idle machine for 130 s
  (270 s against 157 s learned, 2026-11-24).

Nothing here runs on the hot path when memory is plentiful: a check lists one directory, sums
the claims' names and reads ``/proc/meminfo`` and the cgroup's files at most every
``SAMPLE_EVERY``.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .pool_files import Claim, is_live

MIB = 1 << 20
# v1's "no limit" is the largest page-aligned long; anything this high is no limit.
_UNLIMITED = 1 << 60


@dataclass(frozen=True, slots=True)
class Cgroup:
    """One memory cgroup directory this process sits in (or under)."""

    version: int  # 1 or 2
    path: str


@dataclass(frozen=True, slots=True)
class Level:
    """One cgroup's limit and usage, in bytes (usage without reclaimable page cache)."""

    path: str
    limit: int
    used: int
    oom_kills: int


@dataclass(frozen=True, slots=True)
class Headroom:
    """What a new step may use: ``free`` bytes now, under a ``limit`` (both the smallest of the
    machine's and every limited cgroup's), ``where`` says which one binds."""

    limit: int
    free: int
    where: str


# -- the limit ---------------------------------------------------------------------------------


def find_cgroups(proc_cgroup: str, mountinfo: str) -> list[Cgroup]:
    """The memory cgroups of a process, its own first, then each parent up to the mount's root:
    from the text of ``/proc/<pid>/cgroup`` and ``/proc/<pid>/mountinfo``.  A v1 memory
    hierarchy wins over v2 (a hybrid machine's v2 mount then holds no memory controller)."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif number == "0" and controllers == "":
            v2 = path
    mounts = _cgroup_mounts(mountinfo)
    for version, path in ((1, v1), (2, v2)):
        if path is None:
            continue
        for root, mountpoint, mount_version, options in mounts:
            if mount_version != version or (version == 1 and "memory" not in options):
                continue
            # Inside a container without a cgroup namespace the mount's root is the container's
            # cgroup (/docker/<id>) and /proc says the same path: strip it.
            if not (path == root or path.startswith(root.rstrip("/") + "/")):
                continue
            relative = path[len(root.rstrip("/")) :].strip("/")
            found = []
            while True:
                directory = os.path.join(mountpoint, relative) if relative else mountpoint
                found.append(Cgroup(version, directory))
                if not relative:
                    return found
                relative = os.path.dirname(relative)
    return []


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, str, int, set[str]]]:
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if not after or after[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(after[2].split(",")) if len(after) > 2 else set()
        mounts.append((_unescape(fields[3]), _unescape(fields[4]), 2 if after[0] == "cgroup2" else 1, options))
    return mounts


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def this_process_cgroups() -> list[Cgroup]:
    try:
        with open("/proc/self/cgroup") as a, open("/proc/self/mountinfo") as b:
            return find_cgroups(a.read(), b.read())
    except OSError:
        return []


def read_level(cgroup: Cgroup) -> Level | None:
    """A cgroup's limit and usage; None where its files cannot be read (not mounted here).

    The usage leaves out the page cache of files, active and inactive: the kernel reclaims it
    before it kills anything, and a build's is large and *active* (every compile reads the same
    headers; a file read twice in a v1 cgroup here showed 1.5 GB of total_active_file and
    nothing inactive).  Counting active pages as used left a first CUTLASS build at -j32 in a
    31 GiB cgroup unfinished after 420 s (16 cores, 2026-11-24; 99 s without the cgroup).
    Shared memory and tmpfs are on the anonymous lists, so they still count."""
    try:
        if cgroup.version == 1:
            limit = int(_read(cgroup.path, "memory.limit_in_bytes"))
            used = int(_read(cgroup.path, "memory.usage_in_bytes"))
            stat = _fields(_read(cgroup.path, "memory.stat"))
            cache = (stat.get("total_inactive_file", stat.get("inactive_file", 0))
                     + stat.get("total_active_file", stat.get("active_file", 0)))
            kills = _fields(_read(cgroup.path, "memory.oom_control")).get("oom_kill", 0)
        else:
            text = _read(cgroup.path, "memory.max").strip()
            limit = _UNLIMITED if text == "max" else int(text)
            used = int(_read(cgroup.path, "memory.current"))
            stat = _fields(_read(cgroup.path, "memory.stat"))
            cache = stat.get("inactive_file", 0) + stat.get("active_file", 0)
            kills = _fields(_read(cgroup.path, "memory.events")).get("oom_kill", 0)
    except (OSError, ValueError):
        return None
    return Level(cgroup.path, limit, max(0, used - cache), kills)


def read_machine() -> tuple[int, int]:
    """The machine's (total, available) memory in bytes, from /proc/meminfo."""
    fields = _fields(_read("/proc", "meminfo"))
    return fields.get("MemTotal", 0) * 1024, fields.get("MemAvailable", fields.get("MemFree", 0)) * 1024


def measure_headroom(levels: Iterable[Level], machine: tuple[int, int]) -> Headroom:
    total, available = machine
    headroom = Headroom(total, available, "machine")
    for level in levels:
        if level.limit >= _UNLIMITED or level.limit >= total:
            continue
        free = max(0, level.limit - level.used)
        if free < headroom.free or level.limit < headroom.limit:
            headroom = Headroom(min(level.limit, headroom.limit), min(free, headroom.free), level.path)
    return headroom


def read_headroom(cgroups: Sequence[Cgroup]) -> Headroom:
    levels = [level for level in map(read_level, cgroups) if level is not None]
    return measure_headroom(levels, read_machine())


def reserve_for(limit: int) -> int:
    """Kept free besides the claims: the kernel's own, fast_nvcc's Python processes, a shell
    or two: 4% of the limit, between 32 MiB and 256 MiB."""
    return min(256 * MIB, max(32 * MIB, limit // 25))


def fits(need: int, *, free: int, claimed: Sequence[tuple[int, int]], reserve: int) -> bool:
    """Does a step of ``need`` bytes fit, when each running compile claims ``claimed`` (its
    steps' expected peaks, what they hold now) and ``free`` is what the usage leaves?  What a
    compile already holds is in the usage: only the rest of its claim is still to come."""
    coming = sum(max(0, peak - held) for peak, held in claimed)
    return need + coming + reserve <= free


# -- the budget --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Held:
    claim: Claim
    bytes: int


class MemoryBudget:
    """One compile's side of the machine-wide budget: the Runner asks it before each command
    starts (:meth:`reserve`), tells it when one ends (:meth:`release`), and asks it whether a
    failed command was killed for memory (:meth:`out_of_memory`)."""

    SAMPLE_EVERY = 0.1  # seconds between reads of /proc/meminfo and the cgroup's files
    SCAN_EVERY = 0.5  # seconds between reads of the running steps' RSS (only when tight)
    RAISE_AT = 1.1  # a claim or a posted peak is raised once a step holds this much more
    # A kind no step has ended yet is expected at this many times its per-tool guess: CUTLASS's
    # sm_90a ciccs reach 3-5 GB against the 800 MB default, and sixteen of them admitted on it
    # together grew past 31.5 GiB and were stopped for 27 s each (16 cores, 2026-11-25).
    GUESS_MARGIN = 4
    GAP = 0.5  # the longest gap between two holds that counts as one memory wait

    def __init__(
        self,
        directory: str,
        *,
        peaks: Sequence[int],
        kinds: Sequence[tuple[str, str]],
        learned: Sequence[bool],
        cgroups: Sequence[Cgroup] | None = None,
    ) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)  # under the pool's, which is the user's
        self.peaks = list(peaks)  # task -> expected peak in bytes
        # task -> (tool, arch), for peers' peaks, as the peak files name them
        self.kinds = [tuple(re.sub(r"[^\w.+-]", "_", part) for part in kind) for kind in kinds]
        self.learned = learned  # task -> whether its peak came from history
        self.cgroups = list(this_process_cgroups() if cgroups is None else cgroups)
        levels = [level for level in map(read_level, self.cgroups) if level is not None]
        self._oom_kills = sum(level.oom_kills for level in levels)
        self._headroom = measure_headroom(levels, read_machine())
        self._sampled = time.monotonic()
        self._held: dict[int, _Held] = {}
        self._stopped: dict[int, Claim] = {}  # task -> its marker ``p-<pid>-<n>`` (fast_nvcc.machine.pressure)
        self._stopped_lock = threading.Lock()  # the pressure guard's thread marks, the runner's releases
        self._waiter: Claim | None = None
        self._again: set[int] = set()  # tasks to run again first: killed for memory
        self._retried: set[int] = set()
        # Stopped steps killed to make room for an older one (fast_nvcc.machine.pressure): task -> the
        # claim key of the step that must end before it runs again.
        self._evicted: dict[int, str] = {}
        self._after: dict[int, str] = {}
        self._denied: dict[int, float] = {}  # task -> when it was last held back
        self._waited: dict[int, float] = {}  # task -> seconds held back, summed
        self._table: ProcessTable | None = None  # shared by the admission and the guard's thread
        self._seen: dict[int, int] = {}  # task -> what its running step held when last observed
        self._peer_peaks = PeerPeaks(directory)
        self._serial = next(_SERIALS)  # tells this budget's waiter from another's of the process
        self._thread_lock = threading.Lock()  # flock does not exclude our own threads
        self._lock_fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    @property
    def headroom(self) -> Headroom:
        return self._headroom

    @property
    def description(self) -> str:
        h = self._headroom
        return (f"memory budget: limit {h.limit / (1 << 30):.2f} GiB ({h.where}), {h.free / (1 << 30):.2f} GiB free,"
                f" claims in {self.directory}")  # fmt: skip

    def need(self, task_id: int) -> int:
        """The peak ``task_id`` is expected to reach: learned; else its peers' (the last one of
        its kind that ended, or more if a running one holds more); else, while no step of its
        kind has ended, ``GUESS_MARGIN`` times the guess (up to a quarter of the limit: in a
        small cgroup the guess alone is near it already), or more if a running one holds more."""
        peak = self.peaks[task_id]
        if self.learned[task_id]:
            return peak
        kind = self.kinds[task_id]
        peer = self._peer_peaks.read().get(kind, 0)
        if self._peer_peaks.ended(kind):
            return peer
        return max(peer, peak, min(peak * self.GUESS_MARGIN, self._headroom.limit // 4))

    def reserve(self, task_id: int, *, now: float) -> bool:
        """May ``task_id`` start now?  If so its peak is claimed until :meth:`release`."""
        if self._waits_for_older(task_id):
            self._count_wait(task_id, now)
            self._denied[task_id] = now
            return False  # no waiter posted: others' steps may go on meanwhile
        with self._locked():
            granted = self._decide(task_id)
            if granted:
                need = self.need(task_id)
                name = f"c-{os.getpid()}-{next(_SERIALS)}-{need}"
                self._held[task_id] = _Held(Claim.make(os.path.join(self.directory, name)), need)
        if granted:
            self._again.discard(task_id)
            self._count_wait(task_id, now)
            self._denied.pop(task_id, None)
            self.withdraw()
        else:
            self._count_wait(task_id, now)
            self._denied[task_id] = now
            self._post_waiter(first=task_id in self._again)
        return granted

    def _count_wait(self, task_id: int, now: float) -> None:
        """Add the time since this task was last held back for memory.  The Runner asks every
        20 ms while a step waits; a longer gap was spent waiting for something else (a slot)."""
        since = self._denied.get(task_id)
        if since is not None:
            self._waited[task_id] = self._waited.get(task_id, 0.0) + min(now - since, self.GAP)

    def waited(self, task_id: int) -> float:
        """Seconds ``task_id`` was held back for memory."""
        return self._waited.get(task_id, 0.0)

    def release(self, task_id: int, *, rss_kb: int | None) -> None:
        with self._stopped_lock:  # no stop marker or observation may outlive its claim
            held = self._held.pop(task_id, None)
            self._seen.pop(task_id, None)
        self.unmark_stopped(task_id)
        self._evicted.pop(task_id, None)
        if held is not None:
            held.claim.drop()
        if rss_kb and task_id < len(self.kinds):
            # Not below what a running step of its kind holds: a small one ending must not tell
            # the next step of the kind to expect less than a big one already holds.
            kind = self.kinds[task_id]
            running = [size for t, size in list(self._seen.items()) if self.kinds[t] == kind]
            self._peer_peaks.post(kind, max([rss_kb * 1024, *running]))

    def out_of_memory(self, task_id: int, returncode: int, *, rss_kb: int | None) -> bool:
        """Was this failure the kernel's OOM killer, and is the step worth one more run?
        Exit 137 (or -9) is a SIGKILL fast_nvcc did not send; a tool whose child was killed
        (gcc's cc1plus) fails otherwise, and the cgroup's oom_kill count says so."""
        after = self._evicted.pop(task_id, None)
        if after is not None:  # fast_nvcc.machine.pressure killed it: it runs again once that step ends
            self._after[task_id] = after
            self._raise_peak(task_id, rss_kb)
            return True
        if task_id in self._retried:
            return False
        killed = returncode in (128 + 9, -9)
        if not killed:
            levels = [level for level in map(read_level, self.cgroups) if level is not None]
            kills = sum(level.oom_kills for level in levels)
            killed = kills > self._oom_kills
        if not killed:
            return False
        self._retried.add(task_id)
        self._again.add(task_id)
        self._raise_peak(task_id, rss_kb)
        return True

    def observe(self, holding: Mapping[int, int]) -> None:
        """Correct the expectations by what our running steps hold now (``holding``: task ->
        bytes, their process trees' RSS).  A step on a guess that holds more than its kind's
        posted peak posts what it holds, so that the next step of that kind is admitted on it;
        and each claim is raised to what its step holds and, for a step on a guess, to its
        kind's peak, so that what the running steps will still add is counted.  Claims only
        grow: a step that holds less now may still be on its way up."""
        for task_id, size in holding.items():
            with self._stopped_lock:
                if task_id not in self._held:
                    continue  # ended meanwhile
                self._seen[task_id] = size
            if self.learned[task_id]:
                self._raise_claim(task_id, size)
                continue
            kind = self.kinds[task_id]
            if size > max(self._peer_peaks.read().get(kind, 0), self.peaks[task_id]) * self.RAISE_AT:
                self._peer_peaks.post(kind, size, live=True)
            self._raise_claim(task_id, max(size, self._peer_peaks.read().get(kind, 0)))

    def _raise_claim(self, task_id: int, size: int) -> None:
        with self._stopped_lock:  # not while release() drops it
            held = self._held.get(task_id)
            if held is None or size <= held.bytes * self.RAISE_AT:
                return
            name = os.path.join(self.directory, f"c-{claim_key(held.claim.path)}-{size}")
            with self._locked(), contextlib.suppress(FileNotFoundError):  # readers see one name
                self._held[task_id] = _Held(held.claim.renamed(name), size)

    def _raise_peak(self, task_id: int, rss_kb: int | None) -> None:
        if rss_kb:  # it held this much when it died: it needs more than that
            self.peaks[task_id] = max(self.peaks[task_id], rss_kb * 1024 * 5 // 4)
            self.learned = [*self.learned[:task_id], True, *self.learned[task_id + 1 :]]

    def evict(self, task_id: int, *, after: str) -> None:
        """``task_id`` is about to be killed to make room for the step whose claim key is
        ``after``: it runs again, once, when that one has ended (its work is lost either way,
        and a second kill would not be room for ``after`` either)."""
        self._evicted[task_id] = after

    def _waits_for_older(self, task_id: int) -> bool:
        after = self._after.get(task_id)
        if after is None:
            return False
        if any(claim_key(n) == after and is_live(os.path.join(self.directory, n)) for n in _names(self.directory)):
            return True
        del self._after[task_id]
        return False

    def withdraw(self) -> None:
        """Nothing of ours waits for memory now: others go first."""
        if self._waiter is not None:
            self._waiter.drop()
            self._waiter = None

    # -- steps stopped for memory (fast_nvcc.machine.pressure) ----------------------------------------

    def held_keys(self) -> dict[int, str]:
        """Task -> ``<pid>-<n>``, its claim's key, for each running step of ours."""
        held = list(self._held.items())
        return {task_id: key for task_id, h in held if (key := claim_key(h.claim.path)) is not None}

    def mark_stopped(self, task_id: int) -> None:
        with self._stopped_lock:
            held = self._held.get(task_id)
            if held is not None and task_id not in self._stopped:
                marker = os.path.join(self.directory, f"p-{claim_key(held.claim.path)}")
                self._stopped[task_id] = Claim.make(marker)

    def unmark_stopped(self, task_id: int) -> None:
        with self._stopped_lock:
            marker = self._stopped.pop(task_id, None)
            if marker is not None:
                marker.drop()

    def stopped(self) -> list[int]:
        """Our steps stopped for memory."""
        with self._stopped_lock:
            return list(self._stopped)

    def anything_stopped(self) -> bool:
        """Is a step of any compile under this limit stopped for memory?"""
        return self._stopped_among(_names(self.directory))

    def _stopped_among(self, names: Sequence[str]) -> bool:
        return any(n.startswith("p-") and is_live(os.path.join(self.directory, n)) for n in names)

    def close(self) -> None:
        for task_id in self.stopped():
            self.unmark_stopped(task_id)
        for held in self._held.values():
            held.claim.drop()
        self._held.clear()
        self.withdraw()
        os.close(self._lock_fd)

    # -- the decision ---------------------------------------------------------------------

    def _decide(self, task_id: int) -> bool:
        names = _names(self.directory)
        claims = [(pid, size) for pid, size in map(_parse_claim, names) if pid]
        if self._again and task_id not in self._again:
            return False  # a step of ours killed for memory waits: nothing else of ours starts first
        if self._someone_ahead([n for n in names if n.startswith("w-")]):
            return False
        if self._stopped_among(names):
            return False  # memory ran short: a step is stopped until there is room (fast_nvcc.machine.pressure)
        if not claims:
            return True  # with no claim anywhere, one step always starts: plain nvcc's way
        need = self.need(task_id)
        headroom = self._sample()
        reserve = reserve_for(headroom.limit)
        if need + sum(size for _, size in claims) + reserve <= headroom.free:
            return True  # the cheap check: as if no running step held anything yet
        live = self._live_claims(names)
        if not live:
            return True
        return fits(need, free=headroom.free, claimed=self._claimed(live), reserve=reserve)

    def _someone_ahead(self, waiters: Sequence[str]) -> bool:
        """A live waiter of another compile ranks before ours (or we have none)."""
        if not waiters:
            return False
        mine = os.path.basename(self._waiter.path) if self._waiter is not None else None
        for name in sorted(waiters):
            if mine is not None and name >= mine:
                return False
            if is_live(os.path.join(self.directory, name)):
                return True
        return False

    def _live_claims(self, names: Sequence[str]) -> list[tuple[int, int]]:
        mine = {os.path.basename(h.claim.path) for h in self._held.values()}
        live = []
        for name in names:
            pid, size = _parse_claim(name)
            if pid and (name in mine or is_live(os.path.join(self.directory, name))):
                live.append((pid, size))
        return live

    def _claimed(self, live: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Per compile: (its claims' sum, what its steps hold now)."""
        per_pid: dict[int, int] = {}
        for pid, size in live:
            per_pid[pid] = per_pid.get(pid, 0) + size
        table = self._process_table(per_pid)
        return [(size, table.tree(pid, itself=False)) for pid, size in per_pid.items()]

    def holding(self, pids: Mapping[int, int]) -> dict[int, int]:
        """Task -> what its running step holds (its process tree's RSS), for ``pids``: task ->
        its step's pid (for :meth:`observe`)."""
        table = self._process_table(pids.values())
        return {task_id: size for task_id, pid in pids.items() if (size := table.tree(pid, itself=True))}

    def _process_table(self, wanted: Iterable[int]) -> ProcessTable:
        """The process table, read again after ``SCAN_EVERY`` or when a ``wanted`` process
        started after the last read."""
        table = self._table
        if table is None or time.monotonic() - table.taken >= self.SCAN_EVERY or any(
            pid not in table.rss for pid in wanted
        ):
            table = self._table = ProcessTable.read()
        return table

    def _sample(self) -> Headroom:
        now = time.monotonic()
        if now - self._sampled >= self.SAMPLE_EVERY:
            self._headroom = read_headroom(self.cgroups)
            self._sampled = now
        return self._headroom

    def _post_waiter(self, *, first: bool) -> None:
        if self._waiter is not None and (not first or "-0000000000000000-" in self._waiter.path):
            return
        since = 0 if first else time.time_ns() // 1000  # a step run again goes first
        name = os.path.join(self.directory, f"w-{since:016d}-{os.getpid()}-{self._serial}")
        if self._waiter is None:
            self._waiter = Claim.make(name)
        else:
            try:
                self._waiter = self._waiter.renamed(name)
            except FileNotFoundError:
                self._waiter.drop()
                self._waiter = Claim.make(name)

    @contextlib.contextmanager
    def _locked(self):
        # The check and the claim are one step for the whole machine: two compiles that both
        # found room for one step must not both take it.
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


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


_SERIALS = itertools.count(1)


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _parse_claim(name: str) -> tuple[int, int]:
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
    return "-".join(name.split("-")[1:3]) if _parse_claim(name)[0] else None


@dataclass(frozen=True, slots=True)
class ProcessTable:
    """One pass over the machine's processes: each one's children and RSS, in bytes."""

    taken: float  # time.monotonic() of the pass
    children: dict[int, list[int]]
    rss: dict[int, int]

    @classmethod
    def read(cls) -> ProcessTable:
        import psutil

        taken = time.monotonic()
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for proc in psutil.process_iter(["ppid", "memory_info"]):
            info = proc.info
            if info.get("ppid") is None:
                continue
            children.setdefault(info["ppid"], []).append(proc.pid)
            memory = info.get("memory_info")
            rss[proc.pid] = memory.rss if memory is not None else 0
        return cls(taken, children, rss)

    def tree(self, pid: int, *, itself: bool) -> int:
        """The RSS of ``pid``'s descendants (a compile's: its steps and theirs), and its own
        where ``itself`` (a step's)."""
        total, stack = self.rss.get(pid, 0) if itself else 0, list(self.children.get(pid, ()))
        while stack:
            child = stack.pop()
            total += self.rss.get(child, 0)
            stack.extend(self.children.get(child, ()))
        return total


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as handle:
        return handle.read()


def _fields(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, memory.events, oom_control; /proc/meminfo's ``Key:``)."""
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0].rstrip(":")] = int(parts[1])
    return fields


def budget_directory(pool_directory: str, cgroups: Sequence[Cgroup]) -> str:
    """Where the compiles that share a limit keep their claims: one directory per innermost
    limited cgroup (two containers' claims do not count against each other), or ``machine``."""
    total = read_machine()[0]
    for cgroup in cgroups:
        level = read_level(cgroup)
        if level is not None and level.limit < min(total, _UNLIMITED):
            key = hashlib.sha1(os.path.realpath(cgroup.path).encode()).hexdigest()[:12]
            return os.path.join(pool_directory, "memory", f"cgroup-{key}")
    return os.path.join(pool_directory, "memory", "machine")


def budget_from_environment(
    env: Mapping[str, str], pool_directory: str, *, peaks: Sequence[int], kinds: Sequence[tuple[str, str]],
    learned: Sequence[bool],
) -> MemoryBudget | None:
    """The machine-wide budget, unless FAST_NVCC_MEMORY=0 or the pool directory is unusable
    (then no budget: the compile runs as before)."""
    if env.get("FAST_NVCC_MEMORY", "1") == "0":
        return None
    cgroups = this_process_cgroups()
    try:
        return MemoryBudget(budget_directory(pool_directory, cgroups), peaks=peaks, kinds=kinds, learned=learned,
                            cgroups=cgroups)  # fmt: skip
    except OSError:
        return None
