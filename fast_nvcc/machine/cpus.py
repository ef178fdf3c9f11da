"""The CPUs this process may run on: the default ``-j``, the pool's size, ninja's default ``-j``
as the build tool above computes it, and the cores a split step is granted all start here."""

from __future__ import annotations

import os


def usable_cpus() -> frozenset[int]:
    """The CPUs of this process's affinity (taskset, a container's cpuset), not the machine's:
    a compile limited to 4 of 64 cores that ran 64 steps would only make them wait for each
    other.  Every CPU of the machine where the platform has no affinity."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))
