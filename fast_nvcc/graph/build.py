"""The dataflow DAG of a plan: which step waits for which.

Edges come from files, in plan order: a step waits for the last writer of every file it reads
(read after write), for the readers of every file it overwrites (write after read), and for the
previous writer (write after write).  Two of nvcc's files need more than their names:

* ``.fatbin.c``: cicc writes its name into the stub it generates (``--include_file_name``), and
  cudafe++ writes the stub's name into the ``.cudafe1.cpp`` (``--stub_file_name``).  Neither reads
  the file, so neither waits; whoever *compiles* those sources reads both through ``#include``,
  so the host compile waits for cicc's stub and for fatbinary.
* ``.module_id``: cudafe++ (CUDA >= 12.8) or the first cicc (older nvcc) generates it and every
  cicc reads it.  A cicc needs nothing else of cudafe++'s: it starts once the file is written
  (:attr:`.tasks.Task.early`), or, where the guess pays, generates its own copy and starts at
  once; a check step compares what each cicc ran with against nvcc's final file
  (:mod:`.module_ids`).  The host compile may start before fatbinary (:mod:`.host_compile`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from ..plan.dryrun import Plan, Step, is_temp, source_outputs
from .host_compile import early_stubs, split_host_compiles
from .module_ids import check_module_ids
from .tasks import Dag, task_for


def build_dag(
    plan: Plan,
    *,
    shell: bool = False,
    speculate: bool | Callable[[Step], bool] = False,
    split_host: bool | Callable[[Step], bool] = False,
    early_stub: bool | Callable[[Step], bool] = True,
    probe_stubs: bool = True,
    urgent_probes: bool = True,
    learned_stubs: bool = True,
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
    ``probe_stubs`` adds the optional stub probes of :func:`early_stubs` (``urgent_probes``: a
    split compile's asks for a slot as a real step does), and ``learned_stubs``
    its learned stubs (the stub the last compile's cicc wrote, :mod:`fast_nvcc.guess.learned_stub`).
    """
    tasks = [task_for(i, step, shell=shell) for i, step in enumerate(plan.steps)]
    preds: list[set[int]] = [set() for _ in tasks]
    problems: list[str] = []

    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    embeds: dict[str, frozenset[str]] = {}
    for task in tasks:
        step = task.step
        closure = _closure(step.reads, embeds)
        tasks[task.id] = task._replace(reads=frozenset(closure))
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
        dag = early_stubs(dag, workdir=workdir or "/tmp", probe=probe_stubs, urgent=urgent_probes,
                          others=_predicate(early_stub), learned=learned_stubs)  # fmt: skip
    return dag


def _predicate(value: bool | Callable[[Step], bool]) -> Callable[[Step], bool]:
    return value if callable(value) else (lambda step: bool(value))


def sequential_dag(plan: Plan, *, shell: bool = False) -> Dag:
    """nvcc's own order, one step after the other: the fallback when the DAG is in doubt."""
    tasks = tuple(task_for(i, step, shell=shell) for i, step in enumerate(plan.steps))
    preds = tuple(frozenset({i - 1}) if i else frozenset() for i in range(len(tasks)))
    return Dag(tasks, preds)


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
