"""A running step with slack gives its core to a split step on a longer path.

A started step keeps its core to its end, and in a build where every compile is long that
decides too early: TE's seven long sources on 16 cores (2026-11-27, docs/benchmarks.md) start
seven host compiles and seven ciccs in the first seconds, so when ``gelu_grouped.cu``'s split
cicc, the build's longest path, reached its parallel phase it got 2-4 cores and took 183.5 s,
where alone it takes 93.3 s; the host compiles holding the cores ended long before their own
ciccs.  So a split step's threads that wait for a core take one from a running step whose
path is much shorter:

* **Who asks.**  A split step whose runnable threads want more cores than it holds, refused a
  free one, posts its ask on the pool (``asks/``): its remaining path on the cores it holds
  (:attr:`Grant.asking <fast_nvcc.run.core_grants.Grant.asking>`), which falls as it widens.
  Only a split step that another long step follows (a cicc, whose ptxas comes after) asks a
  running step to stop (``s-`` beside its ask): a split ptxas is its compile's last long
  step, and its threads are the work that fills the cores at the build's end, where a step
  stopped for it would run alone on one core (:data:`STOPS_FOR`).  A split cicc refused a
  core by its own run's -j (the usable CPUs by default: its compile holds them all, as on 2
  cores a cicc beside its host compile) posts nothing: only a step of its own compile can free
  a -j slot, and that compile stops its lowest step with slack for it, whatever other compiles
  hold (:func:`step_to_stop`).
* **Who gives.**  Every compile posts the lowest rank among its running steps that could give a
  core (``slack/``): a step that holds a slot of the pool, has :data:`FLOOR` seconds or more
  of its work left, and is not itself split.  The compile that holds the lowest of
  the machine stops that step (SIGSTOP, its process group) when the best ask is at least
  :data:`MARGIN` times its rank, and gives its slot back: one step a look, so the cores move
  one at a time, as the ask falls, to where the paths say (:func:`to_stop`).
* **How it goes on.**  A stopped step waits in its compile's ready queue at its rank, like any
  step, and goes on (SIGCONT) when the pool grants it a slot again: when the split threads end
  or narrow and cores go back (:mod:`.core_grants`: cores follow use), or as the split step's
  rank falls below it with the work its threads have done (learned builds:
  :meth:`ReadyQueue.remaining <fast_nvcc.run.ready_queue.ReadyQueue.remaining>`).  While one is stopped
  its compile never asks for a first step (:attr:`fast_nvcc.machine.slots.Slots.paused`): rule
  1 is for compiles that have run nothing.  A ready step of the compile that ranks below its
  own split step's ask waits too, not asking the pool (:func:`waits_for_own_ask`).
* **What it costs.**  The stopped step keeps its memory (as one stopped by the memory guard,
  :mod:`fast_nvcc.machine.pressure`), and its time stopped is not its cost: the records keep
  it apart (``yielded``), and history learns the step's running time.

Only the machine-wide pool ranks its waiters, so only there does a step stop, and only while
the build tool holds no compile back (every compile competes by rank,
:meth:`fast_nvcc.machine.slots.PoolSlots.competes`): a stopped step keeps its compile's job of
ninja's ``-j``, and with compiles waiting for one its work would move to the build's end, as
under FAST_NVCC_SPLIT_EARLY=1 (docs/scheduling.md).  Under make's jobserver every step keeps its
token.  The decision is :func:`to_stop` (:func:`step_to_stop`), unit-tested with
made-up ranks; :class:`fast_nvcc.run.holdings.Holdings` applies it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..machine.pool_files import Told

if TYPE_CHECKING:
    from .ready_queue import ReadyQueue

# A split step must ask at this many times a running step's path to take its core: near equal
# paths gain nothing worth a stop, and a first build's ranks are estimates.
MARGIN = 1.25
# The split steps a running step stops for: those another long step follows (ReadyQueue.FOLLOWERS).
# TE's seven learned build (2026-11-29, docs/benchmarks.md round 26) stopped its host compiles
# for the split ptxas from 115 s, and they went on only as the ptxas ended, at 204-219 s: the
# build ended at 266 s with 7 host compiles on 16 cores, 1.24 of its cpu floor.
STOPS_FOR = ("cicc",)
# A step expected to take less than this ends before a stop would pay (the pool's long steps,
# ReadyQueue.OVERRUN_FLOOR).
FLOOR = 2.0


class Candidate(NamedTuple):
    """A running step of ours that could give its core: its id and its rank (remaining path)."""

    task_id: int
    rank: float


def has_slack(rank: float, *, build_left: float | None) -> bool:
    """Would a step on a remaining path of ``rank`` seconds still end before the build could,
    stopped a while: before ``build_left`` (:meth:`BuildLeft.soonest`: the work the machine's
    compiles have left over its cores, or a split step's path where longer), with MARGIN to
    spare?  Where every core is busy, a build ends at its cpu floor at the soonest, and a step
    whose path reaches it has no time to lose: in FlashAttention's advised build (2026-11-29,
    docs/benchmarks.md round 24) the unsplit compile whose own path was the build's floor
    stopped 7.3 s for split steps and ended the build 8 s above that floor.  None (not known):
    only the ranks decide."""
    return build_left is None or rank * MARGIN <= build_left


def going_on_rank(rank: float, *, build_left: float | None) -> float:
    """The rank a stopped step asks to go on at: its own while it has slack (:func:`has_slack`),
    else the build's end (``build_left``), above the split steps whose paths end before it: as
    the build's work is done its end nears and the stopped step's slack shrinks, and it takes a
    core back while a quarter of its path is still to spare."""
    return rank if has_slack(rank, build_left=build_left) else max(rank, build_left or 0.0)


def gives_way(rank: float, *, best_ask: float | None, build_left: float | None) -> bool:
    """Does a step on a remaining path of ``rank`` give way to a split step of the machine that
    asks for a core at ``best_ask``: at MARGIN times that rank or more, the step having slack
    (:func:`has_slack`)?  A running step then may stop (:func:`to_stop`), and a stopped one,
    asking to go on at ``rank`` (:func:`going_on_rank`), stays stopped though a slot is free:
    the slot it gave is the asker's.  Before the second use the stopped step took its slot back
    at the next turn, before the split step's grant (polled a tenth of a second apart) could
    widen onto it, and was stopped again at the next look (TE's seven learned build,
    2026-11-29: host compiles stopped 6 to 13 times, most stops ending within a second of the
    last).  While it gives way it waits on the pool's board for no slot (Holdings.take): a
    request it left there made split steps give cores to a waiter that would not take them
    (round 43)."""
    return best_ask is not None and best_ask >= rank * MARGIN and has_slack(rank, build_left=build_left)


def why_going_on(rank: float, *, best_ask: float | None, build_left: float | None) -> str:
    """Why a stopped step on a remaining path of ``rank`` goes on as it takes a slot back (it
    no longer :func:`gives_way`): ``no slack`` (its path nears the build's soonest end,
    :func:`has_slack`), ``no ask`` (no split step of the machine asks for a core), or ``ask
    below`` (the best ask is under MARGIN times its rank).  FAST_NVCC_LOG's ``went_on``."""
    if not has_slack(rank, build_left=build_left):
        return "no slack"
    return "no ask" if best_ask is None else "ask below"


