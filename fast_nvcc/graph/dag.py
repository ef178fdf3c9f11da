"""The dataflow DAG of a plan: which step waits for which, and the longest path through it.

Edges come from files, in plan order: a step waits for the last writer of every file it reads
(read after write), for the readers of every file it overwrites (write after read), and for the
previous writer (write after write).  Two of nvcc's files need more than their names:

* ``.fatbin.c``: cicc writes its name into the stub it generates (``--include_file_name``), and
  cudafe++ writes the stub's name into the ``.cudafe1.cpp`` (``--stub_file_name``).  Neither reads
  the file, so neither waits; whoever *compiles* those sources reads both through ``#include``,
  so the host compile waits for cicc's stub and for fatbinary.
* ``.module_id``: cudafe++ (CUDA >= 12.8) or the first cicc (older nvcc) generates it and every
  cicc reads it.  A cicc needs nothing else of cudafe++'s: it starts once the file is written
  (:attr:`Task.early`), or, where the guess pays, generates its own copy and starts at once;
  a check step compares what each cicc ran with against nvcc's final file; see
  :func:`check_module_ids`.

networkx stays inside this module: the scheduler gets a plain :class:`Dag`.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..plan.dryrun import Kind, Plan, Step, is_temp, source_outputs


class Action(enum.Enum):
    EXEC = "exec"  # run argv directly
    SHELL = "shell"  # run the plan line through sh -c, as nvcc does
    DEPFILE = "depfile"  # nvcc's in-process dependency filter
    REMOVE = "remove"  # nvcc's in-process rm
    CHECK_MODULE_ID = "check-module-id"  # ours: compare a speculative module_id with nvcc's
    HOST_FRONT = "host-front"  # ours: the host compile's cc1plus, before fatbinary
    HOST_BACK = "host-back"  # ours: its as, once the real .fatbin.c is there (or the compile)
    STUB_PROBE = "stub-probe"  # ours: the last cicc's front end alone, for its stub (optional)
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
    Action.REMOTE: "fast_nvcc.remote.sccache",
}


@dataclass(frozen=True, slots=True)
class Task:
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
    # Work that only helps when a core is idle (a stub probe): the scheduler starts it only on
    # a slot nothing else wants and drops it once it would delay anything.  Its successors
    # hear of its end only when it did its job.
    optional: bool = False
    # Under -t, nvcc makes every dependency file (and the preprocessing it reads) before its
    # threads start, whatever order its threads print the plan in (exit_codes.before_threads).
    before_threads: bool = False

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
        return self.step.label

    @property
    def order(self) -> tuple[int, int, int]:
        """nvcc's order: its phase, the plan index, then ours within it."""
        within = {Action.CHECK_MODULE_ID: 1, Action.HOST_BACK: 2, Action.STUB_PROBE: 3}.get(self.action, 0)
        return (0 if self.before_threads else 1, self.step.index, within)


@dataclass(frozen=True, slots=True)
class Dag:
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


