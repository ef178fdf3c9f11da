"""Where a build's time went: ``fast_nvcc analyze [PATHS...]``.

Reads ninja's build log (``.ninja_log``) and/or fast_nvcc's own log (``FAST_NVCC_LOG``) and
reports the wall time, the sum of job times, the effective parallelism, how many jobs ran over
time, the long poles, a what-if on the wall-time bound, and the time per nvcc phase and per
architecture; optionally a plot and a Chrome trace.  The bound's model is in docs/analyze.md.

The data flows in this order: ``load_build`` (the only reader of files) ->
``parse_ninja_log`` / ``parse_fast_nvcc_log`` -> ``split_builds`` -> ``build_jobs`` ->
``join_records`` -> ``analyze`` -> ``format_text`` / ``format_markdown`` / ``json_report`` /
``write_plot`` / ``write_trace``.  Everything between the reader and the writers is plain
loops over tuples, so a log of 100k entries takes about a second.
"""

from __future__ import annotations

import argparse
import bisect
import fnmatch
import heapq
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict

from .errors import FastNvccError
from .cli import positive_int
from .files import replace_atomically

if TYPE_CHECKING:
    from .reports import TraceEvent

PROG = "fast_nvcc analyze"
FORMATS = ("text", "markdown", "json")
PLOT_FORMATS = ("png", "svg", "pdf")
JSON_SCHEMA_VERSION = 1

# The .ninja_log format, read in ninja's src/build_log.cc (ninja-build/ninja) and its history:
# a header "# ninja log v<N>", then one line per output of each finished edge,
#     start_ms \t end_ms \t mtime \t output \t command_hash
# start and end are milliseconds since that ninja run started ("%d"), and a line is written when
# its edge finishes, so within one run the end times never decrease.
#   v5  (b3d63db1, 2012: the hash in hex; ninja 1.9, PR #1219, made mtime a high-resolution
#        timestamp without a new version)
#   v6  (c266b216, ninja 1.12, PR #2240): the same layout; the bump marks that mtime change and
#        drops ninja's reading of v4
#   v7  (32e7e238, ninja 1.13): the same layout; the command hash is rapidhash, not MurmurHash2
# So v5, v6 and v7 parse alike.  Neither mtime nor the hash's value matters here; equal
# (start, end, hash) marks the outputs of one edge.  ninja skips a last line with no newline
# (an interrupted write), and so do we; a second header can appear after a crash on Windows
# (build_log_test.cc, DuplicateVersionHeader) and is skipped like any '#' line.
NINJA_HEADER = "# ninja log v"
NINJA_VERSIONS = (5, 6, 7)

FAST_NVCC_LOG_VERSIONS = (1,)
# fast_nvcc's log has no build boundaries: compiles with a minute of nothing running between
# them are taken to belong to different builds.
SESSION_GAP_SECONDS = 60.0
# A FAST_NVCC_LOG record joins a ninja job only if its clock agrees with the other joins: the
# delay from ninja starting the job to fast_nvcc starting its clock is Python's start-up, well
# under this; a record from an earlier build of the same object is minutes or days off.
JOIN_TOLERANCE_SECONDS = 10.0
# ninja's millisecond times, truncated, against fast_nvcc's own clock.
CLOCK_SLACK_SECONDS = 0.005
# Zero-cost bookkeeping steps of fast_nvcc (graph.py's CHECK_MODULE_ID tasks).
BOOKKEEPING_TOOLS = frozenset({"check module_id"})


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

    @property
    def records(self) -> tuple[CompileRecord, ...]:
        return tuple(job.record for job in self.jobs if job.record is not None)


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

    @property
    def parallelism(self) -> float:
        return self.job_seconds / self.wall if self.wall > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asks for; the core never sees argparse."""

    paths: tuple[str, ...]
    jobs: int | None = None
    top: int = 10
    interval: float | None = None
    what_if: tuple[WhatIfRule, ...] = ()
    format: str = "text"
    plot: str | None = None
    trace: str | None = None
    build: int = -1


# -- reading the ninja log ---------------------------------------------------------------------


def parse_ninja_version(header: str, *, name: str) -> int:
    if not header.startswith(NINJA_HEADER):
        raise AnalysisError(f"{name}: not a ninja log (no '{NINJA_HEADER}N' header)")
    text = header[len(NINJA_HEADER) :].strip()
    if not text.isdigit():
        raise AnalysisError(f"{name}: unreadable ninja log header {header.strip()!r}")
    version = int(text)
    if version not in NINJA_VERSIONS:
        known = ", ".join(f"v{v}" for v in NINJA_VERSIONS)
        raise AnalysisError(f"{name}: ninja log v{version} is not a format this reads ({known})")
    return version


def parse_ninja_log(
    lines: Iterable[str], *, name: str = ".ninja_log"
) -> tuple[int, list[NinjaEntry]]:
    """The log's version and its entries in file order.  ``lines`` keep their newlines."""
    lines = iter(lines)
    version = parse_ninja_version(next(lines, ""), name=name)
    entries = []
    for number, line in enumerate(lines, start=2):
        if line.startswith("#") or not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t", 4)
        try:
            start, end = int(fields[0]), int(fields[1])
            output, command_hash = fields[3], fields[4]
        except (IndexError, ValueError):
            if not line.endswith("\n"):
                break  # a last line cut short by an interrupted build; ninja skips it too
            raise AnalysisError(
                f"{name}:{number}: not a ninja log entry: {line.strip()[:80]!r}"
            ) from None
        entries.append(NinjaEntry(start, end, output, command_hash))
    return version, entries


