"""The scheduler with real processes (sh): bounds, order of output, failures, kills."""

import io
import os
import threading
import time

import psutil
import pytest

from fast_nvcc.graph.paths import priorities
from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.plan.dryrun import Kind, Step
from fast_nvcc.run.handlers import Handler, Internal
from fast_nvcc.run.scheduler import Runner
from fast_nvcc.run.task_records import State

from tasks import overlap, sh_task


def run(tasks, preds=None, *, jobs=4, tmp_path, combine=False, workdir=None, handlers=None):
    preds = preds or [frozenset() for _ in tasks]
    dag = Dag(tuple(tasks), tuple(frozenset(p) for p in preds))
    out, err = io.BytesIO(), io.BytesIO()
    runner = Runner(
        dag,
        env=os.environ,
        cwd=str(tmp_path),
        workdir=str(workdir or tmp_path),
        handlers=handlers,
        jobs=jobs,
        priorities=priorities(dag, [1.0] * len(tasks)),
        internal=Internal(),
        combine_output=combine,
        stdout=out,
        stderr=err,
    )
    result = runner.run()
    return result, out.getvalue(), err.getvalue()


def test_never_more_than_jobs_at_once(tmp_path):
    tasks = [sh_task(i, "sleep 0.2") for i in range(6)]
    result, _, _ = run(tasks, jobs=2, tmp_path=tmp_path)
    assert result.returncode == 0
    assert overlap(result.records) == 2
    assert {r.slot for r in result.records} == {0, 1}


def test_edges_are_respected(tmp_path):
    tasks = [sh_task(0, "sleep 0.2; echo a > f"), sh_task(1, "cat f")]
    result, out, _ = run(tasks, [set(), {0}], tmp_path=tmp_path)
    assert out == b"a\n"
    assert result.records[1].start >= result.records[0].end


def test_output_is_forwarded_in_nvcc_order(tmp_path):
    tasks = [
        sh_task(0, "sleep 0.4; echo first; echo first-err >&2"),
        sh_task(1, "echo second; echo second-err >&2"),
    ]
    result, out, err = run(tasks, tmp_path=tmp_path)
    assert result.records[1].end < result.records[0].end  # finished first, printed second
    assert out == b"first\nsecond\n" and err == b"first-err\nsecond-err\n"


def test_combined_output_keeps_interleaving(tmp_path):
    tasks = [sh_task(0, "echo 1; echo 2 >&2; echo 3")]
    _, out, err = run(tasks, tmp_path=tmp_path, combine=True)
    assert out == b"1\n2\n3\n" and err == b""


def test_failure_stops_later_steps_and_keeps_earlier_ones(tmp_path):
    tasks = [
        sh_task(0, "sleep 0.5; echo early"),  # before the failure in nvcc's order: runs to the end
        sh_task(1, "echo broken >&2; exit 3"),
        sh_task(2, "sleep 30"),  # after it: killed
        sh_task(3, "echo never"),  # after it and waiting: never started
    ]
    start = time.monotonic()
    result, out, err = run(tasks, [set(), set(), set(), {2}], jobs=4, tmp_path=tmp_path)
    assert time.monotonic() - start < 10
    assert result.returncode == 3 and result.failed_task == 1
    states = [r.state for r in result.records]
    assert states == [State.DONE, State.FAILED, State.KILLED, State.SKIPPED]
    assert out == b"early\n" and err == b"broken\n"


def test_the_earliest_failure_in_nvcc_order_wins(tmp_path):
    tasks = [
        sh_task(0, "sleep 0.5; echo slow-error >&2; exit 2"),
        sh_task(1, "echo fast-error >&2; exit 1"),
    ]
    result, _, err = run(tasks, tmp_path=tmp_path)
    assert result.returncode == 2 and result.failed_task == 0
    assert err == b"slow-error\n"  # nvcc would never have reached the second step