def build_dag(
    plan: Plan,
    *,
    shell: bool = False,
    speculate: bool | Callable[[Step], bool] = False,
    split_host: bool | Callable[[Step], bool] = False,
    early_stub: bool | Callable[[Step], bool] = True,
    probe_stubs: bool = True,
    workdir: str | None = None,
    exists=os.path.exists,
) -> Dag:
    """The DAG of ``plan``.

    ``shell`` runs every command through ``sh -c`` (the faithful mode); ``speculate`` takes the
    module_id off cicc's critical path (:func:`check_module_ids`; False: every cicc waits for
    cudafe++ to end, as nvcc's plan says; a predicate: which ciccs guess their module_id, the
    others start once nvcc's is written), with private files under ``workdir``;
    ``split_host`` lets the host compile start before fatbinary (:func:`split_host_compiles`;
    a predicate: which host compiles), ``early_stub`` lets it start from another cicc's stub,
    and ``probe_stubs`` adds the optional stub probes of :func:`early_stubs`.
    """
    tasks = [_task_for(i, step, shell=shell) for i, step in enumerate(plan.steps)]
    preds: list[set[int]] = [set() for _ in tasks]
    problems: list[str] = []

    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    embeds: dict[str, frozenset[str]] = {}
    for task in tasks:
        step = task.step
        closure = _closure(step.reads, embeds)
        tasks[task.id] = replace(task, reads=frozenset(closure))
        for key in sorted(closure):
            writer = last_writer.get(key)
            if writer is not None:
                preds[task.id].add(writer)
            elif is_temp(key) and not exists(plan.path_of(key)):
                problems.append(f"step {step.label} reads {key}, which no earlier step writes")
            readers.setdefault(key, []).append(task.id)
        for key in step.writes:
            if key in last_writer:
                preds[task.id].add(last_writer[key])
            preds[task.id].update(r for r in readers.get(key, ()) if r != task.id)
            last_writer[key] = task.id
            readers[key] = []
        for key in source_outputs(step):
            embeds[key] = step.names

    dag = Dag(tuple(tasks), tuple(frozenset(p) for p in preds), tuple(problems))
    if speculate and not problems:
        dag = check_module_ids(dag, workdir=workdir or "/tmp", guess=_predicate(speculate))
    if split_host and not problems:
        dag = split_host_compiles(dag, plan.paths_by_key(), workdir=workdir or "/tmp", which=_predicate(split_host))
        dag = early_stubs(dag, workdir=workdir or "/tmp", probe=probe_stubs, others=_predicate(early_stub))
    return dag


def _predicate(value: bool | Callable[[Step], bool]) -> Callable[[Step], bool]:
    return value if callable(value) else (lambda step: bool(value))


def sequential_dag(plan: Plan, *, shell: bool = False) -> Dag:
    """nvcc's own order, one step after the other: the fallback when the DAG is in doubt."""
    tasks = tuple(_task_for(i, step, shell=shell) for i, step in enumerate(plan.steps))
    preds = tuple(frozenset({i - 1}) if i else frozenset() for i in range(len(tasks)))
    return Dag(tasks, preds)