def split_builds(entries: Iterable[NinjaEntry]) -> list[list[NinjaEntry]]:
    """The log's builds, oldest first.

    Each ninja run appends its entries with a clock that starts at 0.  As in ninjatracing
    (nico/ninjatracing, ``read_targets``), an end time lower than the previous entry's starts a
    new build; so does an output seen again, since one run builds an output at most once (that
    catches a build whose first edge ends after the previous build's last, and a build appended
    to a recompacted log, whose entries ninja writes in hash-map order).  Within one build each
    output therefore appears once, and it is the newest entry for that output in that build.
    """
    builds: list[list[NinjaEntry]] = []
    current: list[NinjaEntry] = []
    seen: set[str] = set()
    last_end = -1
    for entry in entries:
        if current and (entry.end_ms < last_end or entry.output in seen):
            builds.append(current)
            current, seen = [], set()
        current.append(entry)
        seen.add(entry.output)
        last_end = entry.end_ms
    if current:
        builds.append(current)
    return builds


def build_jobs(entries: Iterable[NinjaEntry]) -> list[Job]:
    """One job per edge: the outputs of one edge share start, end and command hash."""
    edges: dict[tuple[int, int, str], list[str]] = {}
    for entry in entries:
        edges.setdefault((entry.start_ms, entry.end_ms, entry.command_hash), []).append(
            entry.output
        )
    if not edges:
        return []
    origin = min(start for start, _, _ in edges)
    return [
        Job(tuple(outputs), (start - origin) / 1000.0, (end - origin) / 1000.0)
        for (start, end, _), outputs in edges.items()
    ]


# -- reading fast_nvcc's log -------------------------------------------------------------------