def test_a_failure_that_ends_while_a_later_one_is_handled_is_the_only_one_forwarded(tmp_path):
    # cudafe++ and cicc report the same error in a source and end within milliseconds of each
    # other; the later one in nvcc's order may be handled first.  The earlier one's message is
    # nvcc's, and nothing after it: its state says it failed before its end is handled.
    handling, earlier_done = threading.Event(), threading.Event()

    def fail(run):
        if run.task.id == 1:
            run.fail("later\n", 4)
            return
        assert handling.wait(10)
        run.fail("earlier\n", 2)
        earlier_done.set()

    def on_event(what, task, record):
        if what == "end" and task.id == 1:
            handling.set()
            assert earlier_done.wait(10)

    tasks = [sh_task(0, "true"), sh_task(1, "true")]
    dag = Dag(tuple(tasks), (frozenset(), frozenset()))
    err = io.BytesIO()
    runner = Runner(
        dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=2,
        priorities=priorities(dag, [1.0, 1.0]), internal=Internal(),
        handlers={Action.EXEC: Handler(fail)}, on_event=on_event, stdout=io.BytesIO(), stderr=err,
    )  # fmt: skip
    try:
        result = runner.run()
    finally:
        runner.close()
    assert result.returncode == 2 and result.failed_task == 0
    assert err.getvalue() == b"earlier\n"


def test_killed_steps_leave_no_processes(tmp_path):
    tasks = [sh_task(0, "exit 1", index=0), sh_task(1, "sleep 60 & sleep 60; wait", index=1)]
    result, _, _ = run(tasks, tmp_path=tmp_path)
    assert result.returncode == 1
    children = psutil.Process().children(recursive=True)
    assert not [c for c in children if "sleep" in " ".join(c.cmdline())]


def test_a_kill_reaches_processes_outside_the_tree(tmp_path):
    # The late writer is orphaned at once (a double fork), as a cc1plus that gcc forks while
    # the tree is walked would be missed: only the step's process group still holds it.
    late = tmp_path / "late"
    tasks = [
        sh_task(0, "sleep 0.5; exit 1", index=0),
        sh_task(1, f"( (sleep 1.5; touch {late}) & ); sleep 60", index=1),
    ]
    result, _, _ = run(tasks, tmp_path=tmp_path)
    assert result.returncode == 1
    assert result.records[1].state is State.KILLED
    time.sleep(2)
    assert not late.exists()


