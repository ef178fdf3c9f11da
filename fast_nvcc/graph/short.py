"""Which steps are short: expected to take well under a second and to end a compile's chain, so
that the scheduler may run them without a shared slot (:mod:`fast_nvcc.run.dispatch`).

They are a compile's last steps: fatbinary, nvlink and the assembler of a split host compile
(:mod:`.host_compile`'s back).  Made to wait their turn by rank behind other compiles' long
steps, such a step holds its whole compile back for the length of another's (docs/benchmarks.md,
"Measurements behind constants in the code").  A ptxas or a host compile, even one learned
short, takes a slot: a light compile's ptxas and host compile ran side by side over the pool,
beside another compile's long cicc, as a third and fourth process on two cores, and that cicc
got 0.71-0.76 of a core where sccache -t0's got 0.89-0.92 (2 cores, ``moldable_build.py``,
2026-11-29: 0.88-0.89 once they took slots, the build 0.88-0.91 of its wall before).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..plan.dryrun import Kind
from .tasks import Action, Dag, Task

SHORT_KINDS = frozenset({Kind.FATBINARY, Kind.NVLINK})

# Steps expected to take less than this (seconds) are short.
SHORT_SECONDS = 0.5


def short_steps(dag: Dag, work: Sequence[float] | None) -> frozenset[int]:
    """The tasks of ``dag`` expected (``work``: each task's seconds) to be short; none
    without estimates.  An optional task is never short: it runs on idle cores only."""
    if work is None:
        return frozenset()
    return frozenset(t.id for t in dag.tasks if not t.optional and _ends_a_chain(t) and work[t.id] < SHORT_SECONDS)


def _ends_a_chain(task: Task) -> bool:
    return task.step.kind in SHORT_KINDS or task.action is Action.HOST_BACK