def parse_fast_nvcc_log(
    lines: Iterable[str], *, name: str = "FAST_NVCC_LOG"
) -> Iterator[CompileRecord]:
    """The records of a FAST_NVCC_LOG (README.md, "The build log"), in file order."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise AnalysisError(f"{name}:{number}: not a JSON line") from None
        try:
            yield _record_of(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnalysisError(
                f"{name}:{number}: not a FAST_NVCC_LOG record ({_describe(exc)})"
            ) from None


def _record_of(data: dict[str, Any]) -> CompileRecord:
    version = data["version"]
    if version not in FAST_NVCC_LOG_VERSIONS:
        raise ValueError(f"schema version {version!r}, this reads {FAST_NVCC_LOG_VERSIONS}")
    steps = tuple(
        Step(
            tool=str(step["tool"]),
            kind=str(step["kind"]),
            arch=step.get("arch"),
            start=_float_or_none(step.get("start")),
            end=_float_or_none(step.get("end")),
            seconds=float(step["seconds"]),
            cpu_seconds=_float_or_none(step.get("cpu_seconds")),
            state=str(step.get("state", "done")),
        )
        for step in data.get("steps") or ()
    )
    return CompileRecord(
        time=float(data["time"]),
        wall_seconds=float(data["wall_seconds"]),
        cwd=str(data.get("cwd", "")),
        outputs=tuple(str(o) for o in data["outputs"]),
        sources=tuple(str(s) for s in data.get("sources") or ()),
        exit_code=data.get("exit_code"),
        mode=str(data.get("mode", "")),
        steps=steps,
    )


def split_sessions(records: Iterable[CompileRecord]) -> list[list[CompileRecord]]:
    """The builds in a FAST_NVCC_LOG alone, oldest first: a new one after a quiet minute, or when
    an output is compiled again (one build compiles an object once)."""
    sessions: list[list[CompileRecord]] = []
    current: list[CompileRecord] = []
    seen: set[str] = set()
    last_end = -math.inf
    for record in sorted(records, key=lambda r: r.time + r.wall_seconds):
        if current and (
            record.time > last_end + SESSION_GAP_SECONDS or seen.intersection(record.outputs)
        ):
            sessions.append(current)
            current, seen, last_end = [], set(), -math.inf
        current.append(record)
        seen.update(record.outputs)
        last_end = max(last_end, record.time + record.wall_seconds)
    if current:
        sessions.append(current)
    return sessions


def jobs_of_records(records: Sequence[CompileRecord]) -> list[Job]:
    """Without a ninja log, each fast_nvcc invocation is a job, from ``time`` for
    ``wall_seconds`` (which leaves out Python's start-up and nvcc's dryrun)."""
    if not records:
        return []
    origin = min(record.time for record in records)
    return [
        Job(
            _names_of(record),
            record.time - origin,
            record.time - origin + record.wall_seconds,
            record,
        )
        for record in records
    ]


def _names_of(record: CompileRecord) -> tuple[str, ...]:
    paths = record.outputs or record.sources  # a passthrough compile logs no outputs
    return tuple(_relative(path, record.cwd) for path in paths) or ("(nvcc)",)


def _relative(path: str, base: str) -> str:
    if (
        base
        and os.path.isabs(path)
        and (path == base or path.startswith(base.rstrip(os.sep) + os.sep))
    ):
        return os.path.relpath(path, base)
    return path


def join_records(
    jobs: Sequence[Job], records: Iterable[CompileRecord], *, build_dir: str
) -> tuple[list[Job], int]:
    """Attach to each ninja job the fast_nvcc record that compiled its output; also return how
    many records were left over (compiles of other builds, or not run by this ninja).

    Records name absolute outputs and ninja names them relative to the build directory, so the
    join is on the absolute path.  Of several records for one output, the newest is taken, and
    kept only if it fits: it ran no longer than the job, and the gap between ninja starting the
    job and fast_nvcc starting its clock agrees with the other joins (JOIN_TOLERANCE_SECONDS).
    """
    records = list(records)
    newest: dict[str, CompileRecord] = {}
    for record in records:
        for output in record.outputs:
            known = newest.get(output)
            if known is None or record.time >= known.time:
                newest[output] = record
    candidates: dict[int, CompileRecord] = {}
    for index, job in enumerate(jobs):
        for output in job.outputs:
            record = newest.get(os.path.normpath(os.path.join(build_dir, output)))
            if record is not None and record.wall_seconds <= job.seconds + CLOCK_SLACK_SECONDS:
                candidates[index] = record
                break
    if not candidates:
        return list(jobs), len(records)
    # Each join says where ninja's clock started, in Unix time; the true ones agree.
    epochs = {index: record.time - jobs[index].start for index, record in candidates.items()}
    middle = statistics.median(epochs.values())
    joined = {
        i: r for i, r in candidates.items() if abs(epochs[i] - middle) <= JOIN_TOLERANCE_SECONDS
    }
    used = {id(record) for record in joined.values()}
    result = [replace(job, record=joined[i]) if i in joined else job for i, job in enumerate(jobs)]
    return result, sum(1 for record in records if id(record) not in used)


# -- loading (the only place that reads files) -------------------------------------------------


def load_build(paths: Sequence[str], *, build: int = -1) -> Build:
    """Read the ninja log (a file or a build directory holding one) and the FAST_NVCC_LOG files
    among ``paths``; return the jobs of build number ``build`` (1 the first, -1 the last)."""
    ninja_logs: list[str] = []
    fast_nvcc_logs: list[str] = []
    for path in paths or (".",):
        kind, file = _classify_path(path)
        (ninja_logs if kind == "ninja" else fast_nvcc_logs).append(file)
    if len(ninja_logs) > 1:
        raise AnalysisError(
            f"one .ninja_log at a time, not {len(ninja_logs)}: {', '.join(ninja_logs)}"
        )
    records = [record for path in fast_nvcc_logs for record in _read_fast_nvcc_log(path)]
    if ninja_logs:
        return _load_ninja_build(ninja_logs[0], records, tuple(fast_nvcc_logs), build=build)
    sessions = split_sessions(records)
    if not sessions:
        raise AnalysisError(f"{', '.join(fast_nvcc_logs)}: no compiles in the log")
    chosen = _choose(sessions, build, what=", ".join(fast_nvcc_logs))
    return Build(
        jobs=tuple(jobs_of_records(sessions[chosen])),
        fast_nvcc_logs=tuple(fast_nvcc_logs),
        index=chosen + 1,
        count=len(sessions),
        unjoined=len(records) - len(sessions[chosen]),
    )


def _load_ninja_build(
    path: str, records: list[CompileRecord], logs: tuple[str, ...], *, build: int
) -> Build:
    with _open_text(path) as handle:
        version, entries = parse_ninja_log(handle, name=path)
    builds = split_builds(entries)
    if not builds:
        raise AnalysisError(f"{path}: the log holds no build")
    chosen = _choose(builds, build, what=path)
    build_dir = os.path.dirname(os.path.realpath(path))
    jobs = build_jobs(builds[chosen])
    unjoined = 0
    if records:
        jobs, unjoined = join_records(jobs, records, build_dir=build_dir)
    return Build(
        jobs=tuple(jobs),
        ninja_log=path,
        ninja_version=version,
        build_dir=build_dir,
        fast_nvcc_logs=logs,
        index=chosen + 1,
        count=len(builds),
        unjoined=unjoined,
    )


def _choose(builds: Sequence[object], build: int, *, what: str) -> int:
    count = len(builds)
    if not (1 <= build <= count or -count <= build <= -1):
        raise AnalysisError(
            f"--build {build}: {what} holds {count} build{'s' if count != 1 else ''}"
        )
    return build - 1 if build > 0 else count + build


def _classify_path(path: str) -> tuple[str, str]:
    """('ninja' or 'fast_nvcc', the file): a build directory stands for its .ninja_log."""
    if os.path.isdir(path):
        log = os.path.join(path, ".ninja_log")
        if not os.path.isfile(log):
            raise AnalysisError(
                f"{path}: a directory without a .ninja_log (not a ninja build directory?)"
            )
        return "ninja", log
    with _open_text(path) as handle:
        first = handle.readline()
    if first.startswith(NINJA_HEADER):
        return "ninja", path
    if first.lstrip().startswith("{"):
        return "fast_nvcc", path
    if not first:
        raise AnalysisError(f"{path}: empty file")
    raise AnalysisError(f"{path}: neither a .ninja_log nor a FAST_NVCC_LOG (JSON lines)")


def _read_fast_nvcc_log(path: str) -> list[CompileRecord]:
    with _open_text(path) as handle:
        return list(parse_fast_nvcc_log(handle, name=path))


def _open_text(path: str):
    """open() for reading, OSError as one line; surrogateescape keeps odd bytes in paths."""
    try:
        return open(path, encoding="utf-8", errors="surrogateescape", newline="")
    except OSError as exc:
        raise AnalysisError(f"{path}: {exc.strerror or exc}") from None


# -- the analysis ------------------------------------------------------------------------------


def analyze(
    build: Build,
    *,
    slots: int | None = None,
    top: int = 10,
    interval: float | None = None,
    what_if: Sequence[WhatIfRule] = (),
) -> Analysis:
    jobs = build.jobs
    if not jobs:
        raise AnalysisError("the build holds no jobs")
    starts = sorted(job.start for job in jobs)
    ends = sorted(job.end for job in jobs)
    wall = ends[-1] - starts[0]
    durations = [job.seconds for job in jobs]
    peak = max_concurrency(starts, ends)
    used_slots = slots or max(1, peak)
    step = interval or nice_interval(wall)
    if wall / step > 100_000:
        raise AnalysisError(f"--interval {step:g} gives {wall / step:.0f} rows; take a larger one")
    what_if_result = (
        apply_what_if(jobs, what_if, slots=used_slots, build_dir=build.build_dir)
        if what_if
        else None
    )
    return Analysis(
        build=build,
        slots=used_slots,
        slots_given=slots is not None,
        max_concurrency=peak,
        wall=wall,
        job_seconds=sum(durations),
        bound=wall_bound(durations, slots=used_slots),
        interval=step,
        profile=tuple(sample_profile(starts, ends, interval=step)),
        long_poles=tuple(find_long_poles(jobs, slots=used_slots, top=top)),
        what_if=what_if_result,
        phases=sum_phases(build.records, by_arch=False),
        arch_phases=sum_phases(build.records, by_arch=True),
    )


def wall_bound(durations: Sequence[float], *, slots: int) -> Bound:
    """Independent jobs of these durations on ``slots`` slots: no schedule finishes before
    ``lower``, and list scheduling (start any waiting job when a slot frees) finishes by
    ``upper`` (Graham 1966).  Dependencies only raise the floor, which stays a floor."""
    if not durations:
        return Bound(0.0, 0.0)
    total, longest = sum(durations), max(durations)
    return Bound(max(longest, total / slots), (total - longest) / slots + longest)


def max_concurrency(starts: Sequence[float], ends: Sequence[float]) -> int:
    """The most jobs running at once; ``starts`` and ``ends`` sorted.  A job that ends when
    another starts does not overlap it (ninja starts the next job in the freed slot)."""
    peak = 0
    for index, start in enumerate(starts):
        # Jobs started up to this one (ties included), less those ended by now.
        running = bisect.bisect_right(starts, start, lo=index) - bisect.bisect_right(ends, start)
        peak = max(peak, running)
    return peak


def nice_interval(wall: float, rows: int = 20) -> float:
    """1, 2 or 5 times a power of ten, nearest (in ratio) to wall / rows."""
    if wall <= 0:
        return 1.0
    raw = wall / rows
    power = 10.0 ** math.floor(math.log10(raw))
    return min((m * power for m in (1, 2, 5, 10)), key=lambda c: abs(math.log(c / raw)))


def sample_profile(
    starts: Sequence[float], ends: Sequence[float], *, interval: float
) -> Iterator[ProfileRow]:
    """Jobs running at t = 0, interval, 2 * interval, ... (from the first start), and the mean
    number running until the next instant.  ``starts`` and ``ends`` sorted.

    The busy time up to T is sum(min(end, T)) - sum(min(start, T)); with prefix sums over the
    sorted times each instant costs two bisections, whatever the number of jobs.
    """
    origin, last = starts[0], ends[-1]
    start_sums = _prefix_sums(starts)
    end_sums = _prefix_sums(ends)

    def running(t: float) -> int:
        return bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)

    def busy(t: float) -> float:
        started, ended = bisect.bisect_right(starts, t), bisect.bisect_right(ends, t)
        return (end_sums[ended] + t * (len(ends) - ended)) - (
            start_sums[started] + t * (len(starts) - started)
        )

    count = max(1, math.ceil((last - origin) / interval - 1e-9))
    for row in range(count):
        t = origin + row * interval
        until = min(t + interval, last)
        mean = (busy(until) - busy(t)) / (until - t) if until > t else float(running(t))
        yield ProfileRow(t - origin, running(t), mean)


def _prefix_sums(values: Sequence[float]) -> list[float]:
    sums = [0.0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums


def find_long_poles(jobs: Sequence[Job], *, slots: int, top: int) -> Iterator[LongPole]:
    """The ``top`` longest jobs, each with the floor of the wall time were it to take 0 s: the
    next-longest job or the rest's share of the slots, whichever is larger."""
    longest = heapq.nlargest(max(top, 2), jobs, key=lambda job: job.seconds)
    total = sum(job.seconds for job in jobs)
    first = longest[0].seconds
    second = longest[1].seconds if len(longest) > 1 else 0.0
    for rank, job in enumerate(longest[:top]):
        others_longest = second if rank == 0 else first
        yield LongPole(job, max(others_longest, (total - job.seconds) / slots))


