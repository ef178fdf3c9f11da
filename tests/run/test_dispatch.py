"""Which ready tasks start in a turn (fast_nvcc.run.dispatch), on made-up room: no process."""

from __future__ import annotations

import pytest

from fast_nvcc.run.dispatch import Ready, Turn, dispatch


class Room:
    """Made-up room: ``jobs`` -j slots, ``shared`` shared slots (a short task needs none), and
    the tasks whose kind is at its capacity."""

    def __init__(self, *, jobs: int = 8, shared: int = 8, full: tuple[int, ...] = ()) -> None:
        self.jobs, self.shared, self.full = jobs, shared, set(full)
        self.taken: list[tuple[int, bool]] = []

    @property
    def free(self) -> bool:
        return self.jobs > 0

    def at_capacity(self, task_id: int) -> bool:
        return task_id in self.full

    def take(self, task_id: int, *, short: bool) -> bool:
        if not self.jobs or not (short or self.shared):
            return False
        self.jobs -= 1
        self.shared -= not short
        self.taken.append((task_id, short))
        return True


def ready(*specs: str) -> list[Ready]:
    """Tasks 0, 1, ... best first, each in nvcc's order by its id: "long", "short", "optional",
    "moment" (a step a moment long, a module_id check) or "running" (one that runs already)."""
    return [Ready(i, (0, i, 0), short=spec == "short", optional=spec == "optional",
                  moment=spec in ("moment", "running"), running=spec == "running")
            for i, spec in enumerate(specs)]  # fmt: skip


@pytest.mark.parametrize(
    "specs, room, failed, expected",
    [
        # Room for all: they start best first.
        (("long", "long", "short"), Room(), None, Turn(start=(0, 1, 2))),
        # -j bounds them: the rest wait, and no shared slot is to blame.
        (("long", "long", "long"), Room(jobs=2), None, Turn(start=(0, 1), blocked=False, waiter=2)),
        # No shared slot for the second: it waits for one (the turn's waiter, whose rank split
        # steps compare with theirs), and so does the long one behind it.
        (("long", "long", "long"), Room(shared=1), None, Turn(start=(0,), blocked=True, waiter=1)),
        # ... but a short one behind it starts, within -j (until -j is full).
        (("long", "long", "short", "long", "short", "short"), Room(jobs=3, shared=1), None,
         Turn(start=(0, 2, 4), blocked=True, waiter=1)),  # fmt: skip
        # ... and so does a step a moment long (a module_id check, which takes no slot: it
        # waited 2.3 s behind its sibling's ptxas while its host compile took the sibling's stub).
        (("long", "long", "moment", "long"), Room(shared=1), None, Turn(start=(0, 2), blocked=True, waiter=1)),
        # A short one first, refused for want of a -j slot, waits like any other.
        (("short", "short"), Room(jobs=0), None, Turn(blocked=False, waiter=0)),
        # An optional task refused room is dropped, not kept waiting; the next one may go.
        (("optional", "short"), Room(shared=0), None, Turn(start=(1,), dropped=(0,))),
        (("optional", "long"), Room(shared=0), None, Turn(dropped=(0,), blocked=True, waiter=1)),
        # A kind at its capacity waits, and everything behind it, short ones too.
        (("long", "short"), Room(full=(0,)), None, Turn(blocked=True, waiter=0)),
        # A step a moment long starts and holds the turn for the steps it leads to (a cicc's
        # ptxas after its module_id check): the long ones behind it wait, short ones start.
        (("long", "moment", "long", "short"), Room(), None, Turn(start=(0, 1, 3), moment=1)),
        # ... as long as it runs (it comes back in the list at its place).
        (("running", "long", "short"), Room(), None, Turn(start=(2,), moment=0)),
        # One ranked behind the others holds nothing from them.
        (("long", "long", "running"), Room(), None, Turn(start=(0, 1), moment=2)),
        # One after a failure in nvcc's order holds nothing.
        (("running", "long"), Room(), (0, -1, 0), Turn(discarded=(1,))),
        # After a failure, the tasks after it in nvcc's order are discarded, the earlier ones run.
        (("long", "long", "long"), Room(), (0, 1, 0), Turn(start=(0, 1), discarded=(2,))),
        # ... and a short task after the failure does not start behind a waiting one.
        (("long", "long", "short", "short"), Room(shared=1), (0, 2, 0),
         Turn(start=(0, 2), blocked=True, waiter=1)),  # fmt: skip
    ],
)
def test_dispatch(specs, room, failed, expected):
    assert dispatch(ready(*specs), room, failed=failed) == expected


def test_a_short_task_takes_no_shared_slot_and_a_long_one_does():
    room = Room(jobs=4, shared=1)
    turn = dispatch(ready("long", "long", "short"), room)
    assert turn.start == (0, 2)
    assert room.taken == [(0, False), (2, True)]  # the refused long one took nothing


def test_each_start_takes_room_from_the_next():
    """The offer is asked in order, as the decision is made: a task started takes its share
    before the next one is asked."""
    room = Room(jobs=2)
    assert dispatch(ready("long", "long", "long"), room).start == (0, 1)
    assert dispatch(ready("long"), room) == Turn(blocked=False, waiter=0)
