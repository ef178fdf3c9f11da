"""Which steps are short: expected to take well under a second, so that the scheduler may run
them without a shared slot (:mod:`fast_nvcc.run.dispatch`).

Only the steps that end a compile's chains are candidates: fatbinary, the host compile, ptxas
and nvlink.  Made to wait their turn by rank behind other compiles' long steps, such a step
holds its whole compile back for the length of another's (docs/benchmarks.md, "Measurements
behind constants in the code").
"""

from __future__ import annotations

from collections.abc import Sequence

from ..plan.dryrun import Kind
from .tasks import Dag

SHORT_KINDS = frozenset({Kind.FATBINARY, Kind.HOST_COMPILE, Kind.PTXAS, Kind.NVLINK})

# Steps expected to take less than this (seconds) are short.
SHORT_SECONDS = 0.5


def short_steps(dag: Dag, work: Sequence[float] | None) -> frozenset[int]:
    """The tasks of ``dag`` expected (``work``: each task's seconds) to be short; none
    without estimates.  An optional task is never short: it runs on idle cores only."""
    if work is None:
        return frozenset()
    return frozenset(
        t.id for t in dag.tasks if not t.optional and t.step.kind in SHORT_KINDS and work[t.id] < SHORT_SECONDS
    )
