"""The rule by which a running step with slack gives its core to a split step (yielding.py),
with made-up ranks; tests/run/test_scheduler.py runs it with real processes."""

from fast_nvcc.run.yielding import MARGIN, Candidate, to_stop


def test_the_lowest_ranked_step_stops_for_a_split_step_on_a_far_longer_path():
    steps = [Candidate(3, 40.0), Candidate(5, 12.0), Candidate(7, 90.0)]
    assert to_stop(steps, best_ask=100.0, lowest_elsewhere=None) == 5
    assert to_stop(steps, best_ask=12.0 * MARGIN, lowest_elsewhere=None) == 5


def test_no_step_stops_for_an_ask_near_its_own_path_or_for_no_ask():
    steps = [Candidate(3, 40.0), Candidate(5, 90.0)]
    assert to_stop(steps, best_ask=40.0 * MARGIN - 0.01, lowest_elsewhere=None) is None
    assert to_stop(steps, best_ask=None, lowest_elsewhere=None) is None
    assert to_stop([], best_ask=1000.0, lowest_elsewhere=None) is None


def test_the_compile_with_the_lowest_step_of_the_machine_gives_first():
    """Every compile sees the same ask: only the one whose step ranks lowest stops it, so one
    ask does not stop a step in every compile."""
    steps = [Candidate(3, 40.0)]
    assert to_stop(steps, best_ask=100.0, lowest_elsewhere=20.0) is None
    assert to_stop(steps, best_ask=100.0, lowest_elsewhere=40.0) == 3  # a tie: both may give
    assert to_stop(steps, best_ask=100.0, lowest_elsewhere=60.0) == 3
