"""A run's loop sleeps until its own step ends or another compile frees a slot of the pool
(fast_nvcc/run/wakeup.py, RequestBoard.wake): no look on the clock in between."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fast_nvcc.machine.slots import PoolSlots
from fast_nvcc.run.wakeup import WAKE_SIGNAL, Wakeup

LONG = 60.0  # a wait this long is never the timeout's end in these tests: the test would hang


def test_a_poke_from_another_thread_wakes_the_wait():
    wakeup = Wakeup()
    wakeup.start(signals=False)
    try:
        threading.Timer(0.05, wakeup.poke).start()
        assert wakeup.wait(LONG) is True
        assert wakeup.wait(0.0) is False  # drained: nothing woke it since
    finally:
        wakeup.close()


def test_the_signal_wakes_it_and_its_handling_goes_back_on_close():
    before = signal.getsignal(WAKE_SIGNAL)
    wakeup = Wakeup()
    try:
        assert wakeup.start(signals=True) and wakeup.signals
        os.kill(os.getpid(), WAKE_SIGNAL)
        assert wakeup.wait(LONG) is True
    finally:
        wakeup.close()
    assert signal.getsignal(WAKE_SIGNAL) == before and not wakeup.signals
    wakeup.close()  # twice: harmless


def test_off_the_main_thread_no_signal_wakes_it_and_a_poke_does():
    answers = []

    def run():
        wakeup = Wakeup()
        answers.append(wakeup.start(signals=True))
        wakeup.poke()
        answers.append(wakeup.wait(LONG))
        wakeup.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert answers == [False, True]


WAITER = """
import sys
from fast_nvcc.machine.slots import PoolSlots
from fast_nvcc.run.wakeup import Wakeup
pool = PoolSlots(sys.argv[1], 1)
wakeup = Wakeup()
assert wakeup.start(signals=True)
assert not pool.try_acquire(1.0)  # the one slot is held: a request waits on the board
print("waiting", flush=True)
woke = wakeup.wait(60.0)
print("woke" if woke else "timed out", pool.try_acquire(1.0), flush=True)
pool.close()
wakeup.close()
"""


def test_a_compile_that_frees_a_slot_wakes_a_waiter_of_another_process(tmp_path):
    holder = PoolSlots(str(tmp_path / "pool"), 1)
    assert holder.try_acquire(1.0)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(tmp_path / "pool")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})  # fmt: skip
    try:
        assert waiter.stdout.readline().strip() == "waiting"
        holder.release()  # wakes the board's waiters
        out, _ = waiter.communicate(timeout=LONG)
    finally:
        waiter.kill()
        holder.close()
    assert waiter.returncode == 0 and out.strip() == "woke True"