def check_module_ids(
    dag: Dag, *, workdir: str, guess: Callable[[Step], bool | str] = lambda step: True
) -> Dag:
    """Take cudafe++ off each cicc's path, and check every cicc's module_id against nvcc's.

    cicc waits for cudafe++ (seconds, for template-heavy code) only to read the module_id,
    whose content is a hash of the source path and the translation unit's first external
    definition.  Two ways not to wait for all of cudafe++:

    * The cicc as printed reads only the module_id of cudafe++'s outputs: it is started once
      the file is written and closed (:attr:`Task.early`; nvcc 13.0's cudafe++ writes it as it
      ends, the first cicc of older nvcc after its front end), with nothing guessed.
    * Where ``guess`` says the guess pays (:mod:`fast_nvcc.guess.decisions`), the cicc computes the
      same value itself (``--gen_module_id_file``), writes a private copy and starts at once.
      The value differs for a TU whose first external definition is under ``#ifndef
      __CUDA_ARCH__``, and always for one with none, whose id carries the writer's process id;
      the scheduler then stops that cicc as soon as the ids tell (:mod:`fast_nvcc.guess.module_id`)
      and runs it as printed.
    * Where ``guess`` gives a string, the id of an earlier compile of the source, less the
      process id it ended in: the cicc starts once cudafe++ has started, on that id with
      cudafe++'s pid (:attr:`Task.predicted_module_id`).

    Either way a check task follows the cicc: it compares the module_id the cicc ran with (kept
    in a private file) with nvcc's final one and, when they differ, reruns the cicc exactly as
    nvcc printed it.  Everything downstream of the cicc waits for the check, so the outputs are
    always the ones nvcc would make.
    """
    tasks = list(dag.tasks)
    preds = [set(p) for p in dag.preds]
    succs = [set(s) for s in dag.succs]
    writers = {t.step.module_id: t.id for t in dag.tasks if t.step.generates_module_id}
    for task in dag.tasks:
        step = task.step
        if step.kind is not Kind.CICC or step.generates_module_id or task.action is not Action.EXEC:
            continue
        writer = writers.get(step.module_id or "")
        if writer is None:
            continue
        if not _only_shared_file(dag.tasks[writer].step, step, step.module_id or ""):
            continue
        nvcc_id = _module_id_path(step)
        private = os.path.join(workdir, f"module_id.{step.index}")
        check = Task(
            id=len(tasks),
            step=step,
            action=Action.CHECK_MODULE_ID,
            module_ids=(nvcc_id, private),
            rerun=task.argv,
            reads=frozenset({step.module_id or ""}),
        )
        tasks.append(check)
        early = (writer, nvcc_id, private)
        way = guess(step)
        if isinstance(way, str):
            argv = _with_module_id_file(task.argv, private)
            tasks[task.id] = replace(task, argv=argv, checked_by=check.id, early=early, predicted_module_id=way)
        elif way:
            argv = _with_private_module_id(task.argv, private)
            reads = task.reads - {step.module_id or ""}
            tasks[task.id] = replace(task, argv=argv, checked_by=check.id, reads=reads, own_module_id=True,
                                     early=early)  # fmt: skip
            preds[task.id].discard(writer)
        else:
            tasks[task.id] = replace(task, checked_by=check.id, early=early)
        preds.append({writer, task.id})
        succs.append(set())
        for succ in list(succs[task.id]):
            preds[succ].discard(task.id)
            preds[succ].add(check.id)
            succs[check.id].add(succ)
        succs[task.id] = {check.id}
        succs[writer].add(check.id)
    return Dag(tuple(tasks), tuple(frozenset(p) for p in preds), dag.problems)


def waits_early(dag: Dag, task_id: int) -> bool:
    """Does ``task_id`` wait for its early predecessor's file rather than for its end?"""
    early = dag.tasks[task_id].early
    return early is not None and early[0] in dag.preds[task_id]


# Host options under which more than the marker's line of the assembly may depend on the
# .fatbin.c (debug info describes fatbinData[N]), or under which cc1plus/as are not simply
# run one after the other (LTO, -pipe, -save-temps, a -S or -E compile).
# Dumps and listings that would show the placeholder are out too.
_UNSAFE_PREFIXES = (
    "-g", "-flto", "-save-temps", "--save-temps", "-pipe", "-S", "-E", "-fsyntax-only",
    "-fdump", "-aux-info", "--coverage", "-fprofile", "-ftest-coverage", "-fcallgraph-info",
    "-fopt-info", "-fplugin",
)  # fmt: skip


def can_split(argv: Sequence[str]) -> bool:
    """May this host compile (gcc -c) be split? Only for plain gcc-style compiles."""
    if "-c" not in argv:
        return False
    for word in argv[1:]:
        if word == "-g0":
            continue
        if word.startswith(_UNSAFE_PREFIXES) or word.startswith("-Wa,") and "-g" in word:
            return False
    return True


