"""The real-project benchmark's reading of FAST_NVCC_LOG (benchmarks/cutlass_build.py): the floor
and starved compiles decide issue 9, so they are checked on logs whose answer is known."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import cutlass_build  # noqa: E402


def record(source: str, *, time: float, steps: list[tuple[float, float]], critical: float, **extra) -> dict:
    """A FAST_NVCC_LOG line: its process starts at ``time``, its steps count from time + 0.2, it
    runs for ``critical`` seconds, and nothing on its path waits or stops (its own path)."""
    return {"version": 1, "time": time, "run_start": time + 0.2, "sources": [source], "outputs": [f"{source}.o"],
            "mode": "dag", "exit_code": 0, "wall_seconds": critical, "critical_path_seconds": critical, **extra,
            "steps": [{"tool": "cicc", "kind": "cicc", "start": s, "end": e, "seconds": e - s, "command": True,
                       "cpu_seconds": e - s} for s, e in steps]}  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "at_least", "expected"),
    [
        ([(0, 5), (0, 3)], 2, [(0, 3)]),
        ([(0, 2), (2, 4)], 2, []),
        ([(0, 4), (1, 2), (3, 5)], 2, [(1, 2), (3, 4)]),
        ([(0, 4), (1, 3), (2, 5)], 3, [(2, 3)]),
    ],
)
def test_busy_intervals(steps, at_least, expected):
    assert cutlass_build.busy_intervals(steps, at_least=at_least) == expected


def test_a_compile_that_waits_while_another_runs_two_steps_is_starved():
    busy = record("a.cu", time=100.0, steps=[(0, 5), (0, 3)], critical=5.0)
    late = record("b.cu", time=100.0, steps=[(2.8, 6.8)], critical=4.0)
    log = cutlass_build.analyze_log([busy, late], cores=2)
    worst = log["worst_contended"]
    assert worst["source"] == "b.cu" and worst["other"] == "a.cu" and worst["other_max_steps"] == 2
    # From its start plus the allowance for Python and the dryrun to its first step at 103.0,
    # a.cu ran two steps all along (until 103.2).
    assert worst["contended"] == pytest.approx(3.0 - cutlass_build.STARTUP_ALLOWANCE)
    assert log["floor_seconds"] == pytest.approx(max(5.0, 12.0 / 2))


def test_waiting_while_every_other_compile_runs_one_step_is_not_starvation():
    a = record("a.cu", time=100.0, steps=[(0, 3), (3, 5)], critical=5.0)
    b = record("b.cu", time=100.0, steps=[(0, 4)], critical=4.0)
    c = record("c.cu", time=100.0, steps=[(3, 6)], critical=3.0)
    log = cutlass_build.analyze_log([a, b, c], cores=2)
    assert log["worst_contended"]["contended"] == 0
    assert log["worst_first_step"]["source"] == "c.cu"


def test_the_logged_first_step_wait_is_the_window():
    busy = record("a.cu", time=100.0, steps=[(0, 5), (0, 3)], critical=5.0)
    late = record("b.cu", time=100.0, steps=[(1.0, 5.0)], critical=4.0)
    # Without the field: from its start plus the allowance (100.5) to its first step (101.2).
    guessed = cutlass_build.analyze_log([busy, late], cores=2)
    assert not guessed["waits_from_log"] and guessed["worst_contended"]["contended"] == pytest.approx(0.7)
    # With it: from the plan being ready (run_start, 100.2) for the logged wait.
    late["first_step_wait_seconds"] = 1.0
    logged = cutlass_build.analyze_log([busy, late], cores=2)
    assert logged["waits_from_log"] and logged["worst_contended"]["contended"] == pytest.approx(1.0)


def test_the_split_host_compile_runs_processes_though_the_log_says_no_command():
    split = record("a.cu", time=100.0, steps=[(0, 1)], critical=2.0)
    split["steps"].append({"tool": "cc1plus", "kind": "host-compile", "start": 1.0, "end": 2.0, "seconds": 1.0,
                           "command": False, "cpu_seconds": 0.9})
    fallback = record("b.cu", time=100.0, steps=[(0, 1)], critical=2.0)
    fallback["steps"].append({"tool": "cc1plus", "kind": "host-compile", "start": 1.0, "end": 1.0, "seconds": 0.0,
                              "command": False, "cpu_seconds": None})
    log = cutlass_build.analyze_log([split, fallback], cores=2)
    assert log["split_host"] == 1
    assert log["step_seconds"] == pytest.approx(2.9)  # cc1plus's cpu (0.9 s), the others' times


def test_the_work_is_the_steps_cpu_where_the_log_has_it():
    """A split step on 4 cores (8 s of cpu in 2.5 s) and two steps that shared a core (1 s of cpu
    each in 2 s): the work is 10 s, not their 6.5 s of elapsed time, nor 6.5 s plus the split
    step's 5.5 s beyond its wall counted as before."""
    split = record("a.cu", time=100.0, steps=[(0, 2.5)], critical=2.5)
    split["steps"][0].update(cpu_seconds=8.0, cores=4)
    shared = record("b.cu", time=100.0, steps=[(0, 2), (0, 2)], critical=2.0)
    for step in shared["steps"]:
        step["cpu_seconds"] = 1.0
    log = cutlass_build.analyze_log([split, shared], cores=4)
    assert log["step_seconds"] == pytest.approx(10.0)
    assert log["floor_seconds"] == pytest.approx(max(2.5, 10.0 / 4))
    assert log["split_cpu_seconds"] == pytest.approx(5.5)


