"""What a task's end means for the run (fast_nvcc.run.outcomes), and how a record starts over
for a run again (fast_nvcc.run.task_records.Record.start_over): no process."""

from __future__ import annotations

import pytest

from fast_nvcc.run.outcomes import Outcome, outcome, state_at_end
from fast_nvcc.run.task_records import Record, State

DONE, FAILED, SKIPPED = State.DONE, State.FAILED, State.SKIPPED


@pytest.mark.parametrize(
    "returncode, runs_again, expected",
    [(0, False, DONE), (2, False, FAILED), (-15, False, FAILED), (0, True, None), (137, True, None)],
)
def test_state_at_end(returncode, runs_again, expected):
    assert state_at_end(returncode, runs_again=runs_again) is expected


@pytest.mark.parametrize(
    "state, killed, redo, oom_rerun, optional, expected",
    [
        (DONE, False, False, False, False, Outcome.DONE),
        (FAILED, False, False, False, False, Outcome.FAILED),
        # killed by fast_nvcc (after an earlier failure, on a signal): not a failure of its own
        (FAILED, True, False, False, False, Outcome.KILLED),
        (DONE, True, False, False, False, Outcome.KILLED),
        # a guess proved wrong while it ran: again as printed; unless it was killed meanwhile
        (SKIPPED, False, True, False, False, Outcome.AGAIN),
        (SKIPPED, True, True, False, False, Outcome.KILLED),
        # killed by the kernel for memory, with a run left: again, ahead of all
        (SKIPPED, False, False, True, False, Outcome.FIRST),
        (SKIPPED, True, False, True, False, Outcome.KILLED),
        # its second kill for memory: its finish gave it a state, and that stands
        (FAILED, False, False, True, False, Outcome.FAILED),
        (DONE, False, False, True, False, Outcome.DONE),
        # an optional task never fails the run
        (FAILED, False, False, False, True, Outcome.DROPPED),
        (DONE, True, False, False, True, Outcome.DROPPED),
        (DONE, False, False, False, True, Outcome.DONE),
    ],
)
def test_outcome(state, killed, redo, oom_rerun, optional, expected):
    assert outcome(state, killed=killed, redo=redo, oom_rerun=oom_rerun, optional=optional) is expected


def _ran(record: Record) -> Record:
    record.start, record.end, record.returncode, record.state = 1.0, 4.0, 137, SKIPPED
    record.cpu_seconds, record.max_rss_kb, record.memory_stopped = 2.5, 900, 0.5
    record.serial_seconds = 1.5  # a split step's threads, one at a time
    record.captures.append((2, "/tmp/x.2"))
    return record


def test_a_record_starts_over_after_a_failed_guess():
    record = _ran(Record(3))
    record.guess_lost = 1.0
    record.start_over(guess_failed="its module_id differs from nvcc's")
    assert record.guess_failed == "its module_id differs from nvcc's"
    assert record.guess_lost == 4.0  # the 3 s it ran are lost, on top of what was lost before
    assert (record.start, record.end, record.returncode, record.state) == (None, None, None, SKIPPED)
    assert record.cpu_seconds is None and record.max_rss_kb is None  # it ran another command
    assert record.serial_seconds == 0.0  # as its cpu: the split share learned is the rerun's
    assert record.captures == [] and record.memory_stopped == 0.0


def test_a_record_starts_over_after_a_kill_for_memory():
    record = _ran(Record(3))
    record.start_over()
    assert record.guess_failed == "" and record.guess_lost == 0.0
    assert (record.start, record.end, record.returncode, record.state) == (None, None, None, SKIPPED)
    assert (record.cpu_seconds, record.max_rss_kb) == (2.5, 900)  # the same command: still counted
    assert record.serial_seconds == 1.5
    assert record.captures == [] and record.memory_stopped == 0.0
