"""When memory runs short anyway, stop a step rather than lose it (docs/memory.md).

The budget (:mod:`.memory`) starts a step when its expected peak fits.  On a first build the
expectations are guesses: before the guess had a margin, every cicc started on the 800 MB
default until a peer had posted a peak, CUTLASS's sm_90a ciccs grew to 3-5 GB, and steps
admitted on guesses grew together past a cgroup's limit; the kernel killed two of them, their
work lost (docs/benchmarks.md).  A guess can always be wrong, so the guard watches what is free
while steps run:

* **Stop.**  When what is free falls below the low-water mark (:func:`low_water`) and is still
  falling, this compile stops (SIGSTOP, its process group) its youngest running step, unless
  that is the oldest running step of the machine: the oldest always goes on, so the build
  always makes progress.  At most one step a tick per compile.  A stopped step keeps its
  memory but takes no more, and while any step of the machine is stopped no new one starts
  (:meth:`.memory.MemoryBudget.reserve`).
* **Make room.**  When everything but the machine's oldest step is stopped and what is free
  still falls, under half the mark, the youngest stopped step is killed (SIGKILL) and runs
  again once the oldest has ended.  The kernel would kill the biggest step, most often the
  oldest, with the most work done: 220, 120 and 120 MiB growing in 384 MiB
  (tests/machine/test_pressure.py) lost the 220 MiB one to the OOM killer without this.
* **Continue.**  The oldest stopped step of the machine goes on (SIGCONT) once twice the
  low-water mark is free again, or when nothing else runs: one a tick, oldest first.
* **Look often only near the mark.**  Each look reads the cgroups' files and /proc/meminfo,
  about 1.4 ms of cpu, and each compile's guard looks on its own: ten looks a second cost a
  50 s compile 0.7 s of cpu (docs/benchmarks.md), in a build whose cores are full.  So a
  guard looks every :attr:`PressureGuard.TICK` only while free memory could reach twice the
  low-water mark within two looks at the fastest fall assumed (:data:`FALL_PER_CORE` a
  usable core) or seen; far above it, every :attr:`PressureGuard.SLOW_TICK` (:func:`next_look`).
* **Tell the budget.**  While less than half the limit is free, every ``OBSERVE_EVERY`` the
  guard reads what this compile's steps hold and the budget raises their claims and their
  kinds' peaks (:meth:`.memory.MemoryBudget.observe`), so that fewer steps are admitted on guesses
  that the running ones have already outgrown.

Which steps run and which are stopped, and since when, is in the budget's directory, shared
by every compile under the same limit: the claims ``c-<pid>-<n>-<bytes>`` (their age is the
file's) and a marker ``p-<pid>-<n>`` for each stopped one.  The decision itself is
:func:`decide`, a function of those and of two readings of what is free.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from .cpus import usable_cpus
from .headroom import read_headroom
from .memory import MemoryBudget, reserve_for
from .memory_files import claim_key
from .pool_files import is_live

# The fastest fall of free memory assumed between two looks, per usable core: a cicc grows at
# up to about 100 MB/s (low_water), twice that for room.
FALL_PER_CORE = 200 * 2**20  # bytes a second


def next_look(*, free: int, low: int, fall: float, tick: float, slow: float) -> float:
    """Seconds to the guard's next look: ``tick`` where ``free`` bytes, falling at ``fall``
    bytes a second, could reach twice the low-water mark ``low`` in two looks (the guard
    continues stopped steps there, and stops steps below ``low``); else up to ``slow``."""
    room = free - 2 * low
    if room <= 0 or fall <= 0:
        return tick
    return max(tick, min(slow, room / fall / 2))


class Claimed(NamedTuple):
    """A running step of the machine, as the budget's directory shows it."""

    key: str  # "<pid>-<n>", its claim's
    since: int  # when it was claimed, ns
    stopped: bool


