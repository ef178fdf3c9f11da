"""Runs a :class:`~fast_nvcc.graph.tasks.Dag` under a bound: every subprocess of fast_nvcc starts here.

The scheduler knows how to run a graph of tasks, not what the tasks are for.  One run is a
loop of turns, each along a task's way:

* **ready** (:mod:`.readiness`): a task whose inputs are all there joins the ready queue, best
  first: the longest remaining path through the compile (:mod:`.ready_queue`).
* **dispatch** (:mod:`.dispatch`): the ready tasks that the machine has room for start, in that
  order.  At most ``jobs`` commands run at once, and each one beyond the first holds a shared
  slot (make's jobserver or the machine-wide pool, :mod:`fast_nvcc.machine.slots`, which also
  decides which compile of the build gets a free core) and memory to spare (:mod:`.admission`).
  A split step's cores widen and narrow while it runs (:mod:`.core_grants`).
* **launch** (:mod:`.launcher`): what a task does comes from a handler chosen by its action
  (:mod:`.handlers`), run on a thread of its own; its commands are :mod:`.processes`'s.
* **outcome** (:mod:`.outcomes`): as a task ends, it is done, failed, killed, dropped, or run
  again.  On a failure nvcc would have stopped there: tasks after it in nvcc's order are not
  started, and the running ones are killed (their partial outputs removed by
  :func:`fast_nvcc.run.outputs.settle`).  Tasks before it still run to the end, because nvcc
  would have run them and their diagnostics come first; if one of them fails too, it is the
  failure nvcc would have reported.
* **output** (:mod:`.emitter`): each task's stdout and stderr go to files and are forwarded in
  nvcc's order, task after task, as soon as every earlier one has been forwarded; so warnings
  and errors read exactly as nvcc prints them, only a little later.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, BinaryIO

from ..graph.short import short_steps
from ..graph.tasks import Action, Dag, Task
from ..machine.slots import PoolSlots, Slots
from ..settings import switch
from .backoff import Backoff
from .captures import Captures
from .dispatch import MOMENT, Ready, Turn, dispatch
from .early_inputs import EarlyInputs
from .emitter import Emitter
from .handlers import Handler, Internal, RunContext, all_handlers, feature_watches
from .holdings import Holdings, memory_guard
from .launcher import Launcher
from .outcomes import Outcome, outcome, state_at_end
from .processes import Processes
from .ptx_weight import ptxas_seconds
from .readiness import Readiness
from .ready_queue import ReadyQueue
from .task_records import Record, RunResult, State

if TYPE_CHECKING:
    from ..machine.memory import MemoryBudget

# The longest wait between looks at the pool where its compiles wake their waiters (wakeup.py),
# against backoff.py's 80 ms where nothing wakes them (make's jobserver, a run off the main thread).
WOKEN_WAIT = 0.5


class Runner:
    """One run of a graph: the loop of turns, and what it holds while the tasks run.  Handlers
    and features' watches see it as a :class:`~fast_nvcc.run.handlers.RunView`."""

    def __init__(
        self,
        dag: Dag,
        *,
        env: Mapping[str, str],
        cwd: str,
        workdir: str,
        jobs: int,
        priorities: Sequence[float],
        internal: Internal,
        work: Sequence[float] | None = None,
        serial: Sequence[float | None] = (), split_known: bool = False,  # Cost.serial, Learned.split_costs_known
        handlers: Mapping[Action, Handler] | None = None,
        messages: Sequence[tuple[int, str]] = (),
        combine_output: bool = False,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        on_event: Callable[[str, Task, Record], None] | None = None,
        slots: Slots | None = None,
        memory: MemoryBudget | None = None,
        state_dir: str | None = None,
    ) -> None:
        self.dag = dag
        # The tasks as they run now: a task run again after a failed guess is run as printed.
        self.tasks = list(dag.tasks)
        self.records = [Record(task.id) for task in dag.tasks]
        self.handlers = all_handlers(dag, internal, handlers)
        self.messages, self.stdout, self.stderr, self.on_event = messages, stdout, stderr, on_event
        self.captures = Captures(workdir)  # in memory: a full $TMPDIR must not swallow them
        ranks, expected = _optional_last(dag, priorities, work)
        self.ready = ReadyQueue(ranks, work=expected)
        self.processes = Processes(env=env, cwd=cwd, workdir=workdir, combine_output=combine_output,
                                   captures=self.captures)  # fmt: skip
        self.readiness = Readiness(dag, self.tasks, self.records, self.ready, early=EarlyInputs(dag, cwd=cwd),
                                   running=self.processes.runs, now=self._now,
                                   stop_optional=self.processes.kill_optional)  # fmt: skip
        self.watches = feature_watches(dag, cwd=cwd)
        context = RunContext(self, env=dict(env), cwd=cwd, workdir=workdir, state_dir=state_dir, shared={},
                             processes=self.processes, now=self._now, state_at_end=self._state_at_end)  # fmt: skip
        self.launcher = Launcher(context)  # and the run's wakeup.py, which its ends poke
        self.holdings = Holdings(self.tasks, self.records, jobs=jobs, slots=slots or Slots(), memory=memory,
                                 processes=self.processes, env=env, handler_of=self._handler,
                                 priority_of=self.ready.priority, now=self._now, queue=self.ready,
                                 serial=serial, split_known=split_known)  # fmt: skip
        self.slots = self.holdings.slots
        # The steps that start without a shared slot (dispatch.py): short ones (graph/short.py)
        # that run here as commands, where the slots rank their waiters (not make's jobserver).
        self.short = frozenset(t for t in short_steps(dag, work) if self.slots.short_steps_free
                               and self._handler(t).takes_slot and self._handler(t).capacity is None)  # fmt: skip
        # Steps a moment long (dispatch.py): they take no slot, run here, and lead to others.
        self.moments = frozenset(t.id for t in dag.tasks if dag.succs[t.id] and not self._handler(t.id).takes_slot
                                 and self._handler(t.id).capacity is None)  # fmt: skip
        # Running tasks to run again: as what, why, and the files their stopped run may half write.
        self._redo: dict[int, tuple[Task, str, tuple[str, ...]]] = {}
        self._failed: int | None = None  # the earliest failure in nvcc's order
        self._t0 = 0.0
        # Waiting for room another compile holds (backoff.py): nothing of ours runs, or some does.
        self._idle, self._blocked = Backoff(0.01, 0.08), Backoff(0.02, 0.08)
        self._changed = False  # a task started or ended since the last wait
        self._weigh = partial(ptxas_seconds, cwd=cwd) if switch(env, "FAST_NVCC_PTX_WEIGHT") else None  # ptx_weight.py

    def close(self) -> None:
        """Free the captured output, once nothing reads the records' captures any more."""
        self.captures.close()

    # -- what handlers and watches see of the run (handlers.RunView) -----------------------

    def record(self, task_id: int) -> Record:
        return self.records[task_id]

    def running(self, task_id: int) -> bool:
        return self.processes.runs(task_id)

    def step_pids(self) -> dict[int, int]:
        return self.processes.step_pids()

    def redo(self, task_id: int, as_task: Task, *, why: str, half_written: Sequence[str] = ()) -> None:
        """Run ``task_id`` as ``as_task`` instead: a guess of ours proved wrong
        (fast_nvcc.guess.module_id).  A running one is stopped, its slot given back, and run again;
        one that has not started yet is changed before it starts.  Either waits for what
        ``as_task`` needs (its early file).  (On the loop's thread.)"""
        record = self.records[task_id]
        if self.processes.runs(task_id):
            self._redo[task_id] = (as_task, why, tuple(half_written))
            self.processes.cancel(task_id)
        elif record.start is None:
            record.guess_failed = why
            self.readiness.replace(as_task, queued=self.ready.remove(task_id))

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        self._t0 = time.monotonic()
        started_at = time.time()
        self.readiness.begin()
        if self.ready.work_left is not None:
            self.slots.left(self.ready.work_left)
        emitter = Emitter(self.tasks, self.records, self.messages, stdout=self.stdout, stderr=self.stderr)
        guard = memory_guard(self.holdings)
        if self.launcher.wakeup.start(signals=isinstance(self.slots, PoolSlots)):  # the pool wakes waiters
            self._idle.most = self._blocked.most = WOKEN_WAIT
        try:
            while self._turn(emitter):
                pass
        except BaseException:
            self.processes.kill_after(None)
            raise
        finally:
            if guard is not None:
                guard.close()
            self.launcher.join()
            self.launcher.wakeup.close()
            self.holdings.close()
            self.processes.close()
        emitter.forward(upto=self._failed_order, final=self._failed is None)
        returncode = 0 if self._failed is None else self.records[self._failed].returncode or 1
        return RunResult(returncode=returncode, records=tuple(self.records), failed_task=self._failed,
                         wall_seconds=time.monotonic() - self._t0, started_at=started_at)  # fmt: skip

    def _turn(self, emitter: Emitter) -> bool:
        """Look at what changed, start what may start, share the slots, handle one end; False
        once nothing runs and nothing is ready."""
        self._look()
        turn = self._dispatch()
        self.holdings.share(turn)
        changed, self._changed = self._changed or bool(turn.start), False
        if not self.processes.running:
            if not self.ready:
                return False
            self.launcher.wakeup.wait(self._idle.wait(changed=changed))  # nothing of ours runs
            return True
        watching = self.readiness.early or any(w.urgent(self) for w in self.watches if w)  # files appear
        timeout = 0.05 if watching else Holdings.GRANTS_POLL if self.holdings.grants else self.holdings.yield_poll
        if turn.blocked:
            timeout = min(timeout, self._blocked.wait(changed=changed))
        end = self.launcher.next_end(timeout=timeout)
        if end is not None:
            self._changed = True
            if self._ended(*end):
                emitter.forward(upto=self._failed_order)
        return True

    def _look(self) -> None:
        """What changed since the last turn: the compile's scale, early files, the features' watches."""
        if self.ready.rescale(self.records, now=self._now(), slots=self.slots):
            self.slots.left(self.ready.work_left)
        if self.readiness.early:
            self.readiness.poll_early(self.processes.step_pids())
        for watch in self.watches:
            watch.poll(self)

    def _dispatch(self) -> Turn:
        moments = [self.tasks[t] for t in _running_moments(self.moments, self.records, self.processes, self._now())]
        ready = [self._as_ready(task_id, runs) for task_id, runs in self.ready.with_running(moments)]
        turn = dispatch(ready, self.holdings, failed=self._failed_order)
        for task_id in turn.discarded + turn.dropped + turn.start:
            self.ready.remove(task_id)
        for task_id in turn.dropped:
            self.records[task_id].dropped = True
        for task_id in turn.start:
            self._launch(self.tasks[task_id])
        return turn

    def _as_ready(self, task_id: int, running: bool = False) -> Ready:
        task = self.tasks[task_id]
        return Ready(task_id, task.order, short=task_id in self.short, optional=task.idle_only,
                     moment=task_id in self.moments, running=running)  # fmt: skip

    def _launch(self, task: Task) -> None:
        """``task`` took its room (Holdings.take): it starts now."""
        if task.id in self.holdings.paused:  # stopped for a split step: it goes on (yielding.py)
            return self.holdings.resume(task)
        record = self.records[task.id]
        record.start = self._now()
        self.holdings.started(task, work_left=self.ready.work_left if self.ready.credible else None)
        self.processes.begin(task)
        self._notify("start", task, record)
        self.launcher.launch(task, self._handler(task.id))

    def _ended(self, task_id: int, error: BaseException | None) -> bool:
        """A task's handler returned: what it held goes back, and the run goes on as its
        outcome says.  False when it runs again (nothing to tell or forward yet)."""
        killed = self.processes.end(task_id)
        task, record = self.tasks[task_id], self.records[task_id]
        self.holdings.give_back(task)
        if error is not None:
            raise error
        redo = self._redo.pop(task_id, None)
        what = outcome(record.state, killed=killed, redo=redo is not None, oom_rerun=record.oom_rerun,
                       optional=task.optional)  # fmt: skip
        if what is Outcome.AGAIN:
            assert redo is not None
            self._run_again(*redo)
            return False
        if what is Outcome.FIRST:
            record.start_over()
            record.ready = self._now()
            self.ready.push_first(task)
            return False
        if what is Outcome.DROPPED:
            record.state, record.dropped = State.DONE, True
        elif what is Outcome.KILLED:
            record.state = State.KILLED
        if what in (Outcome.DONE, Outcome.DROPPED):
            self._done(task_id, record)
        elif self._failed is None or task.order < self.tasks[self._failed].order:
            self._failed = task_id
            self.processes.kill_after(task.order)
        self._notify("end", task, record)
        return True

    def _done(self, task_id: int, record: Record) -> None:
        """``task_id`` ended well: the compile has that much less work, and its successors go."""
        if self.ready.work_left is not None:
            self.ready.finished(task_id, took=None if record.cached else record.one_core)
            self.slots.left(self.ready.work_left)
            if not record.cached:
                self.ready.overran(self.dag, task_id, record.one_core, weigh=self._weigh)
        self.readiness.ended_well(task_id)

    def _run_again(self, task: Task, why: str, half_written: tuple[str, ...]) -> None:
        for path in half_written:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.processes.cwd, path))
        self.records[task.id].start_over(guess_failed=why)
        self.readiness.replace(task, queued=True)

    def _state_at_end(self, task: Task, returncode: int) -> State | None:
        """(On the task's thread.)  A task to run again (redo) or killed by the kernel for
        memory and given one more run (fast_nvcc.machine.memory) gets no state yet."""
        runs_again = task.id in self._redo or (returncode != 0 and self.holdings.killed_for_memory(task, returncode))
        return state_at_end(returncode, runs_again=runs_again)

    @property
    def _failed_order(self) -> tuple[int, int, int] | None:
        return None if self._failed is None else self.tasks[self._failed].order

    def _handler(self, task_id: int) -> Handler:
        return self.handlers[self.tasks[task_id].action]

    def _notify(self, what: str, task: Task, record: Record) -> None:
        if self.on_event is not None:
            self.on_event(what, task, record)

    def _now(self) -> float:
        return time.monotonic() - self._t0


def _running_moments(moments: frozenset[int], records: Sequence[Record], processes: Processes, now: float) -> list[int]:
    """The steps a moment long that run now, started at most MOMENT seconds ago."""
    return [t for t in moments if processes.runs(t) and now - (records[t].start or now) <= MOMENT]


def _optional_last(dag: Dag, priorities: Sequence[float],
                   work: Sequence[float] | None) -> tuple[list[float], list[float] | None]:  # fmt: skip
    """The ranks and the work of ``dag``'s tasks, where an optional task counts as no work, and
    ranks below everything (it only uses idle cores) unless it is urgent: then just before the
    step it stands in for (a stub probe before its cicc: the probe is that cicc's front end
    alone, and lets the host compile run beside the cicc)."""
    priorities, work = list(priorities), None if work is None else list(work)
    for task in dag.tasks:
        if task.optional:
            if task.idle_only:
                priorities[task.id] = 0.0
            else:  # (only optional tasks change here: their peers' ranks are as given)
                peers = [priorities[t.id] for t in dag.tasks if t.step is task.step and not t.optional]
                priorities[task.id] = max([priorities[task.id], *peers]) + 0.001
            if work is not None:
                work[task.id] = 0.0
    return priorities, work
