"""Steps stopped rather than lost when memory runs short (fast_nvcc/machine/pressure.py): the decision
with made-up numbers, and real growing processes in a real memory cgroup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast_nvcc.machine.headroom import MIB
from fast_nvcc.machine.memory import MemoryBudget
from fast_nvcc.machine.pressure import FALL_PER_CORE, Claimed, decide, low_water, next_look

ROOT = Path(__file__).resolve().parent.parent.parent
GIB = 1024 * MIB
LIMIT = 32 * GIB
LOW = low_water(LIMIT)

# The machine's running steps, oldest first: a (another compile's), b and c (ours).
STEPS = [Claimed("1-1", 100, False), Claimed("2-1", 200, False), Claimed("2-2", 300, False)]
MINE = {"2-1", "2-2"}


def test_low_water_is_a_share_of_the_limit_with_a_floor():
    assert low_water(32 * GIB) == GIB
    assert low_water(1200 * MIB) == 2 * 48 * MIB  # twice the budget's reserve
    assert low_water(64 * MIB) == 64 * MIB


@pytest.mark.parametrize(
    "free, before, steps, mine, expected",
    [
        # Plenty free: nothing to do.
        (4 * GIB, 5 * GIB, STEPS, MINE, None),
        # Short and falling: our youngest stops.
        (LOW - 1, LOW + 1, STEPS, MINE, ("stop", "2-2")),
        # Short but no longer falling: what is stopped is enough.
        (LOW - 1, LOW - 1, STEPS, MINE, None),
        (LOW - 1, None, STEPS, MINE, None),  # the first reading: no trend yet
        # Our youngest is stopped already: the next one of ours.
        (LOW - 2, LOW - 1, [*STEPS[:2], Claimed("2-2", 300, True)], MINE, ("stop", "2-1")),
        # The machine's oldest running step is never stopped, ours or not.
        (LOW - 2, LOW - 1, STEPS[:1], {"1-1"}, None),
        (LOW - 2, LOW - 1, [STEPS[0], Claimed("2-1", 200, True), Claimed("2-2", 300, True)], MINE, None),
        # Room again (twice the low-water mark): the machine's oldest stopped step goes on.
        (2 * LOW, LOW, [STEPS[0], Claimed("2-1", 200, True), Claimed("2-2", 300, True)], MINE, ("continue", "2-1")),
        # ... and only its own compile continues it.
        (2 * LOW, LOW, [Claimed("1-1", 100, True), *STEPS[1:]], MINE, None),
        (2 * LOW, LOW, [Claimed("1-1", 100, True), *STEPS[1:]], {"1-1"}, ("continue", "1-1")),
        # Between the marks: nothing starts again.
        (2 * LOW - 1, LOW, [STEPS[0], Claimed("2-1", 200, True)], MINE, None),
        # Critically short (under half the mark), still falling, and everything but the machine's
        # oldest stopped: the youngest stopped step is killed to make room, by its own compile.
        (LOW // 2 - 1, LOW // 2, [STEPS[0], Claimed("2-1", 200, True), Claimed("2-2", 300, True)], MINE,
         ("evict", "2-2")),
        (LOW // 2 - 1, LOW // 2, [STEPS[0], Claimed("2-1", 200, True), Claimed("3-1", 300, True)], MINE, None),
        (LOW // 2, LOW // 2 + 1, [STEPS[0], Claimed("2-1", 200, True)], MINE, None),  # short, not critical
        (LOW // 2 - 1, LOW // 2 - 1, [STEPS[0], Claimed("2-1", 200, True)], MINE, None),  # no longer falling
        (LOW // 2 - 1, LOW // 2, [*STEPS[:2], Claimed("2-2", 300, True)], MINE, ("stop", "2-1")),  # stop first
        # Nothing runs at all: the oldest stopped goes on, however little is free.
        (0, 0, [Claimed("2-1", 200, True), Claimed("2-2", 300, True)], MINE, ("continue", "2-1")),
    ],
)
def test_decide(free, before, steps, mine, expected):
    assert decide(free=free, before=before, limit=LIMIT, steps=steps, mine=mine) == expected


@pytest.mark.parametrize(
    "free, fall, expected",
    [
        # Far above the mark (24 GiB free, 2 cores' assumed fall): the slow look.
        (24 * GIB, 2 * FALL_PER_CORE, 0.5),
        # 1 GiB above twice the mark at 4 GiB/s: two looks within the quarter second it takes.
        (2 * LOW + GIB, 4 * GIB, 0.125),
        # Nearer, or falling faster than any look can follow: every tick.
        (2 * LOW + 100 * MIB, 4 * GIB, 0.1),
        (4 * GIB, 64 * GIB, 0.1),
        # At or under twice the mark (where stopped steps go on): every tick.
        (2 * LOW, 2 * FALL_PER_CORE, 0.1),
        (LOW - 1, 2 * FALL_PER_CORE, 0.1),
    ],
)
def test_the_guard_looks_often_only_near_the_mark(free, fall, expected):
    assert next_look(free=free, low=LOW, fall=fall, tick=0.1, slow=0.5) == pytest.approx(expected)


def _budget(directory, count):
    return MemoryBudget(str(directory), peaks=[MIB] * count, kinds=[("cicc", "compute_80")] * count,
                        learned=[True] * count, cgroups=[])  # fmt: skip


def test_an_evicted_step_runs_again_once_the_step_it_made_room_for_has_ended(tmp_path):
    older, mine = _budget(tmp_path, 2), _budget(tmp_path, 1)
    assert mine.reserve(0, now=0.0)
    for oldest in (0, 1):  # evicted twice: each time it runs again (unlike a kernel's second kill)
        assert older.reserve(oldest, now=0.0)  # (its claim is older than ours in real life)
        mine.evict(0, after=older.held_keys()[oldest])
        assert mine.out_of_memory(0, -9, rss_kb=80 * 1024)
        mine.release(0, rss_kb=None)
        assert mine.need(0) == 100 * MIB  # 1.25 times what it held
        assert not mine.reserve(0, now=1.0)  # the step it made room for still runs ...
        assert not [n for n in os.listdir(tmp_path) if n.startswith("w-")]  # ... and others are not held back
        older.release(oldest, rss_kb=None)
        assert mine.reserve(0, now=2.0)
    # A kernel's kill after that still gets its one run again.
    assert mine.out_of_memory(0, 137, rss_kb=None)
    assert not mine.out_of_memory(0, 137, rss_kb=None)
    older.close()
    mine.close()


# -- real processes in a real memory cgroup --------------------------------------------------------

# Steps that grow 2 MiB every 20 ms to the MiB given, in 384 MiB with this runner's Python; the
# budget lets all three start (each claims 1 MiB, as a first build's guess can be far too low).
# Optionally it then touches a file and holds what it has for some seconds.
GROW = ("import sys, time\nb = []\nfor _ in range(int(sys.argv[1]) // 2):\n"
        "    b.append(bytearray(b'x') * (2 << 20)); time.sleep(0.02)\n"
        "if len(sys.argv) > 3:\n    open(sys.argv[3], 'w').close()\n"
        "time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.2)\n")
RUNNER = """
import io, json, os, sys
from fast_nvcc.graph.tasks import Action, Dag, Task
from fast_nvcc.machine.memory import MemoryBudget
from fast_nvcc.plan.dryrun import Kind, Step
from fast_nvcc.report.log import log_record
from fast_nvcc.report.run_report import build_report
from fast_nvcc.report.summary import format_summary
from fast_nvcc.run.handlers import Internal
from fast_nvcc.run.scheduler import Runner

