"""What the build tool above this compile is doing: is it running all the jobs its ``-j`` allows?

ninja (and make without a jobserver) keep compiles they have not started out of every
process's sight.  When one is running as many jobs as its ``-j`` allows, it may well be holding
more back, and none of those can start until one of its jobs ends.  That is the one thing a
compile below it can observe: the tool's ``-j`` (its command line, or ninja's default) and its
live children.  ``slots.PoolSlots`` uses it to let the compile nearest its end finish sooner
(docs/scheduling.md, "ninja's queue").
"""

from __future__ import annotations

import functools
import os
import time
from typing import NamedTuple

from .cpus import usable_cpus
from .process_tree import children, command_line, identity, running

# How far up the process tree to look: ninja -> sh -> fast_nvcc, with room for one launcher
# script in between.  Not further: a make far above (a CI job's, say) does not run our compiles.
_DEPTH = 3
_TOOLS = {"ninja": "ninja", "samu": "ninja", "make": "make", "gmake": "make"}
_RECHECK_SECONDS = 0.5


class BuildTool(NamedTuple):
    """The ninja or make that runs this compile, and its job limit."""

    pid: int
    kind: str  # "ninja" or "make"
    jobs: int | None  # None: unbounded (ninja -j0, make -j)


def find_build_tool(pid: int | None = None) -> BuildTool | None:
    """The nearest ninja or make among this process's ancestors, with its job limit."""
    found = identity(pid if pid is not None else os.getpid())
    for _ in range(_DEPTH):
        if found is None or not found[1]:
            return None
        process = found[1]
        found = identity(process)  # (its name, and its parent for the next look up)
        kind = _TOOLS.get(found[0]) if found is not None else None
        if kind is None:
            continue
        argv = command_line(process)
        return None if argv is None else BuildTool(process, kind, job_limit(kind, argv))
    return None


def job_limit(kind: str, argv: list[str]) -> int | None:
    """The ``-j`` of a ninja or make command line (the last one counts): ninja's default when
    it has none, 1 for make.  None where the tool runs without a limit (ninja -j0, make -j)."""
    limit: int | None = _default_jobs() if kind == "ninja" else 1
    args = argv[1:]
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-j", "--jobs"):
            value = args[i + 1] if i + 1 < len(args) else ""
        elif arg.startswith("--jobs="):
            value = arg[len("--jobs=") :]
        elif arg.startswith("-j") and not arg.startswith("--"):
            value = arg[2:]
        else:
            continue
        if value.isdigit():
            limit = int(value) if int(value) > 0 else None
        elif kind == "make":
            limit = None  # a bare -j
    return limit


def _default_jobs() -> int:
    """ninja's GuessParallelism: 2 for one CPU, 3 for two, CPUs + 2 above."""
    cpus = len(usable_cpus())
    return {0: 2, 1: 2, 2: 3}.get(cpus, cpus + 2)


class Saturation:
    """Whether the build tool above runs as many jobs as it may (so it may hold more back).
    Looked up once, then its children counted at most every half second."""

    def __init__(self, tool: BuildTool | None) -> None:
        self.tool = tool
        self._checked = -1.0
        self._saturated = False

    @classmethod
    def of_this_process(cls) -> Saturation:
        """This process's, one for all who ask (the module_id guess, the pool): its build tool
        does not change, and finding it walks the process tree (20 ms)."""
        return _this_process()

    def __call__(self) -> bool:
        tool = self.tool
        if tool is None or tool.jobs is None:
            return False
        now = time.monotonic()
        if now - self._checked < _RECHECK_SECONDS:
            return self._saturated
        self._checked = now
        jobs = children(tool.pid)  # (not psutil's, which reads every process of the machine)
        if jobs is None:
            self.tool = None  # the tool is gone: nothing more will start
            self._saturated = False
            return False
        self._saturated = sum(1 for job in jobs if running(job)) >= tool.jobs
        return self._saturated


@functools.cache
def _this_process() -> Saturation:
    return Saturation(find_build_tool())