def to_stop(candidates: Sequence[Candidate], *, best_ask: float | None,
            lowest_elsewhere: float | None, build_left: float | None = None) -> int | None:  # fmt: skip
    """The step of ours to stop now, if any: our lowest-ranked candidate, when a split step of
    the machine asks for a core at ``best_ask``, at least MARGIN times that rank, it has slack
    against the build's end (:func:`has_slack`), and no other compile's candidate ranks lower
    (``lowest_elsewhere``: the lowest they told; that compile gives first)."""
    if not candidates or best_ask is None:
        return None
    lowest = min(candidates, key=lambda c: (c.rank, -c.task_id))
    if not gives_way(lowest.rank, best_ask=best_ask, build_left=build_left):
        return None
    if lowest_elsewhere is not None and lowest_elsewhere < lowest.rank:
        return None
    return lowest.task_id


def step_to_stop(slack: Sequence[Candidate], *, competes: bool, own_ask: float | None,
                 pool: Callable[[], tuple[float | None, float | None]], build_left: float | None) -> int | None:  # fmt: skip
    """The step of ours to stop now, of those with slack (``slack``), if any.  Where our own
    split cicc was refused a core by our -j alone (``own_ask``,
    :attr:`Grants.stopping_own <fast_nvcc.run.core_grants.Grants.stopping_own>`), our lowest
    step for it: only a step of ours frees a -j slot, whatever other compiles hold.  Else for
    the machine's best ask, against the lowest step other compiles told (``pool``:
    :meth:`fast_nvcc.machine.slots.Slots.yield_to`), and only while every compile ``competes``
    by rank: while the build tool holds compiles back, a step stopped for another compile's
    split step would keep its job from the compiles it holds back."""
    if own_ask is not None and slack:
        return to_stop(slack, best_ask=own_ask, lowest_elsewhere=None, build_left=build_left)
    if not (competes and slack):
        return None
    best_ask, lowest_elsewhere = pool()
    return to_stop(slack, best_ask=best_ask, lowest_elsewhere=lowest_elsewhere, build_left=build_left)


