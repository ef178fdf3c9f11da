"""What the history knows of one invocation's sources, and what the invocation adds to it.

Read before the graph is built: each step's expected cost (the ranks, the memory each step
claims) and how this source's guesses went (which guesses the graph takes).  Written after the
run: the steps' measured costs, and each guess's outcome.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ..graph.tasks import Action, Dag, Task
from ..guess import decisions as guesses
from ..guess.host_split import STUB_DIFFERS
from ..guess.module_id import PID, id_template, read_id
from ..machine.buildtool import Saturation
from ..machine.memory import MemoryBudget, budget_from_environment
from ..machine.pool_place import pool_directory
from ..plan.dryrun import Kind, Plan, Step, temp_name
from ..plan.split_option import measured_share, split_threads
from ..run.task_records import Record, State
from ..settings import switch
from .history import ASSEMBLE, Cost, History, Measurement, estimate
from .history_place import history_path

_FREE = Cost(0.0, 0)


class Learned:
    """What the history knows of this compile's sources: its steps' costs, and how its
    guesses went (fast_nvcc.guess.decisions), which decide which guesses the graph takes."""

    __slots__ = ("costs", "history", "memory", "owners", "plan", "saturated")

    def __init__(self, plan: Plan, history: History | None, costs: dict, memory: guesses.Memory,
                 owners: dict[int, str], saturated: Callable[[], bool] = lambda: False) -> None:  # fmt: skip
        self.plan = plan
        self.history = history
        self.costs = costs
        self.memory = memory
        self.owners = owners  # plan step index -> the source it works for
        # Does the build tool above hold compiles back (fast_nvcc.machine.buildtool)?  Then no
        # core is spare for a guessed module_id.
        self.saturated = saturated

    @classmethod
    def load(cls, plan: Plan, sources: Sequence[str], *, env: Mapping[str, str] = os.environ) -> Learned:
        history = History(history_path(env)) if switch(env, "FAST_NVCC_HISTORY") else None
        costs = history.lookup(sources) if history else {}
        memory = history.guesses(sources) if history else guesses.NOTHING_KNOWN
        return cls(plan, history, costs, memory, source_of_steps(plan, sources),
                   lambda: Saturation.of_this_process()())  # looked up only when a guess is weighed

    @classmethod
    def nothing(cls, plan: Plan) -> Learned:
        """No history: every cost and guess from the defaults."""
        return cls(plan, None, {}, guesses.NOTHING_KNOWN, {})

    def close(self) -> None:
        if self.history is not None:
            self.history.close()

    # -- before the run: the guesses the graph takes, the tasks' costs and memory ---------------

    def guess_module_id(self, step: Step) -> bool | str:
        """Make its own module_id (True), wait for cudafe++'s (False), or run on one predicted
        from the last compile (its template: fast_nvcc.graph.module_ids.check_module_ids)."""
        source = self.owners.get(step.index, "")
        predicted = self.memory.predicted_module_id(source, step.arch or "", cwd=os.getcwd())
        if predicted is not None:
            return predicted
        failure = self.memory.failure(source, guesses.MODULE_ID, step.arch or "")
        return guesses.guess_module_id(
            failure,
            host_preprocess=self._compile_steps(step, Kind.PREPROCESS, ""),
            cudafe=self._compile_steps(step, Kind.CUDAFE),
            device_preprocess=self._compile_steps(step, Kind.PREPROCESS, step.arch),
            cicc=self._seconds(step),
            spare_core=not self.saturated(),
        )

    def split_host(self, step: Step) -> bool:
        failure = self.memory.failure(self.owners.get(step.index, ""), guesses.HOST_SPLIT)
        return guesses.guess_host_split(failure, host_compile=self._seconds(step))

    def early_stub(self, step: Step) -> bool:
        failure = self.memory.failure(self.owners.get(step.index, ""), guesses.EARLY_STUB)
        return guesses.guess_host_split(failure, host_compile=self._seconds(step))

    def task_costs(self, dag: Dag) -> list[Cost]:
        """Each task's expected seconds and peak memory."""
        return [task_cost(self.costs, task, self.owners) for task in dag.tasks]

    def split_costs_known(self, dag: Dag) -> bool:
        """Has each of the run's split steps (``-split-compile N``) a cost of its own source's?
        Then the compile's path is known before its steps show it, which ReadyQueue.credible
        cannot tell in time: in learned builds of TE's seven most compiles never showed credible
        (docs/benchmarks.md, round 37).  A guess from other sources' costs (source '' or '*') is
        not its own; a cost learned unsplit is (a step's cpu is its one-core seconds, either way)."""
        split = [t for t in dag.tasks if not t.optional and split_threads(t.step.argv)]
        for task in split:
            source = self.owners.get(task.step.index, "")
            if not source or (source, task.step.tool, task.step.arch or "") not in self.costs:
                return False
        return bool(split)

    def memory_budget(self, dag: Dag, costs: Sequence[Cost], *, env: Mapping[str, str] = os.environ
                      ) -> MemoryBudget | None:  # fmt: skip
        """The machine-wide memory budget (fast_nvcc.machine.memory), with each task's expected
        peak: learned where history knows its tool and architecture, else a peer's or the default."""
        kinds = [("as" if t.action is Action.HOST_BACK else t.step.tool, t.step.arch or "") for t in dag.tasks]
        learned = [
            any(key in self.costs for key in ((self.owners.get(t.step.index, ""), tool, arch), ("", tool, arch),
                                         ("*", tool, "")))  # fmt: skip
            for t, (tool, arch) in zip(dag.tasks, kinds)
        ]
        return budget_from_environment(env, pool_directory(env), peaks=[c.rss_kb * 1024 for c in costs],
                                       kinds=kinds, learned=learned)  # fmt: skip

    # -- after the run: what it measured, and how the guesses went ------------------------------

    def record(self, dag: Dag, records: Sequence[Record], *, cwd: str) -> None:
        if self.history is not None:
            self.history.record(measurements(dag, records, self.owners))
            self.history.record_guesses(outcomes(dag, records, self.owners, cwd=cwd))

    def _seconds(self, step: Step) -> float:
        source = self.owners.get(step.index, "")
        return estimate(self.costs, source=source, tool=step.tool, arch=step.arch or "", kind=step.kind).seconds

    def _compile_steps(self, step: Step, kind: Kind, arch: str | None = None) -> float:
        """The expected seconds of the same compile's step of ``kind`` (and ``arch``: "" for
        the host's, None for any)."""
        source = self.owners.get(step.index, "")
        found = [s for s in self.plan.steps if s.kind is kind and self.owners.get(s.index, "") == source
                 and (arch is None or (s.arch or "") == arch)]  # fmt: skip
        return max((self._seconds(s) for s in found), default=0.0)


