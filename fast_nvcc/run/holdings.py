"""What one run holds of the machine, and the room it is offered: -j slots and shared slots
(:mod:`.admission`), memory (:mod:`fast_nvcc.machine.memory`), and split steps' cores
(:mod:`.core_grants`).  A task takes its share as dispatch starts it (this is dispatch's
:class:`~fast_nvcc.run.dispatch.Offer`) and gives it back as its end is handled; between turns,
what no task of the run uses goes back to the machine's other compiles."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..graph.tasks import Task
from ..machine.slots import Slots, pool_directory
from ..plan.split_option import SERIAL_SHARE, split_threads
from .admission import Admission
from .core_grants import Grants, runnable_threads
from .dispatch import Turn
from .handlers import Handler
from .processes import Processes
from .task_records import Record, State

if TYPE_CHECKING:
    from ..machine.memory import MemoryBudget
    from ..machine.pressure import PressureGuard


class Holdings:
    # How often split steps' grants are looked at (core_grants): a listing and a few locks.
    GRANTS_POLL = 0.1

    def __init__(self, tasks: Sequence[Task], records: Sequence[Record], *, jobs: int, slots: Slots,
                 memory: MemoryBudget | None, processes: Processes, env: Mapping[str, str],
                 handler_of: Callable[[int], Handler], priority_of: Callable[[int], float],
                 now: Callable[[], float]) -> None:  # fmt: skip
        self.tasks, self.records = tasks, records  # the run's: a task run again replaces its old self
        self.slots = slots
        self.memory = memory
        self.processes = processes
        self.handler_of = handler_of
        self.priority_of = priority_of  # the rank a task asks the shared slots with
        self.now = now
        self.admission = Admission(jobs=max(1, jobs), slots=slots, memory=memory)
        # Steps told -split-compile N run on as many cores as the slots grant them (core_grants).
        self.split = {t.id: n for t in tasks if not t.optional and (n := split_threads(t.step.argv))}
        self.grants: Grants | None = None
        self._grants_polled = -1.0
        if self.split:
            self.grants = Grants(self.admission, pool_directory=getattr(slots, "directory", None)
                                 or pool_directory(env), pin=processes.pin, now=now)  # fmt: skip

    # -- dispatch's Offer --------------------------------------------------------------------

    @property
    def free(self) -> bool:
        return self.admission.free

    def at_capacity(self, task_id: int) -> bool:
        return self.admission.at_capacity(self.tasks[task_id], self.handler_of(task_id).capacity)

    def take(self, task_id: int, *, short: bool) -> bool:
        task, record, handler = self.tasks[task_id], self.records[task_id], self.handler_of(task_id)
        if handler.takes_slot and not self.admission.reserve(task, self.priority_of(task_id), now=self.now(),
                                                             short=short):  # fmt: skip
            return False
        record.slot, record.over_pool = self.admission.start(task, takes_slot=handler.takes_slot,
                                                             capacity=handler.capacity, short=short)  # fmt: skip
        return True

    # -- a task's way ----------------------------------------------------------------------------

    def started(self, task: Task) -> None:
        """``task`` took its room and starts: how long memory held it back; a split step's core."""
        record, handler = self.records[task.id], self.handler_of(task.id)
        if record.slot is not None and self.memory is not None:
            record.memory_wait = self.memory.waited(task.id)
        if self.grants is not None and task.id in self.split and handler.takes_slot and handler.capacity is None:
            serial = SERIAL_SHARE.get(task.step.kind.value, SERIAL_SHARE["cicc"])  # (nvlink under -dlto: cicc's)
            cores = self.grants.start(task.id, self.split[task.id], self.priority_of(task.id), serial=serial)
            self.processes.pin(task.id, cores)

    def give_back(self, task: Task) -> None:
        """An ended task's cores, slot and memory."""
        record, handler = self.records[task.id], self.handler_of(task.id)
        if self.grants is not None:
            grant = self.grants.end(task.id)
            if grant is not None:
                self.processes.pin(task.id, None)
                record.core_timeline += grant.timeline  # (a run again after a failed guess adds its own)
        self.admission.end(task, record.slot, takes_slot=handler.takes_slot, capacity=handler.capacity)
        if self.memory is not None:
            # a peak worth telling peers (a stub probe's is not its cicc's)
            ran = record.state is State.DONE and not record.cached and not task.optional
            self.memory.release(task.id, rss_kb=record.max_rss_kb if ran else None)

    def killed_for_memory(self, task: Task, returncode: int) -> bool:
        """(On the task's thread.)  Was ``task`` killed by the kernel for memory, and does it get
        one more run?  Then it is marked to run again."""
        if self.memory is None or self.processes.killed(task.id):
            return False
        record = self.records[task.id]
        again = self.memory.out_of_memory(task.id, returncode, rss_kb=record.max_rss_kb)
        record.oom_rerun = record.oom_rerun or again  # a second kill keeps the mark of the first
        return again

    # -- between turns -------------------------------------------------------------------------

    def share(self, turn: Turn) -> None:
        """After a turn's starts: tasks on idle cores give way to real ones, idle shared slots
        go back, split steps' cores follow the slots."""
        if self.processes.runs_idle_only and (turn.waits or self.slots.outranked(0.0)):
            self.processes.kill_idle_only()  # a real step (ours or a peer's) wants its slot
        if not turn.blocked:
            self.slots.withdraw()  # nothing of ours waits: others may go first
            if self.memory is not None:
                self.memory.withdraw()
        # A slot freed as a step ended waits for what a step a moment long leads to (dispatch.py).
        self.admission.release_idle(keep=turn.moment is not None)
        if self.grants and self.now() - self._grants_polled >= self.GRANTS_POLL:
            self._grants_polled = self.now()
            pids = self.processes.step_pids()
            # A step of ours refused a shared slot takes a core back only from split steps it
            # outranks: a host compile with slack does not hold the long pole's cicc to one core.
            waiter = turn.waiter if self.admission.refused == "slot" else None
            self.grants.poll(ours_waiting=None if waiter is None else self.priority_of(waiter), priority_of=self.priority_of,
                             runnable_of=lambda task_id: runnable_threads(pids[task_id]) if task_id in pids else None)  # fmt: skip

    def guard(self) -> PressureGuard | None:
        """Steps are stopped rather than lost when memory runs short (fast_nvcc.machine.pressure)."""
        if self.memory is None:
            return None
        from ..machine.pressure import PressureGuard

        stopped_at: dict[int, float] = {}

        def on_change(what: str, task_id: int) -> None:
            if what == "stop":
                stopped_at[task_id] = self.now()
            elif task_id in stopped_at:
                self.records[task_id].memory_stopped += self.now() - stopped_at.pop(task_id)
            if what == "evict":
                self.records[task_id].memory_evicted = True

        return PressureGuard(self.memory, signal_step=self.processes.signal_step, on_change=on_change,
                             step_pids=self.processes.step_pids).start()  # fmt: skip

    def close(self) -> None:
        if self.grants is not None:
            self.grants.close()
        self.slots.release_all()
