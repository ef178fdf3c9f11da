"""Split steps share the machine (fast_nvcc.run.core_grants): how many threads a step has, who gets
a core and who gives one back (made-up ranks and slots), and with the real nvcc, a split cicc held
to the one core it was granted and then widened as a slot frees, its output nvcc's; and
``--split`` (fast_nvcc.plan.split_option), which adds nvcc's flag to the sources it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from helpers import UNROLLED_CHAIN, fast_nvcc_command, mask, require_option, run_tool

from fast_nvcc.errors import FastNvccError
from fast_nvcc.graph.tasks import Action, Task
from fast_nvcc.learn.history import History
from fast_nvcc.machine.pool_files import Request, SlotLocks
from fast_nvcc.machine.slots import Slots
from fast_nvcc.plan.dryrun import Kind, Step
from fast_nvcc.report.log import narrowed_entry, refused_entry
from fast_nvcc.plan.split_option import SERIAL_SHARE, matches, settings, split_threads, with_split
from fast_nvcc.run.admission import Admission
from fast_nvcc.run.holdings import Holdings
from fast_nvcc.run.core_grants import (IDLE_LOOKS, Grant, Grants, asks_on, idle, kept_asks, narrowing, on_cores,
                                      stops_own, widening_order)
from fast_nvcc.run.yielding import MARGIN

# What fast_nvcc itself decides: against the first toolchain (conftest).
pytestmark = pytest.mark.one_toolchain

# -- how many threads -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, threads",
    [
        (["cicc", "-arch", "compute_90", "-split-compile", "4", "x.ii"], 4),  # cicc, nvlink
        (["ptxas", "-split-compile=4", "-arch=sm_90", "-split-compile=8", "x.ptx"], 8),  # the last counts
        (["nvlink", "-split-compile-extended", "3", "a.o"], 3),  # nvlink under -dlto
        (["cicc", "-split-compile", "0", "x.ii"], 16),  # every CPU of the machine
        (["cicc", "-split-compile", "1", "x.ii"], None),  # one thread: not a split step
        (["ptxas", "-arch=sm_90", "x.ptx"], None),
        (["fatbinary", '--cmdline= -split-compile=4 ', "--cicc-cmdline=-split-compile 4"], None),  # not its own
    ],
)
def test_a_step_has_as_many_threads_as_its_split_compile_says(argv, threads):
    assert split_threads(argv, machine_cpus=16) == threads


# -- who gets a core, who gives one back (made-up numbers) --------------------------------------


def test_a_split_steps_path_shortens_on_more_cores_as_the_split_model_says():
    assert on_cores(300.0, 1, serial=0.37) == 300.0
    assert on_cores(300.0, 2, serial=0.0) == 150.0
    assert on_cores(100.0, 4, serial=0.2) == pytest.approx(40.0)  # 20 s serial + 80 s on 4 cores
    grant = Grant(1, 16, priority=300.0, cores=[0, 1, 2])  # serial share 0: on 3 cores
    assert (grant.asking, grant.holding) == (100.0, 150.0)


def test_a_widened_step_gives_a_core_back_when_its_own_compile_or_a_better_ranked_waiter_needs_one():
    # Ranks on one core, serial share 0: the long one's path, 300 s on one core, takes 150 s on
    # two, so it holds its third core at 150; the short one holds its second at 40.
    long, short = Grant(1, 16, priority=300.0, cores=[0, 1, 2]), Grant(2, 16, priority=40.0, cores=[3, 4])
    narrow = Grant(3, 16, priority=10.0, cores=[5])
    never = lambda priority: None  # noqa: E731

    def below(rank: float):
        """A waiter of the machine that outranks a core held below ``rank``."""
        return lambda priority: "rank" if priority < rank else None

    assert narrowing([long, short, narrow], ours_waiting=None, outranked=never) is None
    # A step of this compile on as long a path waits: the lowest-ranked widened step gives one
    # back, not the one on a single core.
    assert narrowing([long, short, narrow], ours_waiting=40.0, outranked=never) == (short, "own")
    # One on a shorter path than every widened step waits its turn at the pool instead (a host
    # compile beside the build's longest cicc).
    assert narrowing([long, short, narrow], ours_waiting=39.0, outranked=never) is None
    # The long one keeps its third core from a step that would end first all the same ...
    assert narrowing([long], ours_waiting=149.0, outranked=never) is None
    # ... and gives it to one whose path is as long as its own would be without it.
    assert narrowing([long], ours_waiting=150.0, outranked=never) == (long, "own")
    # A waiter of the machine ranked between the two: the lower one gives back.
    assert narrowing([long, short], ours_waiting=None, outranked=below(100.0)) == (short, "rank")
    assert narrowing([long], ours_waiting=None, outranked=below(100.0)) is None
    # A waiter of the machine takes a core only at MARGIN times the rank it is held at (150 s
    # here): one a hair above, as a host compile stopped for a split step is, waits, so that it
    # does not take back by a near-equal rank the core it gave and be stopped again.
    assert narrowing([long], ours_waiting=None, outranked=below(151.0)) is None
    assert narrowing([long], ours_waiting=None, outranked=below(150.0 * MARGIN + 0.1)) == (long, "rank")
    assert narrowing([long], ours_waiting=None, outranked=below(150.0 * MARGIN - 0.1)) is None
    # Steps run beyond the pool's size: the pool says so, and the log tells it from a rank.
    assert narrowing([long, short], ours_waiting=None, outranked=lambda p: "over") == (short, "over")
    # Nothing widened: nothing to give back.
    assert narrowing([narrow], ours_waiting=400.0, outranked=lambda p: "over") is None


def test_the_longest_remaining_path_on_the_cores_held_asks_first_and_a_full_step_not_at_all():
    a = Grant(1, 4, priority=100.0, cores=[0])  # asks at 100
    b = Grant(2, 4, priority=300.0, cores=[1, 2])  # at 150, on its two cores
    c = Grant(3, 2, priority=500.0, cores=[3, 4])  # has its two cores
    d = Grant(4, 8, priority=100.0, cores=[5, 6])  # at 50
    e = Grant(5, 8, priority=200.0, cores=[7, 8])  # at 100, a tie with a: the narrower one first
    assert widening_order([a, b, c, d, e]) == [b, a, e, d]
    # A step of the same compile waits for a slot at 100 s: only the longer path still widens.
    assert widening_order([a, b, c, d, e], ours_waiting=100.0) == [b]
    assert widening_order([a, b, c, d, e], ours_waiting=150.0) == []
    # The share its threads do not shorten keeps a step's rank up as it widens.
    b.serial = 0.5
    assert b.asking == 225.0 and widening_order([a, b], ours_waiting=150.0) == [b]


def test_where_costs_are_known_the_longest_path_asks_first_however_many_cores_it_holds():
    """Ranks learned and shown credible (``longest``): a step asks, and keeps its last core, at
    its path on a core per thread, so the cores go to the longest path first rather than
    spreading so that the paths end together."""
    wide = Grant(1, 16, priority=300.0, cores=list(range(8)))
    narrow = Grant(2, 16, priority=200.0, cores=[8])
    assert widening_order([wide, narrow]) == [narrow, wide]  # 200 on one core before 300 / 8
    wide.longest = narrow.longest = True
    assert wide.asking == wide.holding == on_cores(300.0, 16, serial=wide.serial)
    assert narrow.asking == narrow.holding == on_cores(200.0, 16, serial=narrow.serial)
    assert widening_order([wide, narrow]) == [wide, narrow]
    # The one to give a core back to a waiter is the one on the shorter path, wide or not.
    assert narrowing([wide, Grant(3, 16, priority=200.0, cores=[9, 10], longest=True)], ours_waiting=None,
                     outranked=lambda rank: rank < 100.0) is not None
    assert narrowing([wide], ours_waiting=None, outranked=lambda rank: rank < on_cores(300.0, 16, serial=wide.serial)) \
        is None  # fmt: skip


def test_a_step_wants_a_core_per_runnable_thread_and_idle_cores_go_back_after_three_looks():
    grant = Grant(1, 8, priority=100.0, cores=[0, 1, 2, 3])
    assert grant.want == 8  # not looked at yet: all its threads
    grant.look(1)  # cicc's front end: one thread
    assert grant.want == 1 and idle([grant]) == []
    grant.look(1)
    grant.look(1)
    assert idle([grant]) == [(grant, 3)]  # three looks in a row: its three idle cores go back
    grant.look(6)  # its threads optimize: it wants more, and the count of idle looks starts over
    assert grant.want == 6 and grant.idle_looks == 0 and idle([grant]) == []
    grant.look(None)  # no live process at this look: what was known stands
    assert grant.want == 6
    grant.look(20)  # threads of its children too, but never more cores than its own threads
    assert grant.want == 8


def test_the_looks_count_the_seconds_its_threads_ran_one_at_a_time():
    """FAST_NVCC_LOG's serial_seconds: what no core shortens (cicc's front end and its tail)."""
    grant = Grant(1, 8, priority=100.0, cores=[0])
    for now, runnable in ((0.0, 1), (0.1, 1), (0.2, 6), (0.3, 16), (0.4, 1), (0.5, None), (0.6, 0)):
        grant.look(runnable, now=now)
    assert grant.serial_seconds == pytest.approx(0.1 + 0.1 + 0.2)  # the look at 0.5 saw nothing


def test_the_looks_count_the_core_seconds_its_threads_ran_on_the_cores_it_holds():
    """A split step's work done, by which its rank falls (ReadyQueue.remaining): each look adds
    the time since the last one times its runnable threads, at most one per core it holds."""
    grant = Grant(1, 8, priority=100.0, cores=[0, 1, 2, 3])
    for now, runnable in ((0.0, 1), (1.0, 1), (2.0, 6), (3.0, 3), (3.5, None), (4.0, 0)):
        grant.look(runnable, now=now)
    assert grant.ran == pytest.approx(1.0 + 4.0 + 3.0)  # none from 3 s to 4 s, and 4 cores at most


def test_only_a_step_whose_threads_want_more_cores_asks_for_one():
    serial = Grant(1, 8, priority=300.0, cores=[0])
    serial.look(1)
    busy = Grant(2, 8, priority=100.0, cores=[1, 2])
    busy.look(4)
    full = Grant(3, 8, priority=200.0, cores=[3, 4])
    full.look(2)
    assert widening_order([serial, busy, full]) == [busy]


class FreeSlots(Slots):
    """A pool with ``free`` slots left and waiters ranked at ``waiter`` seconds of path."""

    implicit = 0  # like the machine-wide pool: every step holds a slot ...
    short_steps_free = True  # ... and ranks its waiters

    def __init__(self, free: int, waiter: float = 0.0) -> None:
        super().__init__()
        self.free, self.waiter = free, waiter

    def try_acquire(self, priority: float = 0.0, *, pole: bool = False) -> bool:
        if self.free <= 0 or priority < self.waiter:
            return False
        self.free -= 1
        self.held += 1
        return True

    def outranked(self, priority: float) -> bool:
        return priority < self.waiter

    def waiter_before(self, priority: float, *, pole: bool = False) -> Request | None:
        return Request(self.waiter, False, 4242) if priority < self.waiter else None

    def _give_back(self) -> None:
        self.free += 1
        self.held -= 1


def _grants(tmp_path: Path, slots: Slots, jobs: int = 16):
    pins: dict[int, frozenset[int]] = {}
    admission = Admission(jobs=jobs, slots=slots, memory=None)
    # A made-up machine of 16 CPUs: the pins are only recorded here.
    grants = Grants(admission, pool_directory=str(tmp_path), pin=pins.__setitem__, cpus=range(16))
    return admission, grants, pins


def _running(admission: Admission, count: int) -> None:
    """``count`` steps start, as the runner starts them: a slot each."""
    for task_id in range(count):
        step = Step(index=task_id, text="cicc", kind=Kind.CICC, tool="cicc", argv=("cicc",))
        task = Task(task_id, step, Action.EXEC, argv=step.argv)
        assert admission.reserve(task, 0.0, now=0.0)
        admission.start(task, takes_slot=True, capacity=None)


def test_free_slots_go_to_the_longest_path_up_to_its_threads_and_come_back_when_it_ends(tmp_path):
    slots = FreeSlots(free=5)
    slots.implicit = 1
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 2)  # two split steps, the implicit slot and one of the pool: 4 left
    long, short = grants.start(1, 4, 200.0), grants.start(2, 8, 50.0)
    assert len(long) == 1 and len(short) == 1 and long != short  # a core each, not the same one
    priorities = {1: 200.0, 2: 50.0}
    grants.poll(ours_waiting=None, priority_of=priorities.__getitem__)
    # The long one takes three more (four threads), the short one the last free slot.
    assert len(pins[1]) == 4 and len(pins[2]) == 2
    assert not pins[1] & pins[2]
    assert slots.free == 0
    # The long one ends: its three extra slots go back, and the short one takes them.
    grants.end(1)
    assert slots.free == 3
    grants.poll(ours_waiting=None, priority_of=priorities.__getitem__)
    assert len(pins[2]) == 5 and slots.free == 0
    grants.close()


def test_free_cores_spread_over_split_steps_so_that_their_paths_end_together(tmp_path):
    """TE's seven split sources, 2026-11-27: in the tail, one ptxas took 11-15 cores in turn
    while the build's last one ran on one core for a minute.  Two split steps of equal rank
    share the free cores; one with twice the path gets about twice the cores."""
    slots = FreeSlots(free=8)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 2)  # six slots left
    grants.start(1, 8, 100.0)
    grants.start(2, 8, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert (len(pins[1]), len(pins[2])) == (4, 4) and slots.free == 0
    grants.close()

    slots = FreeSlots(free=9)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 2)  # seven left
    grants.start(1, 16, 200.0)
    grants.start(2, 16, 100.0)
    grants.poll(ours_waiting=None, priority_of={1: 200.0, 2: 100.0}.__getitem__)
    assert (len(pins[1]), len(pins[2])) == (6, 3)  # each path 33 s on its cores
    grants.close()


def test_where_costs_are_known_free_cores_go_to_the_longest_path_up_to_its_threads(tmp_path):
    """FAST_NVCC_LONGEST_FIRST=1 (experimental, docs/benchmarks.md round 37): with the run's
    split steps' costs known (``known``) the step on twice the path takes every free core its
    threads want; the other keeps its one."""
    slots = FreeSlots(free=9)
    admission, grants, pins = _grants(tmp_path, slots)
    grants.known = True
    _running(admission, 2)  # seven left
    grants.start(1, 16, 200.0)
    grants.start(2, 16, 100.0)
    ranks = {1: 200.0, 2: 100.0}
    grants.poll(ours_waiting=None, priority_of=ranks.__getitem__)
    assert len(pins[1]) == 8 and 2 not in pins and slots.free == 0  # (2 was not pinned again: its one core)
    # Its path falls below the other's: a waiter of the pool that outranks it takes its cores.
    ranks[1] = 50.0
    slots.waiter = on_cores(100.0, 16, serial=0.0)  # another compile's ask on a core per thread
    grants.poll(ours_waiting=None, priority_of=ranks.__getitem__)
    assert len(pins[1]) == 7
    grants.close()


def test_the_step_with_the_longer_serial_tail_gets_the_cores_for_its_parallel_part(tmp_path):
    """Two split steps of one path on one core (200 s), one with a serial share of 0.5 (cicc's
    tail: gelu_grouped.cu ran 76 s of its 93 s alone in one thread), one of 0.1.  The parallel
    part of the one with the long tail is run first, so that its tail runs beside the other's
    parallel work: it takes most of the 16 cores, as many as end the later path soonest."""
    admission, grants, pins = _grants(tmp_path, FreeSlots(free=16))
    _running(admission, 2)
    grants.start(1, 16, 200.0, serial=0.5)
    grants.start(2, 16, 200.0, serial=0.1)
    grants.poll(ours_waiting=None, priority_of={1: 200.0, 2: 200.0}.__getitem__)
    assert (len(pins[1]), len(pins[2])) == (13, 3)
    def later(a: int) -> float:  # the later path's end, with a cores for the first and 16 - a for the second
        return max(on_cores(200.0, a, serial=0.5), on_cores(200.0, 16 - a, serial=0.1))

    assert later(13) == min(later(a) for a in range(1, 16))
    grants.close()


def test_a_split_step_takes_its_learned_serial_share_else_its_tools(tmp_path):
    steps = [Step(index=i, text=tool, kind=kind, tool=tool, argv=(tool, "-split-compile", "16"))
             for i, (tool, kind) in enumerate([("cicc", Kind.CICC), ("ptxas", Kind.PTXAS), ("cicc", Kind.CICC)])]
    tasks = [Task(i, step, Action.EXEC, argv=step.argv) for i, step in enumerate(steps)]
    holdings = Holdings(tasks, [], jobs=2, slots=Slots(), memory=None, processes=SimpleNamespace(pin=None), env={},
                        handler_of=None, priority_of=None, now=time.monotonic, serial=[0.25, None])  # fmt: skip
    assert holdings.serial == {0: 0.25, 1: SERIAL_SHARE["ptxas"], 2: SERIAL_SHARE["cicc"]}


def test_the_longest_path_first_takes_the_switch_and_the_sources_own_split_costs():
    """FAST_NVCC_LONGEST_FIRST=1 acts only where every split step's cost is its source's own
    (Learned.split_costs_known), and then for every split step of the run from its start."""
    step = Step(index=0, text="cicc", kind=Kind.CICC, tool="cicc", argv=("cicc", "-split-compile", "16"))
    tasks = [Task(0, step, Action.EXEC, argv=step.argv)]

    def known(env: dict, split_known: bool) -> bool:
        holdings = Holdings(tasks, [], jobs=2, slots=Slots(), memory=None, processes=SimpleNamespace(pin=None),
                            env=env, handler_of=None, priority_of=None, now=time.monotonic,
                            split_known=split_known)  # fmt: skip
        return holdings.grants.known

    on = {"FAST_NVCC_LONGEST_FIRST": "1"}
    assert known(on, True) and not known(on, False) and not known({}, True)


def test_a_step_of_its_own_compile_and_a_better_ranked_waiter_each_take_a_core_back(tmp_path):
    slots = FreeSlots(free=3)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 3 and slots.free == 0
    grants.poll(ours_waiting=100.0, priority_of=lambda _: 100.0)  # a ready step of ours waits
    assert len(pins[1]) == 2 and slots.free == 1
    grants.poll(ours_waiting=100.0, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 1 and slots.free == 2
    grants.poll(ours_waiting=100.0, priority_of=lambda _: 100.0)  # its own core stays
    assert len(pins[1]) == 1
    # No one of ours waits, but a waiter ranked at 150 s does: no widening past it.
    slots.waiter = 150.0
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 1 and slots.free == 2
    slots.waiter = 0.0
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 3
    # FAST_NVCC_LOG's narrowed: each core it gave back, and why
    assert [why for _, why, _ in grants._running[1].narrowed] == ["own", "own"]
    grants.close()
    assert slots.free == 2  # its own step's slot is the runner's to give back


def test_a_step_asks_on_while_its_threads_want_a_core_the_pool_had_none_for_or_it_gave_away():
    wanting = [Grant(1, 8, priority=100.0, cores=[1, 2])]
    assert asks_on(wanting, narrowed=False, refused="slot")
    assert asks_on(wanting, narrowed=True, refused="")  # it gave a core to a better waiter
    assert not asks_on(wanting, narrowed=False, refused="")  # it got every core it asked for
    assert not asks_on(wanting, narrowed=False, refused="memory")
    assert not asks_on([], narrowed=True, refused="slot")  # no thread wants a core


def test_an_ask_stays_posted_while_its_threads_want_no_more_cores_for_a_few_looks():
    lapsed = Grant(1, 8, priority=300.0, cores=[0])
    lapsed.look(1)  # one thread runs: it wants no core it does not hold
    never = Grant(2, 8, priority=400.0, cores=[1])
    never.look(1)
    assert kept_asks([lapsed, never]) == []  # neither asked
    lapsed.ask_kept = 2
    assert kept_asks([lapsed, never]) == [lapsed]
    assert kept_asks([lapsed, never], ours_waiting=300.0) == []  # a step of ours as long waits
    lapsed.look(8)
    assert kept_asks([lapsed]) == []  # it wants cores again: it asks as any wanting step does


def test_a_run_keeps_its_split_steps_ask_through_looks_that_find_one_thread_running(tmp_path):
    """Round 48's board test failed 1 run in 6 on two busy cores: at a look that found the split
    cicc's threads wanting no more cores, the run posted no ask, and its request on the board fell
    to its host compile's rank.  Its ask now stays posted for IDLE_LOOKS looks, as idle cores are
    kept, and no longer once its threads have got the cores they want."""
    slots = AskingSlots(free=1)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)  # (on the one free slot)
    grants.start(1, 8, 100.0)
    grant = grants._running[1]
    runnable = {1: 8}
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)
    assert grants.asking == 100.0 and slots.asked == (100.0, 100.0)  # refused: it asks, and may stop a step
    runnable[1] = 1
    for _ in range(IDLE_LOOKS):
        grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)
        assert grants.asking == 100.0 and slots.asked == (100.0, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)
    assert grants.asking is None and slots.asked == (None, None)  # its threads have wanted none for so long
    runnable[1], slots.free = 8, 8
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)
    assert len(pins[1]) == 8 and grants.asking is None and grant.ask_kept == 0  # it got all it wanted
    runnable[1] = 1
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)
    assert grants.asking is None  # no ask to keep
    grants.close()


def test_only_a_split_cicc_refused_by_its_runs_own_bound_stops_a_step_of_its_own_compile():
    cicc = Grant(1, 8, priority=300.0, cores=[0])
    cicc.look(8)
    ptxas = Grant(2, 8, priority=400.0, cores=[1], stops=False)  # (a split ptxas stops no step)
    ptxas.look(8)
    unseen = Grant(3, 8, priority=500.0, cores=[2])  # (its threads not looked at yet)
    assert stops_own([ptxas, unseen, cicc], refused="jobs") == 300.0
    assert stops_own([cicc], refused="slot") is None  # the pool's: the machine-wide ask
    assert stops_own([ptxas, unseen], refused="jobs") is None
    assert stops_own([], refused="jobs") is None


class AskingSlots(FreeSlots):
    """FreeSlots that keep the last ask a run posted (PoolSlots writes it under ``asks/``)."""

    asked: tuple[float | None, float | None] = (None, None)

    def ask_core(self, rank: float | None, *, stop: float | None = None) -> None:
        self.asked = (rank, stop)


def test_a_step_that_gives_a_core_to_a_better_waiter_still_asks_at_its_rank(tmp_path):
    """TE's seven first build (2026-12-04, round 42): a turn that narrowed for a waiter posted
    no ask, and every stopped host compile of the machine went on ("no ask") and was stopped
    again at the next one: 36 stops, 18 under a second."""
    slots = AskingSlots(free=3)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    busy = {1: 8}  # all eight threads runnable
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=busy.get)
    grant = grants._running[1]
    assert len(pins[1]) == 3 and slots.free == 0
    assert slots.asked == (grant.asking, grant.asking)  # refused a fourth: it asks, and may stop a step
    slots.waiter = grant.holding * MARGIN + 1.0  # a waiter well above its last core
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=busy.get)
    assert len(pins[1]) == 2 and slots.free == 1 and grant.narrowed[-1][1:] == ("rank", Request(slots.waiter, False, 4242))
    assert slots.asked == (grant.asking, grant.asking)
    grants.close()
    assert slots.asked == (None, None)


def test_the_log_names_the_waiter_a_core_went_to():
    """FAST_NVCC_LOG's narrowed: for "rank", the waiter's rank and process, so that a build's
    log tells which compile's request two split steps gave a core each to (round 44: four split
    ptxas, each in its own compile, narrowed for one waiter within 0.1 s)."""
    assert narrowed_entry((1.2345678, "idle", None)) == [1.234568, "idle"]
    assert narrowed_entry((2.0, "rank", Request(46.0214, True, 812))) == [2.0, "rank", 46.021, 812]


def test_a_split_step_keeps_why_it_got_no_core_each_time_the_reason_changes(tmp_path):
    """FAST_NVCC_LOG's refused: round 49's whole-library split narrowed cast_grouped.cu's split
    ptxas 238 times for gelu_grouped.cu's cicc, which held one core all the while: whether the
    pool served others first (``ahead``), found too few slots free, or kept them for steps over
    the pool is what its refusals tell."""
    slots = FreeSlots(free=2)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    grant = grants._running[1]
    slots.refusal = (2, 0, 1)
    for _ in range(3):  # refused at each poll for the same reason: kept once
        grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of={1: 8}.get)
    assert len(pins[1]) == 2 and [r[1:] for r in grant.refused] == [("slot", (2, 0, 1), grant.asking)]
    slots.refusal = (0, 0, 0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of={1: 8}.get)
    assert [r[2] for r in grant.refused] == [(2, 0, 1), (0, 0, 0)]
    grant.refused += [(0.0, "jobs", None, 1.0)] * Grant.REFUSALS_KEPT
    grant.refuse(1.0, "slot", (5, 0, 0))
    assert len(grant.refused) == Grant.REFUSALS_KEPT + 2  # (at most so many more: the line stays short)
    grants.close()
    assert refused_entry((1.2345678, "slot", (1, 0, 2), 46.0214)) == [1.234568, "slot", 46.021, 1, 0, 2]
    assert refused_entry((2.0, "jobs", None, 30.0)) == [2.0, "jobs", 30.0]


def test_a_split_step_says_when_its_threads_left_its_cores_idle(tmp_path):
    """FAST_NVCC_LOG's narrowed: cores a split step's threads did not use for three looks go
    back at once, marked idle."""
    slots = FreeSlots(free=4)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=lambda _: 8)
    assert len(pins[1]) == 4  # the three free slots
    for _ in range(3):  # its front end or its tail: one thread
        grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=lambda _: 1)
    assert len(pins[1]) == 1
    assert [why for _, why, _ in grants.end(1).narrowed] == ["idle"]
    grants.close()


def test_a_split_step_counts_the_seconds_the_kernel_saw_its_granted_cpus_idle(tmp_path):
    """FAST_NVCC_LOG's cores_idle_seconds: between two looks, each CPU the step was held to adds
    what the kernel counted idle there; the CPUs of another step, or none's, do not."""
    clock = {cpu: 0.0 for cpu in range(16)}
    slots = FreeSlots(free=4)
    admission, grants, pins = _grants(tmp_path, slots)
    grants.idle_of = lambda: dict(clock)
    _running(admission, 2)
    grants.start(1, 8, 100.0)
    grants.start(2, 8, 50.0)
    grants.poll(ours_waiting=None, priority_of={1: 100.0, 2: 50.0}.__getitem__, runnable_of=lambda _: 8)
    ones, twos = pins[1], pins[2]
    assert not ones & twos and len(ones) > 1
    for cpu in range(16):  # a second on every CPU, idle half of it
        clock[cpu] += 0.5
    grants.poll(ours_waiting=None, priority_of={1: 100.0, 2: 50.0}.__getitem__, runnable_of=lambda _: 8)
    clock[min(ones)] += 1.0  # one of step 1's CPUs idle a whole second more, then it ends
    assert grants.end(1).cores_idle == pytest.approx(0.5 * len(ones) + 1.0)
    assert grants.end(2).cores_idle == pytest.approx(0.5 * len(twos))
    grants.close()