def task_cost(known: Mapping, task: Task, owners: Mapping[int, str]) -> Cost:
    """One task's expected seconds and peak memory, from what is ``known`` of its tool."""
    if task.action in (Action.CHECK_MODULE_ID, Action.LEARNED_STUB):
        return _FREE
    step = task.step
    source = owners.get(step.index, "")
    if task.action is Action.HOST_BACK:
        return estimate(known, source=source, tool="as", arch=step.arch or "", kind=step.kind, default=ASSEMBLE)
    return estimate(known, source=source, tool=step.tool, arch=step.arch or "", kind=step.kind)


def source_of_steps(plan: Plan, sources: Sequence[str]) -> dict[int, str]:
    """Which input file each step works for, from the stem nvcc puts in its temp names
    (tmpxft_..-7_kernel.compute_80.cpp1.ii belongs to kernel.cu)."""
    stems = [(os.path.splitext(os.path.basename(s))[0] + ".", s) for s in sources]
    default = sources[0] if len(sources) == 1 else ""
    owners = {}
    for step in plan.steps:
        owner = default
        for key in sorted(step.reads | step.writes):
            parts = temp_name(key)
            match = parts and next((s for stem, s in stems if parts[1].startswith(stem)), None)
            if match:
                owner = match
                break
        owners[step.index] = owner
    return owners


