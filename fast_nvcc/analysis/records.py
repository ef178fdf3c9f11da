"""The records every step of the analysis passes on, from the logs' entries to the finished
analysis; and the one error the analysis raises."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FastNvccError

# Zero-cost bookkeeping steps of fast_nvcc (graph/tasks.py's CHECK_MODULE_ID tasks).
BOOKKEEPING_TOOLS = frozenset({"check module_id", "learned stub"})
# Optional work that runs on idle cores only (the host split's stub probes): not work the build
# needs, so not counted in its cpu share (as benchmarks/cutlass_build.py's floor leaves it out).
IDLE_CORE_TOOLS = frozenset({"cicc stub"})


class AnalysisError(FastNvccError):
    """Input or options the analysis cannot use: one line for the user, exit code 2."""


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NinjaEntry:
    start_ms: int
    end_ms: int
    output: str
    command_hash: str


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a FAST_NVCC_LOG record (times in seconds from the start of its run)."""

    tool: str
    kind: str
    arch: str | None
    start: float | None
    end: float | None
    seconds: float
    cpu_seconds: float | None
    state: str
    command: bool = True  # a subprocess (False: fast_nvcc's in-process bookkeeping)
    remote: str | None = None  # --remote sccache: what became of it (remote, sccache-hit, ...)
    over_pool: str | None = None  # started over the machine-wide pool: "first" or "drain"
    memory_wait: float = 0.0  # seconds held back by the memory budget (docs/memory.md)
    memory_stopped: float = 0.0  # seconds stopped while memory ran short (fast_nvcc.machine.pressure)
    yielded: float = 0.0  # seconds stopped to give its core to a split step (fast_nvcc.run.yielding)
    oom_rerun: bool = False  # killed for memory and run again
    guess_failed: str = ""  # a guess of fast_nvcc's that failed here (fast_nvcc.guess.decisions): why
    guess_lost: float = 0.0  # ... and the seconds of work it threw away
    cores: int = 0  # a split step: the most cores its threads held at once
    serial_seconds: float | None = None  # ... and how long its threads ran one at a time (None: an older log)
    cores_idle: float | None = None  # ... and how long the kernel saw its granted cores idle (None: an older log)
    critical: bool = False  # on its compile's critical path, as the run saw it (the steps that ended last)
    wait: float = 0.0  # seconds it was ready before it started (waiting for a core, a slot, memory)
    cores_at: tuple[tuple[float, int], ...] = ()  # a split step: (when, cores held) at each change
    stops: tuple[tuple[float, float], ...] = ()  # (from, to) of each stop (for a split step, for memory)

    @property
    def running(self) -> float:
        """Its seconds less those it was stopped (for a split step, for memory)."""
        return max(0.0, self.seconds - self.yielded - self.memory_stopped)

    @property
    def needed(self) -> bool:
        """Work the build needed: a step that ran, neither bookkeeping nor idle-core work."""
        return self.state != "skipped" and self.tool not in BOOKKEEPING_TOOLS and self.tool not in IDLE_CORE_TOOLS


@dataclass(frozen=True, slots=True)
class OverPool:
    """Steps that ran over the machine-wide pool for one reason (docs/scheduling.md)."""

    steps: int
    seconds: float
    compiles: int


@dataclass(frozen=True, slots=True)
class ToolCosts:
    """One cicc or ptxas of a compile, from its own trace (--device-trace), in seconds."""

    tool: str
    arch: str | None
    phases: tuple[tuple[str, float], ...]  # front_end, optimizer, codegen, ptxas
    templates: tuple[tuple[str, float, int], ...]  # name, seconds, instantiations
    headers: tuple[tuple[str, float], ...]
    optimize: tuple[tuple[str, float], ...]  # function, seconds
    codegen: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class CompileRecord:
    """One line of FAST_NVCC_LOG: one fast_nvcc invocation."""

    time: float  # Unix seconds, taken when fast_nvcc started (before nvcc's dryrun)
    wall_seconds: float  # from the first step's start to the last step's end
    cwd: str
    outputs: tuple[str, ...]  # absolute
    sources: tuple[str, ...]
    exit_code: int | None
    mode: str
    steps: tuple[Step, ...]
    first_step_wait: float | None = None  # seconds it waited for a slot before its first step
    slot_wait: float | None = None  # seconds its ready steps waited for slots, summed
    memory_wait: float | None = None  # the part of slot_wait held back by the memory budget
    pool: int | None = None  # the log's "jobs": its job bound, the usable cores unless -j set it
    device_trace: tuple[str, str] | None = None  # (sidecar file, record id) of --device-trace
    device: tuple[ToolCosts, ...] = ()
    own_cpu: float | None = None  # fast_nvcc's own cpu seconds (start-up, scheduling), beside its steps'
    reason: str = ""  # why it ran nvcc unchanged (mode "passthrough"): a --version, or a graph it could not build