def test_each_cpus_idle_seconds_come_from_the_kernel_and_grow():
    from fast_nvcc.machine.cpus import idle_seconds, usable_cpus

    before = idle_seconds()
    assert before is not None and set(usable_cpus()) <= set(before)
    time.sleep(0.2)
    after = idle_seconds()
    assert all(after[cpu] >= seconds for cpu, seconds in before.items())
    with open("/proc/uptime") as handle:  # seconds, not the kernel's ticks: none idle longer than it has run
        uptime = float(handle.read().split()[0])
    assert all(0 <= seconds <= uptime + 1 for seconds in after.values())


def test_a_step_of_its_own_compile_on_a_shorter_path_does_not_hold_a_long_pole_to_one_core(tmp_path):
    """TE's whole library, 2026-11-27: gelu_grouped.cu's host compile (beside its cicc, after
    the stub probe) waited 210 s for a slot, and all that time its split cicc, the build's
    longest step, kept one core: any waiting step of its compile stopped the widening."""
    slots = FreeSlots(free=3)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 300.0)  # the split cicc: its compile's longest remaining path
    grants.poll(ours_waiting=40.0, priority_of=lambda _: 300.0)  # the host compile waits
    assert len(pins[1]) == 3 and slots.free == 0  # widened past it
    grants.poll(ours_waiting=40.0, priority_of=lambda _: 300.0)
    assert len(pins[1]) == 3  # and keeps its cores
    # A step of its compile on a longer path (ranks move as steps overrun) takes one back.
    grants.poll(ours_waiting=350.0, priority_of=lambda _: 300.0)
    assert len(pins[1]) == 2 and slots.free == 1
    grants.close()