def apply_what_if(
    jobs: Sequence[Job], rules: Sequence[WhatIfRule], *, slots: int, build_dir: str | None = None
) -> WhatIf:
    """The bound with the jobs that match a rule at that rule's duration (the last matching rule
    wins), on the same slots."""
    matchers = [(os.path.isabs(rule.pattern), _matcher(rule.pattern)) for rule in rules]
    matched = [0] * len(rules)
    durations = []
    for job in jobs:
        seconds = job.seconds
        for index, (absolute, matches) in enumerate(matchers):
            if any(
                matches(path)
                for path in (_absolute_outputs(job, build_dir) if absolute else job.outputs)
            ):
                matched[index] += 1
                seconds = rules[index].seconds
        durations.append(seconds)
    return WhatIf(tuple(zip(rules, matched)), sum(durations), wall_bound(durations, slots=slots))


def _matcher(pattern: str):
    """A glob on the output path relative to the build directory, which may also match after
    any '/' ('activation/*' matches 'CMakeFiles/te.dir/activation/gelu.cu.o'); an absolute
    pattern is matched against absolute paths."""
    if os.path.isabs(pattern):
        regex = re.compile(fnmatch.translate(pattern))
    else:
        regex = re.compile(f"{fnmatch.translate(pattern)}|{fnmatch.translate('*/' + pattern)}")
    return lambda path: regex.match(path) is not None


