"""When a task of a run becomes ready: what each one still waits for, and the moment it has it.

A task waits for each of its predecessors to end well, with three exceptions:

* **An any_of group** (:mod:`.any_of`): it waits for one member of the group, not each.
* **An early input** (:mod:`.early_inputs`): the file it needs from a running predecessor is
  written and closed before that predecessor ends; it starts on the file.
* **An optional predecessor** that was dropped serves nobody, and an optional task whose group
  was served is dropped before it starts (or stopped, if it runs).

A task run again (a guess that proved wrong) may wait anew, for a file its new self needs.
Ready tasks go to the :class:`~fast_nvcc.run.ready_queue.ReadyQueue`, stamped with the moment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..graph.tasks import Dag, Task
from .any_of import AnyOfGroups
from .early_inputs import EarlyInputs
from .ready_queue import ReadyQueue
from .task_records import Record, State


class Readiness:
    """What the tasks of one run wait for; ``tasks`` are the tasks as they run now (the list
    is the scheduler's, and a task run again replaces its old self in it)."""

    def __init__(self, dag: Dag, tasks: list[Task], records: Sequence[Record], ready: ReadyQueue, *,
                 early: EarlyInputs, running: Callable[[int], bool], now: Callable[[], float],
                 stop_optional: Callable[[int], None]) -> None:  # fmt: skip
        self.dag = dag
        self.tasks = tasks
        self.records = records
        self.ready = ready
        self.early = early
        self.now = now
        self.stop_optional = stop_optional  # stop a running optional task
        # A task with an any_of group waits for its other predecessors and one of the group.
        self.waiting = [len(p - t.any_of) + bool(t.any_of) for t, p in zip(tasks, dag.preds)]
        self.groups = AnyOfGroups(tasks, running=running)

    def begin(self) -> None:
        """The tasks that wait for nothing are ready."""
        for task in self.tasks:
            if not self.waiting[task.id]:
                self._make_ready(task)

    def poll_early(self, pids: Mapping[int, int]) -> None:
        """The early files written by the running steps (``pids``: task -> pid) since the last poll."""
        for task_id in self.early.poll(pids):
            self._arrived(task_id)

    def ended_well(self, task_id: int) -> None:
        """``task_id`` is done (an optional one: ``dropped`` if it did not help): its
        successors have it."""
        dropped = self.records[task_id].dropped
        for succ in self.early.writer_ended(task_id):  # tasks run again, waiting for its file
            self._arrived(succ)
        for succ in self.dag.succs[task_id]:
            if self.early.released(task_id, succ):
                continue  # it started on the file it needed from this task
            if task_id in self.tasks[succ].any_of:
                # An optional task that did not help serves nobody.
                if not (self.groups.optional_dropped if dropped else self.groups.member_done)(task_id, succ):
                    continue
                self._drop_optional(self.tasks[succ].any_of)  # their job is done
            elif dropped:
                continue
            self._arrived(succ)

    def replace(self, task: Task, *, queued: bool = False) -> None:
        """``task`` replaces its old self (it runs again): it waits for its early file, unless
        that is written for good; ``queued``: its old self was ready (and is ready again now)."""
        self.tasks[task.id] = task
        if task.early is not None:
            writer_done = self.records[task.early[0]].state is State.DONE
            if not self.early.wait_again(task, writer_done=writer_done):
                self.waiting[task.id] += 1  # released by the early inputs, once its file is written
        if queued and not self.waiting[task.id]:
            self._make_ready(task)

    def _arrived(self, task_id: int) -> None:
        self.waiting[task_id] -= 1
        if not self.waiting[task_id]:
            self._make_ready(self.tasks[task_id])

    def _drop_optional(self, task_ids: frozenset[int]) -> None:
        """Stop or drop the optional tasks among ``task_ids`` that have not ended."""
        for task_id in task_ids:
            if self.tasks[task_id].optional and self.records[task_id].end is None:
                self.records[task_id].dropped = True
                self.ready.remove(task_id)
                self.stop_optional(task_id)

    def _make_ready(self, task: Task) -> None:
        if task.optional and self.records[task.id].dropped:
            return
        self.records[task.id].ready = self.now()
        self.ready.push(task)