def test_cores_follow_the_threads_that_run(tmp_path):
    """A split step on a free machine: one core while one thread runs (cicc's front end), as
    many as its threads while they optimize, and back to one, three looks after they end."""
    slots = FreeSlots(free=6)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    first = grants.start(1, 8, 100.0)  # its own step's core, which the runner pins
    runnable = {1: 1}

    def poll() -> None:
        grants.poll(ours_waiting=None, priority_of=lambda _: 100.0, runnable_of=runnable.get)

    poll()
    assert len(pins.get(1, first)) == 1 and slots.free == 5  # no core for a thread that does not run
    runnable[1] = 4
    poll()
    assert len(pins.get(1, first)) == 4 and slots.free == 2
    runnable[1] = 1
    poll()
    poll()
    assert len(pins.get(1, first)) == 4  # a moment's pause keeps the cores
    poll()
    assert len(pins.get(1, first)) == 1 and slots.free == 5  # the idle cores go back together
    grant = grants.end(1)
    assert [n for _, n in grant.timeline] == [1, 4, 1]
    grants.close()


def test_the_local_bound_limits_the_cores_a_run_takes(tmp_path):
    slots = FreeSlots(free=10)
    admission, grants, pins = _grants(tmp_path, slots, jobs=3)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 3  # -j3: the step and two more cores
    grants.close()


