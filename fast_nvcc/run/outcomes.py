"""What a task's end means for the run: done, failed, killed, dropped, or to run again.

Two moments decide it.  On the task's own thread, as its handler finishes, the exit code gives
the task its state (:func:`state_at_end`), unless the task runs again: then it must never show
as failed, not even for the moment before the loop takes it up.  On the loop's thread, as the
end is handled, :func:`outcome` says what the run does next with it.  Both are plain functions
of what is known, so they are tested without a process.
"""

from __future__ import annotations

import enum

from .task_records import State


class Outcome(enum.Enum):
    AGAIN = "again"  # a guess of ours proved wrong: run again as nvcc printed it
    FIRST = "first"  # killed for memory (fast_nvcc.machine.memory): run again, ahead of all
    DONE = "done"  # its successors may go
    DROPPED = "dropped"  # an optional task that was stopped or failed: it never fails the run
    KILLED = "killed"  # stopped by fast_nvcc after an earlier failure or on a signal
    FAILED = "failed"  # the failure nvcc would have reported, if no earlier one comes


def state_at_end(returncode: int, *, runs_again: bool) -> State | None:
    """The state a handler's finish gives its task; None when the task runs again (it neither
    failed nor is done)."""
    if runs_again:
        return None
    return State.DONE if returncode == 0 else State.FAILED


def outcome(state: State, *, killed: bool, redo: bool, oom_rerun: bool, optional: bool) -> Outcome:
    """What the run does with a task whose end it handles now.

    ``state``: what its finish gave it; ``killed``: fast_nvcc killed it; ``redo``: it was
    stopped to run again as printed (fast_nvcc.guess.module_id); ``oom_rerun``: the kernel
    killed it for memory and it has one more run; ``optional``: it only ever helps."""
    if redo and not killed:
        return Outcome.AGAIN
    if oom_rerun and state is State.SKIPPED and not killed:
        return Outcome.FIRST
    if optional and (killed or state is not State.DONE):
        return Outcome.DROPPED
    if killed:
        return Outcome.KILLED
    return Outcome.DONE if state is State.DONE else Outcome.FAILED

