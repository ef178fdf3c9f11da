"""A compile with slack lets the longest one run: its steps start at a lower CPU priority.

Where the cores are full, Linux shares them equally among the runnable processes, so the
longest compile's step, the build's floor, runs beside the light compiles' steps at a share of
a core. On 2 cores (a long source among 12 light ones, ninja -j3, 2026-11-28,
docs/benchmarks.md) its cicc ran at 0.86-0.88 of a core; sccache 0.16 -t0, whose server runs as
many cicc and ptxas requests as it has cores, gave it 0.89-0.92.

So a step of a compile whose work left (what it posts for the pool's third rule, ``work/``) is
well below the most that another compile of the machine told starts at nice :data:`NICE`: at
most :data:`SLACK_FACTOR` of it and :data:`SLACK_SECONDS` less. That compile can wait: its
steps run when the longest one's cannot use a core. Nice changes no output, and where cores are
idle it changes nothing at all; where they are full a niced step still gets about a quarter of
a shared core (a weight of 335 against 1024).

An unprivileged process cannot undo a nice, and on a first build a compile's work left comes
from per-tool defaults that may be far below the truth. So the caller passes a compile's work
left only once its own finished steps have shown its estimates no underestimate
(:attr:`fast_nvcc.run.ready_queue.ReadyQueue.credible`): a compile's first steps always start
at nice 0. The decision is made per step as it starts (:func:`nice_for`, unit-tested with
made-up values; :meth:`fast_nvcc.run.holdings.Holdings.started` applies it), so a compile that
turns out the longest starts its next steps at nice 0. Only the machine-wide pool knows the
other compiles' work: under make's jobserver every step starts at nice 0. Measured on 2 cores,
three pairs: long.cu's cicc at 0.89-0.91 of a core against 0.86-0.87, the build at 1.15-1.18 of
its chain's cpu against 1.17-1.19. FAST_NVCC_NICE=0 turns it off.
"""

from __future__ import annotations

NICE = 5  # Linux's weight 335 against nice 0's 1024
SLACK_FACTOR = 0.5  # at most this share of the most work left of the machine's compiles ...
SLACK_SECONDS = 5.0  # ... and this much less


def nice_for(mine: float | None, most: float | None) -> int:
    """The nice a step starts at, in a compile with ``mine`` seconds of work left (None: not
    known, or not shown credible), while the compile of the machine with the most told ``most``
    (None: none told)."""
    if mine is None or most is None:
        return 0
    slack = mine <= SLACK_FACTOR * most and most - mine >= SLACK_SECONDS
    return NICE if slack else 0
