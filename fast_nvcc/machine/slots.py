"""Permission to run steps, shared with everything else building on the machine.

:class:`Slots` is what a run asks (and, alone, no sharing); which kind a compile gets is
:mod:`.slot_choice`'s.  Inside ``make -jN`` fast_nvcc is a GNU make jobserver client
(:mod:`.jobserver`).  Without a jobserver (ninja, a shell loop, several IDE builds), all fast_nvcc processes of the
user share one build-wide schedule (:class:`PoolSlots`, docs/scheduling.md): a machine-wide pool
of slots, one per usable CPU, on which no compile waits for its first step while another runs
extra steps, and a free slot goes to the ready step with the longest remaining path of the whole
build.  Every file of the pool means something only while its owner holds an ``flock`` on it, so
a killed compile never loses a slot nor leaves a claim.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import NamedTuple

from .buildtool import Saturation
from .pool_files import Claim, Request, RequestBoard, ScalesTold, SlotLocks, Told, WorkLeft, live
from .pool_rules import Admit, Ask, admit, slots_wanted


class Slots:
    """No sharing: just the local bound."""

    implicit = 1  # slots held without asking
    description = "no shared slots"
    # May a short step (fatbinary, as) run without a shared slot?  Only on fast_nvcc's own
    # pool, which ranks its waiters: make's tokens bound the whole build's commands.
    short_steps_free = False

    def __init__(self) -> None:
        self.held = 0  # extra slots currently held
        # Why the pool's rule said no to the last try_acquire that it refused: (requests ranked
        # before it, free slots it found, counted up to what it needed, first steps running over
        # the pool); None where no rule ranks waiters (FAST_NVCC_LOG's ``refused``).
        self.refusal: tuple[int, int, int] | None = None

    def try_acquire(self, priority: float = 0.0, *, pole: bool = False) -> bool:
        """One more slot for a step whose remaining path through its compile is ``priority``
        seconds; False: not now (ask again).  ``pole``: a core for a running split step
        (fast_nvcc.run.core_grants), which the pool may rank beside compiles' first steps
        (:class:`Ask`)."""
        self.held += 1
        return True

    def outranked(self, priority: float) -> bool:
        """Would a step of another compile have a better claim on an idle slot of ours than an
        extra step of ``priority``?  (Only the pool can tell; make's tokens are first come.)"""
        return False

    def claimed(self, priority: float, *, pole: bool = False) -> str | None:
        """Should a split step give back an extra core it holds at rank ``priority``
        (fast_nvcc.run.core_grants), and why: "rank" (a better claim waits) or "over" (steps
        run beyond the pool's size); None: it keeps the core."""
        return "rank" if self.outranked(priority) else None

    def waiter_before(self, priority: float, *, pole: bool = False) -> Request | None:
        """The best waiter of another compile ranked before a split step's core held at
        ``priority``, that :meth:`claimed` gave it back to for "rank" (FAST_NVCC_LOG's
        ``narrowed``); None: none, or only the machine-wide pool can tell."""
        return None

    def withdraw(self) -> None:
        """This process waits for no slot now."""

    def wait_at(self, priority: float | None, *, pole: bool = False) -> None:
        """This process waits on the board at ``priority`` (as :meth:`try_acquire` would post it,
        taking nothing), or, None, for no slot (:meth:`withdraw`)."""
        if priority is None:
            self.withdraw()

    def competes(self) -> bool:
        """Does a step of this compile, which has run steps already, compete by rank for every
        slot, its next step included (rather than keep the slot its last step held)?"""
        return False

    def over_pool(self, commands: int) -> str | None:
        """With ``commands`` steps of this process running, does the newest run over the
        machine-wide pool, and why: "first" (a compile's step while others run extra ones, rule
        1) or "drain" (the compile nearest its end, rule 3)?  None: within the pool's N."""
        return None

    def settle(self) -> None:
        """A step of ours that runs over the machine-wide pool takes a slot that is free now."""

    def left(self, seconds: float) -> None:
        """This compile has about ``seconds`` of steps left to run (learned costs or defaults)."""

    def most_left(self) -> float | None:
        """The most work left that another compile of the machine told (None: none told)."""

    def tell_scale(self, scale: float) -> None:
        """This compile's long steps ran ``scale`` times their estimates (for its peers)."""

    def peer_scale(self) -> float | None:
        """How many times their estimates the other compiles' long steps ran (the median of
        what they told); None where nothing is known."""
        return None

    # Steps of this compile stopped to give their cores to split steps (fast_nvcc.run.yielding):
    # while one is, the compile asks by rank, never for a first step.
    paused = 0

    def ask_core(self, rank: float | None, *, stop: float | None = None) -> None:
        """A split step of this compile waits for a core at ``rank`` (:attr:`Grant.asking
        <fast_nvcc.run.core_grants.Grant.asking>`); None: none waits now.  ``stop``: the rank
        at which one that a running step may stop for waits (yielding.STOPS_FOR)."""

    def tell_slack(self, rank: float | None) -> None:
        """The lowest rank of this compile's running steps that could give their core to a
        split step (:mod:`fast_nvcc.run.yielding`); None: none could."""

    def yield_to(self) -> tuple[float | None, float | None]:
        """The best rank a split step of the machine waits for a core at, of those a running step
        may stop for (``stop`` of :meth:`ask_core`), and the lowest rank another compile told in
        :meth:`tell_slack` (None: none).  Only the pool can tell."""
        return None, None

    def release(self, count: int = 1) -> None:
        """Give back ``count`` of the slots held (all of them, if fewer)."""
        for _ in range(min(count, self.held)):
            self._give_back()

    def _give_back(self) -> None:
        self.held -= 1

    def release_all(self) -> None:
        self.release(self.held)
        self.withdraw()

    def close(self) -> None:
        self.release_all()


class PoolSlots(Slots):
    """The machine-wide pool, shared by every fast_nvcc process of the user: ``size`` lock
    files (a slot is an ``flock`` on one), a board of ranked requests, and markers of what the
    slots are used for: the rules are here, the files they read and write :mod:`.pool_files`'s.

    * **A compile's first step never waits for another compile's extra steps.**  When no slot
      is free it may run *over* the pool, as long as fewer compiles run over it than there are
      extra steps in flight (each extra step leaves a marker), and no extra step starts again
      until the pool is back under its size.  So at most ``size`` commands run at once, plus at
      most one first step per extra step that was running when its compile arrived.
    * **A free slot goes to the best-ranked waiter of the whole machine.**  A process that wants
      a slot posts a request whose file *name* is its rank (one listing sorts every waiter) and
      holds an ``flock`` on it (the next reader removes a dead process's).  The rank, best first:
      a compile that runs nothing (or, with FAST_NVCC_SPLIT_EARLY=1, a running split step that
      wants another core: :class:`Ask`) before one that wants an extra step; then the longer
      remaining path through its compile (learned costs, or per-tool defaults); then the earlier
      request.  A process takes a free slot only when fewer live requests rank ahead of it than
      there are free slots: with that setting rule 1 yields to a split step on a longer path,
      the build's tail (docs/scheduling.md; not the default yet).
    * **While the build tool holds compiles back, the compile nearest its end finishes first.**
      When ninja (or make without a jobserver) is at its ``-j``, it starts no compile until one
      ends: the DRAIN_COMPILES compiles with the least work left (``work/``) may then run
      ``size // 5`` extra steps over the pool in all, none while a compile waits for its first
      step, so that the tool starts the next ones (a long pole it held back, perhaps) sooner.
    * **A split step's threads may take a core from a step with slack** (:mod:`fast_nvcc.run.yielding`):
      a split step refused a core posts its ask (``asks/``), every compile its lowest step that
      could stop (``slack/``); an extra step leaves free slots to the asks ranked above it.

    No daemon: waiters poll (a listing and a few non-blocking locks), and the kernel drops a dead
    process's locks, so a killed compile loses no slot and leaves no claim.
    """

    implicit = 0
    short_steps_free = True
    DRAIN_COMPILES = 2  # how many of the compiles nearest their end may run steps over the pool
    DRAIN_SHARE = 5  # those compiles may run size // DRAIN_SHARE steps over the pool in all
    NEAREST_RECHECK = 0.1  # seconds: who is nearest its end is a listing and a few locks

    def __init__(self, directory: str, size: int, *, saturated: Callable[[], bool] | None = None,
                 poles: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.directory = directory
        self.poles = poles  # split steps' cores rank beside first steps (Ask.POLE; FAST_NVCC_SPLIT_EARLY=1)
        self.marks = os.path.join(directory, "marks")
        self.size = max(1, size)
        # At most a fifth more commands than cores (3 on 16, none below 5: docs/benchmarks.md).
        self.drain_extras = self.size // self.DRAIN_SHARE
        self.description = f"machine-wide pool of {self.size} slots in {directory}"
        self.board = RequestBoard(os.path.join(directory, "requests"))
        os.makedirs(self.marks, mode=0o700, exist_ok=True)
        self.work_left = WorkLeft(os.path.join(directory, "work"))
        self.scales = ScalesTold(os.path.join(directory, "scales"))
        self.asks = Told(os.path.join(directory, "asks"), "a-")
        self.stop_asks = Told(os.path.join(directory, "asks"), "s-")  # (yielding.STOPS_FOR)
        self.slack = Told(os.path.join(directory, "slack"), "k-")
        self.locks = SlotLocks(directory, self.size)
        self._saturated = saturated  # is the build tool above us full? (looked up when needed)
        self._nearest, self._nearest_checked = False, -1.0
        self._holds: list[_Hold] = []
        self._started = False  # has this compile run a step yet?

    # -- the board, the work left and the scales ---------------------------------------------

    def _first(self) -> bool:
        """Does this process ask for its compile's first step (rule 1), or for one that waits
        its turn by rank?"""
        return self.held == 0 and not self.paused and not self.competes()

    def competes(self) -> bool:
        """Once a compile has run a step, while the build tool holds no compile back, its
        steps take their turn by rank like extra ones.  Rule 1 is for compiles that have run
        nothing; when every compile has started (ninja -j above the compile count, or no build
        tool), keeping a slot between steps only because it was the compile's first one left
        each compile one step at a time, with idle cores no extra step could take (docs/benchmarks.md)."""
        if not self._started:
            return False
        if self._saturated is None:
            self._saturated = Saturation.of_this_process()
        return not self._saturated()

    def withdraw(self) -> None:
        self.board.withdraw()

    def wait_at(self, priority: float | None, *, pole: bool = False) -> None:
        if priority is None:
            return self.withdraw()
        self.board.post(priority, first=self._ask(pole) is not Ask.EXTRA)

    def left(self, seconds: float) -> None:
        self.work_left.tell(seconds)
        self._nearest_checked = -1.0  # look again at the next ask

    def most_left(self) -> float | None:
        return max(self.work_left.values(others=True), default=None)

    def tell_scale(self, scale: float) -> None:
        self.scales.tell(scale)

    def peer_scale(self) -> float | None:
        return self.scales.median_of_peers()

    def ask_core(self, rank: float | None, *, stop: float | None = None) -> None:
        self.asks.tell(rank)
        self.stop_asks.tell(None if rank is None else stop)

    def tell_slack(self, rank: float | None) -> None:
        self.slack.tell(rank)

    def yield_to(self) -> tuple[float | None, float | None]:
        asks = self.stop_asks.values()
        if not asks:
            return None, None  # the usual case: one listing
        others = self.slack.values(others=True)
        return asks[-1], others[0] if others else None

    def _asks_above(self, priority: float, *, own: bool) -> int:
        """Split steps waiting for a core above ``priority`` (``own``: ours too, not for our split step's
        core, whose last ask ranks higher as it runs) besides the board's waiters: an extra step leaves
        them free slots.  Another compile's ask that waits on the board at its rank is that waiter, once."""
        waiting, mine = self.board.waiting(), str(os.getpid())
        return sum(1 for rank, who in self.asks.told(others=not own) if rank > priority and (who == mine or waiting.get(who) != rank))

    def _may_drain(self) -> bool:
        if not self.drain_extras:
            return False
        now = time.monotonic()
        if now - self._nearest_checked >= self.NEAREST_RECHECK:
            self._nearest_checked, self._nearest = now, self.work_left.nearest(self.DRAIN_COMPILES)
        if not self._nearest:
            return False
        if self._saturated is None:
            self._saturated = Saturation.of_this_process()
        if not self._saturated():
            return False
        if self.board.first_steps_waiting():
            return False  # a compile waits for its first step, or a split step for a core: it goes first
        # A fifth of the pool for the whole machine, not for each compile: as "nearest its end"
        # passes from compile to compile, drains of a fifth each crowded the cores, each cicc
        # slower (docs/benchmarks.md).
        return len(live(self.marks, "extra-drain-")) < self.drain_extras

    # -- slots ---------------------------------------------------------------------------

    def _ask(self, pole: bool) -> Ask:
        """What this process asks for: its compile's first step (rule 1), a core for a running
        split step on a long path, or an extra step."""
        if self._first():
            return Ask.FIRST
        if pole and self.poles and not self.competes():
            return Ask.POLE
        return Ask.EXTRA

    def try_acquire(self, priority: float = 0.0, *, pole: bool = False) -> bool:
        ask = self._ask(pole)
        name = self.board.post(priority, first=ask is not Ask.EXTRA)
        over = len(live(self.marks, "over-")) if ask is Ask.EXTRA else 0
        ahead = self.board.ahead(name) + (self._asks_above(priority, own=not pole) if ask is Ask.EXTRA else 0)
        locked = self.locks.lock_free(slots_wanted(ask, ahead=ahead, over=over), skip={h.slot for h in self._holds})
        for slot in locked[1:]:
            self.locks.unlock(slot)
        how = admit(ask, ahead=ahead, free=len(locked), over=over,
                    extras=lambda: len(live(self.marks, "extra-")), may_drain=self._may_drain)  # fmt: skip
        if how is not Admit.SLOT and locked:
            self.locks.unlock(locked[0])
        if how is None:
            self.refusal = (ahead, len(locked), over)
            return False
        mark = {Admit.SLOT: {Ask.FIRST: None, Ask.POLE: "pole", Ask.EXTRA: "extra"}[ask],
                Admit.OVER: "over", Admit.DRAIN: "extra-drain"}[how]  # fmt: skip
        self._take(_Hold(slot=locked[0] if how is Admit.SLOT else None, mark=mark and self._mark(mark)))
        return True

    def over_pool(self, commands: int) -> str | None:
        if commands <= sum(1 for h in self._holds if h.slot is not None):
            return None
        kinds = [h.mark.path for h in self._holds if h.slot is None and h.mark is not None]
        return "drain" if any("extra-drain-" in k for k in kinds) else "first"

    def settle(self) -> None:
        """A first step that started over the full pool (rule 1) takes the first slot that
        frees, ahead of every waiter: it runs anyway, and while it held none the pool counted
        that core free.  On 2 cores a long cicc that had started over the pool so ran beside two
        light compiles' steps for 37 s, at 0.66 of a core (docs/benchmarks.md)."""
        for i, hold in enumerate(self._holds):
            if hold.slot is not None or hold.mark is None or not os.path.basename(hold.mark.path).startswith("over-"):
                continue
            locked = self.locks.lock_free(1, skip={h.slot for h in self._holds})
            if not locked:
                return
            hold.mark.drop()
            self._holds[i] = _Hold(slot=locked[0], mark=None)

    def _take(self, hold: _Hold) -> None:
        self._holds.append(hold)
        self.held += 1
        self._started = True
        self.withdraw()

    def _mark(self, what: str) -> Claim:
        return Claim.make(os.path.join(self.marks, f"{what}-{os.getpid()}-{next(_SERIALS)}"))

    def outranked(self, priority: float) -> bool:
        # (or the pool is over its size: no extra step)
        return self._waits_before(priority, self._ask(pole=False)) is not None or bool(live(self.marks, "over-"))

    def _waits_before(self, priority: float, ask: Ask) -> Request | None:
        """Another compile's best request on the board, if ranked before ``ask`` at ``priority``."""
        return self.board.best_before(self.board.rank_name(priority, first=ask is not Ask.EXTRA))

    def waiter_before(self, priority: float, *, pole: bool = False) -> Request | None:
        return self._waits_before(priority, self._ask(pole))

    def claimed(self, priority: float, *, pole: bool = False) -> str | None:
        """As outranked, and why ("rank", "over"), except that a step which started over the
        pool's size (while it was full) counts only until as many slots are free as such steps
        run: counted as over all their time, they kept every split step near one core while
        cores were idle (docs/benchmarks.md).  A ``pole``'s core yields by rank alone."""
        ask = self._ask(pole)
        if self._waits_before(priority, ask) is not None:
            return "rank"
        if ask is Ask.POLE:
            return None
        if not (over := len(live(self.marks, "over-"))):
            return None
        free = self.locks.lock_free(over, skip={h.slot for h in self._holds})
        for slot in free:
            self.locks.unlock(slot)
        return "over" if len(free) < over else None

    def release(self, count: int = 1) -> None:
        """Give back ``count`` slots (a split step's cores, extra ones, over the pool, the first),
        then wake the board's waiters once to see them all: not once per slot, 16 at a split step's end."""
        freed = False
        for _ in range(min(count, len(self._holds))):
            hold = max(self._holds, key=lambda h: (h.mark is not None and "/pole-" in h.mark.path,
                                                   h.mark is not None and "extra-" in h.mark.path, h.slot is None))  # fmt: skip
            self._holds.remove(hold)
            if hold.slot is not None:
                self.locks.unlock(hold.slot)
                freed = True
            if hold.mark is not None:
                hold.mark.drop()
            self.held -= 1
        if freed:
            self.board.wake()

    def close(self) -> None:
        self.release_all()
        for files in (self.work_left, self.scales, self.asks, self.stop_asks, self.slack, self.locks):
            files.close()


class _Hold(NamedTuple):
    """What a task of this compile holds of the pool: a slot (or none, over the pool), and the
    mark that tells the others."""

    slot: int | None  # None: running over the pool
    mark: Claim | None  # "extra-...", "extra-drain-..." or "over-...", for the others to count


_SERIALS = itertools.count(1)  # mark names, unique in the process even with several pools in it
