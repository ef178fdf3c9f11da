"""Graphs of shell tasks, for the tests of the scheduler and of what it runs on."""

from __future__ import annotations

from fast_nvcc.graph.tasks import Action, Task
from fast_nvcc.plan.dryrun import Kind, Step


def sh_task(task_id: int, script: str, *args: str, index: int | None = None, kind: Kind = Kind.OTHER,
            action: Action = Action.EXEC) -> Task:  # fmt: skip
    """A task that runs ``sh -c script args...``, as a step of ``kind`` (the scheduler ranks and
    splits by the kind and the arguments: ``-split-compile N``)."""
    step = Step(
        index=task_id if index is None else index,
        text=script,
        kind=kind,
        tool="sh",
        argv=("sh", "-c", script, *args),
    )
    return Task(task_id, step, action, argv=step.argv)



def overlap(records) -> int:
    events = sorted([(r.start, 1) for r in records if r.start is not None] +
                    [(r.end, -1) for r in records if r.end is not None])  # fmt: skip
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak
