"""What one run holds of the machine, and the room it is offered: -j slots and shared slots
(:mod:`.admission`), memory (:mod:`fast_nvcc.machine.memory`), and split steps' cores
(:mod:`.core_grants`).  A task takes its share as dispatch starts it (this is dispatch's
:class:`~fast_nvcc.run.dispatch.Offer`) and gives it back as its end is handled; between turns,
what no task of the run uses goes back to the machine's other compiles, and a running step with
slack may stop to give its core to a split step on a longer path (:mod:`.yielding`)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..graph.tasks import Task
from ..machine.pool_place import pool_directory
from ..machine.slots import Slots
from ..plan.split_option import SERIAL_SHARE, split_threads
from ..settings import switch
from .admission import Admission
from .core_grants import Grants
from .step_threads import runnable_threads
from .dispatch import Turn
from .handlers import Handler
from .niceness import nice_for
from .processes import Processes
from .ready_queue import ReadyQueue
from .task_records import Record, State
from .yielding import (
    FLOOR,
    STOPS_FOR,
    BuildLeft,
    Candidate,
    best_of,
    gives_way,
    going_on_rank,
    has_slack,
    step_to_stop,
    waits_for_own_ask,
    why_going_on,
)

if TYPE_CHECKING:
    from ..machine.memory import MemoryBudget
    from ..machine.pressure import PressureGuard


class Holdings:
    # How often split steps' grants are looked at (core_grants): a listing and a few locks.
    GRANTS_POLL = 0.1
    # How often a run without split steps looks whether one of the machine waits for a core that
    # a step of ours could give (yielding.py): a listing.
    YIELD_POLL = 0.25

    def __init__(self, tasks: Sequence[Task], records: Sequence[Record], *, jobs: int, slots: Slots,
                 memory: MemoryBudget | None, processes: Processes, env: Mapping[str, str],
                 handler_of: Callable[[int], Handler], priority_of: Callable[[int], float],
                 now: Callable[[], float], queue: ReadyQueue | None = None,
                 serial: Sequence[float | None] = (), split_known: bool = False) -> None:  # fmt: skip
        self.tasks, self.records = tasks, records  # the run's: a task run again replaces its old self
        self.slots = slots
        self.memory = memory
        self.processes = processes
        self.handler_of = handler_of
        self.priority_of = priority_of  # the rank a task asks the shared slots with, before it starts
        self.ready = queue  # ... and once it has run a while (rank_of)
        # Where a step stopped for a split step waits to go on (None: no step stops; yielding.py).
        self.queue = queue if switch(env, "FAST_NVCC_YIELD") and slots.short_steps_free else None
        self.niced = switch(env, "FAST_NVCC_NICE")  # steps of a compile with slack (niceness.py)
        self.now = now
        self.admission = Admission(jobs=max(1, jobs), slots=slots, memory=memory)
        # Steps told -split-compile N run on as many cores as the slots grant them (core_grants).
        self.split = {t.id: n for t in tasks if not t.optional and (n := split_threads(t.step.argv))}
        # Each split step's serial share (core_grants.on_cores): its source's learned, else its tool's.
        self.serial = {i: learned if i < len(serial) and (learned := serial[i]) is not None
                       else SERIAL_SHARE.get(tasks[i].step.kind.value, SERIAL_SHARE["cicc"]) for i in self.split}  # fmt: skip
        self.grants: Grants | None = None
        self._grants_polled = self._yield_looked = -1.0
        # Steps stopped to give their cores to split steps (yielding.py), and by the memory guard
        self.paused: dict[int, float] = {}  # (fast_nvcc.machine.pressure): task -> since when
        self.memory_paused: dict[int, float] = {}
        # The soonest the build could end, as its compiles told at our last look (yielding.has_slack).
        self.build_left: float | None = None
        directory = getattr(slots, "directory", None)  # the machine-wide pool's (where self.queue is set)
        self._told_left = BuildLeft(directory, getattr(slots, "size", jobs)) if self.queue is not None and directory else None
        if self.split:
            # FAST_NVCC_LONGEST_FIRST=1: where the source's split steps have costs of their own
            # (``split_known``: Learned.split_costs_known), the longest path takes the cores first
            # (core_grants.Grant.longest; experimental, rounds 37-38).
            known = switch(env, "FAST_NVCC_LONGEST_FIRST") and split_known
            self.grants = Grants(self.admission, pool_directory=directory or pool_directory(env),
                                 pin=processes.pin, now=now, known=known)  # fmt: skip

    def done(self, task_id: int) -> float:
        """The seconds of its work a started task has done: a split step's core-seconds, another
        step's time running (not stopped); 0 before it starts."""
        record = self.records[task_id]
        if record.start is None:
            return 0.0
        ran = self.grants.ran(task_id) if self.grants is not None else None
        if ran is not None:
            return ran
        now = self.now()
        stops = [since for since in (self.paused.get(task_id), self.memory_paused.get(task_id)) if since is not None]
        # record.stopped counts the stops that have ended; one still on counts from its start.
        return now - record.start - record.stopped - (now - min(stops) if stops else 0.0)

    def rank_of(self, task_id: int, *, own: bool = False) -> float:
        """The rank a task asks and holds a slot at: its remaining path, which falls as it runs
        (ReadyQueue.remaining), so that a step stopped for a split step goes on as that nears
        its end (unless ``own``: where its slack is spent, the build's end: yielding.going_on_rank)."""
        if self.ready is None:
            return self.priority_of(task_id)
        rank = self.ready.remaining(task_id, self.done(task_id))
        return going_on_rank(rank, build_left=self.build_left) if task_id in self.paused and not own else rank

    # -- dispatch's Offer --------------------------------------------------------------------

    @property
    def free(self) -> bool:
        return self.admission.free

    def at_capacity(self, task_id: int) -> bool:
        return self.admission.at_capacity(self.tasks[task_id], self.handler_of(task_id).capacity)

    def take(self, task_id: int, *, short: bool) -> bool:
        task, record, handler = self.tasks[task_id], self.records[task_id], self.handler_of(task_id)
        if handler.takes_slot:  # (a step stopped for a split step held a slot: _candidates)
            rank = self.rank_of(task_id)
            best_ask = best_of(self.slots.yield_to()[0], self._own_ask()) if task_id in self.paused else None
            asking = self.grants.asking if self.grants is not None else None
            if (gives_way(rank, best_ask=best_ask, build_left=self.build_left) if task_id in self.paused
                    else waits_for_own_ask(rank, asking=asking, short=short)):
                self.slots.wait_at(asking, pole=True)  # the slot is the asker's (gives_way, waits_for_own_ask)
                return False
            if not self.admission.reserve(task, rank, now=self.now(), short=short, memory=task_id not in self.paused):
                return False
            if task_id in self.paused:  # why, at its own path (not the build's end it may ask at)
                own = self.rank_of(task_id, own=True)
                record.went_on.append((self.now(), why_going_on(own, best_ask=best_ask, build_left=self.build_left),
                                       own, best_ask, self.build_left))  # fmt: skip
        record.slot, record.over_pool = self.admission.start(task, takes_slot=handler.takes_slot,
                                                             capacity=handler.capacity, short=short)  # fmt: skip
        return True

    # -- a task's way ----------------------------------------------------------------------------

    def started(self, task: Task, *, work_left: float | None = None) -> None:
        """``task`` took its room and starts: how long memory held it back; a split step's core;
        its priority, where its compile (``work_left`` seconds of it; None: not known, or its
        estimates not shown credible: ReadyQueue.credible) has slack."""
        record, handler = self.records[task.id], self.handler_of(task.id)
        if self.niced:
            # the pool's listing only where this compile's work left may show slack
            record.nice = 0 if work_left is None else nice_for(work_left, self.slots.most_left())
            self.processes.nice(task.id, record.nice)
        if record.slot is not None and self.memory is not None:
            record.memory_wait = self.memory.waited(task.id)
        if self.grants is not None and task.id in self.split and handler.takes_slot and handler.capacity is None:
            cores = self.grants.start(task.id, self.split[task.id], self.priority_of(task.id), serial=self.serial[task.id],
                                      stops=task.step.kind.value in STOPS_FOR)  # fmt: skip
            self.processes.pin(task.id, cores)

    @property
    def yield_poll(self) -> float:
        """How long the run's loop may wait, with no split step of its own: YIELD_POLL where a
        step of ours may stop for another compile's split step, else half a second."""
        return self.YIELD_POLL if self.queue is not None else 0.5

    def resume(self, task: Task) -> None:
        """A step stopped for a split step took its room again (:meth:`take`): it goes on,
        unless the memory guard has stopped it meanwhile (the guard lets it go on)."""
        self._unpause(task.id)
        if self.memory is None or task.id not in self.memory.stopped():
            self.processes.signal_step(task.id, signal.SIGCONT)

    def _unpause(self, task_id: int) -> None:
        """``task_id`` is no longer stopped for a split step: its time stopped is counted."""
        self.records[task_id].stopped_from(self.paused.pop(task_id), self.now())
        self.slots.paused -= 1

    def give_back(self, task: Task) -> None:
        """An ended task's cores, slot and memory."""
        record, handler = self.records[task.id], self.handler_of(task.id)
        if task.id in self.paused:  # killed while stopped (a failure, a signal)
            self._unpause(task.id)
            if self.queue is not None:
                self.queue.remove(task.id)
        if self.grants is not None:
            grant = self.grants.end(task.id)
            if grant is not None:
                self.processes.pin(task.id, None)
                record.add_grant(grant)
        self.admission.end(task, record.slot, takes_slot=handler.takes_slot, capacity=handler.capacity)
        if self.memory is not None:
            # a peak worth telling peers (a stub probe's is not its cicc's)
            ran = record.state is State.DONE and not record.cached and not task.optional
            self.memory.release(task.id, rss_kb=record.max_rss_kb if ran else None)

    def killed_for_memory(self, task: Task, returncode: int) -> bool:
        """(On its thread.)  Was ``task`` killed for memory, and does it run again (marked so)?"""
        if self.memory is None or self.processes.killed(task.id):
            return False
        record = self.records[task.id]
        again = self.memory.out_of_memory(task.id, returncode, rss_kb=record.max_rss_kb)
        record.oom_rerun = record.oom_rerun or again  # a second kill keeps the mark of the first
        return again

    # -- between turns -------------------------------------------------------------------------

    def share(self, turn: Turn) -> None:
        """After a turn's starts: tasks on idle cores give way to real ones, idle shared slots
        go back, split steps' cores follow the slots, and a step with slack may stop for one
        of the machine's split steps (it waits in the ready queue to go on)."""
        if self.processes.runs_idle_only and (turn.waits or self.slots.outranked(0.0)):
            self.processes.kill_idle_only()  # a real step (ours or a peer's) wants its slot
        if not turn.blocked:  # nothing of ours waits: others may go first
            if not (self.grants and self.grants.asking is not None):  # (a split step's ask stays posted)
                self.slots.withdraw()
            if self.memory is not None:
                self.memory.withdraw()
        # A slot freed as a step ended waits for what a step a moment long leads to (dispatch.py).
        self.admission.release_idle(keep=turn.moment is not None)
        self.slots.settle()  # a step of ours over the pool takes a slot that freed
        if self.grants and self.now() - self._grants_polled >= self.GRANTS_POLL:
            self._grants_polled = self.now()
            pids = self.processes.step_pids()
            # A step of ours refused a shared slot takes a core back only from split steps it
            # outranks: a host compile with slack does not hold the long pole's cicc to one core.
            waiter = turn.waiter if self.admission.refused in ("slot", "jobs") else None
            self.grants.poll(ours_waiting=None if waiter is None else self.rank_of(waiter), priority_of=self.rank_of,
                             runnable_of=lambda task_id: runnable_threads(pids[task_id]) if task_id in pids else None)  # fmt: skip
        if self.queue is not None and self.now() - self._yield_looked >= (self.GRANTS_POLL if self.grants else self.YIELD_POLL):
            self._yield_looked = self.now()
            self._yield(self.queue)

    def _yield(self, queue: ReadyQueue) -> None:
        """Tell the pool our lowest step that could give its core, and stop it if a split
        step of the machine asks for one at a far longer path (:mod:`.yielding`)."""
        pids = self.processes.step_pids()
        if self._told_left is not None:  # (how soon the build could end: yielding.has_slack)
            self.build_left = self._told_left.look(queue, pids, self.done,
                                                   path=self.grants.path_on_threads() if self.grants else None)  # fmt: skip
        # (a step with no slack against the build's end gives nothing, nor keeps another from giving)
        slack = [c for c in self._candidates(queue, pids) if has_slack(c.rank, build_left=self.build_left)]
        competes = self.slots.competes()
        self.slots.tell_slack(min(c.rank for c in slack) if slack and competes else None)
        task_id = step_to_stop(slack, competes=competes, own_ask=self._own_ask(), pool=self.slots.yield_to,
                               build_left=self.build_left)  # fmt: skip
        if task_id is None or not self.processes.signal_step(task_id, signal.SIGSTOP):
            return
        record = self.records[task_id]
        self.paused[task_id] = self.now()
        self.slots.paused += 1
        self.admission.pause(record.slot)
        record.slot, record.yields = None, record.yields + 1
        queue.push(self.tasks[task_id])

    def _own_ask(self) -> float | None:
        return self.grants.stopping_own if self.grants is not None else None

    def _candidates(self, queue: ReadyQueue, pids: Mapping[int, int]) -> list[Candidate]:
        """Our running steps that could give their core, at their remaining paths: each holds
        a slot of the pool (not one over it, not a short step's), runs a command, is not split
        and has yielding.FLOOR seconds or more of its work left (ReadyQueue.left)."""
        stopped = set(self.memory.stopped()) if self.memory is not None else set()
        found = []
        for task_id in pids:
            task, record, handler = self.tasks[task_id], self.records[task_id], self.handler_of(task_id)
            if (record.slot is None or record.over_pool is not None or task_id in self.split or task.optional
                    or not handler.takes_slot or handler.capacity is not None or task_id in stopped
                    or queue.left(task_id, done := self.done(task_id)) < FLOOR):  # fmt: skip
                continue
            found.append(Candidate(task_id, queue.remaining(task_id, done)))
        return found

    def memory_changed(self, what: str, task_id: int) -> None:
        """The memory guard stopped a step ("stop"), let it go on, or killed it ("evict")."""
        if what == "stop":
            self.memory_paused[task_id] = self.now()
        elif task_id in self.memory_paused:
            self.records[task_id].stopped_from(self.memory_paused.pop(task_id), self.now(), memory=True)
        if what == "evict":
            self.records[task_id].memory_evicted = True

    def close(self) -> None:
        if self.grants is not None:
            self.grants.close()
        self.slots.tell_slack(None)
        if self._told_left is not None:
            self._told_left.close()
        self.slots.release_all()


def memory_guard(holdings: Holdings) -> PressureGuard | None:
    """Steps are stopped rather than lost when memory runs short (fast_nvcc.machine.pressure)."""
    if holdings.memory is None:
        return None
    from ..machine.pressure import PressureGuard

    def signal_step(task_id: int, signum: int) -> bool:
        if signum == signal.SIGCONT and task_id in holdings.paused:
            return True  # stopped for a split step too: it goes on when it has a slot again
        return holdings.processes.signal_step(task_id, signum)

    return PressureGuard(holdings.memory, signal_step=signal_step, on_change=holdings.memory_changed,
                         step_pids=holdings.processes.step_pids).start()  # fmt: skip
