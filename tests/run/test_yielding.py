"""The rule by which a running step with slack gives its core to a split step (yielding.py),
with made-up ranks; tests/run/test_scheduler.py runs it with real processes."""

import pytest

from fast_nvcc.run.yielding import (
    MARGIN,
    BuildLeft,
    Candidate,
    best_of,
    going_on_rank,
    has_slack,
    step_to_stop,
    to_stop,
    waits_for_own_ask,
    why_going_on,
)


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


def test_a_split_cicc_refused_by_its_own_jobs_bound_stops_a_step_of_its_compile_whatever_others_tell():
    """Only a step of ours frees a -j slot: our own cicc's ask is not compared with the steps
    other compiles could give, and counts while the build tool holds compiles back."""
    steps = [Candidate(3, 40.0), Candidate(5, 12.0)]
    elsewhere = lambda: (None, 1.0)  # noqa: E731  (the machine asks nothing; another compile's step ranks lower)
    assert step_to_stop(steps, competes=False, own_ask=100.0, pool=elsewhere, build_left=None) == 5
    assert step_to_stop(steps, competes=True, own_ask=14.0, pool=elsewhere, build_left=None) is None  # (under MARGIN)
    assert step_to_stop(steps, competes=True, own_ask=None, pool=lambda: (100.0, 1.0), build_left=None) is None
    assert step_to_stop(steps, competes=True, own_ask=None, pool=lambda: (100.0, 20.0), build_left=None) == 5
    assert step_to_stop(steps, competes=False, own_ask=None, pool=lambda: (100.0, None), build_left=None) is None
    assert step_to_stop([], competes=True, own_ask=100.0, pool=elsewhere, build_left=None) is None
    assert best_of(None, 30.0, 20.0) == 30.0 and best_of(None, None) is None


def test_a_step_whose_path_reaches_the_builds_end_does_not_stop():
    """Where every core is busy the build ends at its cpu floor at the soonest: a step whose
    remaining path reaches it, a quarter to spare or less, ends the build later if it stops
    (FlashAttention's advised build, round 24: the floor's own compile stopped 7.3 s and the
    build ended 8 s above its floor).  Unknown (a first build): the ranks alone decide."""
    steps = [Candidate(3, 80.0), Candidate(5, 90.0)]
    assert to_stop(steps, best_ask=150.0, lowest_elsewhere=None, build_left=80.0 * MARGIN) == 3
    assert to_stop(steps, best_ask=150.0, lowest_elsewhere=None, build_left=80.0 * MARGIN - 0.5) is None
    assert to_stop(steps, best_ask=150.0, lowest_elsewhere=None, build_left=None) == 3
    assert has_slack(40.0, build_left=50.0) and not has_slack(41.0, build_left=50.0) and has_slack(1e9, build_left=None)


def test_a_stopped_step_goes_on_at_the_builds_end_once_its_slack_is_spent():
    """While it has slack a stopped step waits at its own rank, below the split step it gave way
    to; as the build's work is done its end nears, and once the step's path reaches it with a
    quarter or less to spare it asks at the build's end, above split steps on shorter paths."""
    assert going_on_rank(40.0, build_left=120.0) == 40.0
    assert going_on_rank(40.0, build_left=50.0) == 40.0
    assert going_on_rank(40.0, build_left=49.0) == 49.0  # slack spent: it ranks as the build's end
    assert going_on_rank(60.0, build_left=49.0) == 60.0  # past the end already: its own path
    assert going_on_rank(40.0, build_left=None) == 40.0


def test_a_stopped_step_says_why_it_went_on():
    """FAST_NVCC_LOG's went_on: the slack spent first (whatever the asks), then no ask at all,
    else an ask under MARGIN times its path."""
    assert why_going_on(40.0, best_ask=1000.0, build_left=49.0) == "no slack"
    assert why_going_on(40.0, best_ask=None, build_left=None) == "no ask"
    assert why_going_on(40.0, best_ask=40.0 * MARGIN - 0.01, build_left=120.0) == "ask below"
    assert why_going_on(40.0, best_ask=10.0, build_left=None) == "ask below"


def test_the_builds_end_is_every_compiles_work_left_now_over_the_cores(tmp_path):
    """Each compile tells its work left less its running steps' progress, in whole seconds (a
    new name only when it moves by one), on the pool's directory; the build's soonest end is
    their sum over the pool's cores, gone with a compile that closes or stops knowing."""
    ours, theirs = BuildLeft(str(tmp_path), 4), BuildLeft(str(tmp_path), 4)
    theirs.left.owner = theirs.paths.owner = ours.left.owner + 1  # two compiles of the machine
    assert ours.soonest() is None
    ours.tell(100.4)
    theirs.tell(60.0)
    assert ours.soonest() == pytest.approx(160.0 / 4) == theirs.soonest()
    names = sorted(p.name for p in (tmp_path / "left").iterdir())
    ours.tell(100.2)  # the same whole second: nothing posted again
    assert sorted(p.name for p in (tmp_path / "left").iterdir()) == names
    theirs.tell(60.0, path=70.0)  # a split step on a longer path than all the work over the cores
    assert ours.soonest() == pytest.approx(70.0)
    ours.tell(None)
    assert ours.soonest() == pytest.approx(70.0)
    theirs.tell(60.0)
    assert ours.soonest() == pytest.approx(60.0 / 4)
    theirs.close()
    assert ours.soonest() is None and not list((tmp_path / "left").iterdir())


@pytest.mark.parametrize(
    "rank, asking, short, waits",
    [
        (10.0, 100.0, False, True),  # the run's split step asks at a better rank: the board keeps that
        (10.0, None, False, False),  # no split step of the run asks
        (120.0, 100.0, False, False),  # the ready step ranks better: it asks the pool itself
        (10.0, 100.0, True, False),  # a step a moment long takes its slot as before
    ],
)
def test_a_ready_step_waits_for_its_own_split_steps_better_ask(rank, asking, short, waits):
    assert waits_for_own_ask(rank, asking=asking, short=short) is waits