@dataclass(frozen=True, slots=True)
class Job:
    """One command of the build: a ninja edge, or a fast_nvcc invocation when there is no ninja
    log.  Times are seconds from the start of the build's first job."""

    outputs: tuple[str, ...]  # relative to the build directory (ninja's names)
    start: float
    end: float
    record: CompileRecord | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def name(self) -> str:
        return ", ".join(self.outputs)

    @property
    def steps_origin(self) -> float:
        """Where the record's step times start, in seconds from the job's start.

        The record's ``time`` is taken before nvcc's dryrun while its steps count from after
        it, so the job's end is the better anchor: what follows the last step (writing the log,
        exiting) takes milliseconds."""
        if self.record is None:
            return 0.0
        return max(0.0, self.seconds - self.record.wall_seconds)


@dataclass(frozen=True, slots=True)
class Build:
    """The jobs of one build, and where they were read."""

    jobs: tuple[Job, ...]
    ninja_log: str | None = None
    ninja_version: int | None = None
    build_dir: str | None = None
    fast_nvcc_logs: tuple[str, ...] = ()
    index: int = 1  # which build of the log, from 1
    count: int = 1  # how many builds the log holds
    unjoined: int = 0  # fast_nvcc records that are not part of this build
    # What each source's own split steps measured, in every build of the logs read (not only this
    # one): (source, tool, serial share, split steps) (advice.py)
    split_shares: tuple[tuple[str, str, float, int, float | None], ...] = ()  # advice.source_serial_shares
    # The jobs of each build of the logs read that ran split steps, this one too where it did: how
    # far their schedules ended above their floors (advice.schedule_overrun)
    split_builds: tuple[tuple[Job, ...], ...] = ()

    @property
    def records(self) -> tuple[CompileRecord, ...]:
        return tuple(job.record for job in self.jobs if job.record is not None)

    @property
    def own_cpu(self) -> tuple[float, int] | None:
        """What the fast_nvcc processes themselves spent (start-up, scheduling), summed, and over
        how many compiles; None where no record tells it (an older log)."""
        told = [r.own_cpu for r in self.records if r.own_cpu is not None]
        return (sum(told), len(told)) if told else None


@dataclass(frozen=True, slots=True)
class WhatIfRule:
    pattern: str  # fnmatch glob on the output path, relative to the build directory
    seconds: float


@dataclass(frozen=True, slots=True)
class Bound:
    """The wall time of independent jobs on ``slots`` slots (docs/analyze.md)."""

    lower: float  # max(longest, sum / slots): no schedule does better
    upper: float  # (sum - longest) / slots + longest: any greedy schedule does no worse


@dataclass(frozen=True, slots=True)
class ProfileRow:
    time: float  # seconds from the start of the build
    running: int  # jobs running at that instant
    mean: float  # jobs running on average until the next row
    cores: float | None = None  # cores busy on average until the next row (None: no fast_nvcc log)


@dataclass(frozen=True, slots=True)
class LongPole:
    job: Job
    floor_without: float  # the lower bound with this job at 0 s


@dataclass(frozen=True, slots=True)
class WhatIf:
    rules: tuple[tuple[WhatIfRule, int], ...]  # each rule and how many jobs it matched
    job_seconds: float
    bound: Bound