def low_water(limit: int) -> int:
    """Below this much free, a growing build stops its youngest steps: 1/32 of the limit (1 GiB
    of 32 GiB: sixteen ciccs growing at 100 MB/s take 0.16 GB in one tick), at least twice the
    budget's reserve (98 MiB of 1.2 GiB)."""
    return max(2 * reserve_for(limit), limit // 32)


def decide(
    *, free: int, before: int | None, limit: int, steps: Sequence[Claimed], mine: Collection[str]
) -> tuple[str, str] | None:
    """("stop", key), ("evict", key), ("continue", key) or None: what this compile does now,
    given what is free now and a tick ``before``, the machine's running ``steps`` and which of
    them are ``mine``."""
    running = sorted((s for s in steps if not s.stopped), key=lambda s: (s.since, s.key))
    stopped = sorted((s for s in steps if s.stopped), key=lambda s: (s.since, s.key))
    low = low_water(limit)
    if free < low:
        if before is not None and free < before:
            ours = [s for s in running[1:] if s.key in mine]  # never the machine's oldest
            if ours:
                return "stop", ours[-1].key
            if free < low // 2 and len(running) == 1 and stopped and stopped[-1].key in mine:
                return "evict", stopped[-1].key  # the oldest still grows, and only the others hold room
        if running:
            return None
    if stopped and (free >= 2 * low or not running) and stopped[0].key in mine:
        return "continue", stopped[0].key
    return None


def survey(directory: str) -> list[Claimed]:
    """The machine's running steps: every live claim, stopped or not."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    stopped = {name[2:] for name in names if name.startswith("p-")}
    steps = []
    for name in names:
        key = claim_key(name)
        if key is None:
            continue
        path = os.path.join(directory, name)
        try:
            since = os.stat(path).st_mtime_ns
        except OSError:
            continue
        if is_live(path):
            steps.append(Claimed(key, since, key in stopped))
    return steps


class PressureGuard:
    """One compile's guard: a thread that ticks while the run lasts.  ``signal_step(task_id,
    signum)`` sends a signal to a running step's process group (False if it no longer runs);
    ``on_change(what, task_id)`` hears of each stop and continue; ``step_pids()`` gives each
    running step's pid (task -> pid), for what they hold."""

    TICK = 0.1  # seconds between looks near the low-water mark
    # Seconds between looks far above it (next_look), where what is free could not fall to twice
    # the mark within two looks at the fastest fall assumed: 2 s needs 1.6 GB of room on 2 cores,
    # 13 GB on 16.  (0.5 s cost a 24 s compile 48 looks, 70 ms of its cpu; 2026-12-02.)
    SLOW_TICK = 2.0
    OBSERVE_EVERY = 0.5  # seconds between reads of our steps' RSS, while memory is tight

    def __init__(
        self,
        budget: MemoryBudget,
        *,
        signal_step: Callable[[int, int], bool],
        on_change: Callable[[str, int], None] | None = None,
        step_pids: Callable[[], Mapping[int, int]] | None = None,
    ) -> None:
        self.budget = budget
        self.signal_step = signal_step
        self.on_change = on_change
        self.step_pids = step_pids
        self._before: int | None = None
        self._looked = 0.0  # when (time.monotonic()) _before was read
        self._wait = self.TICK  # to the next look
        self._fall = FALL_PER_CORE * len(usable_cpus())  # the fastest fall assumed, bytes a second
        self._observed = -1.0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fast_nvcc-pressure", daemon=True)

    def start(self) -> PressureGuard:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop ticking and let every step of ours go on."""
        self._closed.set()
        self._thread.join()
        for task_id in self.budget.stopped():
            self._continue(task_id)

    def _loop(self) -> None:
        while not self._closed.wait(self._wait):
            self.tick()

    def tick(self) -> None:
        headroom = read_headroom(self.budget.cgroups)
        now = time.monotonic()
        before, self._before = self._before, headroom.free
        elapsed, self._looked = now - self._looked, now
        seen = (before - headroom.free) / elapsed if before is not None and elapsed > 0 else 0.0
        low = low_water(headroom.limit)
        self._wait = next_look(free=headroom.free, low=low, fall=max(self._fall, seen), tick=self.TICK,
                               slow=self.SLOW_TICK)  # fmt: skip
        mine = self.budget.held_keys()  # task -> key
        if not mine:
            return
        self._observe(headroom.free < headroom.limit // 2)
        if headroom.free >= 2 * low and not self.budget.anything_stopped():
            return  # the usual case: nothing to look at
        self._wait = self.TICK  # a step is stopped (to go on soon), or the mark is near
        steps = survey(self.budget.directory)
        choice = decide(free=headroom.free, before=before, limit=headroom.limit, steps=steps,
                        mine=set(mine.values()))  # fmt: skip
        if choice is None:
            return
        what, key = choice
        task_id = next(t for t, k in mine.items() if k == key)
        if what == "stop":
            if self.signal_step(task_id, signal.SIGSTOP):
                self.budget.mark_stopped(task_id)
                self._tell("stop", task_id)
        elif what == "evict":
            oldest = min((s for s in steps if not s.stopped), key=lambda s: (s.since, s.key))
            self.budget.evict(task_id, after=oldest.key)
            self._tell("evict", task_id)
            self.signal_step(task_id, signal.SIGKILL)
        else:
            self._continue(task_id)

    def _observe(self, tight: bool) -> None:
        now = time.monotonic()
        if tight and self.step_pids is not None and now - self._observed >= self.OBSERVE_EVERY:
            self._observed = now
            self.budget.observe(self.budget.holding(self.step_pids()))

    def _continue(self, task_id: int) -> None:
        self.signal_step(task_id, signal.SIGCONT)
        self.budget.unmark_stopped(task_id)
        self._tell("continue", task_id)

    def _tell(self, what: str, task_id: int) -> None:
        if self.on_change is not None:
            self.on_change(what, task_id)
