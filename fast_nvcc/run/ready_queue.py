"""The tasks of a run whose inputs are all there, best first, and how heavy the compile turns
out to be against its estimates, which raises its rank on the machine-wide pool."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from ..graph.paths import priorities
from ..graph.tasks import Dag, Task
from ..machine.slots import Slots
from ..plan.dryrun import Kind
from .task_records import Record


class ReadyQueue:
    """Ready tasks, the longest remaining path through the compile first, then nvcc's order; and
    the work the compile has left (each task's expected seconds), scaled by its overrun."""

    # A step that runs far past its estimate says its whole compile is heavier than guessed (on a
    # first build the estimates are per-tool defaults): its waiting steps ask the pool with their
    # ranks times that overrun, and its work left is told times that too.  A step counts once it
    # is expected to take OVERRUN_FLOOR seconds or has run that long (a ptxas can run for
    # minutes), against an estimate of at least OVERRUN_FLOOR: short steps' times are noise.
    # (docs/benchmarks.md, "Measurements behind constants in the code": OVERRUN_FLOOR.)
    OVERRUN_FLOOR = 2.0
    # A compile may slow for a heavier one (niceness.py) once its finished steps took at most
    # CREDIBLE times their estimates, never once a long step ran HEAVIER times its estimate.
    CREDIBLE = 1.25
    HEAVIER = 1.5
    RESCALE_EVERY = 0.25  # seconds
    # A started step's rank falls as it runs, where its compile's estimates have shown credible,
    # but never below its followers' path and this share of its own expected seconds: a step that
    # runs past its estimate is not about to end (:meth:`remaining`).
    LEFT = 0.1
    # Within the compile, the steps a long step feeds take longer by as much as it overran (or
    # shorter, as much as it ended early): a cicc's ptxas, cudafe++'s host compile, which the
    # per-tool defaults would rank the other way round (docs/benchmarks.md: FOLLOWERS).
    FOLLOWERS = {Kind.CICC: Kind.PTXAS, Kind.CUDAFE: Kind.HOST_COMPILE}

    def __init__(self, priorities: Sequence[float], *, work: Sequence[float] | None = None) -> None:
        self.priorities = list(priorities)
        self.work = None if work is None else list(work)  # each task's expected seconds: what is left is told to the slots
        self.scale = 1.0  # how many times heavier this compile is than its estimates
        self._own_scale = 1.0  # ... as far as its own long steps have shown
        self._told_scale = 0.0  # what the slots were last told of that
        self._scaled_at = 0.0
        self._done = (0.0, 0.0)  # the finished steps' estimates and times (credible)
        self._left = sum(work) if work is not None else 0.0
        self._heap: list[tuple[float, tuple[int, int], int]] = []
        # The compile's own order of its ready tasks: the remaining paths, once long steps have
        # told what their followers will take (overran); the pool is asked with priorities.
        self._order = list(priorities)
        self._order_work = None if work is None else list(work)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, task: Task) -> None:
        heapq.heappush(self._heap, self._entry(task))

    def _entry(self, task: Task) -> tuple[float, tuple[int, int], int]:
        """``task``'s place: its remaining path in the compile's order first, then nvcc's order."""
        return (-self._order[task.id], task.order, task.id)

    def push_first(self, task: Task) -> None:
        """Ahead of every other ready task (a step run again after the kernel killed it)."""
        heapq.heappush(self._heap, (float("-inf"), task.order, task.id))

    def first(self) -> int:
        """The best ready task's id."""
        return self._heap[0][2]

    def ids(self) -> list[int]:
        """Every ready task's id, best first."""
        return [task_id for task_id, _ in self.with_running(())]

    def with_running(self, running: Sequence[Task]) -> list[tuple[int, bool]]:
        """Every ready task's id, best first, and among them the ``running`` tasks (steps a
        moment long: dispatch.py) at their places: (id, running)."""
        entries = [(entry, False) for entry in self._heap] + [(self._entry(task), True) for task in running]
        return [(entry[2], runs) for entry, runs in sorted(entries)]

    def pop(self) -> None:
        heapq.heappop(self._heap)

    def remove(self, task_id: int) -> bool:
        """Take ``task_id`` out of the queue; was it there?"""
        kept = [entry for entry in self._heap if entry[2] != task_id]
        if len(kept) == len(self._heap):
            return False
        self._heap = kept
        heapq.heapify(kept)
        return True

    def priority(self, task_id: int) -> float:
        """The rank ``task_id`` asks the shared slots with: its remaining path, scaled."""
        return self.priorities[task_id] * self.scale

    def remaining(self, task_id: int, done: float) -> float:
        """The rank of a started task that has done ``done`` seconds of its work (one core's:
        a split step's are the core-seconds its threads ran): its remaining path.  A running
        split step asks for cores, and a step stopped for one (yielding.py) waits, at this, so
        that the stopped step goes on as the split step nears its end (FlashAttention's split
        build, 2026-11-28: ranked by their whole paths, light compiles' ptxas stayed stopped
        22-54 s and ended the build 14 s after the split compiles).  Where the compile's
        estimates have not shown credible (a first build's per-tool defaults, whose scale grows
        with the time a long step has run) its rank stays its whole path."""
        if done <= 0 or not self.credible:
            return self.priority(task_id)
        return self.priority(task_id) - min(done, (1 - self.LEFT) * self.expected(task_id))

    def left(self, task_id: int, done: float) -> float:
        """The seconds a started task has left of its own work, as far as credible estimates
        tell (else all it was expected to take)."""
        if not self.credible:
            return self.expected(task_id)
        return max(0.0, self.expected(task_id) - done)

    def expected(self, task_id: int) -> float:
        """The seconds ``task_id`` is expected to take, scaled (0: no estimates)."""
        return 0.0 if self.work is None else self.work[task_id] * self.scale

    @property
    def credible(self) -> bool:
        """Is the work this compile has left no underestimate, as far as its own steps showed:
        have its finished steps (OVERRUN_FLOOR seconds of estimates or more) taken at most
        CREDIBLE times their estimates, and none of its long steps run HEAVIER times its own?"""
        expected, took = self._done
        return expected >= self.OVERRUN_FLOOR and took <= self.CREDIBLE * expected and self._own_scale < self.HEAVIER

    @property
    def work_left(self) -> float | None:
        """The seconds of work the compile has left, scaled; None without estimates."""
        return None if self.work is None else self._left * self.scale

    def finished(self, task_id: int, *, took: float | None = None) -> None:
        """``task_id`` ended well, after ``took`` seconds of running (None: a cache hit, which
        tells nothing of the compile's weight)."""
        if self.work is not None:
            self._left -= self.work[task_id]
            if took is not None:
                self._done = (self._done[0] + self.work[task_id], self._done[1] + took)

    def overran(self, dag: Dag, task_id: int, took: float,
                weigh: Callable[[Task], float | None] | None = None) -> bool:  # fmt: skip
        """``task_id`` ended after ``took`` seconds: if it is a long step that ran past its
        estimate, the steps it feeds (FOLLOWERS) are expected to take as much longer (as much
        shorter where it ended under it), and the compile's order of its tasks follows (True when
        it changed).  After an overrun, a follower that ``weigh`` measures (a ptxas by its PTX
        with FAST_NVCC_PTX_WEIGHT=1: ptx_weight.py) takes what it says instead, in its
        compile's rank on the pool too."""
        kind = dag.tasks[task_id].step.kind
        if self.work is None or self._order_work is None or kind not in self.FOLLOWERS:
            return False
        expected = self.work[task_id]
        if expected < self.OVERRUN_FLOOR or took == expected:
            return False
        changed = False
        for follower in _reached(dag, task_id, self.FOLLOWERS[kind]):
            seconds = weigh(dag.tasks[follower]) if weigh is not None and took > expected else None
            if seconds is not None:
                self._weigh(follower, seconds)
                changed = True
                continue
            scaled = self.work[follower] * took / expected
            if scaled > self._order_work[follower]:
                self._order_work[follower], changed = scaled, True
            elif took < expected and self._order_work[follower] == self.work[follower]:
                # Under its estimate, as much shorter (unless another overrun raised it): a light
                # source's cudafe++ of 0.9 s against 4.5 put its 0.7 s host compile, by the 5.5 s
                # default, ahead of a ptxas of 22 s, the build's last step (2026-12-02).
                self._order_work[follower], changed = scaled, True
        if changed:
            self._order = priorities(dag, self._order_work)
        return changed

    def _weigh(self, task_id: int, seconds: float) -> None:
        """``task_id``, whose predecessors have all ended but a moment's check, is expected to
        take ``seconds`` on one core: its estimate in the compile's units (at today's scale),
        its rank on the pool and the compile's work left follow (its rank in the compile, once
        :meth:`overran` orders the compile again)."""
        assert self.work is not None and self._order_work is not None
        unscaled = seconds / self.scale
        change = unscaled - self.work[task_id]
        self.work[task_id] = unscaled
        self._left += change
        self.priorities[task_id] += change  # (its predecessors have ended: no other path has it)
        self._order_work[task_id] = unscaled

    def rescale(self, records: Sequence[Record], *, now: float, slots: Slots) -> bool:
        """Look again (every RESCALE_EVERY seconds) at how far this compile's long steps ran
        past their estimates; True when the scale changed.  Until one of its long steps has
        started, a compile knows nothing of itself, and takes the median of what its peers on
        the machine told ``slots``, so that a cicc not yet started is not ranked below peers
        already shown heavy (docs/benchmarks.md: the peers' scale).  A finished step counts
        what one core would have taken (Record.one_core: a split step's cpu, the unit of its
        estimate), a running one its time so far: by its wall a split cicc of 362 s of cpu that
        ran 169 s on up to 7 cores overran as much as one of 190 s of cpu on 3, and its ptxas,
        the build's last step, ranked below ptxas of lighter compiles that had run 50 s
        (TE's seven, docs/benchmarks.md round 27)."""
        if self.work is None:
            return False
        if now - self._scaled_at < self.RESCALE_EVERY:
            return False
        self._scaled_at = now
        own, shown = self._own_scale, False
        for record in records:
            if record.start is None or record.slot is None:
                continue
            expected = self.work[record.task_id]
            took = record.one_core if record.end is not None else now - record.start - record.stopped
            if expected < self.OVERRUN_FLOOR and took < self.OVERRUN_FLOOR:
                continue
            shown = True
            own = max(own, took / max(expected, self.OVERRUN_FLOOR))
        self._own_scale = own
        if shown:
            if own > self._told_scale * 1.05:
                slots.tell_scale(own)
                self._told_scale = own
            scale = own
        else:
            scale = max(own, slots.peer_scale() or 1.0)
        if abs(scale - self.scale) <= self.scale * 0.05:  # not worth a rename on the board
            return False
        self.scale = scale
        return True


def _reached(dag: Dag, start: int, kind: Kind) -> list[int]:
    """The tasks of ``kind`` that ``start`` feeds, directly or through tasks of other kinds
    (a cicc's ptxas comes after its module_id check)."""
    found, seen, todo = [], {start}, list(dag.succs[start])
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if dag.tasks[node].step.kind is kind:
            found.append(node)
        else:
            todo.extend(dag.succs[node])
    return sorted(found)
