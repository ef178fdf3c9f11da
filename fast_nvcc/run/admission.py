"""Which ready task of a run may start now, and what a running one holds: one of the ``jobs``
local slots (-j), a shared slot (make's jobserver or the machine-wide pool,
:mod:`fast_nvcc.machine.slots`),
memory to spare, and a place among the tasks of handlers that run elsewhere (a capacity)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..graph.tasks import Action, Task
from ..machine.slots import Slots

if TYPE_CHECKING:
    from ..machine.memory import MemoryBudget


class Admission:
    """The slots a run holds: numbered local ones for -j, the count of commands running (each
    beyond the implicit one holds a shared slot), and the tasks running elsewhere."""

    def __init__(self, *, jobs: int, slots: Slots, memory: MemoryBudget | None) -> None:
        self.slots = slots
        self.memory = memory
        self._commands = 0  # slot-taking tasks running now, short ones aside
        self._short: set[int] = set()  # running short tasks: a local slot, no shared one
        self._elsewhere: dict[Action, int] = {}  # running tasks of handlers with a capacity
        self._free_slots = list(range(jobs - 1, -1, -1))
        # Extra cores of running split steps (fast_nvcc.run.core_grants): a local slot and a shared
        # slot each, like a step of their own.
        self._widened: list[int] = []
        self.refused = ""  # why the last reserve() or widen() said no: "jobs", "slot" or "memory"

    @property
    def _in_use(self) -> int:
        """Slot-taking commands running, and the extra cores of split steps."""
        return self._commands + len(self._widened)

    @property
    def free(self) -> bool:
        """Is one of the local slots (-j) free?"""
        return bool(self._free_slots)

    def at_capacity(self, task: Task, capacity: int | None) -> bool:
        """Do as many tasks of ``task``'s kind run elsewhere as its handler's ``capacity``?"""
        return capacity is not None and self._elsewhere.get(task.action, 0) >= capacity

    def reserve(self, task: Task, priority: float, *, now: float, short: bool = False, memory: bool = True) -> bool:
        """May ``task`` start now?  Within -j, with a shared slot (the implicit one, one held and
        idle, or one newly granted by the jobserver or the pool), and with memory to spare.

        A ``short`` step (:mod:`fast_nvcc.graph.short`) needs no shared slot: a -j slot and
        memory (the rule is :mod:`.dispatch`'s).  A step that goes on after a stop (``memory``
        False: :mod:`.yielding`) holds its memory already."""
        self.refused = "jobs"
        if not self._free_slots:
            return False
        self.refused = "slot"
        if short:
            self.refused = "memory"
            return self.memory is None or self.memory.reserve(task.id, now=now)
        if self._in_use < self.slots.implicit + self.slots.held:
            # An idle slot of ours: keep it, unless this would be an extra step of this compile
            # (or any step, once the pool says started compiles compete) and the pool has a
            # better claim waiting (it is released below and asked for anew).
            if (self._commands or self.slots.competes()) and self.slots.outranked(priority):
                return False
        elif not self.slots.try_acquire(priority):
            return False
        # The memory budget (fast_nvcc.machine.memory) after the slot, so that a step held back for
        # memory gives its slot back (release_idle) to one that fits.
        self.refused = "memory"
        return self.memory is None or not memory or self.memory.reserve(task.id, now=now)

    def start(self, task: Task, *, takes_slot: bool, capacity: int | None,
              short: bool = False) -> tuple[int | None, str | None]:  # fmt: skip
        """``task`` starts: its local slot (None when it takes none) and whether it runs over
        the machine-wide pool (Slots.over_pool, or "short")."""
        slot = self._free_slots.pop() if takes_slot else None
        over_pool = None
        if capacity is not None:
            self._elsewhere[task.action] = self._elsewhere.get(task.action, 0) + 1
        if slot is not None and short:
            self._short.add(task.id)
            return slot, "short"
        if slot is not None:
            self._commands += 1
            over_pool = self.slots.over_pool(self._in_use - self.slots.implicit)
        return slot, over_pool

    def end(self, task: Task, slot: int | None, *, takes_slot: bool, capacity: int | None) -> None:
        if slot is not None:
            self._free_slots.append(slot)
            if task.id in self._short:
                self._short.discard(task.id)
            elif takes_slot:
                self._commands -= 1
        if capacity is not None:
            self._elsewhere[task.action] -= 1

    def pause(self, slot: int | None) -> None:
        """A running step stops to give its core to a split step (:mod:`.yielding`): its local
        slot and its shared one go back; it asks again by rank (:meth:`reserve`) to go on."""
        if slot is not None:
            self._free_slots.append(slot)
            self._commands -= 1
        self.release_idle()

    def widen(self, priority: float) -> bool:
        """One more core for a running split step of remaining path ``priority``: a local
        slot (-j) and a shared one, asked for at that rank (beside first steps: ``pole``)."""
        self.refused = "jobs"
        if not self._free_slots:
            return False
        self.refused = "slot"
        if self.slots.held < max(0, self._in_use + 1 - self.slots.implicit):
            if not self.slots.try_acquire(priority, pole=True):
                return False
        self._widened.append(self._free_slots.pop())
        return True

    def narrow(self) -> None:
        """A split step gives back one of its extra cores (its shared slot goes at once)."""
        self._free_slots.append(self._widened.pop())
        self.release_idle()

    def release_idle(self, *, keep: bool = False) -> None:
        """Give back shared slots no running step uses, so other compiles can have them (but
        one, if asked to ``keep`` it)."""
        idle = self.slots.held - (max(0, self._in_use - self.slots.implicit) + keep)
        if idle > 0:
            self.slots.release(idle)  # at once: the pool wakes its waiters once