def split_host_compiles(
    dag: Dag, paths: Mapping[str, str], *, workdir: str, which: Callable[[Step], bool] = lambda step: True
) -> Dag:
    """Run each host compile's cc1plus before fatbinary has written the ``.fatbin.c``.

    The host compile becomes a front task (cc1plus on a placeholder ``.fatbin.c``), which
    waits for everything the compile waited for except fatbinary, and a back task (as, on the
    assembly with the real data put in), which waits for the front and for fatbinary, now
    writing to a private path; see :mod:`fast_nvcc.guess.host_split`.
    """
    tasks = list(dag.tasks)
    preds = [set(p) for p in dag.preds]
    succs = [set(s) for s in dag.succs]
    for task in dag.tasks:
        step = task.step
        if step.kind is not Kind.HOST_COMPILE or task.action is not Action.EXEC:
            continue
        if not can_split(task.argv) or not which(step):
            continue
        fatbins = [key for key in task.reads if key.endswith(".fatbin.c") and key in paths]
        if len(fatbins) != 1:
            continue
        if sum(fatbins[0] in other.reads for other in tasks) != 1:
            continue  # another step reads it too, and would see the placeholder
        path = paths[fatbins[0]]
        writers = [p for p in preds[task.id] if fatbins[0] in tasks[p].step.writes]
        if len(writers) != 1:
            continue
        writer = tasks[writers[0]]
        if writer.step.kind is not Kind.FATBINARY or writer.action is not Action.EXEC:
            continue
        mentions = [i for i, word in enumerate(writer.argv) if path in word]
        if len(mentions) != 1 or writer.argv[mentions[0]].count(path) != 1:
            continue
        if _reachable(succs, writer.id) & (preds[task.id] - {writer.id}):
            continue  # the compile also reads something made after fatbinary
        private = os.path.join(workdir, f"fatbin.{step.index}.c")
        argv = list(writer.argv)
        argv[mentions[0]] = argv[mentions[0]].replace(path, private)
        tasks[writer.id] = replace(writer, argv=tuple(argv))
        front = replace(task, action=Action.HOST_FRONT, fatbin=(path, private), fatbinary=writer.argv)
        back = replace(front, id=len(tasks), action=Action.HOST_BACK, front=task.id)
        tasks[task.id] = front
        tasks.append(back)
        preds.append({task.id, writer.id})
        succs.append(set())
        preds[task.id].discard(writer.id)
        succs[writer.id].discard(task.id)
        succs[writer.id].add(back.id)
        for succ in list(succs[task.id]):
            preds[succ].discard(task.id)
            preds[succ].add(back.id)
            succs[back.id].add(succ)
        succs[task.id] = {back.id}
    return Dag(tuple(tasks), tuple(frozenset(p) for p in preds), dag.problems)


