"""What ``-v`` says after a run, a line per task that did not go the plain way: a guess that
failed, a step stopped or killed while memory ran short, a host compile that was not split, the
steps that went through sccache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..graph.tasks import Action, Dag
from ..run.task_records import Record, State

if TYPE_CHECKING:
    from ..remote.sccache import RemoteSteps

Say = Callable[[str], None]


def say_task_notes(dag: Dag, records: Sequence[Record], say: Say) -> None:
    for task, record in zip(dag.tasks, records):
        if task.predicted_module_id is not None and not record.guess_failed and record.state is State.DONE:
            say(f"{task.step.label}: started with cudafe++, on the module_id its last compile predicted")
        if record.guess_failed and task.action is not Action.HOST_BACK:
            if task.action is Action.CHECK_MODULE_ID:
                how = f"it ran to its end ({record.guess_lost:.1f} s) on its own; reran it as printed"
            elif record.guess_lost:
                how = f"its own was stopped after {record.guess_lost:.1f} s; ran it as printed"
            else:
                how = "ran it as printed from the start"
            label = task.step.label if task.action is not Action.CHECK_MODULE_ID else task.label
            say(f"{label}: {record.guess_failed}: {how}")
        if record.memory_stopped:
            say(f"{task.step.label}: stopped {record.memory_stopped:.1f} s while memory ran short")
        if record.yielded:
            say(f"{task.step.label}: stopped {record.yielded:.1f} s ({record.yields}x) to give its core to a split step")
        if record.memory_evicted:
            say(f"{task.step.label}: killed to make room for an older step while memory ran short; ran it again")
        elif record.oom_rerun:
            say(f"{task.step.label}: killed for lack of memory; ran it again")
        if task.action is Action.LEARNED_STUB and record.state is State.DONE and not record.dropped:
            say(f"{task.step.label}: cc1plus could start on the stub its last compile's cicc wrote (the same input)")
        if record.split_note:
            lost = f" ({record.guess_lost:.1f} s of cc1plus thrown away)" if record.guess_lost else ""
            say(f"{task.step.label}: host compile run as printed: {record.split_note}{lost}")


def say_remote(remote: RemoteSteps, dag: Dag, records: Sequence[Record], say: Say) -> None:
    """One line for what went to sccache, one per step that ran here after all."""
    outcomes: dict[str, list[str]] = {}
    for task, record in zip(dag.tasks, records):
        if record.remote is not None:
            outcomes.setdefault(record.remote, []).append(f"{task.step.tool} {task.step.arch or ''}".strip())
        if record.remote_note:
            say(f"{task.step.label}: ran here after sccache: {record.remote_note}")
    if outcomes:
        say("through sccache: " + "; ".join(f"{what} {len(steps)} ({', '.join(steps)})"
                                          for what, steps in sorted(outcomes.items())))  # fmt: skip
    if remote.disabled:
        say("the steps after that one did not go to sccache")
    if remote.ledger.dist_errors:
        say(f"sccache could not send {remote.ledger.dist_errors} step(s) to its build servers and compiled them here")
