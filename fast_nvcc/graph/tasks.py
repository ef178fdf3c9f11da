"""What a graph is made of: its tasks (a plan step and how to run it), the edges between them,
and which module runs each of fast_nvcc's own kinds of task."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import NamedTuple

from ..plan.dryrun import Kind, Step


class Action(enum.Enum):
    EXEC = "exec"  # run argv directly
    SHELL = "shell"  # run the plan line through sh -c, as nvcc does
    DEPFILE = "depfile"  # nvcc's in-process dependency filter
    REMOVE = "remove"  # nvcc's in-process rm
    CHECK_MODULE_ID = "check-module-id"  # ours: compare a speculative module_id with nvcc's
    HOST_FRONT = "host-front"  # ours: the host compile's cc1plus, before fatbinary
    HOST_BACK = "host-back"  # ours: its as, once the real .fatbin.c is there (or the compile)
    STUB_PROBE = "stub-probe"  # ours: the last cicc's front end alone, for its stub (optional)
    LEARNED_STUB = "learned-stub"  # ours: the stub the last compile's cicc wrote, if it holds
    REMOTE = "remote"  # ours: cicc or ptxas through sccache (--remote sccache)


# The kinds of task that run a tool's process (the rest are fast_nvcc's own work in-process):
# what analyze counts as a machine's busy time and where a tool's own trace nests.
RUNS_TOOL = frozenset({"exec", "shell", "host-front", "host-back", "remote", "stub-probe"})


# The module that runs each of our own kinds of task (its ``HANDLERS``); the scheduler runs
# the rest itself and looks these up only for a graph that has them.
HANDLED_BY: dict[Action, str] = {
    Action.CHECK_MODULE_ID: "fast_nvcc.guess.module_id",
    Action.HOST_FRONT: "fast_nvcc.guess.host_split",
    Action.HOST_BACK: "fast_nvcc.guess.host_split",
    Action.STUB_PROBE: "fast_nvcc.guess.host_split",
    Action.LEARNED_STUB: "fast_nvcc.guess.learned_stub",
    Action.REMOTE: "fast_nvcc.remote.sccache",
}


class Task(NamedTuple):
    """What the scheduler runs for a step: the step as printed, or one of fast_nvcc's own
    actions on it (:class:`Action`)."""

    id: int
    step: Step
    action: Action
    argv: tuple[str, ...] = ()
    # CHECK_MODULE_ID: nvcc's module_id file, the copy of what its cicc ran with, and the cicc
    # command to rerun on a mismatch.
    module_ids: tuple[str, str] | None = None
    rerun: tuple[str, ...] = ()
    checked_by: int | None = None  # for a cicc: the id of its module_id check task
    # A cicc run with a module_id of its own making (--gen_module_id_file) rather than nvcc's:
    # a guess, which its check (and fast_nvcc.guess.module_id's early verdict) may prove wrong.
    own_module_id: bool = False
    # A cicc run on a module_id predicted from an earlier compile of its source, whose id
    # carried cudafe++'s process id: that id with the pid of this compile's cudafe++
    # (fast_nvcc.run.early_inputs writes it once cudafe++ has started).  Checked like a guess.
    predicted_module_id: str | None = None
    # A task that needs only one file of a predecessor: (that predecessor's id, the file, where
    # to keep a copy of what the task was started on, or None).  It may start once the file is
    # written and closed, before its writer ends (fast_nvcc.run.early_inputs).
    early: tuple[int, str, str | None] | None = None
    # The files it reads, including those its C inputs #include (the host compile reads the
    # stub and the .fatbin.c through the .cudafe1.cpp); keys as in Step.reads.
    reads: frozenset[str] = frozenset()
    # HOST_FRONT/HOST_BACK: the .fatbin.c path nvcc names and the private path fatbinary
    # writes instead, the fatbinary command (its identity keys the learned placeholder), and
    # for the back task the id of its front.
    fatbin: tuple[str, str] | None = None
    fatbinary: tuple[str, ...] = ()
    front: int | None = None
    # Predecessors of which one suffices (a subset of the task's preds): the front of an early
    # stub may start once any cicc of its compile is done.
    any_of: frozenset[int] = frozenset()
    # HOST_FRONT/HOST_BACK with an early stub (:func:`early_stubs`): the stub path nvcc's last
    # cicc writes and the host compile includes, the private path that cicc writes instead,
    # and per cicc of the compile the task whose end makes its stub final and the stub's path.
    stub: tuple[str, str, tuple[tuple[int, str], ...]] | None = None
    # Work that only helps (a stub probe): its failure fails nothing, and its successors hear
    # of its end only when it did its job.  Unless ``urgent``, it only helps when a core is
    # idle: the scheduler starts it only on a slot nothing else wants and drops it once it
    # would delay anything.
    optional: bool = False
    # An optional task that waits its turn and holds its slot as a real step does: the stub
    # probe of a split compile, whose host compile would otherwise wait for a long cicc's end
    # on a machine with no idle core (graph.host_compile.early_stubs).
    urgent: bool = False
    # Under -t, nvcc makes every dependency file (and the preprocessing it reads) before its
    # threads start, whatever order its threads print the plan in (exit_codes.before_threads).
    before_threads: bool = False

    @property
    def idle_only(self) -> bool:
        """Does it run only on cores nothing else wants (:attr:`optional`, not :attr:`urgent`)?"""
        return self.optional and not self.urgent

    @property
    def label(self) -> str:
        if self.action is Action.CHECK_MODULE_ID:
            return f"{self.step.index} check module_id {self.step.arch or ''}".rstrip()
        if self.action is Action.HOST_FRONT:
            return f"{self.step.label} (cc1plus)"
        if self.action is Action.HOST_BACK:
            return f"{self.step.label} (as)"
        if self.action is Action.STUB_PROBE:
            return f"{self.step.label} (stub only)"
        if self.action is Action.LEARNED_STUB:
            return f"{self.step.label} (learned stub)"
        return self.step.label

    @property
    def order(self) -> tuple[int, int, int]:
        """nvcc's order: its phase, the plan index, then ours within it."""
        within = {Action.CHECK_MODULE_ID: 1, Action.HOST_BACK: 2, Action.STUB_PROBE: 3, Action.LEARNED_STUB: 4}.get(
            self.action, 0)  # fmt: skip
        return (0 if self.before_threads else 1, self.step.index, within)


