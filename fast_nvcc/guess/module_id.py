"""The module_id check, and the early verdict on a cicc that guessed its module_id.

:func:`fast_nvcc.graph.module_ids.check_module_ids` follows each cicc with a check task, which compares
the module_id the cicc ran with (a private copy) with the one nvcc's plan makes (cudafe++'s, or
the first cicc's on older nvcc) and, when they differ, reruns the cicc exactly as nvcc printed
it before anything downstream runs.

A cicc that guessed (made its own module_id, to start before cudafe++ wrote nvcc's) is watched
while it runs (:class:`EarlyVerdicts`): as soon as the two ids show the guess wrong, the
scheduler stops it and runs it as printed, so a failed guess costs the seconds until the ids
are known, not a whole cicc.  cudafe++ writes its id as it ends, and cicc writes its own after
its front end (heavy.cu, sm_90, 2 cores: 3.6 s into a 5.8 s cicc).  For a translation unit
with no external definition the id ends in the writer's process id
(``_9e7129fc_11_pidheavy_cu_5ee0b1f1_5516``, cudafe++ was pid 5516), so either id alone
proves that the other can never match.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..files import read_bytes
from ..graph.tasks import Action, Dag, Task
from ..run.early_inputs import PID_PLACE, written
from ..run.handlers import Handler, TaskRun
from ..run.task_records import State

if TYPE_CHECKING:
    from ..run.handlers import RunView

# An id that carries a process id: the hash of the first external definition's place taken by
# a random part and the pid (cudafe++ and cicc, nvcc 13.0).
_WITH_PID = re.compile(rb"_[0-9a-f]{8}_(\d+)\s*\Z")

PID = "its module_id carries the writer's process id (a source with no external definition)"
DIFFERS = "its module_id differs from nvcc's"
PREDICTION_DIFFERS = "its predicted module_id differs from nvcc's"


def carries_pid(module_id: bytes, pid: int | None) -> bool:
    """Does ``module_id`` end in the process id ``pid`` of the tool that wrote it?"""
    match = _WITH_PID.search(module_id)
    return match is not None and pid is not None and int(match.group(1)) == pid


def verdict(nvcc_id: bytes | None, own_id: bytes | None, *, writer_pid: int | None,
            cicc_pid: int | None) -> str | None:  # fmt: skip
    """Why a guessed module_id is certainly wrong, from what is known so far (None: it may
    still hold, or it holds).  Either id alone can tell when it carries its writer's pid, since
    no other process can write the same."""
    if nvcc_id is not None and own_id is not None:
        return None if nvcc_id == own_id else (PID if _WITH_PID.search(nvcc_id) else DIFFERS)
    if nvcc_id is not None and carries_pid(nvcc_id, writer_pid):
        return PID
    if own_id is not None and carries_pid(own_id, cicc_pid):
        return PID
    return None


def printed(dag: Dag, task: Task) -> Task:
    """``task`` (a cicc that guessed) as nvcc printed it: nvcc's module_id, read once written."""
    assert task.checked_by is not None
    check = dag.tasks[task.checked_by]
    return task._replace(argv=check.rerun, own_module_id=False, predicted_module_id=None,
                   reads=task.reads | check.reads)  # fmt: skip


def id_template(module_id: bytes) -> str | None:
    """An id that carries its writer's pid, with PID_PLACE where the pid goes: what a later
    compile of the same source from the same working directory predicts from (nvcc 13.0: the
    rest follows the source's path and name and the working directory, not the run;
    ``_9e7129fc_11_pidheavy_cu_5ee0b1f1_`` in every run)."""
    match = _WITH_PID.search(module_id)
    if match is None:
        return None
    text = module_id.decode("utf-8", "surrogateescape")
    return text[: match.start(1)] + PID_PLACE + text[match.end(1) :]