def test_steps_do_not_read_our_stdin(tmp_path):
    # Steps lead their own process groups: one reading a terminal would be stopped. nvcc's
    # steps never read stdin (nvcc copies a '-' source to a temp file itself).
    read, write = os.pipe()
    os.write(write, b"ours\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        result, out, _ = run([sh_task(0, "cat; echo done")], tmp_path=tmp_path)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    assert result.returncode == 0 and out == b"done\n"


def test_a_split_host_compile_without_its_fatbin_compiles_as_printed(tmp_path):
    # The back task finds no .fatbin.c from fatbinary: the placeholder must not stay where the
    # compile would include it, and the compile runs as printed.
    real, private = tmp_path / "x.fatbin.c", tmp_path / "private.fatbin.c"
    real.write_text("placeholder")
    compile_ = sh_task(1, f"test -e {real} && echo placeholder-seen || echo compiled")
    front = Task(0, compile_.step, Action.HOST_FRONT, argv=compile_.argv, fatbin=(str(real), str(private)))
    back = Task(1, compile_.step, Action.HOST_BACK, argv=compile_.argv, fatbin=(str(real), str(private)), front=0)
    result, out, _ = run([front, back], [set(), {0}], tmp_path=tmp_path)
    assert result.returncode == 0 and out == b"compiled\n"
    assert result.records[1].split_note == "fatbinary wrote no .fatbin.c" and not result.records[1].split


def test_a_missing_tool_fails_like_sh(tmp_path):
    step = Step(index=0, text="nope", kind=Kind.OTHER, tool="nope", argv=("/no/such/tool",))
    result, _, err = run([Task(0, step, Action.EXEC, argv=step.argv)], tmp_path=tmp_path)
    assert result.returncode == 127
    assert err == b"sh: 1: /no/such/tool: not found\n"


def test_a_missing_file_of_our_own_is_not_a_missing_tool(tmp_path):
    """A work directory that vanished (removed by a cleaner, 2026-11-23) once read as
    ``sh: 1: <path>: not found`` with sh's 127: the step's command was there all along."""
    def write_in_workdir(task_run):
        with open(os.path.join(task_run.workdir, "private.fatbin.c"), "wb"):
            pass
        task_run.exec(task_run.task.argv)

    result, _, err = run([sh_task(0, "true")], tmp_path=tmp_path, workdir=tmp_path / "gone",
                         handlers={Action.EXEC: Handler(write_in_workdir)})  # fmt: skip
    assert result.returncode == 1
    assert err.startswith(b"fast_nvcc: error: sh: ") and err.endswith(b": No such file or directory\n")
    assert err.count(b"\n") == 1 and b"not found" not in err


def test_a_task_waits_for_one_of_its_any_of_group(tmp_path):
    """The early stub's front starts once any cicc of its compile is done: here the group's
    other member waits for a file the task makes, and would fail after 10 s without it."""

    flag = tmp_path / "go"
    waits = sh_task(1, f"i=0; while [ ! -e {flag} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; test -e {flag}")
    then = sh_task(2, f"touch {flag}")._replace(any_of=frozenset({0, 1}))
    result, _, _ = run([sh_task(0, "true"), waits, then], [set(), set(), {0, 1}], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and [r.state for r in result.records] == [State.DONE] * 3
    # It started while the other member still ran (that one sees the file before our record of
    # the toucher's end is written, so the ends may come in either order: CI, 2026-11-27).
    assert result.records[2].start < result.records[1].end


def test_resource_usage_is_recorded(tmp_path):
    result, _, _ = run([sh_task(0, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")], tmp_path=tmp_path)
    (record,) = result.records
    assert record.cpu_seconds > 0 and record.max_rss_kb > 0
    assert record.seconds >= record.cpu_seconds * 0.5


# -- optional tasks (a stub probe, graph.early_stubs): idle cores only, never in the way ----------


def optional_task(task_id: int, script: str) -> Task:

    return sh_task(task_id, script)._replace(optional=True)


def waits_for(flag, task_id: int) -> Task:
    """A task that ends once ``flag`` exists, and fails if it never comes (10 s)."""
    return sh_task(task_id, f"i=0; while [ ! -e {flag} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; test -e {flag}")


def test_an_optional_task_on_an_idle_slot_counts_for_its_any_of_group(tmp_path):

    flag = tmp_path / "go"
    then = sh_task(2, f"touch {flag}")._replace(any_of=frozenset({0, 1}))
    tasks = [waits_for(flag, 0), optional_task(1, "echo mine; echo mine >&2"), then]
    result, out, err = run(tasks, [set(), set(), {0, 1}], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and [r.state for r in result.records] == [State.DONE] * 3
    assert not result.records[1].dropped and result.records[2].start <= result.records[0].end
    assert b"mine" not in out + err  # an optional task's output is nobody's


def test_an_optional_task_without_an_idle_slot_is_dropped(tmp_path):

    marker = tmp_path / "ran"
    then = sh_task(2, "true")._replace(any_of=frozenset({0, 1}))
    tasks = [sh_task(0, "sleep 0.2"), optional_task(1, f"touch {marker}"), then, sh_task(3, "echo after")]
    result, out, _ = run(tasks, [set(), set(), {0, 1}, {2}], jobs=1, tmp_path=tmp_path)
    assert result.returncode == 0 and out == b"after\n" and not marker.exists()
    assert result.records[1].dropped and result.records[1].start is None
    assert result.records[2].start >= result.records[0].end  # it waited for the real member


def test_an_optional_task_gives_its_slot_to_a_real_one(tmp_path):

    marker = tmp_path / "ran"
    then = sh_task(2, "true")._replace(any_of=frozenset({1, 3}))
    # 3 and 4 become ready together when 0 ends; one slot is free (3 takes it, the longer path),
    # the optional task holds the other, which 4 gets at once rather than after 3.
    tasks = [sh_task(0, "sleep 0.3"), optional_task(1, f"sleep 30; touch {marker}"), then,
             sh_task(3, "sleep 2"), sh_task(4, "true")]  # fmt: skip
    result, _, _ = run(tasks, [set(), set(), {1, 3}, {0}, {0}], jobs=2, tmp_path=tmp_path)
    assert result.returncode == 0 and not marker.exists()
    probe, (three, four) = result.records[1], result.records[3:]
    assert probe.dropped and probe.state is State.DONE and probe.start is not None
    assert three.start <= four.start < three.end and four.start >= probe.end


def test_an_optional_task_not_started_when_its_group_is_served_never_runs(tmp_path):

    marker = tmp_path / "ran"
    then = sh_task(2, "true")._replace(any_of=frozenset({0, 1}))
    tasks = [sh_task(0, "true"), optional_task(1, f"touch {marker}"), then, sh_task(3, "sleep 0.3")]
    result, _, _ = run(tasks, [set(), {3}, {0, 1}, set()], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and not marker.exists()
    assert result.records[1].dropped and result.records[1].start is None


def test_a_running_optional_task_is_waited_for(tmp_path):
    """A stub probe that runs writes the sure stub: the group waits for it, not for the first
    member to end; a probe that fails leaves the group to a member already done."""

    flag = tmp_path / "probe"
    then = sh_task(2, f"test -e {flag}")._replace(any_of=frozenset({0, 1}))
    tasks = [sh_task(0, "sleep 0.1"), optional_task(1, f"sleep 0.5; touch {flag}"), then]
    result, _, _ = run(tasks, [set(), set(), {0, 1}], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and not result.records[1].dropped
    failing = [sh_task(0, "true"), optional_task(1, "sleep 0.5; exit 1"), then._replace(argv=("true",))]
    result, _, _ = run(failing, [set(), set(), {0, 1}], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and result.records[1].dropped
    assert result.records[2].start >= result.records[1].end


def test_a_failing_optional_task_fails_nothing(tmp_path):

    then = sh_task(2, "echo then")._replace(any_of=frozenset({0, 1}))
    tasks = [sh_task(0, "sleep 0.3"), optional_task(1, "echo boom >&2; exit 3"), then]
    result, out, err = run(tasks, [set(), set(), {0, 1}], jobs=3, tmp_path=tmp_path)
    assert result.returncode == 0 and out == b"then\n" and err == b""
    assert result.records[1].dropped and result.records[2].start >= result.records[0].end


def test_a_short_step_takes_no_slot_of_the_pool_a_long_one_waits_for(tmp_path):
    """The pool's one slot is another compile's: a fatbinary (expected 0.1 s) runs at once,
    within -j; a cicc waits until the slot is free again.  Under make's jobserver nothing
    would run without a token (tests/machine/test_slots.py)."""
    from fast_nvcc.machine.slots import PoolSlots

    pool = tmp_path / "pool"
    other = PoolSlots(str(pool), 1)
    assert other.try_acquire()
    tasks = [sh_task(0, "true"), sh_task(1, "true")]
    tasks[0] = Task(0, Step(0, "true", Kind.FATBINARY, "fatbinary", ("true",)), Action.EXEC, argv=("true",))
    tasks[1] = Task(1, Step(1, "true", Kind.CICC, "cicc", ("true",)), Action.EXEC, argv=("true",))
    dag = Dag(tuple(tasks), (frozenset(), frozenset()))
    slots = PoolSlots(str(pool), 1)
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=2,
                    priorities=[0.1, 8.0], work=[0.1, 8.0], internal=Internal(), slots=slots,
                    stdout=io.BytesIO(), stderr=io.BytesIO())  # fmt: skip
    freed = threading.Event()

    def free_later() -> None:
        deadline = time.monotonic() + 30  # a failing run must not hang the suite
        while runner.records[0].end is None and time.monotonic() < deadline:
            time.sleep(0.01)
        freed.set()
        other.release()

    threading.Thread(target=free_later, daemon=True).start()
    result = runner.run()
    slots.close()
    other.close()
    assert result.returncode == 0 and freed.is_set()
    fatbinary, cicc = result.records
    assert fatbinary.over_pool == "short" and fatbinary.slot is not None
    assert cicc.over_pool is None and cicc.start >= fatbinary.end  # it waited for the slot


def _run_on_pool(tmp_path, tasks, preds, *, size: int, priorities, work, saturated=lambda: False,
                 stdout=None, handlers=None, jobs: int = 4):  # fmt: skip
    """One run of ``tasks`` (``preds``: each one's predecessors) on a machine-wide pool of ``size``
    slots in ``tmp_path``, with -j ``jobs``."""
    from fast_nvcc.machine.slots import PoolSlots

    dag = Dag(tuple(tasks), tuple(frozenset(p) for p in preds))
    slots = PoolSlots(str(tmp_path / "pool"), size, saturated=saturated)
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=jobs, priorities=priorities,
                    work=work, internal=Internal(), slots=slots, handlers=handlers,
                    stdout=stdout or io.BytesIO(), stderr=io.BytesIO())  # fmt: skip
    try:
        return runner.run()
    finally:
        runner.close()
        slots.close()


def test_a_slot_free_as_a_step_ends_goes_to_the_step_its_module_id_check_leads_to(tmp_path):
    """TE's whole library on 16 cores (2026-11-27): as a cicc ended, the host compile that had
    waited beside it took the compile's slot while the module_id check (no slot) ran, and the
    cicc's ptxas, the longer path, then waited 5-88 s for another slot.  Here the pool has one
    slot: the ptxas after the check takes it, the host compile waits for the ptxas.  (The cicc
    ends on its estimate: one far under it would make its ptxas short, ReadyQueue.overran.)"""
    def check(run) -> None:  # in-process, a moment long, like the module_id check
        time.sleep(0.05)
        run.finish(0)

    tasks = [sh_task(0, "sleep 0.3", kind=Kind.CICC), sh_task(1, "", action=Action.CHECK_MODULE_ID),
             sh_task(2, "sleep 0.2", kind=Kind.PTXAS), sh_task(3, "sleep 0.2", kind=Kind.HOST_COMPILE)]  # fmt: skip
    result = _run_on_pool(tmp_path, tasks, ((), (0,), (1,), ()), size=1, priorities=[10.0, 9.0, 9.0, 2.0],
                          work=[0.3, 0.0, 9.0, 2.0], handlers={Action.CHECK_MODULE_ID: Handler(check, takes_slot=False)})  # fmt: skip
    assert result.returncode == 0
    cicc, _, ptxas, host = result.records
    assert host.start >= cicc.end  # the pool's one slot was the cicc's
    assert ptxas.start < host.start  # the slot went to the ptxas, a moment after the check
    assert host.start >= ptxas.end


def _yield_run(tmp_path, host_rank: float, *, cicc_exit: int = 0, tool_full: bool = False, kind: Kind = Kind.CICC,
               jobs: int = 4, size: int = 2):  # fmt: skip
    """One compile (-j ``jobs``) on a pool of ``size`` slots: a split cicc (two busy threads
    for a second after 0.3 s of one, ranked 100, then exits ``cicc_exit``; ``kind``: a split
    step of another tool) and a host compile beside it (busy for 2 s, ranked ``host_rank``,
    after the cicc in nvcc's order)."""
    busy = "timeout 1 sh -c 'while :; do :; done'"
    tasks = [sh_task(0, f"sleep 0.3; {busy} & {busy} & wait; exit {cicc_exit}", "-split-compile", "2", kind=kind),
             sh_task(1, "timeout 2 sh -c 'while :; do :; done'; echo host done", kind=Kind.HOST_COMPILE)]  # fmt: skip
    out = io.BytesIO()
    result = _run_on_pool(tmp_path, tasks, ((), ()), size=size, priorities=[100.0, host_rank], work=[50.0, 5.0],
                          saturated=lambda: tool_full, stdout=out, jobs=jobs)  # fmt: skip
    if cicc_exit == 0:
        assert result.returncode == 0 and out.getvalue() == b"host done\n"
    return result


def test_a_step_with_slack_stops_to_give_its_core_to_a_split_step_and_goes_on_after(tmp_path):
    """TE's seven long sources, 2026-11-27: gelu_grouped.cu's split cicc got 2-4 cores where
    it wanted 16, held by host compiles that ended long before their ciccs.  Here the host
    compile (path 10 s) stops as the cicc's two threads want two cores (its path 100 s), the
    cicc widens onto its slot, and the host compile goes on once the threads end."""
    from fast_nvcc.report.log import log_record
    from fast_nvcc.report.run_report import build_report

    result = _yield_run(tmp_path, host_rank=10.0)
    cicc, host = result.records
    assert cicc.cores == 2  # with the host compile's slot: the pool has two
    assert host.yields >= 1 and host.yielded > 0.5  # stopped while the threads ran
    assert host.state is State.DONE  # and went on to its end (its output is there)
    # each stop, within its run, adding up to its time stopped, as FAST_NVCC_LOG's stops_at has it
    assert len(host.stops) == host.yields and sum(b - a for a, b in host.stops) == pytest.approx(host.yielded)
    assert all(host.start <= a < b <= host.end for a, b in host.stops)
    dag = Dag(tuple(sh_task(i, "true") for i in range(2)), (frozenset(), frozenset()))
    report = build_report(dag, result.records, wall_seconds=result.wall_seconds, exit_code=0, jobs=2)
    logged = log_record(nvcc="nvcc", args=[], cwd="/", sources=[], outputs=[], exit_code=0, wall_seconds=1.0,
                        started=0.0, mode="graph", report=report)["steps"][1]  # fmt: skip
    assert logged["stops_at"] == [[round(a, 6), round(b, 6)] for a, b in host.stops]
    # and why it went on each time: the cicc's threads ended, so no split step asked any more
    # (or asked below its path, as the threads ended one by one)
    assert len(logged["went_on"]) == host.yields
    assert all(why in ("no ask", "ask below") and rank == pytest.approx(10.0, abs=10.0)
               for _, why, rank, _, _ in logged["went_on"])  # fmt: skip
    assert all(a < t <= b + 1e-6 for (t, *_), (a, b) in zip(logged["went_on"], host.stops))


@pytest.mark.parametrize("size", [2, 4])
def test_a_step_of_its_own_compile_stops_for_a_split_cicc_that_its_jobs_bound_refused(tmp_path, size):
    """gelu_grouped.cu split alone on 2 cores (2026-12-07): -j is the usable CPUs, so its split
    cicc, its 16 threads runnable, stayed on one core for 88 s while its host compile held the
    other (refused by -j, it posted no ask, and nothing stopped).  Only a step of its own compile
    frees a -j slot: here the host compile stops, however many slots the pool has free, and the
    cicc widens onto its slot."""
    result = _yield_run(tmp_path, host_rank=10.0, jobs=2, size=size)
    cicc, host = result.records
    assert cicc.cores == 2 and host.yields >= 1 and host.state is State.DONE
    assert cicc.refused and cicc.refused[0][1] == "jobs"  # (what stopped the host compile)


def test_a_stopped_step_goes_on_as_the_split_step_nears_its_end(tmp_path):
    """FlashAttention's split build on 16 cores (2026-11-28): light compiles' ptxas stopped for
    the split ciccs stayed stopped until those ended (22-54 s), and ended the build 14 s after
    them.  Here cudafe++ ends within its estimate (the estimates are credible), the split cicc
    (8 s of work learned, two threads busy 4 s) stops the host compile (3 s) and widens,
    and as its work left falls below the host compile's it gives that core back before its
    threads end: the host compile goes on while the cicc still runs on one core."""
    busy = "timeout 4 sh -c 'while :; do :; done'"
    tasks = [sh_task(0, "sleep 0.1", kind=Kind.CUDAFE),
             sh_task(1, f"sleep 0.2; {busy} & {busy} & wait", "-split-compile", "2", kind=Kind.CICC),
             sh_task(2, "for i in $(seq 30); do sleep 0.1; done", kind=Kind.HOST_COMPILE)]  # 3 s, not counting its stops
    result = _run_on_pool(tmp_path, tasks, ((), (0,), ()), size=2, priorities=[10.0, 8.0, 3.0], work=[2.0, 8.0, 3.0])
    assert result.returncode == 0
    _, cicc, host = result.records
    assert host.yields >= 1 and host.state is State.DONE
    timeline = cicc.core_timeline
    assert max(cores for _, cores in timeline) == 2  # widened onto the host compile's slot
    narrowed = [when for (when, cores), (_, before) in zip(timeline[1:], timeline) if cores < before]
    assert narrowed and narrowed[0] < cicc.end - 0.5  # and gave it back well before its end (about 1.3 s)


def test_a_step_whose_path_reaches_the_builds_end_keeps_its_core(tmp_path):
    """FlashAttention's advised build (round 24): the unsplit compile whose own path was the
    build's floor stopped 7.3 s for split steps and ended the build 8 s above it.  Here the
    estimates are credible (cudafe++ ends within its own), the build's work left (the cicc's 8 s
    and the host compile's 3 s, less what they have run, over 2 cores) ends in about 5.2 s, and
    the host compile's path (5 s) reaches that with less than a quarter to spare: the split
    cicc asks at 1.5 times its path, and the host compile keeps its core."""
    busy = "timeout 2 sh -c 'while :; do :; done'"
    tasks = [sh_task(0, "sleep 0.1", kind=Kind.CUDAFE),
             sh_task(1, f"sleep 0.2; {busy} & {busy} & wait", "-split-compile", "2", kind=Kind.CICC),
             sh_task(2, "for i in $(seq 15); do sleep 0.1; done", kind=Kind.HOST_COMPILE)]  # fmt: skip
    result = _run_on_pool(tmp_path, tasks, ((), (0,), ()), size=2, priorities=[10.0, 8.0, 5.0], work=[2.0, 8.0, 3.0])
    assert result.returncode == 0
    _, cicc, host = result.records
    assert host.yields == 0 and host.yielded == 0.0 and host.state is State.DONE
    # its second thread got a core only as the host compile ended
    assert all(when >= host.end - 0.05 for when, cores in cicc.core_timeline if cores == 2)


def test_a_step_stops_once_for_the_split_step_and_does_not_take_back_the_core_it_gave(tmp_path):
    """TE's seven learned build (2026-11-29): host compiles stopped 6 to 13 times, most stops
    ending within a second of the last: the stopped step took its slot back at the next turn,
    before the split step's grant could widen onto it (yielding.gives_way)."""
    cicc, host = _yield_run(tmp_path, host_rank=10.0).records
    assert cicc.cores == 2 and host.yields == 1


def test_a_step_does_not_stop_for_a_split_ptxas(tmp_path):
    """TE's seven learned build (2026-11-29): host compiles stopped for the split ptxas from
    115 s went on as they ended, and ran alone at the build's end (yielding.STOPS_FOR).  A
    split ptxas takes the cores that free up; a running step keeps its own."""
    ptxas, host = _yield_run(tmp_path, host_rank=10.0, kind=Kind.PTXAS).records
    assert host.yields == 0 and host.yielded == 0.0 and host.state is State.DONE
    assert ptxas.cores == 1  # (it ended before the host compile)


def test_a_step_on_a_path_near_the_split_steps_keeps_its_core(tmp_path):
    cicc, host = _yield_run(tmp_path, host_rank=90.0).records
    assert host.yields == 0 and host.yielded == 0.0
    assert cicc.cores == 1


def test_no_step_stops_while_the_build_tool_holds_compiles_back(tmp_path):
    """A stopped step keeps its compile's job of ninja's -j: while ninja is full, compiles wait
    for that job, and the stopped work would move to the build's end."""
    cicc, host = _yield_run(tmp_path, host_rank=10.0, tool_full=True).records
    assert host.yields == 0 and cicc.cores == 1


def test_a_step_stopped_for_a_split_step_is_killed_with_the_run_when_that_step_fails(tmp_path):
    """The cicc fails while the host compile, after it in nvcc's order, is stopped: the run
    ends with the cicc's exit code, and the stopped step is killed (a stopped process does not
    see SIGTERM: it is woken for it), none of its processes left."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = _yield_run(tmp_path, host_rank=10.0, cicc_exit=3)
    cicc, host = result.records
    assert result.returncode == 3 and cicc.state is State.FAILED
    assert host.yields >= 1 and host.state is State.KILLED
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def _run_beside(runner, choreography, *closing):
    """``runner``'s run while ``choreography`` plays another compile's part on a thread of its own;
    then the runner and ``closing`` are closed."""
    thread = threading.Thread(target=choreography, daemon=True)
    thread.start()
    try:
        return runner.run()
    finally:
        thread.join(30)
        runner.close()
        for each in closing:
            each.close()


def test_a_ready_step_leaves_the_runs_request_at_its_split_steps_ask(tmp_path):
    """TE's whole library split (2026-12-07, round 47): swiglu_grouped.cu's split ptxas asked for
    a core while its host compile waited, and the board, which holds one request per process,
    showed the ptxas's rank one moment and the host compile's the next; cast_grouped.cu's split
    ptxas gave it a core 88 times in 19 s and took it back each time.  Here the pool's second slot
    is held elsewhere while our split cicc's two threads want two cores and our host compile
    (ranked far below) waits: our request stays at the cicc's ask, and the slot, once free, is
    the cicc's."""
    from fast_nvcc.machine.pool_files import RequestBoard
    from fast_nvcc.machine.slots import PoolSlots

    pool = tmp_path / "pool"
    busy = "timeout 2 sh -c 'while :; do :; done'"
    tasks = (sh_task(0, f"sleep 0.2; {busy} & {busy} & wait", "-split-compile", "2", kind=Kind.CICC),
             sh_task(1, "timeout 0.5 sh -c 'while :; do :; done'; true", kind=Kind.HOST_COMPILE))  # fmt: skip
    dag = Dag(tasks, (frozenset(), frozenset()))
    slots = PoolSlots(str(pool), 2, saturated=lambda: True)
    holder = PoolSlots(str(pool), 2)  # another compile's step, on the pool's second slot
    assert holder.try_acquire(0.0)
    holder.withdraw()
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=4, priorities=[100.0, 10.0],
                    work=[50.0, 5.0], internal=Internal(), slots=slots, stdout=io.BytesIO(), stderr=io.BytesIO())  # fmt: skip
    board = RequestBoard(str(pool / "requests"))
    ranks: list[float] = []
    released: list[float] = []

    def choreography() -> None:
        cicc = runner.records[0]
        deadline = time.monotonic() + 10
        while (cicc.start is None or runner._now() - cicc.start < 1.0) and time.monotonic() < deadline:
            rank = board.waiting().get(str(os.getpid()))
            if rank is not None and cicc.start is not None:
                ranks.append(rank)
            time.sleep(0.01)
        released.append(runner._now())
        holder.release_all()

    result = _run_beside(runner, choreography, slots, holder)
    cicc, host = result.records
    assert result.returncode == 0 and host.state is State.DONE
    asked = ranks[ranks.index(100.0):] if 100.0 in ranks else []  # from the cicc's first ask on
    # The host compile's rank shows only after IDLE_LOOKS looks in a row that found the cicc's
    # threads wanting no more cores (core_grants.kept_asks; before it, after one such look: 1 run
    # in 6 on 2 busy cores); before round 48's rule, at every turn the host compile waited
    assert asked and sum(rank <= 10.0 for rank in asked) <= len(asked) // 10, ranks
    assert cicc.cores == 2 and host.start > released[0]
    assert max(t for t, width in cicc.core_timeline if width == 2) < host.start or host.start >= cicc.end
    # FAST_NVCC_LOG's refused: while the slot was held elsewhere the cicc's threads wanted it at
    # their rank, no request before theirs, no slot free, no step over the pool
    assert cicc.refused and cicc.refused[0][1:] == ("slot", (0, 0, 0), 100.0), cicc.refused
    assert cicc.refused[0][0] < released[0]


def test_a_stopped_step_that_gives_way_leaves_no_request_on_the_board(tmp_path):
    """TE's seven learned build (2026-12-05, round 43): the host compiles stopped from 8 s to 99 s
    for split ciccs, and in that time the ciccs gave a core back for "rank" 714 times, each taking
    it back 0.1 s later: a stopped host compile let go on for a turn (no split step asked then),
    refused a slot, kept its request on the board at its rank while it gave way again, and every
    split step holding a core below that rank gave the core to a waiter that would not take it.
    Here another compile's split cicc asks (the host compile stops), stops asking while the
    pool's one slot is taken (the host compile waits for it on the board), and asks again: the
    host compile gives way, and its request leaves the board."""
    from fast_nvcc.machine.pool_files import RequestBoard, Told
    from fast_nvcc.machine.slots import PoolSlots

    pool = tmp_path / "pool"
    host = sh_task(0, "for i in $(seq 50); do sleep 0.1; done", kind=Kind.HOST_COMPILE)  # 5 s, its stops left out
    dag = Dag((host,), (frozenset(),))
    slots = PoolSlots(str(pool), 1, saturated=lambda: False)
    runner = Runner(dag, env=os.environ, cwd=str(tmp_path), workdir=str(tmp_path), jobs=4, priorities=[10.0],
                    work=[10.0], internal=Internal(), slots=slots, stdout=io.BytesIO(), stderr=io.BytesIO())  # fmt: skip
    other = os.getpid() + 1  # the other compile's split cicc, as it tells the pool
    ask, stop = (Told(str(pool / "asks"), prefix, owner=other) for prefix in ("a-", "s-"))
    board = RequestBoard(str(pool / "requests"))
    holder = PoolSlots(str(pool), 1)  # ... and what takes the slot the host compile gave
    seen: dict[str, bool] = {}

    def wait_for(condition, timeout=10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def ours_waits() -> bool:
        return str(os.getpid()) in board.waiting()

    def choreography() -> None:
        record = runner.records[0]
        seen["started"] = wait_for(lambda: record.start is not None)
        ask.tell(100.0), stop.tell(100.0)
        seen["stopped"] = wait_for(lambda: record.yields >= 1)
        seen["taken"] = wait_for(lambda: holder.try_acquire(0.0))
        ask.tell(None), stop.tell(None)  # no ask: it would go on, and finds no slot
        seen["waits"] = wait_for(ours_waits)
        ask.tell(100.0), stop.tell(100.0)  # it gives way again
        seen["left the board"] = wait_for(lambda: not ours_waits(), timeout=3.0)
        ask.tell(None), stop.tell(None)
        holder.release_all()

    result = _run_beside(runner, choreography, slots, holder, ask, stop)
    assert seen == {"started": True, "stopped": True, "taken": True, "waits": True, "left the board": True}
    assert result.returncode == 0 and result.records[0].state is State.DONE