class Dag(NamedTuple):
    """The tasks of one compile and, for each, the tasks it waits for."""

    tasks: tuple[Task, ...]
    preds: tuple[frozenset[int], ...]
    problems: tuple[str, ...] = ()  # why this DAG cannot be trusted; empty when it can

    @property
    def succs(self) -> tuple[frozenset[int], ...]:
        out: list[set[int]] = [set() for _ in self.tasks]
        for task_id, preds in enumerate(self.preds):
            for pred in preds:
                out[pred].add(task_id)
        return tuple(frozenset(s) for s in out)

    def edges(self) -> Iterable[tuple[int, int]]:
        for task_id, preds in enumerate(self.preds):
            for pred in sorted(preds):
                yield pred, task_id


def waits_early(dag: Dag, task_id: int) -> bool:
    """Does ``task_id`` wait for its early predecessor's file rather than for its end?"""
    early = dag.tasks[task_id].early
    return early is not None and early[0] in dag.preds[task_id]


def task_for(task_id: int, step: Step, *, shell: bool) -> Task:
    if step.kind is Kind.DEPFILE:
        return Task(task_id, step, Action.DEPFILE)
    if step.kind is Kind.REMOVE:
        return Task(task_id, step, Action.REMOVE, argv=step.argv)
    if shell or step.needs_shell:
        return Task(task_id, step, Action.SHELL)
    return Task(task_id, step, Action.EXEC, argv=step.argv)