@dataclass(frozen=True, slots=True)
class PhaseTotal:
    kind: str
    arch: str | None
    seconds: float
    cpu_seconds: float
    steps: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """Slot waits across the build (compiles whose log says how long they waited)."""

    compiles: int
    first_step_seconds: float  # summed over compiles
    slot_seconds: float
    worst_first_step: tuple[float, str]  # (seconds, output)
    starved: tuple[tuple[float, str], ...]  # waited for a first step while another ran two or more
    over_pool: tuple[tuple[str, OverPool], ...] = ()  # ("first" | "drain", its steps)
    memory_seconds: float = 0.0  # the part of slot_seconds held back by the memory budget
    memory_steps: int = 0  # steps held back by the memory budget
    memory_compiles: int = 0
    oom_reruns: int = 0  # steps killed for memory and run again
    stopped_steps: int = 0  # steps stopped while memory ran short
    stopped_seconds: float = 0.0
    yielded_steps: int = 0  # steps stopped to give their cores to split steps (fast_nvcc.run.yielding)
    yielded_seconds: float = 0.0


# The device side of the build (--device-trace), summed by device.py.


@dataclass(frozen=True, slots=True)
class TemplateCost:
    side: str  # device (cicc) or host (clang -ftime-trace)
    name: str
    seconds: float
    instantiations: int
    compiles: int


@dataclass(frozen=True, slots=True)
class HeaderCost:
    side: str
    name: str
    seconds: float
    compiles: int


@dataclass(frozen=True, slots=True)
class FunctionCost:
    phase: str  # "optimize" or "codegen"
    tool: str
    arch: str | None
    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class CompileSplit:
    job: str
    arch: str | None
    front_end: float
    optimizer: float
    codegen: float
    ptxas: float


@dataclass(frozen=True, slots=True)
class TemplateWhatIf:
    pattern: str
    matched: tuple[str, ...]  # template names
    seconds: float  # instantiation time taken out of the build
    jobs: int  # compiles that instantiate them
    job_seconds: float
    bound: Bound


@dataclass(frozen=True, slots=True)
class DeviceCosts:
    compiles: int
    templates: tuple[TemplateCost, ...]  # all, costliest first
    headers: tuple[HeaderCost, ...]
    functions: tuple[FunctionCost, ...]
    splits: tuple[CompileSplit, ...]
    what_if: tuple[TemplateWhatIf, ...] = ()


@dataclass(frozen=True, slots=True)
class FailedGuess:
    """Work run twice across the build because one kind of guess failed (fast_nvcc.guess.decisions)."""

    what: str  # "cicc ran twice", "host compile ran twice"
    why: str
    steps: int
    lost: float  # seconds thrown away, summed
    compiles: tuple[tuple[float, str], ...]  # (seconds lost, output), the costliest first


# What to change (advice.py).


@dataclass(frozen=True, slots=True)
class PoleAdvice:
    """One compile that sets the floor, and what split would make of it."""

    name: str
    source: str  # its source's file name, as --split-sources takes it
    start: float
    seconds: float
    cicc: float  # its longest architecture's cicc, seconds
    ptxas: float  # ... and that architecture's ptxas
    host: float  # preprocessing, cudafe++ and the host compile, summed
    split_seconds: float | None  # the compile with split; None: no fast_nvcc log for it
    already_split: bool = False
    chosen: bool = False  # split it: without, it would end after the floor split gives
    # Where its split model's serial shares come from: its own source's split steps ("3 split
    # steps", in any build of the logs), or "": not measured split yet (the build's, Advice.serial)
    measured: str = ""
    elapsed: float = 0.0  # its job's elapsed time (``seconds`` is its own path: advice.own_seconds)


@dataclass(frozen=True, slots=True)
class Advice:
    """What to change (advice.py): the compiles that set the floor, and what split gives."""

    cores: int  # analyze's -j, else the job bound in the log (its "jobs"), else the slots
    work: float  # the build's work: each compile's steps' cpu seconds summed, else its time
    share: float  # work / cores
    floor: float  # the build's floor now
    poles: tuple[PoleAdvice, ...]  # longest first
    split_floor: float | None  # the floor with the poles split; None: nothing to split
    split_extra_cpu: float  # seconds of cpu the split adds
    serial: tuple[tuple[str, float, str], ...]  # (tool, s, "measured" | "learned from N steps")
    halves_floor: float | None  # the floor with the longest compile's source cut in two
    late_start: float | None  # the longest compile started this late, and ended the build
    longest: float = 0.0  # the longest job's seconds: the floor's other term
    # The split builds of the logs: the median of their walls over their floors, and how many
    # (advice.schedule_overrun); None where the logs hold none
    overrun: tuple[float, int] | None = None

    @property
    def expected(self) -> float | None:
        """The advised build's wall: the split floor, as far above it as the split builds of the
        logs ended above theirs; None where nothing is advised or no split build was measured."""
        if self.split_floor is None or self.overrun is None:
            return None
        return self.split_floor * self.overrun[0]

    @property
    def threads(self) -> int:
        """The N to split with: the machine's cores."""
        return self.cores

    @property
    def sources(self) -> tuple[str, ...]:
        """The file names to give --split-sources: the poles split would shorten."""
        return tuple(dict.fromkeys(p.source for p in self.poles if p.chosen))

    @property
    def setting(self) -> str:
        if not self.sources:
            return ""
        return f"FAST_NVCC_SPLIT={self.threads} FAST_NVCC_SPLIT_SOURCES='{','.join(self.sources)}'"