# Each step: [argv, the steps it needs, whether its 1 MiB peak is learned (else a guess)].
pool, spec = sys.argv[1], json.loads(sys.argv[2])
tasks = []
for i, (argv, _, _) in enumerate(spec):
    step = Step(index=i, text="grow", kind=Kind.OTHER, tool="grow", argv=tuple(argv))
    tasks.append(Task(i, step, Action.EXEC, argv=step.argv))
dag = Dag(tuple(tasks), tuple(frozenset(needs) for _, needs, _ in spec))
memory = MemoryBudget(pool, peaks=[1 << 20] * len(spec), kinds=[("grow", "")] * len(spec),
                      learned=[learned for _, _, learned in spec])
runner = Runner(dag, env=os.environ, cwd=pool, workdir=pool, jobs=3, priorities=[3.0, 2.0, 1.0][:len(spec)],
                internal=Internal(), stdout=io.BytesIO(), stderr=io.BytesIO(), memory=memory)
result = runner.run()
memory.close()
report = build_report(dag, result.records, wall_seconds=result.wall_seconds, exit_code=0, jobs=3)
log = log_record(nvcc="nvcc", args=[], cwd="/", sources=[], outputs=[], exit_code=0, wall_seconds=1.0, started=0.0,
                 mode="graph", report=report)
print(json.dumps({"returncode": result.returncode, "leftovers": sorted(os.listdir(pool)),
                  "summary": format_summary(report), "log": log,
                  "records": [{"state": r.state.value, "returncode": r.returncode, "start": r.start, "end": r.end,
                               "stopped": r.memory_stopped, "rerun": r.oom_rerun, "evicted": r.memory_evicted,
                               "waited": r.memory_wait}
                              for r in result.records]}))