def _absolute_outputs(job: Job, build_dir: str | None) -> Iterable[str]:
    if build_dir is None:
        return job.record.outputs if job.record is not None else job.outputs
    return (os.path.normpath(os.path.join(build_dir, output)) for output in job.outputs)


def sum_phases(records: Iterable[CompileRecord], *, by_arch: bool) -> tuple[PhaseTotal, ...]:
    """Step seconds summed per phase (the step's kind), or per phase and architecture (steps
    with an architecture only), largest first."""
    totals: dict[tuple[str, str | None], list[float]] = {}
    for record in records:
        for step in record.steps:
            if step.tool in BOOKKEEPING_TOOLS or step.state == "skipped":
                continue
            if by_arch and step.arch is None:
                continue
            total = totals.setdefault((step.kind, step.arch if by_arch else None), [0.0, 0.0, 0])
            total[0] += step.seconds
            total[1] += step.cpu_seconds or 0.0
            total[2] += 1
    phases = (
        PhaseTotal(kind, arch, s, cpu, int(n)) for (kind, arch), (s, cpu, n) in totals.items()
    )
    return tuple(sorted(phases, key=lambda p: (-p.seconds, p.kind, p.arch or "")))


# -- the trace ---------------------------------------------------------------------------------


def assign_slots(jobs: Sequence[Job]) -> list[int]:
    """A slot (lane) per job, greedily by start time: the lowest slot free by then, so the
    lanes number the most jobs that ran at once, as in ninjatracing's ``Threads.alloc``."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].start, -jobs[i].end))
    busy: list[tuple[float, int]] = []  # (end, slot)
    free: list[int] = []
    slots = [0] * len(jobs)
    for index in order:
        job = jobs[index]
        while busy and busy[0][0] <= job.start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        slot = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (job.end, slot))
        slots[index] = slot
    return slots


def assign_step_lanes(steps: Sequence[Step]) -> list[int]:
    """Lanes for one compile's steps, which overlap: lane 0 nests inside the job's span on the
    job's own lane, the others get lanes of their own below it."""
    ends: list[float] = []
    lanes = []
    for step in steps:
        start = step.start or 0.0
        lane = next((i for i, end in enumerate(ends) if end <= start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = step.end or start
        lanes.append(lane)
    return lanes


def trace_events(build: Build, *, pid: int = 1, name: str = "build") -> list[TraceEvent]:
    """Chrome Trace Event Format: one lane (tid) per job slot; a joined compile's fast_nvcc steps
    nest inside its job on the same lane, and those that overlap go to lanes just below."""
    jobs = build.jobs
    slots = assign_slots(jobs)
    slot_count = max(slots, default=-1) + 1
    steps = {
        index: sorted((s for s in job.record.steps if _ran(s)), key=lambda s: s.start or 0.0)
        for index, job in enumerate(jobs)
        if job.record is not None
    }
    lanes = {index: assign_step_lanes(ran) for index, ran in steps.items()}
    extra = max((max(lane, default=0) for lane in lanes.values()), default=0)

    def tid_of(slot: int, lane: int) -> int:
        return slot + 1 if lane == 0 else slot_count + 1 + slot * extra + lane - 1

    def sort_index(slot: int, lane: int) -> int:  # each slot's step lanes right below it
        return slot * (extra + 1) + lane

    events: list[TraceEvent] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
    ]
    used = {(slots[i], lane) for i, lanes_of_job in lanes.items() for lane in lanes_of_job}
    for slot, lane in sorted(used | {(slot, 0) for slot in range(slot_count)}):
        label = f"slot {slot + 1}" if lane == 0 else f"slot {slot + 1} steps {lane + 1}"
        events += _lane_names(pid, tid_of(slot, lane), label, sort_index(slot, lane))
    for index, job in enumerate(jobs):
        # Whole microseconds, so that a step clamped to its job's span nests exactly.
        ts, end = round(job.start * 1e6), round(job.end * 1e6)
        args: dict[str, Any] = {"outputs": list(job.outputs)}
        if job.record is not None:
            args.update(wall_seconds=job.record.wall_seconds, exit_code=job.record.exit_code)
        events.append(_span(job.name, "job", ts, end, pid, slots[index] + 1, args))
        origin = ts + round(job.steps_origin * 1e6)
        for step, lane in zip(steps.get(index, ()), lanes.get(index, ())):
            step_ts = min(max(origin + round((step.start or 0.0) * 1e6), ts), end)
            step_end = min(max(origin + round((step.end or 0.0) * 1e6), step_ts), end)
            label = f"{step.tool} {step.arch}" if step.arch else step.tool
            args = {"job": job.name, "state": step.state, "cpu_seconds": step.cpu_seconds}
            events.append(
                _span(label, step.kind, step_ts, step_end, pid, tid_of(slots[index], lane), args)
            )
    return events


def _span(
    name: str, cat: str, ts: int, end: int, pid: int, tid: int, args: dict[str, Any]
) -> TraceEvent:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": end - ts,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _lane_names(pid: int, tid: int, label: str, sort_index: int) -> list[TraceEvent]:
    return [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}},
        {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": sort_index},
        },
    ]


def _ran(step: Step) -> bool:
    return step.start is not None and step.end is not None and step.tool not in BOOKKEEPING_TOOLS


# -- the report: text, markdown, json ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Table:
    """One table of the report, rendered as aligned text or as Markdown."""

    title: str | None  # None: continues the previous table's section
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str  # 'l' or 'r' per column
    keys: bool = False  # a list of measures: its header is left out of the text


