"""Which ready tasks start now: the scheduler's one decision per turn, as a function of what is
ready and what the machine offers.

The ready tasks come best first (the longest remaining path, then nvcc's order:
:mod:`.ready_queue`).  Each starts as soon as the machine offers it room (:class:`Offer`: a -j
slot, a shared slot, memory; :mod:`.admission`), in that order, until one is refused:

* **After a failure** nvcc would have stopped: a task after the failed one in nvcc's order is
  discarded, never started.
* **A kind of task at its capacity** (it runs elsewhere, at most so many at once) waits, and
  everything behind it.
* **An optional task** (it only ever helps, on idle cores) refused room is dropped rather than
  kept waiting: by the time it would start, its help would come too late.
* **A task refused room** waits, and the tasks ranked behind it wait behind it, except the
  **short** ones (:mod:`fast_nvcc.graph.short`): they need no shared slot, only a -j slot and
  memory, so they start behind it.  Made to wait for a slot by rank, a compile's last fatbinary
  would hold its whole compile back for the length of another compile's step.  So do the steps
  a moment long (below), which take no slot at all: a cicc's module_id check waited 2.3 s
  behind its sibling's ptxas while the host compile, started meanwhile, took a sibling's stub
  for want of that check's (``benchmarks/tree``, 2026-12-01).
* **A step a moment long** (``moment``: it takes no slot, runs here and ends in a moment, a
  cicc's module_id check) holds the turn at its rank once it starts, and for as long as it runs
  (``running``, given back in the list): the steps it leads to will rank there, so the tasks
  ranked behind it wait for that moment, again except the short ones.  Otherwise the
  compile's slot, free as its cicc ends, went to the host compile that had waited beside the
  cicc, and the cicc's ptxas, the longer path, waited for another slot: 5-88 s in TE's whole
  library on 16 cores (docs/benchmarks.md, "rounds 11 to 13").

The offer is asked as the decision is made, since every task started takes room from the next;
the tests give it made-up room (tests/run/test_dispatch.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

# A step a moment long (a cicc's module_id check reads two small files) ends in milliseconds;
# one still running after MOMENT (a check that runs its cicc again) no longer counts as one:
# the scheduler stops holding the turn for it, and a host compile's front stops waiting for it.
MOMENT = 0.5  # seconds


class Ready(NamedTuple):
    """A ready task, as the decision sees it."""

    task_id: int
    order: tuple[int, int, int]  # its place in nvcc's order
    short: bool = False  # expected well under a second, and takes only a -j slot when short
    optional: bool = False
    moment: bool = False  # takes no slot and ends in a moment, and other steps follow it
    running: bool = False  # ... and it runs already (it holds its place, below)


class Offer(Protocol):
    """The room the machine offers the run now; each task started takes its share at once."""

    @property
    def free(self) -> bool:
        """Is a -j slot free (so that a refusal was the shared slots' or memory's)?"""

    def at_capacity(self, task_id: int) -> bool:
        """Do as many tasks of ``task_id``'s kind run elsewhere as that kind allows?"""

    def take(self, task_id: int, *, short: bool) -> bool:
        """Room for ``task_id`` to start now (a ``short`` one: without a shared slot)?  True
        takes it."""


class Turn(NamedTuple):
    """What one turn decided."""

    start: tuple[int, ...] = ()  # in the order they took their room
    dropped: tuple[int, ...] = ()  # optional tasks refused room
    discarded: tuple[int, ...] = ()  # tasks after the failure
    waiter: int | None = None  # the first task that waits for room, -j's included (the best ranked)
    blocked: bool = False  # ... for a shared slot, memory or a capacity (not only -j)
    moment: int | None = None  # the step a moment long that the tasks behind it wait for

    @property
    def waits(self) -> bool:
        """Does a task wait for room?"""
        return self.waiter is not None


def dispatch(ready: Sequence[Ready], offer: Offer, *, failed: tuple[int, int, int] | None = None) -> Turn:
    """Which of ``ready`` (best first) start now; ``failed``: the failed task's place in nvcc's
    order, if one failed."""
    start: list[int] = []
    dropped: list[int] = []
    discarded: list[int] = []

    def turn(**rest) -> Turn:
        return Turn(tuple(start), tuple(dropped), tuple(discarded), **rest)

    for index, task in enumerate(ready):
        if task.running:
            if failed is None or task.order < failed:
                start += _short_behind(ready[index + 1 :], offer, failed=failed)  # it holds its place
                return turn(moment=task.task_id)
        elif failed is not None and task.order > failed:
            discarded.append(task.task_id)
        elif offer.at_capacity(task.task_id):
            return turn(waiter=task.task_id, blocked=True)
        elif offer.take(task.task_id, short=task.short):
            start.append(task.task_id)
            if task.moment:  # the turn stops at it, but for the short tasks behind it
                start += _short_behind(ready[index + 1 :], offer, failed=failed)
                return turn(moment=task.task_id)
        elif task.optional:
            dropped.append(task.task_id)
        else:
            blocked = offer.free  # (before the short tasks behind it take their room)
            start += _short_behind(ready[index + 1 :], offer, failed=failed)
            return turn(waiter=task.task_id, blocked=blocked)
    return turn()


def _short_behind(ready: Sequence[Ready], offer: Offer, *, failed: tuple[int, int, int] | None) -> list[int]:
    """The short tasks and the steps a moment long among ``ready`` (behind one that waits)
    that start now anyway."""
    started = []
    for task in ready:
        if task.running or not (task.short or task.moment) or (failed is not None and task.order > failed) \
                or offer.at_capacity(task.task_id):  # fmt: skip
            continue
        if not offer.take(task.task_id, short=True):  # (a moment's handler takes no slot at all)
            break  # no -j slot or no memory left
        started.append(task.task_id)
    return started
