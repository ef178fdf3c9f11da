"""Tasks that start on one file of a running predecessor (fast_nvcc.run.early_inputs): released
once the file is written and closed, or once the writer of a predicted module_id has started,
each once, with a copy of what they started on (made-up tasks; this process stands in for the
running writer, as /proc shows its open files)."""

from __future__ import annotations

import os

import pytest

from fast_nvcc.graph.tasks import Dag
from fast_nvcc.run.early_inputs import EarlyInputs, written

from tasks import sh_task

WRITER, EARLY, LATE = range(3)  # LATE names WRITER's file too, but waits for its end
FILE = "k.module_id"


def early_dag(tmp_path, *, predicted: str | None = None) -> Dag:
    copy = str(tmp_path / "started-on")
    tasks = [sh_task(i, "true") for i in range(3)]
    tasks[EARLY] = tasks[EARLY]._replace(early=(WRITER, FILE, copy), predicted_module_id=predicted)
    tasks[LATE] = tasks[LATE]._replace(early=(EARLY, FILE, None))  # its writer is no predecessor
    return Dag(tuple(tasks), (frozenset(), frozenset({WRITER}), frozenset()))


def started_on(tmp_path) -> str:
    return (tmp_path / "started-on").read_text()


@pytest.mark.parametrize(
    "content, writer, still_open, expected",
    [
        (None, "self", False, False),  # not there yet
        ("", "self", False, False),  # created, nothing in it yet
        ("id", None, False, False),  # its writer is not running: nothing to tell by
        ("id", "self", True, False),  # the writer still has it open
        ("id", "self", False, True),
    ],
    ids=["missing", "empty", "no-writer", "open", "written"],
)
def test_a_file_is_written_once_its_running_writer_has_closed_it(tmp_path, content, writer, still_open, expected):
    path = tmp_path / FILE
    if content is not None:
        path.write_text(content)
    handle = open(path, "rb") if still_open else None
    try:
        assert written(str(path), os.getpid() if writer == "self" else None) is expected
    finally:
        if handle is not None:
            handle.close()


def test_a_task_is_released_once_when_its_writer_has_written_and_closed_the_file(tmp_path):
    early = EarlyInputs(early_dag(tmp_path), cwd=str(tmp_path))
    assert early  # EARLY waits; LATE's writer is not its predecessor: it waits as usual
    pids = {WRITER: os.getpid(), EARLY: os.getpid()}
    assert list(early.poll(pids)) == []
    with open(tmp_path / FILE, "w") as handle:
        handle.write("id-1")
        handle.flush()
        assert list(early.poll(pids)) == []  # written, still open
    assert list(early.poll(pids)) == [EARLY]
    assert list(early.poll(pids)) == []  # once
    assert not early
    assert early.released(WRITER, EARLY)
    assert started_on(tmp_path) == "id-1"
    (tmp_path / FILE).write_text("id-2")  # written again: the check compares the copy with it
    assert early.writer_ended(WRITER) == []
    assert started_on(tmp_path) == "id-1"


def test_a_writer_that_ends_first_hands_its_file_over_with_its_end(tmp_path):
    early = EarlyInputs(early_dag(tmp_path), cwd=str(tmp_path))
    (tmp_path / FILE).write_text("id")
    assert early.writer_ended(WRITER) == []  # the graph's edge: counted as usual
    assert not early and not early.released(WRITER, EARLY)
    assert started_on(tmp_path) == "id"
    assert list(early.poll({WRITER: os.getpid()})) == []


def test_a_predicted_module_id_is_written_with_the_writers_pid_once_it_has_started(tmp_path):
    early = EarlyInputs(early_dag(tmp_path, predicted="_7e2c_{pid}_k"), cwd=str(tmp_path))
    assert list(early.poll({})) == []  # the writer has not started
    assert list(early.poll({WRITER: 4242})) == [EARLY]  # its file is not there: no need
    assert started_on(tmp_path) == "_7e2c_4242_k"
    assert early.released(WRITER, EARLY)


@pytest.mark.parametrize("writer_done", [True, False])
def test_a_task_run_again_waits_for_the_file_of_nvccs_own_writer(tmp_path, writer_done):
    graph = early_dag(tmp_path, predicted="_7e2c_{pid}_k")
    early = EarlyInputs(graph, cwd=str(tmp_path))
    assert early.writer_ended(WRITER) == []  # its guess ran; the writer ended before its file was there
    (tmp_path / FILE).write_text("nvcc's id")
    assert early.wait_again(graph.tasks[EARLY], writer_done=writer_done) is writer_done
    if writer_done:
        assert not early
    else:
        assert list(early.poll({})) == []  # no prediction any more: it waits for the file
        assert early.writer_ended(WRITER) == [EARLY]  # an edge of its own, released here
        assert not early.released(WRITER, EARLY)
    assert started_on(tmp_path) == "nvcc's id"
