"""Captured output forwarded in nvcc's order (fast_nvcc.run.emitter): task after task as each
earlier one is forwarded, nvcc's own messages between the steps they precede, a cicc's output
once its module_id check has judged it, and nothing after a failure (made-up tasks and records,
their captures files)."""

from __future__ import annotations

import io

import pytest

from fast_nvcc.graph.tasks import Action
from fast_nvcc.run.emitter import Emitter
from fast_nvcc.run.task_records import Record, State

from tasks import sh_task

DONE, FAILED, SKIPPED = State.DONE, State.FAILED, State.SKIPPED


def records_with_output(tmp_path, states, *, indexes=None):
    """Tasks whose step ``indexes`` (their ids by default) give nvcc's order, and their
    records in ``states``, each with a capture of ``out<id>`` and ``err<id>``."""
    tasks, records = [], []
    for task_id, state in enumerate(states):
        tasks.append(sh_task(task_id, "true", index=None if indexes is None else indexes[task_id]))
        captures = []
        for fd, text in ((1, f"out{task_id}\n"), (2, f"err{task_id}\n")):
            path = tmp_path / f"{task_id}.{fd}"
            path.write_text(text)
            captures.append((fd, str(path)))
        records.append(Record(task_id, state=state, captures=captures))
    return tasks, records


def emitter_for(tasks, records, messages=()):
    out, err = io.BytesIO(), io.BytesIO()
    return Emitter(tasks, records, list(messages), stdout=out, stderr=err), out, err


def test_output_goes_out_in_nvcc_order_whatever_the_task_ids(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, DONE, DONE], indexes=[2, 0, 1])
    emitter, out, err = emitter_for(tasks, records)
    emitter.forward(upto=None, final=True)
    assert out.getvalue() == b"out1\nout2\nout0\n"
    assert err.getvalue() == b"err1\nerr2\nerr0\n"


def test_a_task_not_yet_ended_holds_back_those_after_it_until_it_ends(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, SKIPPED, DONE])
    emitter, out, _ = emitter_for(tasks, records)
    emitter.forward(upto=None)
    assert out.getvalue() == b"out0\n"
    records[1].state = DONE
    emitter.forward(upto=None)
    assert out.getvalue() == b"out0\nout1\nout2\n"


@pytest.mark.parametrize("final", [False, True])
def test_nothing_is_forwarded_after_a_failure(tmp_path, final):
    tasks, records = records_with_output(tmp_path, [DONE, FAILED, DONE])
    emitter, out, err = emitter_for(tasks, records)
    emitter.forward(upto=None, final=final)
    emitter.forward(upto=None, final=final)
    assert out.getvalue() == b"out0\nout1\n" and err.getvalue() == b"err0\nerr1\n"


def test_forwarding_stops_after_the_task_it_is_told(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, DONE, DONE])
    emitter, out, _ = emitter_for(tasks, records)
    emitter.forward(upto=tasks[1].order)
    assert out.getvalue() == b"out0\nout1\n"


@pytest.mark.parametrize("state", [DONE, SKIPPED])
def test_an_optional_tasks_output_is_nobodys_and_holds_nothing_back(tmp_path, state):
    tasks, records = records_with_output(tmp_path, [DONE, state, DONE])
    tasks[1] = tasks[1]._replace(optional=True)
    emitter, out, _ = emitter_for(tasks, records)
    emitter.forward(upto=None)
    assert out.getvalue() == b"out0\nout2\n"


# A cicc (0) and its module_id check (1), which reruns cicc on a mismatch and then holds the
# rerun's output; then the next step (2).
@pytest.mark.parametrize(
    "cicc, check, reran, final, printed",
    [
        (DONE, SKIPPED, False, False, b""),  # not judged yet: it may be rerun
        (DONE, SKIPPED, False, True, b"out0\n"),  # the run's end: what there is
        (DONE, DONE, False, False, b"out0\nout1\nout2\n"),  # its guess held
        (DONE, DONE, True, False, b"out1\nout2\n"),  # rerun: only the rerun's output counts
        (FAILED, SKIPPED, False, False, b"out0\n"),  # failed as with nvcc's id: its output stands
    ],
    ids=["unjudged", "unjudged-final", "held", "rerun", "failed"],
)
def test_a_ciccs_output_waits_for_its_module_id_check(tmp_path, cicc, check, reran, final, printed):
    tasks, records = records_with_output(tmp_path, [cicc, check, DONE], indexes=[0, 0, 1])
    tasks[0] = tasks[0]._replace(checked_by=1)
    tasks[1] = tasks[1]._replace(action=Action.CHECK_MODULE_ID)
    records[1].reran = reran
    emitter, out, _ = emitter_for(tasks, records)
    emitter.forward(upto=None, final=final)
    assert out.getvalue() == printed


def test_nvccs_own_messages_come_before_the_step_they_precede(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, SKIPPED])
    messages = [(2, "after the last\n"), (0, "first\n"), (1, "second\n")]
    emitter, _, err = emitter_for(tasks, records, messages)
    emitter.forward(upto=None)
    assert err.getvalue() == b"first\nerr0\n"
    records[1].state = DONE
    emitter.forward(upto=None, final=True)
    assert err.getvalue() == b"first\nerr0\nsecond\nerr1\nafter the last\n"


def test_a_capture_gone_is_forwarded_as_nothing(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, DONE])
    (tmp_path / "0.1").unlink()
    emitter, out, _ = emitter_for(tasks, records)
    emitter.forward(upto=None, final=True)
    assert out.getvalue() == b"out1\n"


class ClosedPipe(io.BytesIO):
    def write(self, data):
        raise BrokenPipeError


def test_a_reader_gone_ends_the_forwarding_quietly(tmp_path):
    tasks, records = records_with_output(tmp_path, [DONE, DONE])
    err = io.BytesIO()
    emitter = Emitter(tasks, records, [(1, "message\n")], stdout=ClosedPipe(), stderr=err)
    emitter.forward(upto=None, final=True)  # no BrokenPipeError
    assert err.getvalue() == b""  # nothing after the first write that failed
    assert emitter.cursor == len(tasks)


def test_without_streams_it_writes_to_fds_1_and_2(tmp_path, capfd):
    tasks, records = records_with_output(tmp_path, [DONE, DONE])
    Emitter(tasks, records, [], stdout=None, stderr=None).forward(upto=None, final=True)
    captured = capfd.readouterr()
    assert captured.out == "out0\nout1\n" and captured.err == "err0\nerr1\n"