def best_of(*asks: float | None) -> float | None:
    """The best of the asks a stopped step gives way to (None: none asks)."""
    return max((a for a in asks if a is not None), default=None)


class BuildLeft:
    """How soon the build could end, on the machine-wide pool's directory (``left/``): each
    compile tells its work left less what its running steps have done (learned costs only), and
    their sum over the pool's cores is the soonest end were every core busy; a compile whose
    split steps' paths run longer, even on a core per thread, tells that path too, and the build
    ends no sooner (:func:`has_slack`)."""

    def __init__(self, directory: str, cores: int) -> None:
        self.left = Told(os.path.join(directory, "left"), "l-")
        self.paths = Told(os.path.join(directory, "left"), "p-")
        self.cores = max(1, cores)

    def look(self, queue: ReadyQueue, running: Iterable[int], done: Callable[[int], float], *,
             path: float | None = None) -> float | None:  # fmt: skip
        """Tell our work left (``queue``'s) less what our ``running`` steps have ``done`` (seconds
        of their work) and our split steps' ``path`` on a core per thread, and read how soon the
        build could end: only where our estimates have shown credible (a learned build); a first
        build's per-tool defaults say little of it, and there the ranks alone decide."""
        if not queue.credible or queue.work_left is None:
            self.tell(None)
            return None
        self.tell(queue.work_left - sum(queue.expected(t) - queue.left(t, done(t)) for t in running), path=path)
        return self.soonest()

    def tell(self, seconds: float | None, *, path: float | None = None) -> None:
        """Ours now, in whole seconds (a claim is renamed only when its value moves by one);
        None: not known."""
        self.left.tell(None if seconds is None else round(max(0.0, seconds)))
        self.paths.tell(None if seconds is None or path is None else round(max(0.0, path)))

    def soonest(self) -> float | None:
        left = self.left.values()
        return max([sum(left) / self.cores, *self.paths.values()]) if left else None

    def close(self) -> None:
        self.left.close()
        self.paths.close()


def waits_for_own_ask(rank: float, *, asking: float | None, short: bool) -> bool:
    """Does a ready step of rank ``rank`` wait, not asking the pool, while a split step of its
    own run asks for a core at ``asking`` (:attr:`.core_grants.Grants.asking`; None: none
    asks)?  Yes where the split step ranks better, a step a moment long aside.  The pool's board
    holds one request per process: a host compile that asked for a slot at its own rank moved the
    run's request below its split step's, so the split steps of other compiles that had given
    that split step a core took the core back at their next poll, and gave it again when the
    request moved back up (TE's whole library split, 2026-12-07, round 47: cast_grouped.cu's split
    ptxas swung from four cores to one and back 88 times in 19 s for swiglu_grouped.cu's, which
    held one core for 110 s while its host compile waited 104 s)."""
    return asking is not None and not short and rank < asking
