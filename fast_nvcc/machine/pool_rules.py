"""The machine-wide pool's rule for one request (:class:`fast_nvcc.machine.slots.PoolSlots`
applies it to the pool's files): what a compile asks for, and whether a request with so many
waiters ahead of it, so many free slots and so many steps over the pool's size gets a slot, runs
over the pool, or waits.  Pure functions, tested with made-up counts (tests/machine/test_slots.py)."""

from __future__ import annotations

import enum
from collections.abc import Callable


class Ask(enum.Enum):
    """What a compile asks the pool for, which sets the first key of its rank."""

    FIRST = "first"  # its first step: rule 1, before any extra step
    # One more core for a running split step (fast_nvcc.run.core_grants), under
    # FAST_NVCC_SPLIT_EARLY=1: ranked among the first steps by remaining path, so that a long
    # pole's split threads get the cores that compiles with shorter paths (slack) would take,
    # rather than wait for the build's tail.  (Otherwise it asks as an extra step.)
    POLE = "pole"
    EXTRA = "extra"  # any other step of a compile that runs one


class Admit(enum.Enum):
    """How a request is let in."""

    SLOT = "slot"  # on a free slot
    OVER = "over"  # over the pool's size (a first step, while extra steps run)
    DRAIN = "drain"  # over the pool's size, for a compile near its end (rule 3)


def slots_wanted(ask: Ask, *, ahead: int, over: int) -> int:
    """How many free slots a request needs to see to take one: one for itself and one for each
    request ranked before it; an extra step also leaves one to each first step running over."""
    return ahead + 1 + (over if ask is Ask.EXTRA else 0)


def admit(ask: Ask, *, ahead: int, free: int, over: int, extras: Callable[[], int],
          may_drain: Callable[[], bool]) -> Admit | None:  # fmt: skip
    """The pool's rule for one request: ``ahead`` live requests rank before it, ``free`` slots
    are free (counted up to :func:`slots_wanted`), ``over`` first steps run over the pool's
    size; ``extras`` and ``may_drain`` are asked only when they decide.  None: it waits.

    However many compiles arrive while extra steps run, their first steps start (over the
    pool): tying that to the count of extras left arriving compiles waiting (docs/benchmarks.md).
    A split step's core never runs over the pool, and lets no first step run over it."""
    if free >= slots_wanted(ask, ahead=ahead, over=over):
        return Admit.SLOT
    if ask is Ask.FIRST and extras():
        return Admit.OVER
    if ask is Ask.EXTRA and may_drain():
        return Admit.DRAIN
    return None
