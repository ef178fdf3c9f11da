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


def idle_seconds() -> dict[int, float] | None:
    """Seconds each CPU has stood idle since boot, as the kernel counts them (``/proc/stat``'s
    idle and iowait of each ``cpuN`` line); None where there is no such file.  A split step's
    cores' idle time between two looks is the difference (core_grants.Grant.cores_idle).
    Not psutil.cpu_times(percpu=True): its list is by position, not CPU number (a CPU offline
    shifts the rest), and a compile's path does not import psutil; this takes 10 us a look."""
    try:
        with open("/proc/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle: dict[int, float] = {}
    for line in text.splitlines():
        if not line.startswith(b"cpu") or line[3:4] == b" ":
            if idle:
                break  # (the cpu lines come first, the machine's own before them)
            continue
        fields = line.split()
        try:
            idle[int(fields[0][3:])] = (int(fields[4]) + int(fields[5])) / tick
        except (IndexError, ValueError):
            continue
    return idle or None