def test_two_runs_hold_their_split_steps_to_different_cores(tmp_path):
    first = _grants(tmp_path, FreeSlots(free=0))[1]
    second = _grants(tmp_path, FreeSlots(free=0))[1]
    assert first.start(1, 4, 10.0) != second.start(1, 4, 10.0)
    first.close()
    second.close()


# -- --split: nvcc's flag added where the user asked ------------------------------------------


def test_split_adds_nvccs_flag_to_the_cuda_sources_it_names(tmp_path):
    env, cwd = {}, str(tmp_path)
    args = ["-c", "src/cast/cast_grouped.cu", "-o", "x.o"]
    assert with_split(args, 16, (), env=env, cwd=cwd) == [*args, "--split-compile", "16"]
    assert with_split(args, 16, ("*_grouped.cu",), env=env, cwd=cwd)[-2:] == ["--split-compile", "16"]
    assert with_split(args, 16, ("*/cast/*.cu",), env=env, cwd=cwd)[-2:] == ["--split-compile", "16"]
    assert with_split(args, 16, ("*/gemm/*.cu", "adam.cu"), env=env, cwd=cwd) == args
    # The user's own flag wins; objects and C++ sources get none; off without N.
    own = ["-c", "a.cu", "-split-compile=4"]
    assert with_split(own, 16, (), env=env, cwd=cwd) == own
    assert with_split(["-o", "app", "a.o", "b.cpp"], 16, (), env=env, cwd=cwd) == ["-o", "app", "a.o", "b.cpp"]
    assert with_split(args, None, (), env=env, cwd=cwd) == args


