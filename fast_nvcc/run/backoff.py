"""How long a run that waits for room sleeps before it looks again.

A run whose ready steps wait for a shared slot (another compile holds it) can only poll: the
pool is files, and nothing tells a waiter that a slot came free.  Each look costs about half a
millisecond (the pool's marks, the board, the dispatch), and at a look every 10-20 ms that came
to 18 s of cpu in a 2-core CUTLASS build of four compiles that waited most of their lives (2026-11-26:
the build's cpu 237 s against its steps' 219 s; nvcc -t0's whole build 215 s).  On a full machine
that cpu is taken from the steps.  So the wait doubles each look that changed nothing, from
``first`` up to ``most``, and is ``first`` again as soon as a task of the run starts or ends: a
slot another compile frees is seen at most ``most`` late, while the run's own steps still wake it
at once (their ends come through the launcher's queue).  Where the pool wakes its waiters
(:mod:`.wakeup`), ``most`` is 0.5 s: a look on the clock is then only a fallback.
"""

from __future__ import annotations


class Backoff:
    """The wait between looks that doubles while nothing changes (the module's docstring)."""

    __slots__ = ("_next", "first", "most")

    def __init__(self, first: float, most: float) -> None:
        self.first, self.most = first, most
        self._next = 0.0

    def wait(self, *, changed: bool) -> float:
        """The seconds to wait now; ``changed``: a task started or ended since the last wait."""
        if changed or not self._next:
            self._next = self.first
        wait = self._next
        self._next = min(self.most, self._next * 2)
        return wait