def early_stubs(
    dag: Dag, *, workdir: str, probe: bool = True, others: Callable[[Step], bool] = lambda step: True
) -> Dag:
    """Start each split host compile's cc1plus after whichever cicc ends first, not the last.

    The host compile includes the stub of the last cicc in the plan, which cicc writes only as
    it exits: the compile waits for that architecture (a minute for a CUTLASS kernel at
    sm_90a) though every cicc writes a stub.  Their stubs differ only in what gcc makes no
    code of (:func:`fast_nvcc.guess.host_split._stub_holds`; the stub's name reaches no other output
    of cicc).  So the last cicc writes its stub to a private path, the front waits for any one
    cicc of its compile (``any_of``: the first to end, whichever the schedule ran first) and
    compiles that cicc's stub under the last one's name, and the back puts the real stub in
    place and checks that it holds; when it does not (a kernel that exists for some
    architectures only), the back runs the host compile as nvcc printed it, on the real stub
    (:mod:`fast_nvcc.guess.host_split`).

    The stubs of different architectures often differ (CCCL's kernels are chosen per
    architecture: heavy.cu's eight targets give three kinds of stub), and then only the last
    cicc's stub will do.  With ``probe``, a *stub probe* joins the group: the last cicc's
    command with ``--device-syntax-only``, all its outputs private, which runs cicc's front end
    alone and writes the very stub the last cicc will (heavy.cu, sm_120: 6.4 s against the
    whole cicc's 9.6 s, the same bytes).  The probe is optional (:attr:`Task.optional`): it
    starts only on a slot nothing else wants, and is dropped as soon as it would delay
    anything or its front has started anyway.

    Where ``others`` says no for a host compile (its stubs differed last time,
    :mod:`fast_nvcc.guess.decisions`), the front waits for the stub probe or the last cicc only.
    """
    tasks = list(dag.tasks)
    preds = [set(p) for p in dag.preds]
    succs = [set(s) for s in dag.succs]
    ciccs = [t for t in dag.tasks if t.step.kind is Kind.CICC and t.action is Action.EXEC
             and stub_path(t.argv) is not None]  # fmt: skip
    for front in dag.tasks:
        if front.action is not Action.HOST_FRONT:
            continue
        back = next(t for t in dag.tasks if t.action is Action.HOST_BACK and t.front == front.id)
        stubs = [key for key in front.reads if any(key in t.step.writes for t in ciccs)]
        if len(stubs) != 1:
            continue
        last = next(t for t in ciccs if stubs[0] in t.step.writes)
        # The same compile's other ciccs: those whose stub names the same .fatbin.c.
        fatbin_c = _word_after(last.argv, "--include_file_name")
        siblings = [t for t in ciccs if t.id != last.id and fatbin_c is not None
                    and _word_after(t.argv, "--include_file_name") == fatbin_c]  # fmt: skip
        if not siblings:
            continue
        if not others(front.step):
            siblings = []  # their stubs are known not to do: the probe's or the last one's
        if (front.reads & last.step.writes) != {stubs[0]}:
            continue
        if sum(stubs[0] in t.reads for t in dag.tasks) != 2:  # the front and the back alone
            continue
        last_done = _done(last)
        if last_done not in preds[front.id]:
            continue
        real = stub_path(last.argv)
        private = os.path.join(workdir, f"{last.step.index}.stub.c")
        # The last cicc's own stub first (when it is done too), then the others'.
        seeds = ((last_done, private),) + tuple(sorted((_done(t), stub_path(t.argv)) for t in siblings))
        if not all(_plain_name(name) for name in (real, *(path for _, path in seeds))):
            continue
        if len({real, *(path for _, path in seeds)}) != len(seeds) + 1:
            continue
        probe_argv = None
        if probe and not last.step.redirects:
            probe_argv = _stub_probe_argv(_with_stub(last.argv, private), workdir, last.step.index)
        if probe_argv is None and not siblings:
            continue  # nothing to start from before the last cicc
        tasks[last.id] = replace(last, argv=_with_stub(last.argv, private))
        if last.checked_by is not None:
            check = tasks[last.checked_by]
            tasks[check.id] = replace(check, rerun=_with_stub(check.rerun, private))
        if probe_argv is not None:
            # It reads what the last cicc reads: nvcc's module_id too, unless that one guesses.
            early = None if last.early is None else (last.early[0], last.early[1], None)
            probe_task = Task(id=len(tasks), step=last.step, action=Action.STUB_PROBE, argv=probe_argv,
                              reads=last.reads, optional=True, early=early)  # fmt: skip
            tasks.append(probe_task)
            preds.append(set(preds[last.id]))
            succs.append(set())
            for pred in preds[probe_task.id]:
                succs[pred].add(probe_task.id)
            # The probe's stub is the last cicc's own: the front takes it before any other.
            seeds = ((probe_task.id, stub_path(probe_argv)),) + seeds
        stub = (real, private, seeds)
        group = frozenset(done for done, _ in seeds)
        tasks[front.id] = replace(tasks[front.id], stub=stub, any_of=group)
        tasks[back.id] = replace(tasks[back.id], stub=stub)
        for done in group:
            preds[front.id].add(done)
            succs[done].add(front.id)
        preds[back.id].add(last_done)
        succs[last_done].add(back.id)
    return Dag(tuple(tasks), tuple(frozenset(p) for p in preds), dag.problems)


def _done(task: Task) -> int:
    """The task whose end makes a cicc's outputs final: its module_id check, if speculative."""
    return task.checked_by if task.checked_by is not None else task.id