def test_split_patterns_match_a_file_name_or_a_path():
    assert matches("*_grouped.cu", "/te/common/activation/relu_grouped.cu")
    assert not matches("*_grouped.cu", "/te/common/activation/relu.cu")
    assert matches("activation/*.cu", "/te/common/activation/relu.cu")
    assert matches("/te/*/cast_grouped.cu", "/te/common/cast/cast_grouped.cu")
    assert not matches("cast/*.cu", "/te/common/activation/relu.cu")


def test_split_settings_come_from_the_options_or_the_environment():
    assert settings(None, None, {}) == (None, ())
    assert settings(None, None, {"FAST_NVCC_SPLIT": "8", "FAST_NVCC_SPLIT_SOURCES": "a.cu, b/*.cu"}) == (8, ("a.cu", "b/*.cu"))
    assert settings(4, "x.cu", {"FAST_NVCC_SPLIT": "8"}) == (4, ("x.cu",))
    for bad in ("0", "many", "-1"):
        with pytest.raises(FastNvccError, match="FAST_NVCC_SPLIT"):
            settings(None, None, {"FAST_NVCC_SPLIT": bad})
    with pytest.raises(FastNvccError, match="needs --split"):
        settings(None, "a.cu", {})


def test_split_zero_on_the_command_line_is_refused_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fast_nvcc", "--split", "0", "--", "-c", "a.cu"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--split" in proc.stderr and "Traceback" not in proc.stderr


