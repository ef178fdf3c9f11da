"""A run waiting for room another compile holds looks again less and less often while nothing
changes, and at once again as soon as a task of its own starts or ends (fast_nvcc/run/backoff.py)."""

from fast_nvcc.run.backoff import Backoff


def test_the_wait_doubles_while_nothing_changes_up_to_the_most():
    backoff = Backoff(0.02, 0.08)
    assert [backoff.wait(changed=False) for _ in range(5)] == [0.02, 0.04, 0.08, 0.08, 0.08]


def test_a_start_or_an_end_brings_it_back_to_the_first():
    backoff = Backoff(0.01, 0.08)
    for _ in range(4):
        backoff.wait(changed=False)
    assert backoff.wait(changed=True) == 0.01
    assert backoff.wait(changed=False) == 0.02