def stub_path(argv: Sequence[str]) -> str | None:
    """The stub a cicc command writes (its ``--stub_file_name``), if it names one."""
    return _word_after(argv, "--stub_file_name")


def _word_after(argv: Sequence[str], option: str) -> str | None:
    try:
        return argv[argv.index(option) + 1]
    except (ValueError, IndexError):
        return None


# cicc's options that name a file it writes, and the probe's private name for each.
_PROBE_OUTPUTS = {"-o": "ptx", "--gen_c_file_name": "cudafe1.c", "--gen_device_file_name": "gpu",
                  "--stub_file_name": "stub.c"}  # fmt: skip
# Options under which cicc may write more than those (traces, timing reports): no probe then.
_PROBE_UNSAFE = ("-fdevice-time-trace", "--fdevice-time-trace", "-time", "--time")


def _stub_probe_argv(argv: Sequence[str], workdir: str, index: int) -> tuple[str, ...] | None:
    """``argv`` (a cicc command) with ``--device-syntax-only`` and every file it writes made
    private; None when it may write something else or names no stub."""
    if "--stub_file_name" not in argv or "-o" not in argv or "--device-syntax-only" in argv:
        return None
    if any(word.startswith(_PROBE_UNSAFE) for word in argv[1:]):
        return None
    outputs = dict(_PROBE_OUTPUTS)
    if "--gen_module_id_file" in argv:
        outputs["--module_id_file_name"] = "module_id"
    probe = [argv[0], "--device-syntax-only"]
    words = iter(argv[1:])
    for word in words:
        probe.append(word)
        if word in outputs:
            value = next(words, None)
            if value is None:
                return None
            probe.append(os.path.join(workdir, f"{index}.probe.{outputs[word]}"))
    return tuple(probe)


def _with_stub(argv: Sequence[str], path: str) -> tuple[str, ...]:
    at = argv.index("--stub_file_name") + 1
    return (*argv[:at], path, *argv[at + 1 :])


def _plain_name(name: str | None) -> bool:
    """A name a line marker spells as it is (no escapes): the stub names itself in one."""
    return bool(name) and name.isprintable() and '"' not in name and "\\" not in name


def _reachable(succs: Sequence[set[int]], start: int) -> set[int]:
    seen: set[int] = set()
    stack = [start]
    while stack:
        for succ in succs[stack.pop()]:
            if succ not in seen:
                seen.add(succ)
                stack.append(succ)
    return seen


def topological_order(dag: Dag) -> list[int]:
    """The tasks in an order that respects every edge; ValueError on a cycle.

    Kahn's algorithm rather than networkx on purpose: this runs on every compile, and importing
    networkx costs about 0.1 s, a tenth of a small compile (measured on the 2-core machine).
    """
    waiting = [len(p) for p in dag.preds]
    succs = dag.succs
    ready = [t.id for t in dag.tasks if not waiting[t.id]]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for succ in succs[node]:
            waiting[succ] -= 1
            if not waiting[succ]:
                ready.append(succ)
    if len(order) != len(dag.tasks):
        raise ValueError("the plan's dependency graph has a cycle")
    return order


def priorities(dag: Dag, costs: Sequence[float]) -> list[float]:
    """For each task, the length of the longest path from its start to the end of the build.

    A member of an ``any_of`` group does not count the group's task: that task needs one
    member, not each.  Counted, the early stub's front put its cost on every cicc of its
    compile, so each cicc ranked above the compile's host chain (preprocessing, cudafe++,
    cc1plus), which on a first build on 2 cores then ran last, one core idle (CUTLASS's
    48_hopper example: cudafe++ 15 s and cc1plus 13 s after its sm_80 cicc)."""
    succs = dag.succs
    tasks = dag.tasks
    result = [0.0] * len(tasks)
    for node in reversed(topological_order(dag)):
        after = (result[s] for s in succs[node] if node not in tasks[s].any_of)
        result[node] = costs[node] + max(after, default=0.0)
    return result


