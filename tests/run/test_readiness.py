"""When a task becomes ready (fast_nvcc.run.readiness): predecessors, any_of groups, optional
tasks and tasks run again, on made-up graphs: no process."""

from __future__ import annotations


import pytest

from fast_nvcc.graph.tasks import Dag
from fast_nvcc.run.early_inputs import EarlyInputs
from fast_nvcc.run.readiness import Readiness
from fast_nvcc.run.ready_queue import ReadyQueue
from fast_nvcc.run.task_records import Record, State

from tasks import sh_task


class Case:
    """A graph's readiness, with a clock, the running tasks and the stopped ones made up."""

    def __init__(self, tasks, preds, tmp_path, *, running=()) -> None:
        dag = Dag(tuple(tasks), tuple(frozenset(p) for p in preds))
        self.records = [Record(t.id) for t in tasks]
        self.queue = ReadyQueue([1.0] * len(tasks))
        self.running, self.stopped, self.clock = set(running), [], 0.0
        self.readiness = Readiness(dag, list(tasks), self.records, self.queue,
                                   early=EarlyInputs(dag, cwd=str(tmp_path)), running=self.running.__contains__,
                                   now=lambda: self.clock, stop_optional=self.stopped.append)  # fmt: skip

    def ready(self) -> list[int]:
        return sorted(self.queue.ids())

    def done(self, task_id: int, *, dropped: bool = False) -> None:
        """``task_id`` ended well (its outcome is decided before readiness hears of it)."""
        self.queue.remove(task_id)
        self.records[task_id].state, self.records[task_id].dropped = State.DONE, dropped
        self.records[task_id].end = self.clock
        self.readiness.ended_well(task_id)


def optional(task_id: int, script: str = "true"):
    return sh_task(task_id, script)._replace(optional=True)


def test_a_task_is_ready_once_every_predecessor_is_done_and_stamped_then(tmp_path):
    case = Case([sh_task(0, "a"), sh_task(1, "b"), sh_task(2, "c")], [set(), set(), {0, 1}], tmp_path)
    case.readiness.begin()
    assert case.ready() == [0, 1] and case.records[0].ready == 0.0
    case.clock = 2.0
    case.done(0)
    assert case.ready() == [1]
    case.clock = 3.0
    case.done(1)
    assert case.ready() == [2] and case.records[2].ready == 3.0


def test_one_member_of_an_any_of_group_serves_it_once(tmp_path):
    then = sh_task(2, "then")._replace(any_of=frozenset({0, 1}))
    case = Case([sh_task(0, "a"), sh_task(1, "b"), then], [set(), set(), {0, 1}], tmp_path)
    case.readiness.begin()
    case.done(1)
    assert case.ready() == [0, 2]
    case.queue.remove(2)
    case.done(0)
    assert case.ready() == []  # served already: the other member's end is nothing to it


def test_an_any_of_group_waits_for_its_other_predecessors_too(tmp_path):
    then = sh_task(3, "then")._replace(any_of=frozenset({0, 1}))
    case = Case([sh_task(0, "a"), sh_task(1, "b"), sh_task(2, "c"), then],
                [set(), set(), set(), {0, 1, 2}], tmp_path)  # fmt: skip
    case.readiness.begin()
    case.done(0)
    assert 3 not in case.ready()
    case.done(2)
    assert 3 in case.ready()


@pytest.mark.parametrize("helped", [True, False])
def test_a_running_probe_keeps_its_group_waiting_until_it_ends(tmp_path, helped):
    then = sh_task(2, "then")._replace(any_of=frozenset({0, 1}))
    case = Case([sh_task(0, "a"), optional(1), then], [set(), set(), {0, 1}], tmp_path, running={1})
    case.readiness.begin()
    case.done(0)
    assert 2 not in case.ready()  # the probe runs: its stub is the sure one
    case.running.clear()
    case.done(1, dropped=not helped)
    assert 2 in case.ready()  # its stub; or, since it did not help, the member's done


def test_an_optional_task_whose_group_is_served_is_dropped_and_stopped(tmp_path):
    then = sh_task(2, "then")._replace(any_of=frozenset({0, 1}))
    case = Case([sh_task(0, "a"), optional(1), then], [set(), set(), {0, 1}], tmp_path)
    case.readiness.begin()
    assert case.ready() == [0, 1]
    case.done(0)
    assert case.records[1].dropped and case.stopped == [1]
    assert case.ready() == [2]  # the probe left the queue


def test_a_dropped_optional_predecessor_serves_nobody(tmp_path):
    case = Case([optional(0), sh_task(1, "b")], [set(), {0}], tmp_path)
    case.readiness.begin()
    case.done(0, dropped=True)
    assert case.ready() == []


def test_a_task_run_again_is_ready_again_unless_it_waits_for_a_file(tmp_path):
    case = Case([sh_task(0, "a"), sh_task(1, "b")], [set(), {0}], tmp_path)
    case.readiness.begin()
    case.done(0)
    case.queue.remove(1)
    case.clock = 5.0
    case.readiness.replace(sh_task(1, "b as printed"), queued=True)
    assert case.ready() == [1] and case.records[1].ready == 5.0
    assert case.readiness.tasks[1].step.text == "b as printed"
    # A task run again whose early file's writer is still running waits for that file.
    (tmp_path / "id").write_text("")
    again = sh_task(1, "b")._replace(early=(0, "id", None))
    case = Case([sh_task(0, "a"), sh_task(1, "b")], [set(), set()], tmp_path)
    case.readiness.begin()
    case.queue.remove(1)
    case.readiness.replace(again, queued=True)
    assert case.ready() == [0]
    case.done(0)  # the writer ended: the file is final
    assert case.ready() == [1]
