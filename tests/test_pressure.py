"""Steps stopped rather than lost when memory runs short (fast_nvcc/pressure.py): the decision
with made-up numbers, and real growing processes in a real memory cgroup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast_nvcc.memory import MIB
from fast_nvcc.pressure import Claimed, decide, low_water

ROOT = Path(__file__).resolve().parent.parent
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
        # Nothing runs at all: the oldest stopped goes on, however little is free.
        (0, 0, [Claimed("2-1", 200, True), Claimed("2-2", 300, True)], MINE, ("continue", "2-1")),
    ],
)
def test_decide(free, before, steps, mine, expected):
    assert decide(free=free, before=before, limit=LIMIT, steps=steps, mine=mine) == expected


# -- real processes in a real memory cgroup --------------------------------------------------------

# Three steps that each grow to 120 MiB, 2 MiB every 20 ms, in 384 MiB with this runner's Python:
# together they do not fit, one at a time they do, and the budget lets all three start (each
# claims 1 MiB, as a first build's guess can be far too low).
GROW = "b = []\nimport time\nfor _ in range(60):\n    b.append(bytearray(b'x') * (2 << 20)); time.sleep(0.02)\ntime.sleep(0.2)\n"
RUNNER = """
import io, json, os, sys
from fast_nvcc.graph import Action, Dag, Task
from fast_nvcc.memory import MemoryBudget
from fast_nvcc.plan import Kind, Step
from fast_nvcc.reports import build_report, format_summary, log_record
from fast_nvcc.scheduler import Internal, Runner

pool, grow = sys.argv[1], sys.argv[2]
tasks = []
for i in range(3):
    step = Step(index=i, text="grow", kind=Kind.OTHER, tool="grow", argv=(sys.executable, grow))
    tasks.append(Task(i, step, Action.EXEC, argv=step.argv))
dag = Dag(tuple(tasks), tuple(frozenset() for _ in tasks))
memory = MemoryBudget(pool, peaks=[1 << 20] * 3, kinds=[("grow", "")] * 3, learned=[True] * 3)
runner = Runner(dag, env=os.environ, cwd=pool, workdir=pool, jobs=3, priorities=[3.0, 2.0, 1.0],
                internal=Internal(), stdout=io.BytesIO(), stderr=io.BytesIO(), memory=memory)
result = runner.run()
memory.close()
report = build_report(dag, result.records, wall_seconds=result.wall_seconds, exit_code=0, jobs=3)
log = log_record(nvcc="nvcc", args=[], cwd="/", sources=[], outputs=[], exit_code=0, wall_seconds=1.0, started=0.0,
                 mode="graph", report=report)
print(json.dumps({"returncode": result.returncode, "leftovers": sorted(os.listdir(pool)),
                  "summary": format_summary(report), "log": log,
                  "records": [[r.state.value, r.returncode, r.start, r.end, r.memory_stopped, r.oom_rerun]
                              for r in result.records]}))
"""


def test_growing_steps_are_stopped_and_continued_rather_than_killed(memory_cgroup, tmp_path):
    group = memory_cgroup(384 * MIB)
    (tmp_path / "grow.py").write_text(GROW)
    (tmp_path / "runner.py").write_text(RUNNER)
    pool = tmp_path / "pool"
    pool.mkdir()
    proc = subprocess.run(group.wrap([sys.executable, str(tmp_path / "runner.py"), str(pool), str(tmp_path / "grow.py")]),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert group.oom_kills() == 0
    assert out["returncode"] == 0
    records = out["records"]
    assert [r[:2] for r in records] == [["done", 0]] * 3
    assert not any(r[5] for r in records)  # none killed and run again
    starts = [r[2] for r in records]
    assert max(starts) - min(starts) < 0.5  # the budget let all three start together
    stopped = [r[4] for r in records]
    assert stopped[0] == 0 and any(s > 0 for s in stopped)  # the oldest went on; a younger one waited
    # --summary and FAST_NVCC_LOG say so
    assert f"stopped while memory ran short: {sum(stopped):.2f} s in all ({sum(s > 0 for s in stopped)} commands)" in out["summary"]
    assert out["log"]["memory_stopped_seconds"] == pytest.approx(sum(stopped), abs=1e-5)
    assert [s.get("memory_stopped", 0.0) for s in out["log"]["steps"]] == pytest.approx(stopped, abs=1e-5)
    assert not [n for n in out["leftovers"] if n.startswith(("c-", "p-", "w-"))]  # no claim or stop marker is left
