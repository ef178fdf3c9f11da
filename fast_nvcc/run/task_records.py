"""What happened to each task of a run: the records the scheduler keeps, which the driver,
FAST_NVCC_LOG and the reports read."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..machine.pool_files import Request

# When a split step gave cores back, why ("idle", "own", "rank", "over", "jobserver":
# fast_nvcc.run.core_grants), and for "rank" the pool's waiter it gave way to, where known.
Narrowed = tuple[float, str, "Request | None"]
# (when, why: "jobs" or "slot", the pool's (ahead, free, over) or None, the rank it asked at)
Refused = tuple[float, str, "tuple[int, int, int] | None", float]


class GrantSeen(Protocol):
    """What a split step's cores saw (:class:`fast_nvcc.run.core_grants.Grant`), as its record keeps it."""

    timeline: list[tuple[float, int]]
    serial_seconds: float
    cores_idle: float
    narrowed: list[Narrowed]
    refused: list[Refused]
    longest: bool


class State(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"  # stopped by fast_nvcc after another step failed or on a signal
    SKIPPED = "skipped"  # never started


class Record:
    """What happened to one task."""

    __slots__ = (
        "cached",
        "captures",
        "core_timeline",
        "cores_idle",
        "cpu_seconds",
        "dropped",
        "end",
        "guess_failed",
        "guess_lost",
        "longest",
        "max_rss_kb",
        "memory_evicted",
        "memory_stopped",
        "memory_wait",
        "narrowed",
        "refused",
        "nice",
        "oom_rerun",
        "over_pool",
        "ready",
        "remote",
        "remote_note",
        "reran",
        "returncode",
        "serial_seconds",
        "slot",
        "split",
        "split_note",
        "start",
        "state",
        "stops",
        "task_id",
        "went_on",
        "yielded",
        "yields",
    )

    # A class of its own rather than a dataclass: a dataclass costs each compile ~1 ms to create
    # at import (docs/development.md, the records on a compile's path).
    def __init__(self, task_id: int, state: State = State.SKIPPED, *, start: float | None = None,
                 end: float | None = None, cpu_seconds: float | None = None, max_rss_kb: int | None = None,
                 slot: int | None = None, captures: list[tuple[int, str]] | None = None) -> None:  # fmt: skip
        self.task_id = task_id
        self.state = state
        self.start: float | None = start  # seconds since the run started
        self.end: float | None = end
        self.ready: float | None = None  # when its inputs were all there; start - ready is its wait
        self.returncode: int | None = None
        self.cpu_seconds: float | None = cpu_seconds
        self.max_rss_kb: int | None = max_rss_kb
        self.reran = False  # a module_id check that had to rerun cicc
        # A guess of fast_nvcc's that failed for this task (fast_nvcc.guess.decisions): why, and the
        # seconds of work thrown away (a cicc stopped early and run as printed, or rerun whole).
        self.guess_failed = ""
        self.guess_lost = 0.0
        self.split = False  # a host compile's back task that only had to assemble
        self.split_note = ""  # a host compile's back task: why it compiled as printed instead
        self.cached: bool | None = None  # True: a cache hit; False: a cacheable step that missed
        # Sent to sccache: what became of it (:class:`fast_nvcc.remote.stats.Outcome`).
        self.remote: str | None = None
        self.remote_note = ""  # why it ran here after all
        self.slot: int | None = slot
        # A split step (-split-compile N, fast_nvcc.run.core_grants): (when, how many cores) its threads
        # were held to, at its start and each change.
        self.core_timeline: list[tuple[float, int]] = []
        self.serial_seconds = 0.0  # ... and how long its threads ran one at a time (Grant.serial_seconds)
        self.cores_idle = 0.0  # ... and how long the kernel saw its cores idle (Grant.cores_idle)
        self.narrowed: list[Narrowed] = []  # ... and when and why it gave cores back (Grant.narrowed)
        self.refused: list[Refused] = []  # ... and why it found no core it wanted (Grant.refused)
        self.longest = False  # ... and whether it asked on a core per thread (Grant.longest)
        self.over_pool: str | None = None  # started over the machine-wide pool: "first" or "drain"
        self.nice = 0  # started at a lower CPU priority: its compile had slack (fast_nvcc.run.niceness)
        self.memory_wait = 0.0  # seconds of its wait spent held back by the memory budget
        self.memory_stopped = 0.0  # seconds it was stopped (SIGSTOP) for lack of memory
        # Stopped (SIGSTOP) to give its core to a split step on a longer path (fast_nvcc.run.yielding):
        # how many times, and for how many seconds in all.
        self.yields = 0
        self.yielded = 0.0
        self.stops: list[tuple[float, float]] = []  # (from, to) of each stop, either kind
        # Each time it went on after a stop for a split step: when, why (yielding.why_going_on), its
        # rank, the best ask of the machine's split steps then, and the build's soonest end.
        self.went_on: list[tuple[float, str, float, float | None, float | None]] = []
        self.memory_evicted = False  # stopped, then killed to make room for an older step; run again
        self.oom_rerun = False  # killed for memory (fast_nvcc.machine.memory) and run again first
        self.dropped = False  # an optional task that never started, was stopped, or did not help
        # Captured output: (fd, path) in the order to forward them.
        self.captures: list[tuple[int, str]] = [] if captures is None else captures

    def start_over(self, *, guess_failed: str = "") -> None:
        """The task runs again: what its run so far printed and when it ran are thrown away.

        After a failed guess (``guess_failed``: why) its seconds count as lost and its usage is
        forgotten, since it ran another command.  After a kill for memory it ran the same
        command: the CPU time it spent and the peak it reached stay counted."""
        if guess_failed:
            self.guess_failed = guess_failed
            self.guess_lost += self.seconds
            self.cpu_seconds = self.max_rss_kb = None
            self.serial_seconds = 0.0  # (with its cpu: the two make the serial share learned)
        self.captures.clear()
        self.start = self.end = self.returncode = None
        self.memory_stopped = self.yielded = 0.0  # of the run that counts
        self.yields = 0
        self.stops.clear()
        self.state = State.SKIPPED

    def add_grant(self, grant: GrantSeen) -> None:
        """Its split step ended: what its cores saw (a run again after a failed guess adds its own)."""
        self.core_timeline += grant.timeline
        self.serial_seconds += grant.serial_seconds
        self.cores_idle += grant.cores_idle
        self.narrowed += grant.narrowed
        self.refused += grant.refused
        self.longest = self.longest or grant.longest

    @property
    def cores(self) -> int:
        """A split step: the most cores its threads held at once (0: not one)."""
        return max((n for _, n in self.core_timeline), default=0)

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return self.end - self.start

    def stopped_from(self, since: float, until: float, *, memory: bool = False) -> None:
        """A stop of its run ended: from ``since`` to ``until``, seconds into the run; for lack
        of ``memory``, else for a split step."""
        if memory:
            self.memory_stopped += until - since
        else:
            self.yielded += until - since
        self.stops.append((since, until))

    @property
    def ran_split(self) -> bool:
        """It ran on cores granted it (:mod:`.core_grants`) and its cpu was read."""
        return bool(self.core_timeline and self.cpu_seconds)

    @property
    def one_core(self) -> float:
        """The seconds one core would take for what it did: a split step's cpu (its threads ran
        side by side on the cores granted it, :mod:`.core_grants`), another step's time
        running, its stops left out.  What the history learns (fast_nvcc.learn.learned), and
        what a finished step's overrun is read in (ReadyQueue.rescale)."""
        took = self.seconds - self.stopped
        return self.cpu_seconds if self.ran_split else took

    @property
    def stopped(self) -> float:
        """Seconds of its run it spent stopped: for lack of memory, or for a split step."""
        return self.memory_stopped + self.yielded

    @property
    def waited(self) -> float:
        """Seconds between being ready and starting: waiting for a slot (or for -j)."""
        if self.start is None or self.ready is None:
            return 0.0
        return max(0.0, self.start - self.ready)


class RunResult(NamedTuple):
    """How a run of the graph ended: its exit code, the task that failed, every task's record."""

    returncode: int
    records: tuple[Record, ...]
    failed_task: int | None
    wall_seconds: float
    started_at: float = 0.0  # Unix time the records' start and end offsets count from


class StepFailed(Exception):
    """A task failed the way nvcc would report it."""

    def __init__(self, message: str, returncode: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode
