"""What a run leaves behind, made what nvcc's would have left: no half-written output, none of
the outputs nvcc would not have reached after a failure, and none of the plan's temp files."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from collections.abc import Mapping, Sequence


from ..graph.tasks import Dag
from ..plan.dryrun import Plan
from ..plan.exit_codes import nvcc_exit_code
from .task_records import Record, RunResult, State


def settle(result: RunResult, dag: Dag, plan: Plan, fresh: set[str], *, threaded: bool, owners: Mapping[int, str],
           cwd: str) -> RunResult:  # fmt: skip
    """The run as nvcc's would have ended: nvcc's exit code for the step that failed, no
    half-written output, none that nvcc would not have reached (``fresh``: the outputs that did
    not exist before the run)."""
    if result.failed_task is not None:
        failed = dag.tasks[result.failed_task].step
        result = result._replace(returncode=nvcc_exit_code(result.returncode, step=failed, plan=plan, threaded=threaded))
    remove_partial_outputs(dag, result.records, cwd=cwd)
    if result.failed_task is not None:
        remove_outputs_after_failure(dag, result, fresh, threaded=threaded, owners=owners, cwd=cwd)
    return result


def fresh_outputs(dag: Dag, cwd: str) -> set[str]:
    """The user-visible files of the plan that do not exist yet."""
    outputs = {output for task in dag.tasks for output in task.step.outputs}
    return {output for output in outputs if not os.path.lexists(os.path.join(cwd, output))}


def remove_partial_outputs(dag: Dag, records: Sequence[Record], *, cwd: str, interrupted: bool = False) -> None:
    """A step killed halfway may leave half a file: remove what it was writing."""
    for task, record in zip(dag.tasks, records):
        killed = record.state is State.KILLED
        if killed or (interrupted and record.start is not None and record.end is None):
            _remove(cwd, task.step.outputs)


def remove_outputs_after_failure(
    dag: Dag, result: RunResult, fresh: set[str], *, threaded: bool, owners: Mapping[int, str], cwd: str
) -> None:
    """nvcc would not have run the steps after the one that failed, nor, under -t, got to the
    end of the other sources' compiles: what they wrote before it failed (a second source's
    object, done before the first source's cudafe++ was) goes, unless the file was there before
    (then it was going to be stale either way)."""
    failed = dag.tasks[result.failed_task]
    # Under -t nvcc runs every source's compile at once, and a failure ends the others
    # before they are done (nvcc -t0 -c kernel.cu syntax_error.cu: no kernel.o, 18 of 18).
    others = {t.id for t in dag.tasks if threaded and not t.before_threads
              and owners.get(t.step.index) != owners.get(failed.step.index)}  # fmt: skip
    for task, record in zip(dag.tasks, result.records):
        if (task.order > failed.order or task.id in others) and record.state is State.DONE:
            _remove(cwd, [output for output in task.step.outputs if output in fresh])


def remove_temp_files(plan: Plan, workdir: str) -> None:
    """Remove the plan's temp files, and those the tools made from the same names (cicc's
    ``tmpxft_..-7_k-57610f..lgenfe.bc`` when it is killed halfway), and the work directory."""
    directories = {os.path.dirname(path) for path in plan.temp_paths}
    leftovers = set(plan.temp_paths)
    if plan.temp_tag:
        for directory in directories:
            pattern = plan.temp_tag[: len("tmpxft_00000000_")] + "*"
            leftovers.update(glob.glob(os.path.join(glob.escape(directory), pattern)))
    for path in leftovers:
        try:
            os.remove(path)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    shutil.rmtree(workdir, ignore_errors=True)


def _remove(cwd: str, outputs: Sequence[str]) -> None:
    for output in outputs:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.remove(os.path.join(cwd, output))
