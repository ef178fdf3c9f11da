"""Split steps share the machine: a step told ``-split-compile N`` runs on the cores the pool
grants it, from one up to N.

nvcc's ``--split-compile N`` gives cicc and ptxas (and nvlink under ``-dlto``) N threads that
optimize the code side by side.  The object depends on N only, not on how many cores the threads
get (docs/nvcc-facts.md), so the cores are ours to hand out:

* **A split step starts on one core**, like any step, and its threads are held to it (their CPU
  affinity), so that N threads do not crowd out the other compiles' steps early in a build.
* **The grant widens while its threads want cores**, one core per free slot: each extra core is
  one more shared slot (:mod:`.admission`), asked for at the step's rank on the cores it holds:
  its compile's remaining path from it, shortened for those cores as the split model says
  (:func:`on_cores`), so that a step on many cores asks after one on few with a path as long,
  and held at the rank it would have without that core.  Free cores then spread over the split
  steps so that their paths end together, rather than all going to the best-ranked one while
  the others run on one core (TE's seven split sources, 2026-11-27: four ptxas took 11-14 cores
  in turn while the build's last one ran on one for 42 s); with FAST_NVCC_SPLIT_EARLY=1 the
  pool ranks it beside compiles' first steps
  (:class:`fast_nvcc.machine.slots.Ask`): a free slot goes to the split step on a long path
  before a compile with a shorter one starts, so the build's longest pole gets its cores while
  other compiles still arrive, not in the tail.  A split step's threads are not all busy all
  the time: cicc runs its front end in one thread and only then optimizes in N, so a grant follows the threads that run or wait
  for a core (:func:`.step_threads.runnable_threads`): when compiles end and slots fall idle, the long poles
  of the build get them first, up to N, while they can use them.
* **With FAST_NVCC_LONGEST_FIRST=1** (experimental), a step whose source's split steps all have
  costs of their own in the history (:attr:`Grant.longest`, decided once per compile) asks at its
  path on a core per thread, however many it holds: the longest path takes the free cores first.
  Not the default: split_bound.py's model puts the most work first 0.5-3.5% ahead of the spread
  on TE's seven, but gated on the source's own costs it acted and was neutral there, 1.10 and
  1.13 of the floor against 1.12 and 1.11 (docs/benchmarks.md, rounds 37-38).
* **Cores follow use**: cores beyond the step's runnable threads, three looks in a row
  (:func:`idle`), go back at once, so that no ready step waits for a core nothing runs on.
  What the kernel saw of them is counted: the seconds its granted CPUs stood idle between
  looks (:attr:`Grant.cores_idle`, FAST_NVCC_LOG's ``cores_idle_seconds``), which tells a core
  its threads left idle from one they shared with another step (both are held and not used by
  the step's own threads).
* **It narrows again**, one core at a time, when a step of its own compile on as long a path
  (as the step would have without the core) waits for a slot, or when the pool has a waiter
  ranked MARGIN times better (a compile's first step on a longer path, or any step on a longer
  path once compiles compete by rank): the margin a stop asks for (:mod:`.yielding`), so that
  a stopped step does not win its core back by a near-equal rank and be stopped again; or,
  for a core it holds as an extra step, while steps run beyond the pool's size with no slot
  free for them.  FAST_NVCC_LOG says which (``narrowed``: "own", "rank", "over").  Its
  threads still want the core, so it asks on at its rank (:func:`asks_on`), and an ask
  stays posted for IDLE_LOOKS looks after its threads last wanted a core (:func:`kept_asks`).  A step
  of its own compile on a shorter path (a host compile beside the cicc of the build's longest
  compile) waits for its slot by rank, as any other compile's step does (docs/benchmarks.md,
  "Measurements behind constants in the code": ``narrowing``).
* **Under make's jobserver**, which ranks no one and starts no job without a token, the extra
  cores' tokens all go back every two seconds (make, blocked on the token pipe, gets those it
  waits for), and are taken again at the next poll.
* **Which cores**: each held core is an ``flock`` on ``cores/slot-K`` in the pool directory, so
  two split steps of the machine are not held to the same core; unpinned steps go wherever the
  kernel puts them.  Where every core is held already, it shares one.

The rules are :func:`on_cores`, :func:`idle`, :func:`narrowing`, :func:`widening_order`,
:func:`asks_on`, :func:`kept_asks` and :func:`stops_own` (unit-tested with made-up numbers); :class:`Grants` applies them to a run,
:func:`.step_threads.runnable_threads` says what a step's threads want, and
:func:`.step_threads.hold` sets a process tree's affinity.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..machine.cpus import idle_seconds, usable_cpus
from ..machine.pool_files import SlotLocks
from .yielding import MARGIN

if TYPE_CHECKING:
    from .admission import Admission
    from .task_records import Narrowed, Refused

class Grant:
    """A running split step and the cores it holds (``cores[0]`` is its own step's)."""

    __slots__ = (
        "again",
        "ask_kept",
        "cores",
        "cores_idle",
        "held_cpus",
        "idle_looks",
        "locked",
        "longest",
        "looked",
        "narrowed",
        "priority",
        "ran",
        "refused",
        "runnable",
        "serial",
        "serial_seconds",
        "stops",
        "task_id",
        "threads",
        "timeline",
    )  # fmt: skip

    def __init__(self, task_id: int, threads: int, priority: float = 0.0, *, cores: list[int] | None = None,
                 stops: bool = True, serial: float = 0.0, longest: bool = False) -> None:  # fmt: skip
        self.task_id = task_id
        self.threads = threads  # N: more cores than threads would idle
        # Its rank: its remaining path through its compile, as its compile ranks its steps (scaled
        # by how far its steps overran their estimates, ready_queue.py), less the work its threads
        # have done (``ran``) only where its compile's estimates have shown credible: else a pole
        # that overran its default estimate would fall back to a light compile's rank
        # (ReadyQueue.remaining; docs/benchmarks.md: a split step's rank).
        self.priority = priority
        self.cores: list[int] = [] if cores is None else cores
        self.stops = stops  # may a running step stop for its threads (yielding.STOPS_FOR)?
        self.serial = serial  # the share of its time more cores do not shorten (split_option.SERIAL_SHARE)
        # Its source's split steps have costs of their own in the history: it asks at its path
        # on a core per thread, the longest path first (:attr:`asking`).
        self.longest = longest
        self.locked: set[int] = set()  # those of ``cores`` we hold an flock on
        self.again = 0  # polls left to hold its threads again (threads made while we held them)
        self.timeline: list[tuple[float, int]] = []  # (when, cores) at each change
        # (when, why, for whom) it gave cores back: "idle" (its threads left them unused), "own"
        # (a step of its compile waits), "rank" (a better-ranked one of the pool waits: its
        # request, where the pool tells it), "over" (steps run beyond the pool's size),
        # "jobserver" (make's tokens)
        self.narrowed: list[Narrowed] = []
        # (when, why, the pool's reason, rank) its threads wanted a core and got none, each time
        # the reason changed (:meth:`refuse`): who else the pool served first.
        self.refused: list[Refused] = []
        # Its threads running or waiting for a core at the last look (None: unknown).
        self.runnable: int | None = None
        self.idle_looks = 0  # looks in a row that found it holding more cores than it wants
        # Looks its last ask stays posted though its threads want no more cores (:func:`kept_asks`).
        self.ask_kept = 0
        # Seconds its threads ran one at a time (or none ran), as the looks saw: its serial part,
        # which no core shortens (FAST_NVCC_LOG's serial_seconds; cicc's front end and tail).
        self.serial_seconds = 0.0
        # Core-seconds its threads ran, as the looks saw (at most one per core held): one core's
        # seconds of its work done, by which its rank falls (ReadyQueue.remaining).
        self.ran = 0.0
        self.looked: float | None = None  # when it was last looked at (None: not yet)
        # The CPUs its threads were held to since the last look, and the seconds the kernel
        # counted them idle while it held them (Grants.count_idle).
        self.held_cpus: frozenset[int] = frozenset()
        self.cores_idle = 0.0

    @property
    def width(self) -> int:
        return len(self.cores)

    @property
    def asking(self) -> float:
        """The rank it asks for another core at: its remaining path on the cores it holds, or,
        where its costs are known (``longest``), on a core per thread, however many it holds."""
        return on_cores(self.priority, self.threads if self.longest else self.width, serial=self.serial)

    @property
    def holding(self) -> float:
        """The rank it keeps its last extra core at: its remaining path without that core (where
        its costs are known, the rank it asks at)."""
        return self.asking if self.longest else on_cores(self.priority, self.width - 1, serial=self.serial)

    @property
    def want(self) -> int:
        """The cores its threads would use now: one per runnable thread, from one up to its
        threads (all of them while unknown)."""
        if self.runnable is None:
            return self.threads
        return max(1, min(self.threads, self.runnable))

    # Refusals kept for the log: a step refused for minutes changes its reason a few times a
    # second at most, but its log line must stay short.
    REFUSALS_KEPT = 200

    def refuse(self, now: float, why: str, pool: tuple[int, int, int] | None) -> None:
        """Its threads wanted a core at :attr:`asking` and got none: for want of a local slot
        (``why`` "jobs") or a shared one ("slot"; ``pool``: the pool's ahead, free and over,
        :attr:`fast_nvcc.machine.slots.Slots.refusal`).  Kept when the reason changes."""
        last = self.refused[-1] if self.refused else None
        if (last is None or (last[1], last[2]) != (why, pool)) and len(self.refused) < self.REFUSALS_KEPT:
            self.refused.append((now, why, pool, self.asking))

    def look(self, runnable: int | None, *, now: float | None = None) -> None:
        """What its threads do now (:func:`.step_threads.runnable_threads`; None: it has no live process), at
        ``now``: the time since the last look counts as serial when at most one thread runs."""
        if runnable is None:
            return
        if now is not None:
            if self.looked is not None:
                self.serial_seconds += now - self.looked if runnable <= 1 else 0.0
                self.ran += (now - self.looked) * min(self.width, runnable)
            self.looked = now
        self.runnable = runnable
        self.idle_looks = self.idle_looks + 1 if self.want < self.width else 0


def on_cores(priority: float, cores: int, *, serial: float) -> float:
    """A split step's remaining path ``priority`` (as its compile ranks its steps, on one core)
    on ``cores`` cores: the split model's ``s + (1 - s) / k`` of it, ``s`` its ``serial`` share.
    The whole path shrinks, not the step's own part only: the ptxas after a split cicc is
    split too, and the steps after it are short."""
    return priority * (serial + (1 - serial) / max(1, cores))


# Looks in a row (a tenth of a second apart) that find a step's threads using fewer cores than it
# holds before the rest go back: a thread that blocks for a moment keeps its core.  After one look
# TE's seven took 1.17 of their floor against 1.14, with more stops and fewer cores busy
# (docs/benchmarks.md, round 27).
IDLE_LOOKS = 3


def idle(grants: Iterable[Grant]) -> list[tuple[Grant, int]]:
    """The cores to give back because nothing runs on them: each step's cores beyond what its
    threads have wanted for IDLE_LOOKS looks in a row, and how many."""
    return [(g, g.width - g.want) for g in grants if g.width > g.want and g.idle_looks >= IDLE_LOOKS]


def narrowing(grants: Iterable[Grant], *, ours_waiting: float | None,
              outranked: Callable[[float], str | None]) -> tuple[Grant, str] | None:  # fmt: skip
    """The widened step to give a core back now and why, if any: the one that holds its last core at
    the lowest rank (:attr:`Grant.holding`; then the widest), when a step of this run ranked
    ``ours_waiting`` (None: none) waits for a slot and that step's remaining path is no longer
    than the widened step's would be without the core, or when the pool has a waiter ranked
    MARGIN times that or more: the margin a running step's stop asks for
    (:data:`fast_nvcc.run.yielding.MARGIN`), so that a stopped step does not take back, by a
    near-equal rank, the core it gave.  Without it TE's seven first build (2026-12-04, round
    41) ping-ponged: a split cicc narrowed for a stopped host compile ranked a hair above its
    last core, the host compile went on (no split step asked in that turn), was stopped again
    within 0.1-0.3 s, 40 stops in all and 154 narrowings, the cicc held to 2-3 cores.

    Why (FAST_NVCC_LOG's ``narrowed``): "own" for the step of this run, else ``outranked``'s
    answer for the pool's waiter: "rank" (one ranked that far above waits) or "over" (steps run
    beyond the pool's size, :meth:`fast_nvcc.machine.slots.PoolSlots.claimed`)."""
    widened = [g for g in grants if g.width > 1]
    if not widened:
        return None
    lowest = min(widened, key=lambda g: (g.holding, -g.width, g.task_id))
    if ours_waiting is not None and ours_waiting >= lowest.holding:
        return lowest, "own"
    why = outranked(lowest.holding * MARGIN)
    return (lowest, why) if why else None


def widening_order(grants: Iterable[Grant], *, ours_waiting: float | None = None) -> list[Grant]:
    """The steps whose threads want another core, in the order they ask for one: the longest
    remaining path on the cores each holds first (:attr:`Grant.asking`), then the narrowest;
    none asking at or below a step of this run that waits for a slot (``ours_waiting``, its
    rank)."""
    wanting = (g for g in grants if g.width < g.want and (ours_waiting is None or g.asking > ours_waiting))
    return sorted(wanting, key=lambda g: (-g.asking, g.width, g.task_id))


def kept_asks(grants: Iterable[Grant], *, ours_waiting: float | None = None) -> list[Grant]:
    """The steps that asked for a core and whose threads, at this look, want none they do not
    hold, best-ranked first: their ask stays posted for IDLE_LOOKS looks (:attr:`Grant.ask_kept`),
    as their idle cores are kept, so that a thread that blocks for a moment does not take the
    process's request on the board down to its next step's rank (a host compile far below), where
    any step ranked above that takes the free cores the long pole asked for: round 48's board
    test saw it in 1 run of 6 on two busy cores (tests/run/test_scheduler.py)."""
    kept = (g for g in grants if g.ask_kept and g.width >= g.want and (ours_waiting is None or g.asking > ours_waiting))
    return sorted(kept, key=lambda g: (-g.asking, g.width, g.task_id))


def stops_own(wanting: list[Grant], *, refused: str) -> float | None:
    """The rank at which a split step of this run (``wanting``: the :func:`widening_order`),
    refused a core by the run's own bound (``refused`` "jobs": -j, the usable CPUs by default),
    asks a running step of its own compile to stop (:mod:`.yielding`): a split cicc whose threads
    were seen wanting a core.  Only a step of ours frees a -j slot for it, so the ask is not
    posted on the pool, where another compile would stop a step for a core we cannot take.  On
    2 cores a split cicc beside its own host compile stayed on one core, its 16 threads runnable,
    until the host compile ended (gelu_grouped.cu, 2026-12-07: 88 s of its 227 s)."""
    if refused != "jobs":
        return None
    return next((g.asking for g in wanting if g.stops and g.runnable is not None), None)


def asks_on(wanting: list[Grant], *, narrowed: bool, refused: str) -> bool:
    """Does a split step of this run ask the pool for a core after this turn (``wanting``: the
    :func:`widening_order`)?  Yes while threads want one and the pool had no slot for them
    (``refused``: why the last widening was refused) or this turn gave a core to a better-ranked
    waiter (``narrowed``): the step's threads still want that core, at their rank.  Before, a
    turn that narrowed posted no ask, and every stopped step of the machine went on at it: TE's
    seven first build (2026-12-04, round 42) stopped its host compiles 36 times, 23 going on
    for "no ask" and 18 stopped again within a second, the split ciccs swinging between 2 and 3
    cores every 0.1-0.3 s; its learned build without the margin, 35 stops, all going on for "no
    ask"."""
    return bool(wanting) and (narrowed or refused == "slot")


class Grants:
    """The split steps of one run: their cores, widened and narrowed as the slots allow."""

    # Under make's jobserver nobody ranks the waiters, and make starts no job without a token:
    # every this many seconds the extra cores' tokens go back at once, so that make (blocked on
    # the token pipe) gets the ones it wants; the rest are taken again at the next poll.
    YIELD_SECONDS = 2.0

    def __init__(self, admission: Admission, *, pool_directory: str | None,
                 pin: Callable[[int, frozenset[int]], None], cpus: Iterable[int] | None = None,
                 now: Callable[[], float] = time.monotonic, known: bool = False,
                 idle_of: Callable[[], Mapping[int, float] | None] = idle_seconds) -> None:  # fmt: skip
        self.admission = admission
        # Are the run's split steps' costs known, and the longest path first asked for (Grant.longest)?
        self.known = known
        self.now = now  # the run's clock, for each grant's timeline
        self.pin = pin  # (task, CPUs): hold the task's processes to those CPUs
        self.cpus = sorted(usable_cpus() if cpus is None else cpus)  # the CPUs a grant's cores name
        self.idle_of = idle_of  # each CPU's idle seconds so far (cpus.idle_seconds)
        self._idle: Mapping[int, float] | None = None  # ... at the last look
        self._running: dict[int, Grant] = {}
        self.asking: float | None = None  # the rank a step waits for a core at, since the last poll
        # The rank a split cicc refused a core by -j alone asks a step of our own compile to stop
        # at (only ours can free a -j slot for it: :func:`stops_own`); not posted on the pool.
        self.stopping_own: float | None = None
        self._yielded = time.monotonic()
        self.locks: SlotLocks | None = None
        if pool_directory is not None:
            try:
                directory = os.path.join(pool_directory, "cores")
                os.makedirs(directory, mode=0o700, exist_ok=True)
                self.locks = SlotLocks(directory, len(self.cpus))
            except OSError:
                self.locks = None  # cores chosen at random: they may be shared

    def __bool__(self) -> bool:
        return bool(self._running)

    def ran(self, task_id: int) -> float | None:
        """The core-seconds a running split step's threads ran (None: not one of ours)."""
        grant = self._running.get(task_id)
        return None if grant is None else grant.ran

    def path_on_threads(self) -> float | None:
        """The longest remaining path of our running split steps were each to hold a core per
        thread: our compile ends no sooner (None: none runs; yielding.BuildLeft)."""
        return max((on_cores(g.priority, g.threads, serial=g.serial) for g in self._running.values()), default=None)

    def start(self, task_id: int, threads: int, priority: float, *, serial: float = 0.0,
              stops: bool = True) -> frozenset[int]:  # fmt: skip
        """A split step starts: the one core it is held to."""
        self.count_idle()
        grant = Grant(task_id, threads, priority, serial=serial, stops=stops, longest=self.known)
        self._running[task_id] = grant
        self._add_core(grant)
        grant.held_cpus = self.cpus_of(grant)
        grant.timeline.append((self.now(), 1))
        return grant.held_cpus

    def end(self, task_id: int) -> Grant | None:
        """A split step ended: its extra slots and its cores go back."""
        if task_id not in self._running:
            return None
        self.count_idle()
        grant = self._running.pop(task_id)
        if not self._running and self.asking is not None:
            self.asking = None  # (no poll runs without a split step)
            self.admission.slots.ask_core(None)
        while grant.width > 1:
            self._drop_core(grant)
            self.admission.narrow()
        self._drop_core(grant)
        return grant

    def poll(self, *, ours_waiting: float | None, priority_of: Callable[[int], float],
             runnable_of: Callable[[int], int | None] | None = None) -> None:  # fmt: skip
        """Once per turn of the run's loop: give idle cores back, and one more core if asked
        to, or take the free ones the threads want.  ``ours_waiting``: the rank of this run's
        best step that waits for a shared slot (None: none waits).  ``runnable_of``: a step's
        runnable threads (:func:`.step_threads.runnable_threads`); without it every step wants all its threads."""
        if not self._running:
            return
        self.count_idle()
        for grant in self._running.values():
            grant.priority = priority_of(grant.task_id)
            if runnable_of is not None:
                grant.look(runnable_of(grant.task_id), now=self.now())
        changed: list[Grant] = []
        stopping: float | None = None  # the rank its threads ask a running step to stop at (yielding.STOPS_FOR)
        self.asking = self.stopping_own = None
        if not self.admission.slots.short_steps_free and time.monotonic() - self._yielded >= self.YIELD_SECONDS:
            self._yielded = time.monotonic()  # (short_steps_free: the pool, which ranks its waiters)
            for grant in self._running.values():
                if grant.width > 1:
                    grant.narrowed.append((self.now(), "jobserver", None))
                    while grant.width > 1:
                        self._drop_core(grant)
                        self.admission.narrow()
                    changed.append(grant)
            self._pin(changed)
            return
        for grant, count in idle(self._running.values()):
            grant.narrowed.append((self.now(), "idle", None))
            for _ in range(count):
                self._drop_core(grant)
                self.admission.narrow()
            grant.idle_looks = 0
            changed.append(grant)
        narrowed = narrowing(self._running.values(), ours_waiting=ours_waiting,
                             outranked=functools.partial(self.admission.slots.claimed, pole=True))  # fmt: skip
        if narrowed is not None:
            give_back, why = narrowed
            # (for whom: two split steps of two compiles gave a core each to one waiter at once,
            # and took it back a tenth of a second later, docs/benchmarks.md round 44)
            waiter = self.admission.slots.waiter_before(give_back.holding * MARGIN, pole=True) if why == "rank" else None
            give_back.narrowed.append((self.now(), why, waiter))
            self._drop_core(give_back)
            self.admission.narrow()
            changed.append(give_back)
            order = widening_order(self._running.values(), ours_waiting=ours_waiting)
        else:
            # One core at a time to the step that asks at the best rank, which falls as it widens;
            # no slot for the best-ranked: none for those behind it either.
            while (order := widening_order(self._running.values(), ours_waiting=ours_waiting)) \
                    and self.admission.widen(order[0].asking):
                self._add_core(order[0])
                order[0].ask_kept = 0  # (its threads got the core)
                if order[0] not in changed:
                    changed.append(order[0])
            if order:  # (the best-ranked was refused: FAST_NVCC_LOG's refused)
                refused = self.admission.refused
                order[0].refuse(self.now(), refused, self.admission.slots.refusal if refused == "slot" else None)
                self.stopping_own = stops_own(order, refused=refused)
        # Threads that want a core and found no slot ask on (a running step with slack may give
        # its core, yielding.py), also those of a step that just gave one to a better waiter: had
        # that turn posted no ask, every stopped step of the machine would go on ("no ask") and be
        # stopped again at the next ask (:func:`asks_on`).
        asked = order if asks_on(order, narrowed=narrowed is not None, refused=self.admission.refused) else []
        asking = asked or kept_asks(self._running.values(), ours_waiting=ours_waiting)
        for grant in self._running.values():  # (kept for IDLE_LOOKS looks after the last that asked)
            grant.ask_kept = IDLE_LOOKS if grant in asked else max(0, grant.ask_kept - 1)
        if asking:
            self.asking = asking[0].asking
            # (only for threads seen wanting a core: before its first look a step wants them all)
            stopping = next((g.asking for g in asking if g.stops and g.runnable is not None), None)
        self.admission.slots.ask_core(self.asking, stop=stopping)
        self._pin(changed)

    def count_idle(self) -> None:
        """Each running step's granted CPUs' idle seconds since the last look, as the kernel
        counted them, added to its :attr:`Grant.cores_idle`."""
        idle = self.idle_of()
        if idle is not None and self._idle is not None:
            before = self._idle
            for grant in self._running.values():
                grant.cores_idle += sum(max(0.0, idle.get(c, 0.0) - before.get(c, 0.0)) for c in grant.held_cpus)
        self._idle = idle

    def _pin(self, changed: list[Grant]) -> None:
        """Hold the changed steps' threads to their cores, now and at the next two polls."""
        for grant in changed:
            grant.again = 3
            grant.timeline.append((self.now(), grant.width))
        for grant in self._running.values():
            grant.held_cpus = self.cpus_of(grant)
            if grant.again:
                grant.again -= 1
                self.pin(grant.task_id, self.cpus_of(grant))

    def close(self) -> None:
        for task_id in list(self._running):
            self.end(task_id)
        self.asking = None
        self.admission.slots.ask_core(None)
        if self.locks is not None:
            self.locks.close()

    def _add_core(self, grant: Grant) -> None:
        held = {c for g in self._running.values() for c in g.locked}
        if self.locks is not None:
            free = self.locks.lock_free(1, skip=held)
            if free:
                grant.cores.append(free[0])
                grant.locked.add(free[0])
                return
        spare = [c for c in range(len(self.cpus)) if c not in grant.cores] or list(range(len(self.cpus)))
        grant.cores.append(random.choice(spare))

    def _drop_core(self, grant: Grant) -> None:
        core = grant.cores.pop()
        if core in grant.locked:
            grant.locked.discard(core)
            if self.locks is not None and core not in grant.cores:
                self.locks.unlock(core)

    def cpus_of(self, grant: Grant) -> frozenset[int]:
        return frozenset(self.cpus[c] for c in grant.cores)
