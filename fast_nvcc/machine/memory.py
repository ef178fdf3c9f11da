"""A memory budget shared by every compile on the machine: a step starts only when its expected
peak fits in what the machine and this process's memory cgroup have left (docs/memory.md).

* **The limit** is the smallest of the machine's memory and every memory cgroup this process
  sits in (v1 ``memory.limit_in_bytes``, v2 ``memory.max``; a container's ``--memory`` is one
  of these), and what is *free* is the smallest of the machine's ``MemAvailable`` and, for each
  limited cgroup, its limit minus its usage.  A v1 cgroup's usage counts page cache: the
  inactive file pages, which the kernel reclaims before it kills anything, are not counted
  (what ``docker stats`` does).
* **Claims.** Each running step claims its expected peak with a file of the pool directory
  (``memory/c-<pid>-<n>-<bytes>``, :mod:`.memory_files`), flocked like the slot pool's files, so a killed compile's
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
* **Peaks** come from the history (``rss_kb`` per source, tool and arch:
  fast_nvcc.learn.learned); a step with no learned peak takes the last peak a peer posted for
  its tool and architecture (``memory/peak-<tool>~<arch>~<bytes>``, written as steps end),
  else, until a step of its kind has ended, ``GUESS_MARGIN`` times the per-tool default.
* **Corrected live** (:meth:`MemoryBudget.observe`, from :mod:`.pressure`'s thread while memory
  is tight): a running step that holds more than its kind's posted peak posts what it holds,
  and every claim is raised to what its step holds and, for a step on a guess, to its kind's
  peak.  So a first build's sm_90a ciccs, admitted on a guess, tell the budget they grow to
  3-5 GB while they run, not only when they end.
* **Killed anyway.** A step that the kernel kills (SIGKILL, exit 137, or a failure while the
  cgroup's ``oom_kill`` count rose) runs again once, ahead of every other waiter, when a peak
  of 1.25 times what it held at its death fits (a step that can never fit runs once nothing
  else holds a claim, as any too-big step does).  An earlier version waited for nothing of
  ours to hold a claim, and the killed steps then ran one after another on an idle machine
  (docs/benchmarks.md).

Nothing here runs on the hot path when memory is plentiful: a check lists one directory, sums
the claims' names and reads ``/proc/meminfo`` and the cgroup's files at most every
``SAMPLE_EVERY``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..settings import switch
from .headroom import (
    MIB,
    Cgroup,
    Headroom,
    measure_headroom,
    read_headroom,
    read_level,
    read_machine,
    this_process_cgroups,
)
from .memory_files import BudgetFiles, budget_directory, claim_key, parse_claim
from .memory_observation import LiveUsage
from .memory_peaks import RAISE_AT, ExpectedPeaks
from .pool_files import Claim


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


class _Held(NamedTuple):
    """The memory a running task holds of the budget, and its claim in the budget's files."""

    claim: Claim
    bytes: int


