"""The graph's side of the host compile split around fatbinary, and of its early stub (the run's
side, the two tasks and the stub probe, is :mod:`fast_nvcc.guess.host_split`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence

from ..plan.dryrun import TEMP_TAG, Kind, Step
from ..plan.split_option import split_threads
from .tasks import Action, Dag, Task

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
        tasks[writer.id] = writer._replace(argv=tuple(argv))
        front = task._replace(action=Action.HOST_FRONT, fatbin=(path, private), fatbinary=writer.argv)
        back = front._replace(id=len(tasks), action=Action.HOST_BACK, front=task.id)
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
    dag: Dag, *, workdir: str, probe: bool = True, urgent: bool = True,
    others: Callable[[Step], bool] = lambda step: True, learned: bool = True,
) -> Dag:
    """Start each split host compile's cc1plus after whichever cicc ends first, not the last.

    The host compile includes the stub of the last cicc in the plan, which cicc writes only as
    it exits: the compile waits for that architecture (a minute for a CUTLASS kernel at
    sm_90a) though every cicc writes a stub.  Their stubs differ only in what gcc makes no
    code of (:func:`fast_nvcc.guess.stubs.stub_holds`; the stub's name reaches no other output
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
    anything or its front has started anyway.  Where the last cicc is a split step
    (``--split-compile``: the user named it a long pole) and ``urgent``, the probe is *urgent*:
    it waits its turn for a slot as a real step would, so that on a machine with no idle core
    the host compile still runs beside the long cicc rather than after it (TE's
    ``gelu_grouped.cu``: a 94 s cc1plus that started when its 335 s cicc ended).  Its price is
    a second front end: about 1 s for TE's, 41 s of a 64 s cicc for CUTLASS's example 55 at
    sm_90a (docs/benchmarks.md).

    With ``learned``, a *learned stub* task joins the group too, also where the compile has one
    cicc: it waits for cudafe++ and the last cicc's input only, and writes the stub the last
    compile's cicc wrote, if what they read is the same (:mod:`fast_nvcc.guess.learned_stub`).

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
        found = _stub_writers(dag, front, ciccs, waits_for=preds[front.id], alone=learned)
        if found is None:
            continue
        last, siblings = found
        cudafe = _cudafe_of(dag, front) if learned else None
        learned_argv = None if cudafe is None else _learned_stub_argv(cudafe, last, workdir)
        if not others(front.step):
            # their stubs are known not to do: the probe's or the last one's
            siblings, learned_argv = [], None
        private = os.path.join(workdir, f"{last.step.index}.stub.c")
        seeds = _seeds(last, siblings, private=private)
        if seeds is None:
            continue
        probe_argv = None
        if probe and not last.step.redirects:
            probe_argv = _stub_probe_argv(_with_stub(last.argv, private), workdir, last.step.index)
        if probe_argv is None and not siblings and learned_argv is None:
            continue  # nothing to start from before the last cicc
        _write_stub_privately(tasks, last, private)
        if learned_argv is not None:
            learned_id = _add_learned_stub(tasks, preds, succs, front=front, last=last, cudafe=cudafe, argv=learned_argv)
            # Right after the last cicc's own: what that cicc wrote last time, for the same input.
            seeds = (seeds[0], (learned_id, learned_argv[-1])) + seeds[1:]
        if probe_argv is not None:
            probe_id = _add_stub_probe(tasks, preds, succs, last=last, argv=probe_argv,
                                       urgent=urgent and split_threads(last.argv) is not None)  # fmt: skip
            # The probe's stub is the last cicc's own: the front takes it before any other.
            seeds = ((probe_id, stub_path(probe_argv)),) + seeds
        stub = (stub_path(last.argv), private, seeds)
        _start_on_any_stub(tasks, preds, succs, front=front.id, back=back.id, stub=stub, last_done=_done(last))
    return Dag(tuple(tasks), tuple(frozenset(p) for p in preds), dag.problems)


def _stub_writers(dag: Dag, front: Task, ciccs: Sequence[Task], *, waits_for: set[int], alone: bool = False
                  ) -> tuple[Task, list[Task]] | None:  # fmt: skip
    """The cicc whose stub a split host compile's ``front`` reads (the last of its compile) and
    the compile's other ciccs; None where the front could not start from another's stub
    (``alone``: a learned stub may stand in for a compile's only cicc)."""
    stubs = [key for key in front.reads if any(key in t.step.writes for t in ciccs)]
    if len(stubs) != 1:
        return None
    last = next(t for t in ciccs if stubs[0] in t.step.writes)
    # The same compile's other ciccs: those whose stub names the same .fatbin.c.
    fatbin_c = _word_after(last.argv, "--include_file_name")
    siblings = [t for t in ciccs if t.id != last.id and fatbin_c is not None
                and _word_after(t.argv, "--include_file_name") == fatbin_c]  # fmt: skip
    if not siblings and not alone:
        return None
    if (front.reads & last.step.writes) != {stubs[0]}:
        return None
    if sum(stubs[0] in t.reads for t in dag.tasks) != 2:  # the front and the back alone
        return None
    if _done(last) not in waits_for:
        return None
    return last, siblings


def _seeds(last: Task, siblings: Sequence[Task], *, private: str) -> tuple[tuple[int, str], ...] | None:
    """The tasks whose end gives a stub the front may start from, each with the stub's path: the
    last cicc's own first (written to ``private``; when its check is done too), then the others'.
    None where a stub's name is not plain, or two stubs share one."""
    seeds = ((_done(last), private),) + tuple(sorted((_done(t), stub_path(t.argv)) for t in siblings))
    names = [stub_path(last.argv), *(path for _, path in seeds)]
    if not all(_plain_name(name) for name in names) or len(set(names)) != len(names):
        return None
    return seeds


def _write_stub_privately(tasks: list[Task], last: Task, private: str) -> None:
    """The last cicc, and the rerun of its module_id check, write their stub to ``private``."""
    tasks[last.id] = last._replace(argv=_with_stub(last.argv, private))
    if last.checked_by is not None:
        check = tasks[last.checked_by]
        tasks[check.id] = check._replace(rerun=_with_stub(check.rerun, private))


def _add_stub_probe(tasks: list[Task], preds: list[set[int]], succs: list[set[int]], *, last: Task,
                    argv: tuple[str, ...], urgent: bool) -> int:  # fmt: skip
    """The stub probe of ``last`` as a new optional task, waiting for what ``last`` waits for."""
    # It reads what the last cicc reads: nvcc's module_id too, unless that one guesses.
    early = None if last.early is None else (last.early[0], last.early[1], None)
    probe = Task(id=len(tasks), step=last.step, action=Action.STUB_PROBE, argv=argv, reads=last.reads,
                 optional=True, urgent=urgent, early=early)  # fmt: skip
    tasks.append(probe)
    preds.append(set(preds[last.id]))
    succs.append(set())
    for pred in preds[probe.id]:
        succs[pred].add(probe.id)
    return probe.id


def _cudafe_of(dag: Dag, front: Task) -> Task | None:
    """The cudafe++ that writes what the host compile's ``front`` reads (None unless one)."""
    cudafe = [t for t in dag.tasks if t.step.kind is Kind.CUDAFE and t.step.writes & front.reads]
    return cudafe[0] if len(cudafe) == 1 else None


def _learned_stub_argv(cudafe: Task, last: Task, workdir: str) -> tuple[str, ...] | None:
    """The learned stub task's arguments: the key of its compile, the ``.cudafe1.cpp`` the host
    compile reads, the ``.cpp1.ii`` the last cicc reads, the module_id file, and where it writes
    the stub; None where ``cudafe`` (cudafe++) does not name them all."""
    argv = cudafe.argv
    source, host_side = _word_after(argv, "--orig_src_path_name"), _word_after(argv, "--gen_c_file_name")
    module_id = _word_after(argv, "--module_id_file_name") or _word_after(last.step.argv, "--module_id_file_name")
    inputs = [word for word in last.step.argv[1:] if word.endswith(".ii")]
    if source is None or host_side is None or module_id is None or len(inputs) != 1:
        return None
    key = masked_key(source, last.step.text)  # the stub is cicc's: the host compile's flags do not reach it
    return (key, host_side, inputs[0], module_id, os.path.join(workdir, f"{last.step.index}.learned.stub.c"))


_TEMP_PATH = re.compile(r"[^\s\"'=]*" + TEMP_TAG.pattern)  # with its directory


def masked_key(*texts: str) -> str:
    """The commands of a compile as they are run after run: their temp names masked."""
    return "\0".join(_TEMP_PATH.sub("@", text) for text in texts)


def _add_learned_stub(tasks: list[Task], preds: list[set[int]], succs: list[set[int]], *, front: Task, last: Task,
                      cudafe: Task, argv: tuple[str, ...]) -> int:  # fmt: skip
    """The learned stub task: after ``cudafe`` (the .cudafe1.cpp, the module_id) and what the
    last cicc waits for but the ciccs themselves (its .cpp1.ii)."""
    ciccs = {t.id for t in tasks if t.step.kind is Kind.CICC}
    wait = {p for p in preds[last.id] | preds[front.id] if p not in ciccs and tasks[p].action is not Action.CHECK_MODULE_ID}
    task = Task(id=len(tasks), step=front.step, action=Action.LEARNED_STUB, argv=argv)
    tasks.append(task)
    preds.append(wait | {cudafe.id})
    succs.append(set())
    for pred in preds[task.id]:
        succs[pred].add(task.id)
    return task.id


def _start_on_any_stub(tasks: list[Task], preds: list[set[int]], succs: list[set[int]], *, front: int, back: int,
                       stub: tuple[str, str, tuple[tuple[int, str], ...]], last_done: int) -> None:  # fmt: skip
    """The front waits for any one of the stub's seeds, the back for the last cicc too."""
    group = frozenset(done for done, _ in stub[2])
    tasks[front] = tasks[front]._replace(stub=stub, any_of=group)
    tasks[back] = tasks[back]._replace(stub=stub)
    for done in group:
        preds[front].add(done)
        succs[done].add(front)
    preds[back].add(last_done)
    succs[last_done].add(back)


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