def test_the_floor_is_a_compiles_own_path_not_its_stops():
    """As analyze counts it (fast_nvcc.analysis.advice.own_seconds): a compile whose ptxas stopped
    30 s for split steps and waited 5 s for a core ran 60 s, but its own path is 25 s; the log's
    critical path (55 s) counts the stops.  The floor is then the cpu share, and the description
    names the own path."""
    stopped = record("a.cu", time=100.0, steps=[(0, 10), (15, 55)], critical=60.0)
    stopped["steps"][0].update(critical=True)
    stopped["steps"][1].update(critical=True, wait=5.0, yielded=30.0, cpu_seconds=10.0)
    busy = record("b.cu", time=100.0, steps=[(0, 40), (0, 40)], critical=40.0)
    log = cutlass_build.analyze_log([stopped, busy], cores=2)
    assert log["own_path_seconds"] == pytest.approx(40.0) and log["own_path_source"] == "b.cu"
    assert log["floor_seconds"] == pytest.approx(max(40.0, 100.0 / 2))
    alone = cutlass_build.analyze_log([stopped], cores=2)
    assert alone["own_path_seconds"] == pytest.approx(25.0)
    assert alone["floor_seconds"] == pytest.approx(max(25.0, 20.0 / 2))
    assert "longest compile's own path 25.0 s (a.cu)" in cutlass_build.describe_log("split", alone, cores=2)


def test_results_merge_keeps_the_latest_of_each_variant_and_compares_objects(tmp_path):
    def run(key: str, wall: float, digest: str, finished: float) -> dict:
        config = {"examples": ["x.cu"], "archs": "80", "jobs": 2, "source_root": "/src", "nvcc": "nvcc"}
        return {"key": key, "label": cutlass_build.BUILDS[key].label, "config": config, "fingerprint": "f",
                "machine": {"cores": "2", "cpu": "cpu", "nvcc": "13.0", "gcc": "gcc", "cmake": "cmake",
                            "ninja": "1.11", "date": "2026-11-22"},
                "wall_seconds": wall, "objects": {"x.cu.o": digest}, "tmp_leftovers": [], "finished": finished}  # fmt: skip

    first, second = tmp_path / "one.json", tmp_path / "two.json"
    cutlass_build.merge_results(first, [run("nvcc", 10.0, "aa", 1.0)])
    cutlass_build.merge_results(first, [run("nvcc", 12.0, "aa", 2.0)])
    cutlass_build.merge_results(second, [run("fast_nvcc-cold", 8.0, "bb", 3.0)])
    assert [r["wall_seconds"] for r in json.loads(first.read_text())["runs"]] == [12.0]
    table = cutlass_build.report(cutlass_build.load_results([first, second]))
    assert "| nvcc | 12.0 | 1.00x" in table
    assert "| fast_nvcc, no cost history | 8.0 | 0.67x | 0.67x |" in table and "1 DIFFER" in table


def test_nvcc_t0_is_the_reference_when_plain_nvcc_did_not_run():
    # -t0 runs nvcc's own steps in threads: its objects are plain nvcc's
    config = {"examples": ["x.cu"], "archs": "80", "jobs": 2, "source_root": "/src", "nvcc": "nvcc"}
    machine = {"cores": "2", "cpu": "cpu", "nvcc": "13.0", "gcc": "gcc", "cmake": "cmake", "ninja": "1.11",
               "date": "2026-11-22"}  # fmt: skip

    def run(key: str, digest: str) -> dict:
        return {"key": key, "label": cutlass_build.BUILDS[key].label, "config": config, "fingerprint": "f",
                "machine": machine, "wall_seconds": 10.0, "objects": {"x.cu.o": digest}, "tmp_leftovers": []}  # fmt: skip

    same = cutlass_build.report([run("nvcc-t0", "aa"), run("fast_nvcc-cold", "aa")])
    assert "| 1 (reference) |" in same and "all 1 identical" in same
    differ = cutlass_build.report([run("nvcc-t0", "aa"), run("fast_nvcc-cold", "bb")])
    assert "1 DIFFER" in differ


def test_the_same_unsplit_steps_cpu_tells_the_machines_speed_between_two_builds():
    """Round 22 (16 cores): the same unsplit compiles spent 0.77x and 1.21x their cpu from one
    build to the next, so a report says so beside two builds' walls.  Here six unsplit steps
    took 1.2 times as long in the second build; the split step (another command) and steps
    under a second are left out, and fewer than five common steps tell nothing."""
    def build(scale: float, *, split_cpu: float) -> dict:
        plain = record("a.cu", time=0.0, steps=[(0, 2.0 * scale)] * 6 + [(0, 0.5)], critical=2.0 * scale)
        split = record("b.cu", time=0.0, steps=[(0, 3.0)], critical=3.0)
        split["steps"][0].update(cpu_seconds=split_cpu, cores=4)
        return cutlass_build.analyze_log([plain, split], cores=4)

    first, second = build(1.0, split_cpu=9.0), build(1.2, split_cpu=20.0)
    assert cutlass_build.same_steps_cpu(second, first) == (pytest.approx(1.2), 6)
    assert cutlass_build.same_steps_cpu(build(1.0, split_cpu=9.0) | {"unsplit_cpu": {}}, first) is None
    lines = cutlass_build.describe_logs([("first", first), ("second", second)], cores=4)
    assert "same unsplit steps" not in lines[0] and "spent 1.20x their cpu in first (6 steps)" in lines[1]
