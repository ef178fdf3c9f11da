"""When a task that waits for one of a group (``Task.any_of``: an early stub's front, which
may start from the stub of whichever cicc of its compile is done first) has its one.

A group served is served for good: later members' ends mean nothing to it.  A stub probe in
the group (an optional task, :func:`fast_nvcc.graph.host_compile.early_stubs`) writes the one stub that is
sure to hold, so while it runs the group waits for it rather than take another member's stub;
if the probe then ends without helping, a member already done serves the group.  A learned
stub that had nothing to give (:mod:`fast_nvcc.guess.learned_stub`) ends the same way, and
does not cut a running probe short either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..graph.tasks import Task


class AnyOfGroups:
    def __init__(self, tasks: Sequence[Task], *, running: Callable[[int], bool]) -> None:
        self.tasks = tasks
        self.running = running  # does this task run now (started, its end not yet handled)?
        self.served: set[int] = set()  # the tasks whose group has had its one
        self.done: set[int] = set()  # members that ended well (and, if optional, helped)

    def member_done(self, member: int, task_id: int) -> bool:
        """``member`` of ``task_id``'s group ended well: is the group served by it now?"""
        self.done.add(member)
        if task_id in self.served:
            return False
        if self._probe_runs(member, task_id):
            return False  # its stub is the sure one
        self.served.add(task_id)
        return True

    def optional_dropped(self, member: int, task_id: int) -> bool:
        """``member`` ended without helping (a probe that wrote no stub, a learned stub not
        learned yet): does a member done serve the group?  Not while a probe still runs."""
        if task_id in self.served or not (self.done & self.tasks[task_id].any_of):
            return False
        if self._probe_runs(member, task_id):
            return False
        self.served.add(task_id)
        return True

    def _probe_runs(self, member: int, task_id: int) -> bool:
        """Does a stub probe of ``task_id``'s group other than ``member`` run now?"""
        return any(self.tasks[m].optional and m != member and self.running(m) for m in self.tasks[task_id].any_of)
