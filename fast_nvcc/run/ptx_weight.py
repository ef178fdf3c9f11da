"""A ptxas's weight from the PTX its cicc wrote (``FAST_NVCC_PTX_WEIGHT=1``, experimental).

A first build knows a ptxas only by the per-tool default (1.4 s) scaled by its cicc's overrun,
and in TransformerEngine's seven long sources a compile's ptxas took 0.67 to 1.86 times its
cicc's cpu.  The PTX is on disk the moment its cicc ends, and its size, read with one ``stat``,
gives the ptxas' seconds on one core at SECONDS_PER_MIB.  Measured (docs/benchmarks.md, round
32): PTX size spreads as much against ptxas' cpu (2.8-7.6 s per MiB there), and since no ptxas
waited for its start the rank only shares cores among running split ptxas: neutral on its own,
so off by default.  With a split cicc ranked by its stub probe (round 33) the heavy ciccs ended
sooner, but their ptxas then ran beside the light ones' and the ptxas spent 1.20x their cpu:
no faster by wall either.  What it measures stays an experiment's.
"""

from __future__ import annotations

import os

from ..graph.tasks import Task
from ..plan.dryrun import Kind

# ptxas' cpu per MiB of PTX (sm_90, TE's seven long sources in four first builds on 16 cores,
# 2026-12-01: 2.8-7.6, the median source's 3.45; docs/benchmarks.md round 32).
SECONDS_PER_MIB = 3.5


def ptxas_seconds(task: Task, *, cwd: str) -> float | None:
    """The seconds on one core that ``task``, a ptxas, is expected to take by the size of the
    PTX it reads; None for another step, or where the PTX is not there to measure."""
    if task.step.kind is not Kind.PTXAS:
        return None
    for path in task.argv[1:]:
        if path.endswith(".ptx") and not path.startswith("-"):
            try:
                size = os.stat(os.path.join(cwd, path)).st_size
            except OSError:
                return None
            return size / (1 << 20) * SECONDS_PER_MIB
    return None
