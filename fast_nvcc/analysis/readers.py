"""Parsing: the logs' text to jobs.  Parse ninja's ``.ninja_log`` (``parse_ninja_log`` ->
``split_builds`` -> ``build_jobs``) and FAST_NVCC_LOG (``parse_fast_nvcc_log`` ->
``split_sessions`` / ``jobs_of_records``), and join the two (``join_records``).  Lines in,
records out: no file is opened here (``load.py`` does that)."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from .records import AnalysisError, CompileRecord, Job, NinjaEntry, Step, ToolCosts

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
    """The records of a FAST_NVCC_LOG (docs/options.md, "The build log"), in file order."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise AnalysisError(f"{name}:{number}: not a JSON line") from None
        try:
            yield record_of(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnalysisError(
                f"{name}:{number}: not a FAST_NVCC_LOG record ({_describe(exc)})"
            ) from None


def record_of(data: dict[str, Any]) -> CompileRecord:
    """One FAST_NVCC_LOG line, parsed (KeyError, TypeError, ValueError where it is not one)."""
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
            command=bool(step.get("command", True)),
            remote=step.get("remote"),
            over_pool=step.get("over_pool"),
            memory_wait=_float_or_none(step.get("memory_wait")) or 0.0,
            memory_stopped=_float_or_none(step.get("memory_stopped")) or 0.0,
            yielded=_float_or_none(step.get("yielded")) or 0.0,
            oom_rerun=bool(step.get("oom_rerun", False)),
            guess_failed=str(step.get("guess_failed", "")),
            guess_lost=_float_or_none(step.get("guess_lost")) or 0.0,
            cores=int(step.get("cores") or 0),
            serial_seconds=_float_or_none(step.get("serial_seconds")),
            cores_idle=_float_or_none(step.get("cores_idle_seconds")),
            critical=bool(step.get("critical", False)),
            wait=_float_or_none(step.get("wait")) or 0.0,
            cores_at=tuple((float(when), int(cores)) for when, cores in step.get("cores_at") or ()),
            stops=tuple((float(since), float(until)) for since, until in step.get("stops_at") or ()),
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
        first_step_wait=_float_or_none(data.get("first_step_wait_seconds")),
        slot_wait=_float_or_none(data.get("slot_wait_seconds")),
        memory_wait=_float_or_none(data.get("memory_wait_seconds")),
        pool=int(data["jobs"]) if isinstance(data.get("jobs"), int) and data["jobs"] > 0 else None,
        device_trace=_device_trace_of(data.get("device_trace")),
        own_cpu=_float_or_none(data.get("own_cpu_seconds")),
        reason=str(data.get("reason") or ""),
    )


def _device_trace_of(value: Any) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return None
    return str(value["file"]), str(value["id"])


def parse_device_sidecar(lines: Iterable[str], *, name: str) -> dict[str, tuple[ToolCosts, ...]]:
    """The lines of a --device-trace sidecar (``<log>.device.jsonl``), by record id."""
    found = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            found[str(data["id"])] = tuple(_tool_costs_of(step) for step in data["steps"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AnalysisError(f"{name}:{number}: not a device trace line ({_describe(exc)})") from None
    return found


def _tool_costs_of(step: dict[str, Any]) -> ToolCosts:
    def pairs(table: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        return tuple((str(k), v / 1e6) for k, v in table.items())

    return ToolCosts(
        tool=str(step["tool"]),
        arch=step.get("arch"),
        phases=pairs(step.get("phases", {})),
        templates=tuple((str(k), v[0] / 1e6, int(v[1])) for k, v in step.get("templates", {}).items()),
        headers=pairs(step.get("headers", {})),
        optimize=pairs(step.get("optimize", {})),
        codegen=pairs(step.get("codegen", {})),
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
    jobs: Sequence[Job],
    records: Iterable[CompileRecord],
    *,
    build_dir: str,
    before: float = math.inf,
) -> tuple[list[Job], int]:
    """Attach to each ninja job the fast_nvcc record that compiled its output; also return how
    many records were left over (compiles of other builds, or not run by this ninja).

    Records name absolute outputs and ninja names them relative to the build directory, so the
    join is on the absolute path.  Of several records for one output, the newest that started
    ``before`` is taken (``load.py`` passes the start of the next build's first joined record, so
    that a build other than the last finds its own records, not a later rebuild's), and kept only
    if it fits: it ran no longer than the job, and the gap between ninja starting the job and
    fast_nvcc starting its clock agrees with the other joins (JOIN_TOLERANCE_SECONDS).
    """
    records = list(records)
    newest: dict[str, CompileRecord] = {}
    for record in records:
        if record.time >= before:
            continue
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


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _describe(exc: Exception) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
