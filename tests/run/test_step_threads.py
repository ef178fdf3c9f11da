"""What a running step's threads do (fast_nvcc.run.step_threads): the threads of a process tree
that run or wait for a core, walked through the tree's own ``/proc`` files, with real processes."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from fast_nvcc.run.step_threads import runnable_threads

# What fast_nvcc itself decides: against the first toolchain (conftest).
pytestmark = pytest.mark.one_toolchain


def test_runnable_threads_counts_the_tree_that_runs():
    busy = subprocess.Popen(["sh", "-c", "yes > /dev/null & yes > /dev/null & wait"], start_new_session=True)
    asleep = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while (runnable_threads(busy.pid) or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # until both children have started (sh runs too while it forks)
        time.sleep(0.2)
        assert runnable_threads(busy.pid) == 2  # the two yes run or wait for a core; sh waits
        assert runnable_threads(asleep.pid) == 0
    finally:
        os.killpg(busy.pid, 9)
        asleep.kill()
        busy.wait()
        asleep.wait()
    assert runnable_threads(asleep.pid) is None  # reaped: nothing to count


def test_a_tree_is_walked_through_its_own_children_files_as_psutil_walks_it():
    from fast_nvcc.machine.process_tree import children_files
    from fast_nvcc.run.step_threads import _tree_threads, _tree_threads_psutil

    tree = subprocess.Popen(["sh", "-c", "sleep 30 & (sleep 30 & wait) & wait"], start_new_session=True)
    try:
        deadline, walked = time.monotonic() + 10, []
        while len({p for p, _ in walked}) < 4 and time.monotonic() < deadline:  # sh, sleep, sh, sleep
            walked = _tree_threads(tree.pid) or []
            time.sleep(0.05)
        assert len({p for p, _ in walked}) == 4
        assert set(walked) == set(_tree_threads_psutil(tree.pid) or [])
        assert children_files()  # else the walk above was psutil's, and this test proved nothing
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()
    assert _tree_threads(tree.pid) is None and _tree_threads_psutil(tree.pid) is None