def critical_path(dag: Dag, durations: Sequence[float]) -> list[int]:
    """The chain of tasks whose durations add up to the longest path through the DAG.

    The same one pass as :func:`priorities`, then the heaviest chain followed from its start;
    the tests check it against networkx's dag_longest_path, which would cost this hot path
    (FAST_NVCC_LOG is written for every compile of a build) the import of networkx.
    """
    if not dag.tasks:
        return []
    if any(task.any_of for task in dag.tasks):
        return _earliest_finish_path(dag, durations)
    remaining = priorities(dag, durations)
    succs = dag.succs
    node = max(range(len(dag.tasks)), key=lambda n: (remaining[n], -n))
    path = [node]
    while succs[node]:
        node = max(succs[node], key=lambda n: (remaining[n], -n))
        path.append(node)
    return path


def _earliest_finish_path(dag: Dag, durations: Sequence[float]) -> list[int]:
    """The critical path where a task may wait for only one of a group of predecessors (the
    one that ends first): each task starts when its last needed predecessor ends."""
    finish = [0.0] * len(dag.tasks)
    via: list[int | None] = [None] * len(dag.tasks)
    for node in topological_order(dag):
        task = dag.tasks[node]
        needed = [p for p in dag.preds[node] if p not in task.any_of]
        if task.any_of:
            needed.append(min(task.any_of, key=lambda p: (finish[p], p)))
        start, via[node] = max(((finish[p], p) for p in needed), default=(0.0, None))
        finish[node] = start + durations[node]
    node = max(range(len(dag.tasks)), key=lambda n: (finish[n], -n))
    path = [node]
    while via[node] is not None:
        node = via[node]
        path.append(node)
    return path[::-1]


def to_networkx(dag: Dag):
    import networkx as nx

    graph = nx.DiGraph()
    for task in dag.tasks:
        graph.add_node(task.id, label=task.label, kind=task.step.kind.value, arch=task.step.arch)
    graph.add_edges_from(dag.edges())
    if not nx.is_directed_acyclic_graph(graph):
        raise ValueError("the plan's dependency graph has a cycle")
    return graph


def _task_for(task_id: int, step: Step, *, shell: bool) -> Task:
    if step.kind is Kind.DEPFILE:
        return Task(task_id, step, Action.DEPFILE)
    if step.kind is Kind.REMOVE:
        return Task(task_id, step, Action.REMOVE, argv=step.argv)
    if shell or step.needs_shell:
        return Task(task_id, step, Action.SHELL)
    return Task(task_id, step, Action.EXEC, argv=step.argv)


def _closure(keys: Iterable[str], embeds: Mapping[str, frozenset[str]]) -> set[str]:
    """``keys`` plus every file they #include through names, transitively."""
    result = set(keys)
    todo = list(result)
    while todo:
        for named in embeds.get(todo.pop(), ()):
            if named not in result:
                result.add(named)
                todo.append(named)
    return result


def _only_shared_file(writer: Step, reader: Step, module_id: str) -> bool:
    """True when ``reader`` needs nothing from ``writer`` but the module_id."""
    return not ((writer.writes - {module_id}) & reader.reads)


def _module_id_path(step: Step) -> str:
    argv = step.argv
    return argv[argv.index("--module_id_file_name") + 1]


def _with_module_id_file(argv: tuple[str, ...], path: str) -> tuple[str, ...]:
    """``argv`` (a cicc that reads nvcc's module_id) reading ``path`` instead."""
    at = argv.index("--module_id_file_name")
    return (*argv[: at + 1], path, *argv[at + 2 :])


def _with_private_module_id(argv: tuple[str, ...], private: str) -> tuple[str, ...]:
    at = argv.index("--module_id_file_name")
    return (*argv[:at], "--gen_module_id_file", "--module_id_file_name", private, *argv[at + 2 :])