def format_text(analysis: Analysis) -> str:
    lines = [f"fast_nvcc analyze: {_source_line(analysis.build)}"]
    for table in report_tables(analysis):
        if table.title:
            lines += ["", table.title]
        lines += _text_table(table)
    return "\n".join(lines) + "\n"


def format_markdown(analysis: Analysis) -> str:
    lines = [f"# fast_nvcc analyze: {_source_line(analysis.build)}"]
    for table in report_tables(analysis):
        lines.append("")
        if table.title:
            lines += [f"## {table.title[0].upper()}{table.title[1:]}", ""]
        lines += _markdown_table(table)
    return "\n".join(lines) + "\n"


def report_tables(a: Analysis) -> Iterator[Table]:
    slots_note = (
        f"-j {a.slots}" if a.slots_given else "the most jobs seen running at once; -j N sets it"
    )
    yield Table(
        None,
        ("measure", "value"),
        (
            ("jobs", _jobs_note(a.build)),
            ("wall", f"{_seconds(a.wall)} (first job's start to last job's end)"),
            ("sum of job times", _seconds(a.job_seconds)),
            (
                "effective parallelism",
                f"{a.parallelism:.2f} ({a.parallelism / a.slots:.0%} of {a.slots} slots)",
            ),
            ("slots", f"{a.slots} ({slots_note})"),
            (
                "wall floor",
                f"{_seconds(a.bound.lower)} = max(longest job, sum / slots) (docs/analyze.md)",
            ),
            (
                "list-scheduling bound",
                f"{_seconds(a.bound.upper)} = (sum - longest) / slots + longest",
            ),
        ),
        "ll",
        keys=True,
    )
    scale = 40 / max(a.slots, a.max_concurrency, 1)
    yield Table(
        f"concurrency (jobs running at each instant, and the mean until the next, every {a.interval:g} s)",
        ("t (s)", "running", "mean", ""),
        tuple(
            (f"{r.time:.2f}", str(r.running), f"{r.mean:.1f}", "#" * round(r.running * scale))
            for r in a.profile
        ),
        "rrrl",
    )
    with_steps = any(p.job.record is not None for p in a.long_poles)
    yield Table(
        f"long poles (top {len(a.long_poles)}; floor if 0 s: the wall floor were that job to take no time)",
        ("#", "start (s)", "end (s)", "elapsed (s)", "floor if 0 s", "floor drop")
        + (("longest step",) if with_steps else ()) + ("output",),
        tuple(
            (str(rank), f"{p.job.start:.2f}", f"{p.job.end:.2f}", f"{p.job.seconds:.2f}", f"{p.floor_without:.2f}",
             f"{a.bound.lower - p.floor_without:.2f}")
            + ((_longest_step(p.job),) if with_steps else ()) + (p.job.name,)
            for rank, p in enumerate(a.long_poles, start=1)
        ),
        "rrrrrr" + ("ll" if with_steps else "l"),
    )  # fmt: skip
    if a.what_if is not None:
        w = a.what_if
        yield Table(
            f"what-if (same {a.slots} slots)",
            ("pattern", "seconds", "jobs matched"),
            tuple((rule.pattern, f"{rule.seconds:g}", str(n)) for rule, n in w.rules),
            "lrr",
        )
        yield Table(
            None,
            ("", "measured", "what-if"),
            (
                ("sum of job times", _seconds(a.job_seconds), _seconds(w.job_seconds)),
                ("wall floor", _seconds(a.bound.lower), _seconds(w.bound.lower)),
                ("list-scheduling bound", _seconds(a.bound.upper), _seconds(w.bound.upper)),
                ("measured wall", _seconds(a.wall), ""),
            ),
            "lrr",
        )
    if a.phases:
        yield _phase_table(
            f"time per phase (fast_nvcc steps of {len(a.build.records)} compiles)", a.phases
        )
    if a.arch_phases:
        yield _phase_table("time per phase and architecture", a.arch_phases)


def _phase_table(title: str, phases: Sequence[PhaseTotal]) -> Table:
    total = sum(p.seconds for p in phases) or 1.0
    with_arch = any(p.arch for p in phases)
    return Table(
        title,
        ("phase",)
        + (("arch",) if with_arch else ())
        + ("seconds", "cpu seconds", "steps", "share"),
        tuple(
            (p.kind,)
            + ((p.arch or "",) if with_arch else ())
            + (f"{p.seconds:.2f}", f"{p.cpu_seconds:.2f}", str(p.steps), f"{p.seconds / total:.0%}")
            for p in phases
        ),
        ("ll" if with_arch else "l") + "rrrr",
    )


def _source_line(build: Build) -> str:
    parts = []
    if build.ninja_log:
        parts.append(
            f"{build.ninja_log} (ninja log v{build.ninja_version}, build {build.index} of {build.count})"
        )
        if build.fast_nvcc_logs:
            parts.append(f"joined with {', '.join(build.fast_nvcc_logs)}")
    else:
        parts.append(f"{', '.join(build.fast_nvcc_logs)} (build {build.index} of {build.count})")
    return " ".join(parts)


def _jobs_note(build: Build) -> str:
    others = f"{build.unjoined} fast_nvcc record{'' if build.unjoined == 1 else 's'}"
    if build.ninja_log and build.fast_nvcc_logs:
        return f"{len(build.jobs)} ({len(build.records)} with fast_nvcc steps; {others} not in this build)"
    if build.ninja_log:
        return str(len(build.jobs))
    return f"{len(build.jobs)} fast_nvcc compiles ({others} of other builds)"