# -- real nvcc ------------------------------------------------------------------------------------

def kernels(count: int, *, depth: int) -> str:
    """``count`` kernels, so that cicc's split has something to share out; each one deeper
    (``Many<depth + j>``), cicc runs longer."""
    return UNROLLED_CHAIN + """
template <int J> __global__ void kernel(float* data) { data[threadIdx.x] = Many<%d + J>::run(data[threadIdx.x]); }
""" % depth + "".join(f"template __global__ void kernel<{j}>(float*);\n" for j in range(count))


# Eight kernels: cicc runs long enough to be seen on one core, then widened.
KERNELS = kernels(8, depth=12)
# Four: a few seconds of cicc, enough for --split-compile 2 to split the module.
SPLIT_KERNELS = kernels(4, depth=2)
LIGHT = "__global__ void light(float* p) { p[threadIdx.x] *= 2.0f; }\n"


def _cicc_affinities(proc: subprocess.Popen, *, on_one_core) -> list[frozenset[int]]:
    """The CPU sets the threads of ``proc``'s cicc were held to, in the order seen; calls
    ``on_one_core`` once, when its threads are first seen held to one core."""
    seen: list[frozenset[int]] = []
    called = False
    while proc.poll() is None:
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        for child in tree:
            try:
                if child.name() != "cicc":
                    continue
                cpus = frozenset().union(*(os.sched_getaffinity(t.id) for t in child.threads()))
            except (psutil.Error, OSError):
                continue
            if not seen or seen[-1] != cpus:
                seen.append(cpus)
            if len(cpus) == 1 and not called:
                called = True
                on_one_core()
        time.sleep(0.02)
    return seen