def outcomes(dag: Dag, records: Sequence[Record], owners: Mapping[int, str], *, cwd: str) -> list[guesses.Outcome]:
    """How this compile's guesses went, for the history: a cicc's own module_id (held, or why
    not and what it lost), the host compile's split and its early stub."""
    found = []
    for task, record in zip(dag.tasks, records):
        source, arch = owners.get(task.step.index, ""), task.step.arch or ""
        check = records[task.checked_by] if task.checked_by is not None else None
        if check is not None and record.state is State.DONE and check.state is State.DONE:
            why = record.guess_failed or check.guess_failed
            lost = record.guess_lost + check.guess_lost
            # nvcc's id: one that carries cudafe++'s pid is what the next compile predicts from.
            template = id_template(read_id(os.path.join(cwd, dag.tasks[task.checked_by].module_ids[0])) or b"")
            detail = "" if template is None else guesses.module_id_detail(template, cwd=cwd)
            if task.predicted_module_id is not None:
                found.append(guesses.Outcome(source, guesses.PREDICTED_MODULE_ID, arch, not why, why, lost))
            if task.own_module_id:
                found.append(guesses.Outcome(source, guesses.MODULE_ID, arch, not why, why, lost, detail))
            elif template is not None:  # not guessed, but a guess could never hold
                found.append(guesses.Outcome(source, guesses.MODULE_ID, arch, False, PID, 0.0, detail))
        if task.action is Action.HOST_BACK and record.state is State.DONE:
            if record.split:
                found.append(guesses.Outcome(source, guesses.HOST_SPLIT, "", True))
                if task.stub is not None:
                    found.append(guesses.Outcome(source, guesses.EARLY_STUB, "", True))
            elif record.guess_failed:
                guess = guesses.EARLY_STUB if record.guess_failed == STUB_DIFFERS else guesses.HOST_SPLIT
                found.append(guesses.Outcome(source, guess, "", False, record.guess_failed, record.guess_lost))
    return found


def measurements(dag: Dag, records: Sequence[Record], owners: Mapping[int, str]) -> list[Measurement]:
    # A split host compile: its front's time is the compile's and its back's the assembler's;
    # when it fell back, the back did the whole compile and the front's time means nothing.
    split = {t.front: records[t.id].split for t in dag.tasks if t.action is Action.HOST_BACK}
    found = []
    for task, record in zip(dag.tasks, records):
        # A cache hit's seconds say nothing about what the step costs when it runs, nor do
        # those of a step that went through sccache.
        ran = record.state is State.DONE and not record.cached and not record.reran and record.remote is None
        step = task.step
        tool = step.tool
        if task.action is Action.HOST_FRONT and not split.get(task.id):
            continue
        if task.action is Action.HOST_BACK and record.split:
            tool = "as"
        if ran and task.action in (Action.EXEC, Action.SHELL, Action.HOST_FRONT, Action.HOST_BACK, Action.REMOTE):
            seconds, serial = _one_core(record)
            found.append(Measurement(owners.get(step.index, ""), tool, step.arch or "", seconds,
                                     record.max_rss_kb or 0, serial))  # fmt: skip
    return found


def _one_core(record: Record) -> tuple[float, float | None]:
    """What a step took on one core, and its serial share when it ran split.  A split step's wall
    depends on the cores it was granted (core_grants.py): 161 s on 2-4 cores for a cicc of 281 s
    of cpu, which ranked it below shorter ones on one core.  Its cpu is what one core would take,
    and its seconds of one thread at a time (``serial_seconds``) are the share no core shortens,
    from a step of a second or more (a shorter one keeps the share learned before)."""
    if not record.ran_split:
        return record.one_core, None
    return record.one_core, measured_share(record.serial_seconds, record.cpu_seconds, seconds=record.seconds - record.stopped)
