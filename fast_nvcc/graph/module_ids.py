"""The graph's side of a cicc's module_id: cicc off cudafe++'s path, and a check task after each
cicc (the run's side, the check and the early verdict, is :mod:`fast_nvcc.guess.module_id`)."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..plan.dryrun import Kind, Step
from .tasks import Action, Dag, Task


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
            tasks[task.id] = task._replace(argv=argv, checked_by=check.id, early=early, predicted_module_id=way)
        elif way:
            argv = _with_private_module_id(task.argv, private)
            reads = task.reads - {step.module_id or ""}
            tasks[task.id] = task._replace(argv=argv, checked_by=check.id, reads=reads, own_module_id=True,
                                     early=early)  # fmt: skip
            preds[task.id].discard(writer)
        else:
            tasks[task.id] = task._replace(checked_by=check.id, early=early)
        preds.append({writer, task.id})
        succs.append(set())
        for succ in list(succs[task.id]):
            preds[succ].discard(task.id)
            preds[succ].add(check.id)
            succs[check.id].add(succ)
        succs[task.id] = {check.id}
        succs[writer].add(check.id)
    return Dag(tuple(tasks), tuple(frozenset(p) for p in preds), dag.problems)


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
