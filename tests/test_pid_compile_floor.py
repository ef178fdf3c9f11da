"""benchmarks/pid_compile.py's whole-step floor: the best order of a learned compile's own steps
on a few cores, each step run whole (made-up costs whose best schedule is worked out by hand)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import pid_compile

COSTS = {("gcc -E", None): 0.6, ("gcc -E", "compute_80"): 0.6, ("gcc -E", "compute_90"): 0.6,
         ("cudafe++", None): 2.3, ("cc1plus", None): 2.5, ("cicc", "compute_80"): 4.2, ("cicc", "compute_90"): 4.1,
         ("ptxas", "sm_80"): 0.5, ("ptxas", "sm_90"): 0.6, ("fatbinary", None): 0.0, ("as", None): 0.1}  # fmt: skip


def steps(costs: dict, **extra: dict) -> list[dict]:
    return [{"tool": tool, "arch": arch, "seconds": seconds, "command": True, "state": "done"}
            for (tool, arch), seconds in costs.items()] + list(extra.values())  # fmt: skip


def test_one_core_runs_every_step_one_after_another():
    assert abs(pid_compile.whole_step_floor(steps(COSTS), cores=1) - sum(COSTS.values())) < 1e-9


def test_two_cores_end_on_the_best_split_of_the_steps_not_at_half_their_work():
    # Best: one core takes the host and compute_90 preprocessing (to 1.2), cicc compute_80 (5.4)
    # and cc1plus (7.9); the other compute_80's preprocessing, cudafe++ (2.9), cicc compute_90
    # (7.0) and both ptxas (8.1); then fatbinary and as: 8.2, where half the work is 8.05.  No
    # split of these steps over two cores is within 0.1 s of half.
    best = pid_compile.whole_step_floor(steps(COSTS), cores=2)
    assert abs(best - 8.2) < 1e-9
    assert best > sum(COSTS.values()) / 2


def test_a_cicc_waits_for_cudafe_to_start_not_to_end():
    # cudafe++ made long: the ciccs start beside it (its start, not its end, is what they need).
    long_cudafe = {**COSTS, ("cudafe++", None): 20.0}
    best = pid_compile.whole_step_floor(steps(long_cudafe), cores=3)
    assert abs(best - (0.6 + 20.0 + 2.5 + 0.1)) < 1e-9


def test_steps_of_another_plan_give_no_floor():
    assert pid_compile.whole_step_floor(steps({**COSTS, ("nvlink", None): 1.0}), cores=2) is None
    internal = {"tool": "rm", "arch": None, "seconds": 0.0, "command": False, "state": "done"}
    assert pid_compile.whole_step_floor(steps(COSTS, rm=internal), cores=2) is not None
