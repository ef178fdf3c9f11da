"""benchmarks/split_schedule.py's replay of split steps' cores (made-up compiles whose ends are
worked out by hand): a split step's phases read from its log record, and the two rules."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import split_schedule
from split_schedule import Compile


def test_a_split_steps_front_parallel_work_and_tail_come_from_its_cores_and_serial_seconds():
    # One core for 2 s, wide from 2 to 10 s, one core to 14 s: 6 serial seconds, 20 of cpu.
    step = {"start": 0.0, "end": 14.0, "cpu_seconds": 20.0, "seconds": 14.0, "serial_seconds": 6.0,
            "cores_at": [[0.0, 1], [2.0, 4], [10.0, 1]]}  # fmt: skip
    assert split_schedule.phases(step) == [[2.0, 1], [14.0, 16], [4.0, 1]]
    # Held to one core by its rank for 30 s: only the seconds its threads ran alone are serial.
    step = {"start": 0.0, "end": 40.0, "cpu_seconds": 50.0, "seconds": 40.0, "serial_seconds": 8.0,
            "cores_at": [[0.0, 1], [30.0, 3], [38.0, 1]]}  # fmt: skip
    assert split_schedule.phases(step) == [[8.0, 1], [42.0, 16], [0.0, 1]]
    assert split_schedule.phases({"start": 0.0, "end": 3.0, "cpu_seconds": 2.5, "seconds": 3.0}) == [[2.5, 1]]


def test_a_compile_alone_runs_its_parallel_work_on_every_core_then_its_tail():
    alone = [Compile("alone", 0.0, [[40.0, 16], [10.0, 1]], 0.0, 0.0)]
    for rule in ("spread", "longest"):
        assert abs(split_schedule.replay(alone, cores=4, rule=rule) - 20.0) < 0.1


def test_no_rule_ends_before_the_work_on_every_core_or_the_longest_path():
    build = [Compile("gelu", 0.0, [[5.0, 1], [60.0, 16], [20.0, 1]], 10.0, 0.0),
             Compile("cast", 0.0, [[5.0, 1], [30.0, 16], [10.0, 1]], 10.0, 0.0),
             Compile("relu", 1.0, [[5.0, 1], [50.0, 16], [15.0, 1]], 30.0, 2.0)]  # fmt: skip
    work = sum(c.work_left() + c.host for c in build)
    for rule in ("spread", "longest"):
        for keep_one in (False, True):
            end = split_schedule.replay(build, cores=4, rule=rule, keep_one=keep_one)
            assert end >= work / 4 - 0.1 and end >= 5 + 60 / 4 + 20
    # Two like compiles, each keeping a core: they end together, at the work over the cores.
    twins = [Compile(name, 0.0, [[20.0, 16]], 0.0, 0.0) for name in ("a", "b")]
    assert abs(split_schedule.replay(twins, cores=4, rule="longest", keep_one=True) - 10.0) < 0.2