def _longest_step(job: Job) -> str:
    if job.record is None or not job.record.steps:
        return ""
    steps = [s for s in job.record.steps if s.tool not in BOOKKEEPING_TOOLS]
    if not steps:
        return ""
    step = max(steps, key=lambda s: s.seconds)
    return f"{step.tool}{' ' + step.arch if step.arch else ''} {step.seconds:.2f} s"


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.2f} s"
    minutes, seconds = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"
    return f"{value:.2f} s ({clock})"


def _text_table(table: Table) -> Iterator[str]:
    rows = table.rows if table.keys else (table.headers, *table.rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.align))]
    for row in rows:
        cells = (
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, table.align)
        )
        yield ("  " + "  ".join(cells)).rstrip()


def _markdown_table(table: Table) -> Iterator[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    yield line(table.headers)
    yield "|" + "|".join("---:" if a == "r" else "---" for a in table.align) + "|"
    yield from (line(row) for row in table.rows)


class PhaseJson(TypedDict):
    kind: str
    arch: str | None
    seconds: float
    cpu_seconds: float
    steps: int


class LongPoleJson(TypedDict):
    outputs: list[str]
    start: float
    end: float
    seconds: float
    floor_without_seconds: float
    floor_drop_seconds: float
    fast_nvcc: bool


class CompileJson(TypedDict):
    outputs: list[str]
    start: float
    end: float
    seconds: float
    fast_nvcc_wall_seconds: float
    exit_code: int | None
    mode: str
    steps: int
    phases: dict[str, float]


class AnalysisJson(TypedDict):
    """``--format json``; documented in docs/analyze.md."""

    version: int
    sources: dict[str, Any]
    build: dict[str, int]
    jobs: int
    joined: int
    unjoined_records: int
    slots: int
    slots_source: str
    max_concurrency: int
    wall_seconds: float
    job_seconds: float
    parallelism: float
    parallelism_share: float
    bound: dict[str, float]
    profile: dict[str, Any]
    long_poles: list[LongPoleJson]
    what_if: dict[str, Any] | None
    phases: list[PhaseJson]
    phases_by_arch: list[PhaseJson]
    compiles: list[CompileJson]


def json_report(a: Analysis) -> AnalysisJson:
    build = a.build
    what_if = None
    if a.what_if is not None:
        what_if = {
            "rules": [
                {"pattern": r.pattern, "seconds": r.seconds, "matched": n}
                for r, n in a.what_if.rules
            ],
            "job_seconds": _r(a.what_if.job_seconds),
            "lower_seconds": _r(a.what_if.bound.lower),
            "upper_seconds": _r(a.what_if.bound.upper),
        }
    return {
        "version": JSON_SCHEMA_VERSION,
        "sources": {
            "ninja_log": build.ninja_log,
            "ninja_log_version": build.ninja_version,
            "build_dir": build.build_dir,
            "fast_nvcc_logs": list(build.fast_nvcc_logs),
        },
        "build": {"index": build.index, "count": build.count},
        "jobs": len(build.jobs),
        "joined": len(build.records) if build.ninja_log else 0,
        "unjoined_records": build.unjoined,
        "slots": a.slots,
        "slots_source": "option" if a.slots_given else "max_concurrency",
        "max_concurrency": a.max_concurrency,
        "wall_seconds": _r(a.wall),
        "job_seconds": _r(a.job_seconds),
        "parallelism": _r(a.parallelism),
        "parallelism_share": _r(a.parallelism / a.slots),
        "bound": {"lower_seconds": _r(a.bound.lower), "upper_seconds": _r(a.bound.upper)},
        "profile": {
            "interval_seconds": a.interval,
            "rows": [
                {"time": _r(r.time), "running": r.running, "mean": _r(r.mean)} for r in a.profile
            ],
        },
        "long_poles": [
            {
                "outputs": list(p.job.outputs),
                "start": _r(p.job.start),
                "end": _r(p.job.end),
                "seconds": _r(p.job.seconds),
                "floor_without_seconds": _r(p.floor_without),
                "floor_drop_seconds": _r(a.bound.lower - p.floor_without),
                "fast_nvcc": p.job.record is not None,
            }
            for p in a.long_poles
        ],
        "what_if": what_if,
        "phases": [_phase_json(p) for p in a.phases],
        "phases_by_arch": [_phase_json(p) for p in a.arch_phases],
        "compiles": [_compile_json(job) for job in build.jobs if job.record is not None],
    }


def _phase_json(p: PhaseTotal) -> PhaseJson:
    return {
        "kind": p.kind,
        "arch": p.arch,
        "seconds": _r(p.seconds),
        "cpu_seconds": _r(p.cpu_seconds),
        "steps": p.steps,
    }


def _compile_json(job: Job) -> CompileJson:
    record = job.record
    assert record is not None
    return {
        "outputs": list(job.outputs),
        "start": _r(job.start),
        "end": _r(job.end),
        "seconds": _r(job.seconds),
        "fast_nvcc_wall_seconds": _r(record.wall_seconds),
        "exit_code": record.exit_code,
        "mode": record.mode,
        "steps": sum(1 for s in record.steps if s.tool not in BOOKKEEPING_TOOLS),
        "phases": {p.kind: _r(p.seconds) for p in sum_phases((record,), by_arch=False)},
    }


def _r(value: float) -> float:
    return round(value, 6)


# -- writing files -----------------------------------------------------------------------------


def check_plot_path(path: str) -> None:
    """Fail before the analysis when --plot cannot be drawn."""
    ext = _extension(path)
    if ext not in PLOT_FORMATS:
        raise AnalysisError(f"--plot {path}: use {', '.join('.' + f for f in PLOT_FORMATS)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AnalysisError("--plot needs matplotlib (pip install 'fast_nvcc[plot]')") from None


def concurrency_steps(jobs: Sequence[Job]) -> tuple[list[float], list[int]]:
    """The exact concurrency curve: each instant a job starts or ends, and how many run after it."""
    events = sorted([(job.start, 1) for job in jobs] + [(job.end, -1) for job in jobs])
    times: list[float] = []
    counts: list[int] = []
    running = 0
    for time, delta in events:
        running += delta
        if times and times[-1] == time:
            counts[-1] = running
        else:
            times.append(time)
            counts.append(running)
    return times, counts


def write_plot(analysis: Analysis, path: str) -> None:
    # A Figure without pyplot draws with Agg (or the SVG/PDF backends) and touches no global
    # backend setting.
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    times, counts = concurrency_steps(analysis.build.jobs)
    figure = Figure(figsize=(10, 4), layout="constrained")
    axes = figure.add_subplot()
    axes.fill_between(times, counts, step="post", alpha=0.35, linewidth=0)
    axes.step(times, counts, where="post", linewidth=0.8, label="jobs running")
    label = f"-j {analysis.slots}" if analysis.slots_given else f"most at once ({analysis.slots})"
    axes.axhline(analysis.slots, color="tab:red", linestyle="--", linewidth=1, label=label)
    axes.set_xlim(0, max(analysis.wall, 1e-3))
    axes.set_ylim(0, max(analysis.slots, analysis.max_concurrency) * 1.1 + 0.5)
    axes.set_xlabel("seconds since the first job started")
    axes.set_ylabel("jobs running")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_title(
        f"{len(analysis.build.jobs)} jobs, wall {analysis.wall:.1f} s, "
        f"sum {analysis.job_seconds:.1f} s, parallelism {analysis.parallelism:.1f}"
    )
    axes.legend(loc="upper right")
    _write_atomically(path, lambda tmp: figure.savefig(tmp, format=_extension(path)))


def write_trace(build: Build, path: str) -> None:
    name = f"ninja: {build.build_dir}" if build.build_dir else "fast_nvcc compiles"
    document = {"traceEvents": trace_events(build, name=name), "displayTimeUnit": "ms"}
    text = json.dumps(document, separators=(",", ":"))
    _write_atomically(path, lambda tmp: _write_text(tmp, text))


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _write_atomically(path: str, write) -> None:
    try:
        replace_atomically(path, write)
    except OSError as exc:
        raise AnalysisError(f"cannot write {path}: {exc.strerror or exc}") from None


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower()


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _describe(exc: Exception) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else str(exc)


# -- the command line --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise AnalysisError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Where a build's time went: wall time, parallelism, concurrency over time, long poles, "
            "a what-if on the wall-time bound, and (with FAST_NVCC_LOG) time per nvcc phase and "
            "architecture.  PATHS: a .ninja_log or a build directory holding one, and/or "
            "FAST_NVCC_LOG files (default: the current directory)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help=".ninja_log, build directory, or FAST_NVCC_LOG (.jsonl)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        metavar="N",
        help="the build's job slots (default: the most jobs seen running at once)",
    )
    parser.add_argument(
        "--top",
        type=positive_int,
        default=10,
        metavar="N",
        help="how many long poles to list (10)",
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        metavar="SECONDS",
        help="time between rows of the concurrency profile (default: about 20 rows)",
    )
    parser.add_argument(
        "--what-if",
        dest="what_if",
        action="append",
        type=_what_if_rule,
        default=[],
        metavar="PATTERN=SECONDS",
        help="recompute the wall-time bound with the jobs whose output matches the glob at SECONDS "
        "(repeatable; the last matching rule wins)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="the report's format (text)"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png|svg", help="draw the jobs running over time (needs matplotlib)"
    )
    parser.add_argument(
        "--trace", metavar="FILE.json", help="the build as a Chrome trace, one lane per job slot"
    )
    parser.add_argument(
        "--build",
        type=_build_index,
        default=-1,
        metavar="N",
        help="which build of the log: 1 the first, -1 the last (default)",
    )
    return parser


def parse_options(argv: Sequence[str]) -> Options:
    namespace = build_parser().parse_args(list(argv))
    return Options(
        paths=tuple(namespace.paths),
        jobs=namespace.jobs,
        top=namespace.top,
        interval=namespace.interval,
        what_if=tuple(namespace.what_if),
        format=namespace.format,
        plot=namespace.plot,
        trace=namespace.trace,
        build=namespace.build,
    )


def run(options: Options) -> str:
    """Do what the options ask; return the report to print."""
    if options.plot:
        check_plot_path(options.plot)
    build = load_build(options.paths, build=options.build)
    analysis = analyze(
        build,
        slots=options.jobs,
        top=options.top,
        interval=options.interval,
        what_if=options.what_if,
    )
    if options.plot:
        write_plot(analysis, options.plot)
    if options.trace:
        write_trace(build, options.trace)
    if options.format == "json":
        return json.dumps(json_report(analysis), indent=1) + "\n"
    if options.format == "markdown":
        return format_markdown(analysis)
    return format_text(analysis)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_options(sys.argv[1:] if argv is None else argv)
        report = run(options)
    except (AnalysisError, OSError) as exc:
        print(f"fast_nvcc: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    sys.stdout.write(report)
    return 0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _build_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("builds count from 1 (the first) or -1 (the last)")
    return value


def _what_if_rule(text: str) -> WhatIfRule:
    pattern, sep, seconds = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"{text!r}: use PATTERN=SECONDS, e.g. 'activation/*=0'")
    try:
        value = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {seconds!r} is not a number of seconds"
        ) from None
    if value < 0 or math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be 0 or more")
    return WhatIfRule(pattern, value)
