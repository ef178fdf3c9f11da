"""Tasks that need one file of a running predecessor: they start once it is written.

A cicc as nvcc prints it needs only the module_id of cudafe++'s outputs (or, on nvcc before
12.8, of the first cicc's).  Such a task (:attr:`fast_nvcc.graph.tasks.Task.early`) is released as
soon as its writer has written the file and closed it, and a copy of what it was released on is
kept for its module_id check, which compares it with the final file: a writer that wrote the
file again would be caught there.  (cudafe++ of nvcc 13.0 writes the module_id in its last
40-60 ms, so there the release comes with its end; a cicc whose guess failed waits here.)

A cicc with a predicted module_id (:attr:`fast_nvcc.graph.tasks.Task.predicted_module_id`) is released
as soon as its writer has started: the id it runs on is the prediction with the writer's pid,
written where the task reads it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping

from ..graph.tasks import Dag, Task, waits_early

PID_PLACE = "{pid}"  # where a predicted module_id takes its writer's process id


def written(path: str, writer_pid: int | None) -> bool:
    """Is ``path`` there, not empty, and no longer open in the live process ``writer_pid``?
    False wherever that cannot be seen (no /proc)."""
    try:
        if os.path.getsize(path) == 0:
            return False
        if writer_pid is None:
            return False
        target = os.path.realpath(path)
        directory = f"/proc/{writer_pid}/fd"
        for fd in os.listdir(directory):
            try:
                if os.readlink(os.path.join(directory, fd)) == target:
                    return False
            except OSError:
                continue  # closed while we looked
    except OSError:
        return False
    return True


def keep_copy(path: str, copy: str | None) -> None:
    """Keep what a task was started on, for its check (fast_nvcc.guess.module_id)."""
    if copy is not None:
        shutil.copyfile(path, copy)


class EarlyInputs:
    """The early edges of a run that still wait for their file.  An edge of the graph (the
    writer is among the task's predecessors) is released here before the writer ends, or
    counted as usual when it ends; an edge added for a task run again (a guess that failed,
    whose writer the graph had taken off its path) is released here either way."""

    def __init__(self, dag: Dag, *, cwd: str) -> None:
        self.cwd = cwd
        self._pending: dict[int, tuple[int, str, str | None, bool]] = {}  # ..., added
        self._released: set[tuple[int, int]] = set()  # (writer, task) edges of the graph
        self._predicted: dict[int, str] = {}  # task -> its module_id, PID_PLACE for the writer's pid
        for task in dag.tasks:
            if waits_early(dag, task.id):
                self._wait(task, added=False)
                if task.predicted_module_id is not None:
                    self._predicted[task.id] = task.predicted_module_id

    def __bool__(self) -> bool:
        return bool(self._pending)

    def _wait(self, task: Task, *, added: bool) -> None:
        assert task.early is not None
        writer, path, copy = task.early
        self._pending[task.id] = (writer, os.path.join(self.cwd, path), copy, added)

    def wait_again(self, task: Task, *, writer_done: bool) -> bool:
        """``task`` runs again and needs its early file: True when it may go now (its writer
        is done), else it waits here until the file is written."""
        assert task.early is not None
        self._predicted.pop(task.id, None)  # run again: on nvcc's own id
        if writer_done:
            keep_copy(os.path.join(self.cwd, task.early[1]), task.early[2])
            return True
        self._wait(task, added=True)
        return False

    def released(self, writer: int, task_id: int) -> bool:
        """Was the graph's edge ``writer`` -> ``task_id`` released before ``writer`` ended?"""
        return (writer, task_id) in self._released

    def writer_ended(self, writer: int) -> list[int]:
        """``writer`` ended well: the tasks still waiting for its file have it (a copy is kept);
        those whose edge is not the graph's are returned, to be released."""
        added = []
        for task_id, (w, path, copy, extra) in list(self._pending.items()):
            if w != writer:
                continue
            del self._pending[task_id]
            if os.path.exists(path):
                keep_copy(path, copy)
            if extra:
                added.append(task_id)
        return added

    def poll(self, pids: Mapping[int, int]) -> Iterator[int]:
        """The waiting tasks whose file its running writer (``pids``: task -> pid) has written
        and closed, or whose predicted file can be written now; each is released once."""
        for task_id, (writer, path, copy, added) in list(self._pending.items()):
            template = self._predicted.get(task_id)
            if template is not None and copy is not None and writer in pids:
                with open(copy, "w", encoding="utf-8") as handle:  # the writer has started
                    handle.write(template.replace(PID_PLACE, str(pids[writer])))
            elif written(path, pids.get(writer)):
                keep_copy(path, copy)
            else:
                continue
            del self._pending[task_id]
            self._predicted.pop(task_id, None)
            if not added:
                self._released.add((writer, task_id))
            yield task_id