TAIL = 0.1  # idle.py: the share of the wall at its end that counts as the build's tail


@dataclass(frozen=True, slots=True)
class IdleCores:
    """Where a build's cores sat idle (idle.py computes it from the steps' records)."""

    cores: int
    wall: float
    held: float  # core-seconds the steps held
    cpu: float  # ... of which their cpu used
    tail_held: float  # core-seconds held in the last TAIL of the wall
    unused: tuple[tuple[str, float], ...]  # (tool, held - cpu), the most first
    waited_free: float = 0.0  # core-seconds a step stood ready beside a core no step held
    # The split steps' core-seconds held and not used by their own threads, and of them what the
    # kernel counted idle on their granted CPUs (None: no split step's log has it, an older log).
    granted_unused: float = 0.0
    granted_idle: float | None = None

    @property
    def idle(self) -> float:
        return max(0.0, self.cores * self.wall - self.cpu)

    @property
    def not_held(self) -> float:
        return max(0.0, self.cores * self.wall - self.held)

    @property
    def tail_not_held(self) -> float:
        return max(0.0, self.cores * self.wall * TAIL - self.tail_held)

    def describe(self) -> str:
        """One line: the idle core-seconds, where no step held them and where one did."""
        tools = ", ".join(f"{tool} {seconds:.0f}" for tool, seconds in self.unused[:4] if seconds >= 0.5)
        return (f"{self.idle:.0f} core-s (all {self.cores} cores for {self.idle / self.cores:.2f} s): {self.not_held:.0f}"
                f" held by no step ({self.tail_not_held:.0f} of them in the build's last {TAIL:.0%}),"
                f" {max(0.0, self.held - self.cpu):.0f} held by steps that left them idle"
                + (f" ({tools})" if tools else "")
                + f"; steps stood ready beside a core no step held for {self.waited_free:.1f} core-s"
                + ("" if self.granted_idle is None else
                   f"; of the {self.granted_unused:.0f} core-s split steps held beyond their threads' use, the kernel"
                   f" saw {self.granted_idle:.0f} idle (the rest ran other steps)"))  # fmt: skip

    def json(self) -> dict[str, object]:
        return {"core_seconds": round(self.idle, 3), "not_held_core_seconds": round(self.not_held, 3),
                "tail_not_held_core_seconds": round(self.tail_not_held, 3),
                "held_core_seconds": round(self.held, 3), "cpu_seconds": round(self.cpu, 3),
                "unused_by_tool": {tool: round(seconds, 3) for tool, seconds in self.unused},
                "waited_free_core_seconds": round(self.waited_free, 3),
                "granted_unused_core_seconds": round(self.granted_unused, 3),
                "granted_idle_core_seconds": None if self.granted_idle is None else round(self.granted_idle, 3)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Analysis:
    build: Build
    slots: int
    slots_given: bool  # -j was given; else slots is the most jobs seen running at once
    max_concurrency: int
    wall: float
    job_seconds: float
    bound: Bound
    interval: float
    profile: tuple[ProfileRow, ...]
    long_poles: tuple[LongPole, ...]
    what_if: WhatIf | None
    phases: tuple[PhaseTotal, ...]
    arch_phases: tuple[PhaseTotal, ...]
    waiting: Waiting | None = None
    device: DeviceCosts | None = None
    top: int = 10
    failed_guesses: tuple[FailedGuess, ...] = ()
    advice: Advice | None = None  # what to change: the compiles that set the floor, split
    idle: IdleCores | None = None  # where the cores sat idle (idle.py)

    @property
    def parallelism(self) -> float:
        return self.job_seconds / self.wall if self.wall > 0 else 0.0
