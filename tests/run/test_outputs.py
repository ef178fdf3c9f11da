"""What a run leaves, made what nvcc's would have left (fast_nvcc.run.outputs): nvcc's exit code
for the step that failed, no half-written output, none nvcc would not have reached, and none of
the plan's temp files (made-up steps writing files of tmp_path)."""

from __future__ import annotations

import os

import pytest

from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.plan.dryrun import Kind, Plan, Step
from fast_nvcc.run.outputs import fresh_outputs, remove_partial_outputs, remove_temp_files, settle
from fast_nvcc.run.task_records import Record, RunResult, State

DONE, FAILED, KILLED, SKIPPED = State.DONE, State.FAILED, State.KILLED, State.SKIPPED

# Two sources' compiles under one nvcc: a.cu's preprocessing for its dependency file (nvcc's
# dependency phase), its depfile, its object; then b.cu's object.
STEPS = [
    Step(0, "gcc -E a.cu", Kind.PREPROCESS, "gcc -E", ("gcc",), writes=frozenset({"a.ii"}), outputs=("a.ii",)),
    Step(1, "depfile", Kind.DEPFILE, "depfile", (), reads=frozenset({"a.ii"}), outputs=("a.d",)),
    Step(2, "gcc -c a", Kind.HOST_COMPILE, "gcc -c", ("gcc",), outputs=("a.o",)),
    Step(3, "gcc -c b", Kind.HOST_COMPILE, "gcc -c", ("gcc",), outputs=("b.o",)),
]
OWNERS = {0: "a.cu", 1: "a.cu", 2: "a.cu", 3: "b.cu"}
PLAN = Plan(steps=tuple(STEPS), env={}, assignments=())


def dag(*, before_threads: frozenset[int] = frozenset()) -> Dag:
    tasks = tuple(Task(s.index, s, Action.EXEC, argv=s.argv, before_threads=s.index in before_threads) for s in STEPS)
    return Dag(tasks, tuple(frozenset() for _ in tasks))


def settled(tmp_path, states, *, failed=None, code=0, existed=(), threaded=False, before_threads=frozenset()):
    """Run ``settle`` on a run whose steps ended in ``states`` (each DONE or KILLED step wrote
    its output; ``existed``: the outputs there before the run); the result and what is left."""
    graph = dag(before_threads=before_threads)
    for name in existed:
        (tmp_path / name).write_text("old")
    fresh = fresh_outputs(graph, str(tmp_path))
    records = []
    for task, state in zip(graph.tasks, states):
        if state in (DONE, KILLED):
            (tmp_path / task.step.outputs[0]).write_text("new")
        records.append(Record(task.id, state=state))
    result = RunResult(code, tuple(records), failed, wall_seconds=1.0)
    result = settle(result, graph, PLAN, fresh, threaded=threaded, owners=OWNERS, cwd=str(tmp_path))
    return result, sorted(os.listdir(tmp_path))


def test_fresh_outputs_are_those_not_there_before(tmp_path):
    (tmp_path / "a.o").write_text("")
    assert fresh_outputs(dag(), str(tmp_path)) == {"a.ii", "a.d", "b.o"}


@pytest.mark.parametrize(
    "failed, threaded, code",
    [
        (2, False, 1),  # nvcc passes the step's own code on
        (2, True, 255),  # on nvcc's threads every failure is -1
        (0, True, 1),  # the dependency phase runs before the threads start
        (1, True, 1),
    ],
)
def test_a_failure_gets_nvccs_exit_code(tmp_path, failed, threaded, code):
    states = [DONE] * failed + [FAILED] + [SKIPPED] * (len(STEPS) - failed - 1)
    result, _ = settled(tmp_path, states, failed=failed, code=1, threaded=threaded)
    assert result.returncode == code and result.failed_task == failed


def test_a_run_that_succeeded_keeps_everything_and_its_code(tmp_path):
    result, left = settled(tmp_path, [DONE] * 4)
    assert result.returncode == 0 and result.failed_task is None
    assert left == ["a.d", "a.ii", "a.o", "b.o"]


def test_a_killed_steps_half_written_output_goes_even_if_it_was_there_before(tmp_path):
    _, left = settled(tmp_path, [DONE, DONE, KILLED, DONE], existed=["a.o"])
    assert left == ["a.d", "a.ii", "b.o"]


def test_after_a_failure_what_nvcc_would_not_have_reached_goes_unless_it_was_there_before(tmp_path):
    # a.o failed; b.o was done first (the graph ran it beside a.o), a stale b.o stays.
    _, left = settled(tmp_path, [DONE, DONE, FAILED, DONE], failed=2, code=1)
    assert left == ["a.d", "a.ii"]
    for name in os.listdir(tmp_path):
        os.remove(tmp_path / name)
    _, left = settled(tmp_path, [DONE, DONE, FAILED, DONE], failed=2, code=1, existed=["b.o"])
    assert left == ["a.d", "a.ii", "b.o"]


@pytest.mark.parametrize(
    "threaded, before_threads, left",
    [
        (False, frozenset(), ["a.d", "a.ii", "a.o"]),  # one step after the other: a.cu's were done
        (True, frozenset(), []),  # under -t, a.cu's compile never got to its end
        (True, frozenset({0, 1}), ["a.d", "a.ii"]),  # its dependency phase was done before the threads
    ],
)
def test_under_threads_a_failure_takes_the_other_sources_outputs(tmp_path, threaded, before_threads, left):
    # b.cu's object failed; a.cu's steps, before it in nvcc's order, were done.
    states = [DONE, DONE, DONE, FAILED]
    _, got = settled(tmp_path, states, failed=3, code=1, threaded=threaded, before_threads=before_threads)
    assert got == left


def test_an_interrupted_run_removes_what_its_running_steps_were_writing(tmp_path):
    graph = dag()
    for name in ("a.ii", "a.d", "a.o"):
        (tmp_path / name).write_text("")
    records = [Record(0, DONE, start=0.0, end=1.0), Record(1, SKIPPED, start=1.0), Record(2, SKIPPED, start=1.0),
               Record(3, SKIPPED)]  # fmt: skip
    remove_partial_outputs(graph, records, cwd=str(tmp_path), interrupted=True)
    assert os.listdir(tmp_path) == ["a.ii"]


def test_temp_files_go_with_those_the_tools_made_from_their_names(tmp_path):
    temp = tmp_path / "tmp"
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True)
    (workdir / "capture").write_text("")
    temp.mkdir()
    ours = "tmpxft_0000abcd_00000000"
    named = [f"{ours}-1_k.cpp1.ii", f"{ours}-3_k.module_id"]
    killed_halfway = f"{ours}-7_k-57610f.lgenfe.bc"  # not in the plan: cicc's, named after its input
    others = ["tmpxft_0000abce_00000000-1_k.cpp1.ii", "user.txt"]
    for name in (*named, killed_halfway, *others):
        (temp / name).write_text("")
    plan = Plan(steps=(), env={}, assignments=(), temp_tag=ours,
                temp_paths=frozenset(str(temp / n) for n in [*named, f"{ours}-5_k.fatbin"]))  # fmt: skip
    remove_temp_files(plan, str(workdir))
    assert sorted(os.listdir(temp)) == others
    assert not workdir.exists()