class EarlyVerdicts:
    """Watches the running ciccs that guessed their module_id, for the scheduler's loop (:func:`fast_nvcc.run.handlers.feature_watches`)."""

    def __init__(self, dag: Dag, *, cwd: str) -> None:
        self.dag = dag
        self.cwd = cwd
        self._open = {t.id for t in dag.tasks if (t.own_module_id or t.predicted_module_id is not None)
                      and t.checked_by is not None and t.early}  # fmt: skip
        self._pids: dict[int, int] = {}  # the last pid seen for a task: ids name their writer's

    def __bool__(self) -> bool:
        return bool(self._open)

    def urgent(self, run: RunView) -> bool:
        """Whether a look soon may judge a guess: the step that writes nvcc's id (cudafe++) of
        an open cicc has started.  Before it has, no id of nvcc's can be read, and its start
        wakes the loop anyway.  Three heavy.cu compiles on 2 cores (2026-11-28): each guessed
        cicc ran 12-14 s of its 13-15 s before its cudafe++ started, the loop looking every
        50 ms."""
        return any(run.record(self.dag.tasks[t].early[0]).start is not None for t in self._open)

    def poll(self, run: RunView) -> None:
        pids = run.step_pids()
        self._pids.update(pids)
        for task_id in sorted(self._open):
            if task_id not in self._open:
                continue  # judged with a sibling in this round
            if run.record(task_id).end is not None and not run.running(task_id):
                self._open.discard(task_id)  # ended first: its check compares
                continue
            task = self.dag.tasks[task_id]
            check = self.dag.tasks[task.checked_by]
            writer = task.early[0]
            nvcc_path, own_path = (os.path.join(self.cwd, p) for p in check.module_ids)
            writer_done = run.record(writer).state is State.DONE
            nvcc_id = read_id(nvcc_path) if writer_done or written(nvcc_path, pids.get(writer)) else None
            if task.predicted_module_id is not None:
                # Its id was written before it started; only nvcc's final one can tell.
                own_id = read_id(own_path)  # there once the task was released
                why = PREDICTION_DIFFERS if nvcc_id is not None and own_id is not None and nvcc_id != own_id else None
            else:
                own_id = read_id(own_path) if written(own_path, pids.get(task_id)) else None
                why = verdict(nvcc_id, own_id, writer_pid=self._pids.get(writer), cicc_pid=pids.get(task_id))
            if why is not None:
                # With a process id in the id, every cicc of the compile that guessed fails too.
                same = [t for t in sorted(self._open) if why == PID and self._nvcc_path(t) == check.module_ids[0]]
                for failed in same or [task_id]:
                    self._open.discard(failed)
                    stopped = self.dag.tasks[failed]
                    # (a failed guess only: a traced cicc may have half written its trace)
                    from ..plan.tool_traces import trace_files

                    run.redo(failed, printed(self.dag, stopped), why=why,
                             half_written=trace_files(stopped.step.argv))  # fmt: skip
            elif nvcc_id is not None and own_id is not None:
                self._open.discard(task_id)  # the guess held

    def _nvcc_path(self, task_id: int) -> str:
        return self.dag.tasks[self.dag.tasks[task_id].checked_by].module_ids[0]


def read_id(path: str) -> bytes | None:
    """The module_id in ``path``; None when there is none to read."""
    try:
        return read_bytes(path)
    except OSError:
        return None


def run_check(run: TaskRun) -> None:
    task = run.task
    assert task.module_ids is not None
    nvcc_id, ours = task.module_ids
    if read_bytes(nvcc_id) == read_bytes(ours):
        run.finish(0)
        return
    # The cicc ran with another module_id (it ended before the ids could tell): its outputs
    # are wrong; redo it as nvcc would.
    run.record.reran = True
    dag = run.dag
    cicc = next((p for p in dag.preds[task.id] if dag.tasks[p].checked_by == task.id), None)
    if cicc is not None:
        run.record.guess_lost = run.record_of(cicc).seconds
        run.record.guess_failed = DIFFERS
    run.exec(task.rerun)


def watches(dag: Dag, *, cwd: str) -> list[EarlyVerdicts]:
    verdicts = EarlyVerdicts(dag, cwd=cwd)
    return [verdicts] if verdicts else []


# The check itself is in-process; a rerun of cicc is rare enough to run without a slot (a cicc
# that guessed wrong is stopped early and run again in its own slot by the scheduler).
HANDLERS: Mapping[Action, Handler] = {Action.CHECK_MODULE_ID: Handler(run_check, takes_slot=False)}