"""


def _run_in_cgroup(memory_cgroup, tmp_path: Path, sizes: list[int], spec=None) -> dict:
    """Run steps growing to ``sizes`` in 384 MiB, all ready at once with learned 1 MiB peaks, or
    the steps of ``spec`` (see RUNNER): every one must finish, none taken by the kernel."""
    group = memory_cgroup(384 * MIB)
    (tmp_path / "grow.py").write_text(GROW)
    (tmp_path / "runner.py").write_text(RUNNER)
    pool = tmp_path / "pool"
    pool.mkdir()
    spec = spec or [[[sys.executable, str(tmp_path / "grow.py"), str(size)], [], True] for size in sizes]
    argv = [sys.executable, str(tmp_path / "runner.py"), str(pool), json.dumps(spec)]
    proc = subprocess.run(group.wrap(argv), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert group.oom_kills() == 0
    assert out["returncode"] == 0
    assert [(r["state"], r["returncode"]) for r in out["records"]] == [("done", 0)] * len(spec)
    assert not [n for n in out["leftovers"] if n.startswith(("c-", "p-", "w-"))]  # no claim or stop marker is left
    return out


def test_growing_steps_are_stopped_and_continued_rather_than_killed(memory_cgroup, tmp_path):
    """Three of 100 MiB: together they do not fit in 384 MiB beside the runner, and stopping the
    younger ones is enough for the oldest to finish."""
    out = _run_in_cgroup(memory_cgroup, tmp_path, [100, 100, 100])
    records = out["records"]
    assert not any(r["rerun"] or r["evicted"] for r in records)  # none killed and run again
    starts = [r["start"] for r in records]
    assert max(starts) - min(starts) < 0.5  # the budget let all three start together
    stopped = [r["stopped"] for r in records]
    assert stopped[0] == 0 and any(s > 0 for s in stopped)  # the oldest went on; a younger one waited
    # --summary and FAST_NVCC_LOG say so
    assert f"stopped while memory ran short: {sum(stopped):.2f} s in all ({sum(s > 0 for s in stopped)} commands)" in out["summary"]
    assert out["log"]["memory_stopped_seconds"] == pytest.approx(sum(stopped), abs=1e-5)
    assert [s.get("memory_stopped", 0.0) for s in out["log"]["steps"]] == pytest.approx(stopped, abs=1e-5)


def test_a_stopped_step_is_killed_to_make_room_for_the_oldest_and_runs_after_it(memory_cgroup, tmp_path):
    """The oldest grows to 220 MiB: once the two younger ones are stopped at about 80 MiB each,
    it still does not fit beside them.  Rather than let the kernel kill the biggest (the oldest,
    with the most work done), the youngest stopped steps are killed, and they run again once the
    oldest has ended."""
    oldest, *younger = _run_in_cgroup(memory_cgroup, tmp_path, [220, 120, 120])["records"]
    assert not oldest["rerun"] and not oldest["evicted"] and oldest["stopped"] == 0  # never stopped or killed
    evicted = [r for r in younger if r["evicted"]]
    assert evicted and all(r["rerun"] for r in evicted)  # killed by us, and run again
    assert all(r["start"] >= oldest["end"] for r in evicted)  # ... after the oldest ended


def test_a_running_step_tells_the_budget_what_it_grows_to(memory_cgroup, tmp_path):
    """Two steps on a 1 MiB guess, each growing to 250 MiB: the second becomes ready only once
    the first holds its 250 MiB.  Read live, that is posted as the kind's peak and claimed, so
    the second waits for the first to end: nothing is stopped or killed.  On the guess alone it
    would start, and the two would not fit in 384 MiB."""
    grown = tmp_path / "grown"
    wait = f"import os, time\nwhile not os.path.exists({str(grown)!r}): time.sleep(0.02)\ntime.sleep(1.0)\n"
    grow = str(tmp_path / "grow.py")
    spec = [[[sys.executable, grow, "250", "2.0", str(grown)], [], False],
            [[sys.executable, "-c", wait], [], True],
            [[sys.executable, grow, "250"], [1], False]]  # fmt: skip
    out = _run_in_cgroup(memory_cgroup, tmp_path, [], spec)
    first, middle, second = out["records"]
    assert not any(r["stopped"] or r["evicted"] or r["rerun"] for r in (first, second))
    # On the guess it would start as the middle step ends, 1 s before the first lets go of its
    # 250 MiB.  It starts once the first's process has exited: the budget may read that freed
    # memory a few ms before the first's thread writes down its end (CI saw 7 ms).
    assert second["waited"] > 0.5 and second["start"] > middle["end"] + 0.5
    assert second["start"] >= first["end"] - 0.1