def _split_reference(nvcc: str, tmp_path: Path, source: str, args: list[str]):
    """Plain nvcc's outputs for ``args`` on ``source`` (kernels.cu), its output file removed again."""
    require_option(nvcc, "--split-compile")
    (tmp_path / "kernels.cu").write_text(source)
    plain = run_tool([nvcc, *args], cwd=tmp_path, tmpdir=tmp_path / "t")
    assert plain.returncode == 0, plain.stderr.decode()
    (tmp_path / args[args.index("-o") + 1]).unlink()
    return plain


@pytest.mark.nvcc
def test_a_split_cicc_is_held_to_its_granted_core_then_widened_and_its_ptx_is_nvccs(nvcc, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU")
    args = ["-ptx", "kernels.cu", "-o", "kernels.ptx", "-arch=sm_90", "--split-compile", "2"]
    plain = _split_reference(nvcc, tmp_path, KERNELS, args)

    # A pool of two slots, one of them held by "another compile" (this test): the compile gets
    # one core until the test gives its slot back.
    pool = tmp_path / "pool"
    pool.mkdir()
    other = SlotLocks(str(pool), 2)
    (held,) = other.lock_free(1, skip=())
    env = {**os.environ, "FAST_NVCC_POOL_DIR": str(pool), "FAST_NVCC_POOL_SIZE": "2", "TMPDIR": str(tmp_path / "t")}
    env = {k: v for k, v in env.items() if not k.startswith("FAST_NVCC_") or k.startswith("FAST_NVCC_POOL")}
    env["FAST_NVCC_LOG"] = str(tmp_path / "log.jsonl")
    env["FAST_NVCC_CACHE_DIR"] = str(tmp_path / "state")
    proc = subprocess.Popen(fast_nvcc_command(nvcc, args, ["--summary"]), cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        seen = _cicc_affinities(proc, on_one_core=lambda: other.unlock(held))
    finally:
        proc.wait(timeout=120)
        other.close()
    _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    # Held to one core while the other slot was taken, then on both.
    assert [len(cpus) for cpus in seen][:1] == [1], seen
    assert any(len(cpus) == 2 for cpus in seen[1:]), seen
    assert mask((tmp_path / "kernels.ptx").read_bytes()) == mask(plain.files["kernels.ptx"])
    assert b"split steps: " in stderr and b"cicc compute_90" in stderr and b"on up to 2 cores" in stderr
    # The log says when it held how many: one core from its start, two later.
    (record,) = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    (cicc,) = [step for step in record["steps"] if step["tool"] == "cicc"]
    assert cicc["cores"] == 2
    times, cores = zip(*cicc["cores_at"])
    assert cores[0] == 1 and 2 in cores and list(times) == sorted(times)
    assert cicc["start"] <= times[0] <= times[-1] <= cicc["end"]
    # and how long its threads ran one at a time: cicc's front end at least, within its life
    assert 0 < cicc["serial_seconds"] <= cicc["seconds"]
    # and how long the kernel saw its cores idle: at most the core-seconds it held
    held = sum((b - a) * n for (a, n), (b, _) in zip(cicc["cores_at"], [*cicc["cores_at"][1:], (cicc["end"], 0)]))
    assert 0 <= cicc["cores_idle_seconds"] <= held + 0.05
    # The history learns it as one core would run it (its cpu), and its own serial share, which
    # the next compile's split model takes instead of the tool's (run/holdings.py).
    history = History(str(tmp_path / "state" / "history.sqlite"))
    learned = history.lookup([str(tmp_path / "kernels.cu")])[(str(tmp_path / "kernels.cu"), "cicc", "compute_90")]
    history.close()
    assert learned.seconds == pytest.approx(cicc["cpu_seconds"], abs=0.01)
    assert learned.serial == pytest.approx(min(1.0, cicc["serial_seconds"] / cicc["cpu_seconds"]), abs=0.01)


@pytest.mark.nvcc
def test_a_long_split_compile_beside_light_ones_gives_nvccs_objects(nvcc, tmp_path):
    """``--split 2 --split-sources kernels.cu``: that compile is nvcc's with --split-compile 2,
    the light ones beside it, started at once on a shared pool, plain nvcc's."""
    require_option(nvcc, "--split-compile")
    (tmp_path / "kernels.cu").write_text(SPLIT_KERNELS)
    for n in range(3):
        (tmp_path / f"light{n}.cu").write_text(LIGHT.replace("light", f"light{n}"))
    sources = ["kernels.cu", "light0.cu", "light1.cu", "light2.cu"]
    arch = "-arch=sm_90"
    expected = {}
    for source in sources:
        split = ["--split-compile", "2"] if source == "kernels.cu" else []
        out = source.replace(".cu", ".o")
        plain = run_tool([nvcc, "-c", source, "-o", out, arch, *split], cwd=tmp_path, tmpdir=tmp_path / "t")
        assert plain.returncode == 0, plain.stderr.decode()
        expected[out] = plain.files[out]
        (tmp_path / out).unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_") or k.startswith("FAST_NVCC_POOL")}
    env.update(TMPDIR=str(tmp_path / "t"), FAST_NVCC_SPLIT="2", FAST_NVCC_SPLIT_SOURCES="kernels.cu")
    procs = [
        subprocess.Popen(fast_nvcc_command(nvcc, ["-c", s, "-o", s.replace(".cu", ".o"), arch]), cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        for s in sources
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr.decode()
    for out, data in expected.items():
        assert mask((tmp_path / out).read_bytes()) == mask(data), out
    assert not list((tmp_path / "t").iterdir())


WAITING_PEER = """
import sys, time
sys.path.insert(0, {root!r})
from fast_nvcc.machine.slots import PoolSlots
pool = PoolSlots({pool!r}, {size}, saturated=lambda: False)
while not pool.try_acquire(0.0):  # its first step
    time.sleep(0.01)
print("ready", flush=True)
while not pool.try_acquire(0.5):  # then it waits for another, on a short path
    time.sleep(0.01)
pool.close()
"""


@pytest.mark.nvcc
def test_a_split_compiles_stub_probe_waits_its_turn_and_its_host_compile_runs_beside_cicc(nvcc, tmp_path):
    """A pool of four: one slot held by "another build" (this test), one by a peer compile
    that waits for a second on a short path.  Nothing is idle, so a stub probe that only uses
    idle cores would be dropped and the host compile would wait for cicc's end.  The split
    compile's probe asks by its rank instead: it runs, cc1plus starts on its stub while cicc
    still runs, and the object is nvcc's with --split-compile 2."""
    args = ["-c", "kernels.cu", "-o", "kernels.o", "-arch=sm_90", "--split-compile", "2"]
    plain = _split_reference(nvcc, tmp_path, SPLIT_KERNELS, args)
    pool = tmp_path / "pool"
    pool.mkdir()
    other = SlotLocks(str(pool), 4)
    assert len(other.lock_free(1, skip=())) == 1
    script = WAITING_PEER.format(root=str(Path(__file__).parent.parent.parent), pool=str(pool), size=4)
    peer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline().strip() == "ready"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAST_NVCC_")}
        env.update(FAST_NVCC_POOL_DIR=str(pool), FAST_NVCC_POOL_SIZE="4", TMPDIR=str(tmp_path / "t"),
                   FAST_NVCC_LOG=str(tmp_path / "log.jsonl"), FAST_NVCC_CACHE_DIR=str(tmp_path / "state"))  # fmt: skip
        done = run_tool(fast_nvcc_command(nvcc, args), cwd=tmp_path, env=env, tmpdir=tmp_path / "t")
    finally:
        other.close()
        peer.wait(timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert mask(done.files["kernels.o"]) == mask(plain.files["kernels.o"])
    (record,) = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = {step["tool"]: step for step in record["steps"]}
    probe, cicc, host = steps["cicc stub"], steps["cicc"], steps["cc1plus"]
    assert probe["state"] == "done"
    assert probe["end"] <= host["start"] < cicc["end"], record["steps"]


def test_under_a_jobserver_the_extra_tokens_go_back_every_few_seconds(tmp_path):
    """make ranks no one and starts no job without a token: a widened step gives its extra
    tokens back now and then, so that make gets those it waits for."""
    slots = FreeSlots(free=3)
    slots.short_steps_free = False  # like make's jobserver (and no sharing)
    admission, grants, pins = _grants(tmp_path, slots)
    _running(admission, 1)
    grants.start(1, 8, 100.0)
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 3 and slots.free == 0
    grants._yielded -= grants.YIELD_SECONDS  # two seconds later
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 1 and slots.free == 2  # all back at once
    slots.free -= 1  # make took one
    grants.poll(ours_waiting=None, priority_of=lambda _: 100.0)
    assert len(pins[1]) == 2 and slots.free == 0  # the rest taken again
    grants.close()
