"""The module_id check: the task that lets each cicc start before cudafe++.

:func:`fast_nvcc.graph.speculate_module_ids` gives each cicc a private module_id file of its
own making and adds a check task after it; the check compares that file with the one nvcc's
plan makes (cudafe++'s, or the first cicc's on older nvcc) and, when they differ, reruns the
cicc exactly as nvcc printed it before anything downstream runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from .files import read_bytes
from .graph import Action
from .scheduler import Handler, TaskRun


def run_check(run: TaskRun) -> None:
    task = run.task
    assert task.module_ids is not None
    nvcc_id, ours = task.module_ids
    if read_bytes(nvcc_id) == read_bytes(ours):
        run.finish(0)
        return
    # A different module_id: the speculative cicc's outputs are wrong; redo it as nvcc would.
    run.record.reran = True
    run.exec(task.rerun)


# The check itself is in-process; a rerun of cicc is rare enough to run without a slot.
HANDLERS: Mapping[Action, Handler] = {Action.CHECK_MODULE_ID: Handler(run_check, takes_slot=False)}
