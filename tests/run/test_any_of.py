"""A task that waits for one of a group (fast_nvcc.run.any_of): an early stub's front takes the
stub of whichever cicc of its compile is done first, the one a running stub probe will write
rather than another, and a group once served is served for good (made-up tasks)."""

from __future__ import annotations


import pytest

from fast_nvcc.run.any_of import AnyOfGroups

from tasks import sh_task

# Two ciccs, a stub probe (optional) and a learned stub of one compile; the front waits for one
# of them.
CICC_A, CICC_B, PROBE, FRONT, LEARNED = range(5)


def groups(running: set[int]) -> AnyOfGroups:
    tasks = [sh_task(i, "true") for i in range(5)]
    tasks[PROBE] = tasks[PROBE]._replace(optional=True)
    tasks[FRONT] = tasks[FRONT]._replace(any_of=frozenset({CICC_A, CICC_B, PROBE, LEARNED}))
    return AnyOfGroups(tasks, running=lambda task_id: task_id in running)


# Each event: ("done", member) -> member_done, ("dropped", member) -> optional_dropped; the
# answers are whether the front's group is served by that event.
@pytest.mark.parametrize(
    "running, events, answers",
    [
        # The first member done serves the group; the next one's end means nothing to it.
        (set(), [("done", CICC_B), ("done", CICC_A)], [True, False]),
        # The probe itself done serves it, though it is running until its end is handled.
        ({PROBE}, [("done", PROBE), ("done", CICC_A)], [True, False]),
        # While the probe runs, a cicc done waits for the probe's stub, the sure one ...
        ({PROBE}, [("done", CICC_A), ("done", CICC_B)], [False, False]),
        # ... and the probe dropped without helping: a member already done serves the group.
        ({PROBE}, [("done", CICC_A), ("dropped", PROBE), ("done", CICC_B)], [False, True, False]),
        # The probe dropped before any member was done: the first one done serves it.
        (set(), [("dropped", PROBE), ("done", CICC_B), ("done", CICC_A)], [False, True, False]),
        # A group already served is not served again when the probe is dropped.
        (set(), [("done", CICC_A), ("dropped", PROBE)], [True, False]),
        # A learned stub with nothing to give, while the probe runs: the probe's stub is still
        # the sure one (CI, 2026-11-26: the sm_80 stub was taken and the host compile ran twice).
        ({PROBE, LEARNED}, [("done", CICC_A), ("dropped", LEARNED), ("done", PROBE)], [False, False, True]),
        ({PROBE, LEARNED}, [("done", CICC_A), ("dropped", LEARNED), ("dropped", PROBE)], [False, False, True]),
    ],
    ids=["first-member", "probe-itself", "probe-runs", "probe-dropped-after", "probe-dropped-first", "served-once",
         "learned-dropped-probe-helps", "learned-dropped-probe-fails"],
)
def test_a_group_is_served_once_by_the_member_it_should_take(running, events, answers):
    any_of = groups(running)
    got = []
    for what, member in events:
        if what == "dropped":
            running.discard(member)
            got.append(any_of.optional_dropped(member, FRONT))
        else:
            got.append(any_of.member_done(member, FRONT))
    assert got == answers
    assert (FRONT in any_of.served) == any(answers)