class MemoryBudget:
    """One compile's side of the machine-wide budget: the Runner asks it before each command
    starts (:meth:`reserve`), tells it when one ends (:meth:`release`), and asks it whether a
    failed command was killed for memory (:meth:`out_of_memory`).  The admission is here; its
    files are :class:`.memory_files.BudgetFiles`', what running steps hold
    :class:`.memory_observation.LiveUsage`'s, what each step is expected to reach
    :class:`.memory_peaks.ExpectedPeaks`'."""

    SAMPLE_EVERY = 0.1  # seconds between reads of /proc/meminfo and the cgroup's files
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
        self.files = BudgetFiles(directory)
        self.live = LiveUsage()
        self.expected = ExpectedPeaks(directory, peaks=peaks, kinds=kinds, learned=learned)
        self.cgroups = list(this_process_cgroups() if cgroups is None else cgroups)
        levels = [level for level in map(read_level, self.cgroups) if level is not None]
        self._oom_kills = sum(level.oom_kills for level in levels)
        self._headroom = measure_headroom(levels, read_machine())
        self._sampled = time.monotonic()
        self._held: dict[int, _Held] = {}
        self._stopped: dict[int, Claim] = {}  # task -> its marker ``p-<pid>-<n>`` (fast_nvcc.machine.pressure)
        self._stopped_lock = threading.Lock()  # the pressure guard's thread marks, the runner's releases
        self._again: set[int] = set()  # tasks to run again first: killed for memory
        self._retried: set[int] = set()
        # Stopped steps killed to make room for an older one (fast_nvcc.machine.pressure): task -> the
        # claim key of the step that must end before it runs again.
        self._evicted: dict[int, str] = {}
        self._after: dict[int, str] = {}
        self._denied: dict[int, float] = {}  # task -> when it was last held back
        self._waited: dict[int, float] = {}  # task -> seconds held back, summed
        self._seen: dict[int, int] = {}  # task -> what its running step held when last observed

    @property
    def headroom(self) -> Headroom:
        return self._headroom

    @property
    def description(self) -> str:
        h = self._headroom
        return (f"memory budget: limit {h.limit / (1 << 30):.2f} GiB ({h.where}), {h.free / (1 << 30):.2f} GiB free,"
                f" claims in {self.directory}")  # fmt: skip

    def need(self, task_id: int) -> int:
        """The peak ``task_id`` is expected to reach (:meth:`.memory_peaks.ExpectedPeaks.need`)."""
        return self.expected.need(task_id, limit=self._headroom.limit)

    def reserve(self, task_id: int, *, now: float) -> bool:
        """May ``task_id`` start now?  If so its peak is claimed until :meth:`release`."""
        if self._waits_for_older(task_id):
            self._count_wait(task_id, now)
            self._denied[task_id] = now
            return False  # no waiter posted: others' steps may go on meanwhile
        with self.files.locked():
            granted = self._decide(task_id)
            if granted:
                need = self.need(task_id)
                self._held[task_id] = _Held(self.files.claim(need), need)
        if granted:
            self._again.discard(task_id)
            self._count_wait(task_id, now)
            self._denied.pop(task_id, None)
            self.withdraw()
        else:
            self._count_wait(task_id, now)
            self._denied[task_id] = now
            self.files.post_waiter(first=task_id in self._again)
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
        if rss_kb and task_id < len(self.expected.kinds):
            self.expected.ended(task_id, rss_kb=rss_kb, running=list(self._seen.items()))

    def out_of_memory(self, task_id: int, returncode: int, *, rss_kb: int | None) -> bool:
        """Was this failure the kernel's OOM killer, and is the step worth one more run?
        Exit 137 (or -9) is a SIGKILL fast_nvcc did not send; a tool whose child was killed
        (gcc's cc1plus) fails otherwise, and the cgroup's oom_kill count says so."""
        after = self._evicted.pop(task_id, None)
        if after is not None:  # fast_nvcc.machine.pressure killed it: it runs again once that step ends
            self._after[task_id] = after
            self.expected.killed(task_id, rss_kb=rss_kb)
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
        self.expected.killed(task_id, rss_kb=rss_kb)
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
            self._raise_claim(task_id, self.expected.grown(task_id, size))

    def _raise_claim(self, task_id: int, size: int) -> None:
        with self._stopped_lock:  # not while release() drops it
            held = self._held.get(task_id)
            if held is None or size <= held.bytes * RAISE_AT:
                return
            with self.files.locked(), contextlib.suppress(FileNotFoundError):  # readers see one name
                self._held[task_id] = _Held(self.files.raised(held.claim, size), size)

    def evict(self, task_id: int, *, after: str) -> None:
        """``task_id`` is about to be killed to make room for the step whose claim key is
        ``after``: it runs again, once, when that one has ended (its work is lost either way,
        and a second kill would not be room for ``after`` either)."""
        self._evicted[task_id] = after

    def _waits_for_older(self, task_id: int) -> bool:
        after = self._after.get(task_id)
        if after is None:
            return False
        if self.files.is_live_claim(after):
            return True
        del self._after[task_id]
        return False

    def withdraw(self) -> None:
        """Nothing of ours waits for memory now: others go first."""
        self.files.withdraw()

    # -- steps stopped for memory (fast_nvcc.machine.pressure) ----------------------------------------

    def held_keys(self) -> dict[int, str]:
        """Task -> ``<pid>-<n>``, its claim's key, for each running step of ours."""
        held = list(self._held.items())
        return {task_id: key for task_id, h in held if (key := claim_key(h.claim.path)) is not None}

    def mark_stopped(self, task_id: int) -> None:
        with self._stopped_lock:
            held = self._held.get(task_id)
            if held is not None and task_id not in self._stopped:
                self._stopped[task_id] = self.files.stop_marker(held.claim)

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
        return self.files.stopped_among(self.files.names())

    def close(self) -> None:
        for task_id in self.stopped():
            self.unmark_stopped(task_id)
        for held in self._held.values():
            held.claim.drop()
        self._held.clear()
        self.files.close()

    # -- the decision ---------------------------------------------------------------------

    def _decide(self, task_id: int) -> bool:
        names = self.files.names()
        claims = [(pid, size) for pid, size in map(parse_claim, names) if pid]
        if self._again and task_id not in self._again:
            return False  # a step of ours killed for memory waits: nothing else of ours starts first
        if self.files.someone_ahead(names):
            return False
        if self.files.stopped_among(names):
            return False  # memory ran short: a step is stopped until there is room (fast_nvcc.machine.pressure)
        if not claims:
            return True  # with no claim anywhere, one step always starts: plain nvcc's way
        need = self.need(task_id)
        headroom = self._sample()
        reserve = reserve_for(headroom.limit)
        if need + sum(size for _, size in claims) + reserve <= headroom.free:
            return True  # the cheap check: as if no running step held anything yet
        live = self.files.live_claims(names, [h.claim for h in self._held.values()])
        if not live:
            return True
        return fits(need, free=headroom.free, claimed=self.live.claimed(live), reserve=reserve)

    def holding(self, pids: Mapping[int, int]) -> dict[int, int]:
        """Task -> what its running step holds (its process tree's RSS), for ``pids``: task ->
        its step's pid (for :meth:`observe`)."""
        return self.live.holding(pids)

    def _sample(self) -> Headroom:
        now = time.monotonic()
        if now - self._sampled >= self.SAMPLE_EVERY:
            self._headroom = read_headroom(self.cgroups)
            self._sampled = now
        return self._headroom


def budget_from_environment(
    env: Mapping[str, str], pool_directory: str, *, peaks: Sequence[int], kinds: Sequence[tuple[str, str]],
    learned: Sequence[bool],
) -> MemoryBudget | None:
    """The machine-wide budget, unless FAST_NVCC_MEMORY=0 or the pool directory is unusable
    (then no budget: the compile runs as before)."""
    if not switch(env, "FAST_NVCC_MEMORY"):
        return None
    cgroups = this_process_cgroups()
    try:
        return MemoryBudget(budget_directory(pool_directory, cgroups), peaks=peaks, kinds=kinds, learned=learned,
                            cgroups=cgroups)  # fmt: skip
    except OSError:
        return None
