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
  1 is for compiles that have run nothing.
* **What it costs.**  The stopped step keeps its memory (as one stopped by the memory guard,
  :mod:`fast_nvcc.machine.pressure`), and its time stopped is not its cost: the records keep
  it apart (``yielded``), and history learns the step's running time.

Only the machine-wide pool ranks its waiters, so only there does a step stop, and only while
the build tool holds no compile back (every compile competes by rank,
:meth:`fast_nvcc.machine.slots.PoolSlots.competes`): a stopped step keeps its compile's job of
ninja's ``-j``, and with compiles waiting for one its work would move to the build's end, as
under FAST_NVCC_SPLIT_EARLY=1 (docs/scheduling.md).  Under make's jobserver every step keeps its
token.  The decision is :func:`to_stop`, unit-tested with
made-up ranks; :class:`fast_nvcc.run.holdings.Holdings` applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A split step must ask at this many times a running step's path to take its core: near equal
# paths gain nothing worth a stop, and a first build's ranks are estimates.
MARGIN = 1.25
# A step expected to take less than this ends before a stop would pay (the pool's long steps,
# ReadyQueue.OVERRUN_FLOOR).
FLOOR = 2.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running step of ours that could give its core: its id and its rank (remaining path)."""

    task_id: int
    rank: float


def to_stop(candidates: Sequence[Candidate], *, best_ask: float | None,
            lowest_elsewhere: float | None) -> int | None:  # fmt: skip
    """The step of ours to stop now, if any: our lowest-ranked candidate, when a split step of
    the machine asks for a core at ``best_ask``, at least MARGIN times that rank, and no other
    compile's candidate ranks lower (``lowest_elsewhere``: the lowest they told; that compile
    gives first)."""
    if not candidates or best_ask is None:
        return None
    lowest = min(candidates, key=lambda c: (c.rank, -c.task_id))
    if best_ask < lowest.rank * MARGIN:
        return None
    if lowest_elsewhere is not None and lowest_elsewhere < lowest.rank:
        return None
    return lowest.task_id
