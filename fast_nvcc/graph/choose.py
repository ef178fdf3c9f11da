"""Which graph an invocation runs: nvcc's own order, or the DAG with the guesses its sources'
history allows (a cicc's own module_id, the host compile split, its early stub)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from ..plan.dryrun import Plan, Step
from ..settings import stub_probe, switch
from .build import build_dag, sequential_dag
from .tasks import Dag


class Guesses(Protocol):
    """Which guesses pay for a step (fast_nvcc.learn.learned.Learned)."""

    def guess_module_id(self, step: Step) -> bool | str: ...
    def split_host(self, step: Step) -> bool: ...
    def early_stub(self, step: Step) -> bool: ...


def choose_dag(
    plan: Plan,
    guesses: Guesses,
    *,
    workdir: str,
    sequential: bool,
    faithful: bool,
    watched: bool,
    env: Mapping[str, str],
    say: Callable[[str], None],
) -> Dag:
    """The graph to run.  ``faithful`` (--faithful) runs each step's command as nvcc printed it
    and takes no guess.  ``watched``: --save copies the .fatbin.c as fatbinary's output, so the
    host compile does not start before fatbinary (fast_nvcc/guess/host_split.py)."""
    shell = faithful
    if sequential:
        return sequential_dag(plan, shell=shell)
    split = switch(env, "FAST_NVCC_SPLIT_HOST") and not (faithful or watched)
    probes = stub_probe(env)
    dag = build_dag(plan, shell=shell, speculate=not faithful and guesses.guess_module_id,
                    split_host=split and guesses.split_host, early_stub=guesses.early_stub,
                    probe_stubs=probes != "off", urgent_probes=probes != "idle",
                    learned_stubs=switch(env, "FAST_NVCC_LEARNED_STUB"), workdir=workdir)  # fmt: skip
    if dag.problems:
        for problem in dag.problems:
            say(f"running the plan in nvcc's order: {problem}")
        return sequential_dag(plan, shell=shell)
    return dag


def mark_before_threads(dag: Dag, steps: set[int]) -> Dag:
    """Under nvcc's -t, the tasks of the steps nvcc runs before its threads
    (fast_nvcc.plan.exit_codes.before_threads): a failure there ends the compile as nvcc's does."""
    return dag._replace(tasks=tuple(t._replace(before_threads=t.step.index in steps) for t in dag.tasks))
